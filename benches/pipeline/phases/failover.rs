//! (fo) The failover drill: how long a SIGKILLed member's partitions stay
//! uncommitted, with standby replicas and without.
//!
//! For each mode (`processing.standby_replicas` 0 and 2; `--failover-rounds`
//! times, the order of the modes alternating), on the pre-loaded topic:
//!
//! 1. three `orderly run` children (the `--orderly-bin` or the one cargo
//!    built) in one fresh group, each with a store directory of its own, the
//!    changelog on, the HTTP endpoint on 127.0.0.1 and a free port,
//!    `kafka.session_timeout_ms` at `--failover-session-timeout-ms` (6000)
//!    and `processing.shutdown_timeout_ms` at half of it; the bench's knobs
//!    (`--commit-interval-ms`, ...) as in the side-by-side phases;
//! 2. waits until the group's committed offsets reach the input's end
//!    offsets, then until the instances' `/api/status` show every partition
//!    processing on exactly one of them and (with standbys) every partition
//!    an instance does not own kept there as a standby at lag 0;
//! 3. feeds the topic at `--failover-rate` events/s (2,000) from a thread:
//!    records read back from the start of the topic, re-sent to the
//!    partition they came from (so every partition gets its share; each is
//!    a duplicate or stale, processed and committed like any other); ~5 s;
//! 4. picks the instance owning the most partitions (its `/api/status`),
//!    SIGKILLs it, notes the topic's end offsets of those partitions as
//!    soon as it is reaped (milliseconds after the kill), and polls the
//!    group's committed offsets and the survivors' `/api/status` every 50 ms
//!    until every moved partition's committed offset reaches its end offset
//!    at the kill ("take-over") and every moved partition is
//!    processing on a survivor ("restored"); both from the kill, less the
//!    session timeout, which detecting the death takes whatever the design;
//! 5. stops the feed, samples the survivors' VmHWM and SIGTERMs them (all
//!    at once).
//!
//! Before the kill it also samples every instance's VmRSS, VmHWM and store
//! directory's size (as `du` counts it): the difference between the modes
//! (VmRSS and du),
//! over the two standby replicas, is what one replica (one more copy of
//! every partition, spread over the group) costs, given per 1M orders.
//! A wait that times out fails the run (reported, with no figures).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::Serialize;

use super::child::{field, lock, Instance};
use super::side_by_side::{
    create_topics_like_input, offsets_reader, overrides_toml, OrderlyConfig,
};
use crate::figures::{fmt_opt, median};
use crate::loader::LoadInfo;
use crate::measure::{dir_disk_usage, kib_to_mib, load1, pid_status_kib};
use crate::Args;

/// The phase's key in `--phases`.
pub const KEY: &str = "fo";
const INSTANCES: usize = 3;
/// `processing.standby_replicas` of the two modes.
const MODES: [u32; 2] = [0, 2];
/// How long the feed runs before the kill.
const FEED_BEFORE_KILL: Duration = Duration::from_secs(5);
/// Records read back from the topic for the feed to re-send (at most).
const FEED_SAMPLE: usize = 50_000;
const POLL: Duration = Duration::from_millis(50);

/// One failover run: one mode, one round.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverRun {
    pub key: String,
    pub standby_replicas: u32,
    pub round: usize,
    pub group_id: String,
    /// 1-minute load average when the run started.
    pub load1_at_start: f64,
    /// Why the run has no figures (a wait timed out, a child died, ...).
    pub failed: Option<String>,
    /// Spawn to the committed offsets covering the pre-loaded input.
    pub caught_up_seconds: Option<f64>,
    /// Then to every instance settled (and its standbys at lag 0).
    pub settled_seconds: Option<f64>,
    /// Which instance (0..3) was killed, and the partitions it owned.
    pub victim: Option<usize>,
    pub moved: Vec<i32>,
    /// The topic's end offsets of the moved partitions at the kill.
    pub ends_at_kill: BTreeMap<i32, i64>,
    /// The group's committed offsets of the moved partitions at the kill.
    pub committed_at_kill: BTreeMap<i32, i64>,
    /// Records the feed sent, and at what rate, over its whole run.
    pub fed: u64,
    pub fed_per_s: f64,
    pub feed_errors: u64,
    /// Kill to every moved partition committed past its end offset at the
    /// kill; and the same less the session timeout.
    pub takeover_seconds: Option<f64>,
    pub takeover_less_session_seconds: Option<f64>,
    /// Kill to every moved partition shown on a survivor (assigned), and
    /// shown processing there (restored), less the session timeout.
    pub assigned_less_session_seconds: Option<f64>,
    pub restored_less_session_seconds: Option<f64>,
    /// Changelog records the survivors restored for the moved partitions
    /// (their "restore finished" lines after the kill; a warm standby with
    /// nothing left to read logs none).
    pub restored_records: u64,
    /// Per instance, before the kill: VmRSS, VmHWM and the store directory
    /// (du).
    pub rss_mib_before_kill: Vec<f64>,
    pub peak_rss_mib_before_kill: Vec<f64>,
    pub store_mib_before_kill: Vec<f64>,
    /// The survivors' VmHWM just before their SIGTERM.
    pub survivors_peak_rss_mib: Vec<f64>,
}

