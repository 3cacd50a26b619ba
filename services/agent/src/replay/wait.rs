//! Waiting for a replayed step's targets (issue 31, docs/replay.md "Waiting for targets"): a recorded
//! target that is not listed yet (a dialog still closing, a button that appears once a search is done),
//! or listed but not accepting input, is waited for as a person would — the executor watches the window
//! for a change (`wait_for_change`: accessibility and drawing events, not a sleep), then the window is
//! listed again and the selector tried again — until it is there or `--replay-wait-ms` has passed.
//!
//! A recorded step in which the model only waited (no action, or only `wait`) waits the same way for
//! the next recorded step's targets: the recording's pause is honoured by what it was waiting for, not
//! by its length.
//!
//! The observation phases call [`watch`] after their first look; each look after it is a whole
//! observation (screenshot, controls), so the step decides on and records what is on the screen now. The decision
//! ([`super::decide`]) says in a mismatch how long it waited.

use std::time::{Duration, Instant};

use serde_json::json;
use tracing::Instrument as _;

use super::plan::{RecordedAction, RecordedStep, ReplaySpec, StepAgent};
use super::selector::Selector;
use crate::agents::target::TargetInfo;
use crate::dispatch::{Command, CommandDispatcher, execute_one};
use crate::processor::Key;

/// The executor tool that waits for the window to change.
pub const CHANGE_TOOL: &str = "wait_for_change";

/// Longest single `wait_for_change` between two looks: a change that came between a look and the
/// start of the watch is not seen by it, and is found by the next look at the latest this much later.
pub const SLICE: Duration = Duration::from_millis(1_000);

/// How this step's wait for its targets went, for the decision and the step's mark.
pub const REPLAY_WAITED: Key<Waited> = Key::new("replay_waited");

/// Functions whose recorded target need not accept input (they only read it).
const READS: &[&str] = &["texts"];

/// Functions that are a recorded pause rather than an action.
const PAUSES: &[&str] = &["wait"];

/// One target a step waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    /// How it is found.
    pub selector: Selector,
    /// It must accept input (an action on it), not only be listed.
    pub enabled: bool,
}

/// What a replayed step waits for before it is decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Awaited {
    /// The targets.
    pub targets: Vec<Target>,
    /// They are the next recorded step's: this step only waited.
    pub for_next: bool,
}

/// How a step's wait ended.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Waited {
    /// Time spent waiting (zero: every target was there at the first look).
    pub waited: Duration,
    /// The first target still missing or disabled when the wait ran out, described (`None`: all there).
    pub missing: Option<String>,
    /// The targets were the next recorded step's.
    pub for_next: bool,
    /// Looks after the first.
    pub looks: u32,
    /// Why it could not wait (the executor has no `wait_for_change`, or a look failed).
    pub unable: Option<String>,
}

impl Waited {
    /// For a mismatch: ` (waited 5003 ms for it)`, or why it did not wait; empty when the target was
    /// missing without a wait being allowed.
    pub fn clause(&self) -> String {
        match &self.unable {
            Some(why) => format!(" (not waited for: {why})"),
            None if self.waited.is_zero() && self.looks == 0 => String::new(),
            None => format!(" (waited {} ms for it)", self.waited.as_millis()),
        }
    }

    /// For the step's mark when it waited.
    pub fn note(&self) -> Option<String> {
        if self.waited.is_zero() {
            return None;
        }
        let whose = if self.for_next {
            "the next recorded step's targets, instead of the recorded pause"
        } else {
            "its targets"
        };
        Some(match &self.missing {
            None => format!("waited {} ms for {whose}", self.waited.as_millis()),
            Some(m) => format!(
                "waited {} ms for {whose}, in vain: {m}",
                self.waited.as_millis()
            ),
        })
    }
}

fn step_targets(step: &RecordedStep) -> Vec<Target> {
    match step.agent {
        StepAgent::Host => step
            .actions
            .iter()
            .filter(|a| a.function == "select_application_window" && !a.failed)
            .filter_map(|a| a.selector.clone())
            .map(|selector| Target {
                selector,
                enabled: false,
            })
            .collect(),
        StepAgent::App => step
            .actions
            .iter()
            // A control the recording failed on (and went on) is no reason to wait; coordinates
            // have no target.
            .filter(|a| a.arguments.contains_key("id") && !a.failed)
            .filter_map(|a| {
                Some(Target {
                    selector: a.selector.clone()?,
                    enabled: !READS.contains(&a.function.as_str()),
                })
            })
            .collect(),
    }
}

