//! Model text made recordable: the session store refuses NUL (PostgreSQL text and JSON cannot hold it), so
//! every string a step carries — its fields, actions, memory item, blackboard entries and the task's result
//! — has each NUL replaced by U+FFFD (the replacement character) before it is recorded. A model can then
//! never make a step unrecordable; what it wrote stays visible, marked.

use serde_json::Value;
use ufo_proto::v1::Step;

/// `s` with every NUL replaced by U+FFFD.
pub fn text(s: &mut String) {
    if s.contains('\0') {
        *s = s.replace('\0', "\u{FFFD}");
    }
}

/// Every string in `v` (keys included).
pub fn json(v: &mut Value) {
    match v {
        Value::String(s) => text(s),
        Value::Array(a) => a.iter_mut().for_each(json),
        Value::Object(m) => {
            if m.keys().any(|k| k.contains('\0')) {
                let mut clean = serde_json::Map::new();
                for (mut k, v) in std::mem::take(m) {
                    text(&mut k);
                    clean.insert(k, v);
                }
                *m = clean;
            }
            m.values_mut().for_each(json);
        }
        _ => {}
    }
}

/// Every string in a protobuf Struct.
pub fn structure(s: &mut Option<prost_types::Struct>) {
    if let Some(inner) = s.take() {
        let mut v = Value::Object(ufo_proto::json::struct_to_map(inner));
        json(&mut v);
        if let Value::Object(m) = v {
            *s = Some(ufo_proto::json::object_to_struct(m));
        }
    }
}

/// Every string of a step.
pub fn step(step: &mut Step) {
    for s in [
        &mut step.agent_name,
        &mut step.state_before,
        &mut step.state_after,
        &mut step.subtask,
        &mut step.observation,
        &mut step.thought,
        &mut step.comment,
        &mut step.status,
    ] {
        text(s);
    }
    step.plan.iter_mut().for_each(text);
    structure(&mut step.extra);
    for a in &mut step.actions {
        text(&mut a.function);
        text(&mut a.status);
        text(&mut a.target_id);
        text(&mut a.target_name);
        text(&mut a.representation);
        structure(&mut a.arguments);
        if let Some(r) = a.result.as_mut() {
            text(&mut r.error);
            if let Some(v) = r.result.take() {
                let mut j = ufo_proto::json::from_value(v);
                json(&mut j);
                r.result = Some(ufo_proto::json::to_value(j));
            }
        }
    }
    for p in &mut step.phases {
        text(&mut p.phase);
        text(&mut p.error);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nul_is_replaced_everywhere() {
        let mut s = Step {
            thought: "a\0b".into(),
            plan: vec!["\0".into()],
            extra: Some(ufo_proto::json::object_to_struct(
                serde_json::json!({"k\0": ["x\0"]})
                    .as_object()
                    .cloned()
                    .unwrap(),
            )),
            ..Default::default()
        };
        step(&mut s);
        assert_eq!(s.thought, "a\u{FFFD}b");
        assert_eq!(s.plan[0], "\u{FFFD}");
        let extra = ufo_proto::json::struct_to_map(s.extra.unwrap());
        assert_eq!(extra["k\u{FFFD}"][0], "x\u{FFFD}");
    }
}
