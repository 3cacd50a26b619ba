//! Takeover (docs/live.md): a person takes the desktop over, the runner pauses the agents at the next
//! step boundary and delivers the person's input (`PERSON_INPUT` events) to the executor, each one as a
//! step of its own — its intent recorded before it reaches the executor, like every action — and when
//! the person hands the desktop back the agents go on from the store: rebuilt (so they observe again
//! first), with a blackboard entry per input saying what the person did, which their next prompt shows.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use ufo_proto::v1::{self, AgentKind, Step};

use crate::agents::action::ActionRecord;
use crate::dispatch::{CommandResult, ResultStatus};
use crate::round::control::{Next, StepControl};
use crate::round::output::StepOutput;

pub use crate::replay::plan::PERSON;

/// A mouse click at a screen point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PersonClick {
    /// Screen x in pixels (the live frame's `origin_x` plus the picture's pixel column).
    pub x: i32,
    /// Screen y in pixels.
    pub y: i32,
    /// `left` (the default), `right` or `middle`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub button: Option<String>,
    /// A double click.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub double: bool,
}

/// One input of a person who has taken the desktop over: exactly one of `click`, `keys`, `text`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PersonInput {
    /// A click at a screen point.
    Click(PersonClick),
    /// Key strokes in the executor's key syntax, e.g. `{ENTER}`, `^s`, `{BACKSPACE}`.
    Keys(String),
    /// Literal text, typed as it is.
    Text(String),
}

/// Why an input is refused (a 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct BadInput(pub String);

impl PersonInput {
    /// Checks what can be checked without the desktop: the button, text and key lengths (bytes, at most
    /// `max_text_bytes`), control characters (none but newline and tab in text, none in keys).
    pub fn check(&self, max_text_bytes: usize) -> Result<(), BadInput> {
        let text = |field: &str, t: &str, allowed: &[char]| {
            if t.is_empty() {
                return Err(BadInput(format!("{field} is empty")));
            }
            if t.len() > max_text_bytes {
                return Err(BadInput(format!(
                    "{field} is {} bytes, more than the limit of {max_text_bytes}",
                    t.len()
                )));
            }
            if let Some(c) = t.chars().find(|c| c.is_control() && !allowed.contains(c)) {
                return Err(BadInput(format!(
                    "{field} holds the control character U+{:04X}",
                    u32::from(c)
                )));
            }
            Ok(())
        };
        match self {
            Self::Click(c) => match c.button.as_deref() {
                None | Some("left" | "right" | "middle") => Ok(()),
                Some(other) => Err(BadInput(format!(
                    "click.button {other:?} is not left, right or middle"
                ))),
            },
            Self::Keys(k) => text("keys", k, &[]),
            Self::Text(t) => text("text", t, &['\n', '\t']),
        }
    }

    /// The executor's request.
    pub fn to_proto(&self) -> v1::TakeoverInputRequest {
        use v1::takeover_input_request::Input;
        let input = match self {
            Self::Click(c) => Input::Click(v1::PointerClick {
                x: c.x,
                y: c.y,
                button: c.button.clone().unwrap_or_default(),
                double: c.double,
            }),
            Self::Keys(k) => Input::Keys(k.clone()),
            Self::Text(t) => Input::Text(t.clone()),
        };
        v1::TakeoverInputRequest { input: Some(input) }
    }

    /// The step's action name.
    pub fn function(&self) -> &'static str {
        match self {
            Self::Click(_) => "person_click",
            Self::Keys(_) => "person_keys",
            Self::Text(_) => "person_text",
        }
    }

    /// What the person did, in a few words (the step's and the prompt's wording).
    pub fn describe(&self) -> String {
        let short = |t: &str| {
            let cut: String = t.chars().take(200).collect();
            if cut.len() < t.len() {
                format!("{cut}…")
            } else {
                cut
            }
        };
        match self {
            Self::Click(c) => format!(
                "{}clicked{} at ({}, {})",
                if c.double { "double-" } else { "" },
                match c.button.as_deref() {
                    None | Some("left") => String::new(),
                    Some(b) => format!(" the {b} button"),
                },
                c.x,
                c.y
            ),
            Self::Keys(k) => format!("pressed the keys {:?}", short(k)),
            Self::Text(t) => format!("typed {:?}", short(t)),
        }
    }
}

