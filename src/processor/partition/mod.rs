//! One ordered task per assigned partition, through its lifecycle, one type
//! per phase (each publishes its [`Phase`] as it is entered, and a phase's
//! `run` consumes it and returns the next one):
//!
//! * [`restoring`]: with a changelog, bring the partition's tree up to it
//!   (on a blocking thread, cancelled by a revoke); without one, refuse a
//!   partition whose committed offset is ahead of the store (its state is
//!   elsewhere). Ends [`Restored::Ready`] or [`Restored::Released`].
//! * [`processing`]: batch, decode, dead-letter, decide against the
//!   partition's order cache ([`batch`]); once per commit interval (or when
//!   its changed orders pass their memory share, or soon after the last
//!   write-out once it has caught up with its input) write them out ([`live`]:
//!   produced to the changelog, acknowledged, written with the checkpoint
//!   in one atomic sled batch, reported to the flusher). Ends in a drain, a
//!   loss (released, nothing more written) or a breaker trip.
//!   When to write out is [`schedule`]'s pure rule (the caller passes the
//!   time).
//! * [`draining`] (revoke, shutdown): finish the records already fetched,
//!   write them out, let the outbox relay catch up, reply with the
//!   checkpoint and stop.
//! * [`stopped`]: the dead-letter breaker tripped; write out what came
//!   before, then wait for the rebalance or shutdown that releases it.
//!
//! Processing and draining take their records from a
//! [`source::RecordSource`]: the partition's librdkafka queue, or in the
//! unit tests an in-memory source (the task then runs without a broker).
//!
//! A task whose transactional producer is fenced while the partition is
//! still assigned to it (another producer of its transactional id
//! initialised: a member paused while it started the partition, which
//! completed that start late, after the group had moved the partition here)
//! drops its unwritten work, waits for the group to release the partition,
//! and if the group does not, starts over: a new producer (fencing the
//! other), a restore of what the other wrote, and a seek back to the
//! checkpoint ([`PartitionTask::after_fence`]).

mod batch;
mod draining;
mod live;
pub(crate) mod mode;
mod processing;
mod republished;
mod restoring;
mod schedule;
pub(crate) mod settings;
pub(crate) mod source;
mod stopped;
#[cfg(test)]
pub(crate) mod testing;

use crate::engine::entity::Entity;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use tokio::sync::{mpsc, oneshot};
use tracing::{error, info, warn};

use super::context::OrderlyContext;
use super::parts::{Input, Member, Outputs, Reporting};
use super::transaction::TxnError;
use crate::engine::breaker::Breaker;
use crate::engine::partition_state::PartitionState;
use crate::engine::store::Checkpoint;
use crate::observe::errors::Stage;
use crate::observe::{PartitionStatus, Phase};
use crate::processor::error::ProcessError;
use mode::WriteOutMode;
use settings::TaskSettings;

use processing::{Ended, Processing};
use restoring::{Restored, Restoring};
pub(crate) use source::PartitionInput;

/// What the rebalance callback tells a partition task.
pub(super) enum Command {
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
type Reply = Option<oneshot::Sender<Option<Checkpoint>>>;

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
    /// How write-outs reach Kafka: with a changelog, through the
    /// partition's transactional producer, opened (fencing the previous
    /// owner's) before the restore.
    pub(crate) mode: WriteOutMode<E>,
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

/// How many times within [`FENCE_WINDOW`] a task starts over after a fence
/// before it stops the process instead (two members fencing each other).
const MAX_FENCES: usize = 3;
const FENCE_WINDOW: Duration = Duration::from_secs(600);

impl<E: Entity> PartitionTask<E> {
    /// Runs the partition through its phases until it is released.
    pub(super) async fn run(self, input: PartitionInput) -> Result<(), ProcessError> {
        let mut starting = self;
        loop {
            let (fenced, cause) = match Restoring::enter(starting).run().await? {
                Restored::Ready(task) => match Processing::enter(task).await?.run(&input).await? {
                    Ended::Drain { draining, fetched } => {
                        return draining.run(&input, fetched).await
                    }
                    Ended::Lost => return Ok(()),
                    Ended::Stopped(stopped) => return stopped.run().await,
                    Ended::Fenced { task, cause } => (task, cause),
                },
                Restored::Released { task, reply } => {
                    // Revoked while restoring: nothing was processed.
                    task.reply(reply);
                    return Ok(());
                }
                Restored::Fenced { task, cause } => (task, cause),
            };
            match fenced.after_fence(cause).await? {
                Some(again) => starting = again,
                None => return Ok(()),
            }
        }
    }

