//! Recording one produced step: the step with its artifacts, memory item, blackboard entries, its typed
//! control value (what comes next, ids assigned) and the question/hold entries and events that value
//! implies — each written once, here — in one RecordStep fenced by the lease owner (its screenshots are
//! blobs put first, [`crate::store::blobs`]; the step references them).
//!
//! Recording is three parts so that it can run off the step's critical path ([`super::ahead`]):
//! [`TaskRun::prepare`] builds the request, [`Recorder::commit`] writes it (owning everything it needs, so
//! it can run on a task of its own while the next step works), and [`TaskRun::settle`] brings the history in
//! line with what the store recorded. The history gets the step as sent the moment it is prepared
//! ([`TaskRun::assume`]): the next step is produced from it while the commit runs.

use std::sync::Arc;

use ufo_proto::v1::{BlackboardEntry, BlackboardKind, RecordStepRequest, Round, Step};

use super::hitl;
use super::task::{History, TaskRun};
use crate::store::blobs::ArtifactUpload;
use crate::store::blobs::BlobUploads;
use crate::store::client::SessionClient;
use crate::store::retry::Retry;

/// A step ready to be written.
pub(super) struct Prepared {
    number: u64,
    base: RecordStepRequest,
    artifacts: Vec<ArtifactUpload>,
    uploads: Option<Arc<BlobUploads>>,
}

/// What the store recorded for a step.
#[derive(Debug, Clone)]
pub(crate) struct Committed {
    step: Step,
    blackboard: Vec<BlackboardEntry>,
    duplicate: bool,
}

/// Where the history stood before a prepared step was assumed into it, to replace the assumed parts with
/// the recorded ones.
#[derive(Debug, Clone, Copy)]
pub(super) struct Marks {
    step_index: usize,
    board: [usize; 4],
    wrote_board: bool,
}

/// Everything a commit needs, owned: it may run on a task of its own.
#[derive(Clone)]
pub(super) struct Recorder {
    pub(super) client: SessionClient,
    pub(super) retry: Retry,
}

fn board_lists(board: &mut ufo_proto::v1::Blackboard) -> [&mut Vec<BlackboardEntry>; 4] {
    [
        &mut board.questions,
        &mut board.requests,
        &mut board.trajectories,
        &mut board.images,
    ]
}

fn board_list(
    board: &mut ufo_proto::v1::Blackboard,
    kind: i32,
) -> Option<&mut Vec<BlackboardEntry>> {
    match BlackboardKind::try_from(kind) {
        Ok(BlackboardKind::Question) => Some(&mut board.questions),
        Ok(BlackboardKind::Request) => Some(&mut board.requests),
        Ok(BlackboardKind::Trajectory) => Some(&mut board.trajectories),
        Ok(BlackboardKind::Image) => Some(&mut board.images),
        _ => None,
    }
}

impl TaskRun {
    /// The RecordStep request of a produced step.
    pub(super) fn prepare(
        &self,
        number: u64,
        round: &Round,
        round_step: u32,
        output: crate::round::output::StepOutput,
    ) -> Prepared {
        let mut blackboard = output.blackboard;
        let mut events = output.events;
        let mut control = output.control;
        control.next.assign_ids(number);
        let (asked, held) = hitl::writes(&control.next);
        blackboard.extend(asked);
        events.extend(held);
        for event in &mut events {
            event.step = number;
            event.round = round.number;
        }
        let mut step = output.step;
        step.session_id = self.session.id.clone();
        step.step = number;
        step.round = round.number;
        step.round_step = round_step;
        control.write(&mut step);
        // Model text can hold what the store refuses (NUL): never let it make the step unrecordable.
        let mut memory_item = output.memory_item.map(ufo_proto::json::object_to_struct);
        crate::store::sanitise::structure(&mut memory_item);
        crate::store::sanitise::step(&mut step);
        blackboard
            .iter_mut()
            .for_each(|e| crate::store::sanitise::structure(&mut e.value));
        events
            .iter_mut()
            .for_each(|e| crate::store::sanitise::structure(&mut e.payload));
        Prepared {
            number,
            base: RecordStepRequest {
                step: Some(step),
                memory_item,
                blackboard,
                events,
                lease_owner: self.worker_id.clone(),
                blobs: Vec::new(),
            },
            artifacts: output.artifacts,
            uploads: output.uploads,
        }
    }

