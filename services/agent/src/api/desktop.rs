//! The MCP desktop tools' backend ([`ufo_mcp_server::desktop`]): a checked call runs as one command batch
//! on an executor of the operator's registry, named by the caller (never an address, never a token of the
//! caller's), through the same gRPC dispatcher the runner uses, after the operator's consent policy
//! (`--policy-file`) judged every command: `deny` is refused (`permission_denied`), `confirm` too
//! (`failed_precondition`, "needs confirmation": a direct call has no person to hold it for; run it as a
//! task to be asked). The executor applies its own launch allow-list. Every call that names a
//! registered executor is recorded as a step of the caller's direct session ([`super::direct`]), refused
//! ones too; `screenshot` with `marks` draws the window's control ids with the AppAgent's marker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tracing::{Instrument as _, instrument};
use ufo_mcp_server::{DesktopCall, DesktopOutcome, Image, ToolError};
use ufo_proto::v1::ArtifactKind;

use super::direct::{DirectSessions, Recording, StepContent, action};
use crate::agents::policy::{Policy, Verdict};
use crate::agents::target::{TargetInfo, TargetKind};
use crate::dispatch::registry::ExecutorRegistry;
use crate::dispatch::{Command, CommandDispatcher, CommandResult, ResultStatus};
use crate::round::record;
use crate::vision::annotate::control_marks;
use crate::vision::{Marker, derived};

/// What desktop calls need: the policy, how to reach executors, where calls are recorded and how marks
/// are drawn.
pub struct Desktop {
    policy: Arc<Policy>,
    direct: DirectSessions,
    marker: Arc<Marker>,
    executors: Arc<ExecutorRegistry>,
    deadline_ms: u32,
    max_message_bytes: usize,
    retry_budget: Duration,
    dispatchers: Mutex<HashMap<String, Arc<dyn CommandDispatcher>>>,
}

impl std::fmt::Debug for Desktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desktop").finish_non_exhaustive()
    }
}

impl Desktop {
    /// The direct sessions the calls are recorded in.
    pub fn direct(&self) -> &DirectSessions {
        &self.direct
    }

    /// Desktop calls with `policy` on the executors of `executors`, with the runner's executor settings,
    /// recorded in `direct`, marked by `marker`.
    pub fn new(
        policy: Arc<Policy>,
        executors: Arc<ExecutorRegistry>,
        runner: &crate::config::RunnerConfig,
        direct: DirectSessions,
        marker: Arc<Marker>,
    ) -> Self {
        Self {
            policy,
            direct,
            marker,
            executors,
            deadline_ms: runner.executor_deadline_ms,
            max_message_bytes: runner.executor_max_message_bytes,
            retry_budget: Duration::from_millis(runner.executor_retry_budget_ms),
            dispatchers: Mutex::new(HashMap::new()),
        }
    }

    /// The dispatcher of the registered executor `name` (an address is refused).
    fn dispatcher(&self, name: &str) -> Result<Arc<dyn CommandDispatcher>, ToolError> {
        let (resolved, _) = self
            .executors
            .resolve(name)
            .map_err(|e| ToolError::invalid(format!("executor: {e}")))?;
        if resolved.is_empty() || resolved != name {
            return Err(ToolError::invalid(format!(
                "executor must be the name of an executor the operator registered, not an address ({name:?})"
            )));
        }
        let mut cache = self
            .dispatchers
            .lock()
            .map_err(|_| ToolError::new("internal", "the executor cache is poisoned"))?;
        if let Some(d) = cache.get(name) {
            return Ok(d.clone());
        }
        let conn = self
            .executors
            .connection(name, "")
            .map_err(|e| ToolError::invalid(format!("executor: {e}")))?;
        let d = self
            .executors
            .dispatcher(&conn, self.deadline_ms, self.max_message_bytes)
            .map_err(|e| ToolError::new("unavailable", format!("executor {name}: {e}")))?;
        let d: Arc<dyn CommandDispatcher> = Arc::new(d.with_retry_budget(self.retry_budget));
        cache.insert(name.to_owned(), d.clone());
        Ok(d)
    }

    /// Runs `record_input` with `params` on the registered executor `executor` (`ufo record`): the
    /// agent's own tool, outside the policy (it only watches) and outside direct sessions (its steps
    /// become a demonstration). The executor's refusal is `failed_precondition` with its reason.
    pub async fn record_input(&self, executor: &str, params: Value) -> Result<Value, ToolError> {
        let r = self.record_command(executor, params).await?;
        Ok(r.to_json().get("result").cloned().unwrap_or(Value::Null))
    }

