//! Every FSM transition of the round driver: CONFIRM approve/reject (the action is held until decided),
//! PENDING answered/timed out (both fallbacks), AppAgent FAIL → HostAgent re-plan (bounded), unknown
//! status → ERROR, step limit, and the multi-action pre-check.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::*;
use serde_json::json;
use ufo_agent::agents::AgentSettings;
use ufo_agent::round::control::Next;
use ufo_agent::round::{Arrived, Decision, RoundEnd};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};
use ufo_proto::v1;

fn confirm_click()
-> impl Fn(&ufo_agent::testing::RecordedRequest) -> ScriptedReply + Send + Sync + 'static {
    by_name(|id| {
        app(
            "CONFIRM",
            json!({"function": "click_input", "arguments": {"id": id("Copy")}}),
            "",
        )
    })
}

#[tokio::test]
async fn confirm_holds_the_action_until_approved_then_runs_it() {
    let llm = ScriptedLlm::start().await.unwrap();
    let desktop = Arc::new(desktop());
    let mut round = round(
        services(&llm, AgentSettings::default()),
        desktop.clone(),
        "copy",
    );
    llm.push_json(&assign("0", "copy the note"));
    llm.push_fn(confirm_click());
    let hooks = Arrived {
        decision: Some(Decision {
            approve: true,
            reason: "fine".into(),
        }),
        ..Arrived::default()
    };
    round.next_step(&hooks).await.unwrap();
    let held = round.next_step(&hooks).await.unwrap();
    assert_eq!(held.step.state_after, "CONFIRM");
    // The round decides to hold; the runner writes the hold's events (once) from this value.
    assert!(
        matches!(&held.control.next, Next::Hold { action } if action.function == "click_input")
    );
    assert!(held.step.actions.is_empty(), "nothing ran while held");
    assert!(!desktop.actions().contains(&"click_input".to_owned()));
    assert_eq!(round.held_action().unwrap().function, "click_input");
    assert_eq!(round.held_action().unwrap().target_name, "Copy");
    assert_eq!(round.state(), "AppAgent/notes:CONFIRM");

    let approved = round.next_step(&hooks).await.unwrap();
    assert_eq!(
        approved.memory_item.as_ref().unwrap()["confirmation_reason"],
        "fine"
    );
    assert!(matches!(approved.control.next, Next::Continue { .. }));
    assert_eq!(approved.step.actions[0].target_name, "Copy");
    assert_eq!(desktop.actions().last().unwrap(), "click_input");
    assert_eq!(round.state(), "AppAgent/notes:CONTINUE");
    assert!(round.held_action().is_none());
}

#[tokio::test]
async fn confirm_rejected_finishes_the_subtask_and_returns_to_the_host() {
    let llm = ScriptedLlm::start().await.unwrap();
    let desktop = Arc::new(desktop());
    let mut round = round(
        services(&llm, AgentSettings::default()),
        desktop.clone(),
        "copy",
    );
    llm.push_json(&assign("0", "copy the note"));
    llm.push_fn(confirm_click());
    let hooks = Arrived {
        decision: Some(Decision {
            approve: false,
            reason: "not now".into(),
        }),
        ..Arrived::default()
    };
    round.next_step(&hooks).await.unwrap();
    round.next_step(&hooks).await.unwrap();
    let rejected = round.next_step(&hooks).await.unwrap();
    assert_eq!(
        rejected.memory_item.as_ref().unwrap()["confirmation_reason"],
        "not now"
    );
    assert!(!desktop.actions().contains(&"click_input".to_owned()));
    let last = round.previous_subtasks().last().unwrap();
    assert_eq!(last["status"], "REJECTED");
    assert!(last["result"].as_str().unwrap().contains("not now"));
    assert_eq!(round.state(), "HostAgent:CONTINUE");
}

