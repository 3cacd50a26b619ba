//! README.md is the user's manual, so it is checked like code: at most 30 KB; every `ufo ...` command in
//! its shell blocks names a real subcommand with real flags (read from `ufo <subcommand> --help`); and
//! every flag and environment variable in the configuration tables (docs/configuration.md) exists in that
//! binary's `--help`; every `curl` line runs against the services without an error (tests/up.rs runs the
//! `ufo prune` line against `ufo up --admin-key`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap()
}

/// The text of `program args... --help`.
fn help(program: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {args:?} --help failed: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn long_flags(text: &str) -> BTreeSet<String> {
    text.split(|c: char| {
        c.is_whitespace() || matches!(c, ',' | '=' | '<' | '[' | '(' | ')' | '`' | '/')
    })
    .filter(|t| t.starts_with("--") && t.len() > 2)
    .map(|t| t.trim_end_matches(['.', ':', ';']).to_owned())
    .collect()
}

/// Lines of the README's shell code blocks.
fn shell_lines(readme: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut in_shell = false;
    let mut joined = String::new();
    for line in readme.lines() {
        if let Some(lang) = line.strip_prefix("```") {
            in_shell = !in_shell && (lang == "sh" || lang == "bash");
            continue;
        }
        if !in_shell {
            continue;
        }
        let code = line.split(" #").next().unwrap_or_default();
        if code.trim_start().starts_with('#') {
            continue;
        }
        joined.push_str(code.trim_end_matches('\\'));
        if !code.trim_end().ends_with('\\') {
            lines.push(std::mem::take(&mut joined));
        }
    }
    lines
}

/// The commands of the README's shell code blocks as bash reads them: a line ending in `\\` or inside a
/// single-quoted string goes on in the next one; comments (` #` outside quotes) are dropped.
fn shell_commands(readme: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut in_shell = false;
    let mut joined = String::new();
    for line in readme.lines() {
        if let Some(lang) = line.strip_prefix("```") {
            in_shell = !in_shell && (lang == "sh" || lang == "bash");
            continue;
        }
        if !in_shell {
            continue;
        }
        let quoted = |text: &str| text.matches('\'').count() % 2 == 1;
        let mut code = line;
        if !quoted(&joined) {
            if code.trim_start().starts_with('#') {
                continue;
            }
            if let Some(at) = code.find(" #").filter(|&at| !quoted(&code[..at])) {
                code = &code[..at];
            }
        }
        if code.trim_end().ends_with('\\') {
            joined.push_str(code.trim_end().trim_end_matches('\\'));
            continue;
        }
        joined.push_str(code);
        if quoted(&joined) {
            joined.push('\n');
        } else {
            commands.push(std::mem::take(&mut joined));
        }
    }
    commands
}

#[test]
fn the_readme_is_a_manual_of_at_most_30_kb() {
    let size = readme().len();
    assert!(
        size <= 30 * 1024,
        "README.md is {size} bytes; the limit is 30 KB"
    );
}

/// README names exactly the RPCs `ufo.v1.AgentService` offers (and says the rest is REST only).
#[test]
fn the_readme_lists_the_grpc_operations_the_proto_offers() {
    let proto = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto/ufo/v1/agent.proto"),
    )
    .unwrap();
    let service = proto
        .split("service AgentService")
        .nth(1)
        .and_then(|s| s.split('}').next())
        .unwrap();
    let rpcs: BTreeSet<String> = service
        .lines()
        .filter_map(|l| l.trim().strip_prefix("rpc "))
        .map(|l| l.split('(').next().unwrap().trim().to_owned())
        .collect();
    assert!(rpcs.len() >= 7, "{rpcs:?}");
    let text = readme();
    let sentence = text
        .split("the task cycle over **gRPC**")
        .nth(1)
        .and_then(|s| s.split("REST only").next())
        .expect("README says which operations gRPC offers");
    let listed: BTreeSet<String> = sentence
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.chars().next().is_some_and(char::is_uppercase) && !w.contains('.'))
        .map(str::to_owned)
        .collect();
    assert_eq!(listed, rpcs, "README's gRPC list against agent.proto");
}

