//! The task subcommands: run, tasks, show, watch, answer, confirm, request, cancel, screenshot, health.
//! Each reads its arguments, calls the API and prints for a person (or raw JSON with `--json`). A task is
//! named by its id, a unique prefix of it, or `last` (the newest task).

use std::io::IsTerminal as _;
use std::time::Duration;

use serde_json::Value;

use ufo_client::{AgentClient, NewTask, Work};

use crate::config::{
    AnswerArgs, CancelArgs, ConfirmArgs, Connection, FollowArgs, HealthArgs, InputArgs,
    KnowledgeAddArgs, KnowledgeSearchArgs, KnowledgeShareArgs, PruneArgs, RateArgs, RecordArgs,
    RequestArgs, RunArgs, ScreenshotArgs, ShowArgs, TakeoverArgs, TasksArgs, WatchArgs,
};
use crate::error::CliError;
use crate::follow::Follower;
use crate::render;

/// The exit status a command ends with: success, or a task that did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done (or the followed task finished).
    Success,
    /// The followed task failed or was cancelled.
    TaskUnsuccessful,
}

fn task_id(task: &Value) -> Result<String, CliError> {
    task.get("id")
        .or_else(|| task.get("task_id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| CliError::Protocol(format!("the task has no id: {task}")))
}

/// Most task pages read to resolve an id prefix.
const PREFIX_PAGES: usize = 20;

/// The full id of the task `given` names: a full id, a unique prefix, or `last` (the newest task).
pub async fn resolve(api: &AgentClient, given: &str) -> Result<String, CliError> {
    let given = given.trim();
    if given.len() == 36 && uuid::Uuid::parse_str(given).is_ok() {
        return Ok(given.to_owned());
    }
    let items = |page: &Value| -> Vec<String> {
        page.get("tasks")
            .and_then(Value::as_array)
            .map(|tasks| tasks.iter().filter_map(|t| task_id(t).ok()).collect())
            .unwrap_or_default()
    };
    if given == "last" {
        let page = api.list(None, Some(1), None).await?;
        return items(&page).into_iter().next().ok_or_else(|| {
            CliError::NotFound("there is no task yet: `last` names none".to_owned())
        });
    }
    if given.is_empty() || !given.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        // Not a UUID prefix: no task can have it.
        return Err(CliError::NotFound(format!(
            "no task {given}: not a task id (a task is named by its id, a unique prefix of it, or \
             `last`; `ufo tasks` lists them)"
        )));
    }
    let wanted = given.to_ascii_lowercase();
    let mut matches = Vec::new();
    let mut token: Option<String> = None;
    for _ in 0..PREFIX_PAGES {
        let page = api.list(None, None, token.as_deref()).await?;
        matches.extend(
            items(&page)
                .into_iter()
                .filter(|id| id.starts_with(&wanted)),
        );
        token = page
            .get("next_page_token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_owned);
        if token.is_none() || matches.len() > 1 {
            break;
        }
    }
    match matches.len() {
        1 => Ok(matches.remove(0)),
        0 => Err(CliError::NotFound(format!(
            "no task id starts with {given:?} (`ufo tasks` lists them)"
        ))),
        _ => Err(CliError::InvalidArgument {
            flag: "task id",
            reason: format!(
                "{given:?} is the start of several task ids ({}, ...): give more of it",
                matches[..2].join(", ")
            ),
        }),
    }
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

/// `ufo run`.
pub async fn run(api: AgentClient, conn: &Connection, args: RunArgs) -> Result<Outcome, CliError> {
    let task = api
        .submit(&NewTask {
            work: Work::Request(args.request),
            executor: args.executor,
            max_steps: args.max_steps,
            max_cost: args.max_cost,
            timeout_seconds: args.timeout_seconds.map(u64::from),
            confirm_policy: args.confirm_policy.map(|p| p.as_api().to_owned()),
            host_model: args.host_model,
            app_model: args.app_model,
            reuse: args.reuse,
            labels: None,
        })
        .await?;
    let id = task_id(&task)?;
    if args.detach {
        println!("{id}");
        return Ok(Outcome::Success);
    }
    println!("task {id} submitted; following its steps (Ctrl-C stops following, not the task)");
    follow(api, conn, &id, 1, &args.follow).await
}

/// `ufo replay`.
pub async fn replay(
    api: AgentClient,
    conn: &Connection,
    args: crate::config::ReplayArgs,
) -> Result<Outcome, CliError> {
    let original = resolve(&api, &args.id).await?;
    let task = api
        .submit(&NewTask::replay(&original, args.on_mismatch.clone()))
        .await?;
    let id = task_id(&task)?;
    if args.detach {
        println!("{id}");
        return Ok(Outcome::Success);
    }
    println!(
        "task {id} replays {original}; following its steps (Ctrl-C stops following, not the task)"
    );
    follow(api, conn, &id, 1, &args.follow).await
}

/// `ufo watch`.
pub async fn watch(
    api: AgentClient,
    conn: &Connection,
    args: WatchArgs,
) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    follow(api, conn, &id, args.from, &args.follow).await
}

async fn follow(
    api: AgentClient,
    conn: &Connection,
    id: &str,
    from: u64,
    args: &FollowArgs,
) -> Result<Outcome, CliError> {
    let prompt = !args.no_prompt;
    let mut follower = Follower::new(api, &conn.grpc, conn.token.as_deref(), prompt)?
        .reconnect_for(Duration::from_secs(args.reconnect_seconds));
    // Ctrl-C (also at a prompt) stops following only: say so, and how to pick the task up again.
    let task = tokio::select! {
        task = follower.follow(id, from) => task?,
        _ = tokio::signal::ctrl_c() => {
            println!();
            println!(
                "stopped following; task {id} goes on. Follow it again: ufo watch {id} (cancel it: ufo cancel {id})"
            );
            return Ok(Outcome::Success);
        }
    };
    let status = render::status_word(task.get("status").and_then(Value::as_str).unwrap_or(""));
    let totals = task.get("totals").cloned().unwrap_or(Value::Null);
    println!(
        "{status}: {} ({} steps, {})",
        task.get("result").and_then(Value::as_str).unwrap_or(""),
        totals.get("steps").and_then(Value::as_u64).unwrap_or(0),
        render::cost(totals.get("cost").and_then(Value::as_f64).unwrap_or(0.0)),
    );
    Ok(if status == "finished" || !render::is_terminal(&status) {
        Outcome::Success
    } else {
        Outcome::TaskUnsuccessful
    })
}

/// `ufo tasks`.
pub async fn tasks(api: AgentClient, args: TasksArgs) -> Result<Outcome, CliError> {
    let page = api
        .list(
            args.status.as_deref(),
            args.limit,
            args.page_token.as_deref(),
        )
        .await?;
    if args.json {
        print_json(&page);
        return Ok(Outcome::Success);
    }
    let items = page
        .get("tasks")
        .or_else(|| page.get("items"))
        .unwrap_or(&page)
        .as_array()
        .cloned()
        .unwrap_or_default();
    if items.is_empty() {
        println!("no tasks");
    }
    for task in &items {
        println!("{}", render::task_row(task));
    }
    if let Some(token) = page
        .get("next_page_token")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        println!("more: ufo tasks --page-token {token}");
    }
    Ok(Outcome::Success)
}

/// `ufo show`.
pub async fn show(
    api: AgentClient,
    conn: &Connection,
    args: ShowArgs,
) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    let task = api.get(&id).await?;
    let steps = if args.steps {
        Some(api.steps(&id, None, None).await?)
    } else {
        None
    };
    if args.json {
        print_json(&task);
        if let Some(steps) = &steps {
            print_json(steps);
        }
        return Ok(Outcome::Success);
    }
    println!("{}", render::task_summary(&task));
    let cancelled = task.get("status").and_then(Value::as_str) == Some("cancelled")
        || task.get("cancel_requested") == Some(&Value::Bool(true));
    if cancelled {
        let last_seq = task.get("last_seq").and_then(Value::as_u64).unwrap_or(0);
        match crate::follow::cancel_reason(&conn.grpc, conn.token.as_deref(), &id, last_seq).await {
            Some(reason) if !reason.is_empty() => println!("cancel   requested: {reason}"),
            Some(_) => println!("cancel   requested (no reason given)"),
            None => {}
        }
    }
    if let Some(steps) = steps {
        let list = steps.get("steps").unwrap_or(&steps);
        for step in list.as_array().map(Vec::as_slice).unwrap_or_default() {
            println!("{}", render::step_line(step));
            if let Some(line) = render::knowledge_line(step) {
                println!("{line}");
            }
            // A demonstration's step is the person's action and the screen they did it on.
            if render::text(&task, "kind") == "demonstration"
                && let Some(line) = render::screenshot_line(&id, step)
            {
                println!("{line}");
            }
        }
    }
    Ok(Outcome::Success)
}

