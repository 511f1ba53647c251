//! Re-driving dead letters on a real broker, through the `orderly` binary
//! only: `run`, `dlq list`, `dlq replay`, `state`.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use orderly::testkit::orders::{Encoder, EventType, StateView};
use orderly::Registry;

use crate::support::late_schema::{self, schema_v3, STUBBORN};
use crate::support::{committed, end_offsets, end_offsets_total, run_ok, Instance};
use crate::world::World;
use crate::{required_env, PARTITIONS};

const FIXABLE: usize = 40;
const GOOD: usize = 200;

fn json(instance: &Instance, args: &[&str]) -> Value {
    let out: Output = run_ok(
        instance
            .command(args)
            .env("RUST_LOG", "warn,librdkafka=off,rdkafka=off"),
        &format!("{args:?}"),
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?} prints JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn totals(instance: &Instance) -> [u64; 4] {
    let stats = instance.stats();
    let t = &stats["totals"];
    ["applied", "duplicates", "stale", "dead_lettered"]
        .map(|k| t[k].as_u64().unwrap_or_else(|| panic!("{k} in {stats}")))
}

/// Records dead-lettered for an unknown schema id are applied exactly once
/// after the schema is registered and `dlq replay --all` runs twice.
#[test]
fn unknown_schema_letters_are_applied_exactly_once_after_two_replays() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let registry =
        Registry::http(&world.registry.url, Duration::from_secs(5)).expect("registry client");
    let encoder = world
        .runtime
        .block_on(Encoder::register(&registry, &world.topic))
        .expect("register v1 and v2");
    // The registry double numbers schemas from 1: v1 and v2 took 1 and 2;
    // the processor registers OrderStatusChanged (the outbox) at start-up:
    // registered here first, it takes 3 and the processor gets the same id.
    let outbox_id = world
        .runtime
        .block_on(registry.register(
            &format!("{}-status-value", world.topic),
            orderly::testkit::orders::STATUS_SCHEMA,
        ))
        .expect("register the outbox schema");
    assert_eq!(outbox_id, 3);
    let late_id = 4;
    world.produce(&late_schema::records(&encoder, late_id, FIXABLE, GOOD));
    let instance = world.instance("");
    let took = world.finish(&instance);
    eprintln!("round 0 processed in {took:?}");
    let applied = (FIXABLE + 2 * GOOD) as u64;
    assert_eq!(totals(&instance), [applied, 0, 0, FIXABLE as u64 + 1]);
    let listed = json(&instance, &["dlq", "list", "--json"]);
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(FIXABLE + 1),
        "{listed:#}"
    );

    let id = world
        .runtime
        .block_on(registry.register(&format!("{}-late-value", world.topic), &schema_v3()))
        .expect("register v3");
    assert_eq!(id, late_id);
    let input_before = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let dlq_before = end_offsets(&world.bootstrap, &world.dlq, 1);
    let started = Instant::now();
    let first = json(&instance, &["dlq", "replay", "--all", "--json"]);
    eprintln!("first replay took {:?}", started.elapsed());
    assert_eq!(
        first["redriven"].as_array().map(Vec::len),
        Some(FIXABLE + 1),
        "{first:#}"
    );
    let input_after = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let sent: i64 = input_after.values().sum::<i64>() - input_before.values().sum::<i64>();
    assert_eq!(
        sent,
        FIXABLE as i64 + 1,
        "{input_before:?} -> {input_after:?}"
    );
    let group = orderly::testkit::redrive::redrive_group(
        &orderly::Config::load(Some(&instance.config_path)).expect("config"),
    );
    assert_eq!(
        committed(&world.bootstrap, &group, &world.dlq, 1),
        dlq_before,
        "progress committed (no metadata needed)"
    );
    // Dead letters only in the dead-letter topic; the re-drive log, created
    // by the replay as a compacted topic, names each re-driven letter once.
    assert_eq!(
        end_offsets(&world.bootstrap, &world.dlq, 1),
        dlq_before,
        "the replay appended nothing to the dead-letter topic"
    );
    let log_topic = format!("{}.redrive", world.dlq);
    let log_end = end_offsets(&world.bootstrap, &log_topic, 1);
    assert_eq!(
        log_end[&0],
        FIXABLE as i64 + 1,
        "one re-drive log record per re-driven letter"
    );
    let described = crate::kafka_native::kafka_tool(
        "topics",
        &[
            "--bootstrap-server",
            &world.bootstrap,
            "--describe",
            "--topic",
            &log_topic,
        ],
    );
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(
        described.contains("cleanup.policy=compact") && described.contains("PartitionCount: 1"),
        "{described}"
    );
    let second = json(&instance, &["dlq", "replay", "--all", "--json"]);
    assert_eq!(
        (
            second["letters_read"].as_u64(),
            second["redriven"].as_array().map(Vec::len)
        ),
        (Some(0), Some(0)),
        "{second:#}"
    );
    assert_eq!(
        end_offsets(&world.bootstrap, &world.topic, PARTITIONS),
        input_after,
        "the second replay sent nothing"
    );

    world.finish(&instance);
    assert_eq!(
        totals(&instance),
        [applied + FIXABLE as u64, 0, 0, FIXABLE as u64 + 2],
        "each re-driven record applied once"
    );
    let dump = instance.dump();
    for i in 0..FIXABLE {
        let state: StateView =
            serde_json::from_value(dump[&format!("order-fix-{i}")].clone()).expect("state JSON");
        assert_eq!(
            (state.version, state.status),
            (2, EventType::Paid),
            "order-fix-{i}"
        );
    }
    assert!(!dump.contains_key(STUBBORN));
    let listed = json(&instance, &["dlq", "list", "--json"]);
    let letters = listed.as_array().expect("letters");
    let counts: BTreeMap<u64, usize> = letters.iter().fold(BTreeMap::new(), |mut m, l| {
        *m.entry(l["redrive_count"].as_u64().unwrap_or(99))
            .or_default() += 1;
        m
    });
    assert_eq!(
        counts,
        BTreeMap::from([(0, FIXABLE + 1), (1, 1)]),
        "the stubborn record's new letter has count 1: {listed:#}"
    );
    assert_eq!(
        letters.iter().filter(|l| l["redriven"] == true).count(),
        FIXABLE + 1
    );
}

