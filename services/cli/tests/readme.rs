//! README.md is the user's manual, so it is checked like code: at most 30 KB; every `ufo ...` command in
//! its shell blocks names a real subcommand with real flags (read from `ufo <subcommand> --help`); and
//! every flag and environment variable in the configuration tables (docs/configuration.md) exists in that
//! binary's `--help`.
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

#[test]
fn the_readme_is_a_manual_of_at_most_30_kb() {
    let size = readme().len();
    assert!(
        size <= 30 * 1024,
        "README.md is {size} bytes; the limit is 30 KB"
    );
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