/// `ufo answer`.
pub async fn answer(api: AgentClient, args: AnswerArgs) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    // Without --question, the answers go to the questions pending now, in order; they are shown first so
    // the person sees what is being answered, and the ids sent bind each answer to its question.
    let ids = if args.question.is_empty() {
        let task = api.get(&id).await?;
        let pending: Vec<(String, String)> = task
            .get("pending_questions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|q| {
                let text = |k: &str| q.get(k).and_then(Value::as_str).map(str::to_owned);
                Some((text("id")?, text("question")?))
            })
            .take(args.answers.len())
            .collect();
        for (qid, question) in &pending {
            println!("{qid}: {question}");
        }
        pending.into_iter().map(|(qid, _)| qid).collect()
    } else {
        args.question.clone()
    };
    let task = api.answer(&id, &ids, &args.answers).await?;
    println!(
        "answered; task {}",
        after_decision(&api, &id, &ids, task).await
    );
    Ok(Outcome::Success)
}

/// `ufo confirm`.
pub async fn confirm(api: AgentClient, args: ConfirmArgs) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    // Without --action, the action held now is shown and exactly that one is decided.
    let action_id = match &args.action {
        Some(action) => action.clone(),
        None => {
            let task = api.get(&id).await?;
            let held = task
                .get("held_action")
                .filter(|h| h.is_object())
                .ok_or_else(|| CliError::InvalidArgument {
                    flag: "task id",
                    reason: format!("task {id} holds no action for confirmation"),
                })?;
            println!("held action: {}", crate::render::held_text(held));
            held.get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        }
    };
    let task = api
        .confirm(
            &id,
            &action_id,
            args.approve && !args.reject,
            args.reason.as_deref(),
        )
        .await?;
    let verb = if args.approve { "approved" } else { "rejected" };
    println!(
        "{verb}; task {}",
        after_decision(&api, &id, std::slice::from_ref(&action_id), task).await
    );
    Ok(Outcome::Success)
}

