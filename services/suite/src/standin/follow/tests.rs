//! The stand-in's decisions on hand-written prompts: progress read from the prompt only, bounded waits
//! and retries, failures that say why.

use super::*;
use crate::standin::prompt::{PastSubtask, Window};
use crate::task::Subtask;

fn sub(app: &str, what: &str, steps: &[&str]) -> Subtask {
    Subtask {
        app: app.into(),
        launch: None,
        launch_args: vec![],
        what: what.into(),
        steps: steps.iter().map(|s| Step::parse(s).unwrap()).collect(),
        result: None,
        api: vec![],
    }
}

fn prompt(agent: AgentKind) -> Prompt {
    Prompt::blank(agent, "r")
}

fn control(label: &str, name: &str, kind: &str) -> Control {
    Control {
        label: label.into(),
        name: name.into(),
        kind: kind.into(),
    }
}

fn done(function: &str, target: &str) -> PastAction {
    PastAction {
        function: function.into(),
        target: Some(target.into()),
        arguments: None,
        outcome: Outcome::Success,
        read: None,
    }
}

const PATIENCE: Patience = Patience {
    max_waits: 2,
    max_retries: 1,
};

fn demo() -> Vec<Subtask> {
    vec![
        sub(
            "Calc",
            "compute",
            &[
                "click the button named '7'",
                "read the text named 'Display'",
            ],
        ),
        sub(
            "Editor",
            "write it",
            &["type '{result}!' into the field named 'Body'"],
        ),
    ]
}

#[test]
fn the_host_assigns_each_subtask_to_its_window_and_passes_results_on() {
    let mut p = prompt(AgentKind::Host);
    p.windows = vec![
        Window {
            label: "1".into(),
            name: "My Editor".into(),
            kind: "APPLICATION".into(),
        },
        Window {
            label: "2".into(),
            name: "calc".into(),
            kind: "APPLICATION".into(),
        },
    ];
    let mut w = Waits::default();
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["status"], "ASSIGN");
    assert_eq!(r["arguments"]["id"], "2");
    assert_eq!(r["current_subtask"], "compute");
    p.subtasks.push(PastSubtask {
        subtask: "compute".into(),
        status: "FINISH".into(),
        result: "7".into(),
    });
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(
        (r["status"].as_str(), r["arguments"]["id"].as_str()),
        (Some("ASSIGN"), Some("1"))
    );
    assert_eq!(r["message"], "7");
    p.subtasks.push(PastSubtask {
        subtask: "write it".into(),
        status: "FINISH".into(),
        result: "ok".into(),
    });
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(
        (r["status"].as_str(), r["result"].as_str()),
        (Some("FINISH"), Some("ok"))
    );
}

#[test]
fn the_host_waits_for_a_missing_window_then_fails_naming_what_it_saw() {
    let mut p = prompt(AgentKind::Host);
    p.windows = vec![Window {
        label: "1".into(),
        name: "Other".into(),
        kind: "APPLICATION".into(),
    }];
    let mut w = Waits::default();
    for _ in 0..PATIENCE.max_waits {
        assert_eq!(decide(&demo(), &p, &mut w, PATIENCE)["status"], "CONTINUE");
    }
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["status"], "FAIL");
    assert!(r["result"].as_str().unwrap().contains("\"Other\""), "{r}");
}

#[test]
fn the_host_launches_when_told_and_fails_when_the_launch_is_refused() {
    let mut d = demo();
    d[0].launch = Some("galculator".into());
    let mut p = prompt(AgentKind::Host);
    let mut w = Waits::default();
    let r = decide(&d, &p, &mut w, PATIENCE);
    assert_eq!(
        (r["status"].as_str(), r["function"].as_str()),
        (Some("ASSIGN"), Some("launch_application"))
    );
    assert_eq!(r["arguments"]["name"], "galculator");
    p.actions.push(PastAction {
        function: "launch_application".into(),
        target: None,
        arguments: None,
        outcome: Outcome::NotDone("denied: not allowed".into()),
        read: None,
    });
    let r = decide(&d, &p, &mut w, PATIENCE);
    assert_eq!(r["status"], "FAIL");
    assert!(
        r["result"]
            .as_str()
            .unwrap()
            .contains("denied: not allowed")
    );
}