/// Medians over one mode's runs that did not fail.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverRow {
    pub standby_replicas: u32,
    pub runs: usize,
    pub ok_runs: usize,
    pub takeover_less_session_seconds: Option<f64>,
    pub assigned_less_session_seconds: Option<f64>,
    pub restored_less_session_seconds: Option<f64>,
    pub restored_records: Option<f64>,
    /// The highest of the survivors' VmHWM.
    pub survivors_peak_rss_mib: Option<f64>,
    /// The three instances' VmRSS, VmHWM and store directories before the
    /// kill, summed.
    pub group_rss_mib_before_kill: Option<f64>,
    pub group_peak_rss_mib_before_kill: Option<f64>,
    pub group_store_mib_before_kill: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FailoverOut {
    pub orderly_bin: String,
    pub instances: usize,
    pub orders: usize,
    pub session_timeout_ms: u64,
    pub shutdown_timeout_ms: u64,
    pub feed_rate: f64,
    pub orderly_config_overrides: Vec<String>,
    pub runs: Vec<FailoverRun>,
    pub rows: Vec<FailoverRow>,
    /// One standby replica (one more copy of every partition, over the
    /// group), per 1M orders: (standbys 2 - standbys 0) / 2, from the rows'
    /// sums before the kill (disk: du; memory: VmRSS, the warm steady state,
    /// not VmHWM, which the catch-up's peak and who joined first decide).
    pub standby_disk_mib_per_million_orders: Option<f64>,
    pub standby_rss_mib_per_million_orders: Option<f64>,
}

struct Ctx<'a> {
    args: &'a Args,
    load: &'a LoadInfo,
    runtime: &'a tokio::runtime::Runtime,
    registry_url: String,
    orderly_bin: PathBuf,
    timeout: Duration,
    session_timeout_ms: u64,
    feed: Arc<Vec<FeedRecord>>,
}

/// A record of the workload, re-sent by the feed to the partition it came from.
struct FeedRecord {
    partition: i32,
    key: Vec<u8>,
    payload: Vec<u8>,
}

