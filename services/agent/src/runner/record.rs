//! Recording one produced step: the step with its artifacts, memory item, blackboard entries, its typed
//! control value (what comes next, ids assigned) and the question/hold entries and events that value
//! implies — each written once, here — in one RecordStep fenced by the lease owner (artifacts beyond the
//! inline budget are put first and linked).
//!
//! Recording is three parts so that it can run off the step's critical path ([`super::ahead`]):
//! [`TaskRun::prepare`] builds the request, [`Recorder::commit`] writes it (owning everything it needs, so
//! it can run on a task of its own while the next step works), and [`TaskRun::settle`] brings the history in
//! line with what the store recorded. The history gets the step as sent the moment it is prepared
//! ([`TaskRun::assume`]): the next step is produced from it while the commit runs.

use std::sync::Arc;

use ufo_proto::v1::{
    ArtifactRef, BlackboardEntry, BlackboardKind, PutArtifactRequest, RecordStepRequest, Round,
    Step, StepArtifact,
};

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
    pub(super) session_id: String,
    pub(super) retry: Retry,
    pub(super) inline_artifact_bytes: usize,
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
                artifact_ids: Vec::new(),
                events,
                lease_owner: self.worker_id.clone(),
                artifacts: Vec::new(),
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
            session_id: self.session.id.clone(),
            retry: self.config.store_retry(),
            inline_artifact_bytes: self.config.inline_artifact_bytes,
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
        // Uploads started at capture are waited for here; what could not be uploaded goes inline.
        let (blobs, mut pending) = crate::store::blobs::split(uploads.as_deref(), artifacts).await;
        base.blobs = blobs;
        // The step's artifacts travel inside RecordStep (stored in the step's transaction) up to the
        // configured total; any beyond it are stored first, concurrently, one PutArtifact each, and the step
        // links them. A step larger than the session service accepts in one message (its
        // --max-message-bytes is below this runner's inline budget) is refused with nothing recorded: its
        // inline artifacts are then stored that way too and it is sent again.
        let mut budget = self.inline_artifact_bytes;
        let mut linked = Vec::new();
        let (recorded, inline) = loop {
            let mut request = base.clone();
            let mut inline_bytes = 0usize;
            let mut separate = Vec::new();
            for artifact in std::mem::take(&mut pending) {
                if inline_bytes + artifact.data.len() <= budget {
                    inline_bytes += artifact.data.len();
                    request.artifacts.push(artifact);
                } else {
                    separate.push(artifact);
                }
            }
            let stored = self.put_artifacts(number, separate).await?;
            linked.extend(stored.into_iter().map(|stored| stored.id));
            request.artifact_ids.clone_from(&linked);
            let recorded = crate::store::retry::retried(&self.retry, "RecordStep", || {
                let mut client = self.client.clone();
                let request = request.clone();
                async move { client.record_step(request).await }
            });
            match recorded.await {
                Ok(recorded) => break (recorded.into_inner(), request.artifacts),
                Err(status)
                    if status.code() == tonic::Code::ResourceExhausted && inline_bytes > 0 =>
                {
                    tracing::warn!(step = number, error = %status,
                        "the step with its screenshots is too large for the session service; storing them separately");
                    (pending, budget) = (request.artifacts, 0);
                }
                Err(status) => return Err(status),
            }
        };
        let mut step = recorded.step.unwrap_or_default();
        // A session service older than `RecordStepRequest.artifacts` ignores the field and records the step
        // without them (e.g. during a rolling upgrade that reached the agents first): the step's references
        // show it, and the screenshots are then stored under the step with PutArtifact.
        let missing = missing_inline(&inline, &step.artifacts);
        if !missing.is_empty() {
            tracing::warn!(
                step = number,
                missing = missing.len(),
                "the session service did not store the step's artifacts; storing them with PutArtifact"
            );
            let missing = missing.into_iter().cloned().collect();
            step.artifacts
                .extend(self.put_artifacts(number, missing).await?);
        }
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

    /// Stores `artifacts` under step `number`, concurrently, one PutArtifact each.
    async fn put_artifacts(
        &self,
        number: u64,
        artifacts: Vec<StepArtifact>,
    ) -> Result<Vec<ArtifactRef>, tonic::Status> {
        let puts = artifacts.into_iter().map(|artifact| {
            let mut client = self.client.clone();
            let request = PutArtifactRequest {
                session_id: self.session_id.clone(),
                step: number,
                kind: artifact.kind,
                content_type: artifact.content_type,
                data: artifact.data,
                metadata: artifact.metadata,
            };
            async move { client.put_artifact(request).await.map(|r| r.into_inner()) }
        });
        futures::future::try_join_all(puts).await
    }
}

/// The inline artifacts with no stored reference of the same kind and size.
fn missing_inline<'a>(inline: &'a [StepArtifact], stored: &[ArtifactRef]) -> Vec<&'a StepArtifact> {
    inline
        .iter()
        .filter(|a| {
            !stored
                .iter()
                .any(|r| r.kind == a.kind && r.size == a.data.len() as u64)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ufo_proto::v1::ArtifactKind;

    fn inline(kind: ArtifactKind, len: usize) -> StepArtifact {
        StepArtifact {
            kind: kind as i32,
            content_type: "image/png".into(),
            data: vec![1; len].into(),
            metadata: None,
        }
    }

    fn stored(kind: ArtifactKind, size: u64) -> ArtifactRef {
        ArtifactRef {
            kind: kind as i32,
            size,
            ..Default::default()
        }
    }

    #[test]
    fn artifacts_the_store_did_not_keep_are_found() {
        let sent = [
            inline(ArtifactKind::CleanScreenshot, 10),
            inline(ArtifactKind::AnnotatedScreenshot, 12),
        ];
        // A current store lists both (and whatever was linked besides).
        let all = [
            stored(ArtifactKind::AnnotatedScreenshot, 12),
            stored(ArtifactKind::CleanScreenshot, 10),
            stored(ArtifactKind::DesktopScreenshot, 99),
        ];
        assert!(missing_inline(&sent, &all).is_empty());
        // An older store kept only the linked ones.
        let old = [stored(ArtifactKind::DesktopScreenshot, 99)];
        assert_eq!(missing_inline(&sent, &old).len(), 2);
        let partly = [stored(ArtifactKind::CleanScreenshot, 10)];
        let missing = missing_inline(&sent, &partly);
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].kind, ArtifactKind::AnnotatedScreenshot as i32);
    }
}
