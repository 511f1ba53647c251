//! Issue 12 hardening, on librdkafka's in-process mock cluster and the
//! registry test double: invalid ids are dead-lettered, a registry that does
//! not answer like one never turns records into poison, and a dead-letter
//! topic that cannot take records stops the processor instead of stalling
//! or skipping.

mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

use orderly::testkit::headers::{HEADER_ERROR_KIND, HEADER_ERROR_MESSAGE, HEADER_OFFSET};
use orderly::testkit::orders::workload::PlannedRecord;
use orderly::testkit::orders::{Encoder, EventType, OrderEvent, WriterVersion};
use orderly::testkit::{
    covers, produce_planned, DeadLetter, DeadLetters, Failure, Kind, RegistryError, Stage,
};
use orderly::{Processor, Registry, Store};
use support::mock::{self, config, producer, Cluster};
use support::registry_double::{ByIdMode, RegistryDouble};
use support::{committed, read_all};

/// A one-partition input topic and, when `with_dlq`, its dead-letter topic.
fn cluster(with_dlq: bool) -> Cluster {
    mock::cluster(1, with_dlq)
}

fn event(event_id: &str, order_id: &str, version: i64, event_type: EventType) -> OrderEvent {
    OrderEvent {
        event_id: event_id.into(),
        order_id: order_id.into(),
        version,
        event_type,
        amount: 1_000,
        currency: "EUR".into(),
        occurred_at: 1_764_547_200_000 + version,
    }
}

fn record(encoder: &Encoder, event: &OrderEvent) -> PlannedRecord {
    PlannedRecord {
        key: event.order_id.clone(),
        payload: encoder.encode(event, WriterVersion::V2).expect("encode"),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn wait_async(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    check()
}

async fn committed_async(c: &Cluster, group: &str) -> BTreeMap<i32, i64> {
    let (bootstrap, group, topic) = (c.bootstrap.clone(), group.to_string(), c.topic.clone());
    tokio::task::spawn_blocking(move || committed(&bootstrap, &group, &topic, 1))
        .await
        .expect("committed")
}

/// The number of records in partition 0 of `topic` (its high watermark).
async fn end_offset(bootstrap: &str, topic: &str) -> i64 {
    let (bootstrap, topic) = (bootstrap.to_string(), topic.to_string());
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .create()
            .expect("consumer");
        consumer
            .fetch_watermarks(&topic, 0, Duration::from_secs(10))
            .expect("watermarks")
            .1
    })
    .await
    .expect("watermarks task")
}

/// `orderly_errors_total{stage, kind}` as the telemetry holds it.
fn errors(telemetry: &orderly::testkit::Telemetry, stage: Stage, kind: Kind) -> u64 {
    telemetry
        .errors
        .snapshot()
        .into_iter()
        .find(|(s, k, _)| *s == stage && *k == kind)
        .map_or(0, |(_, _, n)| n)
}

