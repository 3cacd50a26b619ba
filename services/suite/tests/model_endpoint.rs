//! The suite's model endpoint over real HTTP: the stand-in answers an agent prompt by its task's
//! demonstration; the forwarding mode (`--model-url`, for a real model) passes the call on unchanged and
//! measures it the same way; bad requests get a clear 4xx with `{error: {message}}`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use base64::Engine as _;
use serde_json::{Value, json};
use ufo_suite::standin::{Mode, ModelServer, Patience};
use ufo_suite::task::Task;

const TASK: &str = r#"
request = "Answer Yes in the Question dialog"
[[subtask]]
app = "Question"
do = "answer Yes"
steps = ["click the button named 'Yes'"]
[[check]]
file = "x"
equals = "y"
"#;

fn png(w: u32, h: u32) -> String {
    let img = image::RgbImage::from_pixel(w, h, image::Rgb([10, 20, 30]));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    base64::engine::general_purpose::STANDARD.encode(out.into_inner())
}

fn host_prompt(request: &str) -> Value {
    let user = format!(
        "[Request]\n{request}\n\n[Available targets]\n\
         {{\"label\":\"4\",\"name\":\"Question\",\"kind\":\"APPLICATION\",\"type\":\"Window\"}}\n\n\
         [Launchable applications]\nnone\n\n[Previous subtasks]\nnone\n\n[Previous plan]\nnone\n\n\
         [Your previous actions]\nnone\n"
    );
    json!({"model": "m", "messages": [
        {"role": "system", "content": "You are the HostAgent of a desktop automation system."},
        {"role": "user", "content": [
            {"type": "text", "text": "Current desktop screenshot:"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", png(40, 30))}},
            {"type": "text", "text": user}]}]})
}

async fn post(url: &str, body: &[u8]) -> (u16, Value) {
    let res = ufo_testkit::http_client()
        .post(format!("{url}/chat/completions"))
        .header("content-type", "application/json")
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    (
        res.status().as_u16(),
        res.json().await.unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn the_stand_in_answers_through_a_forwarder_and_both_measure_the_prompt() {
    let task = Task::parse(Path::new("q.toml"), TASK).unwrap();
    let patience = Patience {
        max_waits: 1,
        max_retries: 1,
    };
    let stand_in = ModelServer::start(Mode::StandIn(patience), 1 << 20)
        .await
        .unwrap();
    stand_in.begin(&task.request, task.subtasks.clone());
    let forwarder = ModelServer::start(
        Mode::Forward {
            base_url: stand_in.base_url(),
            api_key: Some("secret".into()),
        },
        1 << 20,
    )
    .await
    .unwrap();
    forwarder.begin(&task.request, Vec::new());

    let body = serde_json::to_vec(&host_prompt(&task.request)).unwrap();
    let (status, answer) = post(&forwarder.base_url(), &body).await;
    assert_eq!(status, 200, "{answer}");
    let reply: Value =
        serde_json::from_str(answer["choices"][0]["message"]["content"].as_str().unwrap()).unwrap();
    assert_eq!(reply["status"], "ASSIGN");
    assert_eq!(reply["function"], "select_application_window");
    assert_eq!(reply["arguments"]["id"], "4");
    for (forwarded, (tally, calls)) in [
        (true, forwarder.end(&task.request)),
        (false, stand_in.end(&task.request)),
    ] {
        // The call is kept for the task's prompts.jsonl: what the HostAgent was shown and the reply.
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0]["agent"], "host");
        assert!(calls[0]["text"].as_str().unwrap().contains("[Request]"));
        assert_eq!(calls[0]["images"], 1);
        assert_eq!(calls[0]["reply"].is_null(), forwarded, "{}", calls[0]);
        assert_eq!((tally.calls, tally.host_calls), (1, 1));
        assert_eq!((tally.size.images, tally.size.image_pixels), (1, 1200));
        assert!(
            tally.size.text_bytes > 200 && tally.size.image_bytes > 50,
            "{tally:?}"
        );
    }

    let models = reqwest::get(format!("{}/models", forwarder.base_url()))
        .await
        .unwrap()
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "ufo-suite-standin");
}

#[tokio::test]
async fn bad_requests_are_refused_with_a_reason() {
    let patience = Patience {
        max_waits: 1,
        max_retries: 1,
    };
    let server = ModelServer::start(Mode::StandIn(patience), 64 << 10)
        .await
        .unwrap();
    let url = server.base_url();
    let cases: [(&[u8], u16, &str); 4] = [
        (b"not json", 400, "not JSON"),
        (br#"{"messages": []}"#, 400, "no [Request] section"),
        (
            &serde_json::to_vec(&host_prompt("a task nobody runs")).unwrap(),
            400,
            "no running suite task has the request \"a task nobody runs\"",
        ),
        (&vec![b' '; 100 << 10], 413, "length limit exceeded"),
    ];
    for (body, want, says) in cases {
        let (status, answer) = post(&url, body).await;
        assert_eq!(status, want, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{message}");
    }
    let res = reqwest::get(format!("{url}/embeddings")).await.unwrap();
    assert_eq!(res.status(), 404);
}