#[test]
fn every_ufo_command_in_the_readme_exists_with_its_flags() {
    let ufo = Path::new(env!("CARGO_BIN_EXE_ufo"));
    let top = help(ufo, &[]);
    let mut checked = 0;
    let mut seen_subcommands = BTreeSet::new();
    for line in shell_lines(&readme()) {
        for part in line.split(['&', ';', '|']) {
            let words: Vec<&str> = part.split_whitespace().collect();
            let Some(at) = words
                .iter()
                .position(|w| *w == "ufo" || w.ends_with("/ufo"))
            else {
                continue;
            };
            // Global flags (with their values) may come before the subcommand.
            let mut rest = words[at + 1..].iter();
            let mut subcommand = None;
            while let Some(w) = rest.next() {
                if w.starts_with("--") {
                    assert!(
                        top.contains(w.split('=').next().unwrap()),
                        "`ufo {w}` is not a global flag:\n{line}"
                    );
                    rest.next();
                    continue;
                }
                subcommand = Some(*w);
                break;
            }
            let Some(subcommand) = subcommand else {
                continue;
            };
            assert!(
                top.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{subcommand} "))),
                "`ufo {subcommand}` is not a subcommand (README line: {line})"
            );
            let mut sub_help = help(ufo, &[subcommand]);
            let mut rest: Vec<&str> = rest.copied().collect();
            // A nested subcommand (`ufo knowledge add`): its own flags.
            if let Some(nested) = rest.first().copied()
                && sub_help.contains("Commands:")
                && sub_help
                    .lines()
                    .any(|l| l.trim_start().starts_with(&format!("{nested} ")))
            {
                sub_help = help(ufo, &[subcommand, nested]);
                rest.remove(0);
            }
            let known = long_flags(&sub_help);
            for flag in long_flags(&rest.join(" ")) {
                assert!(
                    known.contains(&flag),
                    "`ufo {subcommand}` has no flag {flag} (README line: {line}); it has {known:?}"
                );
            }
            seen_subcommands.insert(subcommand.to_owned());
            checked += 1;
        }
    }
    // The quick start and the CLI section: every subcommand appears and was checked.
    for sub in [
        "up",
        "doctor",
        "run",
        "tasks",
        "show",
        "watch",
        "answer",
        "confirm",
        "request",
        "cancel",
        "screenshot",
        "health",
    ] {
        assert!(
            seen_subcommands.contains(sub),
            "the README shows no `ufo {sub}` ({seen_subcommands:?})"
        );
    }
    assert!(checked >= 15, "only {checked} ufo commands found");
}

#[test]
fn every_flag_and_variable_in_the_configuration_tables_exists() {
    // The tables live in docs/configuration.md; README links there.
    let readme = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md"),
    )
    .unwrap();
    let ufo = Path::new(env!("CARGO_BIN_EXE_ufo")).to_owned();
    let binaries: BTreeMap<&str, (std::path::PathBuf, Vec<&str>)> = BTreeMap::from([
        ("`ufo up`", (ufo.clone(), vec!["up"])),
        ("`ufo mcp`", (ufo.clone(), vec!["mcp"])),
        (
            "`ufo-agent`",
            (ufo_testkit::workspace_binary("ufo-agent").unwrap(), vec![]),
        ),
        (
            "`ufo-session`",
            (
                ufo_testkit::workspace_binary("ufo-session").unwrap(),
                vec![],
            ),
        ),
        (
            "`ufo-executor`",
            (
                ufo_testkit::workspace_binary("ufo-executor").unwrap(),
                vec![],
            ),
        ),
    ]);
    let mut current: Option<String> = None;
    let mut rows = 0;
    for line in readme.lines() {
        if let Some(title) = line.strip_prefix("**").and_then(|l| l.split("**").next()) {
            current = binaries.contains_key(title).then(|| title.to_owned());
            continue;
        }
        let Some(name) = &current else { continue };
        if !line.starts_with("| `") {
            continue;
        }
        let (program, args) = &binaries[name.as_str()];
        let text = help(program, args);
        let cells: Vec<&str> = line.split('|').collect();
        for flag in long_flags(cells[1]) {
            assert!(
                text.contains(&flag),
                "{name} has no flag {flag} (README row: {line})"
            );
        }
        for env in cells[2]
            .split(['`', '/', ' '])
            .filter(|w| w.starts_with("UFO_"))
        {
            assert!(
                text.contains(&format!("env: {env}")),
                "{name} does not read {env} (README row: {line})"
            );
        }
        rows += 1;
    }
    assert!(rows >= 25, "only {rows} configuration rows checked");
}

