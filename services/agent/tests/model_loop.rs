//! What the model is told about its own actions, through whole rounds against the executor double and the
//! scripted OpenAI-compatible model (which records every prompt): a batch whose first action fails shows
//! it as failed with its error and the rest as skipped, and its FINISH does not end the subtask; the same
//! action on an unchanged screen is told after N repeats and fails back to the HostAgent after M more;
//! saved screenshots reach the next prompts as images.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::common::*;
use serde_json::json;
use ufo_agent::agents::AgentSettings;
use ufo_agent::round::{Arrived, RoundEnd};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};

#[tokio::test]
async fn a_failed_first_action_is_told_with_its_error_and_the_rest_skipped_and_finish_waits() {
    let llm = ScriptedLlm::start().await.unwrap();
    let d = Arc::new(desktop());
    let mut round = round(
        services(&llm, AgentSettings::default()),
        d.clone(),
        "apply and save the sheet",
    );
    llm.push_json(&assign("1", "apply and save"));
    // Apply fails in the executor double; FINISH is proposed with the batch.
    llm.push_fn(by_name(|id| {
        app(
            "FINISH",
            json!([
                {"function": "click_input", "arguments": {"id": id("Apply")}, "status": "CONTINUE"},
                {"function": "set_edit_text", "arguments": {"id": id("Cell"), "text": "7"}, "status": "CONTINUE"},
                {"function": "click_input", "arguments": {"id": id("Save")}, "status": "FINISH"}
            ]),
            "saved",
        )
    }));
    llm.push_fn(|req| {
        let text = req.role_text("user");
        let apply = req.control_id("Apply").unwrap();
        let cell = req.control_id("Cell").unwrap();
        let save = req.control_id("Save").unwrap();
        for needle in [
            format!("click_input on [{apply}]Apply [failure: "),
            format!(
                "set_edit_text on [{cell}]Cell [skipped: an earlier action of the batch failed]"
            ),
            format!("click_input on [{save}]Save [skipped: an earlier action of the batch failed]"),
        ] {
            assert!(text.contains(&needle), "prompt lacks {needle}: {text}");
        }
        ScriptedReply::Text(app("FAIL", json!([]), "Apply does not work").to_string())
    });
    llm.push_json(&host("FINISH", json!({"result": "could not apply"})));
    let hooks = Arrived::default();
    let mut records = Vec::new();
    while let Some(r) = round.next_step(&hooks).await {
        records.push(r);
    }
    assert_eq!(llm.remaining(), 0, "every scripted reply was asked for");
    let batch = &records[1].step;
    assert_eq!(batch.status, "FINISH");
    assert_eq!(
        batch.state_after, "CONTINUE",
        "a FINISH whose batch failed does not finish the subtask"
    );
    assert!(records[2].step.agent_name.starts_with("AppAgent/"));
    // The failure's own error text is what the next prompt carried.
    let error = &batch.actions[0].result.as_ref().unwrap().error;
    assert!(!error.is_empty());
    let prompt = llm.requests()[2].role_text("user");
    assert!(prompt.contains(&format!("[failure: {error}]")), "{prompt}");
    assert_eq!(
        d.text_of("sheet", "Cell").as_deref(),
        Some(""),
        "skipped actions did not run"
    );
    assert_eq!(
        round.end(),
        Some(&RoundEnd::Finished("could not apply".into()))
    );
}

#[tokio::test]
async fn the_same_action_on_an_unchanged_screen_is_told_after_n_and_fails_after_m_more() {
    let llm = ScriptedLlm::start().await.unwrap();
    let d = Arc::new(desktop());
    let settings = AgentSettings {
        no_progress_warn: 2,
        no_progress_fail: 1,
        ..AgentSettings::default()
    };
    let mut round = round(services(&llm, settings), d.clone(), "copy the note");
    llm.push_json(&assign("0", "copy the note"));
    // The double's screen never changes: every click on Copy is a repeat on an unchanged screen.
    let click = || {
        by_name(|id| {
            app(
                "CONTINUE",
                json!({"function": "click_input", "arguments": {"id": id("Copy")}}),
                "",
            )
        })
    };
    llm.push_fn(click());
    llm.push_fn(move |req| {
        assert!(
            !req.role_text("user").contains("[No progress]"),
            "one repeat is not yet worth a warning"
        );
        click()(req)
    });
    llm.push_fn(move |req| {
        let text = req.role_text("user");
        assert!(
            text.contains("[No progress]\n`click_input on [3]Copy` ran 2 times in a row"),
            "{text}"
        );
        click()(req)
    });
    // No AppAgent prompt after the M-th repeat: the subtask fails back to the HostAgent with the reason.
    llm.push_fn(|req| {
        let text = req.role_text("user");
        assert!(text.contains("[Available targets]"), "a HostAgent prompt");
        assert!(
            text.contains(r#""status":"FAIL""#)
                && text.contains("no progress: `click_input on [3]Copy` ran 3 times in a row"),
            "{text}"
        );
        ScriptedReply::Text(host("FAIL", json!({"comment": "stuck"})).to_string())
    });
    let hooks = Arrived::default();
    let mut records = Vec::new();
    while let Some(r) = round.next_step(&hooks).await {
        records.push(r);
    }
    assert_eq!(llm.remaining(), 0);
    let failed = &records[4].step;
    assert!(failed.agent_name.starts_with("AppAgent/"));
    assert_eq!(
        (failed.status.as_str(), failed.state_after.as_str()),
        ("FAIL", "FAIL")
    );
    assert!(failed.actions.is_empty(), "the repeat was not run again");
    assert_eq!(
        d.actions().iter().filter(|a| *a == "click_input").count(),
        3
    );
    assert!(matches!(round.end(), Some(RoundEnd::Failed(_))));
}

#[tokio::test]
async fn a_saved_screenshot_reaches_the_next_prompts_as_an_image() {
    let llm = ScriptedLlm::start().await.unwrap();
    let d = Arc::new(desktop());
    let settings = AgentSettings {
        blackboard_images: 1,
        blackboard_image_max: (50, 50),
        ..AgentSettings::default()
    };
    let mut round = round(services(&llm, settings), d, "read the note");
    llm.push_json(&assign("0", "read the note"));
    llm.push_fn(|req| {
        assert_eq!(req.image_urls().len(), 2, "clean and annotated only");
        let mut reply = app("FINISH", json!([]), "total=42");
        reply["save_screenshot"] = json!({"save": true, "reason": "the total"});
        ScriptedReply::Text(reply.to_string())
    });
    llm.push_fn(|req| {
        let text = req.role_text("user");
        assert!(
            text.contains(r#"Blackboard image_0 ({"saving reason":"the total""#),
            "{text}"
        );
        // The desktop screenshot, then the blackboard image.
        let urls = req.image_urls();
        assert_eq!(urls.len(), 2);
        ScriptedReply::Text(host("FINISH", json!({"result": "42"})).to_string())
    });
    let hooks = Arrived::default();
    while round.next_step(&hooks).await.is_some() {}
    assert_eq!(llm.remaining(), 0);
    assert_eq!(round.end(), Some(&RoundEnd::Finished("42".into())));
    // Downscaled to the configured size.
    let urls = llm.requests()[2].image_urls();
    let b64 = urls[1].split_once(',').unwrap().1;
    let bytes = base64_decode(b64);
    let img = image::load_from_memory(&bytes).unwrap();
    assert!(
        img.width() <= 50 && img.height() <= 50,
        "{}x{}",
        img.width(),
        img.height()
    );
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).unwrap()
}