    /// The screenshot the recording on `executor` (or the last one stopped there) kept for its step
    /// `index` (`record_input`'s `screenshot`).
    pub async fn record_screenshot(
        &self,
        executor: &str,
        index: usize,
    ) -> Result<crate::vision::screenshot::Screenshot, ToolError> {
        let r = self
            .record_command(executor, json!({"action": "screenshot", "index": index}))
            .await?;
        r.images.into_iter().next().ok_or_else(|| {
            ToolError::new(
                "internal",
                format!("record_input: the executor sent no screenshot of step {index}"),
            )
        })
    }

    async fn record_command(
        &self,
        executor: &str,
        params: Value,
    ) -> Result<CommandResult, ToolError> {
        let dispatcher = self.dispatcher(executor)?;
        let results = dispatcher
            .execute(vec![Command::observe("record_input", params)])
            .await
            .map_err(|e| ToolError::new("unavailable", format!("executor {executor}: {e}")))?;
        let r = results.into_iter().next().ok_or_else(|| {
            ToolError::new("internal", "record_input: the executor answered nothing")
        })?;
        if r.status != ResultStatus::Success {
            return Err(ToolError::new(
                "failed_precondition",
                format!("executor {executor}: {}", r.error),
            ));
        }
        Ok(r)
    }

