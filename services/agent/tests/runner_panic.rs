//! A bug that panics inside a step ends the task as failed, with the panic's message, instead of leaving
//! it `running` with its lease renewed for ever (found by the task suite, issue 20: a step panicked on a
//! control at AT-SPI's hidden-control position and the task never ended).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use crate::api_support::driver::ScriptDriver;
use crate::api_support::{Agent, KEY, Session, agent_config, eventually};
use serde_json::{Value, json};

#[tokio::test]
async fn a_panicking_step_fails_the_task_and_the_next_task_runs() {
    let session = Session::start().await;
    let driver: Arc<dyn ufo_agent::runner::TaskDriver> = Arc::new(ScriptDriver::default());
    // No executor runs here: the default desktop is checked in without a reset.
    let flags = [
        "--no-desktop-reset",
        "--lease-ms",
        "1500",
        "--claim-interval-ms",
        "50",
    ];
    let agent = Agent::start(agent_config(&session.url, &flags), Some(driver)).await;
    let http = ufo_testkit::http_client();
    let submit = |request: &'static str| {
        let http = http.clone();
        let url = format!("{}/v1/tasks", agent.http);
        async move {
            let res = http
                .post(url)
                .bearer_auth(KEY)
                .json(&json!({"request": request}))
                .send()
                .await
                .unwrap();
            assert_eq!(res.status(), 202);
            res.json::<Value>().await.unwrap()["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let task = |id: String| {
        let http = http.clone();
        let url = format!("{}/v1/tasks/{id}", agent.http);
        async move {
            let res = http.get(url).bearer_auth(KEY).send().await.unwrap();
            res.json::<Value>().await.unwrap()
        }
    };
    let id = submit("steps=3 panic=2 open the editor").await;
    let failed = eventually(30, "the panicking task fails", || async {
        let t = task(id.clone()).await;
        (t["status"] == "failed").then_some(t)
    })
    .await;
    let result = failed["result"].as_str().unwrap();
    assert!(
        result.contains("internal error") && result.contains("scripted bug at step 2"),
        "{result}"
    );
    assert_eq!(
        failed["totals"]["steps"], 1,
        "step 1 was recorded, step 2 was not"
    );
    // The runner's slot is free again: the next task runs to its end.
    let next = submit("steps=2 then this one").await;
    eventually(30, "the next task finishes", || async {
        (task(next.clone()).await["status"] == "finished").then_some(())
    })
    .await;
    agent.stop().await;
    session.stop().await;
}
