//! REST response bodies and their conversions from the session service's messages.

use serde::Serialize;
use serde_json::Value as Json;
use ufo_proto::v1 as pb;
use utoipa::ToSchema;

use super::TaskStatus;

/// Totals of a task.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct TotalsView {
    /// Steps recorded.
    pub steps: u64,
    /// LLM cost in US dollars.
    pub cost: f64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Seconds from submission to the last update.
    pub duration_seconds: f64,
}

/// One round: the first request or a follow-up.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RoundView {
    /// 1-based.
    pub number: u32,
    /// The round's request.
    pub request: String,
    /// pending, running, finished, failed or cancelled.
    pub status: String,
    /// Result or failure reason.
    pub result: String,
    /// Steps taken in the round.
    pub steps: u32,
}

/// A question waiting for an answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct QuestionView {
    /// The id an answer names (`question_ids` of `POST .../answers`).
    pub id: String,
    /// Index among the task's questions.
    pub index: u64,
    /// The question.
    pub question: String,
}

/// An action waiting for a confirmation.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HeldActionView {
    /// The id a decision names (`action_id` of `POST .../confirmation`).
    pub id: String,
    /// The agent that proposed it.
    pub agent_name: String,
    /// The tool.
    pub function: String,
    /// Its arguments.
    pub arguments: Json,
    /// The control or application targeted.
    pub target_name: String,
    /// Why it needs a confirmation.
    pub reason: String,
    /// The step that proposed it.
    pub step: u64,
}

/// Links to a task's resources.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskLinks {
    /// This task.
    #[serde(rename = "self")]
    pub self_: String,
    /// Its steps.
    pub steps: String,
    /// Where to answer questions.
    pub answers: String,
    /// Where to approve or reject a held action.
    pub confirmation: String,
    /// Where to add a follow-up request.
    pub requests: String,
    /// Where to cancel it.
    pub cancel: String,
}

/// Why a queued or waiting task is not being worked on (a closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WaitReason {
    /// Queued: waiting for a free runner slot (`place` is its place in the queue).
    RunnerSlot,
    /// Queued: waiting for a free desktop of the pool that fits it (`place` is its place in the queue).
    Desktop,
    /// Waiting for a person to answer its questions (it holds no runner slot meanwhile).
    Question,
    /// Waiting for a person to approve or reject its held action (it holds no runner slot meanwhile).
    Approval,
}

impl WaitReason {
    /// The words `ufo show` and the viewer use.
    pub fn describe(self) -> &'static str {
        match self {
            Self::RunnerSlot => "waiting for a runner slot",
            Self::Desktop => "waiting for a free desktop",
            Self::Question => "waiting for a person to answer",
            Self::Approval => "waiting for a person to approve or reject an action",
        }
    }
}

/// What a queued or waiting task waits for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct WaitingForView {
    /// Why it waits.
    pub reason: WaitReason,
    /// For `runner_slot` and `desktop`: its 1-based place in the queue (1 = claimed next); absent
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub place: Option<u32>,
}

impl WaitingForView {
    /// What a task waits for: [`WaitingForView::of`] its session, and a waiting task that is not parked
    /// waits for the approval of the action it holds or else for its answers.
    pub fn of_task(session: &pb::Session, holds_action: bool) -> Option<Self> {
        Self::of(session).or_else(|| {
            (TaskStatus::from_proto(session.status) == TaskStatus::Waiting).then_some(Self {
                reason: if holds_action {
                    WaitReason::Approval
                } else {
                    WaitReason::Question
                },
                place: None,
            })
        })
    }

    /// The gRPC view.
    pub fn to_proto(&self) -> pb::WaitingFor {
        use pb::WaitReason as Proto;
        let reason = match self.reason {
            WaitReason::RunnerSlot => Proto::RunnerSlot,
            WaitReason::Desktop => Proto::Desktop,
            WaitReason::Question => Proto::Question,
            WaitReason::Approval => Proto::Approval,
        };
        pb::WaitingFor {
            reason: reason as i32,
            place: self.place.unwrap_or(0),
        }
    }

    /// What `session` waits for, as far as the session tells (a waiting task that is not parked is
    /// refined from its held action in [`TaskView::from_snapshot`]).
    fn of(session: &pb::Session) -> Option<Self> {
        match pb::SessionStatus::try_from(session.status) {
            Ok(pb::SessionStatus::Queued) => Some(Self {
                reason: if session.waiting_for_desktop {
                    WaitReason::Desktop
                } else {
                    WaitReason::RunnerSlot
                },
                place: (session.queue_place > 0).then_some(session.queue_place),
            }),
            Ok(pb::SessionStatus::Waiting) => match pb::ParkReason::try_from(session.parked_for) {
                Ok(pb::ParkReason::Approval) => Some(Self {
                    reason: WaitReason::Approval,
                    place: None,
                }),
                Ok(pb::ParkReason::Question) => Some(Self {
                    reason: WaitReason::Question,
                    place: None,
                }),
                _ => None,
            },
            _ => None,
        }
    }
}

