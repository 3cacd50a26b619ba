//! Executed actions and the AppAgent's multi-action runner (seed 001 "ACTION_EXECUTION"): each action
//! becomes a [`Command`]; before each action after the first, the control is checked to still exist and
//! be enabled; the batch stops at the first failure and the rest are recorded as skipped.

use serde_json::{Map, Value, json};
use ufo_proto::v1;

use crate::agents::response::ActionSpec;
use crate::agents::target::{ControlSource, TargetInfo, TargetKind};
use crate::dispatch::{
    Command, CommandDispatcher, CommandResult, DispatchError, Effect, ResultStatus, Settle,
    SettleOutcome, execute_one,
};

/// How much of a read text an action's representation carries (the full value stays in the result).
const READ_VALUE_CHARS: usize = 200;

pub use crate::config::ERROR_CHARS;

pub use super::text::truncate;

/// Whether `function` is an API action (an MCP tool, the shell's `shell__run`) whose answer the model
/// reads.
fn api_action(function: &str) -> bool {
    crate::mcp::split_action(function).is_some() || function.starts_with(crate::shell::PREFIX)
}

/// What happened to an action, as the model is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionOutcome {
    /// It ran and did what it should.
    Success,
    /// It ran (or was checked) and failed.
    Failure,
    /// It did not run because an earlier action of its batch failed.
    Skipped,
    /// It was refused by policy before running (e.g. a launch not on the allow-list).
    Denied,
    /// Sent, but whether it ran is not known: its runner stopped before the result came back (the step
    /// was recorded from its intent by the runner that took the task over).
    Unknown,
    /// Nothing to run.
    None,
}

impl ActionOutcome {
    /// The word the prompts use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Failure => "failure",
            Self::Skipped => "skipped",
            Self::Denied => "denied",
            Self::Unknown => "unknown",
            Self::None => "none",
        }
    }
}

/// One action with its outcome.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionRecord {
    /// Tool name.
    pub function: String,
    /// Arguments as the model gave them (ids are labels).
    pub arguments: Map<String, Value>,
    /// Status proposed with the action.
    pub status: String,
    /// The control or application acted on.
    pub target: Option<TargetInfo>,
    /// The executor's result.
    pub result: CommandResult,
}

impl ActionRecord {
    /// Whether any of `actions` failed.
    pub fn any_failed(actions: &[ActionRecord]) -> bool {
        actions
            .iter()
            .any(|a| a.result.status == ResultStatus::Failure)
    }

    /// What happened to it: a failure whose result says `denied` (see [`crate::agents::tools::denied`])
    /// was refused by policy.
    pub fn outcome(&self) -> ActionOutcome {
        match self.result.status {
            ResultStatus::Success => ActionOutcome::Success,
            ResultStatus::Failure
                if self.result.result.get("denied") == Some(&Value::Bool(true)) =>
            {
                ActionOutcome::Denied
            }
            ResultStatus::Failure => ActionOutcome::Failure,
            ResultStatus::Skipped => ActionOutcome::Skipped,
            ResultStatus::None if self.result.result.get("unknown") == Some(&Value::Bool(true)) => {
                ActionOutcome::Unknown
            }
            ResultStatus::None => ActionOutcome::None,
        }
    }

    /// The action without its outcome, e.g. `click_input on [12]Export` (what no-progress detection
    /// compares between steps).
    pub fn action_text(&self) -> String {
        match &self.target {
            Some(t) => format!("{} on [{}]{}", self.function, t.label, t.name),
            None if self.arguments.is_empty() => self.function.clone(),
            None => format!(
                "{} {}",
                self.function,
                Value::Object(self.arguments.clone())
            ),
        }
    }

    /// [`Self::representation_with`] at the default error bound.
    pub fn representation(&self) -> String {
        self.representation_with(ERROR_CHARS)
    }

