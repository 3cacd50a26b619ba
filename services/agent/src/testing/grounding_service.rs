//! A stand-in for an OmniParser grounding service (no GPU model or weights exist here): an HTTP server
//! speaking `omniparserserver`'s protocol — `POST /parse/` with `{"base64_image"}` answering
//! `{"parsed_content_list", "latency"}`, `GET /probe/` — whose answers are either real (the built-in
//! OCR run on the posted image, its boxes as fractions of the image) or scripted faults for the client's
//! degrade tests (a hang, garbage, an endless body, an HTTP error).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::vision::grounding::{OcrEngine, OcrGrounding, OcrOptions};

/// What the stand-in answers to `POST /parse/`.
#[derive(Clone)]
pub enum Behaviour {
    /// Real grounding: the built-in OCR engine on the posted image.
    Ocr(Arc<dyn OcrEngine>),
    /// This `parsed_content_list`, as given (whatever it holds).
    Fixed(Value),
    /// Never answers.
    Hang,
    /// A body that is not JSON.
    Garbage,
    /// A JSON body of about this many bytes (a list of elements that never seems to end).
    Huge(usize),
    /// This HTTP status with an error body.
    Status(u16),
}

/// A running stand-in.
pub struct GroundingService {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    calls: Arc<AtomicUsize>,
    last_auth: Arc<std::sync::Mutex<Option<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl GroundingService {
    /// `POST /parse/` calls answered so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The `Authorization` header of the last `POST /parse/`.
    pub fn last_authorization(&self) -> Option<String> {
        self.last_auth.lock().ok().and_then(|a| a.clone())
    }
}

impl Drop for GroundingService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct Shared {
    behaviour: Behaviour,
    calls: Arc<AtomicUsize>,
    last_auth: Arc<std::sync::Mutex<Option<String>>>,
}

/// Starts a stand-in on a free loopback port.
pub async fn start(behaviour: Behaviour) -> std::io::Result<GroundingService> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let calls = Arc::new(AtomicUsize::new(0));
    let last_auth = Arc::new(std::sync::Mutex::new(None));
    let shared = Shared {
        behaviour,
        calls: calls.clone(),
        last_auth: last_auth.clone(),
    };
    let app = axum::Router::new()
        .route(
            "/probe/",
            get(|| async { Json(json!({"message": "ready"})) }),
        )
        .route("/parse/", post(parse))
        .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
        .with_state(shared);
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(GroundingService {
        url,
        calls,
        last_auth,
        task,
    })
}

async fn parse(State(s): State<Shared>, headers: HeaderMap, Json(body): Json<Value>) -> Response {
    s.calls.fetch_add(1, Ordering::SeqCst);
    if let Ok(mut a) = s.last_auth.lock() {
        *a = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
    }
    let started = Instant::now();
    match s.behaviour {
        Behaviour::Hang => {
            std::future::pending::<()>().await;
            unreachable!()
        }
        Behaviour::Garbage => "<html>Internal Server Error".into_response(),
        Behaviour::Status(code) => (
            StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            "model failed",
        )
            .into_response(),
        Behaviour::Huge(bytes) => {
            let element =
                r#"{"type":"text","bbox":[0.1,0.1,0.2,0.2],"interactivity":true,"content":"x"},"#;
            let mut s = String::with_capacity(bytes + 64);
            s.push_str(r#"{"parsed_content_list":["#);
            while s.len() < bytes {
                s.push_str(element);
            }
            s.push_str(r#"{"type":"text","bbox":[0,0,1,1],"content":"end"}]}"#);
            Response::new(Body::from(s))
        }
        Behaviour::Fixed(list) => Json(json!({
            "parsed_content_list": list,
            "latency": started.elapsed().as_secs_f64(),
        }))
        .into_response(),
        Behaviour::Ocr(engine) => {
            let Some(b64) = body.get("base64_image").and_then(Value::as_str) else {
                return (StatusCode::UNPROCESSABLE_ENTITY, "base64_image is required")
                    .into_response();
            };
            let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(b64) else {
                return (StatusCode::BAD_REQUEST, "base64_image is not base64").into_response();
            };
            let list = tokio::task::spawn_blocking(move || ocr_list(engine, &bytes)).await;
            match list {
                Ok(Ok(list)) => Json(json!({
                    "parsed_content_list": list,
                    "latency": started.elapsed().as_secs_f64(),
                }))
                .into_response(),
                Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
            }
        }
    }
}

fn ocr_list(engine: Arc<dyn OcrEngine>, png: &[u8]) -> Result<Vec<Value>, String> {
    let img = image::load_from_memory(png)
        .map_err(|e| format!("not an image: {e}"))?
        .to_rgba8();
    let (w, h) = (f64::from(img.width()), f64::from(img.height()));
    let g = OcrGrounding::new(engine, OcrOptions::default());
    let elements = g.elements(&img).map_err(|e| e.to_string())?;
    Ok(elements
        .into_iter()
        .map(|e| {
            json!({
                "type": "text",
                "bbox": [
                    f64::from(e.bbox[0]) / w,
                    f64::from(e.bbox[1]) / h,
                    f64::from(e.bbox[2]) / w,
                    f64::from(e.bbox[3]) / h,
                ],
                "interactivity": false,
                "content": e.text,
            })
        })
        .collect())
}