#[tokio::test]
async fn confirm_without_a_decision_in_time_is_a_rejection() {
    let llm = ScriptedLlm::start().await.unwrap();
    let desktop = Arc::new(desktop());
    let mut round = round(
        services(&llm, AgentSettings::default()),
        desktop.clone(),
        "copy",
    );
    llm.push_json(&assign("0", "copy the note"));
    llm.push_fn(confirm_click());
    let hooks = Arrived::default();
    for _ in 0..3 {
        round.next_step(&hooks).await.unwrap();
    }
    assert!(!desktop.actions().contains(&"click_input".to_owned()));
    assert_eq!(
        round.previous_subtasks().last().unwrap()["status"],
        "REJECTED"
    );
}

#[tokio::test]
async fn pending_asks_then_answers_go_on_the_blackboard_and_into_the_next_prompt() {
    let llm = ScriptedLlm::start().await.unwrap();
    let mut round = round(
        services(&llm, AgentSettings::default()),
        Arc::new(desktop()),
        "open the file",
    );
    llm.push_json(&host("PENDING", json!({"questions": ["Which file?"]})));
    llm.push_fn(|req| {
        assert!(
            req.text().contains("report.txt"),
            "answer missing from the prompt"
        );
        ScriptedReply::Text(host("FINISH", json!({"result": "ok"})).to_string())
    });
    let hooks = Arrived {
        answers: Some(vec!["report.txt".into()]),
        ..Arrived::default()
    };
    let asked = round.next_step(&hooks).await.unwrap();
    assert_eq!(asked.step.state_after, "PENDING");
    assert!(
        matches!(&asked.control.next, Next::Ask { questions } if questions[0].text == "Which file?")
    );
    assert_eq!(round.pending_questions(), ["Which file?"]);
    let next = round.next_step(&hooks).await.unwrap();
    // Whoever answered wrote the answer to the store; the round only takes it.
    assert!(
        !next
            .blackboard
            .iter()
            .any(|e| e.kind == v1::BlackboardKind::Question as i32)
    );
    assert_eq!(round.blackboard().questions[0]["answer"], "report.txt");
    assert_eq!(round.end(), Some(&RoundEnd::Finished("ok".into())));
}

#[tokio::test]
async fn questions_nobody_answered_end_the_round() {
    // The runner owns the wait, its timeout and the fallback (answers "(no answer ...)" or a failed round);
    // a round given no answers at all fails rather than guessing.
    let llm = ScriptedLlm::start().await.unwrap();
    let mut failing = round(
        services(&llm, AgentSettings::default()),
        Arc::new(desktop()),
        "x",
    );
    llm.push_json(&host("PENDING", json!({"questions": ["?"]})));
    let hooks = Arrived::default();
    failing.next_step(&hooks).await.unwrap();
    assert!(failing.next_step(&hooks).await.is_none());
    assert!(matches!(failing.end(), Some(RoundEnd::Failed(r)) if r.contains("not answered")));
}

#[tokio::test]
async fn app_fail_returns_to_the_host_which_re_plans_within_the_limit() {
    let llm = ScriptedLlm::start().await.unwrap();
    let settings = AgentSettings {
        max_replans: 1,
        ..AgentSettings::default()
    };
    let mut round = round(services(&llm, settings), Arc::new(desktop()), "x");
    llm.push_json(&assign("0", "first try"));
    llm.push_json(&app("FAIL", json!(null), "no such data"));
    llm.push_fn(|req| {
        assert!(
            req.text().contains("no such data"),
            "host re-plans with the failure in view"
        );
        ScriptedReply::Text(assign("1", "second try").to_string())
    });
    llm.push_json(&app("FAIL", json!(null), "still nothing"));
    let hooks = Arrived::default();
    let mut states = vec![];
    while let Some(r) = round.next_step(&hooks).await {
        states.push((r.step.agent_name.clone(), r.step.state_after.clone()));
    }
    assert_eq!(
        states,
        [
            ("HostAgent".to_owned(), "ASSIGN".to_owned()),
            ("AppAgent/notes".into(), "FAIL".into()),
            ("HostAgent".into(), "ASSIGN".into()),
            ("AppAgent/sheet".into(), "FAIL".into()),
        ]
    );
    assert!(matches!(round.end(), Some(RoundEnd::Failed(r)) if r.contains("re-plan limit")));
}

