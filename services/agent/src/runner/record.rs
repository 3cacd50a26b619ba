//! Recording one produced step: the step with its artifacts, memory item, blackboard entries, its typed
//! control value (what comes next, ids assigned) and the question/hold entries and events that value
//! implies — each written once, here — in one RecordStep fenced by the lease owner (artifacts beyond the
//! inline budget are put first and linked).

use ufo_proto::v1::{
    ArtifactRef, BlackboardKind, GetBlackboardRequest, PutArtifactRequest, RecordStepRequest,
    Round, StepArtifact,
};

use super::hitl;
use super::task::{History, StoreError, TaskRun};
use crate::control::{Next, StepControl};

impl TaskRun {
    pub(super) async fn record(
        &self,
        number: u64,
        round: &Round,
        round_step: u32,
        output: super::driver::StepOutput,
        history: &mut History,
    ) -> Result<(), StoreError> {
        let mut client = self.client.clone();
        // The step's artifacts travel inside RecordStep (stored in the step's transaction) up to the
        // configured total; any beyond it are stored first, concurrently, one PutArtifact each, and the step
        // links them.
        let mut inline = Vec::new();
        let mut separate = Vec::new();
        let mut inline_bytes = 0usize;
        for artifact in output.artifacts {
            let artifact = StepArtifact {
                kind: artifact.kind as i32,
                content_type: artifact.content_type,
                data: artifact.data,
                metadata: Some(ufo_proto::json::object_to_struct(artifact.metadata)),
            };
            if inline_bytes + artifact.data.len() <= self.config.inline_artifact_bytes {
                inline_bytes += artifact.data.len();
                inline.push(artifact);
            } else {
                separate.push(artifact);
            }
        }
        let artifact_ids = self
            .put_artifacts(number, separate)
            .await?
            .into_iter()
            .map(|stored| stored.id)
            .collect();
        let mut blackboard = output.blackboard;
        let mut events = output.events;
        let mut next = output.next;
        next.assign_ids(number);
        match &next {
            Next::Ask { questions } => {
                blackboard.extend(hitl::question_entries(questions));
                events.extend(hitl::question_events(questions, number));
            }
            Next::Hold { action } => events.extend(hitl::held_events(action)),
            Next::Continue { .. } | Next::Finish { .. } | Next::Fail { .. } => {}
        }
        for event in &mut events {
            event.step = number;
            event.round = round.number;
        }
        let mut step = output.step;
        step.session_id = self.session.id.clone();
        step.step = number;
        step.round = round.number;
        step.round_step = round_step;
        // The round state the driver stored with the step stays; what comes next is the runner's, with ids.
        let round_state = StepControl::of(&step).ok().and_then(|c| c.round);
        StepControl {
            next,
            round: round_state,
        }
        .write(&mut step);
        // Model text can hold what the store refuses (NUL): never let it make the step unrecordable.
        super::sanitise::step(&mut step);
        for entry in &mut blackboard {
            super::sanitise::structure(&mut entry.value);
        }
        for event in &mut events {
            super::sanitise::structure(&mut event.payload);
        }
        let wrote_board = !blackboard.is_empty();
        let memory_item = output.memory_item.map(|mut m| {
            let mut v = serde_json::Value::Object(std::mem::take(&mut m));
            super::sanitise::json(&mut v);
            ufo_proto::json::object_to_struct(match v {
                serde_json::Value::Object(m) => m,
                _ => serde_json::Map::new(),
            })
        });
        let mut request = RecordStepRequest {
            step: Some(step),
            memory_item: memory_item.clone(),
            blackboard,
            artifact_ids,
            events,
            lease_owner: self.worker_id.clone(),
            artifacts: inline,
        };
        // Retried on transient failures: an identical step already recorded comes back as a duplicate.
        let recorded = match super::retry::retried(&self.config.store_retry(), "RecordStep", || {
            let mut client = client.clone();
            let request = request.clone();
            async move { client.record_step(request).await }
        })
        .await
        {
            Ok(recorded) => recorded.into_inner(),
            // Larger than the session service accepts in one message (its --max-message-bytes is below
            // this runner's inline budget): nothing was recorded, so the screenshots are stored one by one
            // and the step links them.
            Err(status)
                if status.code() == tonic::Code::ResourceExhausted
                    && !request.artifacts.is_empty() =>
            {
                tracing::warn!(step = number, error = %status,
                    "the step with its screenshots is too large for the session service; storing them separately");
                let stored = self
                    .put_artifacts(number, std::mem::take(&mut request.artifacts))
                    .await?;
                request
                    .artifact_ids
                    .extend(stored.into_iter().map(|stored| stored.id));
                // Nothing of the request is needed afterwards (its inline artifacts are now none).
                client
                    .record_step(std::mem::take(&mut request))
                    .await?
                    .into_inner()
            }
            Err(status) => return Err(status.into()),
        };
        let inline = request.artifacts;
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
            history.blackboard = client
                .get_blackboard(GetBlackboardRequest {
                    session_id: self.session.id.clone(),
                })
                .await?
                .into_inner();
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
    ) -> Result<Vec<ArtifactRef>, StoreError> {
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
        Ok(futures::future::try_join_all(puts).await?)
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
