//! Following a task live: `AgentService.StreamSteps` from a sequence number, one line per step and notable
//! event, questions and held actions prompted on the terminal and answered through the REST API, and a
//! transparent resume (from the last seen sequence number + 1) whenever the stream drops, with backoff.

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines, Stdin};
use ufo_common::grpc::ClientContext;
use ufo_proto::v1::agent_service_client::AgentServiceClient;
use ufo_proto::v1::{Event, EventKind, StreamStepsRequest};

use crate::error::CliError;
use crate::render;
use ufo_client::AgentClient;

/// The first wait before reconnecting; it doubles per failed attempt up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Follows one task until its stream ends.
pub struct Follower {
    api: AgentClient,
    grpc_url: String,
    context: ClientContext,
    prompt: bool,
    stdin: Option<Lines<BufReader<Stdin>>>,
    /// The held action (by step) already prompted for, so replays and twin events prompt once.
    prompted_hold: Option<String>,
    /// Whether a stream was ever opened: only then is a failure a drop worth resuming after.
    connected: bool,
    /// How long reconnecting may keep failing before the follower gives up.
    reconnect_for: Duration,
    /// Whether a stream was opened since the last failure (ends the current outage).
    reopened: bool,
    /// The sequence number after the event being shown (where a prompt starts watching for a decision
    /// made elsewhere).
    after_seq: u64,
}

impl Follower {
    /// A follower using `api` for reads and answers and `grpc_url` for the stream; prompts when `prompt`.
    pub fn new(
        api: AgentClient,
        grpc_url: &str,
        token: Option<&str>,
        prompt: bool,
    ) -> Result<Self, CliError> {
        let context = ClientContext::new(token).map_err(|_| CliError::InvalidArgument {
            flag: "--token",
            reason: "contains characters that cannot be sent in a header".to_owned(),
        })?;
        Ok(Self {
            api,
            grpc_url: grpc_url.to_owned(),
            context,
            prompt,
            stdin: prompt.then(|| BufReader::new(tokio::io::stdin()).lines()),
            prompted_hold: None,
            connected: false,
            reconnect_for: Duration::from_secs(120),
            reopened: false,
            after_seq: 1,
        })
    }

    /// Keeps reconnecting for up to `budget` of consecutive failures (reset by every reconnection).
    pub fn reconnect_for(mut self, budget: Duration) -> Self {
        self.reconnect_for = budget;
        self
    }