/// The newest `PERSON_INPUT` event sequence number the recorded steps delivered (or tried to: a step
/// recorded from a dead runner's intent counts).
pub fn delivered_upto(steps: &[Step]) -> u64 {
    steps
        .iter()
        .flat_map(|s| s.actions.iter())
        .filter(|a| a.function.starts_with("person_"))
        .filter_map(|a| {
            let args = ufo_proto::json::from_optional_struct(a.arguments.clone());
            args["input_seq"].as_u64()
        })
        .max()
        .unwrap_or(0)
}

/// The arguments recorded for the input of event `seq` (the intent's and the step's).
pub fn arguments(seq: u64, input: &PersonInput, by: &str) -> Map<String, Value> {
    let mut args = match serde_json::to_value(input) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    };
    args.insert("input_seq".into(), json!(seq));
    args.insert("by".into(), json!(by));
    args
}

/// The step recording a person's input of event `seq`, delivered (`Ok`) or refused by the executor
/// (`Err`), after `previous` (the round's last step, whose state and control it keeps: the agents go
/// on where they were, after observing again).
pub fn step(
    seq: u64,
    input: &PersonInput,
    by: &str,
    delivered: Result<(), super::driver::PersonInputError>,
    previous: &Step,
) -> StepOutput {
    let what = input.describe();
    let result = match &delivered {
        Ok(()) => CommandResult {
            status: ResultStatus::Success,
            ..CommandResult::none()
        },
        Err(e) => CommandResult {
            status: ResultStatus::Failure,
            error: e.to_string(),
            ..CommandResult::none()
        },
    };
    let action = ActionRecord {
        function: input.function().to_owned(),
        arguments: arguments(seq, input, by),
        status: String::new(),
        target: None,
        result,
    };
    let mut proto = action.to_proto();
    proto.representation = what.clone();
    let comment = match &delivered {
        Ok(()) => format!("{by} took the desktop over and {what}"),
        Err(e) => format!("{by} took the desktop over and {what}; the desktop refused it: {e}"),
    };
    let mut control = StepControl::of(previous).unwrap_or(StepControl {
        next: Next::Continue {
            agent: previous.agent_name.clone(),
        },
        round: None,
    });
    if let Some(r) = control.round.as_deref_mut() {
        r.held = None;
    }
    let note = json!({
        "agent": PERSON,
        "action": what,
        "outcome": match &delivered { Ok(()) => "done".to_owned(), Err(e) => format!("refused: {e}") },
        "note": "A person took the desktop over between your steps and did this. The screen may have \
                 changed: observe it before you act, and do not undo what the person did unless the \
                 request needs it.",
    });
    StepOutput {
        step: Step {
            agent_name: PERSON.to_owned(),
            // Stored as an AppAgent-kind step named `Person` (the store knows host and app steps); the
            // API shows it as `person`.
            agent_kind: AgentKind::App as i32,
            state_before: previous.state_after.clone(),
            state_after: previous.state_after.clone(),
            subtask: previous.subtask.clone(),
            comment,
            status: previous.status.clone(),
            actions: vec![proto],
            ..Default::default()
        },
        memory_item: None,
        blackboard: vec![crate::memory::blackboard::entry(
            v1::BlackboardKind::Trajectory,
            0,
            note,
            String::new(),
        )],
        artifacts: Vec::new(),
        events: Vec::new(),
        control,
        uploads: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_parse_check_and_describe() {
        let click: PersonInput =
            serde_json::from_value(json!({"click": {"x": 3, "y": 4}})).unwrap();
        assert_eq!(click.describe(), "clicked at (3, 4)");
        assert!(click.check(10).is_ok());
        let text: PersonInput = serde_json::from_value(json!({"text": "hi\nthere"})).unwrap();
        assert!(text.check(100).is_ok());
        assert_eq!(text.describe(), "typed \"hi\\nthere\"");
        assert!(PersonInput::Text("a\0b".into()).check(100).is_err());
        assert!(PersonInput::Text("abc".into()).check(2).is_err());
        assert!(PersonInput::Keys("{ENTER}\t".into()).check(100).is_err());
        assert!(
            serde_json::from_value::<PersonInput>(json!({"text": "a", "keys": "b"})).is_err(),
            "exactly one input"
        );
        let bad_button = PersonInput::Click(PersonClick {
            x: 0,
            y: 0,
            button: Some("thumb".into()),
            double: false,
        });
        assert!(bad_button.check(10).is_err());
    }
}
