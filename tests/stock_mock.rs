//! The second domain through the whole engine on librdkafka's mock cluster:
//! stock levels (an accumulating state, where a reservation applied twice or
//! lost is a wrong level) with redeliveries and poison records, then a
//! fresh store restored from the changelog, both checked against levels
//! computed independently from the planned events.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use orderly::demo::covers;
use orderly::domains::stock::{
    Availability, Stock, StockChange, StockEncoder, StockEventKind, StockLevel,
};
use orderly::load::produce_planned;
use orderly::processor::Processor;
use orderly::registry::Registry;
use orderly::store::Store;
use orderly::workload::PlannedRecord;
use orderly::Event;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rdkafka::consumer::Consumer;
use support::mock::{self, config, producer};

const PARTITIONS: i32 = 4;

/// What the planned stream implies.
struct Oracle {
    levels: HashMap<String, (i64, StockLevel)>,
    applied: u64,
    duplicates: u64,
    dead_lettered: u64,
}

/// `skus` SKUs, each restocked then reserved and released at random (never
/// below zero available), with about one event in six delivered twice (the
/// copy later in the stream, as a producer retry or a replay would), and a
/// few poison records.
fn plan(encoder: &StockEncoder, skus: usize, seed: u64) -> (Vec<PlannedRecord>, Oracle) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut records: Vec<(f64, PlannedRecord)> = Vec::new();
    let mut oracle = Oracle {
        levels: HashMap::new(),
        applied: 0,
        duplicates: 0,
        dead_lettered: 0,
    };
    for s in 0..skus {
        let sku = format!("sku-{s:05}");
        let mut level = StockLevel::default();
        let events = rng.gen_range(5..40);
        let mut at = rng.gen_range(0.0..1.0);
        for version in 1..=events {
            let change = if version == 1 || rng.gen_bool(0.15) {
                StockChange {
                    kind: StockEventKind::Restocked,
                    quantity: rng.gen_range(5..50),
                }
            } else if level.reserved > 0 && rng.gen_bool(0.3) {
                StockChange {
                    kind: StockEventKind::Released,
                    quantity: rng.gen_range(1..=level.reserved),
                }
            } else if level.available() > 0 {
                StockChange {
                    kind: StockEventKind::Reserved,
                    quantity: rng.gen_range(1..=level.available()),
                }
            } else {
                StockChange {
                    kind: StockEventKind::Restocked,
                    quantity: rng.gen_range(5..50),
                }
            };
            level = level.after(change);
            let event = Event {
                event_id: format!("{sku}-{version}-{}", rng.gen::<u32>()),
                key: sku.clone(),
                version,
                occurred_at: 1_764_547_200_000 + version,
                body: change,
            };
            let payload = encoder.encode(&event).expect("encode");
            at += rng.gen_range(0.0..0.01);
            records.push((
                at,
                PlannedRecord {
                    key: sku.clone(),
                    payload: payload.clone(),
                },
            ));
            oracle.applied += 1;
            if rng.gen_bool(1.0 / 6.0) {
                records.push((
                    at + rng.gen_range(0.0..0.2),
                    PlannedRecord {
                        key: sku.clone(),
                        payload,
                    },
                ));
                oracle.duplicates += 1;
            }
        }
        oracle.levels.insert(sku, (events, level));
    }
    for i in 0..5 {
        records.push((
            rng.gen_range(0.0..1.0),
            PlannedRecord {
                key: format!("sku-poison-{i}"),
                payload: vec![0, 0, 0, 0, 99, 1, 2, 3],
            },
        ));
        oracle.dead_lettered += 1;
    }
    // A stable sort keeps each SKU's events in version order (their times
    // increase); a redelivered copy lands after its original.
    records.sort_by(|a, b| a.0.total_cmp(&b.0));
    (records.into_iter().map(|(_, r)| r).collect(), oracle)
}