#[test]
fn the_host_reassigns_a_failed_subtask_once_then_fails() {
    let mut p = prompt(AgentKind::Host);
    p.windows = vec![Window {
        label: "2".into(),
        name: "calc".into(),
        kind: "APPLICATION".into(),
    }];
    let failed = PastSubtask {
        subtask: "compute".into(),
        status: "FAIL".into(),
        result: "no 7".into(),
    };
    p.subtasks.push(failed.clone());
    let mut w = Waits::default();
    assert_eq!(decide(&demo(), &p, &mut w, PATIENCE)["status"], "ASSIGN");
    p.subtasks.push(failed);
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["status"], "FAIL");
    assert!(r["result"].as_str().unwrap().contains("no 7"));
}

#[test]
fn the_app_acts_step_by_step_on_what_the_prompt_lists() {
    let mut p = prompt(AgentKind::App);
    p.subtask = "compute".into();
    p.controls = vec![control("4", "7", "Button"), control("9", "Display", "Text")];
    let mut w = Waits::default();
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["status"], "CONTINUE");
    assert_eq!(r["action"]["function"], "click_input");
    assert_eq!(r["action"]["arguments"]["id"], "4");
    // An earlier subtask's same click does not count twice: only the run the actions end with.
    p.actions.push(done("click_input", "7"));
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["action"]["function"], "texts");
    assert_eq!(r["action"]["arguments"]["id"], "9");
    let mut read = done("texts", "Display");
    read.read = Some("7".into());
    p.actions.push(read);
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(
        (r["status"].as_str(), r["result"].as_str()),
        (Some("FINISH"), Some("7"))
    );
}

#[test]
fn the_app_moves_on_only_after_success_and_gives_up_with_the_error() {
    let mut p = prompt(AgentKind::App);
    p.subtask = "compute".into();
    p.controls = vec![control("4", "7", "Button")];
    let mut failed = done("click_input", "7");
    failed.outcome = Outcome::NotDone("failure: the control is disabled".into());
    p.actions.push(failed.clone());
    let mut w = Waits::default();
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(
        r["action"]["function"], "click_input",
        "retries the same step"
    );
    p.actions.push(failed);
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["status"], "FAIL");
    assert!(
        r["result"]
            .as_str()
            .unwrap()
            .contains("the control is disabled"),
        "{r}"
    );
}

#[test]
fn the_app_looks_again_for_a_missing_control_then_fails_naming_similar_ones() {
    let mut p = prompt(AgentKind::App);
    p.subtask = "compute".into();
    p.controls = vec![control("4", "77", "Button"), control("5", "7", "Text")];
    let mut w = Waits::default();
    for _ in 0..PATIENCE.max_waits {
        assert_eq!(
            decide(&demo(), &p, &mut w, PATIENCE)["status"],
            "SCREENSHOT"
        );
    }
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["status"], "FAIL");
    let why = r["result"].as_str().unwrap();
    assert!(
        why.contains("button \"7\" is not among the 2 listed controls"),
        "{why}"
    );
    assert!(why.contains("\"77\" (Button)"), "{why}");
}

#[test]
fn the_app_types_the_value_the_host_passed() {
    let mut p = prompt(AgentKind::App);
    p.subtask = "write it".into();
    p.controls = vec![control("3", "Body", "Edit")];
    let mut w = Waits::default();
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["status"], "FAIL", "no value passed: {r}");
    p.host_message = "4+2".into();
    let r = decide(&demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["action"]["arguments"]["keys"], "4{+}2!");
}

#[test]
fn an_unknown_subtask_fails() {
    let mut p = prompt(AgentKind::App);
    p.subtask = "something else".into();
    let r = decide(&demo(), &p, &mut Waits::default(), PATIENCE);
    assert_eq!(r["status"], "FAIL");
}

