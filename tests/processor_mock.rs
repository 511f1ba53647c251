//! Integration tests on librdkafka's in-process mock cluster: the processor
//! in-process, and the real `orderly` binary as a child process (the mock
//! cluster listens on loopback, so a child can reach it).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use orderly::testkit::headers::{
    HEADER_ERROR_KIND, HEADER_ERROR_MESSAGE, HEADER_OFFSET, HEADER_PARTITION, HEADER_TOPIC,
};
use orderly::testkit::orders::workload::{plan, Expectation, PlannedRecord, WorkloadSpec};
use orderly::testkit::orders::{Encoder, EventType, OrderEvent, WriterVersion};
use orderly::testkit::produce_planned;
use orderly::Registry;
use orderly::{Config, Store};
use support::mock::{self, config, producer, Cluster};
use support::registry_double::RegistryDouble;
use support::{committed, read_all, signal, unique, wait_exit, wait_until, Instance, Setup};

const PARTITIONS: i32 = 4;

fn cluster() -> Cluster {
    mock::cluster(PARTITIONS, true)
}

/// Runs the order processor in-process until the store covers `ends`.
async fn process_until_caught_up(
    config: Config,
    store: Store,
    registry: Registry,
    ends: BTreeMap<i32, i64>,
) {
    mock::process_until_caught_up(orderly::Orders, config, store, registry, ends).await
}