/// The README's API lines (`curl ...`), each run by bash as printed against real services: `ufo-session`,
/// `ufo-executor` on a private Xvfb desktop and `ufo-agent` with a scripted OpenAI-compatible model, in
/// the order a task makes them meaningful (answer a question, reject a held action, follow up, cancel).
/// Every line must succeed: an error body (`{"code": ...}`) fails the test with the line.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_curl_line_of_the_readme_runs_against_the_services() {
    use serde_json::{Value, json};
    use std::time::Duration;
    use ufo_agent::testing::ScriptedLlm;
    use ufo_executor::testing::Desktop;
    use ufo_testkit::Cluster;

    let host = |status: &str, extra: Value| {
        let mut v = json!({"observation": "the desktop", "thought": "think", "status": status,
                           "plan": []});
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    let llm = ScriptedLlm::start().await.unwrap();
    // Round 1: ask (q1-1), then hold a function (h2), then finish; round 2 (the follow-up): ask again.
    llm.push_json(&host("PENDING", json!({"questions": ["Which file?"]})));
    llm.push_json(&host(
        "CONFIRM",
        json!({"function": "launch_application", "arguments": {"name": "mousepad"},
               "comment": "opens an editor"}),
    ));
    llm.push_json(&host(
        "FINISH",
        json!({"result": "done", "comment": "done"}),
    ));
    llm.push_json(&host("PENDING", json!({"questions": ["Which name?"]})));
    let desktop = Desktop::start(800, 600).await.unwrap();
    let cluster = Cluster::builder()
        .local_executor(desktop.env())
        .llm_base_url(llm.base_url())
        .agent_args(["--claim-interval-ms", "50", "--llm-max-retries", "0"])
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();

    let lines: Vec<String> = shell_commands(&readme())
        .into_iter()
        .map(|l| l.trim().to_owned())
        .filter(|l| l.starts_with("curl "))
        .collect();
    let mut ran = BTreeSet::new();
    let run = |needle: &str, id: &str| {
        let line = lines
            .iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no README curl line with {needle:?}: {lines:#?}"))
            .clone();
        let output = std::process::Command::new("bash")
            .args(["-c", &line])
            .env("UFO", &cluster.rest_url)
            .env("KEY", &cluster.api_key)
            .env("ID", id)
            .current_dir(dir.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{line}\n{text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        if let Ok(body) = serde_json::from_str::<Value>(&text) {
            assert!(
                body.get("code").is_none(),
                "README line failed:\n{line}\n{body}"
            );
        }
        (line, text)
    };
    let task = |id: &str| {
        let (_, text) = run("$UFO/v1/tasks/$ID -H", id);
        serde_json::from_str::<Value>(&text).unwrap()
    };
    let wait_for = |what: &str, id: &str, check: &dyn Fn(&Value) -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let t = task(id);
            if check(&t) {
                return t;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: {t}\n{}",
                cluster.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    let (line, created) = run("-X POST $UFO/v1/tasks -H", "");
    ran.insert(line);
    let id = serde_json::from_str::<Value>(&created).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The step that asks is recorded a moment before the runner parks the task: wait for both.
    let asked = wait_for("the question", &id, &|t| {
        t["pending_questions"][0]["id"] == "q1-1" && t["status"] == "waiting"
    });
    assert_eq!(asked["status"], "waiting", "{asked}");
    for needle in ["page_size=20", "$UFO/v1/tasks/$ID -H", "/answers"] {
        ran.insert(run(needle, &id).0);
    }
    let held = wait_for("the held action", &id, &|t| t["held_action"]["id"] == "h2");
    assert_eq!(held["held_action"]["function"], "launch_application");
    ran.insert(run("/confirmation", &id).0);
    let done = wait_for("the end of round 1", &id, &|t| t["status"] == "finished");
    assert_eq!(done["result"], "done", "{done}");
    for needle in [
        "/steps?from=1",
        "/screenshot",
        "/events",
        "/knowledge/search",
        "/healthz",
    ] {
        let (line, text) = run(needle, &id);
        if needle == "/events" {
            assert!(text.contains("event: end"), "{text}");
        }
        ran.insert(line);
    }
    let shot = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "png"))
        .expect("the screenshot line saved a file");
    let bytes = std::fs::read(&shot).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG"),
        "{shot:?}: {}\n{}",
        String::from_utf8_lossy(&bytes),
        run("/steps?from=1", &id).1
    );
    ran.insert(run("/requests", &id).0);
    wait_for("the follow-up's question", &id, &|t| {
        t["status"] == "waiting"
    });
    ran.insert(run("/cancel", &id).0);
    // The cancel is asked for; the runner ends the task at its next boundary.
    wait_for("the cancel", &id, &|t| t["status"] == "cancelled");
    let missed: Vec<&String> = lines.iter().filter(|l| !ran.contains(*l)).collect();
    assert!(missed.is_empty(), "README curl lines not run: {missed:#?}");
}
