//! After `orderly repair` moved a partition back to a checkpoint, the
//! records it processes again up to where outputs were published before
//! (`orderly.published-to`, kept in the store) publish nothing: their status
//! changes and dead letters are on the topics already. Read after each
//! restore, applied to each batch's letters and each write-out's status
//! changes, forgotten once the checkpoint passes it.

use tracing::info;

use super::task::PartitionTask;
use crate::engine::entity::Entity;
use crate::engine::outbox_record::OutboxRecord;
use crate::processor::dlq::DeadLetter;
use crate::processor::error::ProcessError;

impl<E: Entity> PartitionTask<E> {
    /// Reads the store's mark after a restore.
    pub(super) fn read_republished(&mut self) -> Result<(), ProcessError> {
        self.republished_below = self.state.store().republished_below()?;
        if let Some(below) = self.republished_below {
            info!(
                partition = self.partition,
                below,
                "repaired partition: status changes and dead letters of records below this offset were published \
                 before; not publishing them again"
            );
        }
        Ok(())
    }

    /// Splits a batch's letters into (published before the repair, to send).
    pub(super) fn split_republished<'a>(
        &self,
        letters: Vec<DeadLetter<'a>>,
    ) -> (Vec<DeadLetter<'a>>, Vec<DeadLetter<'a>>) {
        match self.republished_below {
            Some(below) => letters.into_iter().partition(|l| l.offset < below),
            None => (Vec::new(), letters),
        }
    }

    /// Drops a write-out's status changes published before the repair.
    pub(super) fn drop_republished(&self, status: &mut Vec<OutboxRecord<E::Status>>) {
        if let Some(below) = self.republished_below {
            status.retain(|r| r.source_offset >= below);
        }
    }

    /// Forgets the mark once the checkpoint reaches `next_offset` past it.
    pub(super) fn passed_republished(&mut self, next_offset: i64) -> Result<(), ProcessError> {
        if self
            .republished_below
            .is_some_and(|below| next_offset >= below)
        {
            self.republished_below = None;
            self.state.store().clear_republished_below()?;
            info!(
                partition = self.partition,
                next_offset,
                "the repaired partition caught up with what was published before the repair"
            );
        }
        Ok(())
    }
}