    /// Sets the memory item's `action` (each of the step's `actions` as JSON) and
    /// `action_representation` (each one's [`Self::representation_with`] `error_chars`, `; `-separated).
    pub fn remember<'i>(
        actions: &[ActionRecord],
        item: &'i mut crate::memory::MemoryItem,
        error_chars: usize,
    ) -> &'i mut crate::memory::MemoryItem {
        let json: Vec<Value> = actions.iter().map(ActionRecord::to_json).collect();
        let shown: Vec<String> = actions
            .iter()
            .map(|a| a.representation_with(error_chars))
            .collect();
        item.set("action", json)
            .set("action_representation", shown.join("; "))
    }

    /// The action and what happened to it, so the next prompt and the blackboard tell the model:
    /// `click_input on [12]Export [success]`, `texts on [9]Font [success] → "Sans 12"` (a read text is
    /// carried), `set_edit_text on [3]Name [failure: control [3]Name is disabled]`,
    /// `click_input on [5]Save [skipped: an earlier action of the batch failed]`; errors are cut at
    /// `error_chars` characters. An API action's answer is carried whole:
    /// `shell__run {…} [success] → {"exit_code":0,"stdout":"…","stderr":""}`.
    pub fn representation_with(&self, error_chars: usize) -> String {
        let mut text = self.action_text();
        let outcome = self.outcome();
        match outcome {
            ActionOutcome::None if self.result.error.is_empty() => {}
            // Not run, for a reason the model must know (e.g. an approved action whose outcome is unknown).
            ActionOutcome::None => text.push_str(&format!(
                " [not run: {}]",
                truncate(&self.result.error, error_chars)
            )),
            // Sent by a runner that stopped before its result came back (recorded from its intent).
            ActionOutcome::Unknown => text.push_str(
                " [outcome unknown: it was sent, but its runner stopped before the result came back; \
                 check whether it ran before doing it again]",
            ),
            // What the executor saw the action change, so the model knows an action that "worked"
            // did nothing: `[success; effect: none_observed — keys '{ENTER}' in 'Location': nothing
            // changed]`.
            ActionOutcome::Success => match &self.result.effect {
                Some(e) => text.push_str(&format!(
                    " [success; effect: {} — {}]",
                    e.kind.as_str(),
                    truncate(&e.description, error_chars)
                )),
                None => text.push_str(" [success]"),
            },
            _ if self.result.error.is_empty() => text.push_str(&format!(" [{}]", outcome.as_str())),
            _ => text.push_str(&format!(
                " [{}: {}]",
                outcome.as_str(),
                truncate(&self.result.error, error_chars)
            )),
        }
        if let (ActionOutcome::Success, Value::String(read)) = (outcome, &self.result.result)
            && !read.is_empty()
        {
            text.push_str(" → ");
            text.push_str(&Value::String(truncate(read, READ_VALUE_CHARS)).to_string());
        } else if outcome == ActionOutcome::Success
            && api_action(&self.function)
            && (self.result.result.is_object() || self.result.result.is_array())
        {
            // An API call's answer is what it is for (bounded where it is made: --mcp-result-chars,
            // --shell-output-chars).
            text.push_str(" → ");
            text.push_str(&self.result.result.to_string());
        }
        text
    }

    /// For memory items and prompts.
    pub fn to_json(&self) -> Value {
        json!({
            "function": self.function,
            "arguments": self.arguments,
            "status": self.status,
            "outcome": self.outcome().as_str(),
            "target": self.target.as_ref().map(|t| json!({"label": t.label, "name": t.name, "type": t.control_type})),
            "result": self.result.to_json(),
            "representation": self.representation(),
        })
    }

    /// As the session proto.
    pub fn to_proto(&self) -> v1::Action {
        let status = match self.result.status {
            // Recorded as its own status, so people and the API see a refusal, not a failure.
            ResultStatus::Failure if self.outcome() == ActionOutcome::Denied => {
                v1::ResultStatus::Denied
            }
            ResultStatus::Success => v1::ResultStatus::Success,
            ResultStatus::Failure => v1::ResultStatus::Failure,
            ResultStatus::Skipped => v1::ResultStatus::Skipped,
            ResultStatus::None => v1::ResultStatus::None,
        };
        v1::Action {
            function: self.function.clone(),
            arguments: Some(ufo_proto::json::object_to_struct(self.arguments.clone())),
            status: self.status.clone(),
            result: Some(v1::Result {
                status: status as i32,
                error: self.result.error.clone(),
                result: Some(ufo_proto::json::to_value(self.result.result.clone())),
                call_id: self.result.call_id.clone(),
                duration_us: 0,
                settle: self.result.settle.map(settle_to_proto),
                effect: self.result.effect.as_ref().map(effect_to_proto),
                images: vec![],
                warnings: self.result.warnings.clone(),
            }),
            target_id: self
                .target
                .as_ref()
                .map(|t| t.label.clone())
                .unwrap_or_default(),
            target_name: self
                .target
                .as_ref()
                .map(|t| t.name.clone())
                .unwrap_or_default(),
            representation: self.representation(),
            selector: self
                .target
                .as_ref()
                .map(|t| crate::replay::selector::Selector::of_target(t).to_proto()),
        }
    }
}