/// A task.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskView {
    /// Task id (UUID).
    pub id: String,
    /// `task` (worked on by the runners), `direct` (an MCP client's own desktop tool calls on one
    /// executor, each recorded as a step: docs/mcp-server.md) or `demonstration` (a person's actions
    /// recorded by `ufo record`, each a step with its screenshot: docs/knowledge.md).
    pub kind: TaskKind,
    /// The first request.
    pub request: String,
    /// Status.
    pub status: TaskStatus,
    /// Why a `queued` or `waiting` task is not being worked on: a runner slot or a desktop (with its
    /// place in the queue) or a person (question or approval); absent for other statuses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<WaitingForView>,
    /// Final result or failure reason.
    pub result: String,
    /// Current FSM state of the active agent (e.g. `HostAgent:CONTINUE`); empty when idle.
    pub state: String,
    /// Rounds, in order.
    pub rounds: Vec<RoundView>,
    /// Questions waiting for answers.
    pub pending_questions: Vec<QuestionView>,
    /// The action waiting for a confirmation.
    pub held_action: Option<HeldActionView>,
    /// Totals.
    pub totals: TotalsView,
    /// A person asked to cancel.
    pub cancel_requested: bool,
    /// Sequence number of the newest event (resume `StreamSteps` from here + 1).
    pub last_seq: u64,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
    /// RFC 3339: when retention pruned this task's screenshots (its steps are kept); absent when never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images_pruned_at: Option<String>,
    /// Related resources.
    pub links: TaskLinks,
    /// A replay task's origin and how its steps were decided; absent for other tasks (and in list pages).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayView>,
    /// Set for a task that follows an earlier task of its owner (docs/knowledge.md "Reuse").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reuse: Option<ReuseView>,
}

/// What a task records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    /// A task the runners work on.
    Task,
    /// An MCP client's desktop tool calls, recorded as they happen; never run by a runner.
    Direct,
    /// A person's demonstration recorded by `ufo record`: one step per action with its screenshot
    /// (docs/knowledge.md "Human demonstrations"); never run by a runner.
    Demonstration,
}

impl TaskKind {
    fn of(session: &pb::Session) -> Self {
        match pb::SessionKind::try_from(session.kind) {
            Ok(pb::SessionKind::Direct)
                if session
                    .config
                    .as_ref()
                    .is_some_and(|c| c.fields.contains_key("demonstration")) =>
            {
                Self::Demonstration
            }
            Ok(pb::SessionKind::Direct) => Self::Direct,
            _ => Self::Task,
        }
    }
}

/// A replay task (`POST /v1/tasks` with `replay_of`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReplayView {
    /// The replayed task's id.
    pub of: String,
    /// What a step whose recorded target is missing does.
    pub on_mismatch: crate::replay::OnMismatch,
    /// Steps decided by the recording (no model call).
    pub replayed: u32,
    /// Steps decided by the model because the recorded target was missing.
    pub fell_back: u32,
}

/// A task that follows an earlier task of its owner (reuse, docs/knowledge.md).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ReuseView {
    /// The earlier task.
    pub of: String,
    /// How alike the two requests are (0-1).
    pub score: f64,
    /// Steps decided by the earlier task's plan (no model call).
    pub reused: u32,
    /// Steps of the plan the model decided because their screen differed.
    pub fell_back: u32,
}

/// One page of tasks.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TaskPage {
    /// Tasks, newest first.
    pub tasks: Vec<TaskView>,
    /// Pass as `page_token` for the next page; empty on the last page.
    pub next_page_token: String,
}

/// The executor's result of an action.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ActionResultView {
    /// success, failure, skipped, denied (refused by the operator's policy) or none.
    pub status: String,
    /// Why it failed or was skipped.
    pub error: String,
    /// The tool's structured result.
    pub result: Json,
    /// What the executor saw the action change (issue 31); absent when it did not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<EffectView>,
}

/// What an action was observed to do.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EffectView {
    /// confirmed, none_observed or unverifiable.
    pub kind: String,
    /// The action and what changed, e.g. "keys '{ENTER}' in 'Location': nothing changed".
    pub description: String,
}