async fn process_until_caught_up(
    config: orderly::config::Config,
    store: Store,
    registry: Registry,
    ends: BTreeMap<i32, i64>,
) {
    let watcher = store.clone();
    let caught_up = async move {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        while !covers(&watcher, &ends) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "processor did not catch up"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    Processor::for_entity(Stock, config, store, registry)
        .run(caught_up)
        .await
        .expect("processor run");
}

fn assert_levels(store: &Store, oracle: &Oracle) {
    let stats = store.stats().expect("stats");
    let total = |f: fn(&orderly::store::Checkpoint) -> u64| {
        stats.iter().map(|s| f(&s.checkpoint)).sum::<u64>()
    };
    assert_eq!(total(|c| c.applied), oracle.applied, "applied");
    assert_eq!(total(|c| c.duplicates), oracle.duplicates, "duplicates");
    assert_eq!(total(|c| c.stale), 0, "stale");
    assert_eq!(
        total(|c| c.dead_lettered),
        oracle.dead_lettered,
        "dead letters"
    );
    let mut wrong = Vec::new();
    let mut seen = 0;
    store
        .for_each::<Stock>(|state| {
            seen += 1;
            let want = oracle.levels.get(&state.key).copied();
            if want != Some((state.version, state.data)) {
                wrong.push((state.key.clone(), state.version, state.data, want));
            }
        })
        .expect("scan");
    assert!(
        wrong.is_empty(),
        "{} SKUs off, first: {:?}",
        wrong.len(),
        wrong.first()
    );
    assert_eq!(seen, oracle.levels.len(), "every SKU has a level");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_levels_are_exact_through_redeliveries_and_a_restore() {
    let c = mock::cluster(PARTITIONS, true);
    let registry = Registry::memory();
    let encoder = StockEncoder::register(&registry, &c.topic)
        .await
        .expect("register");
    let (records, oracle) = plan(&encoder, 300, 5);
    let (first, second) = records.split_at(records.len() / 2);
    let producer = producer(&c.bootstrap);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(&c, &dir.path().join("a"));
    let store = Store::open(&config.store.path, 16).expect("store a");
    let ends = produce_planned(&producer, &c.topic, first)
        .await
        .expect("produce first half");
    process_until_caught_up(config.clone(), store.clone(), registry.clone(), ends).await;
    // A restart on the same store in between: nothing applied twice.
    let ends = produce_planned(&producer, &c.topic, second)
        .await
        .expect("produce second half");
    process_until_caught_up(
        config.clone(),
        store.clone(),
        registry.clone(),
        ends.clone(),
    )
    .await;
    assert_levels(&store, &oracle);

    // A fresh store in the same group: restored from the changelog, exactly.
    let mut fresh = config.clone();
    fresh.store.path = dir.path().join("b");
    let restored = Store::open(&fresh.store.path, 16).expect("store b");
    process_until_caught_up(fresh, restored.clone(), registry, ends).await;
    assert_levels(&restored, &oracle);

    // The outbox published availability changes under the stock schema: the
    // last one per SKU names the SKU's availability now.
    let output = format!("{}-status", c.topic);
    let decoder_schema =
        apache_avro::Schema::parse_str(orderly::domains::stock::STATUS_SCHEMA).expect("schema");
    let mut last: HashMap<String, (i64, String)> = HashMap::new();
    let watermarks: rdkafka::consumer::BaseConsumer =
        support::client(&c.bootstrap).create().expect("consumer");
    let mut published = Vec::new();
    for partition in 0..PARTITIONS {
        let (low, high) = watermarks
            .fetch_watermarks(&output, partition, Duration::from_secs(10))
            .expect("watermarks");
        published.extend(support::read_range(
            &c.bootstrap,
            &output,
            partition,
            low,
            high,
        ));
    }
    for message in published {
        let payload = message.payload.expect("payload");
        #[allow(deprecated)]
        let value = apache_avro::from_avro_datum(&decoder_schema, &mut &payload[5..], None)
            .expect("an availability change");
        let apache_avro::types::Value::Record(fields) = value else {
            panic!("a record")
        };
        let field = |name: &str| {
            fields
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        let (
            Some(apache_avro::types::Value::String(sku)),
            Some(apache_avro::types::Value::Long(version)),
            Some(apache_avro::types::Value::Enum(_, to)),
        ) = (field("sku"), field("version"), field("to_status"))
        else {
            panic!("fields of {fields:?}")
        };
        let entry = last.entry(sku).or_insert((0, String::new()));
        if version >= entry.0 {
            *entry = (version, to);
        }
    }
    assert!(!last.is_empty(), "availability changes were published");
    for (sku, (_, level)) in &oracle.levels {
        let want = match Stock::status_of(level) {
            Availability::InStock => "IN_STOCK",
            Availability::OutOfStock => "OUT_OF_STOCK",
        };
        assert_eq!(last.get(sku).map(|(_, s)| s.as_str()), Some(want), "{sku}");
    }
    drop(c.mock);
}