/// Whether a recorded AppAgent step only waited: no actions, or only pauses.
pub fn only_waited(step: &RecordedStep) -> bool {
    step.agent == StepAgent::App
        && step.third_party.is_none()
        && step
            .actions
            .iter()
            .all(|a: &RecordedAction| PAUSES.contains(&a.function.as_str()))
}

/// What replayed step `n`, taken by `agent`, waits for: its own recorded targets, or, when it only
/// waited, the next recorded step's (an AppAgent step). A third-party agent's step has no targets on
/// the screen.
pub fn awaited(spec: &ReplaySpec, n: u64, agent: StepAgent) -> Awaited {
    let gui = |s: &&RecordedStep| s.third_party.is_none();
    let Some(step) = spec.step(n).filter(|s| s.agent == agent).filter(gui) else {
        return Awaited::default();
    };
    if only_waited(step) {
        let next = spec
            .step(n + 1)
            .filter(|s| s.agent == StepAgent::App)
            .filter(gui)
            .map(step_targets)
            .unwrap_or_default();
        return Awaited {
            for_next: !next.is_empty(),
            targets: next,
        };
    }
    Awaited {
        targets: step_targets(step),
        for_next: false,
    }
}

/// The first of `targets` not found among `listed`, or found but not accepting input when it must:
/// described for a message.
pub fn missing(targets: &[Target], listed: &[TargetInfo]) -> Option<String> {
    targets.iter().find_map(|t| match t.selector.find(listed) {
        None => Some(format!("{} was not listed", t.selector.describe())),
        Some(c) if t.enabled && !c.enabled => {
            Some(format!("{} was disabled", t.selector.describe()))
        }
        Some(_) => None,
    })
}

/// Why the executor could not watch the window for a change.
#[derive(Debug, thiserror::Error)]
enum ChangeError {
    /// The command did not reach the executor.
    #[error(transparent)]
    Dispatch(#[from] crate::dispatch::DispatchError),
    /// The executor ran [`CHANGE_TOOL`] and it failed; its own words.
    #[error("{0}")]
    Failed(String),
}

async fn change(dispatcher: &dyn CommandDispatcher, timeout: Duration) -> Result<(), ChangeError> {
    let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let r = execute_one(
        dispatcher,
        Command::observe(CHANGE_TOOL, json!({"timeout_ms": ms})),
    )
    .await?;
    if r.is_success() {
        Ok(())
    } else {
        Err(ChangeError::Failed(r.error))
    }
}

/// Waits, within `bound`, until every target of `awaited` is among the listed ones (accepting input
/// where it must): `first` is the step's own first look, and `look` observes the screen again and
/// returns what is listed then. `can_watch` says whether the executor has [`CHANGE_TOOL`]. Traced as
/// `replay.wait`.
pub async fn watch<F, Fut>(
    dispatcher: &dyn CommandDispatcher,
    awaited: &Awaited,
    first: &[TargetInfo],
    bound: Duration,
    can_watch: bool,
    mut look: F,
) -> Waited
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Vec<TargetInfo>, String>>,
{
    let mut waited = Waited {
        missing: missing(&awaited.targets, first),
        for_next: awaited.for_next,
        ..Waited::default()
    };
    if waited.missing.is_none() || bound.is_zero() {
        return waited;
    }
    if !can_watch {
        waited.unable = Some(format!("the executor has no {CHANGE_TOOL}"));
        return waited;
    }
    let span = tracing::info_span!(
        "replay.wait",
        for_next = awaited.for_next,
        targets = awaited.targets.len(),
        waited_ms = tracing::field::Empty,
        looks = tracing::field::Empty,
        found = tracing::field::Empty,
    );
    async {
        let started = Instant::now();
        let end = started + bound;
        while waited.missing.is_some() {
            let now = Instant::now();
            if now >= end {
                break;
            }
            let listed = match change(dispatcher, (end - now).min(SLICE)).await {
                Ok(()) => look().await,
                Err(e) => Err(e.to_string()),
            };
            match listed {
                Ok(listed) => {
                    waited.looks += 1;
                    waited.missing = missing(&awaited.targets, &listed);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "the replay cannot watch for its target");
                    waited.unable = Some(e);
                    break;
                }
            }
        }
        waited.waited = started.elapsed();
        let span = tracing::Span::current();
        span.record("waited_ms", waited.waited.as_millis() as u64);
        span.record("looks", waited.looks);
        span.record("found", waited.missing.is_none());
        if let Some(m) = &waited.missing {
            tracing::info!(missing = %m, waited_ms = waited.waited.as_millis() as u64, "replay target still missing");
        }
    }
    .instrument(span.clone())
    .await;
    waited
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::agents::target::TargetKind;
    use crate::dispatch::{CommandResult, DispatchError, tools::ExecutorCatalog};
    use crate::replay::plan::OnMismatch;
    use serde_json::Map;
    use std::sync::{Arc, Mutex};