/// An action's effect as the session proto.
pub fn effect_to_proto(e: &Effect) -> v1::Effect {
    v1::Effect {
        kind: e.kind.to_proto() as i32,
        description: e.description.clone(),
    }
}

/// A settle wait as the session proto.
pub fn settle_to_proto(s: Settle) -> v1::Settle {
    let outcome = match s.outcome {
        SettleOutcome::Settled => v1::SettleOutcome::Settled,
        SettleOutcome::NoChange => v1::SettleOutcome::NoChange,
        SettleOutcome::Timeout => v1::SettleOutcome::Timeout,
        SettleOutcome::Unsupported => v1::SettleOutcome::Unsupported,
        SettleOutcome::Unspecified => v1::SettleOutcome::Unspecified,
    };
    v1::Settle {
        outcome: outcome as i32,
        waited_us: s.waited_us,
        draws: s.draws,
        accessibility_events: s.accessibility_events,
        animations: s.animations,
        ignored: s.ignored,
    }
}

/// A settle wait for memory items and prompts: `{"outcome": "settled", "waited_ms": 12.5}`.
pub fn settle_json(s: Settle) -> Value {
    json!({"outcome": s.outcome, "waited_ms": s.waited_us as f64 / 1000.0})
}

/// Turns an action on labelled controls into the executor command: the label becomes the executor id (and
/// name); a grounding-only control is clicked by the centre of its rectangle.
pub fn to_command(spec: &ActionSpec, target: Option<&TargetInfo>) -> Command {
    let mut params = spec.arguments.clone();
    if let Some(t) = target {
        // A grounding-only control has no executor id: click the centre of its box, given as fractions
        // of the window (what `click_on_coordinates` takes; computed when the controls were listed).
        if t.source == ControlSource::Grounding
            && spec.function == "click_input"
            && let Some(Value::Array(point)) = t.extra.get("click_fraction")
            && let [x, y] = point.as_slice()
        {
            let mut p = Map::new();
            p.insert("x".into(), x.clone());
            p.insert("y".into(), y.clone());
            for k in ["button", "double"] {
                if let Some(v) = spec.arguments.get(k) {
                    p.insert(k.into(), v.clone());
                }
            }
            return Command::act("click_on_coordinates", Value::Object(p));
        }
        params.insert("id".into(), Value::String(t.id.clone()));
        params.insert("name".into(), Value::String(t.name.clone()));
    }
    let mut c = Command::act(&spec.function, Value::Object(params));
    c.call_id = spec.function.clone();
    c
}