fn assert_store_matches(store: &Store, expected: &Expectation) {
    mock::assert_counters(
        store,
        expected.outcomes.applied,
        expected.outcomes.duplicates,
        expected.outcomes.stale,
        expected.outcomes.dead_lettered,
    );
    let mut mismatches = Vec::new();
    for (order_id, want) in &expected.states {
        let got = store
            .find::<orderly::Orders>(order_id)
            .expect("get")
            .map(|s| s.view());
        if got.as_ref() != Some(want) {
            mismatches.push((order_id.clone(), got, want.clone()));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatched orders, first: {:?}",
        mismatches.len(),
        mismatches.first()
    );
}

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

/// A mock cluster whose topic holds a planned workload (schemas registered
/// through the registry double over HTTP), and an `orderly` binary instance
/// configured for it with a fresh group and `extra` processing settings.
struct Loaded {
    c: Cluster,
    /// Serves the binary's schema look-ups for as long as the test runs.
    _registry: RegistryDouble,
    group: String,
    ends: BTreeMap<i32, i64>,
    total: i64,
    expected: Expectation,
    instance: Instance,
}

fn loaded(spec: WorkloadSpec, extra: &str) -> Loaded {
    let c = cluster();
    let registry = RegistryDouble::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let http = Registry::http(&registry.url, Duration::from_secs(5)).unwrap();
    let encoder = runtime
        .block_on(Encoder::register(&http, &c.topic))
        .expect("register over HTTP");
    let (records, expected) = plan(&spec, &encoder).expect("plan");
    let ends = runtime
        .block_on(produce_planned(&producer(&c.bootstrap), &c.topic, &records))
        .expect("produce");
    let total: i64 = ends.values().sum();
    let group = unique("group");
    let instance = Instance::new(&Setup {
        kafka_extra: "",
        bootstrap: &c.bootstrap,
        registry_url: &registry.url,
        group: &group,
        topic: &c.topic,
        dlq_topic: &c.dlq,
        session_timeout_ms: 6000,
        extra,
    });
    Loaded {
        c,
        _registry: registry,
        group,
        ends,
        total,
        expected,
        instance,
    }
}

/// The binary, killed at each chosen crash point (after the dead-letter
/// produce, after the sled batch before the flush, after the flush before
/// the offset commit) and restarted, ends with exact counters and states.
#[test]
fn crashes_at_each_point_resume_with_nothing_applied_twice_or_lost() {
    // Small batches and frequent write-outs, so the crash points land
    // mid-stream.
    let Loaded {
        c,
        _registry,
        group,
        ends,
        total,
        expected,
        instance,
    } = loaded(
        WorkloadSpec {
            orders: 3_000,
            poison_rate: 0.01,
            seed: 11,
            ..Default::default()
        },
        "batch_max_records = 50\nbatch_max_wait_ms = 5\ncommit_interval_ms = 10",
    );
    for fault in [
        "after_dlq:1",
        "after_batch:5",
        "after_flush:3",
        "after_batch:30",
        "after_flush:10",
    ] {
        let mut child = instance.spawn_run(Some(fault));
        let status = wait_exit(&mut child, Duration::from_secs(90))
            .unwrap_or_else(|| panic!("{fault}: never crashed\n{}", instance.log()));
        assert!(
            !status.success(),
            "{fault}: the fault aborts the process\n{}",
            instance.log()
        );
        let stats = instance.stats();
        let consumed = stats["totals"]["consumed"].as_u64().unwrap();
        assert!(
            consumed < total as u64,
            "{fault}: crashed before the end ({consumed} of {total})"
        );
    }
    let before = instance.connected_count();
    let mut child = instance.spawn_run(None);
    assert!(
        instance.wait_ready(before),
        "never connected\n{}",
        instance.log()
    );
    let caught_up = wait_until(Duration::from_secs(120), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        caught_up,
        "committed offsets reach the end offsets\n{}",
        instance.log()
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0: {status:?}\n{}",
        instance.log()
    );
    assert!(instance
        .log()
        .contains("fault injection: aborting at after_flush"));

    let stats = instance.stats();
    let totals = &stats["totals"];
    assert_eq!(
        totals["applied"].as_u64(),
        Some(expected.outcomes.applied),
        "{stats}"
    );
    assert_eq!(
        totals["duplicates"].as_u64(),
        Some(expected.outcomes.duplicates),
        "{stats}"
    );
    assert_eq!(
        totals["stale"].as_u64(),
        Some(expected.outcomes.stale),
        "{stats}"
    );
    assert_eq!(
        totals["dead_lettered"].as_u64(),
        Some(expected.outcomes.dead_lettered),
        "{stats}"
    );
    assert_eq!(totals["consumed"].as_u64(), Some(total as u64));
    let dump = instance.dump();
    assert_eq!(dump.len(), expected.states.len());
    for (order_id, want) in &expected.states {
        let got: orderly::testkit::orders::StateView =
            serde_json::from_value(dump[order_id].clone()).expect("state JSON");
        assert_eq!(&got, want, "order {order_id}");
    }
    // A crash after the dead-letter produce may re-send that letter; nothing
    // else is in the topic.
    let letters = read_all(&c.bootstrap, &c.dlq);
    let mut sources: Vec<(String, String)> = letters
        .iter()
        .map(|l| {
            (
                l.headers[HEADER_PARTITION].clone(),
                l.headers[HEADER_OFFSET].clone(),
            )
        })
        .collect();
    sources.sort();
    sources.dedup();
    assert_eq!(
        sources.len() as u64,
        expected.outcomes.dead_lettered,
        "every poison record dead-lettered at least once"
    );
    drop(c.mock);
}

/// A crash after a flush and before its offset commit, with no more input
/// coming: the restarted processor commits its durable checkpoints within
/// seconds, without waiting for new records.
#[test]
fn durable_checkpoints_ahead_of_the_group_are_committed_without_new_input() {
    // Everything is decided well before the first write-outs, which fall due
    // together (no early write-out once caught up); the crash must come after a flush covering every record.
    // Without the changelog: with it, each partition's write-out waits for
    // its own acknowledgements and they reach the flusher in different
    // rounds (and so with the outbox's write-out delivery, which waits for
    // the status changes' acknowledgements: the outbox is off too). Even
    // without them the flusher takes the write-outs that reached it when it
    // starts a flush, so now and then the first flush covers only some
    // partitions: that set-up is tried again on a fresh topic, up to 8
    // times.
    let no_changelog = [
        ("ORDERLY_KAFKA__CHANGELOG_TOPIC", ""),
        ("ORDERLY_KAFKA__OUTPUT_TOPIC", ""),
    ];
    let attempt = || {
        let loaded = loaded(
            WorkloadSpec {
                orders: 500,
                seed: 8,
                ..Default::default()
            },
            // Every partition's write-out at once (no turns to wait for).
            "commit_interval_ms = 3000\ncaught_up_write_ms = 0\nconcurrent_write_outs = 0",
        );
        let instance = &loaded.instance;
        let mut child = instance.spawn_run_env(
            Some("after_flush:1"),
            "info,librdkafka=warn,rdkafka=warn",
            &no_changelog,
        );
        let status = wait_exit(&mut child, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("never crashed\n{}", instance.log()));
        assert!(
            !status.success(),
            "aborted after the flush\n{}",
            instance.log()
        );
        let consumed = instance.stats()["totals"]["consumed"].as_u64().unwrap();
        if consumed == loaded.total as u64 {
            return Some(loaded);
        }
        eprintln!("the first flush covered {consumed} of {} records (not every partition's write-out); again", loaded.total);
        None
    };
    let Loaded {
        c,
        _registry,
        group,
        ends,
        instance,
        ..
    } = (0..8)
        .find_map(|_| attempt())
        .expect("a crash after the flush covering every record, in 8 attempts");
    let behind = committed(&c.bootstrap, &group, &c.topic, PARTITIONS);
    assert_ne!(behind, ends, "the crash came before the commit");
    // No new input from here on.
    let before = instance.connected_count();
    let mut child =
        instance.spawn_run_env(None, "info,librdkafka=warn,rdkafka=warn", &no_changelog);
    assert!(
        instance.wait_ready(before),
        "never connected\n{}",
        instance.log()
    );
    let caught_up = wait_until(Duration::from_secs(20), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let _ = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        caught_up,
        "committed offsets reach the checkpoints with no new input\n{}",
        instance.log()
    );
    drop(c.mock);
}

/// A partition task that misses a drain's deadline after its store batch
/// and before it reports the batch (held there by `hang_batched`): on
/// SIGTERM the release commits the partition's durable checkpoint, so the
/// group's offsets end equal to the store's checkpoints, not one write-out
/// behind them.
#[test]
fn a_task_stopped_at_the_drain_deadline_after_its_batch_has_its_checkpoint_committed() {
    let Loaded {
        c,
        _registry,
        group,
        instance,
        ..
    } = loaded(
        WorkloadSpec {
            orders: 2_000,
            seed: 21,
            ..Default::default()
        },
        "batch_max_records = 50\nbatch_max_wait_ms = 5\ncommit_interval_ms = 10",
    );
    let mut child = instance.spawn_run(Some("hang_batched:24"));
    let hung = wait_until(Duration::from_secs(60), || {
        instance
            .log()
            .contains("fault injection: hanging at hang_batched")
    });
    assert!(hung, "a task hung after its batch\n{}", instance.log());
    // The other partitions' write-outs go on meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0: {status:?}\n{}",
        instance.log()
    );
    let log = instance.log();
    assert!(
        log.contains("partition task did not drain before the deadline"),
        "the hung task missed the drain's deadline\n{log}"
    );
    let stats = instance.stats();
    let committed = committed(&c.bootstrap, &group, &c.topic, PARTITIONS);
    for p in stats["partitions"].as_array().expect("partitions") {
        let partition = p["partition"].as_i64().unwrap() as i32;
        let next = p["next_offset"].as_i64().unwrap();
        assert_eq!(
            committed.get(&partition).copied(),
            Some(next),
            "partition {partition}: the group's offset is the durable checkpoint\n{log}"
        );
    }
    drop(c.mock);
}

