//! `orderly dlq list|replay` on librdkafka's in-process mock cluster: the
//! processor in-process (in-memory registry), the `orderly` binary for the
//! commands, the library for one round.
//!
//! The scenario of issue 9: records written with a schema the registry does
//! not know yet are dead-lettered; the schema is registered; `dlq replay
//! --all` (twice) re-publishes them; the processor applies each exactly
//! once. A record that can never decode comes back with a growing re-drive
//! count until the limit stops it.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rdkafka::mocking::MockCluster;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;
use serde_json::Value;

use orderly::testkit::headers::{HEADER_REDRIVE_COUNT, HEADER_REDRIVE_SOURCE};
use orderly::testkit::orders::{Encoder, EventType};
use orderly::testkit::redrive::{self, ReplayRequest, Selection, SourcePos};
use orderly::testkit::{covers, produce_planned};
use orderly::{Config, Processor, Registry, Store};
use support::late_schema::{self, schema_v3, STUBBORN};
use support::{committed, end_offsets, read_range, text, unique, Instance, Setup};

const PARTITIONS: i32 = 2;
/// Orders whose second event uses the schema registered late.
const FIXABLE: usize = 12;
/// Orders whose events are all fine.
const GOOD: usize = 20;
const EXIT_RUNTIME: i32 = 1;
const EXIT_USAGE: i32 = 2;
const EXIT_NOT_FOUND: i32 = 3;

struct World {
    _mock: MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    bootstrap: String,
    topic: String,
    dlq: String,
    instance: Instance,
    config: Config,
    runtime: tokio::runtime::Runtime,
}

fn world(with_dlq: bool) -> World {
    let mock = MockCluster::new(1).expect("mock cluster");
    let topic = unique("orders");
    let dlq = unique("orders-dlq");
    mock.create_topic(&topic, PARTITIONS, 1).expect("topic");
    if with_dlq {
        mock.create_topic(&dlq, PARTITIONS, 1).expect("dlq topic");
        // The re-drive log (kafka.redrive_topic's default), which `dlq
        // replay` creates itself on a real broker.
        mock.create_topic(&format!("{dlq}.redrive"), 1, 1)
            .expect("re-drive log topic");
    }
    // The mock cluster has no CreateTopics: the changelog is created here.
    mock.create_topic(&format!("{topic}-changelog"), PARTITIONS, 1)
        .expect("changelog topic");
    mock.create_topic(&format!("{topic}-status"), PARTITIONS, 1)
        .expect("output topic");
    let bootstrap = mock.bootstrap_servers();
    let group = unique("group");
    let instance = Instance::new(&Setup {
        kafka_extra: "",
        bootstrap: &bootstrap,
        // The dlq commands never ask the registry; the processor runs
        // in-process with an in-memory one.
        registry_url: "http://127.0.0.1:1",
        group: &group,
        topic: &topic,
        dlq_topic: &dlq,
        session_timeout_ms: 6000,
        extra: "",
    });
    let config = Config::from_layers(Some(&instance.config_path), Vec::new()).expect("config");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    World {
        _mock: mock,
        bootstrap,
        topic,
        dlq,
        instance,
        config,
        runtime,
    }
}

impl World {
    /// `orderly dlq <args> --config <file>`.
    fn dlq(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(support::orderly_bin());
        cmd.arg("dlq")
            .args(args)
            .arg("--config")
            .arg(&self.instance.config_path)
            .stdin(Stdio::null());
        cmd.env("RUST_LOG", "warn,librdkafka=off,rdkafka=off");
        cmd.output().expect("run orderly dlq")
    }