#[tokio::test]
async fn unknown_status_is_an_error() {
    let llm = ScriptedLlm::start().await.unwrap();
    let mut round = round(
        services(&llm, AgentSettings::default()),
        Arc::new(desktop()),
        "x",
    );
    llm.push_json(&host("DANCE", json!({})));
    let r = round.next_step(&Arrived::default()).await.unwrap();
    assert_eq!(r.step.state_after, "ERROR");
    assert!(matches!(round.end(), Some(RoundEnd::Failed(m)) if m.contains("DANCE")));
    assert!(round.next_step(&Arrived::default()).await.is_none());
}

#[tokio::test]
async fn a_failing_critical_phase_ends_the_round_as_error() {
    let llm = ScriptedLlm::start().await.unwrap();
    let settings = AgentSettings {
        max_reasks: 0,
        ..AgentSettings::default()
    };
    let mut round = round(services(&llm, settings), Arc::new(desktop()), "x");
    llm.push_text("I cannot answer in JSON");
    let r = round.next_step(&Arrived::default()).await.unwrap();
    assert_eq!(r.step.state_after, "ERROR");
    let failed: Vec<_> = r
        .step
        .phases
        .iter()
        .filter(|p| !p.success)
        .map(|p| p.phase.as_str())
        .collect();
    assert_eq!(failed, ["llm_interaction"]);
    // The round's failure is told in a person's terms; the strategy and phase are in the step's phases
    // and the log, not in the task's result.
    assert!(
        matches!(round.end(), Some(RoundEnd::Failed(m))
            if m.contains("the model gave no usable answer") && !m.contains("host_llm_interaction")),
        "{:?}",
        round.end()
    );
}

#[tokio::test]
async fn the_step_limit_ends_the_round() {
    let llm = ScriptedLlm::start().await.unwrap();
    let settings = AgentSettings {
        max_steps: 2,
        ..AgentSettings::default()
    };
    let mut round = round(services(&llm, settings), Arc::new(desktop()), "x");
    llm.push_json(&host("CONTINUE", json!({})));
    llm.push_json(&host("CONTINUE", json!({})));
    let hooks = Arrived::default();
    assert!(round.next_step(&hooks).await.is_some());
    assert!(round.next_step(&hooks).await.is_some());
    assert!(round.next_step(&hooks).await.is_none());
    assert!(matches!(round.end(), Some(RoundEnd::Failed(m)) if m.contains("step limit")));
    assert_eq!(llm.remaining(), 0);
}

#[tokio::test]
async fn a_batch_checks_each_control_before_acting_on_it() {
    let llm = ScriptedLlm::start().await.unwrap();
    let desktop = desktop();
    // Clicking Copy disables Title: the next action of the batch must not run on it.
    let desktop = {
        let d = desktop;
        d.set_disables_on_click("notes", "Copy", "Title");
        Arc::new(d)
    };
    let mut round = round(
        services(&llm, AgentSettings::default()),
        desktop.clone(),
        "x",
    );
    llm.push_json(&assign("0", "edit"));
    llm.push_fn(by_name(|id| {
        app(
            "CONTINUE",
            json!([
                {"function": "click_input", "arguments": {"id": id("Copy")}},
                {"function": "set_edit_text", "arguments": {"id": id("Title"), "text": "t"}},
                {"function": "click_input", "arguments": {"id": id("Body")}}
            ]),
            "",
        )
    }));
    let hooks = Arrived::default();
    round.next_step(&hooks).await.unwrap();
    let r = round.next_step(&hooks).await.unwrap();
    let results: Vec<_> = r
        .step
        .actions
        .iter()
        .map(|a| a.result.clone().unwrap())
        .collect();
    assert_eq!(results[0].status, v1::ResultStatus::Success as i32);
    assert_eq!(results[1].status, v1::ResultStatus::Failure as i32);
    assert!(
        results[1].error.contains("disabled"),
        "{}",
        results[1].error
    );
    assert_eq!(results[2].status, v1::ResultStatus::Skipped as i32);
    assert_eq!(
        desktop.actions(),
        ["select_application_window", "click_input"]
    );
}

