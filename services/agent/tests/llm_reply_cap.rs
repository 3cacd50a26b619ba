//! The model reply size cap against a local HTTP stand-in that streams a 200 MB reply, generated lazily
//! (one 64 KiB chunk reused): the client stops with [`LlmError::TooLarge`] after reading about the cap,
//! and the process's resident memory stays near where it was.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;
use ufo_agent::llm::openai::{OpenAiCompatible, OpenAiConfig};
use ufo_agent::llm::{ChatModel, ChatRequest, LlmError, Message, PriceTable, ResponseFormat, Role};

const REPLY_BYTES: u64 = 200 * 1024 * 1024;
const CHUNK: usize = 64 * 1024;

/// Reads one request (headers, then `Content-Length` bytes of body).
async fn read_request(socket: &mut tokio::net::TcpStream) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    let header_end = loop {
        let n = socket.read(&mut byte).await.unwrap();
        assert!(n > 0, "client closed before sending a request");
        buf.extend_from_slice(&byte[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse().unwrap());
    while buf.len() < header_end + length {
        let n = socket.read(&mut byte).await.unwrap();
        assert!(n > 0);
        buf.extend_from_slice(&byte[..n]);
    }
}

/// Serves one request with a `REPLY_BYTES` JSON-looking body, chunked (no `Content-Length`, so the cap
/// must be enforced while streaming) or with its length declared. Returns the bytes it managed to send.
async fn huge_reply_server(declare_length: bool) -> (String, Arc<AtomicU64>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let sent = Arc::new(AtomicU64::new(0));
    let counter = sent.clone();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        read_request(&mut socket).await;
        let head = if declare_length {
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {REPLY_BYTES}\r\n\r\n"
            )
        } else {
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
                .to_owned()
        };
        if socket.write_all(head.as_bytes()).await.is_err() {
            return;
        }
        let payload = vec![b'a'; CHUNK];
        let mut framed = format!("{CHUNK:x}\r\n").into_bytes();
        framed.extend_from_slice(&payload);
        framed.extend_from_slice(b"\r\n");
        let piece = if declare_length { &payload } else { &framed };
        let mut written = 0u64;
        while written < REPLY_BYTES {
            // The client hangs up once it has seen enough: that ends the stream.
            if socket.write_all(piece).await.is_err() {
                break;
            }
            written += CHUNK as u64;
            counter.store(written, Ordering::SeqCst);
        }
        let _ = socket.write_all(b"0\r\n\r\n").await;
    });
    (url, sent)
}

fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::text(Role::User, "hi")],
        temperature: None,
        max_tokens: None,
        response_format: ResponseFormat::JsonObject,
    }
}

async fn call(url: &str, cap: u64) -> LlmError {
    let mut config = OpenAiConfig::openai(url, "gpt-test");
    config.max_reply_bytes = cap;
    config.retry.max_retries = 0;
    let model = OpenAiCompatible::new(config, Arc::new(PriceTable::default())).unwrap();
    model.chat(&request()).await.unwrap_err()
}

#[tokio::test]
async fn a_200_mb_streamed_reply_stops_at_the_cap_and_memory_stays_flat() {
    const CAP: u64 = 4 * 1024 * 1024;
    // Warm the HTTP client and allocator with a first capped call, then measure a second.
    let (url, _) = huge_reply_server(false).await;
    let _ = call(&url, CAP).await;
    let before = vm_rss_kib();
    let (url, sent) = huge_reply_server(false).await;
    let err = call(&url, CAP).await;
    let after = vm_rss_kib();
    let sent = sent.load(Ordering::SeqCst);
    println!(
        "VmRSS before {before} KiB, after {after} KiB (delta {} KiB); server wrote {} KiB of {} KiB",
        after as i64 - before as i64,
        sent / 1024,
        REPLY_BYTES / 1024
    );
    assert!(matches!(err, LlmError::TooLarge { limit: CAP }), "{err}");
    assert!(err.to_string().contains("size cap"), "{err}");
    assert!(
        sent < REPLY_BYTES / 4,
        "the client read far past the cap: {sent}"
    );
    assert!(
        after < before + 8 * 1024,
        "RSS grew from {before} KiB to {after} KiB"
    );
}

#[tokio::test]
async fn a_declared_length_above_the_cap_is_refused_before_reading() {
    let (url, _) = huge_reply_server(true).await;
    let err = call(&url, 1024 * 1024).await;
    assert!(
        matches!(err, LlmError::TooLarge { limit: 1_048_576 }),
        "{err}"
    );
}

#[tokio::test]
async fn a_reply_under_the_cap_still_works() {
    let llm = ufo_agent::testing::ScriptedLlm::start().await.unwrap();
    llm.push_text("{\"ok\": true}");
    let mut config = OpenAiConfig::openai(llm.base_url(), "gpt-test");
    config.max_reply_bytes = 4096;
    let model = OpenAiCompatible::new(config, Arc::new(PriceTable::default())).unwrap();
    assert_eq!(model.chat(&request()).await.unwrap().text, "{\"ok\": true}");
}
