//! How a partition's write-outs reach Kafka: one mode per guarantee and
//! changelog setting, chosen when the partition's producer is opened (before
//! its restore), instead of flags each stage checks.

use crate::engine::entity::Entity;
use crate::processor::dlq::HeldLetter;
use crate::processor::transaction::TxnWriter;

/// A partition's write-out mode.
pub(crate) enum WriteOutMode<E: Entity> {
    /// Not chosen yet: the partition's producer opens in the restore (and
    /// again after a fence).
    Unopened,
    /// No changelog: a write-out is the store batch alone; dead letters are
    /// produced when found.
    StoreOnly,
    /// A changelog under at_least_once: each write-out's changelog records
    /// (and, with write-out delivery, its status changes) are one
    /// transaction of the partition's producer, which the next owner fences;
    /// dead letters are produced when found.
    Changelog(TxnWriter<E>),
    /// exactly_once: dead letters are held for the write-out, whose one
    /// transaction carries them, the changelog records, the status changes
    /// and the input offsets.
    Everything {
        txn: TxnWriter<E>,
        held_letters: Vec<HeldLetter>,
    },
}

impl<E: Entity> WriteOutMode<E> {
    /// Status changes leave in the write-out's transaction, never as stored
    /// outbox rows.
    pub(crate) fn status_in_transaction(&self) -> bool {
        matches!(self, WriteOutMode::Everything { .. })
    }

    /// Nothing fences a late write-out of this member: a pause is held off
    /// by the schedule instead (see `WriteSchedule`).
    pub(crate) fn unfenced(&self) -> bool {
        matches!(self, WriteOutMode::StoreOnly | WriteOutMode::Unopened)
    }
}
