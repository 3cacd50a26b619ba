//! Every integration test of ufo-agent, in one test binary (issue 37): each `tests/NAME.rs` is the module
//! `NAME` here, so its tests are `NAME::test` (`cargo nextest run -p ufo-agent --test it NAME::`). One
//! binary is linked after a change to the library instead of one per file (45 links took most of a
//! 5-minute rebuild; docs/build-time.md). nextest still runs each test in its own process.
//! `autotests = false` (Cargo.toml): a new `tests/*.rs` must be declared below, which
//! `every_test_file_is_a_module_of_this_binary` checks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The helpers the tests share.
mod api_support;
mod browser_support;
mod common;
mod tk_form;

// The tests, one module a former test binary.
mod api_agents;
mod api_mcp_policy;
mod api_replay;
mod api_rest;
mod api_runner;
mod api_schemathesis;
mod api_sse;
mod blob_uploads;
mod consent;
mod control;
mod derived_images;
mod desktop_pool;
mod direct_lease;
mod env_scheme;
mod fsm;
mod grounding_gtk;
mod grounding_service;
mod grounding_tk;
mod grpc_dispatcher;
mod kill_storm;
mod knowledge;
mod live_bench;
mod llm_client;
mod llm_reply_cap;
mod mcp_agent;
mod mcp_desktop;
mod mcp_http;
mod mcp_resume;
mod mcp_server;
mod model_loop;
mod ocr_threads;
mod parking;
mod prune;
mod real_executor;
mod real_executor_loop;
mod record_ahead;
mod recordings;
mod runner_panic;
mod security;
mod shell_agent;
mod store_outages;
mod strategies;
mod takeover;
mod viewer_browser;
mod web_search;
mod whole_task;

/// Cargo no longer finds test files by itself (`autotests = false`): a `tests/*.rs` not declared above
/// would silently never be compiled or run.
#[test]
fn every_test_file_is_a_module_of_this_binary() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let main = include_str!("main.rs");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let module = if path.is_dir() && path.join("mod.rs").is_file() {
            name.to_owned()
        } else if let Some(stem) = name.strip_suffix(".rs").filter(|s| *s != "main") {
            stem.to_owned()
        } else {
            continue;
        };
        if !main.lines().any(|l| l == format!("mod {module};")) {
            missing.push(module);
        }
    }
    assert!(
        missing.is_empty(),
        "tests/ has modules that tests/main.rs does not declare: {missing:?}"
    );
}
