//! Crash resume of a round: every recorded step carries, in its `extra` under [`RESUME_KEY`], the round's
//! control state after the step — the active agent (and its window), the FSM state, the current subtask
//! and host message, the re-plan count, the questions waited on and the action held for confirmation
//! (with what running it needs: the proposed actions and their controls, or the HostAgent's response and
//! target registry). A runner that claims the task after a crash rebuilds the round from the last step's
//! snapshot plus the stored memory items (HostAgent and every AppAgent, by agent name) and the blackboard,
//! so the next step is the one the dead runner would have produced: a held action stays held and runs
//! (or is rejected) on the decision found in the store, pending questions take the stored answers.

use serde_json::{Map, Value, json};
use ufo_proto::v1;

use super::{Active, Held, Round};
use crate::dispatch::{Command, ResultStatus, execute_one};
use crate::response::{ActionSpec, HostResponse};
use crate::target::{TargetInfo, TargetRegistry};

/// Key of the round's resume snapshot in a step's `extra`.
pub const RESUME_KEY: &str = "ufo_resume";

fn held_info_json(info: &v1::HeldAction) -> Value {
    json!({
        "agent_name": info.agent_name, "function": info.function, "arguments_json": info.arguments_json,
        "target_name": info.target_name, "reason": info.reason, "step": info.step,
    })
}

fn held_info_from(v: &Value) -> v1::HeldAction {
    let text = |k: &str| v[k].as_str().unwrap_or_default().to_owned();
    v1::HeldAction {
        agent_name: text("agent_name"),
        function: text("function"),
        arguments_json: text("arguments_json"),
        target_name: text("target_name"),
        reason: text("reason"),
        step: v["step"].as_u64().unwrap_or_default(),
        ..Default::default()
    }
}