/// librdkafka's `send_offsets_to_transaction` that never returns (its
/// issues 5456 and 5511, seen on three brokers; held here by
/// `hang_send_offsets`, which parks the call's thread for good): the
/// write-out's wait is logged naming the call, the call is given up at its
/// bound, the partition starts over with a new producer (fencing the stuck
/// one), and the run ends with exact counters and states. Without the bound
/// the partition stops silently and the committed offsets never reach the
/// ends.
#[test]
fn a_transactional_call_that_never_returns_is_reported_and_its_partition_starts_over() {
    let Loaded {
        c,
        _registry,
        group,
        ends,
        expected,
        instance,
        ..
    } = loaded(
        WorkloadSpec {
            orders: 1_500,
            poison_rate: 0.01,
            seed: 23,
            ..Default::default()
        },
        "guarantee = \"exactly_once\"\nbatch_max_records = 50\nbatch_max_wait_ms = 5\ncommit_interval_ms = 10",
    );
    let mut child = instance.spawn_run(Some("hang_send_offsets:6"));
    // While the call waits (reported after 10 s, given up at 45 s): /readyz
    // says the partition is stalled and names the call, /metrics has the
    // wait, /api/status the phase.
    let reported = wait_until(Duration::from_secs(90), || {
        instance
            .log()
            .contains("a write-out is waiting in librdkafka's send_offsets_to_transaction")
    });
    assert!(reported, "the wait is reported\n{}", instance.log());
    let address = instance.http_address().expect("http address");
    let raw = |path: &str| {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&address).expect("connect");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("answer");
        answer
    };
    let ready = raw("/readyz");
    assert!(
        ready.starts_with("HTTP/1.1 503")
            && ready.contains("is stalled")
            && ready.contains("send_offsets_to_transaction"),
        "/readyz while a write-out is stalled:\n{ready}"
    );
    assert!(
        raw("/metrics").contains("orderly_write_out_call_wait_seconds{"),
        "the wait's metric"
    );
    assert!(
        raw("/api/status").contains("\"stalled_in\":\"send_offsets_to_transaction"),
        "the status page's row"
    );
    let caught_up = wait_until(Duration::from_secs(150), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    assert!(caught_up, "committed offsets reach the end offsets\n{log}");
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0 (the parked thread does not hold the exit): {status:?}\n{log}"
    );
    for said in [
        "fault injection: hanging in send_offsets_to_transaction",
        "a write-out is waiting in librdkafka's send_offsets_to_transaction",
        "send_offsets_to_transaction did not return within",
    ] {
        assert!(log.contains(said), "the log says {said:?}\n{log}");
    }
    let store = Store::open(&instance.store_path, 64).expect("store");
    assert_store_matches(&store, &expected);
    drop(c.mock);
}