#[tokio::test]
async fn confirm_policy_always_holds_every_action() {
    let llm = ScriptedLlm::start().await.unwrap();
    let settings = AgentSettings {
        confirm_always: true,
        ..AgentSettings::default()
    };
    let desktop = Arc::new(desktop());
    let mut round = round(services(&llm, settings), desktop.clone(), "x");
    llm.push_json(&assign("0", "edit"));
    let hooks = Arrived {
        decision: Some(Decision {
            approve: true,
            reason: String::new(),
        }),
        ..Arrived::default()
    };
    let held = round.next_step(&hooks).await.unwrap();
    assert_eq!(held.step.state_after, "CONFIRM");
    assert!(desktop.actions().is_empty());
    let approved = round.next_step(&hooks).await.unwrap();
    assert_eq!(approved.step.state_after, "ASSIGN");
    assert_eq!(desktop.actions(), ["select_application_window"]);
    assert_eq!(round.state(), "AppAgent/notes:CONTINUE");
}

#[tokio::test]
async fn screenshot_runs_its_click_then_observes_again_without_finishing() {
    let llm = ScriptedLlm::start().await.unwrap();
    let desktop = Arc::new(desktop());
    let mut round = round(
        services(&llm, AgentSettings::default()),
        desktop.clone(),
        "x",
    );
    llm.push_json(&assign("0", "look"));
    llm.push_fn(by_name(|id| {
        app(
            "SCREENSHOT",
            json!({"function": "click_input", "arguments": {"id": id("Copy")}}),
            "",
        )
    }));
    llm.push_fn(|req| {
        // A fresh clean + annotated pair, and the crop of the control the SCREENSHOT step clicked.
        assert_eq!(
            req.image_urls().len(),
            3,
            "a fresh clean + annotated pair and the last control"
        );
        ScriptedReply::Text(app("FINISH", json!(null), "seen").to_string())
    });
    let hooks = Arrived::default();
    round.next_step(&hooks).await.unwrap();
    let looked = round.next_step(&hooks).await.unwrap();
    assert_eq!(looked.step.status, "SCREENSHOT");
    // Seed 001: `Status: SCREENSHOT` with a `click_input` runs the click, then observes again; the
    // subtask is not finished.
    assert_eq!(looked.step.state_after, "CONTINUE");
    assert_eq!(looked.step.actions.len(), 1, "{:?}", looked.step.actions);
    assert_eq!(looked.step.actions[0].function, "click_input");
    let captures_before = desktop
        .log()
        .iter()
        .filter(|c| c.tool_name == "capture_window_screenshot")
        .count();
    let done = round.next_step(&hooks).await.unwrap();
    assert_eq!(done.step.state_after, "FINISH");
    let captures_after = desktop
        .log()
        .iter()
        .filter(|c| c.tool_name == "capture_window_screenshot")
        .count();
    assert_eq!(captures_after, captures_before + 1);
    assert_eq!(
        desktop.actions(),
        ["select_application_window", "click_input"]
    );
}

#[tokio::test]
async fn an_approved_action_is_checked_again_before_it_runs() {
    let llm = ScriptedLlm::start().await.unwrap();
    let desktop = Arc::new(desktop());
    let mut round = round(
        services(&llm, AgentSettings::default()),
        desktop.clone(),
        "copy",
    );
    llm.push_json(&assign("0", "copy the note"));
    llm.push_fn(confirm_click());
    let hooks = Arrived {
        decision: Some(Decision {
            approve: true,
            reason: "ok".into(),
        }),
        ..Arrived::default()
    };
    round.next_step(&hooks).await.unwrap();
    round.next_step(&hooks).await.unwrap();
    // While the action waited for approval, its control became disabled.
    desktop.set_enabled("notes", "Copy", false);
    let approved = round.next_step(&hooks).await.unwrap();
    let result = approved.step.actions[0].result.clone().unwrap();
    assert_eq!(result.status, v1::ResultStatus::Failure as i32);
    assert!(result.error.contains("disabled"), "{}", result.error);
    assert!(!desktop.actions().contains(&"click_input".to_owned()));
}

