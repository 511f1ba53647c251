//! End-to-end throughput benchmark (issue 4).
//!
//! ```text
//! cargo bench --bench pipeline -- [--events N] [--orders N] [--bootstrap HOST:PORT] [--json]
//! cargo bench --bench pipeline -- --distinct-orders-rss [--events N] [--json]
//! ```
//!
//! Pre-loads a planned workload (default 1,000,000 events over 10,000 orders,
//! 5% duplicates, 2% reorderings, no poison) into a broker: librdkafka's mock
//! cluster by default, run in a child process (this same binary with
//! `--loader`) so that its in-memory log does not count towards this process's
//! RSS, or any broker given with `--bootstrap` (a random topic is created).
//! Then, on the same data, it measures events/s of:
//!
//! * (a)  a bare consumer (assign all partitions from the beginning, no group,
//!   no commits) reading and discarding every record: the broker+client limit;
//! * (b)  the bare consumer plus Avro decoding (warm schema cache);
//! * (d)  the store alone: the processor's sled writes per batch of the processor's configured size
//!   and partition (`orderly::batch::apply_batch`: read state, `step`, put
//!   changed states + checkpoint in one `commit_batch`), one `flush` per round
//!   of all partitions' batches, on pre-decoded events, no Kafka: the storage
//!   limit;
//! * (c)  the full `Processor` with durability on, from start (including
//!   joining the group) to the moment the store's checkpoints cover the end
//!   offsets, with a fresh group id and store.
//!
//! "steady ev/s" counts from a phase's first record (for (c): its first
//! batch), so it excludes connecting and joining the group. For (c) the
//! table also gives the time after the first batch in which no checkpoint
//! moved (a stall), batch and flush figures, keys and bytes per event and CPU
//! per thread.
//!
//! The mock cluster keeps at most 5 MiB of record batches per partition and
//! silently drops older ones, so on the mock the topic gets as many
//! partitions as the workload needs (22 for the default one; the table says
//! so) unless `--partitions` is given, which then must fit. The loader checks
//! that no record was dropped. `--bootstrap` uses 4 partitions by default.
//!
//! Peak RSS per phase is VmHWM of this process, reset before each phase by
//! writing 5 to /proc/self/clear_refs. CPU per phase is read from /proc for
//! this process, per thread (grouped by thread name) for (c), and for the
//! broker's process (the mock's child, or `--broker-pid`).
//!
//! `--distinct-orders-rss` runs 1,000,000 distinct orders (one event each)
//! through (c) only (`--phases` to add others) and reports its peak RSS
//! against the 512 MiB target.
//!
//! Knobs for experiments without editing the library: `--batch-max-records`,
//! `--batch-max-wait-ms`, `--cache-mb`, `--librdkafka KEY=VALUE` (consumers
//! of (a), (b) and (c)), `--phases`, `--timeline` (with `--json`).

use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context};
use clap::Parser;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::Producer;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use orderly::codec::{Decoder, Encoder, WriterVersion};
use orderly::config::Config;
use orderly::batch::apply_batch;
use orderly::event::{EventType, OrderEvent};
use orderly::processor::{consumer_config, Processor, RunReport};
use orderly::registry::Registry;
use orderly::store::{Checkpoint, PartitionStore, Store};
use orderly::workload::{plan, WorkloadSpec};