/// A partition that has read everything its input holds writes out
/// `caught_up_write_ms` after its last write-out instead of a commit
/// interval later: with a 60 s interval (and a few hundred orders, far
/// below the cache share that writes early), the only way the group's
/// offsets reach the ends within 20 s is that write-out. (With
/// `caught_up_write_ms = 0` this test fails.)
#[test]
fn a_caught_up_partition_commits_without_waiting_for_the_commit_interval() {
    let loaded = loaded(
        WorkloadSpec {
            orders: 300,
            seed: 12,
            ..Default::default()
        },
        "commit_interval_ms = 60000",
    );
    let Loaded {
        c,
        _registry,
        group,
        ends,
        total,
        instance,
        ..
    } = loaded;
    let mut child = instance.spawn_run_env(None, "info,librdkafka=warn,rdkafka=warn", &[]);
    let caught_up = wait_until(Duration::from_secs(20), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let _ = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        caught_up,
        "committed offsets reach the ends long before the 60 s commit interval\n{}",
        instance.log()
    );
    assert_eq!(
        instance.stats()["totals"]["consumed"].as_i64(),
        Some(total),
        "every record decided and written"
    );
    drop(c.mock);
}

/// A partition task that panics stops the process with a non-zero exit
/// naming the partition, and nothing beyond durable state is committed: the
/// group's committed offsets never pass the store's checkpoints.
#[test]
fn a_panicking_partition_task_stops_the_process_naming_the_partition() {
    let Loaded {
        c,
        _registry,
        group,
        total,
        instance,
        ..
    } = loaded(
        WorkloadSpec {
            orders: 2_000,
            poison_rate: 0.0,
            seed: 3,
            ..Default::default()
        },
        "batch_max_records = 50\nbatch_max_wait_ms = 5\ncommit_interval_ms = 10",
    );
    let mut child = instance.spawn_run(Some("panic_batch:20"));
    let status = wait_exit(&mut child, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("never stopped\n{}", instance.log()));
    assert!(
        !status.success(),
        "a panic is a failure exit: {status:?}\n{}",
        instance.log()
    );
    let log = instance.log();
    assert!(
        log.contains("fault injection: panic at panic_batch"),
        "{log}"
    );
    let named = regex_lite_partition(&log);
    assert!(named, "the error names the panicking partition\n{log}");
    let stats = instance.stats();
    let consumed = stats["totals"]["consumed"].as_u64().unwrap();
    assert!(
        consumed < total as u64,
        "stopped before the end ({consumed} of {total})"
    );
    let committed = committed(&c.bootstrap, &group, &c.topic, PARTITIONS);
    for p in stats["partitions"].as_array().expect("partitions") {
        let partition = p["partition"].as_i64().unwrap() as i32;
        let next = p["next_offset"].as_i64().unwrap();
        let group_offset = committed.get(&partition).copied().unwrap_or(-1);
        assert!(
            group_offset <= next,
            "partition {partition}: committed {group_offset} beyond the durable checkpoint {next}"
        );
    }
    drop(c.mock);
}