/// `ufo request`: adds the follow-up and follows the round it starts (unless --detach).
pub async fn request(
    api: AgentClient,
    conn: &Connection,
    args: RequestArgs,
) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    // Events after this one belong to the follow-up.
    let before = api.get(&id).await?;
    let from = before.get("last_seq").and_then(Value::as_u64).unwrap_or(0) + 1;
    let task = api.add_request(&id, &args.request).await?;
    // A task waiting for a person runs the follow-up only after that: say so rather than follow in silence.
    let waiting = api.get(&id).await.unwrap_or(task.clone());
    if let Some(held) = waiting.get("held_action").filter(|h| h.is_object()) {
        println!(
            "task {id} holds an action for confirmation: {}; the follow-up runs after it is decided \
             (ufo confirm {id} --approve, or --reject)",
            render::held_text(held)
        );
    } else if waiting
        .get("pending_questions")
        .and_then(Value::as_array)
        .is_some_and(|q| !q.is_empty())
    {
        println!(
            "task {id} waits for answers to its questions (ufo show {id}); the follow-up runs after \
             they are answered (ufo answer {id} ...)"
        );
    }
    if args.detach {
        println!("follow-up queued; task is {}", status_of(&task));
        return Ok(Outcome::Success);
    }
    println!("follow-up queued; following the new round (Ctrl-C stops following, not the task)");
    follow(api, conn, &id, from, &args.follow).await
}

/// `ufo prune`: asks the agent to prune screenshots (`POST /v1/admin/prune`).
pub async fn prune(api: AgentClient, args: PruneArgs) -> Result<Outcome, CliError> {
    let done = api.prune(args.older_than_days, args.keep_tasks).await?;
    println!(
        "pruned the screenshots of {} tasks ({} screenshots, {} stored images released)",
        done.get("tasks").and_then(Value::as_u64).unwrap_or(0),
        done.get("screenshots").and_then(Value::as_u64).unwrap_or(0),
        done.get("blobs").and_then(Value::as_u64).unwrap_or(0),
    );
    Ok(Outcome::Success)
}