    /// Judges, runs and records `call` of `caller`: the result of the call's last command, its
    /// screenshots (with set-of-marks: the marked one) and where it was recorded. A refused call is
    /// recorded too (nothing ran); an unregistered executor name or an address is refused before any
    /// session is made.
    #[instrument(skip_all, fields(tool = call.tool, executor = %call.executor,
        session = tracing::field::Empty, step = tracing::field::Empty))]
    pub async fn run(&self, caller: &str, call: &DesktopCall) -> Result<DesktopOutcome, ToolError> {
        let started = Instant::now();
        let judgement = self
            .policy
            .judge_batch(call.commands.iter().map(|c| (c.tool, &c.parameters)));
        let refusal = match judgement.verdict {
            Verdict::Allow => None,
            Verdict::Deny => Some(ToolError::new(
                "permission_denied",
                format!("{}: {}", call.tool, judgement.reason()),
            )),
            Verdict::Confirm => Some(ToolError::new(
                "failed_precondition",
                format!(
                    "{} needs confirmation: {}; a direct call cannot be held for a person, run it as a task (run_task)",
                    call.tool,
                    judgement.reason()
                ),
            )),
        };
        let dispatcher = self.dispatcher(&call.executor)?;
        if let Some(refusal) = refusal {
            // Nothing runs: the refusal is the answer even when its record cannot be written.
            if let Err(e) = self.record_refusal(caller, call, &refusal).await {
                tracing::warn!(error = %e, "a refused desktop call could not be recorded");
            }
            return Err(refusal);
        }
        let recording = self.direct.begin(caller, call).await?;
        let span = tracing::Span::current();
        span.record("session", recording.session_id());
        span.record("step", recording.step());
        let recorded = Some((recording.session_id().to_owned(), recording.step()));
        let begun = Instant::now();
        recording.intent(call).await?;
        let intended = Instant::now();
        let commands: Vec<Command> = call
            .commands
            .iter()
            .map(|c| {
                let p = Value::Object(c.parameters.clone());
                if c.action {
                    Command::act(c.tool, p)
                } else {
                    Command::observe(c.tool, p)
                }
            })
            .collect();
        // Every step shows the screen: a call that captures nothing gets a desktop capture for its
        // step, taken after the caller has its answer (the caller does not wait for it; the executor's
        // settle wait makes it show the call's outcome).
        let captures = call.commands.iter().any(|c| c.tool.starts_with("capture_"));
        let capture = (!captures).then(|| dispatcher.clone());
        let sent = Instant::now();
        let results = match dispatcher.execute(commands).await {
            Ok(results) => results,
            Err(e) => {
                let error = ToolError::new("unavailable", format!("{}: {e}", call.tool));
                let actions = call
                    .commands
                    .iter()
                    .map(|c| action(c.tool, &c.parameters, failure(error.message.clone())))
                    .collect();
                let content = StepContent {
                    actions,
                    artifacts: Vec::new(),
                    observation: String::new(),
                    error: Some(error.to_string()),
                };
                self.record_later(recording, call, content, None);
                return Err(error);
            }
        };
        let executed = Instant::now();
        let executor_us: u64 = results.iter().map(|r| r.duration_us).sum();
        let own = call.commands.len().min(results.len());
        let mut artifacts = Vec::new();
        let mut images = Vec::new();
        for (i, r) in results.iter().enumerate().take(own) {
            let kind = if call.commands[i].tool == "capture_window_screenshot" {
                ArtifactKind::CleanScreenshot
            } else {
                ArtifactKind::DesktopScreenshot
            };
            for shot in &r.images {
                artifacts.push(record::artifact(kind, shot, json!({"mcp_tool": call.tool})));
                if !call.marks {
                    images.push(Image {
                        mime_type: shot.mime.clone(),
                        bytes: shot.bytes.to_vec(),
                    });
                }
            }
        }
        let failed = results[..own]
            .iter()
            .find(|r| r.status != ResultStatus::Success)
            .map(|r| {
                ToolError::new(
                    "failed_precondition",
                    format!("{}: the executor refused: {}", call.tool, r.error),
                )
            });
        let mut result = results[..own]
            .last()
            .map(|r| r.to_json())
            .and_then(|v| v.get("result").cloned())
            .unwrap_or(Value::Null);
        if call.marks && failed.is_none() {
            let (marked, recipe, controls) = self.marked(&results[..own])?;
            artifacts.push(record::derived_artifact(
                ArtifactKind::AnnotatedScreenshot,
                &recipe,
                json!({"mcp_tool": call.tool}),
            ));
            images.push(marked);
            result = controls;
        }
        let observation = match &result {
            Value::Array(items) => format!("{} items", items.len()),
            _ => String::new(),
        };
        let actions = call
            .commands
            .iter()
            .zip(results)
            .map(|(c, r)| action(c.tool, &c.parameters, r))
            .collect();
        let content = StepContent {
            actions,
            artifacts,
            observation,
            error: failed.as_ref().map(ToString::to_string),
        };
        self.record_later(recording, call, content, capture);
        // Where the call's own time went, at debug level (docs/mcp-server.md, "Benchmark"): the
        // executor's round trip less its reported time is the hop to it.
        tracing::debug!(
            policy_and_turn_us = micros(begun - started),
            intent_us = micros(intended - begun),
            prepare_us = micros(sent - intended),
            executor_round_trip_us = micros(executed - sent),
            executor_us,
            result_us = micros(executed.elapsed()),
            "desktop call timing"
        );
        if let Some(failed) = failed {
            return Err(failed);
        }
        Ok(DesktopOutcome {
            result,
            images,
            recorded,
            executor_us: Some(executor_us),
        })
    }

    /// Records the step of a call that ran after the caller has its answer — first capturing the
    /// desktop for it through `capture`, when given: the recording keeps the session's turn until the
    /// step is durable, so the caller's next call (and `end_direct_session`) waits for it, and steps
    /// stay in call order. The intent was durable before the call ran; a step that cannot be recorded
    /// is logged (the intent stays in the session's events), and a capture that fails leaves the step
    /// without its screenshot (logged).
    fn record_later(
        &self,
        recording: Recording,
        call: &DesktopCall,
        mut content: StepContent,
        capture: Option<Arc<dyn CommandDispatcher>>,
    ) {
        let direct = self.direct.clone();
        let call = call.clone();
        let span = tracing::info_span!("direct.record", tool = call.tool, step = recording.step());
        tokio::spawn(
            async move {
                if let Some(dispatcher) = capture {
                    match dispatcher
                        .execute(vec![Command::observe(CAPTURE_DESKTOP, json!({}))])
                        .await
                    {
                        Ok(results) => {
                            for shot in results.iter().flat_map(|r| r.images.iter()) {
                                content.artifacts.push(record::artifact(
                                    ArtifactKind::DesktopScreenshot,
                                    shot,
                                    json!({"mcp_tool": call.tool}),
                                ));
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "the step's desktop capture failed");
                        }
                    }
                }
                if let Err(e) = recording.finish(&call, content, direct.uploads()).await {
                    tracing::error!(error = %e, "a direct call's step could not be recorded");
                }
            }
            .instrument(span),
        );
    }

    /// Records a call the policy refused as a step whose commands failed with the refusal.
    async fn record_refusal(
        &self,
        caller: &str,
        call: &DesktopCall,
        refusal: &ToolError,
    ) -> Result<(), ToolError> {
        let recording = self.direct.begin(caller, call).await?;
        let actions = call
            .commands
            .iter()
            .map(|c| {
                let refused = failure(format!("refused: {}", refusal.message));
                action(c.tool, &c.parameters, refused)
            })
            .collect();
        let content = StepContent {
            actions,
            artifacts: Vec::new(),
            observation: String::new(),
            error: Some(refusal.to_string()),
        };
        recording.finish(call, content, self.direct.uploads()).await
    }

    /// The set-of-marks image of a `screenshot` with marks (results: select, controls, capture), drawn
    /// as the AppAgent draws its marks, labelled with the executor's control ids; its recipe (the REST
    /// API draws the annotated screenshot again from it); the marked controls.
    fn marked(
        &self,
        results: &[CommandResult],
    ) -> Result<(Image, crate::vision::Derived, Value), ToolError> {
        let internal = |what: &str, e: &dyn std::fmt::Display| {
            ToolError::new("internal", format!("screenshot marks: {what}: {e}"))
        };
        let (Some(listed), Some(clean)) = (
            results.iter().rev().nth(1),
            results.last().and_then(|r| r.images.first()),
        ) else {
            return Err(ToolError::new(
                "internal",
                "screenshot marks: the executor returned no controls or no capture",
            ));
        };
        let mut controls: Vec<TargetInfo> = listed
            .result
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| TargetInfo::from_json(v, TargetKind::Control))
            .collect();
        for c in &mut controls {
            c.label.clone_from(&c.id);
        }
        let mut pixels = clean.decode().map_err(|e| internal("decode", &e))?;
        let marks = control_marks(&controls, clean);
        let undo = self.marker.annotate_undoable(&mut pixels, &marks);
        let annotated = clean
            .with_pixels(&pixels)
            .map_err(|e| internal("encode", &e))?;
        undo.restore(&mut pixels);
        let sha = crate::store::blobs::sha256_hex(&clean.bytes);
        let size = pixels.dimensions();
        let recipe = derived::annotation(&sha, clean, &pixels, size, &marks, &self.marker);
        let listed: Vec<Value> = controls
            .iter()
            .filter(|c| c.rect.is_some())
            .map(|c| json!({"id": c.id, "name": c.name, "type": c.control_type}))
            .collect();
        Ok((
            Image {
                mime_type: annotated.mime.clone(),
                bytes: annotated.bytes.to_vec(),
            },
            recipe,
            Value::Array(listed),
        ))
    }

    /// Ends `caller`'s direct session on `executor`.
    pub async fn end(&self, caller: &str, executor: &str) -> Result<Value, ToolError> {
        self.dispatcher(executor)?;
        let ended = self
            .direct
            .end(
                caller,
                executor,
                "ended by the MCP client (end_direct_session)",
            )
            .await?;
        Ok(match ended {
            Some((session, steps)) => json!({"session_id": session, "steps": steps}),
            None => json!({"session_id": null, "steps": 0}),
        })
    }
}

