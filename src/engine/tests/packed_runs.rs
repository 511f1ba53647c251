//! A restore from nothing writes packed runs (`engine::runs`); every read
//! of the store must answer as if each key had been written on its own.

use std::collections::BTreeMap;

use super::store::state;
use crate::domains::orders::Orders;
use crate::engine::inbox::{Chunk, ChunkRef, InboxEntry};
use crate::engine::store::*;
use crate::engine::stored_state::encode_state;

fn chunk(version: i64) -> Vec<InboxEntry> {
    (version..version + 3)
        .map(|v| InboxEntry {
            version: v,
            id_hash: v as u64,
            applied_at_ms: 7,
        })
        .collect()
}

/// The reference an order's state holds to [`chunk`]`(first)`.
fn chunk_ref(first: i64) -> ChunkRef {
    ChunkRef {
        first_version: first,
        last_applied_at_ms: 7,
    }
}

/// xorshift: the same sequence for a seed on every machine.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const ORDERS: u64 = 400;
const CHUNK_FIRSTS: [i64; 3] = [1, 4, 7];

/// What the store should hold: each order's version and chunks.
#[derive(Default)]
struct Model {
    states: BTreeMap<String, i64>,
    chunks: BTreeMap<(String, i64), ()>,
}

/// One change, applied to both trees the way its path writes it.
#[derive(Clone)]
enum Change {
    State(String, Option<i64>),
    Chunk(String, i64, bool),
}

fn random_changes(rng: &mut Rng, count: usize) -> Vec<Change> {
    (0..count)
        .map(|_| {
            let order = format!("order-{}", rng.below(ORDERS));
            match rng.below(5) {
                0 => Change::State(order, None),
                1 | 2 => Change::State(order, Some(1 + rng.below(50) as i64)),
                _ => Change::Chunk(
                    order,
                    CHUNK_FIRSTS[rng.below(3) as usize],
                    rng.below(3) != 0,
                ),
            }
        })
        .collect()
}

impl Model {
    fn apply(&mut self, changes: &[Change]) {
        for change in changes {
            match change {
                Change::State(order, Some(version)) => {
                    self.states.insert(order.clone(), *version);
                }
                Change::State(order, None) => {
                    self.states.remove(order);
                }
                Change::Chunk(order, first, true) => {
                    self.chunks.insert((order.clone(), *first), ());
                }
                Change::Chunk(order, first, false) => {
                    self.chunks.remove(&(order.clone(), *first));
                }
            }
        }
    }
}

fn restore_write(changes: &[Change]) -> RestoreWrite {
    let mut write = RestoreWrite::default();
    for change in changes {
        match change {
            Change::State(order, version) => write.restore(
                &to_changelog_key(&order_key(order)),
                version
                    .map(|v| encode_state(&state(order, v)).expect("encodes"))
                    .as_deref(),
            ),
            Change::Chunk(order, first, put) => write.restore(
                &to_changelog_key(&chunk_key(order, &chunk_ref(*first))),
                put.then(|| encode(&chunk(*first)).expect("encodes"))
                    .as_deref(),
            ),
        }
    }
    write
}

/// A write-out: states put, chunks put or deleted (a write-out never
/// deletes a state).
fn write_out(tree: &PartitionStore, changes: &[Change], next_offset: i64) {
    let mut write = BatchWrite::default();
    for change in changes {
        match change {
            Change::State(order, Some(version)) => {
                write.put_state(&state(order, *version)).expect("put")
            }
            Change::State(_, None) => unreachable!("a write-out deletes no state"),
            Change::Chunk(order, first, true) => {
                write.put_chunk(order, &Chunk::of(&chunk(*first)).expect("entries"))
            }
            Change::Chunk(order, first, false) => {
                write.delete_chunk(order, &chunk_ref(*first), false)
            }
        }
    }
    tree.commit_batch(write, &Checkpoint::starting_at(next_offset))
        .expect("commit");
}

fn reopen(path: &std::path::Path) -> Store {
    Store::open_when_released(path, 8)
}

