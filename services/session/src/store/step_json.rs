//! The JSON columns of a step (`plan`, `actions`, `phases`): proto ↔ JSON, so the rows stay queryable with
//! SQL. Screenshots inside action results are not kept here: they are stored as artifacts.

use serde_json::{Map, Value as Json, json};
use ufo_proto::json::{from_optional_struct, from_value, to_value};
use ufo_proto::v1::{
    Action, Effect, EffectKind, PhaseTiming, Result as CommandResult, ResultStatus, Selector,
    SelectorNode, Settle, SettleOutcome,
};

use super::types::{db_name, proto_name};

const RESULT_PREFIX: &str = "RESULT_STATUS_";
const SETTLE_PREFIX: &str = "SETTLE_OUTCOME_";
const EFFECT_PREFIX: &str = "EFFECT_KIND_";

fn object(value: Json) -> Option<prost_types::Struct> {
    match value {
        Json::Object(map) => Some(ufo_proto::json::object_to_struct(map)),
        _ => None,
    }
}

fn text(map: &Map<String, Json>, key: &str) -> String {
    map.get(key)
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// Actions as a JSON array.
pub fn actions_to_json(actions: &[Action]) -> Json {
    Json::Array(
        actions
            .iter()
            .map(|a| {
                json!({
                    "function": a.function,
                    "arguments": from_optional_struct(a.arguments.clone()),
                    "status": a.status,
                    "target_id": a.target_id,
                    "target_name": a.target_name,
                    "representation": a.representation,
                    "result": a.result.as_ref().map(result_to_json),
                    "selector": a.selector.as_ref().map(selector_to_json),
                })
            })
            .collect(),
    )
}

fn selector_to_json(s: &Selector) -> Json {
    json!({
        "type": s.control_type,
        "name": s.name,
        "ancestors": s.ancestors.iter().map(|n| json!({"name": n.name, "type": n.control_type})).collect::<Vec<_>>(),
        "automation_id": s.automation_id,
        "sibling_index": s.sibling_index,
        "process": s.process,
    })
}

fn selector_from_json(map: &Map<String, Json>) -> Selector {
    Selector {
        control_type: text(map, "type"),
        name: text(map, "name"),
        ancestors: map
            .get("ancestors")
            .and_then(Json::as_array)
            .into_iter()
            .flatten()
            .filter_map(Json::as_object)
            .map(|n| SelectorNode {
                name: text(n, "name"),
                control_type: text(n, "type"),
            })
            .collect(),
        automation_id: text(map, "automation_id"),
        sibling_index: map
            .get("sibling_index")
            .and_then(Json::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        process: text(map, "process"),
    }
}

fn result_to_json(r: &CommandResult) -> Json {
    let status = ResultStatus::try_from(r.status).unwrap_or(ResultStatus::Unspecified);
    json!({
        "status": db_name(status.as_str_name(), RESULT_PREFIX),
        "error": r.error,
        "result": r.result.clone().map(from_value),
        "call_id": r.call_id,
        "duration_us": r.duration_us,
        "warnings": r.warnings,
        // How long the observation waited for the screen to settle (executor.proto's Settle).
        "settle": r.settle.as_ref().map(|s| json!({
            "outcome": db_name(
                SettleOutcome::try_from(s.outcome).unwrap_or(SettleOutcome::Unspecified).as_str_name(),
                SETTLE_PREFIX,
            ),
            "waited_us": s.waited_us,
            "draws": s.draws,
            "accessibility_events": s.accessibility_events,
            "animations": s.animations,
            "ignored": s.ignored,
        })),
        // What the action was observed to do (executor.proto's Effect).
        "effect": r.effect.as_ref().map(|e| json!({
            "kind": db_name(
                EffectKind::try_from(e.kind).unwrap_or(EffectKind::Unspecified).as_str_name(),
                EFFECT_PREFIX,
            ),
            "description": e.description,
        })),
    })
}

/// Actions back from [`actions_to_json`]'s form; unknown shapes become empty values.
pub fn actions_from_json(value: Json) -> Vec<Action> {
    let Json::Array(items) = value else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|item| match item {
            Json::Object(mut map) => Some(Action {
                function: text(&map, "function"),
                arguments: map.remove("arguments").and_then(object),
                status: text(&map, "status"),
                target_id: text(&map, "target_id"),
                target_name: text(&map, "target_name"),
                representation: text(&map, "representation"),
                result: match map.remove("result") {
                    Some(Json::Object(r)) => Some(result_from_json(r)),
                    _ => None,
                },
                selector: map
                    .get("selector")
                    .and_then(Json::as_object)
                    .map(selector_from_json),
            }),
            _ => None,
        })
        .collect()
}

fn result_from_json(mut map: Map<String, Json>) -> CommandResult {
    let status = ResultStatus::from_str_name(&proto_name(&text(&map, "status"), RESULT_PREFIX))
        .unwrap_or(ResultStatus::Unspecified);
    CommandResult {
        status: status.into(),
        error: text(&map, "error"),
        result: map.remove("result").filter(|v| !v.is_null()).map(to_value),
        call_id: text(&map, "call_id"),
        duration_us: map.get("duration_us").and_then(Json::as_u64).unwrap_or(0),
        images: Vec::new(),
        warnings: match map.remove("warnings") {
            Some(Json::Array(w)) => w
                .into_iter()
                .filter_map(|w| w.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        },
        settle: match map.remove("settle") {
            Some(Json::Object(s)) => Some(Settle {
                outcome: SettleOutcome::from_str_name(&proto_name(
                    &text(&s, "outcome"),
                    SETTLE_PREFIX,
                ))
                .unwrap_or(SettleOutcome::Unspecified)
                .into(),
                waited_us: s.get("waited_us").and_then(Json::as_u64).unwrap_or(0),
                draws: count(&s, "draws"),
                accessibility_events: count(&s, "accessibility_events"),
                animations: count(&s, "animations"),
                ignored: count(&s, "ignored"),
            }),
            _ => None,
        },
        effect: match map.remove("effect") {
            Some(Json::Object(e)) => Some(Effect {
                kind: EffectKind::from_str_name(&proto_name(&text(&e, "kind"), EFFECT_PREFIX))
                    .unwrap_or(EffectKind::Unspecified)
                    .into(),
                description: text(&e, "description"),
            }),
            _ => None,
        },
    }
}

/// A small count from a settle object (0 when absent or out of range).
fn count(s: &Map<String, Json>, key: &str) -> u32 {
    s.get(key)
        .and_then(Json::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

/// Phase timings as a JSON array.
pub fn phases_to_json(phases: &[PhaseTiming]) -> Json {
    Json::Array(
        phases
            .iter()
            .map(|p| json!({"phase": p.phase, "seconds": p.seconds, "success": p.success, "error": p.error}))
            .collect(),
    )
}

/// Phase timings back from [`phases_to_json`]'s form.
pub fn phases_from_json(value: Json) -> Vec<PhaseTiming> {
    let Json::Array(items) = value else {
        return Vec::new();
    };
    items
        .into_iter()
        .filter_map(|item| match item {
            Json::Object(map) => Some(PhaseTiming {
                phase: text(&map, "phase"),
                seconds: map.get("seconds").and_then(Json::as_f64).unwrap_or(0.0),
                success: map.get("success").and_then(Json::as_bool).unwrap_or(false),
                error: text(&map, "error"),
            }),
            _ => None,
        })
        .collect()
}

/// A plan as a JSON array of strings.
pub fn plan_from_json(value: Json) -> Vec<String> {
    match value {
        Json::Array(items) => items
            .into_iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    }
}

/// `extra` back as a Struct (absent when empty).
pub fn extra_from_json(value: Json) -> Option<prost_types::Struct> {
    object(value).filter(|s| !s.fields.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_round_trip_without_images() {
        let action = Action {
            function: "click_input".into(),
            arguments: object(json!({"id": "12", "button": "left"})),
            status: "CONTINUE".into(),
            result: Some(CommandResult {
                status: ResultStatus::Failure.into(),
                error: "no such control".into(),
                result: Some(to_value(json!({"clicked": false}))),
                call_id: "c1".into(),
                duration_us: 42,
                images: Vec::new(),
                warnings: vec!["name mismatch".into()],
                settle: Some(Settle {
                    outcome: SettleOutcome::Settled.into(),
                    waited_us: 7_000,
                    draws: 5,
                    accessibility_events: 2,
                    animations: 1,
                    ignored: 3,
                }),
                effect: Some(Effect {
                    kind: EffectKind::NoneObserved.into(),
                    description: "Enter in 'Location': nothing changed".into(),
                }),
            }),
            target_id: "12".into(),
            target_name: "Export".into(),
            representation: "click_input on [12]Export".into(),
            selector: Some(Selector {
                control_type: "Button".into(),
                name: "Export".into(),
                ancestors: vec![SelectorNode {
                    name: "Report".into(),
                    control_type: "Window".into(),
                }],
                automation_id: "export".into(),
                sibling_index: 2,
                process: String::new(),
            }),
        };
        let back = actions_from_json(actions_to_json(std::slice::from_ref(&action)));
        assert_eq!(back, vec![action]);
    }

    #[test]
    fn phases_round_trip() {
        let phases = vec![PhaseTiming {
            phase: "llm_interaction".into(),
            seconds: 1.5,
            success: false,
            error: "timeout".into(),
        }];
        assert_eq!(phases_from_json(phases_to_json(&phases)), phases);
    }
}
