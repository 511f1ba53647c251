//! The processor in-process on the mock cluster: exact outcomes for a
//! workload with duplicates, reorderings and poison; a store restored from
//! the changelog; v1 and v2 records of one order.

use std::time::Duration;

use orderly::testkit::headers::{
    HEADER_ERROR_KIND, HEADER_ERROR_MESSAGE, HEADER_OFFSET, HEADER_PARTITION, HEADER_TOPIC,
};
use orderly::testkit::orders::workload::{plan, PlannedRecord, WorkloadSpec};
use orderly::testkit::orders::{Encoder, EventType, OrderEvent, WriterVersion};
use orderly::testkit::produce_planned;
use orderly::Registry;
use orderly::Store;

use crate::support::mock::{config, producer};
use crate::support::{committed, read_all};
use crate::{assert_store_matches, cluster, process_until_caught_up, PARTITIONS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_reorderings_and_poison_end_exactly_as_expected() {
    let c = cluster();
    let registry = Registry::memory();
    let encoder = Encoder::register(&registry, &c.topic)
        .await
        .expect("register");
    let spec = WorkloadSpec {
        orders: 800,
        poison_rate: 0.01,
        seed: 7,
        ..Default::default()
    };
    let (records, expected) = plan(&spec, &encoder).expect("plan");
    assert!(
        expected.outcomes.duplicates > 0
            && expected.outcomes.stale > 0
            && expected.outcomes.dead_lettered > 0,
        "{expected:?}"
    );
    let ends = produce_planned(&producer(&c.bootstrap), &c.topic, &records)
        .await
        .expect("produce");

    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(&c, &dir.path().join("store"));
    let group = config.kafka.group_id.clone();
    let store = Store::open(&config.store.path, 16).expect("store");
    let registry_for_check = registry.clone();
    process_until_caught_up(config, store.clone(), registry, ends.clone()).await;

    assert_store_matches(&store, &expected);
    // Offsets were committed after the flush, up to the end of each partition.
    let (bootstrap, topic) = (c.bootstrap.clone(), c.topic.clone());
    let committed =
        tokio::task::spawn_blocking(move || committed(&bootstrap, &group, &topic, PARTITIONS))
            .await
            .unwrap();
    assert_eq!(committed, ends, "committed offsets equal end offsets");

    // Every poison record is in the dead-letter topic once, with headers that
    // point back at it.
    let (bootstrap, dlq) = (c.bootstrap.clone(), c.dlq.clone());
    let letters = tokio::task::spawn_blocking(move || read_all(&bootstrap, &dlq))
        .await
        .unwrap();
    assert_eq!(letters.len() as u64, expected.outcomes.dead_lettered);
    let decoder = orderly::testkit::Decoder::new(registry_for_check);
    let mut poison: Vec<&[u8]> = Vec::new();
    for record in &records {
        if decoder.decode(Some(&record.payload)).await.is_err() {
            poison.push(&record.payload);
        }
    }
    assert_eq!(poison.len() as u64, expected.outcomes.dead_lettered);
    let kinds = [
        "empty_payload",
        "bad_magic_byte",
        "unknown_schema",
        "bad_schema",
        "undecodable",
        "invalid",
    ];
    for letter in &letters {
        assert_eq!(letter.headers[HEADER_TOPIC], c.topic);
        let partition: i32 = letter.headers[HEADER_PARTITION]
            .parse()
            .expect("partition header");
        let offset: i64 = letter.headers[HEADER_OFFSET]
            .parse()
            .expect("offset header");
        assert!((0..PARTITIONS).contains(&partition));
        assert!(offset >= 0 && offset < ends[&partition]);
        assert!(
            kinds.contains(&letter.headers[HEADER_ERROR_KIND].as_str()),
            "{:?}",
            letter.headers
        );
        assert!(!letter.headers[HEADER_ERROR_MESSAGE].is_empty());
        assert!(
            poison.iter().any(|p| Some(*p) == letter.payload.as_deref()),
            "letter payload is a produced poison record"
        );
    }
    drop(c.mock);
}

/// A store that is lost (or a partition that moves) is rebuilt from the
/// changelog; a torn write-out in the changelog (state records whose
/// checkpoint record never came, here with a state no event produced) is
/// not applied, also when later checkpoints follow it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_store_is_restored_from_the_changelog_without_its_torn_tail() {
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::FutureRecord;

    let c = cluster();
    let registry = Registry::memory();
    let encoder = Encoder::register(&registry, &c.topic)
        .await
        .expect("register");
    let spec = WorkloadSpec {
        orders: 400,
        poison_rate: 0.01,
        seed: 11,
        ..Default::default()
    };
    let (records, expected) = plan(&spec, &encoder).expect("plan");
    let (first, second) = records.split_at(records.len() / 2);
    let producer = producer(&c.bootstrap);
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(&c, &dir.path().join("a"));
    let store = Store::open(&config.store.path, 16).expect("store a");
    let ends = produce_planned(&producer, &c.topic, first)
        .await
        .expect("produce first half");
    process_until_caught_up(config.clone(), store.clone(), registry.clone(), ends).await;

    // A torn write-out on every changelog partition: a forged state for an
    // order of that partition, tagged far beyond any checkpoint.
    let mut forged = Vec::new();
    for stats in store.stats().expect("stats") {
        let tree = store.partition(&c.topic, stats.partition).expect("tree");
        let mut victim = None;
        store
            .for_each::<orderly::Orders>(|state| {
                if victim.is_none()
                    && tree
                        .get::<orderly::Orders>(&state.key)
                        .ok()
                        .flatten()
                        .is_some()
                {
                    victim = Some(state);
                }
            })
            .expect("scan");
        let mut state = victim.expect("an order in the partition");
        state.version = 999;
        state.data.status = EventType::Cancelled;
        let value = orderly::testkit::encode_state(&state).expect("encode");
        let covers = (stats.checkpoint.next_offset + 1_000_000).to_string();
        let headers = OwnedHeaders::new().insert(Header {
            key: orderly::testkit::headers::HEADER_COVERS,
            value: Some(covers.as_str()),
        });
        let record = FutureRecord::to(&c.changelog)
            .partition(stats.partition)
            .key(state.key.as_str())
            .payload(&value)
            .headers(headers);
        producer
            .send(record, Duration::from_secs(10))
            .await
            .expect("torn record");
        forged.push(state.key.clone());
    }
    // The same store goes on past the torn tail (nothing to restore: no
    // checkpoint record follows its position), writing later checkpoints.
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
    assert_store_matches(&store, &expected);

    // A fresh store in the same group and changelog: restored, exactly.
    let mut fresh = config.clone();
    fresh.store.path = dir.path().join("b");
    let restored = Store::open(&fresh.store.path, 16).expect("store b");
    process_until_caught_up(fresh, restored.clone(), registry, ends).await;
    assert_store_matches(&restored, &expected);
    for order_id in &forged {
        let state = restored
            .find::<orderly::Orders>(order_id)
            .expect("get")
            .expect("restored order");
        assert_ne!(
            state.version, 999,
            "the torn record of {order_id} was applied"
        );
    }
    for stats in restored.stats().expect("stats") {
        assert!(
            stats.checkpoint.changelog_next.is_some(),
            "partition {} records its changelog position",
            stats.partition
        );
    }
    drop(c.mock);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_and_v2_records_of_one_order_both_apply() {
    let c = cluster();
    let registry = Registry::memory();
    let encoder = Encoder::register(&registry, &c.topic)
        .await
        .expect("register");
    let event = |version: i64, event_type, currency: &str| OrderEvent {
        event_id: format!("evt-{version}"),
        order_id: "order-mixed".into(),
        version,
        event_type,
        amount: 4_200,
        currency: currency.into(),
        occurred_at: 1_764_547_200_000 + version,
    };
    let records = vec![
        PlannedRecord {
            key: "order-mixed".into(),
            payload: encoder
                .encode(&event(1, EventType::Created, "USD"), WriterVersion::V1)
                .unwrap(),
        },
        PlannedRecord {
            key: "order-mixed".into(),
            payload: encoder
                .encode(&event(2, EventType::Paid, "USD"), WriterVersion::V2)
                .unwrap(),
        },
    ];
    let ends = produce_planned(&producer(&c.bootstrap), &c.topic, &records)
        .await
        .expect("produce");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(&c, &dir.path().join("store"));
    let store = Store::open(&config.store.path, 16).expect("store");
    process_until_caught_up(config, store.clone(), registry, ends).await;

    let state = store
        .find::<orderly::Orders>("order-mixed")
        .unwrap()
        .expect("state");
    assert_eq!(state.version, 2);
    assert_eq!(state.data.status, EventType::Paid);
    assert_eq!(state.data.currency, "USD", "the v2 record's currency");
    let stats = store.stats().unwrap();
    assert_eq!(
        stats.iter().map(|s| s.checkpoint.applied).sum::<u64>(),
        2,
        "both records decoded and applied"
    );
    assert_eq!(
        stats
            .iter()
            .map(|s| s.checkpoint.dead_lettered)
            .sum::<u64>(),
        0
    );
}