pub fn run(
    args: &Args,
    load: &LoadInfo,
    orders: usize,
    runtime: &tokio::runtime::Runtime,
    timeout: Duration,
) -> anyhow::Result<FailoverOut> {
    let session_timeout_ms = args.failover_session_timeout_ms;
    if session_timeout_ms < 2000 {
        bail!("--failover-session-timeout-ms must be at least 2000");
    }
    let feed = read_feed(args, load, timeout)?;
    eprintln!(
        "pipeline: (fo) {} records read back for the feed ({:.0} ev/s)",
        feed.len(),
        args.failover_rate
    );
    let ctx = Ctx {
        args,
        load,
        runtime,
        registry_url: args.registry.clone().context("--registry")?,
        orderly_bin: args
            .orderly_bin
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_orderly"))),
        timeout,
        session_timeout_ms,
        feed: Arc::new(feed),
    };
    let mut runs = Vec::new();
    for round in 0..args.failover_rounds.max(1) {
        let mut modes = MODES;
        if round % 2 == 1 {
            modes.reverse();
        }
        for standbys in modes {
            let r = one_run(&ctx, standbys, round);
            match &r.failed {
                Some(why) => eprintln!("pipeline: ({}) FAILED: {why}", r.key),
                None => eprintln!(
                    "pipeline: ({}) moved {:?}: committed past the kill {} s after it ({} s less the session timeout), restored {} s less it; {} changelog records restored",
                    r.key,
                    r.moved,
                    fmt_opt(r.takeover_seconds, 2),
                    fmt_opt(r.takeover_less_session_seconds, 2),
                    fmt_opt(r.restored_less_session_seconds, 2),
                    r.restored_records
                ),
            }
            runs.push(r);
        }
    }
    let rows: Vec<FailoverRow> = MODES
        .iter()
        .map(|&standbys| {
            let these: Vec<&FailoverRun> = runs
                .iter()
                .filter(|r| r.standby_replicas == standbys)
                .collect();
            let ok: Vec<&&FailoverRun> = these.iter().filter(|r| r.failed.is_none()).collect();
            let med = |f: &dyn Fn(&FailoverRun) -> Option<f64>| {
                median(ok.iter().filter_map(|r| f(r)).collect())
            };
            FailoverRow {
                standby_replicas: standbys,
                runs: these.len(),
                ok_runs: ok.len(),
                takeover_less_session_seconds: med(&|r| r.takeover_less_session_seconds),
                assigned_less_session_seconds: med(&|r| r.assigned_less_session_seconds),
                restored_less_session_seconds: med(&|r| r.restored_less_session_seconds),
                restored_records: med(&|r| Some(r.restored_records as f64)),
                survivors_peak_rss_mib: med(&|r| {
                    r.survivors_peak_rss_mib.iter().copied().reduce(f64::max)
                }),
                group_rss_mib_before_kill: med(&|r| Some(r.rss_mib_before_kill.iter().sum())),
                group_peak_rss_mib_before_kill: med(&|r| {
                    Some(r.peak_rss_mib_before_kill.iter().sum())
                }),
                group_store_mib_before_kill: med(&|r| Some(r.store_mib_before_kill.iter().sum())),
            }
        })
        .collect();
    let per_replica = |f: &dyn Fn(&FailoverRow) -> Option<f64>| {
        let without = rows.iter().find(|r| r.standby_replicas == 0).and_then(f)?;
        let with = rows.iter().find(|r| r.standby_replicas == 2).and_then(f)?;
        Some((with - without) / 2.0 / (orders as f64 / 1e6).max(1e-9))
    };
    Ok(FailoverOut {
        orderly_bin: ctx.orderly_bin.display().to_string(),
        instances: INSTANCES,
        orders,
        session_timeout_ms,
        shutdown_timeout_ms: session_timeout_ms / 2,
        feed_rate: args.failover_rate,
        orderly_config_overrides: overrides_toml(args).lines().map(String::from).collect(),
        standby_disk_mib_per_million_orders: per_replica(&|r| r.group_store_mib_before_kill),
        standby_rss_mib_per_million_orders: per_replica(&|r| r.group_rss_mib_before_kill),
        runs,
        rows,
    })
}

