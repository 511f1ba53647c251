//! The tests of `engine::partition_state`, with orders as the entity.

use crate::domains::orders::Orders;
use crate::engine::partition_state::*;
use crate::engine::store::{Checkpoint, StoreError};

/// The batch of `events` between `first` and `next`, each sourced at
/// `first` (these tests do not look at source offsets).
fn apply(
    p: &mut PartitionState<Orders>,
    events: Vec<OrderEvent>,
    dead: u64,
    first: i64,
    next: i64,
    now: i64,
    retention: i64,
) -> Result<BatchOutcome, StoreError> {
    let events = events
        .into_iter()
        .map(|value| Sourced {
            offset: first,
            value: value.into(),
        })
        .collect();
    p.apply(
        Decoded {
            events,
            dead_lettered: dead,
            first_offset: first,
            next_offset: next,
        },
        now,
        retention,
    )
}
use crate::domains::orders::event::{EventType, OrderEvent};
use crate::engine::store::Store;

const DAY_MS: i64 = 86_400_000;

fn event(order: &str, version: i64, id: &str) -> OrderEvent {
    OrderEvent {
        event_id: id.into(),
        order_id: order.into(),
        version,
        event_type: EventType::Shipped,
        amount: version,
        currency: "EUR".into(),
        occurred_at: version,
    }
}

fn open() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 8).unwrap();
    (dir, store)
}

#[test]
fn an_order_touched_many_times_is_written_once_per_write_out() {
    let (_dir, store) = open();
    let mut p = PartitionState::new(store.partition("t", 0).unwrap(), None);
    let events: Vec<OrderEvent> = (1..=50)
        .flat_map(|v| {
            [
                event("a", v, &format!("a{v}")),
                event("b", v, &format!("b{v}")),
            ]
        })
        .collect();
    let out = apply(&mut p, events, 0, 100, 200, 1000, DAY_MS).unwrap();
    assert_eq!(out.outcomes.applied, 100);
    assert!(p.dirty_bytes() > 0);
    assert_eq!(
        store.partition("t", 0).unwrap().checkpoint().unwrap(),
        None,
        "nothing written before the write-out"
    );
    let written = p
        .write_out(usize::MAX)
        .unwrap()
        .expect("something to write");
    // 2 states + 1 full chunk each + checkpoint.
    assert_eq!(written.orders, 2);
    assert_eq!(written.keys, 2 + 2 + 1);
    assert_eq!(written.checkpoint.next_offset, 200);
    assert_eq!(written.checkpoint.start_offset, 100);
    assert_eq!(p.dirty_bytes(), 0);
    assert_eq!(p.write_out(usize::MAX).unwrap(), None, "nothing new");
    let tree = store.partition("t", 0).unwrap();
    assert_eq!(tree.get::<Orders>("a").unwrap().unwrap().version, 50);
    assert_eq!(tree.checkpoint().unwrap().unwrap().applied, 100);
}

/// Order "a" with events 1 to 70 applied (two full inbox chunks, 6
/// newest entries), nothing written out yet.
fn seventy_applied() -> (
    tempfile::TempDir,
    crate::engine::store::PartitionStore,
    PartitionState<Orders>,
) {
    let (dir, store) = open();
    let tree = store.partition("t", 0).unwrap();
    let mut p = PartitionState::new(tree.clone(), None);
    let events: Vec<OrderEvent> = (1..=70)
        .map(|v| event("a", v, &format!("id-{v}")))
        .collect();
    apply(&mut p, events, 0, 0, 70, 1000, DAY_MS).unwrap();
    (dir, tree, p)
}

/// Redeliveries of "a"'s events 1, 32, 33 and 64 (in its chunks) and 65
/// and 70 (among its newest entries).
fn redeliveries() -> Vec<OrderEvent> {
    [1, 32, 33, 64, 65, 70]
        .iter()
        .map(|v| event("a", *v, &format!("id-{v}")))
        .collect()
}

