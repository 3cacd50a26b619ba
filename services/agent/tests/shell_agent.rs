//! The built-in shell agent (issue 34, the seed's `Bash`) in a round with the scripted model and a real
//! executor (its own headless desktop, over gRPC) whose `run_command` allows `cat` and `ls` in a work
//! directory: the HostAgent sees `shell` among its targets and assigns it a subtask; the agent's loop
//! offers the model `shell__run`; a call the executor refuses (a path outside the directory) and one it
//! runs both reach the model's next prompt — the refusal's reason, then the file's content — and the
//! result reaches the HostAgent through the blackboard.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::*;
use serde_json::json;
use ufo_agent::agents::HostAgent;
use ufo_agent::memory::Blackboard;
use ufo_agent::round::{Arrived, Round, RoundEnd};
use ufo_agent::testing::{ScriptedLlm, ScriptedReply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_assigns_the_shell_and_the_command_output_reaches_the_model() {
    let llm = ScriptedLlm::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().canonicalize().unwrap();
    std::fs::write(work.join("notes.txt"), "total=42\n").unwrap();
    let exec = ShellExecutor::start(&work, "cat,ls").await;
    let services = services(&llm, shell_settings(None));
    let mut round = Round::new(
        "s-1",
        1,
        "what is the total in notes.txt?",
        0,
        HostAgent::new(services),
        Blackboard::default(),
        vec![],
        exec.dispatcher.clone(),
    )
    .unwrap();

    llm.push_fn(|req| {
        let text = req.text();
        assert!(
            text.contains("\"name\":\"shell\",\"type\":\"ThirdPartyAgent\""),
            "{text}"
        );
        assert!(
            text.contains("Runs cat and ls in the work directory"),
            "{text}"
        );
        ScriptedReply::Text(assign(&target_label(req, "shell"), "read notes.txt").to_string())
    });
    let outside = json!({"function": "shell__run",
                         "arguments": {"program": "cat", "args": ["/etc/passwd"]}});
    llm.push_fn(move |req| {
        let text = req.text();
        // The one tool, with the executor's parameters; the AppAgent's run_command is not offered.
        assert!(
            text.contains("- shell__run(program: string, args?: array"),
            "{text}"
        );
        assert!(!text.contains("run_command("), "{text}");
        ScriptedReply::Text(third("CONTINUE", outside.clone(), "").to_string())
    });
    let inside = json!({"function": "shell__run",
                        "arguments": {"program": "cat", "args": ["notes.txt"]}});
    llm.push_fn(move |req| {
        let text = req.text();
        // The executor's refusal, with its reason.
        assert!(
            text.contains("[failure: invalid parameters for run_command"),
            "{text}"
        );
        assert!(text.contains("is outside the working directory"), "{text}");
        ScriptedReply::Text(third("CONTINUE", inside.clone(), "").to_string())
    });
    llm.push_fn(|req| {
        let text = req.text();
        // The command's output reaches the model.
        assert!(text.contains("[success] →"), "{text}");
        assert!(text.contains("total=42"), "{text}");
        assert!(text.contains("\"exit_code\":0"), "{text}");
        ScriptedReply::Text(third("FINISH", json!(null), "the total is 42").to_string())
    });
    llm.push_fn(|req| {
        let text = req.text();
        assert!(text.contains("the total is 42"), "{text}");
        ScriptedReply::Text(host("FINISH", json!({"result": "42"})).to_string())
    });

    let none = Arrived::default();
    let mut steps = vec![];
    while let Some(step) = round.next_step(&none).await {
        steps.push(step);
    }
    assert_eq!(round.end(), Some(&RoundEnd::Finished("42".into())));
    let agents: Vec<_> = steps.iter().map(|s| s.step.agent_name.as_str()).collect();
    assert_eq!(
        agents,
        [
            "HostAgent",
            "ThirdPartyAgent/shell",
            "ThirdPartyAgent/shell",
            "ThirdPartyAgent/shell",
            "HostAgent"
        ]
    );
    let refused = &steps[1].step.actions[0];
    assert_eq!(refused.function, "shell__run");
    let ran = &steps[2].step.actions[0];
    assert_eq!(ran.function, "shell__run");
    let result = ran.result.as_ref().unwrap();
    assert_eq!(result.status, ufo_proto::v1::ResultStatus::Success as i32);
    let value = ufo_proto::json::from_value(result.result.clone().unwrap());
    assert_eq!(value["stdout"], "total=42\n", "{value}");
    assert_eq!(value["exit_code"], 0);
    assert!(
        ran.representation.contains("total=42"),
        "{}",
        ran.representation
    );
    assert_eq!(llm.requests().len(), 5);
    exec.stop().await;
}