/// Reads up to `FEED_SAMPLE` records back from the start of the topic,
/// spread evenly over its partitions, and interleaves the partitions.
fn read_feed(args: &Args, load: &LoadInfo, timeout: Duration) -> anyhow::Result<Vec<FeedRecord>> {
    let consumer = super::plain_consumer(args, &load.bootstrap)?;
    let partitions: Vec<i32> = load
        .ends
        .iter()
        .filter(|(_, e)| **e > 0)
        .map(|(p, _)| *p)
        .collect();
    if partitions.is_empty() {
        bail!("(fo) the topic is empty: nothing to feed");
    }
    let quota = (FEED_SAMPLE / partitions.len()).max(1);
    let mut wanted: BTreeMap<i32, usize> = partitions
        .iter()
        .map(|p| (*p, quota.min(load.ends[p] as usize)))
        .collect();
    let mut tpl = TopicPartitionList::new();
    for p in &partitions {
        tpl.add_partition_offset(&load.topic, *p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let started = Instant::now();
    let mut by_partition: BTreeMap<i32, Vec<FeedRecord>> = BTreeMap::new();
    while wanted.values().any(|w| *w > 0) {
        if started.elapsed() > timeout {
            bail!("(fo) timed out reading the feed's records back");
        }
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = message?;
        let left = wanted.entry(message.partition()).or_default();
        if *left == 0 {
            continue;
        }
        *left -= 1;
        by_partition
            .entry(message.partition())
            .or_default()
            .push(FeedRecord {
                partition: message.partition(),
                key: message.key().unwrap_or_default().to_vec(),
                payload: message.payload().unwrap_or_default().to_vec(),
            });
    }
    consumer.unassign()?;
    let mut iters: Vec<_> = by_partition.into_values().map(Vec::into_iter).collect();
    let mut interleaved = Vec::new();
    loop {
        let before = interleaved.len();
        for it in &mut iters {
            interleaved.extend(it.next());
        }
        if interleaved.len() == before {
            break;
        }
    }
    Ok(interleaved)
}

/// The feed's thread: re-sends the records at `--failover-rate` per second,
/// cycling, until `stop`; returns (sent, errors, seconds).
fn start_feed(
    ctx: &Ctx<'_>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<(u64, u64, f64)>> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &ctx.load.bootstrap)
        .set("linger.ms", "5")
        .create()?;
    let (topic, records, rate) = (
        ctx.load.topic.clone(),
        ctx.feed.clone(),
        ctx.args.failover_rate.max(1.0),
    );
    Ok(std::thread::Builder::new()
        .name("bench-feed".into())
        .spawn(move || {
            let started = Instant::now();
            let (mut sent, mut errors, mut next) = (0u64, 0u64, 0usize);
            while !stop.load(Ordering::Relaxed) {
                let due = (started.elapsed().as_secs_f64() * rate) as u64;
                while sent < due {
                    let r = &records[next % records.len()];
                    let record = BaseRecord::to(&topic)
                        .partition(r.partition)
                        .key(r.key.as_slice())
                        .payload(r.payload.as_slice());
                    match producer.send(record) {
                        Ok(()) => {
                            sent += 1;
                            next += 1;
                        }
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                            break;
                        }
                        Err(_) => {
                            errors += 1;
                            next += 1;
                        }
                    }
                }
                producer.poll(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(5));
            }
            let seconds = started.elapsed().as_secs_f64();
            if producer.flush(Duration::from_secs(10)).is_err() {
                errors += producer.in_flight_count().max(0) as u64;
            }
            (sent, errors, seconds)
        })?)
}

fn numbers(status: &serde_json::Value, list: &str, field: &str) -> Vec<i64> {
    status[list]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r[field].as_i64()).collect())
        .unwrap_or_default()
}

/// The partitions `status` shows owned.
fn owned(status: &serde_json::Value) -> Vec<i32> {
    numbers(status, "partitions", "partition")
        .into_iter()
        .map(|p| p as i32)
        .collect()
}

/// The partitions `status` shows owned and processing.
fn processing(status: &serde_json::Value) -> Vec<i32> {
    status["partitions"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter(|r| r["phase"] == "processing")
                .filter_map(|r| r["partition"].as_i64().map(|p| p as i32))
                .collect()
        })
        .unwrap_or_default()
}

/// The group's committed offsets of `partitions` (missing: none committed).
fn committed(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: &[i32],
) -> anyhow::Result<BTreeMap<i32, i64>> {
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition(topic, *p);
    }
    let got = consumer.committed_offsets(tpl, Duration::from_secs(5))?;
    Ok(partitions
        .iter()
        .filter_map(|p| match got.find_partition(topic, *p)?.offset() {
            Offset::Offset(o) => Some((*p, o)),
            _ => None,
        })
        .collect())
}

fn one_run(ctx: &Ctx<'_>, standbys: u32, round: usize) -> FailoverRun {
    let key = format!(
        "fo-s{standbys}{}",
        if round == 0 {
            String::new()
        } else {
            format!("#{}", round + 1)
        }
    );
    let id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let group = format!("orderly-fo-s{standbys}-r{}-{id}", round + 1);
    let mut run = FailoverRun {
        key,
        standby_replicas: standbys,
        round,
        group_id: group,
        load1_at_start: load1(),
        failed: None,
        caught_up_seconds: None,
        settled_seconds: None,
        victim: None,
        moved: Vec::new(),
        ends_at_kill: BTreeMap::new(),
        committed_at_kill: BTreeMap::new(),
        fed: 0,
        fed_per_s: 0.0,
        feed_errors: 0,
        takeover_seconds: None,
        takeover_less_session_seconds: None,
        assigned_less_session_seconds: None,
        restored_less_session_seconds: None,
        restored_records: 0,
        rss_mib_before_kill: Vec::new(),
        peak_rss_mib_before_kill: Vec::new(),
        store_mib_before_kill: Vec::new(),
        survivors_peak_rss_mib: Vec::new(),
    };
    if let Err(e) = drill(ctx, &mut run) {
        // No half-measured figures.
        run.failed = Some(format!("{e:#}"));
        run.takeover_seconds = None;
        run.takeover_less_session_seconds = None;
        run.assigned_less_session_seconds = None;
        run.restored_less_session_seconds = None;
    }
    run
}