/// The checkpoint's `(next_offset, dead_lettered)` of partition 0, if any.
fn checkpoint(store: &Store) -> Option<(i64, u64)> {
    let checkpoints = store.checkpoints().expect("checkpoints");
    checkpoints
        .iter()
        .find(|(_, p, _)| *p == 0)
        .map(|(_, _, c)| (c.next_offset, c.dead_lettered))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_event_id_is_dead_lettered_and_never_a_duplicate() {
    let c = cluster(true);
    let registry = Registry::memory();
    let encoder = Encoder::register(&registry, &c.topic)
        .await
        .expect("register");
    let records = vec![
        record(&encoder, &event("", "order-e", 1, EventType::Created)),
        record(&encoder, &event("e-1", "order-e", 1, EventType::Created)),
        // Had the first record's empty id entered the inbox, this one would
        // be dropped as a duplicate of it.
        record(&encoder, &event("", "order-e", 2, EventType::Paid)),
    ];
    let ends = produce_planned(&producer(&c.bootstrap), &c.topic, &records)
        .await
        .expect("produce");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(&c, &dir.path().join("store"));
    let store = Store::open(&config.store.path, 16).expect("store");
    let watcher = store.clone();
    let caught_up = async move {
        assert!(
            wait_async(Duration::from_secs(60), || covers(&watcher, &ends)).await,
            "processor did not catch up"
        );
    };
    Processor::for_entity(orderly::Orders, config, store.clone(), registry)
        .run(caught_up)
        .await
        .expect("processor run");

    let stats = store.stats().expect("stats");
    let total = |f: fn(&orderly::testkit::Checkpoint) -> u64| {
        stats.iter().map(|s| f(&s.checkpoint)).sum::<u64>()
    };
    assert_eq!(
        total(|c| c.dead_lettered),
        2,
        "both empty ids dead-lettered: {stats:?}"
    );
    assert_eq!(total(|c| c.applied), 1, "{stats:?}");
    assert_eq!(
        total(|c| c.duplicates),
        0,
        "an empty id is never a duplicate: {stats:?}"
    );
    let state = store
        .find::<orderly::Orders>("order-e")
        .expect("get")
        .expect("order-e has a state");
    assert_eq!((state.version, state.data.status), (1, EventType::Created));

    let (bootstrap, dlq) = (c.bootstrap.clone(), c.dlq.clone());
    let letters = tokio::task::spawn_blocking(move || read_all(&bootstrap, &dlq))
        .await
        .expect("read dlq");
    let offsets: Vec<&str> = letters
        .iter()
        .map(|l| l.headers[HEADER_OFFSET].as_str())
        .collect();
    assert_eq!(offsets, ["0", "2"]);
    for letter in &letters {
        assert_eq!(letter.headers[HEADER_ERROR_KIND], "invalid");
        assert!(
            letter.headers[HEADER_ERROR_MESSAGE].contains("event_id"),
            "{:?}",
            letter.headers
        );
    }
    drop(c.mock);
}

/// Classification on the registry's own error code: 40403 only is an
/// unknown id; a 404 with another code, an HTML 404 or a wrong base path is
/// not, and the start-up probe rejects such an endpoint.
#[test]
fn registry_answers_are_classified_on_the_error_code() {
    // The double runs its own runtime, so it is started outside the test's.
    let double = RegistryDouble::start();
    runtime().block_on(registry_answers(&double));
}

async fn registry_answers(double: &RegistryDouble) {
    let registry = Registry::http(&double.url, Duration::from_secs(5)).expect("client");
    let id = registry
        .register("orders-value", orderly::testkit::orders::SCHEMA_V2)
        .await
        .expect("register");
    assert!(registry.schema_by_id(id).await.is_ok());
    assert!(
        matches!(
            registry.schema_by_id(id + 100).await,
            Err(RegistryError::UnknownId { .. })
        ),
        "40403 is an unknown id"
    );
    registry.probe().await.expect("a registry passes the probe");

    for mode in [ByIdMode::NotFoundWithCode(40401), ByIdMode::HtmlNotFound] {
        double.set_by_id_mode(mode);
        for look_up in [id, id + 100] {
            match registry.schema_by_id(look_up).await {
                Err(RegistryError::Unexpected { url, message, .. }) => {
                    assert_eq!(url, double.url);
                    assert!(message.contains("404"), "{message}");
                }
                other => {
                    panic!("{mode:?}, id {look_up}: expected an unexpected answer, got {other:?}")
                }
            }
        }
        match registry.probe().await {
            Err(e @ RegistryError::NotARegistry { .. }) => {
                assert!(e.to_string().contains(&double.url), "{e}")
            }
            other => panic!("{mode:?}: the probe fails, got {other:?}"),
        }
    }
    double.set_by_id_mode(ByIdMode::Normal);

    // A wrong base path: the server answers 404 with no registry body.
    let wrong = Registry::http(
        &format!("{}/not-the-registry", double.url),
        Duration::from_secs(5),
    )
    .expect("client");
    assert!(matches!(
        wrong.schema_by_id(id).await,
        Err(RegistryError::Unexpected { .. })
    ));
    assert!(matches!(
        wrong.probe().await,
        Err(RegistryError::NotARegistry { .. })
    ));
    // Nothing listening: unavailable, not poison.
    let down = Registry::http("http://127.0.0.1:1", Duration::from_secs(2)).expect("client");
    assert!(matches!(
        down.schema_by_id(id).await,
        Err(RegistryError::Unavailable(_))
    ));
}

/// A registry endpoint answering 404 without Confluent's 40403 (an HTML page,
/// then another error code) makes the processor retry: nothing is
/// dead-lettered and the checkpoint and the committed offset stay before the
/// records until the registry answers properly again.
#[test]
fn registry_404_without_schema_code_is_retried_not_dead_lettered() {
    let double = RegistryDouble::start();
    runtime().block_on(registry_404_retried(&double));
}

async fn registry_404_retried(double: &RegistryDouble) {
    let c = cluster(true);
    let registry = Registry::http(&double.url, Duration::from_secs(5)).expect("client");
    let encoder = Encoder::register(&registry, &c.topic)
        .await
        .expect("register");
    double.set_by_id_mode(ByIdMode::HtmlNotFound);
    let records: Vec<PlannedRecord> = (1..=3)
        .map(|v| {
            record(
                &encoder,
                &event(&format!("r-{v}"), "order-r", v, EventType::Created),
            )
        })
        .collect();
    let ends = produce_planned(&producer(&c.bootstrap), &c.topic, &records)
        .await
        .expect("produce");
    assert_eq!(ends, BTreeMap::from([(0, 3)]));

    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(&c, &dir.path().join("store"));
    let group = config.kafka.group_id.clone();
    let store = Store::open(&config.store.path, 16).expect("store");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        let _ = stop_rx.await;
    };
    let processor = Processor::for_entity(orderly::Orders, config, store.clone(), registry);
    let telemetry = processor.telemetry();
    let driver = async {
        let mut observed = Vec::new();
        for (mode, more) in [
            (ByIdMode::HtmlNotFound, 3),
            (ByIdMode::NotFoundWithCode(40401), 2),
        ] {
            double.set_by_id_mode(mode);
            let target = double.requests("by_id") + more;
            let retried = wait_async(Duration::from_secs(60), || {
                double.requests("by_id") >= target
            })
            .await;
            observed.push((
                mode,
                retried,
                checkpoint(&store),
                end_offset(&c.bootstrap, &c.dlq).await,
                committed_async(&c, &group).await,
            ));
        }
        double.set_by_id_mode(ByIdMode::Normal);
        let caught_up = wait_async(Duration::from_secs(60), || covers(&store, &ends)).await;
        let _ = stop_tx.send(());
        (observed, caught_up)
    };
    let (result, (observed, caught_up)) = tokio::join!(processor.run(shutdown), driver);
    result.expect("processor run");

    for (mode, retried, checkpoint, dlq_records, committed) in observed {
        assert!(retried, "{mode:?}: the look-up is retried");
        assert!(
            checkpoint.is_none_or(|(next, dead)| next == 0 && dead == 0),
            "{mode:?}: checkpoint {checkpoint:?}"
        );
        assert_eq!(dlq_records, 0, "{mode:?}: nothing dead-lettered");
        assert_eq!(
            committed,
            BTreeMap::from([(0, -1)]),
            "{mode:?}: nothing committed"
        );
    }
    assert!(
        caught_up,
        "the records are processed once the registry answers"
    );
    let retried = errors(&telemetry, Stage::Decode, Kind::Retryable);
    assert!(retried >= 1, "each wait on the registry is counted: orderly_errors_total{{stage=decode,kind=retryable}} = {retried}");
    assert_eq!(errors(&telemetry, Stage::Decode, Kind::Permanent), 0);
    assert_eq!(checkpoint(&store), Some((3, 0)));
    let stats = store.stats().expect("stats");
    assert_eq!(stats.iter().map(|s| s.checkpoint.applied).sum::<u64>(), 3);
    assert_eq!(
        end_offset(&c.bootstrap, &c.dlq).await,
        0,
        "nothing dead-lettered"
    );
    assert_eq!(committed_async(&c, &group).await, ends);
    drop(c.mock);
}