    /// Prints the task's events from `from_seq` until the task ends; returns the final task.
    ///
    /// A dropped stream (the agent restarting, UNAVAILABLE) is resumed from the event after the last
    /// one shown, so nothing is missed or shown twice, with exponential backoff; the follower gives up
    /// only when reconnecting has failed for the whole reconnect budget in a row.
    pub async fn follow(&mut self, task_id: &str, from_seq: u64) -> Result<Value, CliError> {
        let mut next = from_seq.max(1);
        // The first failure of the current outage, and the attempts since.
        let mut outage: Option<(tokio::time::Instant, u32)> = None;
        loop {
            let reconnecting = outage.is_some();
            let result = match self.stream_once(task_id, &mut next, reconnecting).await {
                // The stream ends after the task's terminal event; an end without one (an agent
                // shutting down) is a drop like any other.
                Ok(()) => self
                    .api
                    .get(task_id)
                    .await
                    .map_err(CliError::from)
                    .and_then(|task| {
                        let status = task.get("status").and_then(Value::as_str).unwrap_or("");
                        if render::is_terminal(status) {
                            Ok(task)
                        } else {
                            Err(CliError::Grpc {
                                code: tonic::Code::Unavailable,
                                message: "the stream ended while the task runs".to_owned(),
                            })
                        }
                    }),
                Err(e) => Err(e),
            };
            match result {
                Ok(task) => return Ok(task),
                Err(e) if self.connected && resumable(&e) => {
                    let (since, attempts) = match outage {
                        // A stream was opened since the last failure: a new outage.
                        Some((since, attempts)) if !self.reopened => (since, attempts + 1),
                        _ => {
                            eprintln!("stream interrupted ({e}); reconnecting from event {next}");
                            (tokio::time::Instant::now(), 1)
                        }
                    };
                    self.reopened = false;
                    if since.elapsed() > self.reconnect_for {
                        eprintln!(
                            "giving up after {attempts} reconnection attempts in {}s",
                            since.elapsed().as_secs()
                        );
                        return Err(e);
                    }
                    outage = Some((since, attempts));
                    tokio::time::sleep(backoff(attempts)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn stream_once(
        &mut self,
        task_id: &str,
        next: &mut u64,
        reconnecting: bool,
    ) -> Result<(), CliError> {
        let channel = tonic::transport::Endpoint::from_shared(self.grpc_url.clone())
            .map_err(|e| CliError::InvalidArgument {
                flag: "--grpc",
                reason: format!("{:?} is not a URL ({e})", self.grpc_url),
            })?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| CliError::Unreachable {
                url: self.grpc_url.clone(),
                cause: innermost(&e),
                flag: "--grpc",
                env: "UFO_GRPC",
            })?;
        let mut client = AgentServiceClient::with_interceptor(channel, self.context.clone());
        let mut stream = client
            .stream_steps(StreamStepsRequest {
                task_id: task_id.to_owned(),
                from_seq: *next,
            })
            .await
            .map_err(|s| CliError::from_status(s, &self.grpc_url))?
            .into_inner();
        self.connected = true;
        self.reopened = true;
        if reconnecting {
            eprintln!("reconnected; resuming from event {next}");
        }
        while let Some(event) = stream
            .message()
            .await
            .map_err(|s| CliError::from_status(s, &self.grpc_url))?
        {
            // A replay overlapping what was shown (a server resuming from an older point) is skipped.
            if event.seq < *next {
                continue;
            }
            *next = event.seq + 1;
            self.after_seq = *next;
            self.show(task_id, &event).await?;
        }
        Ok(())
    }

    async fn show(&mut self, task_id: &str, event: &Event) -> Result<(), CliError> {
        let payload = ufo_proto::json::from_optional_struct(event.payload.clone());
        let kind = EventKind::try_from(event.kind).unwrap_or(EventKind::Unspecified);
        if kind == EventKind::StepFinished {
            println!("{}", self.step_line(task_id, event, &payload).await);
            return Ok(());
        }
        if let Some(line) = render::event_line(event, &payload) {
            println!("{line}");
        }
        if self.prompt
            && matches!(
                kind,
                EventKind::QuestionAsked | EventKind::ConfirmationRequested | EventKind::ActionHeld
            )
        {
            self.ask_person(task_id).await?;
        }
        Ok(())
    }

    /// The full progress line (with actions and cost) from the recorded step; the event's own payload
    /// when the step cannot be read.
    async fn step_line(&self, task_id: &str, event: &Event, payload: &Value) -> String {
        let recorded = self
            .api
            .steps(task_id, Some(event.step), Some(1))
            .await
            .ok();
        let step = recorded.as_ref().and_then(|r| {
            let list = r.get("steps").unwrap_or(r);
            list.as_array()?
                .iter()
                .find(|s| s.get("step").and_then(Value::as_u64) == Some(event.step))
        });
        match step {
            // The same `#seq` prefix as every other event line, so `watch --from` can start here.
            Some(step) => format!("#{:<4} {}", event.seq, render::step_line(step)),
            None => render::step_event_line(event, payload),
        }
    }

    /// Prompts for whatever the task waits on right now (it may already be answered when replaying).
    async fn ask_person(&mut self, task_id: &str) -> Result<(), CliError> {
        let task = self.api.get(task_id).await?;
        // (id, question): the answers name the questions shown, so they cannot land on others.
        let questions: Vec<(String, String)> = task
            .get("pending_questions")
            .and_then(Value::as_array)
            .map(|qs| {
                qs.iter()
                    .filter_map(|q| {
                        let text = |k: &str| q.get(k).and_then(Value::as_str).map(str::to_owned);
                        Some((text("id")?, text("question")?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        if !questions.is_empty() {
            let mut answers = Vec::with_capacity(questions.len());
            for (_, question) in &questions {
                match self
                    .read_until_decided(task_id, &format!("? {question}\n> "))
                    .await?
                {
                    Prompted::Line(Some(answer)) => answers.push(answer),
                    Prompted::Line(None) => {
                        println!("(no answer given; answer later with `ufo answer {task_id} ...`)");
                        return Ok(());
                    }
                    Prompted::Withdrawn(why) => {
                        println!("(question withdrawn: {why})");
                        return Ok(());
                    }
                }
            }
            let ids: Vec<String> = questions.into_iter().map(|(id, _)| id).collect();
            if let Err(e) = self.api.answer(task_id, &ids, &answers).await {
                settled_elsewhere(CliError::from(e), "answers")?;
            }
            return Ok(());
        }
        if let Some(held) = task.get("held_action").filter(|h| h.is_object()) {
            let key = format!(
                "{}:{}",
                held.get("step").map(Value::to_string).unwrap_or_default(),
                render::held_text(held)
            );
            if self.prompted_hold.as_ref() == Some(&key) {
                return Ok(());
            }
            self.prompted_hold = Some(key);
            let prompt = format!("? approve {}? [y/N] ", render::held_text(held));
            match self.read_until_decided(task_id, &prompt).await? {
                Prompted::Line(Some(answer)) => {
                    let approve = matches!(answer.trim().to_lowercase().as_str(), "y" | "yes");
                    // The decision names the action displayed: if another was decided meanwhile and a
                    // newer one is held, the service refuses (409) instead of deciding the newer one.
                    let action_id = held.get("id").and_then(Value::as_str).unwrap_or_default();
                    if let Err(e) = self.api.confirm(task_id, action_id, approve, None).await {
                        settled_elsewhere(CliError::from(e), "decision")?;
                    }
                }
                Prompted::Line(None) => println!(
                    "(no decision given; decide later with `ufo confirm {task_id} --approve|--reject`)"
                ),
                Prompted::Withdrawn(why) => println!("(prompt withdrawn: {why})"),
            }
        }
        Ok(())
    }

    /// Prompts and reads a line, unless what is asked is settled elsewhere first (another `ufo`, the
    /// viewer, the API decided or answered, or the task ended): then the prompt is withdrawn.
    async fn read_until_decided(
        &mut self,
        task_id: &str,
        prompt: &str,
    ) -> Result<Prompted, CliError> {
        let settled = settled_after(
            self.grpc_url.clone(),
            self.context.clone(),
            task_id.to_owned(),
            self.after_seq,
        );
        tokio::select! {
            line = self.read_line(prompt) => Ok(Prompted::Line(line?)),
            why = settled => {
                println!();
                Ok(Prompted::Withdrawn(why))
            }
        }
    }

    async fn read_line(&mut self, prompt: &str) -> Result<Option<String>, CliError> {
        let Some(lines) = self.stdin.as_mut() else {
            return Ok(None);
        };
        let mut out = tokio::io::stdout();
        out.write_all(prompt.as_bytes()).await?;
        out.flush().await?;
        Ok(lines.next_line().await?)
    }
}

/// What a prompt got: the person's line (None at end of input), or withdrawn because it was settled
/// elsewhere (why).
enum Prompted {
    Line(Option<String>),
    Withdrawn(String),
}

/// A decision or answers the service refused because they were settled meanwhile (409: decided
/// elsewhere, nothing pending, task ended) are said and not an error: the follow goes on.
fn settled_elsewhere(e: CliError, what: &str) -> Result<(), CliError> {
    match e {
        CliError::Api {
            status: 409,
            message,
            ..
        } => {
            println!("(your {what} was not needed: {message})");
            Ok(())
        }
        other => Err(other),
    }
}

/// Resolves when the task's event log (from `from_seq`) shows what a prompt asks settled elsewhere: a
/// question answered, the held action approved or rejected, a cancel, or the end of the task. Never
/// resolves when the log cannot be followed (the prompt then simply stays).
async fn settled_after(
    grpc_url: String,
    context: ClientContext,
    task_id: String,
    from_seq: u64,
) -> String {
    let watched = async {
        let channel = tonic::transport::Endpoint::from_shared(grpc_url)
            .ok()?
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .ok()?;
        let mut client = AgentServiceClient::with_interceptor(channel, context);
        let mut stream = client
            .stream_steps(StreamStepsRequest { task_id, from_seq })
            .await
            .ok()?
            .into_inner();
        while let Ok(Some(event)) = stream.message().await {
            let why = match EventKind::try_from(event.kind).unwrap_or(EventKind::Unspecified) {
                EventKind::QuestionAnswered => "answered elsewhere",
                EventKind::ActionApproved => "approved elsewhere",
                EventKind::ActionRejected => "rejected elsewhere",
                EventKind::CancelRequested => "the task is being cancelled",
                EventKind::TaskFinished | EventKind::TaskFailed | EventKind::TaskCancelled => {
                    "the task has ended"
                }
                _ => continue,
            };
            return Some(why.to_owned());
        }
        None
    };
    match watched.await {
        Some(why) => why,
        None => std::future::pending().await,
    }
}

/// The wait before reconnection attempt `attempt` (1-based): 100 ms doubling, at most 5 s.
fn backoff(attempt: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(MAX_BACKOFF)
}

/// Whether a failure is worth resuming the stream after (the connection dropped, not a refusal).
fn resumable(e: &CliError) -> bool {
    matches!(
        e,
        CliError::Unreachable { .. }
            | CliError::Grpc {
                code: tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Internal,
                ..
            }
    )
}

/// The innermost cause of an error chain (e.g. "Connection refused"), which says the most.
pub(crate) fn innermost(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Why the task was cancelled: the reason of its `CANCEL_REQUESTED` event (read from the event log up to
/// `last_seq`, the newest event); None when none was requested or the log cannot be read.
pub async fn cancel_reason(
    grpc_url: &str,
    token: Option<&str>,
    task_id: &str,
    last_seq: u64,
) -> Option<String> {
    let context = ClientContext::new(token).ok()?;
    let channel = tonic::transport::Endpoint::from_shared(grpc_url.to_owned())
        .ok()?
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .ok()?;
    let mut client = AgentServiceClient::with_interceptor(channel, context);
    let mut stream = client
        .stream_steps(StreamStepsRequest {
            task_id: task_id.to_owned(),
            from_seq: 1,
        })
        .await
        .ok()?
        .into_inner();
    let mut reason = None;
    while let Ok(Some(event)) = stream.message().await {
        if event.kind == EventKind::CancelRequested as i32 {
            let payload = ufo_proto::json::from_optional_struct(event.payload.clone());
            reason = payload
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        if event.seq >= last_seq {
            break;
        }
    }
    reason
}