    /// An executor whose `wait_for_change` returns after 20 ms (or fails when `broken`), counting calls.
    #[derive(Default)]
    struct Watcher {
        calls: Mutex<u32>,
        broken: bool,
    }

    #[async_trait::async_trait]
    impl CommandDispatcher for Watcher {
        async fn execute(
            &self,
            commands: Vec<Command>,
        ) -> Result<Vec<CommandResult>, DispatchError> {
            assert!(commands.iter().all(|c| {
                c.tool_name == CHANGE_TOOL
                    && c.parameters["timeout_ms"]
                        .as_u64()
                        .is_some_and(|ms| ms <= 1_000)
            }));
            *self.calls.lock().unwrap() += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(commands
                .iter()
                .map(|_| {
                    if self.broken {
                        CommandResult::failure("desktop unavailable")
                    } else {
                        CommandResult::success(
                            json!({"changed": true, "waited_ms": 20, "watched": "events"}),
                        )
                    }
                })
                .collect())
        }
        async fn catalog(&self) -> Result<Arc<ExecutorCatalog>, DispatchError> {
            Ok(Arc::new(ExecutorCatalog::default()))
        }
    }

    #[tokio::test]
    async fn watch_looks_again_after_each_change_until_the_target_is_there() {
        let s = spec(vec![step(1, vec![action("click_input", Some("Continue"))])]);
        let wanted = awaited(&s, 1, StepAgent::App);
        let exec = Watcher::default();
        let mut looks = vec![
            vec![button("Continue", true)],
            vec![button("Continue", false)],
            vec![],
        ];
        let w = watch(&exec, &wanted, &[], Duration::from_secs(5), true, || {
            let listed = looks.pop().unwrap_or_default();
            async move { Ok(listed) }
        })
        .await;
        // Not listed, then disabled, then there and enabled: three looks after three changes.
        assert_eq!((w.looks, w.missing.as_deref()), (3, None), "{w:?}");
        assert_eq!(*exec.calls.lock().unwrap(), 3);
        assert!(w.waited >= Duration::from_millis(60), "{w:?}");
        assert_eq!(
            w.note().unwrap(),
            format!("waited {} ms for its targets", w.waited.as_millis())
        );

        // Never there: it gives up at the bound and says what is missing.
        let w = watch(
            &exec,
            &wanted,
            &[],
            Duration::from_millis(150),
            true,
            || async { Ok(vec![]) },
        )
        .await;
        assert!(
            w.waited >= Duration::from_millis(150) && w.looks >= 2,
            "{w:?}"
        );
        assert_eq!(
            w.missing.as_deref(),
            Some("Button \"Continue\" (sibling 0) was not listed")
        );
        assert!(w.clause().starts_with(" (waited "), "{}", w.clause());

        // There at the first look, no wait allowed, or no way to watch: no call.
        let idle = Watcher::default();
        let there = [button("Continue", true)];
        let w = watch(
            &idle,
            &wanted,
            &there,
            Duration::from_secs(5),
            true,
            || async { Ok(vec![]) },
        )
        .await;
        assert_eq!(w, Waited::default());
        let w = watch(&idle, &wanted, &[], Duration::ZERO, true, || async {
            Ok(vec![])
        })
        .await;
        assert_eq!(w.clause(), "");
        let w = watch(
            &idle,
            &wanted,
            &[],
            Duration::from_secs(5),
            false,
            || async { Ok(vec![]) },
        )
        .await;
        assert_eq!(
            w.clause(),
            " (not waited for: the executor has no wait_for_change)"
        );
        assert_eq!(*idle.calls.lock().unwrap(), 0);

        // An executor that cannot watch stops the wait with its error.
        let broken = Watcher {
            broken: true,
            ..Watcher::default()
        };
        let w = watch(
            &broken,
            &wanted,
            &[],
            Duration::from_secs(5),
            true,
            || async { Ok(vec![]) },
        )
        .await;
        assert_eq!(w.unable.as_deref(), Some("desktop unavailable"));
        assert_eq!(*broken.calls.lock().unwrap(), 1);
    }