/// Client settings under which a missing topic is reported instead of
/// created: brokers in production usually do not auto-create topics, and the
/// mock cluster does unless the client asks it not to. A short propagation
/// wait keeps the test quick (librdkafka's default is 30 s).
const NO_AUTO_CREATE: [(&str, &str); 2] = [
    ("allow.auto.create.topics", "false"),
    ("topic.metadata.propagation.max.ms", "1000"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_dlq_topic_is_a_permanent_error_naming_the_topic() {
    let c = cluster(false);
    let mut client = ClientConfig::new();
    client
        .set("bootstrap.servers", &c.bootstrap)
        .set("enable.idempotence", "true");
    for (key, value) in NO_AUTO_CREATE {
        client.set(key, value);
    }
    let letters = DeadLetters::new(
        client.create().expect("producer"),
        c.dlq.clone(),
        c.topic.clone(),
    );
    let error = tokio::task::block_in_place(|| letters.check_topic(Duration::from_secs(10)))
        .expect_err("the topic is missing");
    assert!(error.to_string().contains(&c.dlq), "{error}");

    let letter = DeadLetter {
        key: Some(b"k"),
        payload: Some(b"not avro"),
        partition: 0,
        offset: 7,
        kind: orderly::PoisonKind::BadMagicByte,
        message: "magic byte is 110".into(),
        redrive_count: None,
    };
    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        letters.try_send_all(std::slice::from_ref(&letter)),
    )
    .await;
    let error = result
        .expect("fails within the bound")
        .expect_err("a missing topic is permanent");
    let text = error.to_string();
    assert!(
        text.contains(&c.dlq) && text.contains("offset 7") && text.contains("create topic"),
        "{text}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));

    // Once the topic exists the same letter goes through.
    c.mock.create_topic(&c.dlq, 1, 1).expect("dlq topic");
    tokio::task::block_in_place(|| letters.check_topic(Duration::from_secs(10)))
        .expect("the topic exists now");
    tokio::time::timeout(
        Duration::from_secs(30),
        letters.try_send_all(std::slice::from_ref(&letter)),
    )
    .await
    .expect("within the bound")
    .expect("delivered");
    assert_eq!(end_offset(&c.bootstrap, &c.dlq).await, 1);
}

/// A missing dead-letter topic stops the processor at start-up, before it
/// joins the group, with an error naming the topic and how to create it;
/// nothing is processed or committed. (A topic that disappears later is a
/// permanent produce error: `missing_dlq_topic_is_a_permanent_error_naming_the_topic`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_dlq_topic_stops_the_processor_at_start_up() {
    let c = cluster(false);
    let registry = Registry::memory();
    let encoder = Encoder::register(&registry, &c.topic)
        .await
        .expect("register");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = config(&c, &dir.path().join("store"));
    for (key, value) in NO_AUTO_CREATE {
        config
            .kafka
            .librdkafka
            .insert(key.into(), toml::Value::String(value.into()));
    }
    let group = config.kafka.group_id.clone();
    let store = Store::open(&config.store.path, 16).expect("store");
    let producer = producer(&c.bootstrap);
    let first = record(&encoder, &event("d-1", "order-d", 1, EventType::Created));
    produce_planned(&producer, &c.topic, &[first])
        .await
        .expect("produce");

    let processor = Processor::for_entity(orderly::Orders, config, store.clone(), registry);
    let telemetry = processor.telemetry();
    // Stops the run only if the processor never stops on its own.
    let shutdown = tokio::time::sleep(Duration::from_secs(90));
    let started = Instant::now();
    let result = processor.run(shutdown).await;
    let error = result.expect_err("the processor refuses to start without its dead-letter topic");
    let text = error.to_string();
    assert!(text.contains(&c.dlq) && text.contains("create"), "{text}");
    assert_eq!(
        (error.stage(), error.kind()),
        (Stage::Start, Kind::Permanent),
        "{error:?}"
    );
    assert_eq!(
        errors(&telemetry, Stage::Start, Kind::Permanent),
        1,
        "counted once"
    );
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "stopped after {:?}",
        started.elapsed()
    );
    assert_eq!(checkpoint(&store), None, "nothing processed");
    assert_eq!(
        committed_async(&c, &group)
            .await
            .get(&0)
            .copied()
            .unwrap_or(-1),
        -1,
        "nothing committed"
    );
    drop(c.mock);
}

