//! The body of `POST /v1/tasks`: a new task in plain words, or a replay of a recorded one, with the limits
//! and settings a caller chose. Only what was given is sent, so the service's defaults apply otherwise.

use serde_json::{Map, Value, json};

/// What to run: a request in plain words or a replay of a task's recorded actions.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// A new task.
    Request(String),
    /// A replay of task `of`; `on_mismatch` is `stop` or `model` (the service's default when `None`).
    Replay {
        /// The task whose recorded actions are replayed.
        of: String,
        /// What to do when the screen does not match the recording.
        on_mismatch: Option<String>,
    },
}

impl Default for Work {
    fn default() -> Self {
        Self::Request(String::new())
    }
}

/// A task to submit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewTask {
    /// The request or the replay.
    pub work: Work,
    /// Executor address or registered name.
    pub executor: Option<String>,
    /// Step limit.
    pub max_steps: Option<u32>,
    /// Cost limit in US dollars.
    pub max_cost: Option<f64>,
    /// Wall-time limit.
    pub timeout_seconds: Option<u64>,
    /// `sensitive`, `always` or `never`.
    pub confirm_policy: Option<String>,
    /// HostAgent model.
    pub host_model: Option<String>,
    /// AppAgent model.
    pub app_model: Option<String>,
    /// Follow the caller's closest earlier task (reuse); none = the server's default.
    pub reuse: Option<bool>,
    /// Any desktop of the pool whose labels include all of these (with `executor` absent or `any`).
    pub labels: Option<std::collections::BTreeMap<String, String>>,
}

impl NewTask {
    /// A new task asking for `request`.
    pub fn request(request: impl Into<String>) -> Self {
        Self {
            work: Work::Request(request.into()),
            ..Self::default()
        }
    }

    /// A replay of task `of`.
    pub fn replay(of: impl Into<String>, on_mismatch: Option<String>) -> Self {
        Self {
            work: Work::Replay {
                of: of.into(),
                on_mismatch,
            },
            ..Self::default()
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        let mut body = Map::new();
        match &self.work {
            Work::Request(request) => {
                body.insert("request".into(), json!(request));
            }
            Work::Replay { of, on_mismatch } => {
                body.insert("replay_of".into(), json!(of));
                if let Some(m) = on_mismatch {
                    body.insert("on_mismatch".into(), json!(m));
                }
            }
        }
        if let Some(executor) = &self.executor {
            body.insert("executor".into(), json!(executor));
        }
        if let Some(labels) = &self.labels {
            body.insert("labels".into(), json!(labels));
        }
        let mut limits = Map::new();
        if let Some(v) = self.max_steps {
            limits.insert("max_steps".into(), json!(v));
        }
        if let Some(v) = self.max_cost {
            limits.insert("max_cost".into(), json!(v));
        }
        if let Some(v) = self.timeout_seconds {
            limits.insert("timeout_seconds".into(), json!(v));
        }
        if !limits.is_empty() {
            body.insert("limits".into(), Value::Object(limits));
        }
        let mut model = Map::new();
        if let Some(v) = &self.host_model {
            model.insert("host_model".into(), json!(v));
        }
        if let Some(v) = &self.app_model {
            model.insert("app_model".into(), json!(v));
        }
        if !model.is_empty() {
            body.insert("model".into(), Value::Object(model));
        }
        if let Some(policy) = &self.confirm_policy {
            body.insert("confirm_policy".into(), json!(policy));
        }
        if let Some(reuse) = self.reuse {
            body.insert("reuse".into(), json!(reuse));
        }
        Value::Object(body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_task_sends_only_what_was_given() {
        let task = NewTask {
            max_steps: Some(5),
            confirm_policy: Some("always".into()),
            ..NewTask::request("open notepad")
        };
        assert_eq!(
            task.body(),
            json!({"request": "open notepad", "limits": {"max_steps": 5}, "confirm_policy": "always"})
        );
        let task = NewTask {
            executor: Some("any".into()),
            labels: Some([("app".to_owned(), "mousepad".to_owned())].into()),
            ..NewTask::request("open mousepad")
        };
        assert_eq!(
            task.body(),
            json!({"request": "open mousepad", "executor": "any", "labels": {"app": "mousepad"}})
        );
    }

    #[test]
    fn a_replay_names_the_task_and_its_settings() {
        let task = NewTask {
            max_steps: Some(9),
            timeout_seconds: Some(60),
            host_model: Some("m".into()),
            ..NewTask::replay("t-1", Some("stop".into()))
        };
        assert_eq!(
            task.body(),
            json!({"replay_of": "t-1", "on_mismatch": "stop",
                   "limits": {"max_steps": 9, "timeout_seconds": 60}, "model": {"host_model": "m"}})
        );
        assert_eq!(
            NewTask::replay("t-2", None).body(),
            json!({"replay_of": "t-2"})
        );
    }
}