#[test]
fn wait_steps_and_keys_without_a_control() {
    let d = vec![sub(
        "E",
        "save",
        &["wait for the button named 'Save'", "press ctrl+s"],
    )];
    let mut p = prompt(AgentKind::App);
    p.subtask = "save".into();
    let mut w = Waits::default();
    assert_eq!(decide(&d, &p, &mut w, PATIENCE)["status"], "SCREENSHOT");
    p.controls = vec![control("1", "Save", "Button")];
    let r = decide(&d, &p, &mut w, PATIENCE);
    // The last action finishes the subtask with it (the agent finishes only if it succeeds).
    assert_eq!(r["status"], "FINISH");
    assert_eq!(
        r["action"],
        json!({"function": "keyboard_input", "arguments": {"keys": "^s"}, "status": "FINISH"})
    );
    p.actions.push(PastAction {
        function: "keyboard_input".into(),
        target: None,
        arguments: Some(json!({"keys": "^s"})),
        outcome: Outcome::Success,
        read: None,
    });
    assert_eq!(decide(&d, &p, &mut w, PATIENCE)["status"], "FINISH");
}

#[test]
fn names_match_as_a_person_reads_them() {
    assert!(same_name("Save As...      ", "Save As…"));
    assert!(same_name("Name:", "Name"));
    assert!(!same_name("Name", "Names"));
    assert!(same_name("", ""));
}

fn api_demo() -> Vec<Subtask> {
    let mut s = sub("Sheet", "fill", &["click the button named '7'"]);
    s.api = ["set_cells", "save"]
        .iter()
        .map(|tool| crate::task::ApiCall {
            server: "calc".into(),
            tool: (*tool).into(),
            arguments: serde_json::Map::new(),
        })
        .collect();
    vec![s]
}

#[test]
fn the_app_uses_the_api_only_when_the_prompt_offers_every_call() {
    let mut p = prompt(AgentKind::App);
    p.subtask = "fill".into();
    p.controls = vec![control("4", "7", "Button")];
    let mut w = Waits::default();
    // No API in the function list: the GUI steps.
    let r = decide(&api_demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["action"]["function"], "click_input");
    // One of the two calls offered: still the GUI.
    p.functions = vec!["click_input".into(), "mcp__calc__set_cells".into()];
    let r = decide(&api_demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["action"]["function"], "click_input");
    // Both: one batch, the last call carrying FINISH.
    p.functions.push("mcp__calc__save".into());
    let r = decide(&api_demo(), &p, &mut w, PATIENCE);
    let batch = r["action"].as_array().unwrap();
    assert_eq!(batch.len(), 2);
    assert_eq!(batch[0]["function"], "mcp__calc__set_cells");
    assert_eq!(batch[0]["status"], "CONTINUE");
    assert_eq!(batch[1]["function"], "mcp__calc__save");
    assert_eq!(batch[1]["status"], "FINISH");
    // Failed once: sent again; twice: FAIL with the server's error.
    let failed = |f: &str, why: &str| PastAction {
        function: f.into(),
        target: None,
        arguments: None,
        outcome: Outcome::NotDone(why.into()),
        read: None,
    };
    p.actions
        .push(failed("mcp__calc__set_cells", "failure: no pipe"));
    p.actions.push(failed("mcp__calc__save", "skipped"));
    let r = decide(&api_demo(), &p, &mut w, PATIENCE);
    assert!(r["action"].is_array(), "{r}");
    p.actions
        .push(failed("mcp__calc__set_cells", "failure: no pipe"));
    let r = decide(&api_demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["status"], "FAIL");
    assert!(r["result"].as_str().unwrap().contains("no pipe"), "{r}");
    // Both succeeded at the end of the list: FINISH.
    p.actions.push(done("mcp__calc__set_cells", ""));
    p.actions.push(done("mcp__calc__save", ""));
    let r = decide(&api_demo(), &p, &mut w, PATIENCE);
    assert_eq!(r["status"], "FINISH");
    assert!(r.get("action").is_none(), "{r}");
}