#[test]
fn redeliveries_are_found_after_the_cache_is_dropped() {
    let (_dir, tree, mut p) = seventy_applied();
    p.write_out(0).unwrap();
    assert_eq!(
        p.cached_orders(),
        0,
        "over budget: forgotten after the write-out"
    );
    // A fresh state over the same tree, as after a restart.
    let mut p = PartitionState::new(tree.clone(), tree.checkpoint().unwrap());
    let again = redeliveries();
    let out = apply(&mut p, again, 0, 70, 76, 2000, DAY_MS).unwrap();
    assert_eq!(
        (
            out.outcomes.duplicates,
            out.outcomes.stale,
            out.outcomes.applied
        ),
        (6, 0, 0)
    );
    assert_eq!(
        out.chunk_reads, 4,
        "versions 1, 32, 33 and 64 are in chunks"
    );
    let other = apply(
        &mut p,
        vec![event("a", 5, "not-id-5")],
        0,
        76,
        77,
        2000,
        DAY_MS,
    )
    .unwrap();
    assert_eq!(other.outcomes.stale, 1);
    let cp = p.write_out(usize::MAX).unwrap().unwrap().checkpoint;
    assert_eq!(cp.outcomes() as i64, cp.next_offset - cp.start_offset);
}

/// Layout 7 keys a chunk by the time of its newest entry: a later chunk
/// sorts after an earlier one whatever their orders, so each write-out's
/// chunks land at the tree's right edge.
#[test]
fn new_chunks_are_keyed_by_time_whatever_their_order() {
    let (_dir, store) = open();
    let tree = store.partition("t", 0).unwrap();
    let mut p = PartitionState::new(tree.clone(), None);
    let thirty_two = |order: &str| -> Vec<OrderEvent> {
        (1..=32)
            .map(|v| event(order, v, &format!("{order}{v}")))
            .collect()
    };
    apply(&mut p, thirty_two("b"), 0, 0, 32, 1000, DAY_MS).unwrap();
    p.write_out(usize::MAX).unwrap();
    apply(&mut p, thirty_two("a"), 0, 32, 64, 2000, DAY_MS).unwrap();
    p.write_out(usize::MAX).unwrap();
    let in_key_order: Vec<crate::engine::inbox::ChunkRef> = ["a", "b"]
        .into_iter()
        .map(|order| tree.get::<Orders>(order).unwrap().expect("state"))
        .map(|state| state.inbox.chunk_refs().next().expect("a chunk"))
        .collect();
    let (a, b) = (in_key_order[0], in_key_order[1]);
    assert!(
        crate::engine::store::chunk_key("b", &b) < crate::engine::store::chunk_key("a", &a),
        "b's chunk filled first, so it sorts first"
    );
    let stored: Vec<Vec<u8>> = tree
        .tree
        .scan_prefix(b"j")
        .keys()
        .map(|k| k.unwrap().to_vec())
        .collect();
    assert_eq!(
        stored,
        vec![
            crate::engine::store::chunk_key("b", &b),
            crate::engine::store::chunk_key("a", &a)
        ]
    );
    assert!(
        tree.tree.scan_prefix(b"i").next().is_none(),
        "nothing under the order-grouped keys"
    );
}