    /// What a commit of this task's steps needs.
    pub(super) fn recorder(&self) -> Recorder {
        Recorder {
            client: self.client.clone(),
            retry: self.config.store_retry(),
        }
    }

    /// Adds the prepared step to the history as sent (its memory item, its board entries without their
    /// indices); [`TaskRun::settle`] replaces them with what the store recorded.
    pub(super) fn assume(&self, prepared: &Prepared, history: &mut History) -> Marks {
        let mut board = [0; 4];
        for (mark, list) in board.iter_mut().zip(board_lists(&mut history.blackboard)) {
            *mark = list.len();
        }
        let marks = Marks {
            step_index: history.steps.len(),
            board,
            wrote_board: !prepared.base.blackboard.is_empty(),
        };
        let step = prepared.base.step.clone().unwrap_or_default();
        if let Some(item) = prepared.base.memory_item.clone() {
            history.memory.push(ufo_proto::v1::MemoryItem {
                agent_name: step.agent_name.clone(),
                step: prepared.number,
                item: Some(item),
            });
        }
        history.steps.push(step);
        for entry in &prepared.base.blackboard {
            if let Some(list) = board_list(&mut history.blackboard, entry.kind) {
                list.push(entry.clone());
            }
        }
        marks
    }

    /// Replaces what [`TaskRun::assume`] added with what the store recorded.
    pub(super) async fn settle(
        &self,
        marks: Marks,
        recorded: Committed,
        history: &mut History,
    ) -> Result<(), tonic::Status> {
        if let Some(step) = history.steps.get_mut(marks.step_index) {
            *step = recorded.step;
        }
        if recorded.duplicate && marks.wrote_board {
            // Recorded earlier (a retried call): the board is read back whole.
            history.blackboard = self.board().await?;
        } else {
            for (mark, list) in marks.board.iter().zip(board_lists(&mut history.blackboard)) {
                list.truncate(*mark);
            }
            // The store returns the entries it wrote with their indices; during a run only this runner
            // writes the board, except for answers, which are read back when waited for.
            for entry in recorded.blackboard {
                if let Some(list) = board_list(&mut history.blackboard, entry.kind) {
                    list.push(entry);
                }
            }
        }
        Ok(())
    }
}

impl Recorder {
    /// Writes a prepared step: waits for its blob uploads, then RecordStep (retried on transient
    /// failures; an identical step already recorded comes back as a duplicate).
    pub(super) async fn commit(self, prepared: Prepared) -> Result<Committed, tonic::Status> {
        let Prepared {
            number,
            mut base,
            artifacts,
            uploads,
        } = prepared;
        // Uploads started at capture are waited for here (those nobody started are made now).
        let uploads = uploads.unwrap_or_else(|| Arc::new(BlobUploads::new(self.client.clone())));
        base.blobs = crate::store::blobs::references(&uploads, artifacts, &self.retry).await?;
        let recorded = crate::store::retry::retried(&self.retry, "RecordStep", || {
            let mut client = self.client.clone();
            let request = base.clone();
            async move { client.record_step(request).await }
        })
        .await?
        .into_inner();
        let step = recorded.step.unwrap_or_default();
        tracing::info!(
            step = number,
            duplicate = recorded.duplicate,
            "step recorded"
        );
        Ok(Committed {
            step,
            blackboard: recorded.blackboard,
            duplicate: recorded.duplicate,
        })
    }
}