/// True when the log says "partition N: task panicked".
fn regex_lite_partition(log: &str) -> bool {
    log.match_indices(": task panicked").any(|(at, _)| {
        let before = &log[..at];
        let digits = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_digit())
            .count();
        digits > 0 && before[..before.len() - digits].ends_with("partition ")
    })
}

#[test]
fn broker_down_at_startup_is_retried_with_a_clear_message() {
    let registry = RegistryDouble::start();
    let group = unique("group");
    // Nothing listens on port 1.
    let instance = Instance::new(&Setup {
        kafka_extra: "",
        bootstrap: "127.0.0.1:1",
        registry_url: &registry.url,
        group: &group,
        topic: "orders",
        dlq_topic: "orders.dlq",
        session_timeout_ms: 6000,
        extra: "",
    });
    // Killed if an assertion fails first.
    let reaper = support::Reaper::default();
    let mut child = reaper.watch(instance.spawn_run(None));
    let retried = wait_until(Duration::from_secs(30), || {
        instance.log().contains("kafka unreachable")
    });
    assert!(retried, "logs the outage\n{}", instance.log());
    assert!(
        child.try_wait().unwrap().is_none(),
        "keeps running while the broker is down"
    );
    let log = instance.log();
    let lost = log
        .lines()
        .find(|l| l.contains("kafka unreachable"))
        .unwrap_or_default();
    assert!(
        lost.contains("bootstrap=127.0.0.1:1") && lost.contains("orderly config check"),
        "the line names what was tried and the check to run: {lost}"
    );

    // While it runs it holds the store: a second process gets a clear error
    // that points to the running instance's endpoint.
    for command in [["state", "stats"], ["state", "dump"]] {
        let out = instance.command(&command).output().unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&instance.store_path.display().to_string()),
            "names the store path: {stderr}"
        );
        assert!(
            stderr.contains("in use by another process")
                && stderr.contains("curl http://127.0.0.1:")
                && stderr.contains("/state/<order_id>")
                && !stderr.contains("WouldBlock"),
            "points to the running instance: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }

    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0: {status:?}\n{}",
        instance.log()
    );
}

/// The body of `GET path` on `address` (HOST:PORT), HTTP/1.1 without
/// keep-alive.
fn http_get(address: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        // One chunk is enough for a small JSON answer: size line, data.
        let (_, rest) = body.split_once("\r\n").expect("chunk size");
        return rest.split("\r\n").next().unwrap_or_default().to_string();
    }
    body.to_string()
}

