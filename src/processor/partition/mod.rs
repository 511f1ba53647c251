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
mod fenced;
mod live;
pub(crate) mod mode;
mod processing;
mod republished;
mod restoring;
mod schedule;
pub(crate) mod settings;
pub(crate) mod source;
mod stopped;
pub(crate) mod strategy;
mod task;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

use crate::engine::entity::Entity;

use crate::processor::error::ProcessError;
use processing::{Ended, Processing};
use restoring::{Restored, Restoring};
pub(crate) use source::PartitionInput;
pub(crate) use task::{Command, PartitionTask};

impl<E: Entity> PartitionTask<E> {
    /// Runs the partition through its phases until it is released.
    pub(super) async fn run(self, input: PartitionInput) -> Result<(), ProcessError> {
        let mut starting = self;
        loop {
            let (fenced, cause) = match Restoring::enter(starting).run().await? {
                Restored::Ready { task, mode } => {
                    match Processing::enter(task, mode).await?.run(&input).await? {
                        Ended::Drain { draining, fetched } => {
                            return draining.run(&input, fetched).await
                        }
                        Ended::Lost => return Ok(()),
                        Ended::Stopped(stopped) => return stopped.run().await,
                        Ended::Fenced { task, cause } => (task, cause),
                    }
                }
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
}