#[derive(Parser, Debug, Clone)]
#[command(about = "orderly end-to-end throughput benchmark")]
struct Args {
    /// Events to plan (before duplicates and poison are added).
    #[arg(long, default_value_t = 1_000_000)]
    events: usize,
    /// Distinct orders (default 10,000; with --distinct-orders-rss, = events).
    #[arg(long)]
    orders: Option<usize>,
    /// Use this broker instead of the mock cluster (a random topic is created).
    #[arg(long)]
    bootstrap: Option<String>,
    /// With --bootstrap: the broker's process id on this machine, to report
    /// its CPU per phase (the mock cluster's is reported on its own).
    #[arg(long)]
    broker_pid: Option<u32>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// 1,000,000 distinct orders (one event each) through the full pipeline,
    /// reporting peak RSS against the 512 MiB target. Runs phase c only unless
    /// --phases says otherwise.
    #[arg(long, alias = "distinct-orders")]
    distinct_orders_rss: bool,
    /// Which phases to run, comma-separated, of a,b,d,c.
    #[arg(long)]
    phases: Option<String>,
    /// Partitions of the input topic (default 4; on the mock cluster raised
    /// to what the workload needs, as it keeps only 5 MiB per partition).
    #[arg(long)]
    partitions: Option<i32>,
    #[arg(long, default_value_t = 0.05)]
    duplicate_rate: f64,
    #[arg(long, default_value_t = 0.02)]
    reorder_rate: f64,
    #[arg(long, default_value_t = 0.0)]
    poison_rate: f64,
    #[arg(long, default_value_t = 0.3)]
    v1_share: f64,
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Override processing.batch_max_records for (c) (and (d)'s batch size).
    #[arg(long)]
    batch_max_records: Option<usize>,
    /// Override processing.batch_max_wait_ms for (c).
    #[arg(long)]
    batch_max_wait_ms: Option<u64>,
    /// Override store.cache_capacity_mb for (c) and (d).
    #[arg(long)]
    cache_mb: Option<u64>,
    /// A librdkafka setting for every consumer of (a), (b) and (c), as
    /// KEY=VALUE (through `kafka.librdkafka`); repeatable.
    #[arg(long = "librdkafka", value_name = "KEY=VALUE")]
    librdkafka: Vec<String>,
    /// Include (c)'s progress every 20 ms in the JSON output.
    #[arg(long)]
    timeline: bool,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// Internal: run as the loader child (mock cluster + produce).
    #[arg(long, hide = true)]
    loader: bool,
    #[arg(long, hide = true)]
    topic: Option<String>,
    #[arg(long, hide = true)]
    spec: Option<String>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// What the loader tells the benchmark (one JSON line on its stdout).
#[derive(Debug, Serialize, Deserialize)]
struct LoadInfo {
    bootstrap: String,
    topic: String,
    dlq_topic: String,
    partitions: i32,
    requested_partitions: i32,
    /// Estimated size of the record batches in the broker's log.
    log_mib: f64,
    ends: BTreeMap<i32, i64>,
    records: u64,
    expected: Counts,
    v1_id: u32,
    v2_id: u32,
    plan_seconds: f64,
    produce_seconds: f64,
    loader_peak_rss_mib: f64,
}

const DEFAULT_PARTITIONS: i32 = 4;
/// Per-record bytes of a v2 record batch beyond key and value (length,
/// attributes, deltas, header count), rounded up.
const RECORD_OVERHEAD: usize = 12;
/// What one mock partition holds (5 MiB), less a margin for batch headers.
const MOCK_PARTITION_BUDGET: u64 = 9 * 1024 * 1024 / 2;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Counts {
    applied: u64,
    duplicates: u64,
    stale: u64,
    dead_lettered: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    if args.loader {
        return runtime.block_on(loader(args));
    }
    let results = bench(&args, &runtime)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", results.table());
    }
    Ok(())
}

// ---------------------------------------------------------------- loader ---

/// The child: starts the mock cluster (unless a bootstrap was given), creates
/// the topics, plans and produces the workload, prints a `LoadInfo` line and
/// keeps the mock cluster up until its stdin closes.
async fn loader(args: Args) -> anyhow::Result<()> {
    let topic = args.topic.clone().context("--topic")?;
    let dlq_topic = format!("{topic}.dlq");
    let spec: WorkloadSpec = serde_json::from_str(args.spec.as_deref().context("--spec")?)?;
    let registry = Registry::memory();
    let encoder = Encoder::register(&registry, &topic).await?;
    let started = Instant::now();
    let (records, expected) = plan(&spec, &encoder)?;
    let plan_seconds = started.elapsed().as_secs_f64();
    let expected_counts = Counts {
        applied: expected.applied,
        duplicates: expected.duplicates,
        stale: expected.stale,
        dead_lettered: expected.dead_lettered,
    };
    drop(expected);

    // librdkafka's mock cluster keeps at most 5 MiB of record batches per
    // partition (rdkafka_mock.c: `mpart->max_size = 1024 * 1024 * 5`, not
    // configurable) and silently deletes the oldest batches beyond that. When
    // the workload does not fit in the requested partitions, use more.
    let requested = args.partitions.unwrap_or(DEFAULT_PARTITIONS);
    let log_bytes: u64 = records.iter().map(|r| (r.key.len() + r.payload.len() + RECORD_OVERHEAD) as u64).sum();
    let fitting = log_bytes.div_ceil(MOCK_PARTITION_BUDGET).max(1) as i32;
    let partitions = match (&args.bootstrap, args.partitions) {
        (None, Some(n)) if n < fitting => bail!(
            "the workload (~{} MiB of record batches) does not fit in {n} partitions of the mock cluster, which keeps \
             only 5 MiB per partition: use --partitions {fitting} or more, fewer --events, or --bootstrap",
            log_bytes >> 20
        ),
        (None, None) => requested.max(fitting),
        _ => requested,
    };

    let cluster;
    let bootstrap = match &args.bootstrap {
        None => {
            cluster = rdkafka::mocking::MockCluster::new(1)?;
            cluster.create_topic(&topic, partitions, 1)?;
            cluster.create_topic(&dlq_topic, 1, 1)?;
            cluster.bootstrap_servers()
        }
        Some(bootstrap) => {
            create_topics(bootstrap, &topic, &dlq_topic, partitions).await?;
            bootstrap.clone()
        }
    };
    let producer: rdkafka::producer::FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()?;
    let started = Instant::now();
    let mut ends = orderly::load::produce_planned(&producer, &topic, &records).await?;
    let produce_seconds = started.elapsed().as_secs_f64();
    for p in 0..partitions {
        ends.entry(p).or_insert(0);
    }
    // Every record must still be there: a broker that dropped the oldest ones
    // (the mock's size cap, or retention) would make every phase read less.
    let records_total = records.len() as u64;
    drop(records);
    let mut low_total = 0i64;
    for p in 0..partitions {
        let (low, high) = producer.client().fetch_watermarks(&topic, p, Duration::from_secs(10))?;
        low_total += low;
        if high != ends[&p] {
            bail!("partition {p}: high watermark {high}, but the producer's last offset says {}", ends[&p]);
        }
    }
    if low_total > 0 {
        bail!("the broker already deleted {low_total} of the {records_total} records produced (size cap or retention); use more --partitions");
    }
    let info = LoadInfo {
        bootstrap,
        topic,
        dlq_topic,
        partitions,
        requested_partitions: requested,
        log_mib: log_bytes as f64 / (1024.0 * 1024.0),
        ends,
        records: records_total,
        expected: expected_counts,
        v1_id: encoder.v1_id,
        v2_id: encoder.v2_id,
        plan_seconds,
        produce_seconds,
        loader_peak_rss_mib: kib_to_mib(status_kib("VmHWM").unwrap_or(0)),
    };
    drop(producer);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(&info)?)?;
    out.flush()?;
    drop(out);
    if args.bootstrap.is_none() {
        // Serve the mock cluster until the benchmark is done (or gone).
        let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await;
    }
    Ok(())
}

async fn create_topics(bootstrap: &str, topic: &str, dlq_topic: &str, partitions: i32) -> anyhow::Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", bootstrap).create()?;
    let topics = [
        NewTopic::new(topic, partitions, TopicReplication::Fixed(1)),
        NewTopic::new(dlq_topic, 1, TopicReplication::Fixed(1)),
    ];
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics(&topics, &options).await? {
        if let Err((name, code)) = result {
            bail!("cannot create topic {name} on {bootstrap}: {code}");
        }
    }
    Ok(())
}