/// The dead-letter breaker (issue 21): a partition that dead-letters too
/// many records in a row stops before the record that trips it, instead of
/// dead-lettering everything: the letters before the tripping batch are in
/// the DLQ, nothing after them is, the checkpoint stops at that batch,
/// readiness names the partition and the setting, and shutdown still
/// releases the partition cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_breaker_stops_a_partition_that_dead_letters_everything() {
    const GOOD: usize = 20;
    const LIMIT: u64 = 50;
    let c = cluster(true);
    let registry = Registry::memory();
    let encoder = Encoder::register(&registry, &c.topic)
        .await
        .expect("register");
    let mut records: Vec<PlannedRecord> = (0..GOOD)
        .map(|i| {
            record(
                &encoder,
                &event(
                    &format!("e-{i}"),
                    &format!("order-{i}"),
                    1,
                    EventType::Created,
                ),
            )
        })
        .collect();
    // A producer's bad deploy: garbage from here on.
    records.extend((0..300).map(|i| PlannedRecord {
        key: format!("order-x{i}"),
        payload: b"not avro at all".to_vec(),
    }));
    produce_planned(&producer(&c.bootstrap), &c.topic, &records)
        .await
        .expect("produce");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = config(&c, &dir.path().join("store"));
    config.processing.batch_max_records = 10;
    config.processing.dead_letter_max_consecutive = LIMIT;
    config.processing.dead_letter_max_ratio = 0.0;
    let group = config.kafka.group_id.clone();
    let store = Store::open(&config.store.path, 16).expect("store");
    let processor = Processor::for_entity(orderly::Orders, config, store.clone(), registry);
    let telemetry = processor.telemetry();
    let watched = telemetry.clone();
    let reason = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let seen = reason.clone();
    let tripped = async move {
        let stopped = wait_async(Duration::from_secs(60), || {
            let why = orderly::testkit::not_ready(&watched);
            let hit = why
                .as_deref()
                .is_some_and(|w| w.contains("dead-letter breaker"));
            if hit {
                *seen.lock().expect("lock") = why;
            }
            hit
        })
        .await;
        assert!(stopped, "the breaker stopped the partition");
        // Stopped means stopped: nothing more is decided meanwhile.
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    processor
        .run(tripped)
        .await
        .expect("a stopped partition still shuts down cleanly");

    let why = reason.lock().expect("lock").clone().unwrap_or_default();
    assert!(
        why.contains("partition 0") && why.contains("dead_letter_max_consecutive = 50"),
        "{why}"
    );
    assert!(
        why.contains("were bad_magic_byte, e.g. ") && why.contains("wire format"),
        "the trip names the letters' common error kind, an example and its usual cause: {why}"
    );
    assert_eq!(
        telemetry
            .breaker_trips
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert_eq!(
        errors(&telemetry, Stage::DeadLetter, Kind::Permanent),
        1,
        "the trip is counted as a permanent dead-letter failure"
    );
    let (next_offset, dead) =
        checkpoint(&store).expect("a checkpoint: the good records were written");
    let letters = end_offset(&c.bootstrap, &c.dlq).await;
    assert!(
        dead < LIMIT && letters as u64 == dead,
        "fewer letters than the limit, each counted: {letters} in the DLQ, {dead} counted"
    );
    assert_eq!(
        next_offset,
        (GOOD as u64 + dead) as i64,
        "the checkpoint stops at the batch that tripped the breaker"
    );
    assert_eq!(
        committed_async(&c, &group).await.get(&0).copied(),
        Some(next_offset),
        "nothing past it is committed"
    );
    let stats = store.stats().expect("stats");
    assert_eq!(
        stats.iter().map(|s| s.checkpoint.applied).sum::<u64>(),
        GOOD as u64
    );
    drop(c.mock);
}
