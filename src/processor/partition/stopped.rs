//! The stopped phase: the dead-letter breaker tripped. What was decided
//! before the tripping batch is written out; nothing after the checkpoint is
//! dead-lettered, decided or committed; the partition only answers the
//! rebalance (or shutdown) that releases it.

use crate::engine::entity::Entity;
use std::sync::atomic::Ordering;

use tracing::error;

use super::live::Live;
use super::task::{Command, PartitionTask};
use crate::observe::errors::{Kind, Stage};
use crate::observe::Phase;
use crate::processor::error::ProcessError;

/// A partition task stopped by the dead-letter breaker.
pub(super) struct Stopped<E: Entity> {
    live: Live<E>,
}

impl<E: Entity> Stopped<E> {
    /// Logs, counts and shows the trip (phase [`Phase::Stopped`], the
    /// reason on `/readyz`).
    pub(super) fn enter(live: Live<E>, tripped: ProcessError) -> Self {
        report_trip(&live.task, &tripped);
        Stopped { live }
    }

    /// Writes out what came before the trip, then waits for the release.
    pub(super) async fn run(mut self) -> Result<(), ProcessError> {
        self.live.write_out().await?;
        match self.live.task.rx.recv().await {
            Some(Command::Drain { reply, lost }) => {
                if lost {
                    self.live.stop_relay();
                } else {
                    self.live.drain_outbox().await?;
                }
                self.live.reply(Some(reply));
            }
            None => self.live.stop_relay(),
        }
        Ok(())
    }
}

/// The dead-letter breaker tripped: logged, counted, and the partition
/// shown as stopped (also when it trips while draining).
pub(super) fn report_trip<E: Entity>(task: &PartitionTask<E>, tripped: &ProcessError) {
    error!(
        partition = task.partition,
        error = %tripped,
        "dead-letter breaker tripped: this partition stops (nothing after its checkpoint is dead-lettered, decided \
         or committed); fix the cause (a producer's deploy, the registry's schemas), then restart this instance"
    );
    task.reporting
        .telemetry
        .breaker_trips
        .fetch_add(1, Ordering::Relaxed);
    task.reporting
        .telemetry
        .errors
        .record(Stage::DeadLetter, Kind::Permanent);
    let _ = task.status.stopped.set(tripped.to_string());
    task.enter(Phase::Stopped);
}