/// Starts the loader child and waits for its `LoadInfo`.
fn start_loader(args: &Args, spec: &WorkloadSpec, topic: &str) -> anyhow::Result<(Child, LoadInfo)> {
    let exe = std::env::current_exe()?;
    let mut command = Command::new(exe);
    command
        .arg("--loader")
        .arg("--topic")
        .arg(topic)
        .arg("--spec")
        .arg(serde_json::to_string(spec)?)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(bootstrap) = &args.bootstrap {
        command.arg("--bootstrap").arg(bootstrap);
    }
    if let Some(partitions) = args.partitions {
        command.arg("--partitions").arg(partitions.to_string());
    }
    let mut child = command.spawn().context("starting the loader child")?;
    let stdout = child.stdout.take().context("loader stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    if line.trim().is_empty() {
        let status = child.wait()?;
        bail!("the loader exited ({status}) without loading the workload; see its errors above");
    }
    let info: LoadInfo = serde_json::from_str(line.trim()).context("loader output")?;
    Ok((child, info))
}

// ------------------------------------------------------------- benchmark ---

#[derive(Debug, Serialize)]
struct Results {
    machine: Machine,
    workload: WorkloadOut,
    phases: Vec<Phase>,
    /// (c) events/s over the slower of (a) and (d).
    ratio_c_to_slower_of_a_d: Option<f64>,
    /// The same with steady rates (after the first record / first batch).
    ratio_c_to_slower_of_a_d_steady: Option<f64>,
    full_pipeline: Option<FullPipeline>,
    storage: Option<StorageOut>,
}

#[derive(Debug, Serialize)]
struct Machine {
    cores: usize,
    broker: String,
}

#[derive(Debug, Serialize)]
struct WorkloadOut {
    topic: String,
    partitions: i32,
    requested_partitions: i32,
    broker_log_mib: f64,
    orders: usize,
    events_per_order: u32,
    records: u64,
    duplicate_rate: f64,
    reorder_rate: f64,
    poison_rate: f64,
    v1_share: f64,
    expected: Counts,
    plan_seconds: f64,
    produce_seconds: f64,
    produce_events_per_s: f64,
}

#[derive(Debug, Serialize, Clone)]
struct Phase {
    key: String,
    name: String,
    events: u64,
    seconds: f64,
    events_per_s: f64,
    /// CPU seconds of this process during the phase (user + system).
    cpu_seconds: f64,
    /// CPU seconds of the mock broker's process during the phase.
    broker_cpu_seconds: Option<f64>,
    /// Events/s after the phase's first record (excludes connecting, the
    /// first fetch and, for (c), joining the group).
    steady_events_per_s: f64,
    peak_rss_mib: f64,
    rss_at_start_mib: f64,
}

#[derive(Debug, Serialize)]
struct FullPipeline {
    /// Seconds from `Processor::run` to the checkpoints covering the end offsets.
    total_seconds: f64,
    /// Seconds until the first batch was visible in the store (group join).
    join_seconds: f64,
    /// Events/s after the first batch (excludes joining the group).
    steady_events_per_s: f64,
    batches: u64,
    avg_records_per_batch: f64,
    batch_p50_ms: f64,
    batch_p99_ms: f64,
    flush_p50_ms: f64,
    flushes: u64,
    flushes_per_s: f64,
    keys_written_per_event: f64,
    store_disk_bytes_per_event: f64,
    counters: Counts,
    counters_match_expected: bool,
    peak_rss_mib: f64,
    rss_target_mib: f64,
    /// CPU seconds per thread group of this process while (c) ran (until covered).
    thread_cpu_seconds: BTreeMap<String, f64>,
    /// Time after the first batch during which no checkpoint moved (20 ms
    /// samples), and the longest such stretch.
    stalled_seconds: f64,
    longest_stall_seconds: f64,
    /// (ms since start, events covered) every 20 ms; with --timeline only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    timeline: Vec<(u64, u64)>,
    timed_out: bool,
}

#[derive(Debug, Serialize)]
struct StorageOut {
    batches: u64,
    flushes: u64,
    flushes_per_s: f64,
    keys_per_event: f64,
    /// Key + value bytes of order states handed to sled per event.
    bytes_per_event: f64,
    /// Bytes `Store::flush` reported per event.
    flushed_bytes_per_event: f64,
    /// Key + value bytes of one written order state.
    avg_state_value_bytes: f64,
    batch_p50_ms: f64,
    batch_p99_ms: f64,
    flush_p50_ms: f64,
    /// Share of (d)'s time spent in `Store::flush`.
    flush_share: f64,
}

