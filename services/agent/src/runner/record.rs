//! Recording one produced step: the step with its artifacts, memory item, blackboard entries, its typed
//! control value (what comes next, ids assigned) and the question/hold entries and events that value
//! implies — each written once, here — in one RecordStep fenced by the lease owner (artifacts beyond the
//! inline budget are put first and linked).

use ufo_proto::v1::{
    ArtifactRef, BlackboardKind, PutArtifactRequest, RecordStepRequest, Round, StepArtifact,
};

use super::hitl;
use super::task::{History, TaskRun};

impl TaskRun {
    pub(super) async fn record(
        &self,
        number: u64,
        round: &Round,
        round_step: u32,
        output: super::driver::StepOutput,
        history: &mut History,
    ) -> Result<(), tonic::Status> {
        let client = self.client.clone();
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
        let wrote_board = !blackboard.is_empty();
        // Uploads started at capture are waited for here; what could not be uploaded goes inline.
        let (blobs, mut pending) =
            crate::blobs::split(output.uploads.as_deref(), output.artifacts).await;
        let base = RecordStepRequest {
            step: Some(step),
            memory_item: memory_item.clone(),
            blackboard,
            artifact_ids: Vec::new(),
            events,
            lease_owner: self.worker_id.clone(),
            artifacts: Vec::new(),
            blobs,
        };
        // The step's artifacts travel inside RecordStep (stored in the step's transaction) up to the
        // configured total; any beyond it are stored first, concurrently, one PutArtifact each, and the step
        // links them. A step larger than the session service accepts in one message (its
        // --max-message-bytes is below this runner's inline budget) is refused with nothing recorded: its
        // inline artifacts are then stored that way too and it is sent again.
        let retry = self.config.store_retry();
        let mut budget = self.config.inline_artifact_bytes;
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
            // Retried on transient failures: an identical step already recorded comes back as a duplicate.
            let recorded = crate::store::retry::retried(&retry, "RecordStep", || {
                let mut client = client.clone();
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
        if let Some(item) = memory_item {
            history.memory.push(ufo_proto::v1::MemoryItem {
                agent_name: step.agent_name.clone(),
                step: number,
                item: Some(item),
            });
        }
        history.steps.push(step);
        if recorded.duplicate && wrote_board {
            // Recorded earlier (a retried call): the board is read back whole.
            history.blackboard = self.board().await?;
        } else {
            // The store returns the entries it wrote with their indices; during a run only this runner
            // writes the board, except for answers, which are read back when waited for.
            for entry in recorded.blackboard {
                let list = match BlackboardKind::try_from(entry.kind) {
                    Ok(BlackboardKind::Question) => &mut history.blackboard.questions,
                    Ok(BlackboardKind::Request) => &mut history.blackboard.requests,
                    Ok(BlackboardKind::Trajectory) => &mut history.blackboard.trajectories,
                    Ok(BlackboardKind::Image) => &mut history.blackboard.images,
                    _ => continue,
                };
                list.push(entry);
            }
        }
        tracing::info!(
            step = number,
            duplicate = recorded.duplicate,
            "step recorded"
        );
        Ok(())
    }
}

impl TaskRun {
    /// Stores `artifacts` under step `number`, concurrently, one PutArtifact each.
    async fn put_artifacts(
        &self,
        number: u64,
        artifacts: Vec<StepArtifact>,
    ) -> Result<Vec<ArtifactRef>, tonic::Status> {
        let puts = artifacts.into_iter().map(|artifact| {
            let mut client = self.client.clone();
            let request = PutArtifactRequest {
                session_id: self.session.id.clone(),
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
