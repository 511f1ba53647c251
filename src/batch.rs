//! One processing batch against one partition's store: decide each decoded
//! event in order against its order's state (read once per batch), then
//! write the changed states and the advanced checkpoint in one atomic sled
//! batch. The processor's partition tasks and the store-limit benchmark both
//! call this, so they write exactly the same keys.

use std::collections::HashMap;

use crate::decide::{step, Decision};
use crate::event::{OrderEvent, OrderState};
use crate::store::{BatchWrite, Checkpoint, PartitionStore, StoreError};

/// What one batch did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    pub applied: u64,
    pub duplicates: u64,
    pub stale: u64,
    /// Keys written, the checkpoint included.
    pub keys: usize,
    /// Bytes of keys and values handed to sled.
    pub bytes: usize,
}

/// Decides `events` (in offset order) and writes the result with the
/// checkpoint moved to `next_offset`, counting `dead_lettered` records too.
/// Not durable until the store is flushed.
pub fn apply_batch(
    store: &PartitionStore,
    checkpoint: &mut Checkpoint,
    events: &[OrderEvent],
    dead_lettered: u64,
    next_offset: i64,
    now_ms: i64,
    retention_ms: i64,
) -> Result<BatchOutcome, StoreError> {
    // Orders this batch read, with whether the batch changed them.
    let mut touched: HashMap<&str, (OrderState, bool)> = HashMap::with_capacity(events.len());
    let mut outcome = BatchOutcome::default();
    for event in events {
        let order_id = event.order_id.as_str();
        let (current, changed) = match touched.remove(order_id) {
            Some((state, changed)) => (Some(state), changed),
            None => (store.get(order_id)?, false),
        };
        let (decision, after) = step(current, event, now_ms, retention_ms);
        match decision {
            Decision::Apply => outcome.applied += 1,
            Decision::Duplicate => outcome.duplicates += 1,
            Decision::Stale => outcome.stale += 1,
        }
        if let Some(state) = after {
            touched.insert(order_id, (state, changed || decision == Decision::Apply));
        }
    }
    let mut write = BatchWrite::default();
    for (state, changed) in touched.values() {
        if *changed {
            write.put_state(state)?;
        }
    }
    let mut next = *checkpoint;
    next.next_offset = next_offset;
    next.applied += outcome.applied;
    next.duplicates += outcome.duplicates;
    next.stale += outcome.stale;
    next.dead_lettered += dead_lettered;
    debug_assert_eq!(next.outcomes() as i64, next.next_offset - next.start_offset);
    outcome.keys = write.keys + 1;
    outcome.bytes = write.bytes;
    store.commit_batch(write, &next)?;
    *checkpoint = next;
    Ok(outcome)
}