/// One action of a step.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ActionView {
    /// The tool.
    pub function: String,
    /// Its arguments.
    pub arguments: Json,
    /// The agent status proposed with it.
    pub status: String,
    /// Human-readable form.
    pub representation: String,
    /// Target control or application.
    pub target_name: String,
    /// The executor's result; absent when not executed.
    pub result: Option<ActionResultView>,
    /// How a replay finds the target again: `{type, name, ancestors: [[name, type]...], automation_id,
    /// sibling_index, process}`; absent for actions without a target.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub selector: Option<Json>,
}

/// Time spent in one processing phase.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PhaseView {
    /// Phase name.
    pub phase: String,
    /// Seconds.
    pub seconds: f64,
    /// Whether it succeeded.
    pub success: bool,
    /// Why it failed.
    pub error: String,
}

/// One recorded step.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StepView {
    /// Global step number, 1-based.
    pub step: u64,
    /// Round number.
    pub round: u32,
    /// Step within the round.
    pub round_step: u32,
    /// Agent name.
    pub agent_name: String,
    /// host, app, or person (a person's input while they had taken the desktop over; docs/live.md).
    pub agent_kind: String,
    /// FSM state before the step.
    pub state_before: String,
    /// FSM state after the step.
    pub state_after: String,
    /// Subtask worked on.
    pub subtask: String,
    /// What the model observed.
    pub observation: String,
    /// Its reasoning.
    pub thought: String,
    /// Its plan.
    pub plan: Vec<String>,
    /// Its comment.
    pub comment: String,
    /// The status it returned.
    pub status: String,
    /// Actions with results.
    pub actions: Vec<ActionView>,
    /// Per-phase timings.
    pub phases: Vec<PhaseView>,
    /// LLM cost in US dollars.
    pub cost: f64,
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// RFC 3339.
    pub started_at: String,
    /// RFC 3339.
    pub finished_at: String,
    /// Screenshot kinds stored for this step (`clean`, `annotated`, `desktop`).
    pub screenshots: Vec<String>,
    /// What the step acted on, in screenshot pixels (for drawing over the screenshot).
    pub acted: Vec<ActedView>,
    /// `[width, height]` of the clean screenshot, the pixels `acted` is in (the annotated image is the
    /// size the model was sent, which is smaller for windows larger than the prompt's images).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean_size: Option<[u64; 2]>,
    /// What went wrong that the step survived (e.g. visual grounding failed and the step used
    /// accessibility controls only); each was also a `warning` event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// In a replay task: `{of, step, source: "recording" | "model", note?}` (who decided the step).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub replay: Option<Json>,
    /// In a reuse task, a step of the earlier task's plan: `{of, step, source: "reused" | "model",
    /// note?}` (reused without a model call, or decided by the model because the screen differed).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub reuse: Option<Json>,
    /// The retrieved knowledge that reached this step's prompt, in the prompt's order (with
    /// `--knowledge`; empty without it or when nothing matched; docs/knowledge.md "Visible").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub knowledge: Vec<KnowledgeUsedView>,
}

/// One item of retrieved knowledge a step's prompt quoted.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct KnowledgeUsedView {
    /// `document`, `experience`, `demonstration` or `web`.
    pub kind: String,
    /// Its citation: a file name, `task:<id>`, or a URL.
    pub source: String,
    /// Its heading (cut at 200 characters).
    #[serde(default)]
    pub title: String,
    /// Its ranking score (higher is better; 0 for web results).
    #[serde(default)]
    pub score: f64,
    /// The knowledge item's id (absent for web results).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
}

/// A control an action of the step targeted, located in the step's screenshots.
#[derive(Debug, Clone, Serialize, serde::Deserialize, ToSchema)]
pub struct ActedView {
    /// The tool.
    #[serde(default)]
    pub function: String,
    /// The control's label in the annotated screenshot.
    #[serde(default)]
    pub label: String,
    /// `[left, top, right, bottom]` in screenshot pixels.
    pub rect: [i64; 4],
    /// `[x, y]` where the pointer acts, in screenshot pixels.
    pub point: [i64; 2],
}

/// One page of steps.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StepPage {
    /// Steps in order.
    pub steps: Vec<StepView>,
}

/// `GET /healthz` and `GET /readyz`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct HealthView {
    /// `ok`.
    pub status: String,
}

fn time(ts: Option<prost_types::Timestamp>) -> String {
    ts.and_then(|t| {
        chrono::DateTime::from_timestamp(t.seconds, u32::try_from(t.nanos).unwrap_or(0))
    })
    .map(|t| t.to_rfc3339())
    .unwrap_or_default()
}