    fn action(function: &str, name: Option<&str>) -> RecordedAction {
        RecordedAction {
            function: function.into(),
            arguments: match name {
                Some(_) => Map::from_iter([("id".to_owned(), json!("3"))]),
                None => Map::from_iter([("seconds".to_owned(), json!(2))]),
            },
            status: "CONTINUE".into(),
            selector: name.map(|n| Selector {
                control_type: "Button".into(),
                name: n.into(),
                ..Selector::default()
            }),
            failed: false,
        }
    }

    fn step(n: u64, actions: Vec<RecordedAction>) -> RecordedStep {
        RecordedStep::blank(n, StepAgent::App, actions)
    }

    fn spec(steps: Vec<RecordedStep>) -> ReplaySpec {
        ReplaySpec {
            of: "t".into(),
            on_mismatch: OnMismatch::Fail,
            steps,
            follow_ups: Vec::new(),
            reuse: None,
        }
    }

    fn button(name: &str, enabled: bool) -> TargetInfo {
        TargetInfo::from_json(
            &json!({"id": "1", "name": name, "type": "Button", "enabled": enabled}),
            TargetKind::Control,
        )
        .unwrap()
    }

    #[test]
    fn a_step_waits_for_its_own_targets_and_a_pause_for_the_next_steps() {
        let s = spec(vec![
            step(1, vec![action("click_input", Some("Start"))]),
            step(2, vec![]),
            step(3, vec![action("wait", None)]),
            step(
                4,
                vec![
                    action("texts", Some("Status")),
                    action("click_input", Some("Continue")),
                ],
            ),
        ]);
        let own = awaited(&s, 1, StepAgent::App);
        assert!(!own.for_next);
        assert_eq!(own.targets[0].selector.name, "Start");
        // Steps 2 and 3 only waited: they wait for step 4's targets (step 3 for its own next one).
        let pause = awaited(&s, 2, StepAgent::App);
        assert!(pause.targets.is_empty(), "step 3 has no targets");
        let pause = awaited(&s, 3, StepAgent::App);
        assert!(pause.for_next);
        let names: Vec<(&str, bool)> = pause
            .targets
            .iter()
            .map(|t| (t.selector.name.as_str(), t.enabled))
            .collect();
        // A read needs its control listed, not enabled.
        assert_eq!(names, [("Status", false), ("Continue", true)]);
        // Another agent's step, or none: nothing.
        assert_eq!(awaited(&s, 1, StepAgent::Host), Awaited::default());
        assert_eq!(awaited(&s, 9, StepAgent::App), Awaited::default());
    }

    #[test]
    fn missing_names_the_first_target_not_listed_or_disabled() {
        let s = spec(vec![step(
            1,
            vec![
                action("texts", Some("Status")),
                action("click_input", Some("Continue")),
            ],
        )]);
        let targets = awaited(&s, 1, StepAgent::App).targets;
        assert_eq!(
            missing(&targets, &[button("Status", false)]).unwrap(),
            "Button \"Continue\" (sibling 0) was not listed"
        );
        assert_eq!(
            missing(
                &targets,
                &[button("Status", false), button("Continue", false)]
            )
            .unwrap(),
            "Button \"Continue\" (sibling 0) was disabled"
        );
        assert!(
            missing(
                &targets,
                &[button("Status", false), button("Continue", true)]
            )
            .is_none()
        );
    }

    #[test]
    fn the_clause_and_note_say_how_long_it_waited() {
        let w = Waited {
            waited: Duration::from_millis(5003),
            missing: Some("Button \"Continue\" (sibling 0) was not listed".into()),
            looks: 4,
            ..Waited::default()
        };
        assert_eq!(w.clause(), " (waited 5003 ms for it)");
        assert_eq!(
            w.note().unwrap(),
            "waited 5003 ms for its targets, in vain: Button \"Continue\" (sibling 0) was not listed"
        );
        let unable = Waited {
            unable: Some("the executor has no wait_for_change".into()),
            ..Waited::default()
        };
        assert_eq!(
            unable.clause(),
            " (not waited for: the executor has no wait_for_change)"
        );
        assert_eq!(Waited::default().clause(), "");
        assert!(Waited::default().note().is_none());
    }
}