    /// `orderly dlq <args> --json`, which must exit 0.
    fn dlq_json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.push("--json");
        let out = self.dlq(&args);
        assert_eq!(code(&out), 0, "dlq {args:?}: {}", text(&out.stderr));
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("dlq {args:?} prints JSON ({e}): {}", text(&out.stdout)))
    }

    fn input_ends(&self) -> BTreeMap<i32, i64> {
        end_offsets(&self.bootstrap, &self.topic, PARTITIONS)
    }

    fn dlq_ends(&self) -> BTreeMap<i32, i64> {
        end_offsets(&self.bootstrap, &self.dlq, PARTITIONS)
    }

    fn redrive_committed(&self) -> BTreeMap<i32, i64> {
        committed(
            &self.bootstrap,
            &redrive::redrive_group(&self.config),
            &self.dlq,
            PARTITIONS,
        )
    }

    /// Runs the processor until its checkpoints cover the input's end offsets.
    fn process(&self, store: &Store, registry: &Registry) {
        let ends = self.input_ends();
        let watcher = store.clone();
        let caught_up = async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            while !covers(&watcher, &ends) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(
                covers(&watcher, &ends),
                "the processor did not catch up with {ends:?}"
            );
        };
        let processor = Processor::for_entity(
            orderly::Orders,
            self.config.clone(),
            store.clone(),
            registry.clone(),
        );
        self.runtime
            .block_on(processor.run(caught_up))
            .expect("processor run");
    }
}

fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {out:?}"))
}

/// Totals of the store's durable counters.
fn totals(store: &Store) -> (u64, u64, u64, u64) {
    let stats = store.stats().expect("stats");
    let sum = |f: fn(&orderly::testkit::Checkpoint) -> u64| {
        stats.iter().map(|s| f(&s.checkpoint)).sum::<u64>()
    };
    for s in &stats {
        assert_eq!(
            s.checkpoint.outcomes() as i64,
            s.checkpoint.next_offset - s.checkpoint.start_offset,
            "partition {}",
            s.partition
        );
    }
    (
        sum(|c| c.applied),
        sum(|c| c.duplicates),
        sum(|c| c.stale),
        sum(|c| c.dead_lettered),
    )
}

fn letters(listing: &Value) -> &Vec<Value> {
    listing.as_array().expect("dlq list --json prints an array")
}

fn source_of(letter: &Value) -> SourcePos {
    SourcePos {
        partition: letter["source_partition"]
            .as_i64()
            .expect("source_partition") as i32,
        offset: letter["source_offset"].as_i64().expect("source_offset"),
    }
}