fn bench(args: &Args, runtime: &tokio::runtime::Runtime) -> anyhow::Result<Results> {
    let orders = args.orders.unwrap_or(if args.distinct_orders_rss { args.events } else { 10_000 }).max(1);
    let events_per_order = if args.distinct_orders_rss { 1 } else { args.events.div_ceil(orders).max(1) as u32 };
    let phases: Vec<String> = args
        .phases
        .clone()
        .unwrap_or_else(|| if args.distinct_orders_rss { "c".into() } else { "a,b,d,c".into() })
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let spec = WorkloadSpec {
        orders,
        seed: args.seed,
        duplicate_rate: args.duplicate_rate,
        reorder_rate: args.reorder_rate,
        poison_rate: args.poison_rate,
        v1_share: args.v1_share,
        events_per_order: Some(events_per_order),
    };
    let topic = format!("orderly-bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    eprintln!(
        "pipeline: planning and producing {} orders x {events_per_order} events to {} ...",
        orders,
        args.bootstrap.as_deref().unwrap_or("the mock cluster (child process)")
    );
    let (mut child, load) = start_loader(args, &spec, &topic)?;
    let broker_pid = if args.bootstrap.is_none() { Some(child.id()) } else { args.broker_pid };
    eprintln!(
        "pipeline: {} records loaded (plan {:.1} s, produce {:.1} s); ends {:?}",
        load.records, load.plan_seconds, load.produce_seconds, load.ends
    );

    let registry = Registry::memory();
    let encoder = runtime.block_on(Encoder::register(&registry, &load.topic))?;
    if (encoder.v1_id, encoder.v2_id) != (load.v1_id, load.v2_id) {
        bail!("schema ids differ between the loader and this process");
    }
    let total: u64 = load.ends.values().map(|e| *e as u64).sum();
    let timeout = Duration::from_secs(args.timeout_secs);
    let mut out_phases = Vec::new();
    let mut storage = None;
    let mut full = None;

    let run = |key: &str| phases.iter().any(|p| p == key);
    if run("a") {
        let m = Meter::start(broker_pid);
        let consumer = plain_consumer(args, &load.bootstrap)?;
        let n = read_all(&consumer, &load, timeout, |msg| {
            black_box(msg.payload());
        })?;
        out_phases.push(m.finish_read("a", "bare consumer (read + discard)", n));
    }
    let decoder = Decoder::new(registry.clone());
    warm(runtime, &decoder, &encoder)?;
    if run("b") {
        let m = Meter::start(broker_pid);
        let consumer = plain_consumer(args, &load.bootstrap)?;
        let n = read_all(&consumer, &load, timeout, |msg| {
            let decoded = match decoder.decode_cached(msg.payload()) {
                Some(result) => result,
                None => runtime.block_on(decoder.decode(msg.payload())),
            };
            black_box(decoded.is_ok());
        })?;
        out_phases.push(m.finish_read("b", "consumer + Avro decode", n));
    }
    if run("d") {
        // Untimed: the decoded events of each partition, in offset order.
        let consumer = plain_consumer(args, &load.bootstrap)?;
        let mut by_partition: BTreeMap<i32, PartitionRecords> = BTreeMap::new();
        read_all(&consumer, &load, timeout, |msg| {
            let decoded = match decoder.decode_cached(msg.payload()) {
                Some(result) => result,
                None => runtime.block_on(decoder.decode(msg.payload())),
            };
            by_partition.entry(msg.partition()).or_default().push(decoded.ok());
        })?;
        drop(consumer);
        // The same batch size as (c): the processor's configured one.
        let batch = args.batch_max_records.unwrap_or(Config::defaults()?.processing.batch_max_records);
        let m = Meter::start(broker_pid);
        let (n, s) = store_alone(&by_partition, batch, args.cache_mb.unwrap_or(64), &load.topic)?;
        let phase = m.finish("d", "store alone (apply_batch + flush)", n);
        eprintln!("pipeline: (d) {n} events in {:.2} s", phase.seconds);
        storage = Some(StorageOut { flushes_per_s: s.flushes as f64 / phase.seconds.max(1e-9), ..s });
        out_phases.push(phase);
        drop(by_partition);
        trim_heap();
    }
    if run("c") {
        trim_heap();
        let (phase, f) = runtime.block_on(full_pipeline(args, &load, registry.clone(), broker_pid, timeout))?;
        out_phases.push(phase);
        full = Some(f);
    }

    // The loader (mock cluster) stops when its stdin closes.
    drop(child.stdin.take());
    let _ = child.wait();

    let ratio = |steady: bool| {
        let eps = |key: &str| {
            out_phases.iter().find(|p| p.key == key).map(|p| if steady { p.steady_events_per_s } else { p.events_per_s })
        };
        match (eps("c"), eps("a"), eps("d")) {
            (Some(c), Some(a), Some(d)) => Some(c / a.min(d)),
            (Some(c), Some(a), None) => Some(c / a),
            (Some(c), None, Some(d)) => Some(c / d),
            _ => None,
        }
    };
    let (ratio_total, ratio_steady) = (ratio(false), ratio(true));
    Ok(Results {
        machine: Machine {
            cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
            broker: match &args.bootstrap {
                None => "librdkafka mock cluster (1 broker, child process)".into(),
                Some(b) => b.clone(),
            },
        },
        workload: WorkloadOut {
            topic: load.topic.clone(),
            partitions: load.partitions,
            requested_partitions: load.requested_partitions,
            broker_log_mib: load.log_mib,
            orders,
            events_per_order,
            records: total,
            duplicate_rate: args.duplicate_rate,
            reorder_rate: args.reorder_rate,
            poison_rate: args.poison_rate,
            v1_share: args.v1_share,
            expected: load.expected,
            plan_seconds: load.plan_seconds,
            produce_seconds: load.produce_seconds,
            produce_events_per_s: total as f64 / load.produce_seconds.max(1e-9),
        },
        phases: out_phases,
        ratio_c_to_slower_of_a_d: ratio_total,
        ratio_c_to_slower_of_a_d_steady: ratio_steady,
        full_pipeline: full,
        storage,
    })
}

/// The processor's own consumer settings, with a fresh group id (unused:
/// partitions are assigned, not subscribed).
fn plain_consumer(args: &Args, bootstrap: &str) -> anyhow::Result<BaseConsumer> {
    let mut config = Config::defaults()?;
    passthrough(args, &mut config)?;
    config.kafka.bootstrap_servers = bootstrap.into();
    config.kafka.group_id = format!("orderly-bench-plain-{}", uuid::Uuid::new_v4().simple());
    Ok(consumer_config(&config).create()?)
}

fn passthrough(args: &Args, config: &mut Config) -> anyhow::Result<()> {
    for setting in &args.librdkafka {
        let (key, value) = setting.split_once('=').with_context(|| format!("--librdkafka {setting}: use KEY=VALUE"))?;
        config.kafka.librdkafka.insert(key.trim().into(), toml::Value::String(value.trim().into()));
    }
    Ok(())
}

