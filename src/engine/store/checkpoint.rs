//! Where a partition stands ([`Checkpoint`]): the next input offset and
//! the durable counters, written in the same batch as the states it covers.

use serde::{Deserialize, Serialize};

use crate::engine::store::layout::encode;

/// Where a partition stands, written in the same atomic batch as the states
/// it covers. `applied + duplicates + stale + dead_lettered` always equals
/// `next_offset - start_offset + replayed - skipped` (for topics without
/// offset gaps; [`Checkpoint::consumed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The first offset this store processed on this partition.
    pub start_offset: i64,
    /// The next input offset to process: every record before it is covered.
    pub next_offset: i64,
    /// Records applied (durable counter).
    pub applied: u64,
    /// Records dropped as duplicates (durable counter).
    pub duplicates: u64,
    /// Records dropped as stale (durable counter).
    pub stale: u64,
    /// Records dead-lettered (durable counter).
    pub dead_lettered: u64,
    /// The changelog offset after the checkpoint record this state reflects
    /// (`None` without a changelog, or before the first write-out to it).
    /// Below the changelog's end offset means the store is behind it.
    pub changelog_next: Option<i64>,
    /// Records read again after `orderly replay` moved the partition back.
    pub replayed: u64,
    /// Records passed over by a replay that moved the partition forward.
    pub skipped: u64,
    /// Incremented by `orderly replay --reset-state`: state of an older
    /// epoch is never restored.
    pub epoch: u32,
}

impl Checkpoint {
    /// A partition's first checkpoint: nothing processed before `offset`.
    pub fn starting_at(offset: i64) -> Self {
        Checkpoint {
            start_offset: offset,
            next_offset: offset,
            ..Default::default()
        }
    }

    /// The records this checkpoint covers, whatever their outcome.
    pub fn outcomes(&self) -> u64 {
        self.counts().total()
    }

    /// The durable counters, as one value.
    pub fn counts(&self) -> crate::engine::outcomes::Outcomes {
        crate::engine::outcomes::Outcomes {
            applied: self.applied,
            duplicates: self.duplicates,
            stale: self.stale,
            dead_lettered: self.dead_lettered,
        }
    }

    /// A checkpoint's bytes, as stored and as its changelog record carries them.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        encode(self)
    }

    /// The inverse of [`Self::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, String> {
        bincode::deserialize(bytes).map_err(|e| format!("not a checkpoint: {e}"))
    }

    /// Records consumed: `next_offset - start_offset + replayed - skipped`,
    /// which [`Self::outcomes`] always equals.
    pub fn consumed(&self) -> i64 {
        self.next_offset - self.start_offset + self.replayed as i64 - self.skipped as i64
    }
}