fn check(store: &Store, partition: i32, model: &Model, what: &str) {
    // A handle of its own: runs a restore wrote through another handle count.
    let tree = store.partition("orders", partition).expect("tree");
    for i in 0..ORDERS {
        let order = format!("order-{i}");
        assert_eq!(
            tree.get::<Orders>(&order).expect("get").map(|s| s.version),
            model.states.get(&order).copied(),
            "{what}: state of {order}"
        );
        for first in CHUNK_FIRSTS {
            assert_eq!(
                tree.get_chunk(&order, chunk_ref(first))
                    .expect("chunk")
                    .is_some(),
                model.chunks.contains_key(&(order.clone(), first)),
                "{what}: chunk {order}@{first}"
            );
        }
    }
    let mut listed = Vec::new();
    store
        .for_each_in_partition::<Orders>(|p, s| {
            if p == partition {
                listed.push((s.key, s.version));
            }
        })
        .expect("scan");
    let wanted: Vec<(String, i64)> = model.states.iter().map(|(k, v)| (k.clone(), *v)).collect();
    assert_eq!(listed, wanted, "{what}: every state, once, in key order");
    assert_eq!(tree.state_count().expect("count"), model.states.len());
}

/// Restores of several batches (generations of runs, each shadowing the
/// one before, deletions included), then write-outs that put states and
/// put and delete chunks, then a tail restore key by key: a tree restored
/// into packed runs answers every read as the tree restored key by key
/// does, and as the model says, before and after the store is reopened.
#[test]
fn a_tree_restored_into_packed_runs_reads_as_one_restored_key_by_key() {
    for seed in 1..=12u64 {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut model = Model::default();
        let generations = 1 + rng.below(3);
        {
            let store = Store::open(dir.path(), 8).expect("store");
            let (packed, keyed) = (
                store.partition("orders", 0).expect("tree"),
                store.partition("orders", 1).expect("tree"),
            );
            // A handle taken before the restore, as the partition's task
            // holds one: it sees the runs the restore writes.
            let early = store.partition("orders", 0).expect("tree");
            for tree in [&packed, &keyed] {
                tree.begin_restore().expect("mark");
            }
            for _ in 0..generations {
                let changes = random_changes(&mut rng, 600);
                packed
                    .restore_batch(restore_write(&changes), true)
                    .expect("packed");
                keyed
                    .restore_batch(restore_write(&changes), false)
                    .expect("keyed");
                model.apply(&changes);
            }
            let checkpoint = Checkpoint::starting_at(10);
            packed
                .finish_restore(RestoreWrite::default(), true, &checkpoint, None)
                .expect("finish");
            keyed
                .finish_restore(RestoreWrite::default(), false, &checkpoint, None)
                .expect("finish");
            // States go to runs either way; chunks only when packed.
            assert!(packed.has_runs() && keyed.has_runs());
            let chunks_in_tree = |tree: &PartitionStore| {
                tree.tree.scan_prefix(b"j").count() + tree.tree.scan_prefix(b"i").count()
            };
            assert_eq!(chunks_in_tree(&packed), 0);
            assert!(chunks_in_tree(&keyed) > 0);
            assert!(early.has_runs(), "every handle of the tree sees its runs");
            for (order, version) in &model.states {
                assert_eq!(
                    early.get::<Orders>(order).expect("get").map(|s| s.version),
                    Some(*version)
                );
            }
            check(&store, 0, &model, &format!("seed {seed}, restored"));
            check(&store, 1, &model, &format!("seed {seed}, keyed"));

            for round in 0..3 {
                let changes: Vec<Change> = random_changes(&mut rng, 200)
                    .into_iter()
                    .filter(|c| !matches!(c, Change::State(_, None)))
                    .collect();
                for tree in [&packed, &keyed] {
                    write_out(tree, &changes, 11 + round);
                }
                model.apply(&changes);
            }
            check(&store, 0, &model, &format!("seed {seed}, written out"));
            check(
                &store,
                1,
                &model,
                &format!("seed {seed}, keyed written out"),
            );

            let tail = random_changes(&mut rng, 100);
            packed
                .restore_batch(restore_write(&tail), false)
                .expect("tail");
            keyed
                .restore_batch(restore_write(&tail), false)
                .expect("tail");
            model.apply(&tail);
            check(&store, 0, &model, &format!("seed {seed}, tail restored"));
            store.flush().expect("flush");
        }
        let reopened = reopen(dir.path());
        check(&reopened, 0, &model, &format!("seed {seed}, reopened"));
        let tree = reopened.partition("orders", 0).expect("tree");
        tree.clear().expect("clear");
        assert!(!tree.has_runs(), "a cleared tree has no runs");
        assert_eq!(tree.get::<Orders>("order-1").expect("get"), None);
        check(
            &reopened,
            0,
            &Model::default(),
            &format!("seed {seed}, cleared"),
        );
    }
}