/// Typing into a grounding-only control (no executor id): click the centre of its box, then type
/// (`set_edit_text` selects the current text first unless `clear_current_text` is false). `None` for
/// anything else.
pub fn grounded_typing(spec: &ActionSpec, target: &TargetInfo) -> Option<Vec<Command>> {
    if target.source != ControlSource::Grounding {
        return None;
    }
    let Some(Value::Array(point)) = target.extra.get("click_fraction") else {
        return None;
    };
    let [x, y] = point.as_slice() else {
        return None;
    };
    let keys = match spec.function.as_str() {
        "set_edit_text" => {
            let text = spec.arguments.get("text").and_then(Value::as_str)?;
            let clear = spec
                .arguments
                .get("clear_current_text")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            let literal = escape_keys(text);
            if clear {
                format!("^a{literal}")
            } else {
                literal
            }
        }
        "keyboard_input" => spec
            .arguments
            .get("keys")
            .and_then(Value::as_str)?
            .to_owned(),
        _ => return None,
    };
    let click = Command::act("click_on_coordinates", json!({"x": x, "y": y}));
    let mut typing = Command::act("keyboard_input", json!({"keys": keys}));
    typing.call_id = spec.function.clone();
    Some(vec![click, typing])
}

/// `text` as literal keys in send_keys syntax (`+^%~(){}[]` braced).
pub fn escape_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "+^%~(){}[]".contains(c) {
            out.push('{');
            out.push(c);
            out.push('}');
        } else {
            out.push(c);
        }
    }
    out
}

fn label_of(spec: &ActionSpec) -> Option<String> {
    match spec.arguments.get("id")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

async fn still_usable(
    dispatcher: &dyn CommandDispatcher,
    target: &TargetInfo,
) -> Result<Option<String>, DispatchError> {
    if target.source == ControlSource::Grounding {
        return Ok(None);
    }
    let r = execute_one(
        dispatcher,
        Command::observe("get_app_window_controls_target_info", json!({})),
    )
    .await?;
    let now = r
        .result
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| TargetInfo::from_json(v, TargetKind::Control))
        // Positional ids can shift when the UI changes: the same id must still carry the same name.
        .find(|c| c.id == target.id && (target.name.is_empty() || c.name == target.name));
    Ok(match now {
        None => Some(format!(
            "control [{}]{} no longer exists",
            target.label, target.name
        )),
        Some(c) if !c.enabled => Some(format!(
            "control [{}]{} is disabled",
            target.label, target.name
        )),
        Some(_) => None,
    })
}

/// When controls are checked before acting on them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precheck {
    /// Never.
    Off,
    /// Before every action but the first (the controls were just listed).
    AfterFirst,
    /// Before every action (e.g. a held action approved after a wait).
    All,
}

/// Runs `actions` in order against labelled `controls`; see the module doc for the rules. A batch with
/// an action the operator's `policy` denies runs nothing: that action is recorded as denied (the reason
/// reaches the next prompt) and the others as skipped.
pub async fn run_actions(
    dispatcher: &dyn CommandDispatcher,
    actions: &[ActionSpec],
    controls: &[TargetInfo],
    precheck: Precheck,
    policy: &crate::agents::policy::Policy,
) -> Result<Vec<ActionRecord>, DispatchError> {
    if let Some(records) = refused(actions, controls, policy) {
        return Ok(records);
    }
    let mut records = Vec::with_capacity(actions.len());
    let mut failed = false;
    for (i, spec) in actions.iter().enumerate() {
        let target = label_of(spec)
            .and_then(|l| controls.iter().find(|c| c.label == l))
            .cloned();
        let result = if failed {
            CommandResult::skipped("an earlier action of the batch failed")
        } else if let (Some(label), None) = (label_of(spec), &target) {
            CommandResult::failure(format!("control {label} is not in the control list"))
        } else {
            let check = match precheck {
                Precheck::Off => false,
                Precheck::AfterFirst => i > 0,
                Precheck::All => true,
            };
            let problem = match (&target, check) {
                (Some(t), true) => still_usable(dispatcher, t).await?,
                _ => None,
            };
            match problem {
                Some(p) => CommandResult::failure(p),
                // Reading a grounding-only control: its text is what grounding read off the screen (the
                // executor has no control to ask).
                None if spec.function == "texts"
                    && target
                        .as_ref()
                        .is_some_and(|t| t.source == ControlSource::Grounding) =>
                {
                    CommandResult::success(json!(target.as_ref().map_or("", |t| t.name.as_str())))
                }
                None => match target.as_ref().and_then(|t| grounded_typing(spec, t)) {
                    Some(commands) => {
                        let mut last = CommandResult::success(json!({}));
                        for c in commands {
                            last = execute_one(dispatcher, c).await?;
                            if last.status == ResultStatus::Failure {
                                break;
                            }
                        }
                        last
                    }
                    None => execute_one(dispatcher, to_command(spec, target.as_ref())).await?,
                },
            }
        };
        failed |= result.status == ResultStatus::Failure;
        records.push(ActionRecord {
            function: spec.function.clone(),
            arguments: spec.arguments.clone(),
            status: spec.status.to_string(),
            target,
            result,
        });
    }
    Ok(records)
}