/// `ufo executors …`: the admin API's executor endpoints.
/// `ufo desktops …`.
pub async fn desktops(
    api: AgentClient,
    command: crate::config::DesktopsCommand,
) -> Result<Outcome, CliError> {
    use crate::config::DesktopsCommand;
    let (name, change) = match command {
        DesktopsCommand::List(args) => {
            let pool = api.desktops().await?;
            if args.json {
                println!("{pool}");
                return Ok(Outcome::Success);
            }
            let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
            println!("NAME\tLABELS\tSTATE\tTASK\tLAST HEARTBEAT\tVERSION");
            for d in pool["desktops"].as_array().into_iter().flatten() {
                let labels = d["labels"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .filter(|l| !l.is_empty())
                    .unwrap_or_else(|| "-".into());
                let mut state = text(&d["state"]);
                if let Some(reason) = d["reason"].as_str() {
                    state = format!("{state} ({reason})");
                } else if d["draining"].as_bool() == Some(true) && state != "draining" {
                    state = format!("{state}, draining");
                }
                println!(
                    "{}\t{labels}\t{state}\t{}\t{}\t{}",
                    text(&d["name"]),
                    text(&d["current_task"]),
                    text(&d["last_heartbeat"]),
                    text(&d["version"]),
                );
            }
            println!(
                "{} free, {} busy, {} tasks waiting for a desktop",
                pool["free"], pool["busy"], pool["waiting_tasks"]
            );
            return Ok(Outcome::Success);
        }
        DesktopsCommand::Remove(d) => {
            api.remove_desktop(&d.name).await?;
            println!("desktop {} removed", d.name);
            return Ok(Outcome::Success);
        }
        DesktopsCommand::Drain(d) => (d.name, "drain"),
        DesktopsCommand::Undrain(d) => (d.name, "undrain"),
        DesktopsCommand::Ready(d) => (d.name, "ready"),
    };
    let desktop = api.change_desktop(&name, change).await?;
    println!(
        "desktop {name}: {}{}",
        desktop["state"].as_str().unwrap_or("?"),
        if desktop["draining"].as_bool() == Some(true) {
            " (draining)"
        } else {
            ""
        }
    );
    Ok(Outcome::Success)
}

pub async fn executors(
    api: AgentClient,
    command: crate::config::ExecutorsCommand,
) -> Result<Outcome, CliError> {
    use crate::config::ExecutorsCommand;
    match command {
        ExecutorsCommand::List(args) => {
            let all = api.executors().await?;
            if args.json {
                println!("{all}");
                return Ok(Outcome::Success);
            }
            let text = |v: &Value| v.as_str().unwrap_or("-").to_owned();
            for e in all["executors"].as_array().into_iter().flatten() {
                let labels = e["labels"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                            .collect::<Vec<_>>()
                            .join(",")
                    })
                    .unwrap_or_default();
                let state = match (e["kind"].as_str(), e["connected"].as_bool()) {
                    (Some("dial-out"), Some(true)) => "connected",
                    (Some("dial-out"), _) => "disconnected",
                    _ => "declared",
                };
                println!(
                    "{}\t{}\t{state}\t{}\tlast heartbeat {}",
                    text(&e["name"]),
                    text(&e["kind"]),
                    if labels.is_empty() {
                        "-".into()
                    } else {
                        labels
                    },
                    text(&e["last_heartbeat"]),
                );
                for t in e["tokens"].as_array().into_iter().flatten() {
                    let revoked = t["revoked_at"]
                        .as_str()
                        .map_or(String::new(), |r| format!(" (revoked {r})"));
                    println!("  token {}{revoked}", text(&t["id"]));
                }
            }
            Ok(Outcome::Success)
        }
        ExecutorsCommand::Enroll(args) => {
            let made = api.enroll_executor(&args.name).await?;
            let token = made["token"].as_str().unwrap_or_default();
            match &args.out {
                Some(path) => {
                    write_secret(path, token)?;
                    println!(
                        "enrollment token {} for {} written to {}",
                        made["id"].as_str().unwrap_or("?"),
                        args.name,
                        path.display()
                    );
                }
                None => println!("{token}"),
            }
            Ok(Outcome::Success)
        }
        ExecutorsCommand::Revoke(args) => {
            api.revoke_enrollment(&args.name, &args.id).await?;
            println!("revoked token {} of {}", args.id, args.name);
            Ok(Outcome::Success)
        }
    }
}

/// Writes `text` to a new file only its owner can read.
fn write_secret(path: &std::path::Path, text: &str) -> Result<(), CliError> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    let mut file = options.open(path)?;
    file.write_all(text.as_bytes())?;
    file.write_all(b"\n")?;
    Ok(())
}

/// Most bytes of one file `ufo knowledge add` reads (the service refuses far smaller files; this only
/// keeps a mistaken path to a huge file from filling memory).
const MAX_FILE_BYTES: u64 = 256 * 1024 * 1024;