#[tokio::test]
async fn an_app_error_returns_to_the_host_with_the_error_in_its_prompt_within_the_limit() {
    // Seed 002: the HostAgent detects failures and re-plans. An AppAgent whose reply is unusable even
    // after asking again ends its subtask in ERROR; the HostAgent sees the error text and re-plans,
    // bounded by the same re-plan limit as FAIL.
    let llm = ScriptedLlm::start().await.unwrap();
    let settings = AgentSettings {
        max_replans: 1,
        max_reasks: 0,
        ..AgentSettings::default()
    };
    let mut round = round(services(&llm, settings), Arc::new(desktop()), "x");
    llm.push_json(&assign("0", "first try"));
    llm.push_text("no JSON from the notes agent");
    llm.push_fn(|req| {
        let text = req.text();
        assert!(
            text.contains("ERROR") && text.contains("the model gave no usable answer"),
            "the host re-plans with the AppAgent's error in view: {text}"
        );
        ScriptedReply::Text(assign("1", "second try").to_string())
    });
    llm.push_text("no JSON from the sheet agent either");
    let hooks = Arrived::default();
    let mut states = vec![];
    while let Some(r) = round.next_step(&hooks).await {
        states.push((r.step.agent_name.clone(), r.step.state_after.clone()));
    }
    assert_eq!(
        states,
        [
            ("HostAgent".to_owned(), "ASSIGN".to_owned()),
            ("AppAgent/notes".into(), "ERROR".into()),
            ("HostAgent".into(), "ASSIGN".into()),
            ("AppAgent/sheet".into(), "ERROR".into()),
        ]
    );
    assert_eq!(round.previous_subtasks()[0]["status"], "ERROR");
    assert!(
        matches!(round.end(), Some(RoundEnd::Failed(r)) if r.contains("re-plan limit") && r.contains("error")),
        "{:?}",
        round.end()
    );
}

#[tokio::test]
async fn an_approved_finish_batch_keeps_its_result() {
    // The operator holds every action (confirm policy ALWAYS); the AppAgent's batch says FINISH with its
    // result. Once approved it runs, and the subtask finishes with that result, not an empty one.
    let llm = ScriptedLlm::start().await.unwrap();
    let settings = AgentSettings {
        confirm_always: true,
        ..AgentSettings::default()
    };
    let desktop = Arc::new(desktop());
    let mut round = round(services(&llm, settings), desktop.clone(), "copy");
    llm.push_json(&assign("0", "copy the note"));
    llm.push_fn(by_name(|id| {
        app(
            "FINISH",
            json!({"function": "click_input", "arguments": {"id": id("Copy")}}),
            "copied 42",
        )
    }));
    let approve = Arrived {
        decision: Some(Decision {
            approve: true,
            reason: "ok".into(),
        }),
        ..Arrived::default()
    };
    let states: Vec<String> = [
        round.next_step(&approve).await.unwrap(),
        round.next_step(&approve).await.unwrap(),
        round.next_step(&approve).await.unwrap(),
        round.next_step(&approve).await.unwrap(),
    ]
    .iter()
    .map(|r| r.step.state_after.clone())
    .collect();
    assert_eq!(states, ["CONFIRM", "ASSIGN", "CONFIRM", "FINISH"]);
    assert_eq!(desktop.actions().last().unwrap(), "click_input");
    let last = round.previous_subtasks().last().unwrap().clone();
    assert_eq!(last["status"], "FINISH");
    assert_eq!(
        last["result"], "copied 42",
        "the approved batch's result is kept"
    );
}