/// Assigns every partition from the beginning and hands each record to `f`
/// until every partition reached its end offset. Returns the records read.
fn read_all(
    consumer: &BaseConsumer,
    load: &LoadInfo,
    timeout: Duration,
    mut f: impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<(u64, Duration)> {
    {
        let mut tpl = TopicPartitionList::new();
        for p in load.ends.keys() {
            tpl.add_partition_offset(&load.topic, *p, Offset::Beginning)?;
        }
        consumer.assign(&tpl)?;
    }
    let width = load.ends.keys().max().map(|p| *p as usize + 1).unwrap_or(0);
    let mut end = vec![0i64; width];
    for (p, e) in &load.ends {
        end[*p as usize] = *e;
    }
    let mut remaining = end.iter().filter(|e| **e > 0).count();
    let mut done = vec![false; width];
    let mut read = 0u64;
    let mut errors = 0u64;
    let started = Instant::now();
    let mut first = None;
    while remaining > 0 {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) => {
                if read == 0 {
                    first = Some(started.elapsed());
                }
                read += 1;
                let p = msg.partition() as usize;
                f(&msg);
                if p < width && !done[p] && msg.offset() + 1 >= end[p] {
                    done[p] = true;
                    remaining -= 1;
                }
            }
            Some(Err(error)) => {
                errors += 1;
                if errors <= 10 {
                    eprintln!("pipeline: consumer error: {error}");
                }
            }
            None => {}
        }
        if started.elapsed() > timeout {
            bail!("timed out after reading {read} records ({errors} errors)");
        }
    }
    consumer.unassign()?;
    Ok((read, first.unwrap_or_default()))
}

/// Decodes one v1 and one v2 record so the schema cache is warm.
fn warm(runtime: &tokio::runtime::Runtime, decoder: &Decoder, encoder: &Encoder) -> anyhow::Result<()> {
    let event = OrderEvent {
        event_id: "warm".into(),
        order_id: "warm".into(),
        version: 1,
        event_type: EventType::Created,
        amount: 1,
        currency: "EUR".into(),
        occurred_at: 1,
    };
    for version in [WriterVersion::V1, WriterVersion::V2] {
        let bytes = encoder.encode(&event, version)?;
        runtime.block_on(decoder.decode(Some(&bytes))).map_err(|e| anyhow!("{e}"))?;
    }
    Ok(())
}

/// One partition's records for (d): the decoded events in offset order, and
/// which records (by index) were poison.
#[derive(Default)]
struct PartitionRecords {
    events: Vec<OrderEvent>,
    poison_at: Vec<usize>,
    records: usize,
}

impl PartitionRecords {
    fn push(&mut self, event: Option<OrderEvent>) {
        match event {
            Some(event) => self.events.push(event),
            None => self.poison_at.push(self.records),
        }
        self.records += 1;
    }

    /// The events of records `from..to`, and how many of them were poison.
    fn slice(&self, from: usize, to: usize) -> (&[OrderEvent], u64) {
        let p0 = self.poison_at.partition_point(|i| *i < from);
        let p1 = self.poison_at.partition_point(|i| *i < to);
        (&self.events[from - p0..to - p1], (p1 - p0) as u64)
    }
}

/// (d): the processor's store work (`orderly::batch::apply_batch`, what a
/// partition task calls per batch) on pre-decoded events, round-robin over
/// the partitions, one flush per round. Returns the records processed.
fn store_alone(
    by_partition: &BTreeMap<i32, PartitionRecords>,
    batch_size: usize,
    cache_mb: u64,
    topic: &str,
) -> anyhow::Result<(u64, StorageOut)> {
    let dir = tempfile::Builder::new().prefix("orderly-bench-d-").tempdir()?;
    let store = Store::open(&dir.path().join("store"), cache_mb)?;
    let retention_ms = Config::defaults()?.inbox_retention()?.as_millis() as i64;
    let mut parts = Vec::new();
    for (p, records) in by_partition {
        parts.push((store.partition(topic, *p)?, records, 0usize, Checkpoint::starting_at(0)));
    }
    let (mut records_done, mut batches, mut flushes, mut keys, mut bytes, mut flushed) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut batch_micros = Vec::new();
    let mut flush_micros = Vec::new();
    let mut flush_time = Duration::ZERO;
    let started = Instant::now();
    loop {
        let mut wrote = false;
        for (tree, records, cursor, checkpoint) in parts.iter_mut() {
            if *cursor >= records.records {
                continue;
            }
            let t = Instant::now();
            let to = (*cursor + batch_size).min(records.records);
            let (events, dead) = records.slice(*cursor, to);
            let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
            let outcome = apply_batch(tree, checkpoint, events, dead, to as i64, now_ms, retention_ms)?;
            black_box(&outcome);
            keys += outcome.keys as u64;
            bytes += outcome.bytes as u64;
            batch_micros.push(t.elapsed().as_micros() as u64);
            records_done += (to - *cursor) as u64;
            *cursor = to;
            batches += 1;
            wrote = true;
        }
        if !wrote {
            break;
        }
        let t = Instant::now();
        flushed += store.flush()? as u64;
        let took = t.elapsed();
        flush_time += took;
        flush_micros.push(took.as_micros() as u64);
        flushes += 1;
    }
    let elapsed = started.elapsed();
    let per_event = |x: u64| x as f64 / records_done.max(1) as f64;
    let (b50, b99) = percentiles_ms(&mut batch_micros);
    let (f50, _) = percentiles_ms(&mut flush_micros);
    let states = keys.saturating_sub(batches);
    let out = StorageOut {
        batches,
        flushes,
        flushes_per_s: 0.0,
        keys_per_event: per_event(keys),
        bytes_per_event: per_event(bytes),
        flushed_bytes_per_event: per_event(flushed),
        avg_state_value_bytes: bytes as f64 / states.max(1) as f64,
        batch_p50_ms: b50,
        batch_p99_ms: b99,
        flush_p50_ms: f50,
        flush_share: flush_time.as_secs_f64() / elapsed.as_secs_f64().max(1e-9),
    };
    drop(parts);
    drop(store);
    Ok((records_done, out))
}

