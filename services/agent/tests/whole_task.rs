//! A whole task at unit level (scripted LLM + executor double): the HostAgent assigns two subtasks to two
//! AppAgents, the blackboard carries the first result to the second, and a multi-action batch with a
//! failing middle action stops there with the rest skipped.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::*;
use serde_json::json;
use ufo_agent::agents::AgentSettings;
use ufo_agent::round::{Arrived, RoundEnd};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};
use ufo_proto::v1;

#[tokio::test]
async fn host_assigns_two_subtasks_and_the_blackboard_carries_the_result() {
    let llm = ScriptedLlm::start().await.unwrap();
    let desktop = Arc::new(desktop());
    let mut round = round(
        services(&llm, AgentSettings::default()),
        desktop.clone(),
        "copy the total into the sheet",
    );

    // 1. Host: read the total in Notes.
    llm.push_json(&assign("0", "read the total in Notes"));
    // 2. Notes AppAgent: read Body, finish with the result.
    llm.push_fn(by_name(|id| {
        app(
            "FINISH",
            json!({"function": "texts", "arguments": {"id": id("Body")}}),
            "total=42",
        )
    }));
    // 3. Host: now the sheet; its prompt must show the first result.
    llm.push_fn(|req| {
        assert!(
            req.text().contains("total=42"),
            "host prompt lacks the first result"
        );
        ScriptedReply::Text(assign("1", "enter 42 in the sheet").to_string())
    });
    // 4. Sheet AppAgent: a batch whose middle action fails.
    llm.push_fn(|req| {
        let text = req.text();
        assert!(text.contains("[Blackboard]") && text.contains("total=42"), "app prompt lacks the blackboard");
        assert!(text.contains("enter 42 in the sheet"), "app prompt lacks the subtask");
        assert_eq!(req.image_urls().len(), 2, "clean + annotated screenshots");
        let id = |n: &str| req.control_id(n).unwrap();
        ScriptedReply::Text(
            app(
                "FINISH",
                json!([
                    {"function": "set_edit_text", "arguments": {"id": id("Cell"), "text": "42"}, "status": "CONTINUE"},
                    {"function": "click_input", "arguments": {"id": id("Apply")}, "status": "CONTINUE"},
                    {"function": "click_input", "arguments": {"id": id("Save")}, "status": "FINISH"}
                ]),
                "entered",
            )
            .to_string(),
        )
    });
    // 5. Sheet AppAgent again (the failed batch did not finish the subtask): save.
    llm.push_fn(|req| {
        assert_eq!(
            req.image_urls().len(),
            3,
            "last selected control + clean + annotated"
        );
        assert!(
            req.text().contains("set_edit_text on ["),
            "previous actions listed"
        );
        let id = |n: &str| req.control_id(n).unwrap();
        ScriptedReply::Text(
            app(
                "FINISH",
                json!({"function": "click_input", "arguments": {"id": id("Save")}}),
                "saved 42",
            )
            .to_string(),
        )
    });
    // 6. Host: done.
    llm.push_json(&host(
        "FINISH",
        json!({"result": "the sheet holds 42", "comment": "done"}),
    ));

    let hooks = Arrived::default();
    let mut records = Vec::new();
    while let Some(r) = round.next_step(&hooks).await {
        records.push(r);
    }
    assert_eq!(
        round.end(),
        Some(&RoundEnd::Finished("the sheet holds 42".into()))
    );
    assert_eq!(records.len(), 6);
    assert_eq!(llm.remaining(), 0);

    // Step numbering, agents and states.
    let rows: Vec<_> = records
        .iter()
        .map(|r| {
            (
                r.step.step,
                r.step.agent_name.as_str(),
                r.step.state_before.as_str(),
                r.step.state_after.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (1, "HostAgent", "CONTINUE", "ASSIGN"),
            (2, "AppAgent/notes", "CONTINUE", "FINISH"),
            (3, "HostAgent", "CONTINUE", "ASSIGN"),
            (4, "AppAgent/sheet", "CONTINUE", "CONTINUE"),
            (5, "AppAgent/sheet", "CONTINUE", "FINISH"),
            (6, "HostAgent", "CONTINUE", "FINISH"),
        ]
    );
    // The batch stopped at the failing click; Save was skipped, never dispatched.
    let batch: Vec<_> = records[3]
        .step
        .actions
        .iter()
        .map(|a| a.result.as_ref().unwrap().status)
        .collect();
    assert_eq!(
        batch,
        [
            v1::ResultStatus::Success as i32,
            v1::ResultStatus::Failure as i32,
            v1::ResultStatus::Skipped as i32
        ]
    );
    assert_eq!(
        desktop.actions(),
        [
            "select_application_window",
            "texts",
            "select_application_window",
            "set_edit_text",
            "click_input",
            "click_input"
        ]
    );
    assert_eq!(desktop.text_of("sheet", "Cell").as_deref(), Some("42"));
    // Subtasks archived; AppAgents cached per application; the blackboard has the round's request and trajectories.
    let subtasks: Vec<_> = round
        .previous_subtasks()
        .iter()
        .map(|s| (s["status"].clone(), s["result"].clone()))
        .collect();
    assert_eq!(
        subtasks,
        [
            (json!("FINISH"), json!("total=42")),
            (json!("FINISH"), json!("saved 42"))
        ]
    );
    assert_eq!(round.apps().len(), 2);
    assert_eq!(round.blackboard().requests.len(), 1);
    assert_eq!(round.blackboard().trajectories.len(), 6);
    // Each step carries what RecordStepRequest stores: its memory item, blackboard entries and artifacts.
    assert_eq!(records[1].step.subtask, "read the total in Notes");
    let item = records[1].memory_item.clone().unwrap();
    assert_eq!(item["result"], "total=42");
    assert_eq!(item["agent_name"], "AppAgent/notes");
    assert!(
        records[1]
            .artifacts
            .iter()
            .any(|a| a.kind == v1::ArtifactKind::AnnotatedScreenshot)
    );
    assert!(
        records[0]
            .blackboard
            .iter()
            .any(|e| e.kind == v1::BlackboardKind::Request as i32)
    );
    // Cost and tokens are accumulated per step and for the round (scripted usage 100/20 per call).
    assert_eq!(records[0].step.input_tokens, 100);
    assert_eq!(round.totals().calls, 6);
    assert!((round.totals().cost - 6.0 * (100.0 * 1.0 + 20.0 * 2.0) / 1e6).abs() < 1e-12);
    // Every phase was timed.
    assert_eq!(records[1].step.phases.len(), 4);
}

#[tokio::test]
async fn a_round_is_rebuilt_from_what_the_session_store_holds() {
    let llm = ScriptedLlm::start().await.unwrap();
    let desktop = Arc::new(desktop());
    let services = services(&llm, AgentSettings::default());
    let mut first = round(services.clone(), desktop.clone(), "read the total");
    llm.push_json(&assign("0", "read the total in Notes"));
    llm.push_fn(by_name(|id| {
        app(
            "FINISH",
            json!({"function": "texts", "arguments": {"id": id("Body")}}),
            "total=42",
        )
    }));
    llm.push_json(&host("FINISH", json!({"result": "42"})));
    let hooks = Arrived::default();
    let mut stored = Vec::new();
    let mut board = v1::Blackboard::default();
    while let Some(r) = first.next_step(&hooks).await {
        stored.push(v1::MemoryItem {
            agent_name: r.step.agent_name.clone(),
            step: r.step.step,
            item: r.memory_item.map(ufo_proto::json::object_to_struct),
        });
        for e in r.blackboard {
            match v1::BlackboardKind::try_from(e.kind).unwrap() {
                v1::BlackboardKind::Question => board.questions.push(e),
                v1::BlackboardKind::Request => board.requests.push(e),
                v1::BlackboardKind::Trajectory => board.trajectories.push(e),
                v1::BlackboardKind::Image => board.images.push(e),
                v1::BlackboardKind::Unspecified => {}
            }
        }
    }
    // Index as the store would assign it (per kind, in order).
    for list in [&mut board.requests, &mut board.trajectories] {
        for (i, e) in list.iter_mut().enumerate() {
            e.index = i as u64;
        }
    }
    let host_memory = ufo_agent::memory::Memory::from_proto(&stored, "HostAgent");
    assert_eq!(&host_memory, &first.host().memory);
    let blackboard = ufo_agent::memory::Blackboard::from_proto(&board);
    assert_eq!(&blackboard, first.blackboard());
    let subtasks = ufo_agent::round::previous_subtasks_from_store(&stored);
    assert_eq!(subtasks, first.previous_subtasks());

    // A follow-up round resumes with all of it: the Notes AppAgent gets its memory back.
    let mut host = ufo_agent::agents::HostAgent::new(services);
    host.memory = host_memory;
    let mut second =
        ufo_agent::round::Round::new("s-1", 2, "again", 3, host, blackboard, subtasks, desktop)
            .unwrap()
            .with_stored_memory(stored.clone());
    llm.push_fn(|req| {
        assert!(
            req.text().contains("total=42"),
            "previous subtasks survive the rebuild"
        );
        ScriptedReply::Text(assign("0", "read it again").to_string())
    });
    llm.push_fn(|req| {
        assert!(
            req.text().contains("texts on ["),
            "the AppAgent remembers its earlier action"
        );
        ScriptedReply::Text(app("FAIL", json!(null), "gone").to_string())
    });
    second.next_step(&hooks).await.unwrap();
    let r = second.next_step(&hooks).await.unwrap();
    assert_eq!(r.step.step, 5);
    assert_eq!(second.apps()["notes"].memory.len(), 2);
}