/// A store written by the layouts before packed runs (3), before packed
/// chunks (4), before packed states (5) or before time-keyed chunks (6)
/// opens, its fixed-width states and bincode chunks under their
/// order-grouped keys read, and it is marked with this layout.
#[test]
fn a_store_of_an_earlier_layout_is_opened_and_marked() {
    for layout in [3u32, 4, 5, 6] {
        let dir = tempfile::tempdir().expect("tempdir");
        let old_chunk = chunk(1);
        {
            let db = sled::open(dir.path()).expect("sled");
            db.insert("format", &layout.to_be_bytes()).expect("mark");
            let tree = db.open_tree("partition/orders/0").expect("tree");
            tree.insert(order_key("a"), super::store::fixed_width(&state("a", 2)))
                .expect("state");
            tree.insert(
                legacy_chunk_key("a", 1),
                bincode::serialize(&old_chunk).expect("encodes"),
            )
            .expect("chunk");
            db.flush().expect("flush");
        }
        {
            let store = reopen(dir.path());
            assert_eq!(
                store.find::<Orders>("a").expect("find").map(|s| s.version),
                Some(2)
            );
            let tree = store.partition("orders", 0).expect("tree");
            assert_eq!(
                tree.get_chunk("a", chunk_ref(1)).expect("chunk"),
                Some(old_chunk)
            );
        }
        // The store's background threads release its lock shortly after
        // it is dropped.
        let db = (0..100)
            .find_map(|_| match sled::open(dir.path()) {
                Ok(db) => Some(db),
                Err(_) => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    None
                }
            })
            .expect("lock released");
        assert_eq!(
            db.get("format").expect("mark").as_deref(),
            Some(&FORMAT.to_be_bytes()[..]),
            "layout {layout} marked {FORMAT}"
        );
    }
}

/// A removal leaves a tombstone only where a run still holds the key: an
/// inbox chunk written after the restore and expired later is removed
/// outright, so tombstones do not pile up in a tree that was restored once.
#[test]
fn only_a_key_a_run_holds_is_removed_with_a_tombstone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path(), 8).expect("store");
    let tree = store.partition("orders", 0).expect("tree");
    tree.begin_restore().expect("mark");
    tree.restore_batch(
        restore_write(&[Change::Chunk("restored".into(), 1, true)]),
        true,
    )
    .expect("packed");
    tree.finish_restore(
        RestoreWrite::default(),
        true,
        &Checkpoint::starting_at(1),
        None,
    )
    .expect("finish");
    write_out(&tree, &[Change::Chunk("later".into(), 1, true)], 2);
    write_out(
        &tree,
        &[
            Change::Chunk("restored".into(), 1, false),
            Change::Chunk("later".into(), 1, false),
        ],
        3,
    );
    let raw = |order: &str| {
        tree.tree
            .get(chunk_key(order, &chunk_ref(1)))
            .expect("raw read")
    };
    assert_eq!(
        raw("restored").as_deref(),
        Some(&[][..]),
        "a run holds it: a tombstone"
    );
    assert_eq!(raw("later"), None, "no run holds it: removed outright");
    for order in ["restored", "later"] {
        assert_eq!(
            tree.get_chunk(order, chunk_ref(1)).expect("read"),
            None,
            "{order}"
        );
    }
}