/// A broker outage while running (issue 32): one line when the connection
/// is lost (naming the bootstrap address and `orderly config check`), a
/// reminder every 15 s, one when it is back; librdkafka's own repeats
/// (AllBrokersDown and transport errors of every client, about 10 lines a
/// second before) are folded into them, and stopping afterwards does not
/// flood either.
#[test]
fn a_broker_outage_logs_a_line_per_change_not_a_flood() {
    const OUTAGE: Duration = Duration::from_secs(25);
    let loaded = loaded(
        WorkloadSpec {
            orders: 200,
            seed: 32,
            ..Default::default()
        },
        "",
    );
    let Loaded {
        c,
        _registry,
        group,
        ends,
        instance,
        ..
    } = loaded;
    let mut child = instance.spawn_run(None);
    let caught_up = wait_until(Duration::from_secs(60), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    assert!(caught_up, "caught up before the outage\n{}", instance.log());
    // Item 6: status changes delivered in the write-outs are counted as
    // such, not as a relay's "published 0".
    let status: serde_json::Value =
        serde_json::from_str(&http_get(&instance.wait_http(0), "/api/status"))
            .expect("status JSON");
    assert_eq!(status["outbox"]["delivery"], "write_out", "{status}");
    assert!(
        status["outbox"]["in_write_outs"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{status}"
    );
    let before = instance.log().lines().count();
    c.mock.broker_down(1).expect("broker down");
    std::thread::sleep(OUTAGE);
    let during: Vec<String> = instance
        .log()
        .lines()
        .skip(before)
        .map(str::to_string)
        .collect();
    c.mock.broker_up(1).expect("broker up");
    let back = wait_until(Duration::from_secs(20), || {
        instance.log().contains("kafka reachable again")
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    assert!(back, "the recovery is logged\n{log}");
    let per_second = during.len() as f64 / OUTAGE.as_secs_f64();
    eprintln!(
        "{} lines in the {}s outage ({per_second:.2}/s)",
        during.len(),
        OUTAGE.as_secs()
    );
    assert!(
        per_second <= 1.0,
        "at most a line a second over the outage, got {per_second:.2}/s:\n{}",
        during.join("\n")
    );
    assert!(
        during.iter().any(|l| l.contains("kafka unreachable")
            && l.contains(&format!("bootstrap={}", c.bootstrap))
            && l.contains("orderly config check")),
        "the lost line names the bootstrap address and the check:\n{}",
        during.join("\n")
    );
    assert!(
        during.iter().any(|l| l.contains("kafka still unreachable")),
        "a reminder within the outage:\n{}",
        during.join("\n")
    );
    assert!(
        !during
            .iter()
            .any(|l| l.contains("rdkafka::client:") || l.contains("kafka client error")),
        "librdkafka's repeats are folded:\n{}",
        during.join("\n")
    );
    let after_stop = log.lines().skip(before + during.len()).count();
    assert!(
        after_stop < 60,
        "recovery and a clean stop in a few lines, got {after_stop}\n{log}"
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0: {status:?}\n{log}"
    );
    drop(c.mock);
}

/// A registry outage longer than the session timeout (issue 32, item 7):
/// the partition tasks wait on the registry, which is not a paused process
/// (the poll thread keeps the membership), so no "was the process paused?"
/// warning; one line says the registry is reachable again, and every
/// record is then decided, none dead-lettered.
#[test]
fn a_registry_outage_is_not_taken_for_a_paused_process() {
    use support::registry_double::ByIdMode;
    let c = cluster();
    let registry = RegistryDouble::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let http = Registry::http(&registry.url, Duration::from_secs(5)).unwrap();
    let encoder = runtime
        .block_on(Encoder::register(&http, &c.topic))
        .expect("register over HTTP");
    let (records, _) = plan(
        &WorkloadSpec {
            orders: 50,
            seed: 7,
            poison_rate: 0.0,
            ..Default::default()
        },
        &encoder,
    )
    .expect("plan");
    let group = unique("group");
    let instance = c.instance(&registry.url, &group, "");
    // Without a changelog: the pause check holds write-outs only there.
    let no_changelog = [
        ("ORDERLY_KAFKA__CHANGELOG_TOPIC", ""),
        ("ORDERLY_KAFKA__OUTPUT_TOPIC", ""),
    ];
    let mut child =
        instance.spawn_run_env(None, "info,librdkafka=warn,rdkafka=warn", &no_changelog);
    assert!(instance.wait_ready(0), "connects\n{}", instance.log());
    // Schema look-ups fail (an ingress's HTML 404: not a registry answer,
    // retried) for longer than the 6 s session timeout.
    registry.set_by_id_mode(ByIdMode::HtmlNotFound);
    let ends = runtime
        .block_on(produce_planned(&producer(&c.bootstrap), &c.topic, &records))
        .expect("produce");
    let waiting = wait_until(Duration::from_secs(30), || {
        instance
            .log()
            .contains("schema registry unavailable; retrying")
    });
    assert!(
        waiting,
        "the tasks wait on the registry\n{}",
        instance.log()
    );
    std::thread::sleep(Duration::from_secs(9));
    registry.set_by_id_mode(ByIdMode::Normal);
    let caught_up = wait_until(Duration::from_secs(60), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    assert!(caught_up, "every record decided after the outage\n{log}");
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
    assert!(
        !log.contains("was the process paused"),
        "a wait on the registry is not a pause\n{log}"
    );
    assert_eq!(
        log.matches("schema registry reachable again").count(),
        1,
        "one line when the registry is back\n{log}"
    );
    assert_eq!(
        log.matches("schema registry unavailable").count(),
        1,
        "one line when it stops answering, not one per partition and retry\n{log}"
    );
    assert_eq!(
        instance.stats()["totals"]["dead_lettered"].as_i64(),
        Some(0),
        "nothing dead-lettered"
    );
    drop(c.mock);
}

/// A missing output topic with write-out delivery stops start-up with one
/// message (issue 32, item 8): it names the quick start's `kafka/broker tool
/// topics` beside `kafka-topics.sh`, and the input topic's real partition
/// count.
#[test]
fn a_missing_output_topic_is_reported_once_with_the_partition_count() {
    let c = cluster();
    let registry = RegistryDouble::start();
    let group = unique("group");
    let instance = c.instance(&registry.url, &group, "");
    let missing = unique("missing-status");
    let mut child = instance.spawn_run_env(
        None,
        "info,librdkafka=warn,rdkafka=warn",
        &[("ORDERLY_KAFKA__OUTPUT_TOPIC", &missing)],
    );
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let log = instance.log();
    assert!(
        status.is_some_and(|s| s.code() == Some(1)),
        "{status:?}\n{log}"
    );
    assert_eq!(
        log.matches(&format!("output topic {missing} does not exist"))
            .count(),
        1,
        "said once\n{log}"
    );
    assert!(
        log.contains(&format!(
            "`kafka/broker tool topics --bootstrap-server {} --create --topic {missing} --partitions {PARTITIONS}`",
            c.bootstrap
        )) && log.contains("kafka-topics.sh")
            && !log.contains("<the input topic's>"),
        "{log}"
    );
    drop(c.mock);
}

#[test]
fn bad_configuration_stops_start_up_naming_the_key() {
    let out = std::process::Command::new(support::orderly_bin())
        .arg("run")
        .env("ORDERLY_PROCESSING__BATCH_SIZE", "5")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("batch_size") && stderr.contains("batch_max_records"),
        "{stderr}"
    );

    let out = std::process::Command::new(support::orderly_bin())
        .args(["state", "stats"])
        .env("ORDERLY_PROCESSING__SHUTDOWN_TIMEOUT_MS", "60000")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("processing.shutdown_timeout_ms"));
}

#[test]
fn demo_json_proves_the_guarantees() {
    let out = std::process::Command::new(support::orderly_bin())
        .args(["demo", "--json", "--orders", "400"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let n = |k: &str| {
        summary[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {summary}"))
    };
    assert_eq!(
        n("applied") + n("duplicates") + n("stale") + n("dead_lettered"),
        n("consumed")
    );
    assert_eq!(
        n("consumed"),
        summary["expected"]["records"].as_u64().unwrap()
    );
    assert!(n("duplicates") > 0 && n("stale") > 0 && n("dead_lettered") > 0);
    assert_eq!(summary["state_matches_expected"], true);
    assert_eq!(summary["counts_match_expected"], true);
}

/// With the outbox on, a schema registry that cannot be reached at start-up
/// is waited for (as records wait for it) instead of stopping the process:
/// a line says so, the process keeps running, and a shutdown meanwhile is
/// clean.
#[test]
fn an_unreachable_registry_at_start_up_is_waited_for_with_the_outbox_on() {
    let c = cluster();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let registry_url = format!("http://127.0.0.1:{port}");
    let group = unique("group");
    let instance = c.instance(&registry_url, &group, "");
    let reaper = support::Reaper::default();
    let mut child = reaper.watch(instance.spawn_run(None));
    let waiting = wait_until(Duration::from_secs(45), || {
        instance
            .log()
            .contains("waiting for it to register the OrderStatusChanged schema")
    });
    assert!(
        waiting,
        "says it waits for the registry\n{}",
        instance.log()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "keeps running while the registry is away\n{}",
        instance.log()
    );
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "a clean stop while waiting: {status:?}\n{}",
        instance.log()
    );
    drop(c.mock);
}