fn seconds(ts: Option<prost_types::Timestamp>) -> f64 {
    ts.map_or(0.0, |t| t.seconds as f64 + f64::from(t.nanos) / 1e9)
}

fn round_status(value: i32) -> String {
    pb::RoundStatus::try_from(value)
        .map(|s| {
            s.as_str_name()
                .trim_start_matches("ROUND_STATUS_")
                .to_lowercase()
        })
        .unwrap_or_default()
}

impl TaskView {
    /// The REST view of a session (list pages: no rounds, questions or held action).
    pub fn from_session(session: pb::Session) -> Self {
        let id = session.id.clone();
        let totals = session.totals.unwrap_or_default();
        let base = format!("/v1/tasks/{id}");
        Self {
            waiting_for: WaitingForView::of(&session),
            kind: TaskKind::of(&session),
            request: session.request,
            status: TaskStatus::from_proto(session.status),
            result: session.result,
            state: String::new(),
            rounds: Vec::new(),
            pending_questions: Vec::new(),
            held_action: None,
            totals: TotalsView {
                steps: totals.steps,
                cost: totals.cost,
                input_tokens: totals.input_tokens,
                output_tokens: totals.output_tokens,
                duration_seconds: (seconds(session.updated_at) - seconds(session.created_at))
                    .max(0.0),
            },
            cancel_requested: session.cancel_requested,
            last_seq: session.last_seq,
            created_at: time(session.created_at),
            updated_at: time(session.updated_at),
            images_pruned_at: session.images_pruned_at.map(|t| time(Some(t))),
            links: TaskLinks {
                steps: format!("{base}/steps"),
                answers: format!("{base}/answers"),
                confirmation: format!("{base}/confirmation"),
                requests: format!("{base}/requests"),
                cancel: format!("{base}/cancel"),
                self_: base,
            },
            id,
            replay: None,
            reuse: None,
        }
    }

    /// The full REST view of a task.
    pub fn from_snapshot(snapshot: TaskSnapshot) -> Self {
        let waiting_for = WaitingForView::of_task(&snapshot.session, snapshot.held.is_some());
        let mut view = Self::from_session(snapshot.session);
        view.waiting_for = waiting_for;
        view.state = snapshot.state;
        view.rounds = snapshot
            .rounds
            .into_iter()
            .map(|r| RoundView {
                number: r.number,
                request: r.request,
                status: round_status(r.status),
                result: r.result,
                steps: r.steps,
            })
            .collect();
        view.pending_questions = snapshot
            .pending
            .into_iter()
            .map(|q| QuestionView {
                id: q.id,
                index: q.index,
                question: q.question,
            })
            .collect();
        view.held_action = snapshot.held.map(|h| HeldActionView {
            arguments: serde_json::from_str(&h.arguments_json).unwrap_or(Json::Null),
            id: h.id,
            agent_name: h.agent_name,
            function: h.function,
            target_name: h.target_name,
            reason: h.reason,
            step: h.step,
        });
        view.reuse = snapshot.reuse.map(|r| ReuseView {
            of: r.of,
            score: r.score,
            reused: r.reused,
            fell_back: r.fell_back,
        });
        view.replay = snapshot.replay.map(|r| ReplayView {
            of: r.of,
            on_mismatch: crate::replay::OnMismatch::from_proto(r.on_mismatch),
            replayed: r.replayed,
            fell_back: r.fell_back,
        });
        view
    }
}

fn screenshot_name(kind: i32) -> Option<&'static str> {
    match pb::ArtifactKind::try_from(kind) {
        Ok(pb::ArtifactKind::CleanScreenshot) => Some("clean"),
        Ok(pb::ArtifactKind::AnnotatedScreenshot) => Some("annotated"),
        Ok(pb::ArtifactKind::DesktopScreenshot) => Some("desktop"),
        Ok(pb::ArtifactKind::AfterScreenshot) => Some("after"),
        _ => None,
    }
}