#[tokio::test]
async fn an_app_agent_pending_asks_and_resumes_with_the_answer() {
    let llm = ScriptedLlm::start().await.unwrap();
    let mut round = round(
        services(&llm, AgentSettings::default()),
        Arc::new(desktop()),
        "fill the note",
    );
    llm.push_json(&assign("0", "fill the note"));
    llm.push_json(
        &json!({"observation": "window", "thought": "need input", "status": "PENDING",
                          "plan": [], "action": null, "questions": ["Which total?"]}),
    );
    llm.push_fn(|req| {
        assert!(
            req.text().contains("41.5"),
            "the answer reaches the AppAgent's prompt"
        );
        ScriptedReply::Text(app("FINISH", json!(null), "filled 41.5").to_string())
    });
    let hooks = Arrived {
        answers: Some(vec!["41.5".into()]),
        ..Arrived::default()
    };
    round.next_step(&hooks).await.unwrap();
    let asked = round.next_step(&hooks).await.unwrap();
    assert_eq!(asked.step.agent_name, "AppAgent/notes");
    assert_eq!(asked.step.state_after, "PENDING");
    assert!(
        matches!(&asked.control.next, Next::Ask { questions } if questions[0].text == "Which total?")
    );
    assert_eq!(round.pending_questions(), ["Which total?"]);
    let resumed = round.next_step(&hooks).await.unwrap();
    assert_eq!(resumed.step.agent_name, "AppAgent/notes");
    assert_eq!(resumed.step.state_after, "FINISH");
    assert_eq!(round.blackboard().questions[0]["answer"], "41.5");
    assert_eq!(round.state(), "HostAgent:CONTINUE");
}

/// Issue 31: a modal dialog keeps the window manager from activating the window the HostAgent
/// selects, and the model keeps selecting it. After `--host-repeat-warn` (N) identical failures the
/// HostAgent's prompt says it makes no progress; after `--host-repeat-fail` (M) more the round ends with
/// that reason — within N+M steps, not at the step limit.
#[tokio::test]
async fn a_host_action_failing_the_same_way_ends_the_round_within_n_plus_m_steps() {
    let llm = ScriptedLlm::start().await.unwrap();
    let settings = AgentSettings {
        host_repeat_warn: 2,
        host_repeat_fail: 3,
        max_steps: 30,
        ..AgentSettings::default()
    };
    let desktop = Arc::new(desktop());
    desktop.block_selection(
        "notes",
        "the window manager did not activate 'Notes - today'",
    );
    let mut round = round(services(&llm, settings), desktop.clone(), "copy the note");
    for i in 0..5 {
        llm.push_fn(move |req| {
            let text = req.role_text("user");
            let warned = text.contains("[No progress]");
            // The warning comes after N = 2 failures, and says how many more end the round.
            assert_eq!(warned, i >= 2, "step {i}: {text}");
            if i == 2 {
                assert!(
                    text.contains(
                        "`select_application_window on [0]Notes - today [failure: the window \
                         manager did not activate 'Notes - today']` happened 2 times in a row"
                    ) && text.contains("after 3 more such failures the round fails"),
                    "{text}"
                );
            }
            ScriptedReply::Text(assign("0", "copy the note").to_string())
        });
    }
    let hooks = Arrived::default();
    let mut states = vec![];
    while let Some(r) = round.next_step(&hooks).await {
        states.push(r.step.state_after.clone());
    }
    assert_eq!(llm.remaining(), 0, "{states:?}");
    assert_eq!(states.len(), 5, "ended within N+M steps: {states:?}");
    assert_eq!(states.last().unwrap(), "FAIL", "{states:?}");
    assert!(
        matches!(round.end(), Some(RoundEnd::Failed(m))
            if m.starts_with("HostAgent: no progress: `select_application_window on [0]")
                && m.contains("happened 5 times in a row")),
        "{:?}",
        round.end()
    );
    // Every selection was sent and failed; nothing else ran.
    assert_eq!(
        desktop.actions(),
        vec!["select_application_window".to_owned(); 5]
    );
}
