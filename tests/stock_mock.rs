//! The second domain through the whole engine on librdkafka's mock cluster:
//! stock levels (an accumulating state, where a reservation applied twice or
//! lost is a wrong level) with redeliveries and poison records, then a
//! fresh store restored from the changelog, both checked against levels
//! computed independently from the planned events.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use orderly::demo::covers;
use orderly::domains::stock::{Availability, Stock, StockEncoder};
use orderly::domains::stock_workload::{plan, StockExpectation, StockSpec};
use orderly::load::produce_planned;
use orderly::processor::Processor;
use orderly::registry::Registry;
use orderly::store::Store;
use rdkafka::consumer::Consumer;
use support::mock::{self, config, producer};

const PARTITIONS: i32 = 4;

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

fn assert_levels(store: &Store, oracle: &StockExpectation) {
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
    let spec = StockSpec {
        skus: 300,
        seed: 5,
        duplicate_rate: 1.0 / 6.0,
        poison_rate: 0.001,
        sku_prefix: "sku".into(),
    };
    let (records, oracle) = plan(&spec, &encoder).expect("plan");
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