/// A store of layout 6 or before holds its chunks under order-grouped
/// keys: a redelivery of an event in one is still a duplicate, and when it
/// expires it is deleted under that key, its changelog tombstone too.
#[test]
fn chunks_under_the_earlier_keys_still_count_and_expire() {
    use crate::engine::store::{chunk_key, legacy_chunk_key, to_changelog_key};
    let (_dir, tree, mut p) = seventy_applied();
    p.write_out(0).unwrap();
    // The chunks as layout 6 wrote them.
    let refs = tree
        .get::<Orders>("a")
        .unwrap()
        .expect("state")
        .inbox
        .chunk_refs()
        .collect::<Vec<_>>();
    assert_eq!(refs.len(), 2);
    for chunk in &refs {
        let value = tree
            .tree
            .remove(chunk_key("a", chunk))
            .unwrap()
            .expect("written under its layout-7 key");
        tree.tree
            .insert(legacy_chunk_key("a", chunk.first_version), value)
            .unwrap();
    }
    let mut p = PartitionState::new(tree.clone(), tree.checkpoint().unwrap());
    let out = apply(&mut p, redeliveries(), 0, 70, 76, 2000, DAY_MS).unwrap();
    assert_eq!(
        (out.outcomes.duplicates, out.outcomes.stale, out.chunk_reads),
        (6, 0, 4),
        "found under the earlier keys"
    );
    // A day later both chunks are past the retention window.
    apply(
        &mut p,
        vec![event("a", 71, "id-71")],
        0,
        76,
        77,
        1000 + DAY_MS + 1,
        DAY_MS,
    )
    .unwrap();
    let mut prepared = p.prepare_write_out(true).unwrap().expect("changes");
    let changes = prepared.write.changes.take().expect("collected");
    for chunk in &refs {
        let legacy = to_changelog_key(&legacy_chunk_key("a", chunk.first_version));
        assert!(
            changes.iter().any(|c| c.key == legacy && c.value.is_none()),
            "a tombstone for chunk {} under its earlier key",
            chunk.first_version
        );
        let current = to_changelog_key(&chunk_key("a", chunk));
        assert!(
            !changes.iter().any(|c| c.key == current),
            "nothing for a key it never had"
        );
    }
    p.finish_write_out(prepared, Some(1), usize::MAX).unwrap();
    assert!(tree.tree.scan_prefix(b"i").next().is_none(), "deleted");
    assert!(tree.tree.scan_prefix(b"j").next().is_none());
}

/// Chunks that filled since the last write-out are held in memory until
/// it: a redelivery of an event in one is still a duplicate, another id
/// with its version is stale, and the write-out stores them as they were
/// held.
#[test]
fn redeliveries_are_found_in_chunks_not_yet_written() {
    let (_dir, tree, mut p) = seventy_applied();
    let again: Vec<OrderEvent> = redeliveries()
        .into_iter()
        .chain([event("a", 5, "not-id-5"), event("a", 40, "not-id-40")])
        .collect();
    let out = apply(&mut p, again, 0, 70, 78, 1000, DAY_MS).unwrap();
    assert_eq!(
        (
            out.outcomes.duplicates,
            out.outcomes.stale,
            out.outcomes.applied
        ),
        (6, 2, 0)
    );
    p.write_out(usize::MAX).unwrap().unwrap();
    let stored = tree.get::<Orders>("a").unwrap().expect("state");
    for first in [1, 33] {
        let chunk = stored
            .inbox
            .chunk_refs()
            .find(|c| c.first_version == first)
            .expect("the state refers to it");
        let chunk = tree.get_chunk("a", chunk).unwrap().expect("written");
        assert_eq!(
            chunk.iter().map(|e| e.version).collect::<Vec<_>>(),
            (first..first + 32).collect::<Vec<_>>()
        );
    }
}

#[test]
fn a_write_out_for_the_changelog_carries_the_same_changes() {
    let (_dir, store) = open();
    let tree = store.partition("t", 0).unwrap();
    let mut p = PartitionState::new(tree.clone(), None);
    let events: Vec<OrderEvent> = (1..=40)
        .map(|v| event("a", v, &format!("a{v}")))
        .chain([event("b", 1, "b1")])
        .collect();
    apply(&mut p, events, 0, 0, 41, 1000, DAY_MS).unwrap();
    let mut prepared = p.prepare_write_out(true).unwrap().expect("changes");
    let changes = prepared.write.changes.take().expect("collected");
    // Two states and a's first full inbox chunk; the checkpoint goes separately.
    assert_eq!(changes.len(), 3);
    assert_eq!(changes.len(), prepared.write.keys);
    let mut keys: Vec<&[u8]> = changes.iter().map(|c| c.key.as_slice()).collect();
    keys.sort();
    assert_eq!(&keys[..2], &[b"a".as_slice(), b"b".as_slice()]);
    assert_eq!(
        keys[2][0],
        crate::engine::store::CHANGELOG_RESERVED,
        "the chunk's key is reserved"
    );
    assert_eq!(
        Checkpoint::decode(&prepared.checkpoint_bytes)
            .unwrap()
            .next_offset,
        41
    );
    assert_eq!(
        tree.checkpoint().unwrap(),
        None,
        "nothing written before finish"
    );
    let written = p.finish_write_out(prepared, Some(7), usize::MAX).unwrap();
    assert_eq!(written.checkpoint.changelog_next, Some(7));
    assert_eq!(tree.checkpoint().unwrap().unwrap().changelog_next, Some(7));
    assert!(!p.has_unwritten());
}