/// The records of a batch the policy refuses (see [`run_actions`]), or `None` when it may run.
fn refused(
    actions: &[ActionSpec],
    controls: &[TargetInfo],
    policy: &crate::agents::policy::Policy,
) -> Option<Vec<ActionRecord>> {
    let denials: Vec<Option<CommandResult>> = actions
        .iter()
        .map(|a| policy.denial(&a.function, &a.arguments))
        .collect();
    let first = denials.iter().position(Option::is_some)? + 1;
    Some(
        actions
            .iter()
            .zip(denials)
            .map(|(spec, denial)| {
                let target = label_of(spec)
                    .and_then(|l| controls.iter().find(|c| c.label == l))
                    .cloned();
                ActionRecord {
                    function: spec.function.clone(),
                    arguments: spec.arguments.clone(),
                    status: spec.status.to_string(),
                    target,
                    result: denial.unwrap_or_else(|| {
                        CommandResult::skipped(format!(
                            "not run: action {first} of the batch was denied"
                        ))
                    }),
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(function: &str, result: CommandResult) -> ActionRecord {
        ActionRecord {
            function: function.to_owned(),
            arguments: Map::new(),
            status: "CONTINUE".to_owned(),
            target: None,
            result,
        }
    }

    #[test]
    fn a_read_text_is_part_of_the_representation() {
        let read = record("texts", CommandResult::success(json!("Sans 12")));
        assert_eq!(read.representation(), r#"texts [success] → "Sans 12""#);
    }

    #[test]
    fn every_outcome_is_told_with_its_bounded_error() {
        let click = record(
            "click_input",
            CommandResult::success(json!({"method": "action"})),
        );
        assert_eq!(click.representation(), "click_input [success]");
        let failed = record("texts", CommandResult::failure("gone"));
        assert_eq!(failed.outcome(), ActionOutcome::Failure);
        assert_eq!(failed.representation(), "texts [failure: gone]");
        let long = record("texts", CommandResult::failure("x".repeat(50)));
        assert_eq!(
            long.representation_with(10),
            format!("texts [failure: {}…]", "x".repeat(10))
        );
        let skipped = record(
            "click_input",
            CommandResult::skipped("an earlier action of the batch failed"),
        );
        assert_eq!(
            skipped.representation(),
            "click_input [skipped: an earlier action of the batch failed]"
        );
        let denied = record(
            "launch_application",
            crate::agents::tools::denied("not allowed".into(), json!({})),
        );
        assert_eq!(denied.outcome(), ActionOutcome::Denied);
        assert_eq!(
            denied.representation(),
            "launch_application [denied: not allowed]"
        );
        assert_eq!(denied.to_json()["outcome"], "denied");
        let empty = record("texts", CommandResult::success(json!("")));
        assert_eq!(empty.representation(), "texts [success]");
        assert_eq!(record("", CommandResult::none()).representation(), "");
    }

    #[test]
    fn long_reads_are_cut_on_a_character_boundary() {
        let long = "é".repeat(READ_VALUE_CHARS + 5);
        let text = record("texts", CommandResult::success(json!(long))).representation();
        assert!(text.ends_with("…\""), "{text}");
        assert_eq!(text.chars().filter(|c| *c == 'é').count(), READ_VALUE_CHARS);
    }
}