/// One run: its instances, in a temporary directory removed at the end.
fn drill(ctx: &Ctx<'_>, run: &mut FailoverRun) -> anyhow::Result<()> {
    let group = run.group_id.clone();
    let (output, dlq) = (format!("{group}-status"), format!("{group}-dlq"));
    create_topics_like_input(ctx.runtime, ctx.load, &[output.clone(), dlq.clone()])?;
    // ORDERLY_BENCH_KEEP_DIRS=1 keeps the instances' stores, configs and
    // logs (`orderly.err`) for a look afterwards; the path is printed.
    let keep = std::env::var_os("ORDERLY_BENCH_KEEP_DIRS").is_some();
    let dir = tempfile::Builder::new()
        .prefix("orderly-bench-fo-")
        .disable_cleanup(keep)
        .tempdir()?;
    if keep {
        eprintln!("pipeline: (fo) keeping {}", dir.path().display());
    }
    let kafka_extra = format!("session_timeout_ms = {}\n", ctx.session_timeout_ms);
    let processing_extra = format!(
        "shutdown_timeout_ms = {}\nstandby_replicas = {}\n",
        ctx.session_timeout_ms / 2,
        run.standby_replicas
    );
    let started = Instant::now();
    let mut instances = Vec::new();
    for i in 0..INSTANCES {
        let home = dir.path().join(format!("i{i}"));
        let config = OrderlyConfig {
            args: ctx.args,
            load: ctx.load,
            registry_url: &ctx.registry_url,
            group: &group,
            store: &home.join("store"),
            output: &output,
            dlq: &dlq,
            guarantee: "at_least_once",
            http_address: "127.0.0.1:0",
            kafka_extra: &kafka_extra,
            processing_extra: &processing_extra,
        }
        .toml();
        instances.push(Instance::spawn(&ctx.orderly_bin, &home, &config)?);
    }
    let result = measure(ctx, run, &mut instances, started);
    if result.is_err() {
        for (i, instance) in instances.iter().enumerate() {
            eprintln!(
                "pipeline: ({}) instance {i}'s last log lines:\n{}",
                run.key,
                instance.tail()
            );
        }
    }
    // All at once, so that none takes over another's partitions meanwhile.
    for instance in &mut instances {
        instance.terminate();
    }
    for instance in &mut instances {
        instance.wait_stopped();
    }
    result
}

