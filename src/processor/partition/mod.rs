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
//! * [`draining`] (revoke, shutdown): finish the records already fetched,
//!   write them out, let the outbox relay catch up, reply with the
//!   checkpoint and stop.
//! * [`stopped`]: the dead-letter breaker tripped; write out what came
//!   before, then wait for the rebalance or shutdown that releases it.

mod batch;
mod draining;
mod live;
mod processing;
mod restoring;
mod stopped;

use std::sync::{Arc, Weak};

use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::BaseConsumer;
use tokio::sync::{mpsc, oneshot, Notify};

use super::context::OrderlyContext;
use super::dlq::HeldLetter;
use super::transaction::TxnWriter;
use super::{ProcessError, Shared};
use crate::breaker::Breaker;
use crate::partition_state::PartitionState;
use crate::store::Checkpoint;
use crate::telemetry::{PartitionStatus, Phase};

use processing::{Ended, Processing};
use restoring::{Restored, Restoring};

/// The consumer side of one partition: its own librdkafka queue (split off
/// the consumer's main queue, so records reach the task without a copy or a
/// hand-off through the poll thread) and the signal that it became non-empty.
pub(crate) struct PartitionInput {
    pub queue: PartitionQueue<OrderlyContext>,
    pub ready: Arc<Notify>,
}

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

/// What every phase of one partition's task holds.
pub(crate) struct PartitionTask {
    pub shared: Arc<Shared>,
    pub partition: i32,
    /// The order cache, the pending and written checkpoints (`None` until
    /// the first batch on a partition this store never processed).
    pub state: PartitionState,
    pub(crate) rx: mpsc::Receiver<Command>,
    /// The task's [`Phase`], offsets and counters, for the supervisor, the
    /// metrics and the status page.
    pub status: Arc<PartitionStatus>,
    /// To seek after a restore and read the group's committed offset.
    pub consumer: Weak<BaseConsumer<OrderlyContext>>,
    /// The offset the partition was assigned at (the stored checkpoint);
    /// `None`: the group's committed offset.
    pub(crate) assigned_at: Option<i64>,
    /// With a changelog: the partition's transactional producer, opened
    /// (fencing the previous owner's) before the restore; every write-out
    /// is one of its transactions.
    pub(crate) txn: Option<TxnWriter>,
    /// exactly_once: dead letters decided since the last write-out, sent in
    /// its transaction.
    pub(crate) held_letters: Vec<HeldLetter>,
    /// Stops the partition when it dead-letters too much.
    pub breaker: Breaker,
}

impl PartitionTask {
    /// Runs the partition through its phases until it is released.
    pub(super) async fn run(self, input: PartitionInput) -> Result<(), ProcessError> {
        let PartitionInput { queue, ready } = input;
        let task = match Restoring::enter(self).run().await? {
            Restored::Ready(task) => task,
            Restored::Released { task, reply } => {
                // Revoked while restoring: nothing was processed.
                task.reply(reply);
                return Ok(());
            }
        };
        match Processing::enter(task).await?.run(&queue, &ready).await? {
            Ended::Drain { draining, fetched } => draining.run(&queue, fetched).await,
            Ended::Lost => Ok(()),
            Ended::Stopped(stopped) => stopped.run().await,
        }
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
