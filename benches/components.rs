//! Component benchmarks (issue 4): the per-event costs the processor pays,
//! each reported in events/s.
//!
//! * `decode/*`: Avro decode of one Confluent wire-format record with a warm
//!   writer-schema cache (`Decoder::decode_cached`), for a v1 and a v2 record.
//! * `decide/*`: the pure core on an existing state: `decide` alone, and
//!   `step` (inbox lookup + new state) on orders with 1, 10, 100 and 1,000
//!   applied events (an order's inbox holds every event id applied within
//!   the 7-day retention). The cost must not grow with that count: the
//!   state holds the newest entries, older ones sit in chunks (served here
//!   from memory) that are read only for a redelivery of an old event.
//! * `store/*`: one processing batch of 1,000 events: 1,000 order states and
//!   the checkpoint in one `commit_batch` (one sled `apply_batch`), without
//!   and with `Store::flush` after it, for orders with 1 and 50 applied events
//!   (50: the state value holds the newest 18 inbox entries).
//!   The same 1,000 order ids are rewritten every iteration, so the tree stays
//!   bounded.
//!
//! Run: `cargo bench --bench components` (under a minute on 2 cores). Criterion's
//! medians are in `target/criterion/<group>/<bench>/new/estimates.json`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};

use orderly::testkit::orders::{Encoder, EventType, OrderEvent, OrderState, WriterVersion};
use orderly::testkit::{
    apply, decide, step, BatchWrite, Checkpoint, Decoder, InboxEntry, PartitionStore, RestoreWrite,
};
use orderly::{Registry, Store};
use std::collections::HashMap;

const DAY_MS: i64 = 86_400_000;
const RETENTION_MS: i64 = 7 * DAY_MS;
const NOW_MS: i64 = 1_764_547_200_000;

fn event_id(order: usize, version: i64) -> String {
    // A UUID-shaped id, as the workload generator and real producers send.
    format!("5f0c6f2e-{:04x}-4000-8000-{:012x}", order % 0xffff, version)
}

fn event(order: usize, version: i64) -> OrderEvent {
    OrderEvent {
        event_id: event_id(order, version),
        order_id: format!("order-{order:08}"),
        version,
        event_type: EventType::Shipped,
        amount: 12_345,
        currency: "USD".into(),
        occurred_at: NOW_MS - 60_000,
    }
}

/// The state of `order` after `inbox_len` applied events (versions
/// 1..=inbox_len), and its spilled inbox chunks by first version.
fn state(order: usize, inbox_len: usize) -> (OrderState, HashMap<i64, Vec<InboxEntry>>) {
    let mut chunks = HashMap::new();
    let mut current = None;
    for v in 1..=inbox_len.max(1) as i64 {
        let (next, spill) = apply(
            current,
            event(order, v).into(),
            NOW_MS - 3_600_000 + v,
            RETENTION_MS,
        );
        if let Some(chunk) = spill.chunk {
            chunks.insert(chunk.reference().first_version(), chunk.entries());
        }
        current = Some(next);
    }
    (current.expect("at least one event"), chunks)
}

fn decode_benches(c: &mut Criterion) {
    let registry = Registry::memory();
    let encoder = futures::executor::block_on(Encoder::register(&registry, "orders"))
        .expect("in-process registry");
    let decoder = Decoder::new(registry);
    let sample = event(42, 3);
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(1));
    for (name, version) in [
        ("v1_cached", WriterVersion::V1),
        ("v2_cached", WriterVersion::V2),
    ] {
        let bytes = encoder.encode(&sample, version).expect("encodes");
        // Warm the cache: the first decode fetches and resolves the writer schema.
        futures::executor::block_on(decoder.decode(Some(&bytes))).expect("decodes");
        assert!(
            decoder.decode_cached(Some(&bytes)).is_some(),
            "cache is warm"
        );
        group.bench_function(name, |b| {
            b.iter(|| {
                let decoded = decoder.decode_cached(black_box(Some(bytes.as_slice())));
                black_box(decoded)
            })
        });
    }
    group.finish();
}

