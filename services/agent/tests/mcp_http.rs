//! The MCP client over streamable HTTP (`transport: {type: http, url, token_file, ca_file}`) against a
//! real server built with the official Python SDK (`tests/mcp/http_server.py`): over TLS with a
//! private CA and a bearer token it lists and calls the server's tool; without the CA, with a wrong
//! token, or with a CA file that is not one, the server is unavailable with a reason that says which.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;
use std::process::Stdio;

use crate::common::certificates;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::{Child, Command};
use ufo_agent::mcp::{McpError, McpLimits, McpServer, McpServersFile};

/// Starts the Python server (TLS when `tls`), with the token and certificates written in `dir`;
/// returns it (killed on drop) and its port, read from its first line once it listens.
async fn start(dir: &Path, tls: bool) -> (Child, u16) {
    let (ca, cert, key) = certificates();
    std::fs::write(dir.join("token"), "s3cret\n").unwrap();
    std::fs::write(dir.join("ca.pem"), ca).unwrap();
    std::fs::write(dir.join("cert.pem"), cert).unwrap();
    std::fs::write(dir.join("key.pem"), key).unwrap();
    let script = format!("{}/tests/mcp/http_server.py", env!("CARGO_MANIFEST_DIR"));
    let mut cmd = Command::new("python3");
    cmd.arg(script).arg(dir.join("token"));
    if tls {
        cmd.arg(dir.join("cert.pem")).arg(dir.join("key.pem"));
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let port = lines
        .next_line()
        .await
        .unwrap()
        .expect("the server printed its port")
        .trim()
        .parse()
        .unwrap();
    (child, port)
}

/// The server `echo` reached at `url` with this transport's extra fields.
fn server(url: &str, extra: Value) -> McpServer {
    let mut transport = json!({"type": "http", "url": url});
    transport
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    let file = McpServersFile::parse(
        &json!({"servers": [{
            "name": "echo",
            "transport": transport,
            "bind": {"type": "applications", "applications": ["anything"]}
        }]})
        .to_string(),
        false,
    )
    .unwrap();
    McpServer::new(file.servers[0].clone(), McpLimits::default())
}

fn text(s: &str) -> Map<String, Value> {
    Map::from_iter([("text".to_owned(), json!(s))])
}

#[tokio::test]
async fn an_https_server_is_listed_and_called_with_its_token_and_private_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (_child, port) = start(dir.path(), true).await;
    let s = server(
        &format!("https://localhost:{port}/mcp"),
        json!({"token_file": dir.path().join("token"), "ca_file": dir.path().join("ca.pem")}),
    );
    let tools = s.tools().await.unwrap();
    assert_eq!(
        tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
        ["echo"]
    );
    let out = s.call("echo", text("over TLS")).await.unwrap();
    assert!(!out.is_error, "{out:?}");
    assert!(out.text.contains("echo: over TLS"), "{out:?}");
}

#[tokio::test]
async fn plain_http_works_too_and_a_wrong_token_is_refused_with_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let (_child, port) = start(dir.path(), false).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let s = server(&url, json!({"token_file": dir.path().join("token")}));
    let out = s.call("echo", text("plain")).await.unwrap();
    assert!(out.text.contains("echo: plain"), "{out:?}");

    std::fs::write(dir.path().join("wrong"), "guess").unwrap();
    let s = server(&url, json!({"token_file": dir.path().join("wrong")}));
    let e = s.tools().await.unwrap_err();
    assert!(matches!(e, McpError::Unavailable { .. }), "{e:?}");
    assert!(e.to_string().contains("401"), "{e}");
    let s = server(&url, json!({}));
    let e = s.tools().await.unwrap_err();
    assert!(e.to_string().contains("401"), "{e}");
}

#[tokio::test]
async fn without_the_ca_or_with_a_ca_file_that_is_not_one_the_reason_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let (_child, port) = start(dir.path(), true).await;
    let url = format!("https://localhost:{port}/mcp");
    let token = dir.path().join("token");

    // The system's roots do not know the private CA.
    let e = server(&url, json!({"token_file": token}))
        .tools()
        .await
        .unwrap_err();
    assert!(matches!(e, McpError::Unavailable { .. }), "{e:?}");
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");

    std::fs::write(dir.path().join("junk.pem"), "not a certificate\0\u{1}").unwrap();
    let e = server(
        &url,
        json!({"token_file": token, "ca_file": dir.path().join("junk.pem")}),
    )
    .tools()
    .await
    .unwrap_err();
    assert!(e.to_string().contains("holds no PEM certificate"), "{e}");

    let e = server(
        &url,
        json!({"token_file": token, "ca_file": dir.path().join("missing.pem")}),
    )
    .tools()
    .await
    .unwrap_err();
    assert!(e.to_string().contains("cannot read the CA file"), "{e}");
}