impl From<pb::Step> for StepView {
    fn from(s: pb::Step) -> Self {
        Self {
            step: s.step,
            round: s.round,
            round_step: s.round_step,
            agent_name: s.agent_name.clone(),
            // A person's input during a takeover is stored as an `app` step named `Person`.
            agent_kind: match pb::AgentKind::try_from(s.agent_kind) {
                _ if s.agent_name == crate::runner::person::PERSON => "person".into(),
                Ok(pb::AgentKind::Host) => "host".into(),
                Ok(pb::AgentKind::App) => "app".into(),
                _ => String::new(),
            },
            state_before: s.state_before,
            state_after: s.state_after,
            subtask: s.subtask,
            observation: s.observation,
            thought: s.thought,
            plan: s.plan,
            comment: s.comment,
            status: s.status,
            actions: s
                .actions
                .into_iter()
                .map(|a| ActionView {
                    function: a.function,
                    arguments: ufo_proto::json::from_optional_struct(a.arguments),
                    status: a.status,
                    representation: a.representation,
                    target_name: a.target_name,
                    result: a.result.map(|r| ActionResultView {
                        status: pb::ResultStatus::try_from(r.status)
                            .map(|s| {
                                s.as_str_name()
                                    .trim_start_matches("RESULT_STATUS_")
                                    .to_lowercase()
                            })
                            .unwrap_or_default(),
                        error: r.error,
                        result: r.result.map_or(Json::Null, ufo_proto::json::from_value),
                        effect: r.effect.map(|e| EffectView {
                            kind: pb::EffectKind::try_from(e.kind)
                                .map(|k| {
                                    k.as_str_name()
                                        .trim_start_matches("EFFECT_KIND_")
                                        .to_lowercase()
                                })
                                .unwrap_or_default(),
                            description: e.description,
                        }),
                    }),
                    selector: a.selector.as_ref().and_then(|sel| {
                        serde_json::to_value(crate::replay::selector::Selector::from_proto(sel))
                            .ok()
                    }),
                })
                .collect(),
            phases: s
                .phases
                .into_iter()
                .map(|p| PhaseView {
                    phase: p.phase,
                    seconds: p.seconds,
                    success: p.success,
                    error: p.error,
                })
                .collect(),
            cost: s.cost,
            input_tokens: s.input_tokens,
            output_tokens: s.output_tokens,
            started_at: time(s.started_at),
            finished_at: time(s.finished_at),
            replay: s
                .extra
                .as_ref()
                .and_then(|e| e.fields.get("replay"))
                .map(|v| ufo_proto::json::from_value(v.clone())),
            reuse: s
                .extra
                .as_ref()
                .and_then(|e| e.fields.get("reuse"))
                .map(|v| ufo_proto::json::from_value(v.clone())),
            warnings: s
                .extra
                .as_ref()
                .and_then(|e| e.fields.get("warnings"))
                .map(|v| ufo_proto::json::from_value(v.clone()))
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default(),
            acted: s
                .extra
                .as_ref()
                .and_then(|e| e.fields.get("acted"))
                .map(|v| ufo_proto::json::from_value(v.clone()))
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default(),
            knowledge: s
                .extra
                .as_ref()
                .and_then(|e| e.fields.get("knowledge"))
                .map(|v| ufo_proto::json::from_value(v.clone()))
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default(),
            clean_size: s
                .artifacts
                .iter()
                .find(|a| a.kind == pb::ArtifactKind::CleanScreenshot as i32)
                .and_then(|a| a.metadata.clone())
                .map(ufo_proto::json::from_struct)
                .and_then(|m| Some([m["width"].as_u64()?, m["height"].as_u64()?])),
            screenshots: s
                .artifacts
                .iter()
                .filter_map(|a| screenshot_name(a.kind))
                .map(str::to_owned)
                .collect(),
        }
    }
}

/// Everything `GET /v1/tasks/{id}` shows, read from the session service.
#[derive(Debug, Clone)]
pub struct TaskSnapshot {
    /// The session row.
    pub session: pb::Session,
    /// Its rounds, in order.
    pub rounds: Vec<pb::Round>,
    /// `Agent:STATE` after the newest step; empty when the task is not running.
    pub state: String,
    /// Questions waiting for answers.
    pub pending: Vec<pb::PendingQuestion>,
    /// The action waiting for a confirmation.
    pub held: Option<pb::HeldAction>,
    /// What the newest step decided (stored with it), with the ids of the held action and the questions.
    pub next: Option<crate::round::control::Next>,
    /// A replay task's origin and counts.
    pub replay: Option<pb::Replay>,
    /// A reuse task's origin and counts.
    pub reuse: Option<pb::Reuse>,
}

impl TaskSnapshot {
    /// The gRPC view.
    pub fn to_proto(&self) -> pb::Task {
        pb::Task {
            id: self.session.id.clone(),
            request: self.session.request.clone(),
            status: self.session.status,
            totals: self.session.totals,
            rounds: self.session.rounds,
            state: self.state.clone(),
            pending_questions: self.pending.clone(),
            held_action: self.held.clone(),
            result: self.session.result.clone(),
            last_seq: self.session.last_seq,
            replay: self.replay.clone(),
            reuse: self.reuse.clone(),
            waiting_for: WaitingForView::of_task(&self.session, self.held.is_some())
                .map(|w| w.to_proto()),
        }
    }
}