/// The control label an action names (its `id` argument), if any.
pub(super) fn label(spec: &ActionSpec) -> Option<String> {
    match spec.arguments.get("id")? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn held_json(held: &Held) -> Value {
    match held {
        Held::Host { response, registry } => json!({
            "host": {"response": response, "targets": registry.all()},
        }),
        Held::App {
            actions,
            controls,
            status,
        } => {
            // Only the controls the held actions name: that is all running them looks up.
            let named: Vec<&TargetInfo> = controls
                .iter()
                .filter(|c| {
                    actions
                        .iter()
                        .any(|a| label(a).as_deref() == Some(&c.label))
                })
                .collect();
            json!({"app": {"actions": actions, "controls": named, "status": status}})
        }
    }
}

fn targets(v: &Value) -> Result<Vec<TargetInfo>, String> {
    serde_json::from_value(v.clone()).map_err(|e| format!("stored targets: {e}"))
}

fn held_from(v: &Value) -> Result<Held, String> {
    if let Some(host) = v.get("host") {
        let response = host["response"]
            .as_object()
            .ok_or("stored host response missing")?;
        let response = HostResponse::parse(response)?;
        let mut registry = TargetRegistry::new();
        // Registration order is label order, so re-registering gives every target its label back.
        registry.register(targets(&host["targets"])?);
        return Ok(Held::Host {
            response: Box::new(response),
            registry,
        });
    }
    let app = v.get("app").ok_or("stored held action has no agent")?;
    let actions = app["actions"]
        .as_array()
        .ok_or("stored held actions missing")?
        .iter()
        .map(|a| ActionSpec {
            function: a["function"].as_str().unwrap_or_default().to_owned(),
            arguments: a["arguments"].as_object().cloned().unwrap_or_default(),
            status: a["status"].as_str().unwrap_or_default().to_owned(),
        })
        .collect();
    Ok(Held::App {
        actions,
        controls: targets(&app["controls"])?,
        status: app["status"].as_str().unwrap_or_default().to_owned(),
    })
}

impl Round {
    /// After a restore that left an AppAgent active: selects its window again before the agent acts. If the
    /// window is gone, control returns to the HostAgent, which observes the desktop and re-plans.
    pub(super) async fn reselect_window(&mut self) {
        let Active::App(key) = self.active.clone() else {
            return;
        };
        let Some(window) = self.apps.get(&key).map(|a| a.window.clone()) else {
            return;
        };
        let command = Command::act(
            "select_application_window",
            json!({"id": window.id, "name": window.name}),
        );
        match execute_one(self.dispatcher.as_ref(), command).await {
            Ok(r) if r.status == ResultStatus::Success => {
                tracing::info!(application = %key, "window selected again after resume");
            }
            Ok(r) => {
                tracing::warn!(application = %key, error = %r.error, "window gone after resume; the HostAgent re-plans");
                self.active = Active::Host;
                self.state = "CONTINUE".into();
                self.held = None;
                self.pending.clear();
            }
            Err(e) => {
                self.end = Some(super::RoundEnd::Failed(format!(
                    "executor unreachable: {e}"
                )));
            }
        }
    }

    /// The round's control state after the current step, stored with the step (see the module doc).
    pub(super) fn snapshot(&self) -> Value {
        let (active, window) = match &self.active {
            Active::Host => (Value::Null, Value::Null),
            Active::App(key) => (
                json!(key),
                self.apps
                    .get(key)
                    .and_then(|a| serde_json::to_value(&a.window).ok())
                    .unwrap_or(Value::Null),
            ),
        };
        json!({
            "active": active,
            "window": window,
            "state": self.state,
            "subtask": self.subtask,
            "host_message": self.host_message,
            "replans": self.replans,
            "pending": self.pending,
            "held": self.held.as_ref().map(|(held, info)| {
                json!({"info": held_info_json(info), "action": held_json(held)})
            }),
        })
    }

    /// Restores the control state a step recorded with [`RESUME_KEY`] (its `extra`). Call after
    /// [`Round::with_stored_memory`], so the active AppAgent gets its memory back. The round then continues
    /// exactly where that step left it: a held action waits for (or takes) its decision, pending questions
    /// their answers.
    pub fn restore(&mut self, extra: &Map<String, Value>) -> Result<(), String> {
        let Some(snap) = extra.get(RESUME_KEY) else {
            return Err("the step has no resume snapshot".into());
        };
        let text = |k: &str| snap[k].as_str().unwrap_or_default().to_owned();
        if let Some(key) = snap["active"].as_str() {
            let window: TargetInfo = serde_json::from_value(snap["window"].clone())
                .map_err(|e| format!("stored window of {key}: {e}"))?;
            let agent = self.app_for(window);
            self.apps.insert(key.to_owned(), agent);
            self.active = Active::App(key.to_owned());
            // The executor's selection may not have survived (another runner, another connection).
            self.reselect = true;
        } else {
            self.active = Active::Host;
        }
        self.state = text("state");
        self.subtask = text("subtask");
        self.host_message = text("host_message");
        self.replans = snap["replans"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or_default();
        self.pending = snap["pending"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|q| q.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        self.held = match snap.get("held") {
            Some(h) if !h.is_null() => Some((held_from(&h["action"])?, held_info_from(&h["info"]))),
            _ => None,
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::{Rect, TargetKind};

    fn control(label: &str, name: &str) -> TargetInfo {
        let mut c = TargetInfo::third_party(name);
        c.label = label.into();
        c.id = format!("id-{label}");
        c.kind = TargetKind::Control;
        c.control_type = "Button".into();
        c.rect = Some(Rect::new(1, 2, 30, 40));
        c
    }

    #[test]
    fn a_held_app_action_round_trips_with_only_its_controls() {
        let mut arguments = Map::new();
        arguments.insert("id".into(), json!("2"));
        let held = Held::App {
            actions: vec![ActionSpec {
                function: "click_input".into(),
                arguments,
                status: "CONFIRM".into(),
            }],
            controls: vec![control("1", "Cancel"), control("2", "Delete")],
            status: "CONFIRM".into(),
        };
        let Held::App {
            actions,
            controls,
            status,
        } = held_from(&held_json(&held)).unwrap()
        else {
            panic!("not an app hold");
        };
        assert_eq!(status, "CONFIRM");
        assert_eq!(actions[0].function, "click_input");
        assert_eq!(controls, vec![control("2", "Delete")]);
    }

    #[test]
    fn a_held_host_action_keeps_its_target_labels() {
        let mut response = HostResponse {
            observation: "o".into(),
            thought: "t".into(),
            status: "CONFIRM".into(),
            function: "launch_application".into(),
            ..Default::default()
        };
        response.arguments.insert("name".into(), json!("notes"));
        let mut registry = TargetRegistry::new();
        registry.register([control("x", "A"), control("y", "B")]);
        let held = Held::Host {
            response: Box::new(response.clone()),
            registry: registry.clone(),
        };
        let Held::Host {
            response: back,
            registry: back_registry,
        } = held_from(&held_json(&held)).unwrap()
        else {
            panic!("not a host hold");
        };
        assert_eq!(*back, response);
        assert_eq!(back_registry, registry);
    }

    #[test]
    fn held_action_info_round_trips() {
        let info = v1::HeldAction {
            agent_name: "AppAgent/notes".into(),
            function: "click_input".into(),
            arguments_json: "[]".into(),
            target_name: "Delete".into(),
            reason: "destructive".into(),
            step: 7,
            ..Default::default()
        };
        assert_eq!(held_info_from(&held_info_json(&info)), info);
    }
}