fn decide_benches(c: &mut Criterion) {
    let mut group = c.benchmark_group("decide");
    group.throughput(Throughput::Elements(1));
    let (existing, _) = state(7, 10);
    let newer: orderly::Event<_> = event(7, 11).into();
    group.bench_function("decide_apply", |b| {
        b.iter(|| {
            decide(
                black_box(Some(&existing)),
                None,
                black_box(&newer),
                NOW_MS - RETENTION_MS,
            )
        })
    });
    for inbox_len in [1usize, 10, 100, 1000] {
        let (existing, chunks) = state(7, inbox_len);
        let newer: orderly::Event<_> = event(7, inbox_len as i64 + 1).into();
        // A redelivery of the newest and of the oldest applied event (the
        // oldest is in a chunk once the order has more than 32 events).
        let recent_duplicate: orderly::Event<_> = event(7, inbox_len as i64).into();
        let old_duplicate: orderly::Event<_> = event(7, 1).into();
        // `step` takes the state and event by value (the processor moves the
        // event's strings into the state); cloning both is setup, outside
        // the measurement.
        for (name, incoming) in [
            ("step_apply", &newer),
            ("step_duplicate_recent", &recent_duplicate),
            ("step_duplicate_oldest", &old_duplicate),
        ] {
            group.bench_with_input(
                BenchmarkId::new(name, format!("events_{inbox_len}")),
                &inbox_len,
                |b, _| {
                    b.iter_batched(
                        || (existing.clone(), incoming.clone()),
                        |(current, incoming)| {
                            step(
                                black_box(Some(current)),
                                black_box(incoming),
                                NOW_MS,
                                RETENTION_MS,
                                |first| chunks.get(&first).cloned(),
                            )
                        },
                        BatchSize::SmallInput,
                    )
                },
            );
        }
    }
    group.finish();
}

fn store_benches(c: &mut Criterion) {
    const BATCH: usize = 1_000;
    let dir = tempfile::Builder::new()
        .prefix("orderly-bench-store-")
        .tempdir()
        .expect("tempdir");
    // The default cache_capacity_mb.
    let store = Store::open(&dir.path().join("store"), 64).expect("store opens");
    let partition = store.partition("orders", 0).expect("tree opens");
    let mut group = c.benchmark_group("store");
    group.throughput(Throughput::Elements(BATCH as u64));
    let mut checkpoint = Checkpoint::starting_at(0);
    for inbox_len in [1usize, 50] {
        let states: Vec<OrderState> = (0..BATCH).map(|order| state(order, inbox_len).0).collect();
        for flush in [false, true] {
            let name = if flush {
                "batch_1000_flush"
            } else {
                "batch_1000_no_flush"
            };
            group.bench_with_input(
                BenchmarkId::new(name, format!("inbox_{inbox_len}")),
                &inbox_len,
                |b, _| {
                    b.iter(|| {
                        let mut write = BatchWrite::default();
                        for s in &states {
                            write.put_state(s).expect("encodes");
                        }
                        checkpoint.next_offset += BATCH as i64;
                        checkpoint.applied += BATCH as u64;
                        partition
                            .commit_batch(write, &checkpoint)
                            .expect("batch written");
                        if flush {
                            black_box(store.flush().expect("flushed"));
                        }
                    })
                },
            );
        }
    }
    group.finish();
    drop(partition);
    drop(store);
}

/// A state read from a tree restored key by key, and from one restored from
/// nothing into packed runs of several generations (a 1M-order restore
/// writes about 7 per partition): a key held, and a key absent.
fn lookup_benches(c: &mut Criterion) {
    const KEYS: usize = 40_000;
    const GENERATIONS: usize = 7;
    let dir = tempfile::Builder::new()
        .prefix("orderly-bench-lookup-")
        .tempdir()
        .expect("tempdir");
    let store = Store::open(&dir.path().join("store"), 64).expect("store opens");
    let encoded: Vec<(String, Vec<u8>)> = (0..KEYS)
        .map(|order| {
            let state = state(order, 1).0;
            let value = orderly::testkit::encode_state(&state).expect("encodes");
            (state.key, value)
        })
        .collect();
    let restore = |tree: &PartitionStore, packed: bool| {
        tree.begin_restore().expect("marked");
        for generation in encoded.chunks(KEYS / GENERATIONS) {
            let mut write = RestoreWrite::default();
            for (key, value) in generation {
                // An order's changelog key is its id.
                write.restore(key.as_bytes(), Some(value));
            }
            tree.restore_batch(write, packed).expect("restored");
        }
        tree.finish_restore(
            RestoreWrite::default(),
            packed,
            &Checkpoint::starting_at(0),
            None,
        )
        .expect("finished");
    };
    let mut group = c.benchmark_group("lookup");
    for (name, packed) in [("keyed", false), ("packed_7_generations", true)] {
        let tree = store
            .partition("orders", i32::from(packed))
            .expect("tree opens");
        restore(&tree, packed);
        assert_eq!(tree.has_runs(), packed);
        let mut next = 0usize;
        group.bench_function(BenchmarkId::new("held", name), |b| {
            b.iter(|| {
                next = (next + 7_919) % KEYS;
                black_box(tree.get::<orderly::Orders>(&encoded[next].0).expect("read"))
            })
        });
        group.bench_function(BenchmarkId::new("absent", name), |b| {
            b.iter(|| black_box(tree.get::<orderly::Orders>("no-such-order").expect("read")))
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(25)
}

criterion_group! {
    name = components;
    config = config();
    targets = decode_benches, decide_benches, store_benches, lookup_benches
}
criterion_main!(components);