/// `ufo knowledge add`: reads the files and sends them in one upload (all stored or none).
pub async fn knowledge_add(api: AgentClient, args: KnowledgeAddArgs) -> Result<Outcome, CliError> {
    let mut files = Vec::with_capacity(args.files.len());
    for path in &args.files {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| CliError::InvalidArgument {
                flag: "FILES",
                reason: format!("{} is not a file name", path.display()),
            })?;
        let size = std::fs::metadata(path)
            .map_err(|e| CliError::InvalidArgument {
                flag: "FILES",
                reason: format!("cannot read {}: {e}", path.display()),
            })?
            .len();
        if size > MAX_FILE_BYTES {
            return Err(CliError::InvalidArgument {
                flag: "FILES",
                reason: format!(
                    "{} is {size} bytes: too large for a help file",
                    path.display()
                ),
            });
        }
        let bytes = std::fs::read(path).map_err(|e| CliError::InvalidArgument {
            flag: "FILES",
            reason: format!("cannot read {}: {e}", path.display()),
        })?;
        files.push((name, bytes));
    }
    let done = api
        .add_documents(args.app.as_deref().unwrap_or_default(), &files)
        .await?;
    if args.json {
        print_json(&done);
        return Ok(Outcome::Success);
    }
    let app = done.get("app").and_then(Value::as_str).unwrap_or_default();
    for doc in done
        .get("documents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let replaced = doc.get("replaced").and_then(Value::as_u64).unwrap_or(0);
        println!(
            "{}: {} sections{}{}",
            doc.get("source")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            doc.get("sections").and_then(Value::as_u64).unwrap_or(0),
            if app.is_empty() {
                String::new()
            } else {
                format!(" for {app}")
            },
            if replaced > 0 {
                format!(" (replaced {replaced})")
            } else {
                String::new()
            },
        );
    }
    Ok(Outcome::Success)
}

/// `ufo knowledge search`: the ranked hits with their sources, as the agents would get them.
pub async fn knowledge_search(
    api: AgentClient,
    args: KnowledgeSearchArgs,
) -> Result<Outcome, CliError> {
    let found = api
        .search_knowledge(&args.query, args.app.as_deref())
        .await?;
    if args.json {
        print_json(&found);
        return Ok(Outcome::Success);
    }
    let hits = found
        .get("hits")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if hits.is_empty() {
        println!("no hits");
    }
    for (i, hit) in hits.iter().enumerate() {
        let text = |k: &str| hit.get(k).and_then(Value::as_str).unwrap_or_default();
        // Another caller's item an admin shared: whose it is, so the operator sees why it came.
        let shared = if hit.get("shared") == Some(&Value::Bool(true)) {
            format!(" of {}, shared with you", text("owner"))
        } else {
            String::new()
        };
        println!(
            "{}. {} ({}{shared}, score {:.3}) — {}",
            i + 1,
            text("source"),
            text("kind"),
            hit.get("score").and_then(Value::as_f64).unwrap_or(0.0),
            text("title"),
        );
        let snippet: String = text("text")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let short: String = snippet.chars().take(160).collect();
        let more = if short.chars().count() < snippet.chars().count() {
            "…"
        } else {
            ""
        };
        println!("   {short}{more}");
    }
    if found.get("knowledge_enabled") == Some(&Value::Bool(false)) {
        println!("(the agents retrieve nothing now: the agent service runs without --knowledge)");
    }
    Ok(Outcome::Success)
}

/// `ufo knowledge share` / `unshare`: changes an item's sharing and prints it as it is now.
pub async fn knowledge_share(
    api: AgentClient,
    args: KnowledgeShareArgs,
    unshare: bool,
) -> Result<Outcome, CliError> {
    let done = api
        .share_knowledge(&args.id, &args.with, args.everyone, unshare)
        .await?;
    if args.json {
        print_json(&done);
        return Ok(Outcome::Success);
    }
    let text = |k: &str| done.get(k).and_then(Value::as_str).unwrap_or_default();
    let names: Vec<&str> = done
        .get("shared_with")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let everyone = done.get("everyone") == Some(&Value::Bool(true));
    let whom = match (everyone, names.is_empty()) {
        (true, _) => "everyone".to_owned(),
        (false, true) => format!("no one but {}", text("owner")),
        (false, false) => names.join(", "),
    };
    println!(
        "{} {} of {} ({}) is shared with {whom}",
        text("kind"),
        text("id"),
        text("owner"),
        text("source"),
    );
    if done.get("retrievable") == Some(&Value::Bool(false)) {
        println!("(it is a failed or bad-rated task's: no one retrieves it, shared or not)");
    }
    Ok(Outcome::Success)
}

