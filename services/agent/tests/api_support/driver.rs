//! A deterministic [`TaskDriver`] standing in for the agents in runner tests. The request text carries its
//! script: `steps=N` (finish after N steps per round), `ask=K` (ask a question at round step K),
//! `hold=K` (hold an action at round step K), `block=K` (at global step K, "act" — append to the action
//! log — then never return: the step is in flight when the test kills or cancels the runner), `shots=N`
//! (in the task's first request: every step has a clean and an annotated artifact of N bytes), `panic=K`
//! (at global step K the step panics, as a bug in the agents would). Every step
//! "acts" like the agents: its intent is recorded before the action is logged.

use std::io::Write as _;
use std::path::PathBuf;

use ufo_agent::dispatch::grpc::GrpcDispatcher;
use ufo_agent::dispatch::{Command, CommandDispatcher as _};
use ufo_agent::round::control::HeldAction;
use ufo_agent::round::control::Next;
use ufo_agent::round::output::StepOutput;
use ufo_agent::runner::{DriverError, StepInput, TaskDriver, hitl};
use ufo_agent::store::blobs::ArtifactUpload;
use ufo_proto::v1::{AgentKind, ArtifactKind, Step};

fn cont() -> Next {
    Next::Continue {
        agent: "HostAgent".into(),
    }
}

/// The scripted driver.
#[derive(Debug, Default)]
pub struct ScriptDriver {
    /// Where "actions" are logged (`<task> <step> <pid>` per line), to count executions.
    pub action_log: Option<PathBuf>,
    /// Whether `block=K` applies (a resumed runner must not block again).
    pub honour_block: bool,
    /// An executor to send each step's action to (over gRPC), besides logging it.
    pub executor: Option<String>,
    /// Executors by desktop name: a task the claim gave a desktop of the pool sends its actions to that
    /// desktop's executor (before `executor`).
    pub desktops: std::collections::BTreeMap<String, String>,
}

fn directive(request: &str, key: &str) -> Option<u64> {
    request
        .split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

/// `len` bytes, different for every `seed`.
pub fn shot(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u64).wrapping_mul(31).wrapping_add(seed * 7) as u8)
        .collect()
}

/// A 2x2 PNG.
pub fn png() -> Vec<u8> {
    let img = image::RgbImage::from_pixel(2, 2, image::Rgb([200, 10, 10]));
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png).unwrap();
    out.into_inner()
}

#[async_trait::async_trait]
impl TaskDriver for ScriptDriver {
    async fn next_step(&self, input: StepInput<'_>) -> Result<StepOutput, DriverError> {
        let request = &input.round.request;
        let first = &input.session.request;
        let steps = directive(request, "steps")
            .or_else(|| directive(first, "steps"))
            .unwrap_or(2);
        let k = u64::from(input.round_step);
        if self.honour_block && directive(first, "block") == Some(input.step) {
            self.act(&input).await?;
            std::future::pending::<()>().await;
        }
        #[allow(clippy::panic)]
        if directive(first, "panic") == Some(input.step) {
            panic!("scripted bug at step {}", input.step);
        }
        let mut thought = format!("round {} step {k}", input.round.number);
        if directive(first, "ask").is_some_and(|a| a + 1 == k) {
            let answer = hitl::answer_of(input.blackboard, 0).unwrap_or_default();
            thought = format!("the person answered {answer}");
        }
        if directive(first, "hold").is_some_and(|h| h + 1 == k) {
            thought = format!("decision {:?}", input.decision.as_ref().map(|d| d.approve));
            if input.decision.as_ref().is_some_and(|d| !d.approve) {
                let next = Next::Finish {
                    result: "rejected by a person".into(),
                };
                return Ok(output(&input, thought, next));
            }
        }
        let action = self.act(&input).await?;
        let next = if directive(first, "ask") == Some(k) {
            Next::ask(["which name?".to_owned()])
        } else if directive(first, "hold") == Some(k) {
            Next::Hold {
                action: HeldAction {
                    agent_name: "AppAgent".into(),
                    function: "click_input".into(),
                    arguments_json: r#"{"id":"3"}"#.into(),
                    target_name: "Delete".into(),
                    reason: "deletes a file".into(),
                    ..Default::default()
                },
            }
        } else if k >= steps {
            Next::Finish {
                result: format!("done after {k} steps"),
            }
        } else {
            cont()
        };
        let mut out = output(&input, thought, next);
        out.step.actions.push(action);
        Ok(out)
    }
}

impl ScriptDriver {
    /// "Acts" the way the agents do: the intent is recorded first, then the action is logged.
    async fn act(&self, input: &StepInput<'_>) -> Result<ufo_proto::v1::Action, DriverError> {
        let arguments = serde_json::json!({"task": input.session.id, "step": input.step});
        let command = Command::act("script_action", arguments.clone());
        input
            .intents
            .record("HostAgent", std::slice::from_ref(&command))
            .await
            .map_err(|e| DriverError::new(e.to_string()))?;
        if let Some(url) = self
            .desktops
            .get(&input.session.desktop)
            .or(self.executor.as_ref())
        {
            let executor = GrpcDispatcher::connect_lazy(url, None, 10_000, 1 << 22, None)
                .map_err(|e| DriverError::new(e.to_string()))?;
            executor
                .execute(vec![command])
                .await
                .map_err(|e| DriverError::new(e.to_string()))?;
        }
        self.log(input);
        Ok(ufo_proto::v1::Action {
            function: "script_action".into(),
            arguments: ufo_proto::json::to_struct(arguments).ok(),
            ..Default::default()
        })
    }

    fn log(&self, input: &StepInput<'_>) {
        if let Some(path) = &self.action_log {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .unwrap();
            // One write(2) per line: two runner processes append to the same file, and `writeln!` on a
            // `File` issues one write per formatted piece, which interleave between processes.
            let line = format!(
                "{} {} {}\n",
                input.session.id,
                input.step,
                std::process::id()
            );
            f.write_all(line.as_bytes()).unwrap();
        }
    }
}

fn output(input: &StepInput<'_>, thought: String, next: Next) -> StepOutput {
    StepOutput {
        step: Step {
            agent_name: "HostAgent".into(),
            agent_kind: AgentKind::Host as i32,
            state_before: "CONTINUE".into(),
            state_after: "CONTINUE".into(),
            // What this runner saw: a resumed step is observed again by the new process.
            observation: format!("pid {} saw {} steps", std::process::id(), input.steps.len()),
            thought,
            status: "CONTINUE".into(),
            ..Default::default()
        },
        memory_item: Some(serde_json::Map::from_iter([(
            "step".to_owned(),
            serde_json::json!(input.step),
        )])),
        blackboard: Vec::new(),
        artifacts: match directive(&input.session.request, "shots") {
            // `shots=N`: a clean and an annotated "screenshot" of N bytes each, different in every step.
            Some(n) => [
                ArtifactKind::CleanScreenshot,
                ArtifactKind::AnnotatedScreenshot,
            ]
            .into_iter()
            .enumerate()
            .map(|(i, kind)| ArtifactUpload {
                kind,
                content_type: "image/png".into(),
                data: shot(input.step * 2 + i as u64, n as usize).into(),
                metadata: serde_json::Map::new(),
            })
            .collect(),
            None => vec![ArtifactUpload {
                kind: ArtifactKind::CleanScreenshot,
                content_type: "image/png".into(),
                data: png().into(),
                metadata: serde_json::Map::new(),
            }],
        },
        events: Vec::new(),
        control: next.into(),
        uploads: None,
    }
}
