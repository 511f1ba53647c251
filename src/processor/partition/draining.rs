//! The draining phase (a revoke, shutdown, or the router gone): every record
//! already fetched for the partition is decided and written out, the outbox
//! relay gets its share of the shutdown deadline to publish what was
//! written, and the drain is answered with the written checkpoint.

use crate::engine::entity::Entity;

use super::batch::take_available;
use super::live::Live;
use super::source::RecordSource;
use super::task::Reply;
use crate::observe::Phase;
use crate::processor::error::ProcessError;

/// A partition task finishing its work before the release.
pub(super) struct Draining<E: Entity> {
    live: Live<E>,
    reply: Reply,
}

impl<E: Entity> Draining<E> {
    pub(super) fn enter(live: Live<E>, reply: Reply) -> Self {
        live.task.enter(Phase::Draining);
        Draining { live, reply }
    }

    /// Decides the `fetched` records and everything else already in the
    /// queue, writes them out, drains the outbox and replies.
    pub(super) async fn run<'q, S: RecordSource>(
        mut self,
        source: &'q S,
        mut fetched: Vec<S::Record<'q>>,
    ) -> Result<(), ProcessError> {
        let (max_records, partition) = (
            self.live.task.settings.batch_max_records,
            self.live.task.partition,
        );
        loop {
            take_available(source, &mut fetched, max_records, partition);
            if fetched.is_empty() {
                break;
            }
            match self.live.process(&fetched).await {
                Err(tripped @ ProcessError::DeadLetterBreaker { .. }) => {
                    // Released now: what was decided before the batch is
                    // written, the rest is the next owner's.
                    super::stopped::report_trip(&self.live.task, &tripped);
                    break;
                }
                other => other?,
            }
            fetched.clear();
        }
        self.live.write_out().await?;
        self.live.drain_outbox().await?;
        self.live.reply(self.reply);
        Ok(())
    }
}