/// One recorded step as `ufo record` prints it: `click_input on Button "OK" (in New project)`.
fn step_line(step: &Value) -> String {
    let text = |v: &Value, k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let mut line = text(step, "action");
    if let Some(t) = step.get("text").and_then(Value::as_str) {
        line.push_str(&format!(" {t:?}"));
    }
    match step.get("selector").filter(|s| s.is_object()) {
        Some(s) => line.push_str(&format!(" on {} {:?}", text(s, "type"), text(s, "name"))),
        None => line.push_str(" (no control there)"),
    }
    let window = text(step, "window");
    if !window.is_empty() {
        line.push_str(&format!(" (in {window})"));
    }
    line
}

/// `ufo record`: records what the person does until Enter, Ctrl-C or `--seconds`, printing each step as
/// it comes, then stores the demonstration and prints its id.
pub async fn record(api: AgentClient, args: RecordArgs) -> Result<Outcome, CliError> {
    let limit = match args.seconds {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            return Err(CliError::InvalidArgument {
                flag: "--seconds",
                reason: "must be a number of seconds above 0".into(),
            });
        }
        Some(s) => Some(tokio::time::Instant::now() + Duration::from_secs_f64(s)),
        None => None,
    };
    let started = api
        .start_recording(
            args.executor.as_deref(),
            &args.app,
            &args.description,
            args.seconds,
        )
        .await?;
    let id = started
        .get("id")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| CliError::Protocol(format!("the recording has no id: {started}")))?;
    eprintln!(
        "recording on {} — show it now; {} to stop",
        started
            .get("executor")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        if limit.is_some() {
            "it stops after --seconds, or press Enter or Ctrl-C"
        } else {
            "press Enter or Ctrl-C"
        }
    );
    // Enter on the terminal stops it; a closed stdin (a script) never does.
    let (enter_tx, enter) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line).is_ok_and(|n| n > 0) {
            let _ = enter_tx.send(());
        } else {
            std::mem::forget(enter_tx);
        }
    });
    tokio::pin!(enter);
    let mut from = 0u64;
    loop {
        tokio::select! {
            _ = &mut enter => break,
            _ = tokio::signal::ctrl_c() => break,
            () = async {
                match limit {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => break,
            () = tokio::time::sleep(Duration::from_millis(300)) => {
                let now = api.recording(&id, from).await?;
                for step in now.get("steps").and_then(Value::as_array).into_iter().flatten() {
                    println!("  {}", step_line(step));
                }
                from = now.get("events").and_then(Value::as_u64).unwrap_or(from);
                if now.get("state").and_then(Value::as_str) == Some("stopped") {
                    eprintln!(
                        "the recording ended by itself ({})",
                        now.get("ended").and_then(Value::as_str).unwrap_or("at its bound")
                    );
                    break;
                }
            }
        }
    }
    let demo = api.stop_recording(&id).await?;
    if args.json {
        print_json(&demo);
        return Ok(Outcome::Success);
    }
    let steps = demo
        .get("steps")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    println!(
        "demonstration {} stored for {} ({} steps, source {})",
        demo.get("id").and_then(Value::as_str).unwrap_or_default(),
        demo.get("app").and_then(Value::as_str).unwrap_or_default(),
        steps.len(),
        demo.get("source")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    );
    let session = demo
        .get("session")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if !session.is_empty() {
        println!(
            "its steps with their screenshots ({}): ufo show {session} --steps",
            demo.get("screenshots")
                .and_then(Value::as_u64)
                .unwrap_or_default()
        );
    }
    Ok(Outcome::Success)
}

/// `ufo rate`.
pub async fn rate(api: AgentClient, args: RateArgs) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    let rated = api.rate(&id, &args.rating).await?;
    println!(
        "task {id} rated {}",
        rated
            .get("rating")
            .and_then(Value::as_str)
            .unwrap_or(&args.rating)
    );
    Ok(Outcome::Success)
}

/// `ufo cancel`.
pub async fn cancel(api: AgentClient, args: CancelArgs) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    let task = api.cancel(&id, args.reason.as_deref()).await?;
    println!("cancel requested; task is {}", status_of(&task));
    Ok(Outcome::Success)
}

