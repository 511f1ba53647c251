//! The second domain through the whole engine on librdkafka's mock cluster:
//! stock levels (an accumulating state, where a reservation applied twice or
//! lost is a wrong level) with redeliveries and poison records, then a
//! fresh store restored from the changelog, both checked against levels
//! computed independently from the planned events.

mod support;

use orderly::testkit::produce_planned;
use orderly::testkit::stock::workload::{plan, StockExpectation, StockSpec};
use orderly::testkit::stock::{Availability, StockEncoder};
use orderly::{Registry, Stock, Store};
use support::mock::{
    self, assert_counters, config, last_status_changes, process_until_caught_up, producer,
};

const PARTITIONS: i32 = 4;

fn assert_levels(store: &Store, oracle: &StockExpectation) {
    assert_counters(
        store,
        oracle.outcomes.applied,
        oracle.outcomes.duplicates,
        0,
        oracle.outcomes.dead_lettered,
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
        reorder_rate: 0.0,
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
    process_until_caught_up(Stock, config.clone(), store.clone(), registry.clone(), ends).await;
    // A restart on the same store in between: nothing applied twice.
    let ends = produce_planned(&producer, &c.topic, second)
        .await
        .expect("produce second half");
    process_until_caught_up(
        Stock,
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
    process_until_caught_up(Stock, fresh, restored.clone(), registry, ends).await;
    assert_levels(&restored, &oracle);

    // The outbox published availability changes under the stock schema: the
    // last one per SKU names the SKU's availability now.
    let output = format!("{}-status", c.topic);
    let schema =
        apache_avro::Schema::parse_str(orderly::testkit::stock::STATUS_SCHEMA).expect("schema");
    let last = last_status_changes(&c.bootstrap, &output, PARTITIONS, &schema, "sku");
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