#[test]
fn unknown_schema_letters_are_applied_exactly_once_after_the_schema_is_registered() {
    let w = world(true);
    let registry = Registry::memory();
    let encoder = w
        .runtime
        .block_on(Encoder::register(&registry, &w.topic))
        .expect("register v1 and v2");
    // The in-memory registry numbers schemas from 1 in registration order:
    // v1 and v2 took 1 and 2; the processor registers OrderStatusChanged (the
    // outbox) at start-up: registered here first, it takes 3 (and the
    // processor gets the same id); the late schema will get 4.
    let outbox_id = w
        .runtime
        .block_on(registry.register(
            &format!("{}-status-value", w.topic),
            orderly::testkit::orders::STATUS_SCHEMA,
        ))
        .expect("register the outbox schema");
    assert_eq!(outbox_id, 3);
    let late_id = 4;
    let records = late_schema::records(&encoder, late_id, FIXABLE, GOOD);
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &w.bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    w.runtime
        .block_on(produce_planned(&producer, &w.topic, &records))
        .expect("produce");
    let store = Store::open(&w.instance.store_path, 16).expect("store");

    // Round 0: the late-schema records and the stubborn one are dead-lettered.
    w.process(&store, &registry);
    let applied_before = (FIXABLE + 2 * GOOD) as u64;
    assert_eq!(totals(&store), (applied_before, 0, 0, FIXABLE as u64 + 1));
    let listing = w.dlq_json(&["list"]);
    let listed = letters(&listing);
    assert_eq!(listed.len(), FIXABLE + 1, "{listing:#}");
    let input_ends = w.input_ends();
    let mut sources = BTreeSet::new();
    let mut last_time = i64::MIN;
    for letter in listed {
        assert_eq!(letter["source_topic"], w.topic.as_str());
        assert_eq!(letter["error_kind"], "unknown_schema", "{letter}");
        assert!(
            letter["error_message"]
                .as_str()
                .is_some_and(|m| m.contains("schema id")),
            "whole message: {letter}"
        );
        assert_eq!(letter["redrive_count"], 0);
        assert_eq!(letter["redriven"], false);
        let at = letter["dead_lettered_at"]
            .as_str()
            .expect("dead_lettered_at");
        assert!(
            at.len() == 24 && at.ends_with('Z') && at.as_bytes()[10] == b'T',
            "RFC 3339: {at}"
        );
        let time = letter["timestamp_ms"].as_i64().expect("timestamp_ms");
        assert!(time >= last_time, "newest last: {listing:#}");
        last_time = time;
        let source = source_of(letter);
        assert!(source.offset < input_ends[&source.partition], "{letter}");
        assert!(
            sources.insert(source),
            "one letter per poison record: {listing:#}"
        );
    }
    let newest = w.dlq_json(&["list", "--limit", "3"]);
    assert_eq!(
        letters(&newest)[..],
        listed[listed.len() - 3..],
        "--limit keeps the newest"
    );
    let table = w.dlq(&["list"]);
    assert_eq!(code(&table), 0, "{}", text(&table.stderr));
    let table = text(&table.stdout);
    assert_eq!(
        table.lines().count(),
        FIXABLE + 3,
        "header, one row per letter, totals:\n{table}"
    );
    assert!(
        table.contains(&format!("{} dead letters in {}", FIXABLE + 1, w.dlq))
            && table.contains("unknown_schema"),
        "{table}"
    );

    // The fix: the schema gets registered.
    let id = w
        .runtime
        .block_on(registry.register(&format!("{}-late-value", w.topic), &schema_v3()))
        .expect("register v3");
    assert_eq!(id, late_id);

    // A dry run prints what it would send and changes nothing.
    let dlq_ends = w.dlq_ends();
    let out = w.dlq(&["replay", "--all", "--dry-run"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.starts_with("would re-drive"))
            .count(),
        FIXABLE + 1,
        "{stdout}"
    );
    assert!(
        stdout.contains("nothing sent, nothing committed"),
        "{stdout}"
    );
    let dry = w.dlq_json(&["replay", "--all", "--dry-run"]);
    assert_eq!(
        dry["redriven"].as_array().map(Vec::len),
        Some(FIXABLE + 1),
        "{dry:#}"
    );
    assert_eq!(
        (w.input_ends(), w.dlq_ends()),
        (input_ends.clone(), dlq_ends.clone()),
        "a dry run sends nothing"
    );
    assert_eq!(
        w.redrive_committed(),
        BTreeMap::from([(0, -1), (1, -1)]),
        "a dry run commits nothing"
    );

    // The replay: every letter once, into the partition it came from.
    let out = w.dlq(&["replay", "--all"]);
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("re-drove {} to {}", FIXABLE + 1, w.topic))
            && stdout.contains("skipped 0"),
        "{stdout}"
    );
    let after = w.input_ends();
    let mut per_partition: BTreeMap<i32, i64> = BTreeMap::new();
    for source in &sources {
        *per_partition.entry(source.partition).or_default() += 1;
    }
    for partition in 0..PARTITIONS {
        let grown = after[&partition] - input_ends[&partition];
        assert_eq!(
            grown,
            per_partition.get(&partition).copied().unwrap_or(0),
            "partition {partition}: {input_ends:?} -> {after:?}"
        );
        let republished = read_range(
            &w.bootstrap,
            &w.topic,
            partition,
            input_ends[&partition],
            after[&partition],
        );
        assert_eq!(
            republished.len() as i64,
            grown,
            "partition {partition} read back"
        );
        for record in republished {
            assert_eq!(record.headers[HEADER_REDRIVE_COUNT], "1");
            let source: SourcePos = record.headers[HEADER_REDRIVE_SOURCE]
                .parse()
                .expect("source header");
            assert!(
                source.partition == partition && sources.contains(&source),
                "{:?}",
                record.headers
            );
            let original = records
                .iter()
                .find(|r| Some(r.payload.as_slice()) == record.payload.as_deref())
                .expect("an original payload");
            assert_eq!(
                record.key.as_deref(),
                Some(original.key.as_bytes()),
                "the original key"
            );
        }
    }
    assert_eq!(
        w.redrive_committed(),
        dlq_ends,
        "progress committed up to the ends captured at start"
    );
    // The dead-letter topic holds dead letters only: what was re-driven is
    // remembered in the re-drive log, one record per letter.
    assert_eq!(
        w.dlq_ends(),
        dlq_ends,
        "a replay appends nothing to the dead-letter topic"
    );
    let log_topic = format!("{}.redrive", w.dlq);
    let log = read_range(
        &w.bootstrap,
        &log_topic,
        0,
        0,
        end_offsets(&w.bootstrap, &log_topic, 1)[&0],
    );
    let logged: BTreeSet<String> = log
        .iter()
        .filter_map(|r| {
            r.key
                .as_deref()
                .map(|k| String::from_utf8_lossy(k).into_owned())
        })
        .collect();
    let wanted: BTreeSet<String> = sources
        .iter()
        .map(|s| redrive::log_key(&w.topic, *s))
        .collect();
    assert_eq!(
        (log.len(), logged),
        (FIXABLE + 1, wanted),
        "one re-drive log record per re-driven letter, keyed by its source"
    );

    // Twice: nothing more is sent.
    let again = w.dlq_json(&["replay", "--all"]);
    assert_eq!(
        (
            again["letters_read"].as_u64(),
            again["redriven"].as_array().map(Vec::len)
        ),
        (Some(0), Some(0)),
        "{again:#}"
    );
    assert_eq!(w.input_ends(), after, "the second replay sent nothing");
    // --source finds re-driven letters before the committed progress and
    // skips them; a position no letter has exits 3.
    let some = *sources.iter().next().expect("a source");
    let out = w.dlq(&["replay", "--source", &format!("{some},0:999999"), "--json"]);
    assert_eq!(code(&out), EXIT_NOT_FOUND, "{}", text(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    assert_eq!(
        report["skipped"][0]["kind"], "already_redriven",
        "{report:#}"
    );
    assert_eq!(
        report["not_found"][0],
        serde_json::json!({"partition": 0, "offset": 999_999}),
        "{report:#}"
    );
    assert_eq!(
        w.input_ends(),
        after,
        "--source of a re-driven letter sends nothing"
    );

    // Round 1: each fixed record is applied once; the stubborn one fails
    // again and its new letter keeps its re-drive count.
    w.process(&store, &registry);
    let applied = applied_before + FIXABLE as u64;
    assert_eq!(
        totals(&store),
        (applied, 0, 0, FIXABLE as u64 + 2),
        "the re-driven records are new input records"
    );
    for i in 0..FIXABLE {
        let state = store
            .find::<orderly::Orders>(&format!("order-fix-{i}"))
            .expect("get")
            .expect("state");
        assert_eq!(
            (state.version, state.data.status),
            (2, EventType::Paid),
            "order-fix-{i}"
        );
    }
    assert!(store
        .find::<orderly::Orders>(STUBBORN)
        .expect("get")
        .is_none());
    let listing = w.dlq_json(&["list"]);
    let listed = letters(&listing);
    assert_eq!(listed.len(), FIXABLE + 2, "{listing:#}");
    assert_eq!(
        listed.iter().filter(|l| l["redriven"] == true).count(),
        FIXABLE + 1,
        "{listing:#}"
    );
    let newest = listed.last().expect("newest");
    assert_eq!(
        (
            newest["redrive_count"].as_u64(),
            newest["redriven"].as_bool()
        ),
        (Some(1), Some(false)),
        "{newest}"
    );

    // Round 2 (through the library): only the new letter is read and sent,
    // with count 2.
    let request = ReplayRequest {
        selection: Selection::All,
        dry_run: false,
        max_redrives: 3,
    };
    let report = redrive::replay(&w.config, &request).expect("replay");
    assert_eq!(report.letters_read, 1, "{report:?}");
    assert_eq!(
        report
            .redriven
            .iter()
            .map(|r| r.redrive_count)
            .collect::<Vec<_>>(),
        [2],
        "{report:?}"
    );
    w.process(&store, &registry);
    assert_eq!(totals(&store), (applied, 0, 0, FIXABLE as u64 + 3));
    let listing = w.dlq_json(&["list"]);
    let newest = letters(&listing).last().expect("newest").clone();
    assert_eq!(newest["redrive_count"], 2, "{newest}");
    let stubborn_source = source_of(&newest);

    // A limit of 1 skips it, says why, and sends nothing.
    let before = w.input_ends();
    let limited = w.dlq_json(&["replay", "--all", "--max-redrives", "1"]);
    assert_eq!(
        limited["redriven"].as_array().map(Vec::len),
        Some(0),
        "{limited:#}"
    );
    assert_eq!(
        limited["skipped"][0]["kind"], "limit_reached",
        "{limited:#}"
    );
    assert!(
        limited["skipped"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("re-driven 2 times")),
        "{limited:#}"
    );
    assert_eq!(w.input_ends(), before);
    // `--all` passed over it; `--source` can still choose it under the
    // default limit, once.
    let chosen = w.dlq_json(&["replay", "--source", &stubborn_source.to_string()]);
    assert_eq!(chosen["redriven"][0]["redrive_count"], 3, "{chosen:#}");
    let total_sent = |ends: &BTreeMap<i32, i64>| ends.values().sum::<i64>();
    assert_eq!(total_sent(&w.input_ends()), total_sent(&before) + 1);
    let again = w.dlq_json(&["replay", "--source", &stubborn_source.to_string()]);
    assert_eq!(again["skipped"][0]["kind"], "already_redriven", "{again:#}");
    let all = w.dlq_json(&["replay", "--all"]);
    assert_eq!(
        all["redriven"].as_array().map(Vec::len),
        Some(0),
        "--all does not re-send what --source sent: {all:#}"
    );
    assert_eq!(total_sent(&w.input_ends()), total_sent(&before) + 1);
    // Its third failure reaches the default limit.
    w.process(&store, &registry);
    assert_eq!(totals(&store), (applied, 0, 0, FIXABLE as u64 + 4));
    let listing = w.dlq_json(&["list"]);
    let newest = letters(&listing).last().expect("newest").clone();
    assert_eq!(newest["redrive_count"], 3, "{newest}");
    let last = w.dlq_json(&["replay", "--source", &source_of(&newest).to_string()]);
    assert_eq!(last["skipped"][0]["kind"], "limit_reached", "{last:#}");
    assert_eq!(
        last["redriven"].as_array().map(Vec::len),
        Some(0),
        "{last:#}"
    );
}

#[test]
fn a_missing_dead_letter_topic_is_a_clear_error() {
    let w = world(false);
    for args in [
        &["list"][..],
        &["replay", "--all"],
        &["replay", "--source", "0:1", "--dry-run"],
    ] {
        let out = w.dlq(args);
        assert_eq!(code(&out), EXIT_RUNTIME, "{args:?}: {out:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("dead-letter topic {} does not exist", w.dlq))
                && stderr.contains("kafka.dlq_topic"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn replay_arguments_are_checked_before_anything_runs() {
    let orderly = |args: &[&str]| {
        Command::new(support::orderly_bin())
            .args(args)
            .env("ORDERLY_KAFKA__BOOTSTRAP_SERVERS", "127.0.0.1:1")
            .output()
            .expect("run")
    };
    for (args, wants) in [
        (&["dlq", "replay"][..], &["--all", "--source"][..]),
        (&["dlq", "replay", "--dry-run"], &["--all", "--source"]),
        (
            &["dlq", "replay", "--source", "3-14"],
            &["PARTITION:OFFSET", "3-14"],
        ),
        (
            &["dlq", "replay", "--source", "0:1,x:2"],
            &["PARTITION:OFFSET", "x:2"],
        ),
        (
            &["dlq", "replay", "--source=-1:2"],
            &["PARTITION:OFFSET", "-1:2"],
        ),
        (
            &["dlq", "replay", "--all", "--source", "0:1"],
            &["--all", "--source"],
        ),
        (
            &["dlq", "replay", "--all", "--max-redrives", "0"],
            &["--max-redrives"],
        ),
        (&["dlq", "list", "--limit", "many"], &["--limit"]),
    ] {
        let out = orderly(args);
        assert_eq!(code(&out), EXIT_USAGE, "{args:?}: {out:?}");
        let stderr = text(&out.stderr);
        for want in wants {
            assert!(stderr.contains(want), "{args:?}: {want} in {stderr}");
        }
    }
    let help = orderly(&["dlq", "replay", "--help"]);
    assert_eq!(code(&help), 0);
    let help = text(&help.stdout);
    for flag in [
        "--all",
        "--source",
        "--dry-run",
        "--max-redrives",
        "[default: 3]",
    ] {
        assert!(help.contains(flag), "{flag} in {help}");
    }
}