/// `ufo takeover`.
pub async fn takeover(api: AgentClient, args: TakeoverArgs) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    api.takeover(&id).await?;
    println!(
        "you have the desktop of task {id}: the agents pause at the next step. Act with `ufo input {id} --click X,Y | --keys K | --text T` or the viewer; give it back with `ufo handback {id}`"
    );
    Ok(Outcome::Success)
}

/// `ufo input`.
pub async fn input(api: AgentClient, args: InputArgs) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    let body = match (args.click, args.keys, args.text) {
        (Some((x, y)), _, _) => serde_json::json!({"click": {"x": x, "y": y}}),
        (_, Some(keys), _) => serde_json::json!({ "keys": keys }),
        (_, _, Some(text)) => serde_json::json!({ "text": text }),
        // clap requires one of them.
        (None, None, None) => serde_json::json!({}),
    };
    let sent = api.person_input(&id, body).await?;
    println!(
        "queued for the desktop (event {}); it shows as your step in `ufo show {id}`",
        sent.get("seq").and_then(Value::as_u64).unwrap_or(0)
    );
    Ok(Outcome::Success)
}

/// `ufo handback`.
pub async fn handback(api: AgentClient, args: TakeoverArgs) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    api.handback(&id).await?;
    println!("handed back: the agents of task {id} observe the desktop again and go on");
    Ok(Outcome::Success)
}

/// How long a decision's printout waits for the task to leave `waiting`.
const SETTLE: Duration = Duration::from_secs(5);

/// Whether the task waits for a person now (a question or a held action) other than the one(s) just
/// decided (`decided`: their ids).
fn waits_for_person(task: &Value, decided: &[String]) -> bool {
    let new = |item: &Value| {
        item.get("id")
            .and_then(Value::as_str)
            .is_some_and(|id| !decided.iter().any(|d| d == id))
    };
    task.get("held_action")
        .is_some_and(|h| h.is_object() && new(h))
        || task
            .get("pending_questions")
            .and_then(Value::as_array)
            .is_some_and(|q| q.iter().any(new))
}

