//! The no-code entity (`entity.kind = "latest"`) through the whole engine
//! on librdkafka's mock cluster, on a schema that is neither orders nor
//! stock: shipment events (an `int` version, a nullable enum status, a
//! nested record, two writer schema versions), with redeliveries, stale
//! out-of-order events and poison records; then a fresh store restored from
//! the changelog; each checked against what the planned stream implies
//! (the schemas and the plan: `tests/support/shipments.rs`, shared with
//! the end-to-end suite's drill on Apache Kafka).

mod support;

use std::collections::BTreeMap;

use apache_avro::Schema;
use orderly::testkit::latest::LatestEvent;
use orderly::testkit::produce_planned;
use orderly::{Entity, Latest, Registry, State, Store};
use serde_json::json;
use support::mock::{
    self, assert_counters, config, last_status_changes, process_until_caught_up, producer,
};
use support::shipments::{entity_config, plan, Oracle, Schemas};

const PARTITIONS: i32 = 4;

/// The engine's fields and the data of every state, by key.
type Snapshot = BTreeMap<String, (i64, String, i64, LatestEvent)>;

/// The entity of [`entity_config`].
fn latest() -> Latest {
    Latest::from_config(&entity_config()).expect("a latest entity")
}

fn assert_newest(store: &Store, oracle: &Oracle) -> Snapshot {
    let entity = latest();
    assert_counters(
        store,
        oracle.applied,
        oracle.duplicates,
        oracle.stale,
        oracle.dead_lettered,
    );
    let mut snapshot = Snapshot::new();
    let mut wrong = Vec::new();
    store
        .for_each::<Latest>(|state: State<Latest>| {
            let view = entity.view(&state);
            let got = (
                state.version,
                state.event_id.clone(),
                state.occurred_at,
                view["event"].clone(),
                state.data.status.clone().unwrap_or_default(),
            );
            let want = oracle.newest.get(&state.key);
            let fields_right =
                want.is_some_and(|w| (w.0, &w.1, w.2, &w.3) == (got.0, &got.1, got.2, &got.3));
            // The state's own status is its newest event's (maybe none).
            let status_right = want.is_some_and(|w| {
                let newest = w.3["status"].as_str().unwrap_or_default();
                got.4 == newest && (newest.is_empty() || newest == w.4)
            });
            let view_right = view["shipment_id"] == json!(state.key)
                && view["version"] == json!(state.version)
                && view["event_id"] == json!(state.event_id);
            if !(fields_right && status_right && view_right) {
                wrong.push((state.key.clone(), got, want.cloned()));
            }
            snapshot.insert(
                state.key.clone(),
                (
                    state.version,
                    state.event_id.clone(),
                    state.occurred_at,
                    state.data.clone(),
                ),
            );
        })
        .expect("scan");
    assert!(
        wrong.is_empty(),
        "{} shipments off, first: {:?}",
        wrong.len(),
        wrong.first()
    );
    assert_eq!(
        snapshot.len(),
        oracle.newest.len(),
        "every shipment has a state"
    );
    snapshot
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_avro_topic_keeps_its_newest_event_per_key_through_redeliveries_and_a_restore() {
    let c = mock::cluster(PARTITIONS, true);
    let registry = Registry::memory();
    let schemas = Schemas::register(&registry, &c.topic).await;
    let (records, oracle) = plan(&schemas, 300, 29);
    assert!(
        oracle.stale > 20 && oracle.duplicates > 100,
        "the plan covers every outcome"
    );
    let (first, second) = records.split_at(records.len() / 2);
    let producer = producer(&c.bootstrap);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = config(&c, &dir.path().join("a"));
    config.entity = entity_config();
    let store = Store::open(&config.store.path, 16).expect("store a");
    let ends = produce_planned(&producer, &c.topic, first)
        .await
        .expect("produce first half");
    process_until_caught_up(
        latest(),
        config.clone(),
        store.clone(),
        registry.clone(),
        ends,
    )
    .await;
    // A restart on the same store in between: nothing applied twice.
    let ends = produce_planned(&producer, &c.topic, second)
        .await
        .expect("produce second half");
    process_until_caught_up(
        latest(),
        config.clone(),
        store.clone(),
        registry.clone(),
        ends.clone(),
    )
    .await;
    let before = assert_newest(&store, &oracle);

    // A fresh store in the same group: restored from the changelog, the
    // same states.
    let mut fresh = config.clone();
    fresh.store.path = dir.path().join("b");
    let restored = Store::open(&fresh.store.path, 16).expect("store b");
    process_until_caught_up(latest(), fresh, restored.clone(), registry, ends).await;
    let after = assert_newest(&restored, &oracle);
    assert!(before == after, "the restored store holds the same states");

    // The outbox published status changes under the latest schema: the
    // last one per shipment names its last status.
    let output = format!("{}-status", c.topic);
    let status_schema = Schema::parse_str(orderly::testkit::latest::STATUS_SCHEMA).expect("schema");
    let last = last_status_changes(&c.bootstrap, &output, PARTITIONS, &status_schema, "key");
    assert!(!last.is_empty(), "status changes were published");
    for (key, (.., last_status)) in &oracle.newest {
        assert_eq!(
            last.get(key).map(|(_, s)| s.as_str()),
            Some(last_status.as_str()),
            "{key}"
        );
    }
    assert_eq!(last.len(), oracle.newest.len(), "no status for poison keys");
    drop(c.mock);
}
