//! A third-party agent's step (seed 000's "do the subtask without a window"): a third-party agent
//! ([`crate::agents::third_party`]: an MCP server registered as an agent, `--mcp-servers` `bind: agent`,
//! or the built-in shell, `--shell-agent`) gets the subtask the HostAgent assigned and runs a
//! tool-calling loop with the model over its tools — no screenshot, one model call per step.
//!
//! The reply has the AppAgent's shape (observation, thought, actions `{function, arguments, status}`,
//! status, result), its functions are the agent's tools (`mcp__SERVER__TOOL`, `shell__run`), and
//! everything after the reply is the AppAgent's: the consent policy denies or holds the call (a held
//! call is an [`super::Held::App`] and is approved or rejected like a click), the runner records an
//! intent before it runs (through the dispatcher), the step is recorded and streamed, FINISH archives
//! the subtask with its result and puts the step's trajectory (with the result) on the blackboard, FAIL
//! and errors return to the HostAgent to re-plan.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use ufo_proto::v1;

use super::output::StepOutput;
use super::record::Carry;
use super::{Held, Round};
use crate::agents::action::{ActionRecord, Precheck, run_actions};
use crate::agents::response::{AppResponse, ReplyProblem};
use crate::agents::tools::describe;
use crate::dispatch::tools::ToolSpec;
use crate::llm::{ChatRequest, Message, Role, ask_json};
use crate::memory::MemoryItem;
use crate::memory::blackboard::entry;
use crate::replay::phase::{Fallback, Planned};
use crate::round::control::HeldAction;

/// The name a third-party agent's steps are recorded under.
pub fn agent_name(server: &str) -> String {
    format!("ThirdPartyAgent/{server}")
}

