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

use std::collections::BTreeMap;
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

use super::side_by_side::overrides_toml;
use crate::figures::{fmt_opt, median};
use crate::loader::LoadInfo;
use crate::Args;

mod drill;

use drill::one_run;

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