/// The task's status after a decision (`is running`, `is finished`, `waits for ...`): the service answers
/// a decision before a runner takes the task up again, so its `waiting` then says nothing; the task is
/// read again until it leaves `waiting` (or waits for a person again), for a few seconds at most.
async fn after_decision(
    api: &AgentClient,
    id: &str,
    decided: &[String],
    mut task: Value,
) -> String {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let status = |t: &Value| {
        t.get("status")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    while status(&task) == "waiting" && !waits_for_person(&task, decided) {
        if tokio::time::Instant::now() >= deadline {
            return "resumes when a runner takes it up (`ufo watch` follows it)".to_owned();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        match api.get(id).await {
            Ok(fresh) => task = fresh,
            Err(_) => break,
        }
    }
    if status(&task) == "waiting" {
        if let Some(held) = task.get("held_action").filter(|h| h.is_object()) {
            return format!("waits for a decision on {}", render::held_text(held));
        }
        return "waits for answers (`ufo show` lists the questions)".to_owned();
    }
    format!("is {}", status_of(&task))
}

fn status_of(task: &Value) -> String {
    let status = task.get("status").and_then(Value::as_str).unwrap_or("");
    if status.is_empty() {
        "updated".to_owned()
    } else {
        render::status_word(status)
    }
}

/// `ufo screenshot`: saves a step's screenshot (the kind asked for, or the first the step has).
pub async fn screenshot(api: AgentClient, args: ScreenshotArgs) -> Result<Outcome, CliError> {
    let id = resolve(&api, &args.id).await?;
    let kind = match args.kind {
        Some(kind) => kind,
        None => {
            let page = api.steps(&id, Some(args.step), Some(1)).await?;
            let step = page
                .get("steps")
                .and_then(Value::as_array)
                .and_then(|steps| {
                    steps
                        .iter()
                        .find(|s| s.get("step").and_then(Value::as_u64) == Some(args.step))
                })
                .ok_or_else(|| {
                    CliError::NotFound(format!("task {id} has no step {}", args.step))
                })?;
            let kinds: Vec<String> = step
                .get("screenshots")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            ["clean", "annotated", "desktop"]
                .into_iter()
                .find(|k| kinds.iter().any(|have| have == k))
                .map(str::to_owned)
                .ok_or_else(|| {
                    CliError::NotFound(format!("step {} of task {id} has no screenshot", args.step))
                })?
        }
    };
    let shot =
        api.screenshot(&id, args.step, &kind)
            .await
            .map_err(|e| match CliError::from(e) {
                CliError::NotFound(message) => {
                    CliError::NotFound(format!("{message} (ask for another --kind)"))
                }
                other => other,
            })?;
    let (content_type, bytes) = (shot.content_type, shot.bytes);
    let extension = if content_type == "image/jpeg" {
        "jpg"
    } else {
        "png"
    };
    let (output, replaced) = match args.output {
        // A file named by the user is theirs to replace, and is said to be replaced.
        Some(output) => {
            let replaced = output.exists();
            std::fs::write(&output, &bytes)?;
            (output, replaced)
        }
        // The default name holds the whole task id (ids are time-ordered: their starts collide), and an
        // existing file is never overwritten: a number is added instead.
        None => (
            write_new(&format!("{id}-step{}-{kind}", args.step), extension, &bytes)?,
            false,
        ),
    };
    println!(
        "{} ({kind}, {} bytes{})",
        output.display(),
        bytes.len(),
        if replaced {
            "; replaced the existing file"
        } else {
            ""
        }
    );
    Ok(Outcome::Success)
}

/// `ufo health`: SERVING → success; anything else is an error naming what was seen.
pub async fn health(conn: &Connection, args: HealthArgs) -> Result<Outcome, CliError> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let url = args.url.unwrap_or_else(|| conn.grpc.clone());
    let endpoint = tonic::transport::Endpoint::from_shared(url.clone()).map_err(|e| {
        CliError::InvalidArgument {
            flag: "--url",
            reason: format!("{url:?} is not a URL ({e})"),
        }
    })?;
    let channel = endpoint
        .connect_timeout(std::time::Duration::from_secs(conn.call_timeout_seconds))
        .timeout(std::time::Duration::from_secs(conn.call_timeout_seconds))
        .connect()
        .await
        .map_err(|e| {
            CliError::Up(format!(
                "cannot reach {url} ({}); is the service running?",
                crate::follow::innermost(&e)
            ))
        })?;
    let checked = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: args.service.clone(),
        })
        .await;
    let status = match checked {
        Ok(answer) => answer.into_inner().status,
        Err(s) => {
            // A wrong port answers HTTP, not gRPC (tonic reports a compression or protocol error): say so.
            if answers_rest(&url, conn.call_timeout_seconds).await {
                return Err(CliError::InvalidArgument {
                    flag: "--url",
                    reason: format!(
                        "{url} is the agent's REST API, not a gRPC port; `ufo health` checks gRPC: use \
                         the gRPC port (`ufo up` prints it, default http://127.0.0.1:50052; \
                         --grpc-port / UFO_UP_GRPC_PORT)"
                    ),
                });
            }
            if s.code() != tonic::Code::Unavailable && s.code() != tonic::Code::Unauthenticated {
                return Err(CliError::Up(format!(
                    "{url} does not answer gRPC health checks ({}: {}); is it a ufo service's gRPC \
                     port?",
                    s.code(),
                    s.message()
                )));
            }
            return Err(CliError::from_status(s, &url));
        }
    };
    if status == ServingStatus::Serving as i32 {
        if std::io::stdout().is_terminal() {
            println!("{url}: serving");
        }
        Ok(Outcome::Success)
    } else {
        Err(CliError::Up(format!(
            "{url} is not serving {:?} (status {})",
            args.service,
            ServingStatus::try_from(status).map_or("unknown", |s| s.as_str_name())
        )))
    }
}

/// Whether `url` answers `GET /healthz` over plain HTTP (the agent's REST API does).
async fn answers_rest(url: &str, timeout_seconds: u64) -> bool {
    let Ok(client) = reqwest::Client::builder()
        .timeout(Duration::from_secs(timeout_seconds.clamp(1, 5)))
        .build()
    else {
        return false;
    };
    client
        .get(format!("{}/healthz", url.trim_end_matches('/')))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// Writes `bytes` to a new file `<stem>.<extension>` in the current directory, or `<stem>-2.<extension>`,
/// `-3`, ... when that exists (created exclusively: a file is never overwritten).
fn write_new(stem: &str, extension: &str, bytes: &[u8]) -> Result<std::path::PathBuf, CliError> {
    for n in 1u32..=10_000 {
        let name = if n == 1 {
            format!("{stem}.{extension}")
        } else {
            format!("{stem}-{n}.{extension}")
        };
        let path = std::path::PathBuf::from(name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => {
                std::io::Write::write_all(&mut file, bytes)?;
                return Ok(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(CliError::InvalidArgument {
        flag: "--output",
        reason: format!("{stem}.{extension} and 10000 numbered names exist; name the file"),
    })
}