/// Steps 2 to 5 on the running instances.
fn measure(
    ctx: &Ctx<'_>,
    run: &mut FailoverRun,
    instances: &mut [Instance],
    started: Instant,
) -> anyhow::Result<()> {
    let topic = &ctx.load.topic;
    let all: Vec<i32> = ctx.load.ends.keys().copied().collect();
    let offsets = offsets_reader(&ctx.load.bootstrap, &run.group_id)?;

    // 2. The pre-loaded input processed ...
    loop {
        alive(instances)?;
        if let Ok(c) = committed(&offsets, topic, &all) {
            if ctx
                .load
                .ends
                .iter()
                .all(|(p, end)| *end == 0 || c.get(p).is_some_and(|o| o >= end))
            {
                break;
            }
        }
        if started.elapsed() > ctx.timeout {
            bail!(
                "the group's committed offsets did not reach the input's end offsets within {:?}",
                ctx.timeout
            );
        }
        std::thread::sleep(POLL);
    }
    run.caught_up_seconds = Some(started.elapsed().as_secs_f64());
    // ... and the group settled, with its standbys warm.
    let settling = Instant::now();
    let mut seen = String::new();
    loop {
        alive(instances)?;
        let statuses: Vec<Option<serde_json::Value>> =
            instances.iter().map(Instance::status).collect();
        if statuses.iter().all(Option::is_some) {
            let statuses: Vec<&serde_json::Value> = statuses.iter().flatten().collect();
            seen = statuses
                .iter()
                .map(|s| {
                    format!(
                        "owned {:?} processing {:?} standbys {}",
                        owned(s),
                        processing(s),
                        s["standbys"]
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            if settled(&statuses, &all, run.standby_replicas) {
                break;
            }
        }
        if settling.elapsed() > ctx.timeout {
            bail!(
                "the instances did not settle (every partition processing on one of them, {}) within {:?}: {seen}",
                if run.standby_replicas == 0 {
                    "no standbys"
                } else {
                    "every instance's standbys at lag 0"
                },
                ctx.timeout
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    run.settled_seconds = Some(settling.elapsed().as_secs_f64());

    // 3. The feed, during 4.
    let stop = Arc::new(AtomicBool::new(false));
    let feed = start_feed(ctx, stop.clone())?;
    let outcome = kill_and_watch(ctx, run, instances, &offsets);
    stop.store(true, Ordering::Relaxed);
    let (sent, errors, seconds) = feed
        .join()
        .map_err(|_| anyhow::anyhow!("the feed's thread panicked"))?;
    run.fed = sent;
    run.feed_errors = errors;
    run.fed_per_s = sent as f64 / seconds.max(1e-9);
    outcome?;
    // 5. The survivors' peak RSS, before their SIGTERM.
    run.survivors_peak_rss_mib = instances
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != run.victim)
        .map(|(_, s)| kib_to_mib(pid_status_kib(s.pid, "VmHWM").unwrap_or(0)))
        .collect();
    Ok(())
}

fn alive(instances: &mut [Instance]) -> anyhow::Result<()> {
    for (i, instance) in instances.iter_mut().enumerate() {
        if let Some(status) = instance.exited() {
            bail!("instance {i} (pid {}) exited ({status})", instance.pid);
        }
    }
    Ok(())
}

/// Every partition processing on exactly one instance; with standbys, each
/// instance keeping (at lag 0) every partition it does not own when the
/// replicas cover every other member, some otherwise; without, none.
fn settled(statuses: &[&serde_json::Value], all: &[i32], standbys: u32) -> bool {
    let mut processed: Vec<i32> = statuses.iter().flat_map(|s| processing(s)).collect();
    processed.sort();
    let once = processed == all && statuses.iter().all(|s| owned(s) == processing(s));
    once && statuses.iter().all(|s| {
        let mine = owned(s);
        let kept: BTreeSet<i64> = numbers(s, "standbys", "partition").into_iter().collect();
        let lags = numbers(s, "standbys", "lag");
        let others: BTreeSet<i64> = all
            .iter()
            .filter(|p| !mine.contains(p))
            .map(|p| *p as i64)
            .collect();
        match standbys {
            0 => kept.is_empty(),
            n if n as usize >= INSTANCES - 1 => kept == others && lags.iter().all(|l| *l == 0),
            _ => !kept.is_empty() && lags.iter().all(|l| *l == 0),
        }
    })
}

/// Step 4: the kill, and the watch until the moved partitions are committed
/// past the kill and processing on survivors.
fn kill_and_watch(
    ctx: &Ctx<'_>,
    run: &mut FailoverRun,
    instances: &mut [Instance],
    offsets: &BaseConsumer,
) -> anyhow::Result<()> {
    let topic = &ctx.load.topic;
    std::thread::sleep(FEED_BEFORE_KILL);
    alive(instances)?;
    // The victim: the instance owning the most partitions.
    let mut owns: Vec<Vec<i32>> = Vec::new();
    for (i, instance) in instances.iter().enumerate() {
        let status = instance
            .status()
            .with_context(|| format!("instance {i}'s /api/status"))?;
        owns.push(owned(&status));
    }
    let victim = (0..instances.len())
        .max_by_key(|i| (owns[*i].len(), std::cmp::Reverse(*i)))
        .filter(|i| !owns[*i].is_empty())
        .context("no instance owns a partition")?;
    let moved = owns[victim].clone();
    // Sizes before the kill.
    for instance in instances.iter() {
        run.rss_mib_before_kill.push(kib_to_mib(
            pid_status_kib(instance.pid, "VmRSS").unwrap_or(0),
        ));
        run.peak_rss_mib_before_kill.push(kib_to_mib(
            pid_status_kib(instance.pid, "VmHWM").unwrap_or(0),
        ));
        run.store_mib_before_kill
            .push(dir_disk_usage(&instance.store) as f64 / (1024.0 * 1024.0));
    }
    let killed = Instant::now();
    instances[victim]
        .child
        .kill()
        .context("SIGKILL of the victim")?;
    let _ = instances[victim].child.wait();
    // The end offsets at the kill: read as soon as the victim is reaped, so
    // that it cannot have processed any record below them that it had not
    // processed at its death (a few milliseconds of the feed later).
    let mut ends = BTreeMap::new();
    for p in &moved {
        let (_, high) = offsets
            .fetch_watermarks(topic, *p, Duration::from_secs(5))
            .with_context(|| format!("the end offset of partition {p}"))?;
        ends.insert(*p, high);
    }
    run.victim = Some(victim);
    run.moved = moved.clone();
    run.ends_at_kill = ends.clone();
    let survivors: Vec<usize> = (0..instances.len()).filter(|i| *i != victim).collect();
    let session = ctx.session_timeout_ms as f64 / 1000.0;
    let (mut takeover, mut assigned, mut restored) = (None, None, None);
    let mut first_poll = true;
    let mut last_seen = String::new();
    while takeover.is_none() || restored.is_none() {
        for i in &survivors {
            if let Some(status) = instances[*i].exited() {
                bail!("survivor {i} (pid {}) exited ({status})", instances[*i].pid);
            }
        }
        if takeover.is_none() {
            if let Ok(c) = committed(offsets, topic, &moved) {
                let covered = ends
                    .iter()
                    .all(|(p, end)| c.get(p).is_some_and(|o| o >= end));
                if first_poll {
                    first_poll = false;
                    run.committed_at_kill = c.clone();
                    if covered {
                        bail!(
                            "the moved partitions' committed offsets {c:?} already reached their end offsets at the kill {ends:?}: is the feed reaching them?"
                        );
                    }
                }
                if covered {
                    takeover = Some(killed.elapsed().as_secs_f64());
                }
                last_seen = format!("committed {c:?}");
            }
        }
        if restored.is_none() {
            let statuses: Vec<serde_json::Value> = survivors
                .iter()
                .filter_map(|i| instances[*i].status())
                .collect();
            let shown: Vec<i32> = statuses.iter().flat_map(owned).collect();
            let processed: Vec<i32> = statuses.iter().flat_map(processing).collect();
            if assigned.is_none() && moved.iter().all(|p| shown.contains(p)) {
                assigned = Some(killed.elapsed().as_secs_f64());
            }
            if moved.iter().all(|p| processed.contains(p)) {
                restored = Some(killed.elapsed().as_secs_f64());
                assigned.get_or_insert(killed.elapsed().as_secs_f64());
            }
        }
        if killed.elapsed() > ctx.timeout {
            bail!(
                "the moved partitions {moved:?} were not {} within {:?} of the kill (end offsets at the kill {ends:?}; last seen {last_seen})",
                if takeover.is_none() {
                    "committed past their end offsets at the kill"
                } else {
                    "processing on a survivor"
                },
                ctx.timeout
            );
        }
        std::thread::sleep(POLL);
    }
    run.takeover_seconds = takeover;
    run.takeover_less_session_seconds = takeover.map(|t| t - session);
    run.assigned_less_session_seconds = assigned.map(|t| t - session);
    run.restored_less_session_seconds = restored.map(|t| t - session);
    run.restored_records = survivors
        .iter()
        .flat_map(|i| lock(&instances[*i].restores).clone())
        .filter(|(at, line)| {
            *at >= killed && field(line, "partition").is_some_and(|p| moved.contains(&(p as i32)))
        })
        .filter_map(|(_, line)| field(&line, "restored"))
        .map(|n| n.max(0) as u64)
        .sum();
    Ok(())
}

impl FailoverOut {
    pub fn table_lines(&self) -> Vec<String> {
        let mut lines = vec![
            String::new(),
            format!(
                "failover (fo): {} x orderly run, one SIGKILLed under a feed of {:.0} ev/s; session timeout {} ms (subtracted), shutdown timeout {} ms; {} orders; orderly: {}",
                self.instances,
                self.feed_rate,
                self.session_timeout_ms,
                self.shutdown_timeout_ms,
                self.orders,
                self.orderly_bin
            ),
        ];
        if !self.orderly_config_overrides.is_empty() {
            lines.push(format!(
                "orderly config overrides: {}",
                self.orderly_config_overrides.join("; ")
            ));
        }
        lines.push(format!(
            "{:<9} {:>6} {:>12} {:>11} {:>11} {:>13} {:>13} {:>14} {:>15} {:>16}",
            "standbys",
            "runs",
            "take-over s",
            "assigned s",
            "restored s",
            "tail records",
            "survivor MiB",
            "group RSS MiB",
            "group HWM MiB",
            "group store MiB"
        ));
        for r in &self.rows {
            let runs = if r.ok_runs == r.runs {
                r.runs.to_string()
            } else {
                format!("{}/{} ok", r.ok_runs, r.runs)
            };
            lines.push(format!(
                "{:<9} {:>6} {:>12} {:>11} {:>11} {:>13} {:>13} {:>14} {:>15} {:>16}",
                r.standby_replicas,
                runs,
                fmt_opt(r.takeover_less_session_seconds, 2),
                fmt_opt(r.assigned_less_session_seconds, 2),
                fmt_opt(r.restored_less_session_seconds, 2),
                fmt_opt(r.restored_records, 0),
                fmt_opt(r.survivors_peak_rss_mib, 0),
                fmt_opt(r.group_rss_mib_before_kill, 0),
                fmt_opt(r.group_peak_rss_mib_before_kill, 0),
                fmt_opt(r.group_store_mib_before_kill, 1),
            ));
        }
        lines.push(
            "  (medians; seconds from the kill less the session timeout: take-over = every moved partition committed past its end offset at the kill, \
             assigned / restored = every moved partition on a survivor / processing there; tail records: changelog records the survivors restored; \
             group RSS, HWM and store: the three instances' VmRSS, VmHWM and du before the kill, summed)"
                .into(),
        );
        lines.push(format!(
            "one standby replica (a copy of every partition, over the group), per 1M orders: disk {} MiB, RSS {} MiB",
            fmt_opt(self.standby_disk_mib_per_million_orders, 1),
            fmt_opt(self.standby_rss_mib_per_million_orders, 1)
        ));
        lines.push("per run:".into());
        for r in &self.runs {
            lines.push(match &r.failed {
                Some(why) => format!("  ({:<7}) load {:>4.1}  FAILED: {why}", r.key, r.load1_at_start),
                None => format!(
                    "  ({:<7}) load {:>4.1}  caught up {} s  settled {} s  killed #{} owning {:?}  fed {} ({:.0}/s, {} errors)  take-over {} s (less the session {} s)  assigned {}  restored {}  tail {} records  RSS before {:?} MiB (HWM {:?})  store {:?} MiB  survivors {:?} MiB",
                    r.key,
                    r.load1_at_start,
                    fmt_opt(r.caught_up_seconds, 1),
                    fmt_opt(r.settled_seconds, 1),
                    r.victim.map(|v| v.to_string()).unwrap_or_else(|| "-".into()),
                    r.moved,
                    r.fed,
                    r.fed_per_s,
                    r.feed_errors,
                    fmt_opt(r.takeover_seconds, 2),
                    fmt_opt(r.takeover_less_session_seconds, 2),
                    fmt_opt(r.assigned_less_session_seconds, 2),
                    fmt_opt(r.restored_less_session_seconds, 2),
                    r.restored_records,
                    r.rss_mib_before_kill.iter().map(|x| x.round() as i64).collect::<Vec<_>>(),
                    r.peak_rss_mib_before_kill.iter().map(|x| x.round() as i64).collect::<Vec<_>>(),
                    r.store_mib_before_kill.iter().map(|x| (x * 10.0).round() / 10.0).collect::<Vec<_>>(),
                    r.survivors_peak_rss_mib.iter().map(|x| x.round() as i64).collect::<Vec<_>>(),
                ),
            });
        }
        lines
    }
}