/// The third-party agent's system prompt: its role, the reply fields and the server's tools.
fn system(server: &str, description: &str, functions: &str) -> String {
    format!(
        r#"You are {name}, a third-party agent of a desktop automation system: {description}
You do the current subtask with your tools only (there is no screen). Call one tool per step, look at
its result in your previous actions, and go on until the subtask is done.

Reply with ONE JSON object and nothing else, with these fields:
- "observation": what your previous actions' results show.
- "thought": your reasoning.
- "action": {{"function": "<tool>", "arguments": {{...}}, "status": "<status>"}}, or null for none.
- "status": CONTINUE (run the action and decide again), FINISH (the subtask is done; put what it
  produced in "result"), FAIL (it cannot be done; say why in "comment"), PENDING (ask the user
  "questions"), CONFIRM (the action needs the user's approval first).
- "result": what the subtask produced (FINISH), e.g. the value read or the file written.
- "comment": a short note for the user.
- "questions": questions for the user (PENDING only).
- "plan": the remaining steps, as a list of strings.

Your previous actions are listed with what happened to each: [success] → result, [failure: error],
[skipped: reason] or [denied: reason] (refused by policy: choose another way or FAIL).

Functions:
{functions}"#,
        name = agent_name(server),
    )
}

impl Round {
    /// Runs one step of the third-party agent `server` (see the module doc).
    pub(super) async fn third_step(&mut self, server: &str, mut carry: Carry) -> StepOutput {
        self.begin();
        let row = self.row();
        let was = self.active.clone();
        let name = agent_name(server);
        let found = crate::agents::third_party::find(&self.services, server);
        let description = found.as_ref().map(|s| s.description()).unwrap_or_default();
        let tools = match &found {
            None => Err(format!(
                "no third-party agent {server} is configured (--mcp-servers, --shell-agent)"
            )),
            Some(s) => s.tools(self.dispatcher.as_ref()).await,
        };
        let specs: Vec<ToolSpec> = tools.clone().unwrap_or_default();
        let offered: Vec<String> = specs.iter().map(|t| t.name.clone()).collect();
        let functions = specs.iter().map(describe).collect::<Vec<_>>().join("\n");
        let previous: Vec<String> = self
            .third
            .get(server)
            .map(|m| {
                m.items()
                    .iter()
                    .filter(|i| i.str("subtask") == self.subtask)
                    .map(|i| i.str("action_representation").to_owned())
                    .filter(|r| !r.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let subtasks = self
            .previous_subtasks
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n");
        let user = format!(
            "User request: {}\nCurrent subtask: {}\nMessage from the HostAgent: {}\nPrevious subtasks:\n{}\n{}\nYour previous actions for this subtask:\n{}",
            self.request,
            self.subtask,
            self.host_message,
            if subtasks.is_empty() {
                "none"
            } else {
                &subtasks
            },
            if self.blackboard.is_empty() {
                String::new()
            } else {
                self.blackboard.to_prompt()
            },
            if previous.is_empty() {
                "none".to_owned()
            } else {
                previous.join("\n")
            },
        );
        let s = self.services.settings.clone();
        let request = ChatRequest {
            messages: vec![
                Message::text(Role::System, system(server, &description, &functions)),
                Message::text(Role::User, user),
            ],
            temperature: s.temperature,
            max_tokens: None,
            response_format: crate::agents::response::app_response_format(),
        };
        // A replay's recorded step decides instead of the model (the same calls with the same arguments).
        let phase = crate::replay::phase::third(
            &self.services,
            self.session_step,
            server,
            self.third.get(server).and_then(|m| m.items().last()),
        )
        .await;
        let (fallback, replayed) = match phase {
            Ok(Planned::Model(fallback)) => (fallback, None),
            Ok(Planned::Decided(reply, mark, totals)) => (
                Fallback {
                    mark: Some(mark),
                    totals,
                    ..Fallback::default()
                },
                Some(Ok(reply)),
            ),
            Err(mismatch) => (Fallback::default(), Some(Err(mismatch.to_string()))),
        };
        let request = if fallback.plan.is_empty() {
            request
        } else {
            let mut r = request;
            if let Some(m) = r.messages.last_mut() {
                *m = Message::text(
                    Role::User,
                    format!("{}\n{}", m.joined_text(), fallback.plan),
                );
            }
            r
        };
        let asked = match (replayed, tools) {
            (Some(Ok(reply)), Ok(_)) => Ok(crate::llm::Asked {
                value: reply,
                text: String::new(),
                totals: Default::default(),
                attempts: 0,
            }),
            (Some(Err(e)), _) | (_, Err(e)) => Err(e),
            (None, Ok(_)) => ask_json(
                self.services.app_model.as_ref(),
                &request,
                s.max_reasks,
                |m| {
                    let r = AppResponse::parse(&m)?;
                    for a in &r.actions {
                        if !offered.contains(&a.function) {
                            return Err(ReplyProblem::UnknownFunction {
                                function: a.function.clone(),
                                offered: offered.join(", "),
                            });
                        }
                    }
                    Ok(r)
                },
            )
            .await
            .map_err(|e| e.to_string()),
        };
        let (response, mut totals, mut error) = match asked {
            Ok(a) => (a.value, a.totals, None),
            Err(e) => (AppResponse::default(), Default::default(), Some(e)),
        };
        totals.add(fallback.totals);
        let status = response.status.clone();
        let batch = crate::agents::app::strategies::batch(&response);
        let confirm = status == crate::round::state::AppStatus::Confirm;
        let held = if error.is_none() {
            self.holds(&batch, &[], confirm, status.acts())
        } else {
            None
        };
        let mut actions: Vec<ActionRecord> = vec![];
        if error.is_none() && held.is_none() && status.acts() && !response.actions.is_empty() {
            let policy = &s.policy;
            match run_actions(
                self.dispatcher.as_ref(),
                &response.actions,
                &[],
                Precheck::Off,
                policy,
            )
            .await
            {
                Ok(records) => actions = records,
                Err(e) => error = Some(crate::round::failure::user_text(&e)),
            }
        }
        let after = if let Some(e) = &error {
            self.app_error(&name, e)
        } else if let Some(hold) = held {
            let info = HeldAction::batch(
                name.clone(),
                &response.actions,
                server.to_owned(),
                hold.reason(&response.comment),
                self.session_step,
            );
            let h = Held::App {
                actions: response.actions.clone(),
                controls: vec![],
                status: status.clone(),
                result: response.result.clone(),
                questions: response.questions.clone(),
            };
            self.hold(h, info)
        } else {
            self.app_transition(
                &status,
                &response.result,
                &response.questions,
                ActionRecord::any_failed(&actions),
            )
        };
        self.settle(&was, &after);
        let mut memory = MemoryItem::new();
        memory
            .set("agent_name", name.clone())
            .set("session_step", self.session_step)
            .set("step", self.session_step)
            .set("subtask", self.subtask.clone())
            .set("observation", response.observation.clone())
            .set("thought", response.thought.clone())
            .set("plan", json!(response.plan))
            .set("status", status.to_string())
            .set("comment", response.comment.clone())
            .set("result", response.result.clone());
        ActionRecord::remember(&actions, &mut memory, s.action_error_chars);
        if let Some(e) = &error {
            memory.set("error", e.clone());
        }
        // The step's trajectory (its result among it) goes on the blackboard for the other agents.
        let trajectory = memory.select(&s.history_keys);
        Arc::make_mut(&mut self.blackboard).add_trajectory(trajectory.clone());
        carry.blackboard.push(entry(
            v1::BlackboardKind::Trajectory,
            0,
            Value::Object(trajectory),
            String::new(),
        ));
        self.third
            .entry(server.to_owned())
            .or_default()
            .push(memory.clone());
        let mut extra = Map::new();
        extra.insert("result".into(), json!(response.result));
        extra.insert("questions".into(), json!(response.questions));
        extra.insert("third_party_agent".into(), json!(server));
        if let Some(mark) = fallback.mark {
            crate::replay::put_mark(mark, &mut extra);
        }
        if let Some(e) = &error {
            extra.insert("error".into(), json!(e));
        }
        let step = v1::Step {
            observation: response.observation.clone(),
            thought: response.thought.clone(),
            plan: response.plan.clone(),
            comment: response.comment.clone(),
            status: status.to_string(),
            extra: Some(ufo_proto::json::object_to_struct(extra)),
            ..row
        };
        self.finish(step, &actions, totals, memory.0, carry, &after)
    }
}
