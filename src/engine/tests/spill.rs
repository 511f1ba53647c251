//! Changed orders evicted before their write-out (`PartitionState::spill`):
//! read back from the store, carried by the next write-out (and its
//! changelog) once, and dropped by a crash before it, as everything past
//! the checkpoint is.

use std::collections::HashMap;

use crate::domains::orders::event::{EventType, OrderEvent};
use crate::domains::orders::Orders;
use crate::engine::partition_state::*;
use crate::engine::store::{Checkpoint, Store};

const DAY_MS: i64 = 86_400_000;

fn orders(from: usize, to: usize, version: i64) -> Vec<OrderEvent> {
    (from..to)
        .map(|o| OrderEvent {
            event_id: format!("o{o:04}-{version}"),
            order_id: format!("o{o:04}"),
            version,
            event_type: EventType::Shipped,
            amount: version,
            currency: "EUR".into(),
            occurred_at: version,
        })
        .collect()
}

fn apply(p: &mut PartitionState<Orders>, events: Vec<OrderEvent>, first: i64) {
    let next = first + events.len() as i64;
    let events = events
        .into_iter()
        .enumerate()
        .map(|(i, value)| Sourced {
            offset: first + i as i64,
            value: value.into(),
        })
        .collect();
    let batch = Decoded {
        events,
        dead_lettered: 0,
        first_offset: first,
        next_offset: next,
    };
    let outcome = p.apply(batch, 1000, DAY_MS).expect("applied");
    assert_eq!(outcome.outcomes.applied, (next - first) as u64);
}

fn version(p: &PartitionState<Orders>, order: usize) -> Option<i64> {
    p.get(&format!("o{order:04}"))
        .expect("read")
        .map(|s| s.version)
}

/// 200 orders written out at version 1, then all changed to 2 (and the
/// first ten to 3), over a budget of about 50 orders; returns the budget.
fn changed_past_the_budget(p: &mut PartitionState<Orders>) -> usize {
    apply(p, orders(0, 200, 1), 0);
    p.write_out(usize::MAX)
        .expect("write-out")
        .expect("changes");
    apply(p, orders(0, 200, 2), 200);
    apply(p, orders(0, 10, 3), 400);
    p.dirty_bytes() / 4
}

/// Every order of [`changed_past_the_budget`] at version 1, as its
/// checkpoint has it.
fn assert_as_of_the_checkpoint(p: &PartitionState<Orders>) {
    for order in 0..200 {
        assert_eq!(
            version(p, order),
            Some(1),
            "o{order:04}: as of the checkpoint"
        );
    }
}

#[test]
fn the_coldest_changed_orders_are_spilled_read_back_and_written_out_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path(), 8).expect("open");
    let mut p = PartitionState::<Orders>::new(store.partition("t", 0).expect("tree"), None);
    let budget = changed_past_the_budget(&mut p);
    let spilled = p.spill(budget).expect("spill");
    assert!(spilled > 100, "{spilled} spilled");
    assert!(p.dirty_bytes() <= budget / 2);
    assert!(p.is_cached("o0000"), "the hot ten, touched last, stay");
    assert!(p.cached_orders() < 100, "{} cached", p.cached_orders());
    for order in 0..200 {
        let want = if order < 10 { 3 } else { 2 };
        assert_eq!(
            version(&p, order),
            Some(want),
            "o{order:04} before the write-out"
        );
    }
    let mut prepared = p
        .prepare_write_out(true)
        .expect("prepare")
        .expect("changes");
    let changes = prepared.write.changes.take().expect("collected");
    let mut carried: HashMap<Vec<u8>, usize> = HashMap::new();
    for change in &changes {
        *carried.entry(change.key.clone()).or_default() += 1;
    }
    assert_eq!(carried.len(), 200, "every changed order in the changelog");
    assert!(carried.values().all(|n| *n == 1), "each once");
    p.finish_write_out(prepared, Some(1), usize::MAX)
        .expect("finish");
    store.flush().expect("flush");
    drop((p, store));
    let store = Store::open_when_released(dir.path(), 8);
    let tree = store.partition("t", 0).expect("tree");
    for order in 0..200 {
        let want = if order < 10 { 3 } else { 2 };
        let state = tree.get::<Orders>(&format!("o{order:04}")).expect("read");
        assert_eq!(state.map(|s| s.version), Some(want), "o{order:04} reopened");
    }
    assert_eq!(
        tree.checkpoint()
            .expect("checkpoint")
            .map(|c| c.next_offset),
        Some(410)
    );
}

#[test]
fn a_crash_after_a_spill_and_before_the_write_out_leaves_the_checkpoints_states() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let store = Store::open(dir.path(), 8).expect("open");
        let mut p = PartitionState::<Orders>::new(store.partition("t", 0).expect("tree"), None);
        let budget = changed_past_the_budget(&mut p);
        assert!(p.spill(budget).expect("spill") > 100);
        // The spill's runs reach the disk; the crash comes before the
        // write-out.
        store.flush().expect("flush");
    }
    let store = Store::open_when_released(dir.path(), 8);
    let tree = store.partition("t", 0).expect("tree");
    let checkpoint: Option<Checkpoint> = tree.checkpoint().expect("checkpoint");
    assert_eq!(checkpoint.map(|c| c.next_offset), Some(200));
    let mut p = PartitionState::<Orders>::new(tree, checkpoint);
    assert_as_of_the_checkpoint(&p);
    // Re-processed from the checkpoint, every change applies again.
    apply(&mut p, orders(0, 200, 2), 200);
}

#[test]
fn a_partition_starting_over_in_the_same_process_drops_what_it_spilled() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(dir.path(), 8).expect("open");
    let tree = store.partition("t", 0).expect("tree");
    let mut p = PartitionState::<Orders>::new(tree.clone(), None);
    let budget = changed_past_the_budget(&mut p);
    assert!(p.spill(budget).expect("spill") > 100);
    // A fence, or the partition moving back: no write-out came. The task
    // starts over from the written checkpoint over the same tree.
    let written = p.written();
    drop(p);
    let mut p = PartitionState::<Orders>::starting_over(tree.clone(), written);
    assert_as_of_the_checkpoint(&p);
    // What it decides again is written out; the spilled states never are.
    apply(&mut p, orders(0, 5, 2), 200);
    p.write_out(usize::MAX)
        .expect("write-out")
        .expect("changes");
    store.flush().expect("flush");
    drop((p, tree, store));
    let store = Store::open_when_released(dir.path(), 8);
    let tree = store.partition("t", 0).expect("tree");
    for order in 0..200 {
        let want = if order < 5 { 2 } else { 1 };
        let state = tree.get::<Orders>(&format!("o{order:04}")).expect("read");
        assert_eq!(state.map(|s| s.version), Some(want), "o{order:04} reopened");
    }
}