fn total_events(load: &LoadInfo) -> u64 {
    load.ends.values().map(|e| *e as u64).sum()
}

fn percentiles_ms(samples: &mut [u64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    (at(0.5), at(0.99))
}

/// Events the checkpoints cover, and whether they reached every end offset.
fn covered_by(trees: &[(i32, PartitionStore)], ends: &BTreeMap<i32, i64>) -> (u64, bool) {
    let mut processed = 0u64;
    let mut all = true;
    for (p, tree) in trees {
        let cp = tree.checkpoint().ok().flatten();
        let next = cp.map(|c| c.next_offset).unwrap_or(0);
        processed += cp.map(|c| (c.next_offset - c.start_offset).max(0) as u64).unwrap_or(0);
        all &= next >= ends.get(p).copied().unwrap_or(0);
    }
    (processed, all)
}

/// What the progress watcher saw during (c).
#[derive(Default)]
struct Progress {
    first_batch: Option<(Duration, u64)>,
    covered_at: Option<Duration>,
    threads_at_cover: HashMap<u32, (String, f64)>,
    process_cpu_at_cover: f64,
    broker_cpu_at_cover: Option<f64>,
    /// (milliseconds since start, events covered), every 20 ms.
    timeline: Vec<(u64, u64)>,
}

/// (c): the full processor, fresh group and store, until the store covers the ends.
async fn full_pipeline(
    args: &Args,
    load: &LoadInfo,
    registry: Registry,
    broker_pid: Option<u32>,
    timeout: Duration,
) -> anyhow::Result<(Phase, FullPipeline)> {
    let dir = tempfile::Builder::new().prefix("orderly-bench-c-").tempdir()?;
    let store_path = dir.path().join("store");
    let mut config = Config::defaults()?;
    passthrough(args, &mut config)?;
    config.kafka.bootstrap_servers = load.bootstrap.clone();
    config.kafka.group_id = format!("orderly-bench-{}", uuid::Uuid::new_v4().simple());
    config.kafka.input_topic = load.topic.clone();
    config.kafka.dlq_topic = load.dlq_topic.clone();
    config.store.path = store_path.clone();
    if let Some(n) = args.batch_max_records {
        config.processing.batch_max_records = n;
    }
    if let Some(ms) = args.batch_max_wait_ms {
        config.processing.batch_max_wait_ms = ms;
    }
    if let Some(mb) = args.cache_mb {
        config.store.cache_capacity_mb = mb;
    }
    let store = Store::open(&store_path, config.store.cache_capacity_mb)?;
    // Checkpoints are read straight from each partition's tree: `demo::covers`
    // goes through `Store::stats`, which also counts every order (a full scan
    // per poll).
    let trees = load
        .ends
        .keys()
        .map(|p| Ok((*p, store.partition(&load.topic, *p)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let covered = || covered_by(&trees, &load.ends);

    let threads_before = thread_cpu();
    let meter = Meter::start(broker_pid);
    // The watcher is an OS thread: while partition tasks keep both tokio
    // workers busy, tokio timers fire hundreds of milliseconds late (they are
    // only checked when a worker parks or every 61 task polls), so a
    // `tokio::time::sleep` loop would see the end late.
    let started = Instant::now();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let watcher = {
        let trees: Vec<(i32, PartitionStore)> = trees.clone();
        let ends = load.ends.clone();
        let stop = stop.clone();
        std::thread::Builder::new().name("bench-watcher".into()).spawn(move || {
            let mut p = Progress::default();
            while started.elapsed() < timeout && !stop.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(20));
                let (processed, all) = covered_by(&trees, &ends);
                p.timeline.push((started.elapsed().as_millis() as u64, processed));
                if processed > 0 && p.first_batch.is_none() {
                    p.first_batch = Some((started.elapsed(), processed));
                }
                if all {
                    p.covered_at = Some(started.elapsed());
                    p.threads_at_cover = thread_cpu();
                    p.process_cpu_at_cover = process_cpu(None).unwrap_or(0.0);
                    p.broker_cpu_at_cover = broker_pid.and_then(|pid| process_cpu(Some(pid)));
                    break;
                }
            }
            if p.covered_at.is_none() {
                eprintln!("pipeline: (c) stopped before the store covered the end offsets");
            }
            let _ = done_tx.send(());
            p
        })?
    };
    let result = Processor::new(config, store.clone(), registry)
        .run(async {
            let _ = done_rx.await;
        })
        .await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let progress = watcher.join().map_err(|_| anyhow!("the watcher thread panicked"))?;
    let report: RunReport = result?;
    let mut phase = meter.finish("c", "full orderly Processor (durable)", 0);
    let timed_out = progress.covered_at.is_none();
    let total_seconds = progress.covered_at.unwrap_or_else(|| started.elapsed()).as_secs_f64();
    let (processed, _) = covered();
    phase.events = processed;
    phase.seconds = total_seconds;
    phase.events_per_s = processed as f64 / total_seconds.max(1e-9);
    // CPU until covered (not the shutdown after it).
    if !timed_out {
        phase.cpu_seconds = progress.process_cpu_at_cover - meter.cpu;
        if let (Some(end), Some(start)) = (progress.broker_cpu_at_cover, meter.broker_cpu) {
            phase.broker_cpu_seconds = Some(end - start);
        }
    }
    let (join_seconds, steady) = match progress.first_batch {
        Some((at, at_events)) if total_seconds > at.as_secs_f64() => {
            (at.as_secs_f64(), (processed - at_events) as f64 / (total_seconds - at.as_secs_f64()))
        }
        _ => (0.0, phase.events_per_s),
    };
    phase.steady_events_per_s = steady;
    // Stalls: 20 ms samples after the first batch without any new checkpoint.
    let mut stalled_ms = 0u64;
    let mut longest_stall_ms = 0u64;
    let mut run_ms = 0u64;
    for pair in progress.timeline.windows(2) {
        let ((t0, n0), (t1, n1)) = (pair[0], pair[1]);
        if n0 == 0 || n0 >= total_events(load) {
            continue;
        }
        if n1 == n0 {
            stalled_ms += t1 - t0;
            run_ms += t1 - t0;
            longest_stall_ms = longest_stall_ms.max(run_ms);
        } else {
            run_ms = 0;
        }
    }
    eprintln!("pipeline: (c) {processed} events in {total_seconds:.2} s");
    let mut counts = Counts::default();
    for (_, tree) in &trees {
        if let Some(cp) = tree.checkpoint()? {
            counts.applied += cp.applied;
            counts.duplicates += cp.duplicates;
            counts.stale += cp.stale;
            counts.dead_lettered += cp.dead_lettered;
        }
    }
    let mut thread_cpu_seconds: BTreeMap<String, f64> = BTreeMap::new();
    for (tid, (name, secs)) in &progress.threads_at_cover {
        let before = threads_before.get(tid).map(|(_, s)| *s).unwrap_or(0.0);
        *thread_cpu_seconds.entry(thread_group(name)).or_default() += secs - before;
    }
    thread_cpu_seconds.retain(|_, s| *s >= 0.005);
    drop(trees);
    drop(store);
    let disk = dir_size(&store_path);
    let full = FullPipeline {
        total_seconds,
        join_seconds,
        steady_events_per_s: steady,
        batches: report.batches,
        avg_records_per_batch: processed as f64 / report.batches.max(1) as f64,
        batch_p50_ms: report.batch_p50_ms,
        batch_p99_ms: report.batch_p99_ms,
        flush_p50_ms: report.flush_p50_ms,
        flushes: report.flushes,
        flushes_per_s: report.flushes as f64 / total_seconds.max(1e-9),
        keys_written_per_event: report.keys_written as f64 / processed.max(1) as f64,
        store_disk_bytes_per_event: disk as f64 / processed.max(1) as f64,
        counters: counts,
        counters_match_expected: counts == load.expected,
        peak_rss_mib: phase.peak_rss_mib,
        rss_target_mib: 512.0,
        thread_cpu_seconds,
        stalled_seconds: stalled_ms as f64 / 1000.0,
        longest_stall_seconds: longest_stall_ms as f64 / 1000.0,
        timeline: if args.timeline { progress.timeline.clone() } else { Vec::new() },
        timed_out,
    };
    Ok((phase, full))
}

// -------------------------------------------------------------- /proc -------

/// Wall time, CPU and peak RSS of one phase.
struct Meter {
    started: Instant,
    cpu: f64,
    broker_pid: Option<u32>,
    broker_cpu: Option<f64>,
    rss_at_start_mib: f64,
}

impl Meter {
    fn start(broker_pid: Option<u32>) -> Self {
        reset_peak_rss();
        Meter {
            started: Instant::now(),
            cpu: process_cpu(None).unwrap_or(0.0),
            broker_pid,
            broker_cpu: broker_pid.and_then(|pid| process_cpu(Some(pid))),
            rss_at_start_mib: kib_to_mib(status_kib("VmRSS").unwrap_or(0)),
        }
    }

    fn finish(&self, key: &str, name: &str, events: u64) -> Phase {
        let seconds = self.started.elapsed().as_secs_f64();
        Phase {
            key: key.into(),
            name: name.into(),
            events,
            seconds,
            events_per_s: events as f64 / seconds.max(1e-9),
            steady_events_per_s: events as f64 / seconds.max(1e-9),
            cpu_seconds: process_cpu(None).unwrap_or(0.0) - self.cpu,
            broker_cpu_seconds: match (self.broker_pid.and_then(|pid| process_cpu(Some(pid))), self.broker_cpu) {
                (Some(end), Some(start)) => Some(end - start),
                _ => None,
            },
            peak_rss_mib: kib_to_mib(status_kib("VmHWM").unwrap_or(0)),
            rss_at_start_mib: self.rss_at_start_mib,
        }
    }

    /// `finish`, with the steady rate counted from the first record, seen
    /// `first` after the start.
    fn finish_read(&self, key: &str, name: &str, (events, first): (u64, Duration)) -> Phase {
        let mut phase = self.finish(key, name, events);
        let after = phase.seconds - first.as_secs_f64();
        if events > 1 && after > 0.0 {
            phase.steady_events_per_s = (events - 1) as f64 / after;
        }
        phase
    }
}

/// Resets VmHWM to the current RSS (Linux >= 4.0).
fn reset_peak_rss() {
    if let Err(e) = std::fs::write("/proc/self/clear_refs", "5") {
        eprintln!("pipeline: cannot reset the peak RSS ({e}); peaks include earlier phases");
    }
}

fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line[field.len() + 1..].trim().trim_end_matches("kB").trim().parse().ok()
}

fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// utime + stime in seconds from a /proc stat line (USER_HZ is 100 on Linux).
fn stat_cpu(stat: &str) -> Option<(String, f64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat[open + 1..close].to_string();
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((name, ticks as f64 / 100.0))
}

fn process_cpu(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        None => "/proc/self/stat".to_string(),
        Some(pid) => format!("/proc/{pid}/stat"),
    };
    stat_cpu(&std::fs::read_to_string(path).ok()?).map(|(_, s)| s)
}