    /// After the partition's producer was fenced: the unwritten work is
    /// dropped (the order cache goes back to the store's written state). A
    /// revoke that comes within the grace (the session timeout: the time
    /// the group takes to move a partition from a member it presumed dead)
    /// releases the partition (`None`). Otherwise the partition is still
    /// this member's, and whoever fenced it was a zombie: the task starts
    /// over from the checkpoint (`Some`), which fences the zombie in turn
    /// and restores what it wrote.
    async fn after_fence(mut self, cause: TxnError) -> Result<Option<Self>, ProcessError> {
        let partition = self.partition;
        let written = self.state.written();
        self.mode = WriteOutMode::Unopened;
        self.state = PartitionState::new(self.state.store().clone(), written);
        self.status.seed(written.as_ref());
        self.breaker = Breaker::new(self.settings.breaker);
        // A call this task gave up (it did not return in time) fenced no
        // one and was fenced by no one: nothing to wait for but a drain
        // already queued. Another producer's fence may be a member the
        // group is moving the partition to: the grace lets it.
        let stalled = matches!(cause, TxnError::Stalled { .. });
        let grace = if stalled {
            Duration::ZERO
        } else {
            self.settings.session_timeout
        };
        if stalled {
            warn!(
                partition,
                error = %cause,
                written = ?written.map(|c| c.next_offset),
                "a transactional call did not return; the partition's unwritten work is dropped, and it starts over \
                 from its checkpoint with a new producer (which fences the stuck one)"
            );
        } else {
            warn!(
                partition,
                error = %cause,
                written = ?written.map(|c| c.next_offset),
                grace_ms = grace.as_millis() as u64,
                "partition fenced; its unwritten work is dropped, and it starts over from its checkpoint unless the \
                 group moves it within the grace"
            );
        }
        self.enter(Phase::Restoring);
        tokio::select! {
            biased;
            command = self.rx.recv() => {
                let reply = command.map(|Command::Drain { reply, .. }| reply);
                info!(partition, "partition released after its producer was fenced");
                self.reply(reply);
                return Ok(None);
            }
            _ = tokio::time::sleep(grace) => {}
        }
        let now = std::time::Instant::now();
        self.fences
            .retain(|at| now.duration_since(*at) < FENCE_WINDOW);
        if !stalled {
            // Fences by another producer only: a call that keeps stalling
            // is reported as it stalls, not taken for a second deployment.
            self.fences.push(now);
        }
        if self.fences.len() > MAX_FENCES {
            error!(
                partition,
                fences = self.fences.len(),
                "partition fenced again and again while assigned here"
            );
            return Err(ProcessError::Partition {
                partition,
                stage: Stage::Transaction,
                message: format!(
                    "its transactional producer was fenced {} times in {} s while the partition stayed assigned \
                     here (another process with the same group and transactional ids keeps taking it: check for a \
                     second deployment with this group id); last: {cause}",
                    self.fences.len(),
                    FENCE_WINDOW.as_secs()
                ),
            });
        }
        // Where to read from again: the written checkpoint, or where this
        // task began on a partition it had never written.
        self.rewind = written.map(|c| c.next_offset).or(self.first_offset);
        self.assigned_at = None;
        info!(partition, rewind = ?self.rewind, "partition still assigned here after its producer was fenced; starting it over");
        Ok(Some(self))
    }

    /// Publishes the phase the task moves into (status page, `/readyz`,
    /// metrics).
    fn enter(&self, phase: Phase) {
        self.status.enter(phase);
    }

    /// Answers a drain with the written checkpoint.
    fn reply(&self, reply: Reply) {
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