/// The capture that follows a call that captures nothing.
const CAPTURE_DESKTOP: &str = "capture_desktop_screenshot";

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn failure(error: String) -> CommandResult {
    CommandResult {
        status: ResultStatus::Failure,
        error,
        ..CommandResult::none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn desktop(policy: &str) -> Desktop {
        let config = crate::Config::parse_from([
            "ufo-agent",
            "--insecure-no-auth",
            "--executors",
            "desk=http://127.0.0.1:9",
            "--session-url",
            "http://127.0.0.1:9",
        ]);
        Desktop::new(
            Arc::new(Policy::parse(policy).unwrap()),
            Arc::new(ExecutorRegistry::from_config(&config).unwrap()),
            &config.runner,
            DirectSessions::new(
                crate::store::client::connect(&config.session).unwrap(),
                Duration::from_secs(60),
                Duration::from_secs(30),
                "unit-test".to_owned(),
            ),
            config.agents.marker().unwrap(),
        )
    }

    fn call(tool: &str, arguments: Value) -> DesktopCall {
        let Value::Object(arguments) = arguments else {
            panic!("an object")
        };
        ufo_mcp_server::desktop::call(tool, Some(&arguments))
            .unwrap()
            .unwrap()
    }

    #[tokio::test]
    async fn the_policy_refuses_confirm_and_deny_before_the_executor_is_reached() {
        let d = desktop(r#"{"tools": {"click_input": "confirm", "launch_application": "deny"}}"#);
        // Nothing listens on port 9: a call that got past the policy would be `unavailable`.
        let e = d
            .run(
                "tests",
                &call("click", json!({"executor": "desk", "control": "3"})),
            )
            .await
            .unwrap_err();
        assert_eq!(e.code, "failed_precondition", "{e}");
        assert!(e.message.contains("click needs confirmation"), "{e}");
        let e = d
            .run(
                "tests",
                &call(
                    "launch_app",
                    json!({"executor": "desk", "name": "mousepad"}),
                ),
            )
            .await
            .unwrap_err();
        assert_eq!(e.code, "permission_denied", "{e}");
        assert!(e.message.contains("denies launch_application"), "{e}");
        let e = d
            .run(
                "tests",
                &call("list_windows", json!({"executor": "elsewhere"})),
            )
            .await
            .unwrap_err();
        assert!(e.message.contains("not a registered executor name"), "{e}");
    }
}