/// CPU seconds of every live thread of this process, by thread id.
fn thread_cpu() -> HashMap<u32, (String, f64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return out };
    for entry in dir.flatten() {
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if let Some(cpu) = std::fs::read_to_string(entry.path().join("stat")).ok().and_then(|s| stat_cpu(&s)) {
            out.insert(tid, cpu);
        }
    }
    out
}

/// `rdk:broker1` and `rdk:broker-1` -> `rdk:broker`; `sled-io-3` -> `sled-io`.
fn thread_group(name: &str) -> String {
    name.trim_end_matches(|c: char| c.is_ascii_digit()).trim_end_matches(['-', '_', '#']).to_string()
}

fn dir_size(path: &Path) -> u64 {
    let Ok(dir) = std::fs::read_dir(path) else { return 0 };
    dir.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Returns freed heap to the OS so the next phase's RSS baseline does not
/// carry the previous phase's garbage.
fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: glibc's malloc_trim only releases free memory.
        unsafe {
            malloc_trim(0);
        }
    }
}

// ---------------------------------------------------------------- output ---

impl Results {
    fn table(&self) -> String {
        let w = &self.workload;
        let mut s = String::new();
        let mut line = |text: String| {
            s.push_str(&text);
            s.push('\n');
        };
        line(format!(
            "orderly pipeline benchmark: {} records ({} orders x {} events + {:.0}% duplicates, {:.0}% reorderings, poison {}), {} partitions",
            w.records,
            w.orders,
            w.events_per_order,
            w.duplicate_rate * 100.0,
            w.reorder_rate * 100.0,
            w.poison_rate,
            w.partitions
        ));
        line(format!("machine: {} cores; broker: {}", self.machine.cores, self.machine.broker));
        if w.partitions != w.requested_partitions {
            line(format!(
                "NOTE: {} partitions instead of {}: the mock cluster keeps only 5 MiB per partition and this workload is ~{:.0} MiB",
                w.partitions, w.requested_partitions, w.broker_log_mib
            ));
        }
        line(format!(
            "load: plan {:.1} s, produce {:.1} s ({:.0} events/s)",
            w.plan_seconds, w.produce_seconds, w.produce_events_per_s
        ));
        line(String::new());
        line(format!(
            "{:<4} {:<42} {:>10} {:>8} {:>12} {:>12} {:>8} {:>9} {:>10} {:>10}",
            "", "phase", "events", "secs", "events/s", "steady ev/s", "cpu s", "cpu µs/ev", "broker cpu", "peak RSS"
        ));
        for p in &self.phases {
            line(format!(
                "({:<2}) {:<42} {:>10} {:>8.2} {:>12.0} {:>12.0} {:>8.2} {:>9.2} {:>10} {:>6.0} MiB",
                p.key,
                p.name,
                p.events,
                p.seconds,
                p.events_per_s,
                p.steady_events_per_s,
                p.cpu_seconds,
                p.cpu_seconds * 1e6 / p.events.max(1) as f64,
                p.broker_cpu_seconds.map(|c| format!("{c:.2}")).unwrap_or_else(|| "-".into()),
                p.peak_rss_mib
            ));
        }
        line(String::new());
        if let (Some(r), Some(steady)) = (self.ratio_c_to_slower_of_a_d, self.ratio_c_to_slower_of_a_d_steady) {
            line(format!("(c) / slower of (a) and (d): {r:.2} (steady rates: {steady:.2})"));
        }
        if let Some(f) = &self.full_pipeline {
            line(format!(
                "(c) total {:.2} s = group join {:.2} s + processing; steady state {:.0} events/s{}",
                f.total_seconds,
                f.join_seconds,
                f.steady_events_per_s,
                if f.timed_out { "  (TIMED OUT)" } else { "" }
            ));
            line(format!(
                "(c) batches {} ({:.0} records/batch), batch latency p50 {:.2} ms, p99 {:.2} ms",
                f.batches, f.avg_records_per_batch, f.batch_p50_ms, f.batch_p99_ms
            ));
            line(format!(
                "(c) no checkpoint moved for {:.2} s of the processing time (longest stretch {:.2} s)",
                f.stalled_seconds, f.longest_stall_seconds
            ));
            line(format!(
                "(c) flushes {} ({:.1}/s, p50 {:.2} ms); keys written/event {:.3}; store on disk {:.0} bytes/event",
                f.flushes, f.flushes_per_s, f.flush_p50_ms, f.keys_written_per_event, f.store_disk_bytes_per_event
            ));
            line(format!(
                "(c) peak RSS {:.0} MiB (target < {:.0} MiB); counters {:?} match expected: {}",
                f.peak_rss_mib,
                f.rss_target_mib,
                f.counters,
                if f.counters_match_expected { "yes" } else { "NO" }
            ));
            let mut threads: Vec<(&String, &f64)> = f.thread_cpu_seconds.iter().collect();
            threads.sort_by(|a, b| b.1.total_cmp(a.1));
            let shown: Vec<String> = threads.iter().map(|(n, s)| format!("{n} {s:.2}")).collect();
            line(format!("(c) cpu s by thread: {}", shown.join(", ")));
        }
        if let Some(d) = &self.storage {
            line(format!(
                "(d) batches {}, flushes {} ({:.1}/s, p50 {:.2} ms, {:.0}% of the time); batch p50 {:.2} ms, p99 {:.2} ms",
                d.batches,
                d.flushes,
                d.flushes_per_s,
                d.flush_p50_ms,
                d.flush_share * 100.0,
                d.batch_p50_ms,
                d.batch_p99_ms
            ));
            line(format!(
                "(d) keys/event {:.3}, state bytes handed to sled/event {:.0} (avg state key+value {:.0} bytes), bytes flushed/event {:.0}",
                d.keys_per_event, d.bytes_per_event, d.avg_state_value_bytes, d.flushed_bytes_per_event
            ));
        }
        s
    }
}