#[test]
fn version_gaps_are_counted() {
    let (_dir, store) = open();
    let mut p = PartitionState::new(store.partition("t", 0).unwrap(), None);
    let out = apply(
        &mut p,
        vec![event("a", 1, "1"), event("a", 3, "3"), event("b", 2, "b2")],
        0,
        0,
        3,
        0,
        DAY_MS,
    )
    .unwrap();
    assert_eq!(out.version_gaps, 2);
}

/// Orders `from..to` of one batch, each at `version`, with ids unique per
/// order and version.
fn orders(from: usize, to: usize, version: i64) -> Vec<OrderEvent> {
    (from..to)
        .map(|o| event(&format!("o{o:04}"), version, &format!("o{o:04}-{version}")))
        .collect()
}

#[test]
fn over_budget_the_least_recently_touched_orders_go_first() {
    let (_dir, store) = open();
    let mut p = PartitionState::<Orders>::new(store.partition("t", 0).unwrap(), None);
    // 100 cold orders, then 100 hot ones, in two batches.
    apply(&mut p, orders(0, 100, 1), 0, 0, 100, 1000, DAY_MS).unwrap();
    apply(&mut p, orders(100, 200, 1), 0, 100, 200, 1000, DAY_MS).unwrap();
    let per_order = p.cached_bytes() / 200;
    // A budget for 150 orders: the write-out keeps three quarters of it.
    let budget = 150 * per_order;
    p.write_out(budget).unwrap().expect("something to write");
    assert!(p.cached_bytes() <= budget - budget / 4, "shed to 3/4");
    assert!(
        (100..200).all(|o| p.is_cached(&format!("o{o:04}"))),
        "the newer batch stays"
    );
    assert!(!p.is_cached("o0000"), "the oldest goes");
    assert!(p.cached_orders() >= 100 && p.cached_orders() < 150);
}

#[test]
fn changed_orders_are_never_shed_and_the_hot_set_survives_a_stream_of_new_ones() {
    let (_dir, store) = open();
    let mut p = PartitionState::<Orders>::new(store.partition("t", 0).unwrap(), None);
    apply(&mut p, orders(0, 50, 1), 0, 0, 50, 1000, DAY_MS).unwrap();
    let per_order = p.cached_bytes() / 50;
    let budget = 100 * per_order;
    p.write_out(budget).unwrap().expect("something to write");
    assert_eq!(p.cached_orders(), 50, "under budget: all kept");
    // Unchanged orders are shed; changed ones stay even past the budget.
    let mut offset = 50;
    for round in 0..10 {
        let v = 2 + round as i64;
        // The hot 10 again, and 20 orders never seen before.
        let mut batch = orders(0, 10, v);
        let fresh = 1000 + round * 20;
        batch.extend(orders(fresh, fresh + 20, 1));
        apply(&mut p, batch, 0, offset, offset + 30, 1000, DAY_MS).unwrap();
        offset += 30;
        p.shed(budget);
        assert!(
            (fresh..fresh + 20).all(|o| p.is_cached(&format!("o{o:04}"))),
            "unwritten changes stay cached"
        );
    }
    assert!(p.cached_bytes() > budget, "changed orders alone pass it");
    p.write_out(budget).unwrap().expect("something to write");
    assert!(p.cached_bytes() <= budget - budget / 4);
    assert!(
        (0..10).all(|o| p.is_cached(&format!("o{o:04}"))),
        "the hot orders, touched by every batch, survive"
    );
    let tree = store.partition("t", 0).unwrap();
    assert_eq!(tree.get::<Orders>("o1180").unwrap().unwrap().version, 1);
    assert_eq!(tree.get::<Orders>("o0000").unwrap().unwrap().version, 11);
}