/// Timing of the commands over a large dead-letter topic (100,000 letters
/// written directly, each pointing at a distinct input position). Not part
/// of CI; run it with `--ignored` to measure:
/// `cargo test --features e2e --test e2e large_dlq -- --ignored --nocapture`.
#[test]
#[ignore]
fn large_dlq_timing() {
    use orderly::testkit::headers::{
        HEADER_ERROR_KIND, HEADER_ERROR_MESSAGE, HEADER_OFFSET, HEADER_PARTITION, HEADER_TOPIC,
    };
    use orderly::testkit::orders::{EventType, WriterVersion};
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::FutureRecord;

    const LETTERS: i64 = 100_000;
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let registry =
        Registry::http(&world.registry.url, Duration::from_secs(5)).expect("registry client");
    let encoder = world
        .runtime
        .block_on(Encoder::register(&registry, &world.topic))
        .expect("register");
    let producer = world.producer();
    let started = Instant::now();
    let mut pending = Vec::new();
    for i in 0..LETTERS {
        let order = format!("order-big-{i}");
        let payload = encoder
            .encode(
                &late_schema::event(&order, 1, EventType::Created),
                WriterVersion::V2,
            )
            .expect("encode");
        let (partition, offset) = (
            (i % PARTITIONS as i64).to_string(),
            (i / PARTITIONS as i64).to_string(),
        );
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: HEADER_TOPIC,
                value: Some(world.topic.as_str()),
            })
            .insert(Header {
                key: HEADER_PARTITION,
                value: Some(partition.as_str()),
            })
            .insert(Header {
                key: HEADER_OFFSET,
                value: Some(offset.as_str()),
            })
            .insert(Header {
                key: HEADER_ERROR_KIND,
                value: Some("unknown_schema"),
            })
            .insert(Header {
                key: HEADER_ERROR_MESSAGE,
                value: Some("schema id 3 is not registered: Schema not found"),
            });
        let record = FutureRecord::to(&world.dlq)
            .key(order.as_str())
            .payload(payload.as_slice())
            .headers(headers);
        pending.push(
            producer
                .send_result(record)
                .map_err(|(e, _)| e)
                .expect("enqueue"),
        );
        if pending.len() >= 10_000 {
            for delivery in pending.drain(..) {
                world
                    .runtime
                    .block_on(delivery)
                    .expect("delivered")
                    .map_err(|(e, _)| e)
                    .expect("acknowledged");
            }
        }
    }
    for delivery in pending.drain(..) {
        world
            .runtime
            .block_on(delivery)
            .expect("delivered")
            .map_err(|(e, _)| e)
            .expect("acknowledged");
    }
    eprintln!("wrote {LETTERS} letters in {:?}", started.elapsed());
    let instance = world.instance("");
    let timed = |args: &[&str]| {
        let started = Instant::now();
        let out = run_ok(
            instance
                .command(args)
                .env("RUST_LOG", "info,librdkafka=off,rdkafka=off"),
            &format!("{args:?}"),
        );
        let took = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        eprintln!(
            "{args:?}: {took:?}, {} progress lines; last line: {}",
            stderr.matches("progress").count(),
            stdout.lines().last().unwrap_or("")
        );
        (stdout, stderr)
    };
    let (list, _) = timed(&["dlq", "list"]);
    assert!(
        list.contains(&format!("{LETTERS} dead letters")),
        "{}",
        list.lines().last().unwrap_or("")
    );
    timed(&["dlq", "replay", "--all", "--dry-run"]);
    let (replay, stderr) = timed(&["dlq", "replay", "--all"]);
    assert!(
        replay.contains(&format!("re-drove {LETTERS}")),
        "{}",
        replay.lines().last().unwrap_or("")
    );
    assert!(
        stderr.contains("progress"),
        "a run of seconds logs progress: {stderr}"
    );
    let (again, _) = timed(&["dlq", "replay", "--all"]);
    assert!(
        again.contains("re-drove 0"),
        "{}",
        again.lines().last().unwrap_or("")
    );
    let sent = end_offsets_total(&world.bootstrap, &world.topic, PARTITIONS);
    assert_eq!(sent, LETTERS);
    timed(&["dlq", "replay", "--source", "3:24999", "--dry-run"]);
}
