//! One partition's task: what every phase holds ([`PartitionTask`]), the
//! commands the rebalance callback sends it, and the seek to a restored
//! checkpoint.

use crate::engine::entity::Entity;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use tokio::sync::{mpsc, oneshot};

use super::settings::TaskSettings;
use crate::engine::breaker::Breaker;
use crate::engine::partition_state::PartitionState;
use crate::engine::store::Checkpoint;
use crate::observe::{PartitionStatus, Phase};
use crate::processor::context::OrderlyContext;
use crate::processor::parts::{Input, Member, Outputs, Reporting};

/// What the rebalance callback tells a partition task.
pub(crate) enum Command {
    /// Finish every record already in the queue, then reply with the
    /// checkpoint and stop. With `lost` (the group took the partition away
    /// without a revoke: this member was presumed dead), write nothing: the
    /// partition has another owner already, and a late write-out of this
    /// one would land in the changelog after the new owner's.
    Drain {
        reply: oneshot::Sender<Option<Checkpoint>>,
        lost: bool,
    },
}

/// The drain's reply channel; `None` when the router is gone (the command
/// channel closed), which stops the task as a drain does.
pub(super) type Reply = Option<oneshot::Sender<Option<Checkpoint>>>;

/// What every phase of one partition's task holds. Of the processor's
/// shared parts, each phase reaches the ones it uses: restoring the
/// outputs (the reader, the transactional producer) and the member's store;
/// processing the input ([`batch`]); the write-out ([`live`]) the outputs
/// and the member's flusher and cache budget; every phase the reporting.
pub(crate) struct PartitionTask<E: Entity> {
    /// The input topic, the decoder, the dead letters, the inbox retention.
    pub input: Arc<Input<E>>,
    /// The changelog, the outbox, and what their clients are built from.
    pub outputs: Arc<Outputs<E>>,
    /// Counters, telemetry and the fatal-error slot.
    pub reporting: Arc<Reporting>,
    /// The store, the flusher's channel and the order cache budget.
    pub member: Arc<Member>,
    pub partition: i32,
    /// The order cache, the pending and written checkpoints (`None` until
    /// the first batch on a partition this store never processed).
    pub state: PartitionState<E>,
    pub(crate) rx: mpsc::Receiver<Command>,
    /// The task's [`Phase`], offsets and counters, for the supervisor, the
    /// metrics and the status page.
    pub status: Arc<PartitionStatus>,
    /// To seek after a restore and read the group's committed offset.
    pub consumer: Weak<BaseConsumer<OrderlyContext>>,
    /// The offset the partition was assigned at (the stored checkpoint);
    /// `None`: the group's committed offset.
    pub(crate) assigned_at: Option<i64>,
    /// What the task reads from the configuration, taken once at start.
    pub(crate) settings: TaskSettings,
    /// Stops the partition when it dead-letters too much.
    pub breaker: Breaker,
    /// The offset of the first record this task took on a partition its
    /// store had never processed (no checkpoint): where a fenced task
    /// rewinds to when none of its work was written.
    pub(crate) first_offset: Option<i64>,
    /// Set by [`PartitionTask::after_fence`]: the offset to read the
    /// partition from again, unless the restore finds a newer checkpoint.
    pub(crate) rewind: Option<i64>,
    /// When this task was fenced while still assigned, most recent last.
    pub(crate) fences: Vec<std::time::Instant>,
    /// After `orderly repair` moved the partition back: the input offset
    /// below which its status changes and dead letters were published
    /// already (read from the store after the restore; cleared once the
    /// checkpoint passes it).
    pub(crate) republished_below: Option<i64>,
    /// A restored checkpoint the fetch position could not be moved to yet:
    /// librdkafka had not started fetching the partition (it waits for the
    /// group's committed offset). Tried again while the task is idle; the
    /// partition shows as waiting meanwhile, and as stalled past
    /// [`crate::observe::STALL_REPORT`].
    pub(crate) pending_seek: Option<i64>,
}

/// What a partition waits in while librdkafka has not started fetching it
/// (status page, `/readyz`, the stalled metric).
pub(crate) const FETCH_START: &str = "librdkafka's fetch start: it waits for the group's committed offset of the \
     partition, which Kafka keeps unstable while a transaction's offset commit on it is pending (a marker lost on \
     __consumer_offsets: `orderly repair`)";

/// How a seek went.
pub(super) enum Seeked {
    Done,
    /// librdkafka has not started fetching the partition (`Local:
    /// Erroneous state`): it waits for the group's committed offset.
    NotFetching,
    Failed(rdkafka::error::KafkaError),
}

/// True for librdkafka's answer to a seek of a partition it is not
/// fetching yet (`RD_KAFKA_RESP_ERR__STATE`).
fn not_fetching(error: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    match error {
        KafkaError::Seek(text) => {
            text.contains(&RDKafkaErrorCode::State.to_string()) || text.contains("Erroneous state")
        }
        _ => false,
    }
}

/// Moves `task`'s partition's fetch position to `offset`.
pub(super) async fn seek_to<E: Entity>(task: &PartitionTask<E>, offset: i64) -> Seeked {
    use rdkafka::consumer::Consumer;
    use rdkafka::error::KafkaError;
    let Some(consumer) = task.consumer.upgrade() else {
        return Seeked::Done;
    };
    let (topic, partition) = (task.input.topic.clone(), task.partition);
    let result = tokio::task::spawn_blocking(move || {
        consumer.seek(
            &topic,
            partition,
            rdkafka::Offset::Offset(offset),
            Duration::from_secs(10),
        )
    })
    .await;
    match result {
        Ok(Ok(())) => Seeked::Done,
        Ok(Err(error)) if not_fetching(&error) => Seeked::NotFetching,
        Ok(Err(error)) => Seeked::Failed(error),
        Err(join) => Seeked::Failed(KafkaError::Seek(format!("seek task failed: {join}"))),
    }
}

impl<E: Entity> PartitionTask<E> {
    /// Publishes the phase the task moves into (status page, `/readyz`,
    /// metrics).
    pub(super) fn enter(&self, phase: Phase) {
        self.status.enter(phase);
    }

    /// Answers a drain with the written checkpoint.
    pub(super) fn reply(&self, reply: Reply) {
        if let Some(reply) = reply {
            let _ = reply.send(self.state.written());
        }
    }
}

#[cfg(test)]
mod seek_tests {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

    #[test]
    fn a_seek_of_a_partition_not_fetched_yet_is_told_apart() {
        let state = KafkaError::Seek(RDKafkaErrorCode::State.to_string());
        eprintln!("{state}");
        assert!(super::not_fetching(&state));
        assert!(super::not_fetching(&KafkaError::Seek(
            "Local: Erroneous state".into()
        )));
        assert!(!super::not_fetching(&KafkaError::Seek(
            RDKafkaErrorCode::UnknownPartition.to_string()
        )));
    }
}
