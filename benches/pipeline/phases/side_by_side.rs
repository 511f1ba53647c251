//! Side by side (issue 20): each contender in its own process, on the same
//! pre-loaded topic, broker and registry, alternating.
//!
//! * (oa) / (ox): `orderly run` as a child process (the binary cargo built
//!   with this bench, `CARGO_BIN_EXE_orderly`, or `--orderly-bin`), with a
//!   generated config: a fresh group id and store directory, the changelog
//!   (`{group_id}-changelog`, created by orderly) and the outbox on (an
//!   output topic and a DLQ of its own, created here), the HTTP endpoint off,
//!   `processing.guarantee` at_least_once or exactly_once; the bench's knobs
//!   (`--cache-mb`, `--cache-max-bytes`, `--commit-interval-ms`,
//!   `--batch-max-records`, `--batch-max-wait-ms`, `--librdkafka`) go into
//!   it. It is stopped with SIGTERM once its group's committed offsets equal
//!   the input's end offsets; its result is then read back with
//!   `orderly state stats --json` and `orderly state dump`.
//! * (ka) / (kx): the Kafka Streams peer (`benches/kstreams/peer run`,
//!   `at_least_once` / `exactly_once_v2`, a fresh application id and state
//!   directory, `--dump-state`, `--until-signal`: it polls nothing of its
//!   own), stopped with SIGTERM like orderly once its group's committed
//!   offsets cover the input; its counts come from the JSON line it prints
//!   on SIGTERM and its states from the dump. `--peer-arg` adds arguments.
//! * (or) / (kr): each side's restore of its first at_least_once run's
//!   changelogs, by a cold process with empty state in that run's group, as
//!   a new instance restores: `orderly run` with a fresh store, and
//!   `peer run --restore-only` with a fresh state directory. Both are timed
//!   by the bench from the process's start until it is ready to process
//!   (orderly's `/readyz` answers 200 after every partition's "restore
//!   finished"; the peer prints its report once Streams is RUNNING with no
//!   restore active), and from the first partition's restore start to the
//!   last one's end (orderly's log lines as they arrive; the peer's
//!   `StateRestoreListener`, first `onRestoreStart` to last `onRestoreEnd`).
//!
//! Both contenders are measured the same way from the outside: the bench
//! polls the group's committed offsets (an OffsetFetch every 50 ms) and, at
//! the first poll that sees them cover the end offsets, samples the
//! contender's /proc/<pid>/stat (utime + stime) and VmHWM and the broker's
//! CPU. Rates: total = records / (cover - spawn); from the first record =
//! (records - 1) / (cover - first record), the first record being orderly's
//! first "first batch" log line (read from its stderr as it comes) or the
//! peer's `first_record_ms`; the steady middle = the records between the
//! first poll that saw 25% of the input's offsets committed and the first
//! that saw 75%, over the time between them (both are commits landing, so
//! neither start-up, JIT warm-up nor the last commit's timing is in it),
//! with the contender's and the broker's CPU over the same span (CPU per
//! event without start-up). A contender whose counts or states differ from
//! the workload's expectation gets no rate (the table says MISMATCH), and
//! no ratio is reported at a guarantee where any run did different work.
//!
//! Order within a round: for each guarantee, orderly then the peer in
//! rounds 1, 3, ..., the peer first in rounds 2, 4, ..., so neither always
//! runs right after the other's load on the broker.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::Serialize;

use orderly::testkit::orders::StateView;

use crate::figures::{fmt_opt, median};
use crate::figures::{Counts, Phase};
use crate::loader::LoadInfo;
use crate::measure::{load1, pid_status_kib, process_cpu};
use crate::Args;

/// What `--side-by-side` runs.
pub const PHASES: &str = "oa,ka,ox,kx,or,kr";
const KEYS: [&str; 6] = ["oa", "ka", "ox", "kx", "or", "kr"];

pub fn wanted(phases: &[String]) -> bool {
    phases.iter().any(|p| KEYS.contains(&p.as_str()))
}

pub fn read_expected(path: &Path) -> anyhow::Result<HashMap<String, StateView>> {
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    Ok(serde_json::from_reader(std::io::BufReader::new(file))?)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Contender {
    Orderly,
    KafkaStreams,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Guarantee {
    AtLeastOnce,
    ExactlyOnce,
}

impl Guarantee {
    fn orderly(self) -> &'static str {
        match self {
            Guarantee::AtLeastOnce => "at_least_once",
            Guarantee::ExactlyOnce => "exactly_once",
        }
    }
    fn streams(self) -> &'static str {
        match self {
            Guarantee::AtLeastOnce => "at_least_once",
            Guarantee::ExactlyOnce => "exactly_once_v2",
        }
    }
    fn short(self) -> &'static str {
        match self {
            Guarantee::AtLeastOnce => "alo",
            Guarantee::ExactlyOnce => "eos",
        }
    }
}

/// One contender's processing run.
#[derive(Debug, Clone, Serialize)]
pub struct ContenderRun {
    pub key: String,
    pub contender: Contender,
    pub guarantee: Guarantee,
    pub round: usize,
    pub group_id: String,
    pub pid: u32,
    /// 1-minute load average when the run started.
    pub load1_at_start: f64,
    pub events: u64,
    /// Spawn to the first poll that saw the committed offsets cover the input.
    pub seconds: f64,
    /// Spawn to the first record (orderly: its first "first batch" log line;
    /// the peer: `first_record_ms`).
    pub first_record_seconds: Option<f64>,
    /// None when the result differs from the expectation.
    pub events_per_s: Option<f64>,
    /// From the first record to the cover (None when the result differs).
    pub steady_events_per_s: Option<f64>,
    /// The steady middle (25% to 75% of the offsets committed).
    pub middle: Option<Middle>,
    /// The middle's events/s (None when the result differs).
    pub middle_events_per_s: Option<f64>,
    /// VmHWM of the contender's process at the covering poll (orderly: read
    /// again just before SIGTERM).
    pub peak_rss_mib: f64,
    /// utime + stime of the contender's process from spawn to cover.
    pub cpu_seconds: f64,
    pub cpu_seconds_per_million: f64,
    pub broker_cpu_seconds: Option<f64>,
    pub broker_cpu_seconds_per_million: Option<f64>,
    /// The broker's CPU seconds per second of the contender's run (spawn to
    /// cover): how busy the contender kept the broker.
    pub broker_cpu_per_second: Option<f64>,
    pub counts: Counts,
    pub counts_match: bool,
    /// Orders whose final state differs from the expectation (missing and
    /// extra orders included); None when not checked.
    pub states_mismatched: Option<u64>,
    /// Seconds from SIGTERM (orderly) / cover (peer) to the process's exit.
    pub shutdown_seconds: f64,
    /// What the contender said about itself (the peer's JSON line, orderly's
    /// `state stats --json` totals).
    pub own_report: serde_json::Value,
}

/// One restore.
#[derive(Debug, Clone, Serialize)]
pub struct RestoreRun {
    pub key: String,
    pub contender: Contender,
    pub how: String,
    pub changelog_records: u64,
    /// From the cold process's start until it is ready to process (both
    /// sides timed by the bench the same way).
    pub seconds: f64,
    pub records_per_s: f64,
    /// From the first partition's restore start to the last one's end: the
    /// peer's own listener timing; orderly's from its log lines (without its
    /// consumers' set-up, watermarks and checkpoint search).
    pub read_seconds: f64,
    pub read_records_per_s: f64,
    pub orders: u64,
    pub own_report: serde_json::Value,
}

/// Medians over rounds of one contender at one guarantee.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub contender: Contender,
    pub guarantee: Guarantee,
    pub rounds: usize,
    pub valid_rounds: usize,
    pub events_per_s: Option<f64>,
    pub steady_events_per_s: Option<f64>,
    pub middle_events_per_s: Option<f64>,
    pub peak_rss_mib: Option<f64>,
    /// With start-up (spawn to cover).
    pub cpu_seconds_per_million: Option<f64>,
    /// Without start-up (the steady middle).
    pub middle_cpu_seconds_per_million: Option<f64>,
    pub broker_cpu_seconds_per_million: Option<f64>,
    pub middle_broker_cpu_seconds_per_million: Option<f64>,
    pub broker_cpu_per_second: Option<f64>,
    /// Restore (at_least_once rows: the first round's changelog).
    pub restore_records_per_s: Option<f64>,
    pub restore_seconds: Option<f64>,
    pub restore_read_records_per_s: Option<f64>,
}

/// orderly / peer at one guarantee.
#[derive(Debug, Clone, Serialize)]
pub struct Ratios {
    pub guarantee: Guarantee,
    /// Why no ratio is reported: the contenders did not do the same work
    /// (a round whose counts or states differ from the workload's, or states
    /// not checked). Every ratio below is None then.
    pub refused: Option<String>,
    pub events_per_s: Option<f64>,
    pub steady_events_per_s: Option<f64>,
    pub middle_events_per_s: Option<f64>,
    pub peak_rss: Option<f64>,
    pub cpu_per_event: Option<f64>,
    pub middle_cpu_per_event: Option<f64>,
    pub broker_cpu_per_event: Option<f64>,
    pub restore_records_per_s: Option<f64>,
    /// None also when the two changelogs held different numbers of records
    /// (`restore_refused`): the times are of different work then, while the
    /// records/s ratios stay per record.
    pub restore_seconds: Option<f64>,
    pub restore_read_records_per_s: Option<f64>,
    /// Why `restore_seconds` is not reported though the runs matched.
    pub restore_refused: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SideBySideOut {
    pub orderly_bin: String,
    pub peer: String,
    pub orderly_config_overrides: Vec<String>,
    pub runs: Vec<ContenderRun>,
    pub restores: Vec<RestoreRun>,
    pub rows: Vec<Row>,
    pub ratios: Vec<Ratios>,
}

struct Ctx<'a> {
    args: &'a Args,
    load: &'a LoadInfo,
    registry_url: String,
    expected: Option<HashMap<String, StateView>>,
    broker_pid: Option<u32>,
    runtime: &'a tokio::runtime::Runtime,
    timeout: Duration,
    orderly_bin: PathBuf,
    peer: PathBuf,
}

pub fn run(
    args: &Args,
    load: &LoadInfo,
    phases: &[String],
    expected: Option<HashMap<String, StateView>>,
    broker_pid: Option<u32>,
    runtime: &tokio::runtime::Runtime,
    timeout: Duration,
) -> anyhow::Result<SideBySideOut> {
    let want = |key: &str| phases.iter().any(|p| p == key);
    let ctx = Ctx {
        args,
        load,
        registry_url: args.registry.clone().context("--registry")?,
        expected,
        broker_pid,
        runtime,
        timeout,
        orderly_bin: args
            .orderly_bin
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_orderly"))),
        peer: args
            .peer
            .clone()
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/kstreams/peer")),
    };
    if broker_pid.is_none() {
        eprintln!(
            "pipeline: no broker pid (--broker-pid or KAFKA_PID): the broker's CPU is not reported"
        );
    }
    let mut runs: Vec<ContenderRun> = Vec::new();
    for round in 0..args.rounds.max(1) {
        for guarantee in [Guarantee::AtLeastOnce, Guarantee::ExactlyOnce] {
            let (ok, kk) = match guarantee {
                Guarantee::AtLeastOnce => ("oa", "ka"),
                Guarantee::ExactlyOnce => ("ox", "kx"),
            };
            let mut order = vec![
                (Contender::Orderly, want(ok)),
                (Contender::KafkaStreams, want(kk)),
            ];
            if round % 2 == 1 {
                order.reverse();
            }
            for (contender, selected) in order {
                if !selected {
                    continue;
                }
                let r = match contender {
                    Contender::Orderly => orderly_run(&ctx, guarantee, round)?,
                    Contender::KafkaStreams => peer_run(&ctx, guarantee, round)?,
                };
                eprintln!(
                    "pipeline: ({}) {} events in {:.2} s: {} ev/s (from the first record {}, middle {}), peak RSS {:.0} MiB, cpu {:.2} s, broker cpu {}; counts {}, states {}",
                    r.key,
                    r.events,
                    r.seconds,
                    fmt_opt(r.events_per_s, 0),
                    fmt_opt(r.steady_events_per_s, 0),
                    fmt_opt(r.middle_events_per_s, 0),
                    r.peak_rss_mib,
                    r.cpu_seconds,
                    fmt_opt(r.broker_cpu_seconds, 2),
                    if r.counts_match { "match" } else { "MISMATCH" },
                    match r.states_mismatched {
                        Some(0) => "match".to_string(),
                        Some(n) => format!("{n} MISMATCHED"),
                        None => "not checked".into(),
                    }
                );
                runs.push(r);
            }
        }
    }
    let mut restores = Vec::new();
    let first = |c: Contender| {
        runs.iter()
            .find(|r| r.contender == c && r.guarantee == Guarantee::AtLeastOnce && r.round == 0)
            .cloned()
    };
    let orderly_source = match (want("or"), first(Contender::Orderly)) {
        (false, _) => None,
        (true, Some(source)) => Some(source),
        (true, None) => bail!("phase or restores what oa wrote to its changelog: run oa too"),
    };
    let peer_source = match (want("kr"), first(Contender::KafkaStreams)) {
        (false, _) => None,
        (true, Some(source)) => Some(source),
        (true, None) => bail!("phase kr restores what ka wrote to its changelogs: run ka too"),
    };
    // Alternating, orderly first in odd rounds, the peer first in even ones.
    for round in 0..args.restore_rounds.max(1) {
        let orderly = || {
            orderly_source
                .as_ref()
                .map(|source| orderly_restore(&ctx, source))
                .transpose()
        };
        let peer = || {
            peer_source
                .as_ref()
                .map(|source| peer_restore(&ctx, source))
                .transpose()
        };
        let pair = if round % 2 == 0 {
            [orderly()?, peer()?]
        } else {
            [peer()?, orderly()?]
        };
        restores.extend(pair.into_iter().flatten());
    }
    let mut rows = Vec::new();
    for guarantee in [Guarantee::AtLeastOnce, Guarantee::ExactlyOnce] {
        for contender in [Contender::Orderly, Contender::KafkaStreams] {
            let these: Vec<&ContenderRun> = runs
                .iter()
                .filter(|r| r.contender == contender && r.guarantee == guarantee)
                .collect();
            if these.is_empty() {
                continue;
            }
            let valid: Vec<&&ContenderRun> =
                these.iter().filter(|r| r.events_per_s.is_some()).collect();
            let med = |f: &dyn Fn(&ContenderRun) -> Option<f64>| {
                median(valid.iter().filter_map(|r| f(r)).collect())
            };
            // Restores (at_least_once rows): medians over --restore-rounds.
            let restored: Vec<&RestoreRun> = if guarantee == Guarantee::AtLeastOnce {
                restores
                    .iter()
                    .filter(|r| r.contender == contender)
                    .collect()
            } else {
                Vec::new()
            };
            let restore_median =
                |f: &dyn Fn(&RestoreRun) -> f64| median(restored.iter().map(|r| f(r)).collect());
            rows.push(Row {
                contender,
                guarantee,
                rounds: these.len(),
                valid_rounds: valid.len(),
                events_per_s: med(&|r| r.events_per_s),
                steady_events_per_s: med(&|r| r.steady_events_per_s),
                middle_events_per_s: med(&|r| r.middle_events_per_s),
                peak_rss_mib: med(&|r| Some(r.peak_rss_mib)),
                cpu_seconds_per_million: med(&|r| Some(r.cpu_seconds_per_million)),
                middle_cpu_seconds_per_million: med(&|r| {
                    r.middle.map(|m| m.cpu_seconds_per_million())
                }),
                broker_cpu_seconds_per_million: med(&|r| r.broker_cpu_seconds_per_million),
                middle_broker_cpu_seconds_per_million: med(&|r| {
                    r.middle.and_then(|m| m.broker_cpu_seconds_per_million())
                }),
                broker_cpu_per_second: med(&|r| r.broker_cpu_per_second),
                restore_records_per_s: restore_median(&|r| r.records_per_s),
                restore_seconds: restore_median(&|r| r.seconds),
                restore_read_records_per_s: restore_median(&|r| r.read_records_per_s),
            });
        }
    }
    let mut ratios = Vec::new();
    for guarantee in [Guarantee::AtLeastOnce, Guarantee::ExactlyOnce] {
        let row = |c: Contender| {
            rows.iter()
                .find(|r| r.contender == c && r.guarantee == guarantee)
        };
        if let (Some(o), Some(k)) = (row(Contender::Orderly), row(Contender::KafkaStreams)) {
            let these: Vec<&ContenderRun> =
                runs.iter().filter(|r| r.guarantee == guarantee).collect();
            let refused = different_work(&these);
            if let Some(why) = &refused {
                eprintln!(
                    "pipeline: no orderly / peer ratio at {}: {why}",
                    guarantee.orderly()
                );
            }
            let fair = refused.is_none();
            // The restores read the at_least_once runs' changelogs.
            let restore_refused =
                different_restores(&restores).filter(|_| guarantee == Guarantee::AtLeastOnce);
            if let Some(why) = restore_refused.as_ref().filter(|_| fair) {
                eprintln!("pipeline: no orderly / peer restore time ratio: {why}");
            }
            let ratio = |a: Option<f64>, b: Option<f64>| {
                a.zip(b)
                    .filter(|(_, b)| fair && *b > 0.0)
                    .map(|(a, b)| a / b)
            };
            ratios.push(Ratios {
                guarantee,
                refused,
                events_per_s: ratio(o.events_per_s, k.events_per_s),
                steady_events_per_s: ratio(o.steady_events_per_s, k.steady_events_per_s),
                middle_events_per_s: ratio(o.middle_events_per_s, k.middle_events_per_s),
                peak_rss: ratio(o.peak_rss_mib, k.peak_rss_mib),
                cpu_per_event: ratio(o.cpu_seconds_per_million, k.cpu_seconds_per_million),
                middle_cpu_per_event: ratio(
                    o.middle_cpu_seconds_per_million,
                    k.middle_cpu_seconds_per_million,
                ),
                broker_cpu_per_event: ratio(
                    o.broker_cpu_seconds_per_million,
                    k.broker_cpu_seconds_per_million,
                ),
                restore_records_per_s: ratio(o.restore_records_per_s, k.restore_records_per_s),
                restore_seconds: ratio(o.restore_seconds, k.restore_seconds)
                    .filter(|_| restore_refused.is_none()),
                restore_read_records_per_s: ratio(
                    o.restore_read_records_per_s,
                    k.restore_read_records_per_s,
                ),
                restore_refused,
            });
        }
    }
    Ok(SideBySideOut {
        orderly_bin: ctx.orderly_bin.display().to_string(),
        peer: ctx.peer.display().to_string(),
        orderly_config_overrides: overrides_toml(args).lines().map(String::from).collect(),
        runs,
        restores,
        rows,
        ratios,
    })
}

/// Why the runs of one guarantee cannot be compared, if they cannot: a
/// ratio means something only when both contenders read the same input and
/// made the same decisions into the same states, which the bench checks
/// against the workload's expectation on every run (the restores read the
/// changelogs the first at_least_once runs wrote, so they follow).
fn different_work(runs: &[&ContenderRun]) -> Option<String> {
    for contender in [Contender::Orderly, Contender::KafkaStreams] {
        if !runs.iter().any(|r| r.contender == contender) {
            return Some(format!("no run of {contender:?}"));
        }
    }
    let events: Vec<u64> = runs.iter().map(|r| r.events).collect();
    if events.iter().any(|e| *e != events[0]) {
        return Some(format!("the runs read different inputs: {events:?} events"));
    }
    for r in runs {
        if !r.counts_match {
            return Some(format!(
                "({}) counted {:?}, not the workload's counts",
                r.key, r.counts
            ));
        }
        match r.states_mismatched {
            Some(0) => {}
            Some(n) => {
                return Some(format!(
                    "({}) ended with {n} orders in another state",
                    r.key
                ))
            }
            None => {
                return Some(format!(
                    "({}) final states not checked (the workload's expected states are missing)",
                    r.key
                ))
            }
        }
    }
    None
}

/// Why the restores' times cannot be compared, if they cannot: each side
/// restores the changelog its own first at_least_once run wrote, and a side
/// that wrote more records (more write-outs of the same orders) restores
/// more, so its time is of more work. Allowed: 5% apart.
fn different_restores(restores: &[RestoreRun]) -> Option<String> {
    let most = |c: Contender| {
        restores
            .iter()
            .filter(|r| r.contender == c)
            .map(|r| r.changelog_records)
            .max()
    };
    let (o, k) = (most(Contender::Orderly)?, most(Contender::KafkaStreams)?);
    let (low, high) = (o.min(k), o.max(k));
    (high as f64 > low as f64 * 1.05).then(|| {
        format!(
            "orderly's changelog held {o} records and the peer's {k} (the ready times are of different work; records/s stay per record)"
        )
    })
}

/// Stops a contender the same way on both sides once its committed offsets
/// covered the input: its VmHWM just before (shutdown's own allocations not
/// counted), then SIGTERM, then SIGKILL after `grace`. Returns the VmHWM
/// (`hwm_kib` if it can no longer be read), the exit status and the seconds
/// it took to stop.
fn stop(
    child: &mut Child,
    hwm_kib: u64,
    grace: Duration,
) -> anyhow::Result<(u64, std::process::ExitStatus, f64)> {
    let pid = child.id();
    let hwm_kib = pid_status_kib(pid, "VmHWM").unwrap_or(hwm_kib);
    let term_at = Instant::now();
    super::child::sigterm(pid)?;
    let (status, _) = super::child::wait_or_kill(child, grace)?;
    Ok((hwm_kib, status, term_at.elapsed().as_secs_f64()))
}

fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

#[derive(Clone, Copy, Default)]
struct Sample {
    cpu: f64,
    hwm_kib: u64,
}

fn sample(pid: u32) -> Option<Sample> {
    Some(Sample {
        cpu: process_cpu(Some(pid))?,
        hwm_kib: pid_status_kib(pid, "VmHWM")?,
    })
}

/// What the watcher saw when the committed offsets covered the input.
struct Covered {
    at: Duration,
    sample: Sample,
    broker_cpu: Option<f64>,
    middle: Option<Middle>,
}

/// The steady middle of a run: from the first poll that saw at least
/// `MIDDLE.0` of the input's offsets committed to the first that saw
/// `MIDDLE.1`. Both ends are commits the poll saw land, so the rate between
/// them is the contender's own, without its start-up or its last commit.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Middle {
    pub from_seconds: f64,
    pub to_seconds: f64,
    /// Committed offsets at each end, as a share of the input's.
    pub from_share: f64,
    pub to_share: f64,
    /// The input's records between the two ends.
    pub events: f64,
    /// The contender's CPU (utime + stime) between the two ends.
    pub cpu_seconds: f64,
    pub broker_cpu_seconds: Option<f64>,
}

/// The share of the input's offsets that bounds the steady middle.
const MIDDLE: (f64, f64) = (0.25, 0.75);

/// Polls that saw the committed offsets move, after the middle's first
/// and up to its last, below which there is no middle: over fewer, the
/// rate is that of one or two commits landing (a contender that writes
/// out once a second per partition covers half of a 2 s run in one or
/// two), not a steady one. A run of 1M events is that short for orderly.
const MIDDLE_MIN_STEPS: usize = 4;

/// One poll that saw the committed offsets move.
#[derive(Clone, Copy)]
struct Progress {
    at: Duration,
    committed: i64,
    cpu: f64,
    broker_cpu: Option<f64>,
}

/// The steady middle of `seen` (polls that saw progress, in time order)
/// for an input of `total` offsets holding `events` records; None when
/// fewer than [`MIDDLE_MIN_STEPS`] commits landed in it.
fn middle_of(seen: &[Progress], total: i64, events: u64) -> Option<Middle> {
    if total <= 0 {
        return None;
    }
    let share = |p: &Progress| p.committed as f64 / total as f64;
    let first = seen.iter().position(|p| share(p) >= MIDDLE.0)?;
    let last = seen.iter().position(|p| share(p) >= MIDDLE.1)?;
    let (from, to) = (&seen[first], &seen[last]);
    if to.committed <= from.committed || to.at <= from.at {
        return None;
    }
    // Each of `seen` saw the offsets move.
    if last - first < MIDDLE_MIN_STEPS {
        return None;
    }
    let per_offset = events as f64 / total as f64;
    Some(Middle {
        from_seconds: from.at.as_secs_f64(),
        to_seconds: to.at.as_secs_f64(),
        from_share: share(from),
        to_share: share(to),
        events: (to.committed - from.committed) as f64 * per_offset,
        cpu_seconds: to.cpu - from.cpu,
        broker_cpu_seconds: to.broker_cpu.zip(from.broker_cpu).map(|(t, f)| t - f),
    })
}

impl Middle {
    pub fn events_per_s(&self) -> f64 {
        self.events / (self.to_seconds - self.from_seconds).max(1e-9)
    }
    pub fn cpu_seconds_per_million(&self) -> f64 {
        self.cpu_seconds / (self.events / 1e6).max(1e-9)
    }
    pub fn broker_cpu_seconds_per_million(&self) -> Option<f64> {
        self.broker_cpu_seconds
            .map(|c| c / (self.events / 1e6).max(1e-9))
    }
}

/// Polls `group`'s committed offsets every 50 ms until they equal the
/// input's end offsets, sampling the child meanwhile.
fn watch(
    ctx: &Ctx<'_>,
    child: &mut Child,
    group: &str,
    started: Instant,
    what: &str,
) -> anyhow::Result<Covered> {
    let pid = child.id();
    let consumer = offsets_reader(&ctx.load.bootstrap, group)?;
    let mut tpl = TopicPartitionList::new();
    for p in ctx.load.ends.keys() {
        tpl.add_partition(&ctx.load.topic, *p);
    }
    let mut last = Sample::default();
    let mut errors = 0u32;
    let total: i64 = ctx.load.ends.values().sum();
    let mut seen: Vec<Progress> = Vec::new();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("{what} (pid {pid}) exited ({status}) before its group's committed offsets covered the input");
        }
        if let Some(s) = sample(pid) {
            last = s;
        }
        match consumer.committed_offsets(tpl.clone(), Duration::from_secs(5)) {
            Ok(committed) => {
                let at = started.elapsed();
                let offset = |p: i32| match committed
                    .find_partition(&ctx.load.topic, p)
                    .map(|e| e.offset())
                {
                    Some(Offset::Offset(o)) => o,
                    _ => 0,
                };
                let sum: i64 = ctx
                    .load
                    .ends
                    .iter()
                    .map(|(p, end)| offset(*p).min(*end))
                    .sum();
                if seen.last().map(|p| p.committed) != Some(sum) {
                    if let Some(s) = sample(pid) {
                        last = s;
                    }
                    seen.push(Progress {
                        at,
                        committed: sum,
                        cpu: last.cpu,
                        broker_cpu: ctx.broker_pid.and_then(|b| process_cpu(Some(b))),
                    });
                }
                let all = ctx
                    .load
                    .ends
                    .iter()
                    .all(|(p, end)| *end == 0 || offset(*p) >= *end);
                if all {
                    let broker_cpu = ctx.broker_pid.and_then(|b| process_cpu(Some(b)));
                    if let Some(s) = sample(pid) {
                        last = s;
                    }
                    return Ok(Covered {
                        at,
                        sample: last,
                        broker_cpu,
                        middle: middle_of(&seen, total, ctx.load.total_events()),
                    });
                }
            }
            Err(e) => {
                errors += 1;
                if errors <= 3 {
                    eprintln!("pipeline: {what}: committed offsets of {group}: {e}");
                }
            }
        }
        if started.elapsed() > ctx.timeout {
            let _ = child.kill();
            bail!(
                "{what}: its group's committed offsets did not cover the input within {:?}",
                ctx.timeout
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn create_topics(ctx: &Ctx<'_>, names: &[String]) -> anyhow::Result<()> {
    create_topics_like_input(ctx.runtime, ctx.load, names)
}

/// Creates `names` on the input's broker, with the input's partition count.
pub(super) fn create_topics_like_input(
    runtime: &tokio::runtime::Runtime,
    load: &LoadInfo,
    names: &[String],
) -> anyhow::Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &load.bootstrap)
        .create()?;
    let topics: Vec<NewTopic<'_>> = names
        .iter()
        .map(|n| NewTopic::new(n, load.partitions, TopicReplication::Fixed(1)))
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in runtime.block_on(admin.create_topics(&topics, &options))? {
        if let Err((name, code)) = result {
            bail!("cannot create topic {name}: {code}");
        }
    }
    Ok(())
}

/// A consumer in `group` that only reads its committed offsets (never
/// subscribes or commits).
/// Waits until `group` has no member (ListGroups' member list); how long.
fn wait_group_empty(bootstrap: &str, group: &str, timeout: Duration) -> anyhow::Result<Duration> {
    let admin: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let started = Instant::now();
    loop {
        let list = admin.fetch_group_list(Some(group), Duration::from_secs(5))?;
        let members = list
            .groups()
            .iter()
            .map(|g| g.members().len())
            .sum::<usize>();
        if members == 0 {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            bail!("group {group} still has {members} members after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub(super) fn offsets_reader(bootstrap: &str, group: &str) -> anyhow::Result<BaseConsumer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?)
}

/// The bench's knobs as orderly config lines: ([processing], [store],
/// [kafka.librdkafka]) bodies.
pub(super) fn overrides(args: &Args) -> (String, String, String) {
    let mut processing = String::new();
    if let Some(ms) = args.commit_interval_ms {
        processing += &format!("commit_interval_ms = {ms}\n");
    }
    if let Some(b) = args.cache_max_bytes {
        processing += &format!("cache_max_bytes = {b}\n");
    }
    if let Some(n) = args.batch_max_records {
        processing += &format!("batch_max_records = {n}\n");
    }
    if let Some(ms) = args.batch_max_wait_ms {
        processing += &format!("batch_max_wait_ms = {ms}\n");
    }
    let mut store = String::new();
    if let Some(mb) = args.cache_mb {
        store += &format!("cache_capacity_mb = {mb}\n");
    }
    let mut librdkafka = String::new();
    for setting in &args.librdkafka {
        if let Some((k, v)) = setting.split_once('=') {
            librdkafka += &format!("{} = {}\n", toml_str(k.trim()), toml_str(v.trim()));
        }
    }
    (processing, store, librdkafka)
}

pub(super) fn overrides_toml(args: &Args) -> String {
    let (p, s, l) = overrides(args);
    let mut out = String::new();
    for (section, body) in [("processing", p), ("store", s), ("kafka.librdkafka", l)] {
        for line in body.lines() {
            out += &format!("{section}.{line}\n");
        }
    }
    out
}

pub(super) fn toml_str(s: &str) -> String {
    toml::Value::String(s.into()).to_string()
}

fn orderly_config(
    ctx: &Ctx<'_>,
    group: &str,
    store: &Path,
    output: &str,
    dlq: &str,
    guarantee: Guarantee,
) -> String {
    OrderlyConfig {
        args: ctx.args,
        load: ctx.load,
        registry_url: &ctx.registry_url,
        group,
        store,
        output,
        dlq,
        guarantee: guarantee.orderly(),
        http_address: "",
        kafka_extra: "",
        processing_extra: "",
    }
    .toml()
}

/// A generated `orderly run` config: the bench's topic, broker, registry
/// and knobs (`overrides`), and what the phase adds.
pub(super) struct OrderlyConfig<'a> {
    pub args: &'a Args,
    pub load: &'a LoadInfo,
    pub registry_url: &'a str,
    pub group: &'a str,
    pub store: &'a Path,
    pub output: &'a str,
    pub dlq: &'a str,
    /// `processing.guarantee`.
    pub guarantee: &'a str,
    /// `http.address` ("" turns the endpoint off).
    pub http_address: &'a str,
    /// More `[kafka]` lines.
    pub kafka_extra: &'a str,
    /// More `[processing]` lines.
    pub processing_extra: &'a str,
}

impl OrderlyConfig<'_> {
    pub fn toml(&self) -> String {
        let (processing, store_extra, librdkafka) = overrides(self.args);
        format!(
            "[kafka]\nbootstrap_servers = {}\ngroup_id = {}\ninput_topic = {}\ndlq_topic = {}\noutput_topic = {}\n{}\n\
             [kafka.librdkafka]\n{librdkafka}\n[registry]\nurl = {}\n\n[store]\npath = {}\n{store_extra}\n\
             [http]\naddress = {}\n\n[processing]\nguarantee = \"{}\"\n{processing}{}",
            toml_str(&self.load.bootstrap),
            toml_str(self.group),
            toml_str(&self.load.topic),
            toml_str(self.dlq),
            toml_str(self.output),
            self.kafka_extra,
            toml_str(self.registry_url),
            toml_str(&self.store.display().to_string()),
            toml_str(self.http_address),
            self.guarantee,
            self.processing_extra,
        )
    }
}

/// Orders whose dumped state (JSON lines with `order_id` ... and
/// `partition`) differs from the expectation, missing and extra included.
fn check_dump(ctx: &Ctx<'_>, lines: impl Iterator<Item = String>) -> anyhow::Result<Option<u64>> {
    let Some(expected) = &ctx.expected else {
        return Ok(None);
    };
    let mut seen = 0u64;
    let mut bad = 0u64;
    let mut shown = 0;
    for line in lines {
        if line.trim().is_empty() {
            continue;
        }
        let got: StateView =
            serde_json::from_str(&line).with_context(|| format!("state dump line {line}"))?;
        seen += 1;
        if expected.get(&got.order_id) != Some(&got) {
            bad += 1;
            if shown < 3 {
                shown += 1;
                eprintln!(
                    "pipeline: state differs: got {got:?}, expected {:?}",
                    expected.get(&got.order_id)
                );
            }
        }
    }
    // Each dumped order is distinct, so the expected ones not seen are
    // expected - (seen - extra); extras are counted in `bad` already.
    let matched = seen - bad;
    Ok(Some(bad + (expected.len() as u64).saturating_sub(matched)))
}

fn orderly_run(ctx: &Ctx<'_>, guarantee: Guarantee, round: usize) -> anyhow::Result<ContenderRun> {
    let key = format!(
        "o{}{}",
        &guarantee.short()[..1].replace('e', "x"),
        if round == 0 {
            String::new()
        } else {
            (round + 1).to_string()
        }
    );
    let id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let group = format!("orderly-side-{}-r{}-{id}", guarantee.short(), round + 1);
    let (output, dlq) = (format!("{group}-status"), format!("{group}-dlq"));
    create_topics(ctx, &[output.clone(), dlq.clone()])?;
    // ORDERLY_BENCH_KEEP_DIRS=1 keeps the run's store, config and log
    // (`orderly.err`) for a look afterwards; the path is printed.
    let keep = std::env::var_os("ORDERLY_BENCH_KEEP_DIRS").is_some();
    let dir = tempfile::Builder::new()
        .prefix("orderly-bench-side-")
        .disable_cleanup(keep)
        .tempdir()?;
    if keep {
        eprintln!("pipeline: ({}) keeping {}", key, dir.path().display());
    }
    let config_path = dir.path().join("orderly.toml");
    std::fs::write(
        &config_path,
        orderly_config(
            ctx,
            &group,
            &dir.path().join("store"),
            &output,
            &dlq,
            guarantee,
        ),
    )?;
    let err_path = dir.path().join("orderly.err");
    let load1_at_start = load1();
    let broker_cpu_start = ctx.broker_pid.and_then(|b| process_cpu(Some(b)));
    let started = Instant::now();
    let mut child = super::child::run_command(&ctx.orderly_bin, &config_path)
        .spawn()
        .with_context(|| format!("starting {}", ctx.orderly_bin.display()))?;
    let pid = child.id();
    let first_batch: Arc<Mutex<Option<Duration>>> = Arc::default();
    let reader = {
        let stderr = child.stderr.take().context("orderly's stderr")?;
        let first_batch = first_batch.clone();
        let mut log = std::fs::File::create(&err_path)?;
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("first batch") {
                    let mut f = first_batch.lock().unwrap_or_else(|e| e.into_inner());
                    f.get_or_insert(started.elapsed());
                }
                let _ = writeln!(log, "{line}");
            }
        })
    };
    let covered = watch(
        ctx,
        &mut child,
        &group,
        started,
        &format!("({key}) orderly run"),
    );
    let covered = match covered {
        Ok(c) => c,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            let _ = reader.join();
            let tail = std::fs::read_to_string(&err_path).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(20).collect();
            eprintln!(
                "pipeline: orderly's last log lines:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
            return Err(e);
        }
    };
    let (hwm_kib, status, shutdown_seconds) =
        stop(&mut child, covered.sample.hwm_kib, Duration::from_secs(60))?;
    let _ = reader.join();
    if !status.success() {
        eprintln!(
            "pipeline: ({key}) orderly run exited {status} after SIGTERM (log: {})",
            err_path.display()
        );
    }
    // Its result, read back as a user would.
    let stats = Command::new(&ctx.orderly_bin)
        .arg("--config")
        .arg(&config_path)
        .args(["state", "stats", "--json"])
        .output()?;
    if !stats.status.success() {
        bail!(
            "orderly state stats: {}",
            String::from_utf8_lossy(&stats.stderr)
        );
    }
    let stats: serde_json::Value =
        serde_json::from_slice(&stats.stdout).context("orderly state stats --json")?;
    let totals = stats["totals"].clone();
    let n = |k: &str| totals[k].as_u64().unwrap_or(u64::MAX);
    let counts = Counts {
        applied: n("applied"),
        duplicates: n("duplicates"),
        stale: n("stale"),
        dead_lettered: n("dead_lettered"),
    };
    let states_mismatched = if ctx.expected.is_some() {
        let dump = Command::new(&ctx.orderly_bin)
            .arg("--config")
            .arg(&config_path)
            .args(["state", "dump"])
            .output()?;
        if !dump.status.success() {
            bail!(
                "orderly state dump: {}",
                String::from_utf8_lossy(&dump.stderr)
            );
        }
        check_dump(
            ctx,
            String::from_utf8(dump.stdout)?.lines().map(String::from),
        )?
    } else {
        None
    };
    let first = *first_batch.lock().unwrap_or_else(|e| e.into_inner());
    Ok(finish(
        ctx,
        key,
        Contender::Orderly,
        guarantee,
        round,
        group,
        pid,
        load1_at_start,
        &covered,
        first,
        hwm_kib,
        broker_cpu_start,
        counts,
        states_mismatched,
        shutdown_seconds,
        totals,
    ))
}

#[allow(clippy::too_many_arguments)]
fn finish(
    ctx: &Ctx<'_>,
    key: String,
    contender: Contender,
    guarantee: Guarantee,
    round: usize,
    group_id: String,
    pid: u32,
    load1_at_start: f64,
    covered: &Covered,
    first: Option<Duration>,
    hwm_kib: u64,
    broker_cpu_start: Option<f64>,
    counts: Counts,
    states_mismatched: Option<u64>,
    shutdown_seconds: f64,
    own_report: serde_json::Value,
) -> ContenderRun {
    let events = ctx.load.total_events();
    let seconds = covered.at.as_secs_f64();
    let counts_match = counts == ctx.load.expected;
    let valid = counts_match && states_mismatched.unwrap_or(0) == 0;
    let steady = first
        .filter(|f| *f < covered.at)
        .map(|f| (events.saturating_sub(1)) as f64 / (covered.at - f).as_secs_f64());
    let broker_cpu_seconds = covered.broker_cpu.zip(broker_cpu_start).map(|(e, s)| e - s);
    let million = events as f64 / 1e6;
    let middle = covered.middle;
    ContenderRun {
        key,
        contender,
        guarantee,
        round,
        group_id,
        pid,
        load1_at_start,
        events,
        seconds,
        first_record_seconds: first.map(|f| f.as_secs_f64()),
        events_per_s: valid.then(|| events as f64 / seconds.max(1e-9)),
        steady_events_per_s: if valid { steady } else { None },
        middle,
        middle_events_per_s: middle.filter(|_| valid).map(|m| m.events_per_s()),
        peak_rss_mib: hwm_kib as f64 / 1024.0,
        cpu_seconds: covered.sample.cpu,
        cpu_seconds_per_million: covered.sample.cpu / million.max(1e-9),
        broker_cpu_seconds,
        broker_cpu_seconds_per_million: broker_cpu_seconds.map(|c| c / million.max(1e-9)),
        broker_cpu_per_second: broker_cpu_seconds.map(|c| c / seconds.max(1e-9)),
        counts,
        counts_match,
        states_mismatched,
        shutdown_seconds,
        own_report,
    }
}

fn peer_command(ctx: &Ctx<'_>) -> Command {
    let mut command = Command::new(&ctx.peer);
    command
        .arg("run")
        .arg("--bootstrap")
        .arg(&ctx.load.bootstrap)
        .arg("--registry")
        .arg(&ctx.registry_url)
        .args(&ctx.args.peer_arg);
    command
}

fn peer_run(ctx: &Ctx<'_>, guarantee: Guarantee, round: usize) -> anyhow::Result<ContenderRun> {
    let key = format!(
        "k{}{}",
        &guarantee.short()[..1].replace('e', "x"),
        if round == 0 {
            String::new()
        } else {
            (round + 1).to_string()
        }
    );
    let id = &uuid::Uuid::new_v4().simple().to_string()[..8];
    let app = format!("peer-side-{}-r{}-{id}", guarantee.short(), round + 1);
    let (output, dlq) = (format!("{app}-status"), format!("{app}-dlq"));
    create_topics(ctx, &[output.clone(), dlq.clone()])?;
    let dir = tempfile::Builder::new()
        .prefix("orderly-bench-peer-")
        .tempdir()?;
    let (out_path, err_path, dump_path) = (
        dir.path().join("peer.out"),
        dir.path().join("peer.err"),
        dir.path().join("dump.jsonl"),
    );
    let mut command = peer_command(ctx);
    command
        .arg("--input")
        .arg(&ctx.load.topic)
        .arg("--output")
        .arg(&output)
        .arg("--dlq")
        .arg(&dlq)
        .arg("--application-id")
        .arg(&app)
        .arg("--guarantee")
        .arg(guarantee.streams())
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--expect-records")
        .arg(ctx.load.total_events().to_string())
        .arg("--until-signal")
        .arg("--timeout-s")
        .arg(ctx.timeout.as_secs().to_string());
    if ctx.expected.is_some() {
        command.arg("--dump-state").arg(&dump_path);
    }
    if let Some(ms) = ctx.args.commit_interval_ms {
        command.arg("--commit-interval-ms").arg(ms.to_string());
    }
    if let Some(b) = ctx.args.cache_max_bytes {
        command.arg("--cache-max-bytes").arg(b.to_string());
    }
    let load1_at_start = load1();
    let broker_cpu_start = ctx.broker_pid.and_then(|b| process_cpu(Some(b)));
    let started_epoch_ms = epoch_ms();
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(std::fs::File::create(&err_path)?)
        .spawn()
        .with_context(|| format!("starting {}", ctx.peer.display()))?;
    let pid = child.id();
    let covered = match watch(
        ctx,
        &mut child,
        &app,
        started,
        &format!("({key}) Kafka Streams peer"),
    ) {
        Ok(c) => c,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            eprintln!(
                "pipeline: the peer's stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
            return Err(e);
        }
    };
    // Stopped as orderly is: it polls nothing of its own (--until-signal),
    // and prints its counts and dumps its states on SIGTERM.
    let (hwm_kib, status, shutdown_seconds) =
        stop(&mut child, covered.sample.hwm_kib, Duration::from_secs(120))?;
    let out = std::fs::read_to_string(&out_path)?;
    if !status.success() {
        bail!(
            "({key}) the peer exited {status}: {out}\n{}",
            std::fs::read_to_string(&err_path).unwrap_or_default()
        );
    }
    let report: serde_json::Value = serde_json::from_str(
        out.lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .context("the peer printed no JSON line")?,
    )?;
    let n = |k: &str| report[k].as_u64().unwrap_or(u64::MAX);
    let counts = Counts {
        applied: n("applied"),
        duplicates: n("duplicates"),
        stale: n("stale"),
        dead_lettered: n("dead_lettered"),
    };
    let first = report["first_record_ms"]
        .as_i64()
        .and_then(|ms| u64::try_from(ms - started_epoch_ms).ok())
        .map(Duration::from_millis);
    let states_mismatched = if ctx.expected.is_some() {
        let text = std::fs::read_to_string(&dump_path).context("the peer's --dump-state file")?;
        check_dump(ctx, text.lines().map(String::from))?
    } else {
        None
    };
    Ok(finish(
        ctx,
        key,
        Contender::KafkaStreams,
        guarantee,
        round,
        app,
        pid,
        load1_at_start,
        &covered,
        first,
        hwm_kib,
        broker_cpu_start,
        counts,
        states_mismatched,
        shutdown_seconds,
        report,
    ))
}

/// (or): a cold `orderly run` process with an empty store joins (oa)'s
/// group and restores its changelog, as a new instance does. Timed from the
/// process's start until its `/readyz` answers 200 (every partition restored
/// and processing; no record was waiting), and from the first partition's
/// restore start to the last one's end, both as its log lines arrive.
fn orderly_restore(ctx: &Ctx<'_>, source: &ContenderRun) -> anyhow::Result<RestoreRun> {
    let dir = tempfile::Builder::new()
        .prefix("orderly-bench-or-")
        .tempdir()?;
    let (output, dlq) = (
        format!("{}-status", source.group_id),
        format!("{}-dlq", source.group_id),
    );
    let home = dir.path().join("i");
    let config = OrderlyConfig {
        args: ctx.args,
        load: ctx.load,
        registry_url: &ctx.registry_url,
        group: &source.group_id,
        store: &home.join("store"),
        output: &output,
        dlq: &dlq,
        guarantee: source.guarantee.orderly(),
        http_address: "127.0.0.1:0",
        kafka_extra: "",
        processing_extra: "",
    }
    .toml();
    let partitions = usize::try_from(ctx.load.partitions).unwrap_or(0);
    let cpu_before = ctx.broker_pid.and_then(|b| process_cpu(Some(b)));
    let started = Instant::now();
    let mut instance = super::child::Instance::spawn(&ctx.orderly_bin, &home, &config)?;
    let deadline = started + Duration::from_secs(900);
    let ready_at = loop {
        if let Some(status) = instance.exited() {
            bail!(
                "(or) orderly run exited {status} before it was ready:\n{}",
                instance.tail()
            );
        }
        if Instant::now() > deadline {
            instance.terminate();
            instance.wait_stopped();
            bail!(
                "(or) orderly run not ready after 900 s:\n{}",
                instance.tail()
            );
        }
        let finished = super::child::lock(&instance.restores).len();
        if finished >= partitions && instance.ready() {
            break Instant::now();
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let hwm_kib = pid_status_kib(instance.pid, "VmHWM").unwrap_or(0);
    let cpu_seconds = process_cpu(Some(instance.pid)).unwrap_or(0.0);
    let broker_cpu = match (
        cpu_before,
        ctx.broker_pid.and_then(|b| process_cpu(Some(b))),
    ) {
        (Some(before), Some(after)) => Some(after - before),
        _ => None,
    };
    instance.terminate();
    instance.wait_stopped();
    let finished = super::child::lock(&instance.restores).clone();
    let records: i64 = finished
        .iter()
        .filter_map(|(_, line)| super::child::field(line, "restored"))
        .sum();
    let first_start = super::child::lock(&instance.restore_starts)
        .iter()
        .min()
        .copied()
        .unwrap_or(started);
    let last_end = finished.iter().map(|(at, _)| *at).max().unwrap_or(ready_at);
    let seconds = ready_at.duration_since(started).as_secs_f64();
    let read_seconds = last_end
        .saturating_duration_since(first_start)
        .as_secs_f64();
    let records = u64::try_from(records).unwrap_or(0);
    eprintln!(
        "pipeline: (or) {records} changelog records restored by a cold orderly run: ready {seconds:.2} s after its start, \
         {read_seconds:.2} s from the first partition's restore start to the last one's end; peak RSS {:.0} MiB, cpu {cpu_seconds:.2} s",
        hwm_kib as f64 / 1024.0
    );
    Ok(RestoreRun {
        key: "or".into(),
        contender: Contender::Orderly,
        how: format!(
            "a cold `orderly run` with an empty store in (oa)'s group {}: from its start until /readyz; restore from the first start to the last end",
            source.group_id
        ),
        changelog_records: records,
        seconds,
        records_per_s: records as f64 / seconds.max(1e-9),
        read_seconds,
        read_records_per_s: records as f64 / read_seconds.max(1e-9),
        orders: source.own_report["orders"].as_u64().unwrap_or(0),
        own_report: serde_json::json!({
            "peak_rss_mib": hwm_kib as f64 / 1024.0,
            "cpu_seconds": cpu_seconds,
            "broker_cpu_seconds": broker_cpu,
        }),
    })
}

/// (kr): a cold peer process (`--restore-only`, a fresh state dir) in
/// (ka)'s application id. Timed from the process's start until it prints its
/// report (Streams RUNNING with no restore active), and by its own
/// `StateRestoreListener` from the first restore start to the last end.
fn peer_restore(ctx: &Ctx<'_>, source: &ContenderRun) -> anyhow::Result<RestoreRun> {
    let dir = tempfile::Builder::new()
        .prefix("orderly-bench-peer-r-")
        .tempdir()?;
    let (output, dlq) = (
        format!("{}-status", source.group_id),
        format!("{}-dlq", source.group_id),
    );
    // Kafka Streams' consumers do not leave the group when they close: the
    // members of the run before (the processing run, or the restore before
    // this one) stay until their session times out, and a new member's
    // first rebalance waits for them. orderly's members leave on SIGTERM.
    // So both cold restores start in an empty group.
    let waited = wait_group_empty(
        &ctx.load.bootstrap,
        &source.group_id,
        Duration::from_secs(120),
    )?;
    if waited > Duration::from_secs(1) {
        eprintln!(
            "pipeline: (kr) waited {:.1} s for the peer's earlier members to leave its group",
            waited.as_secs_f64()
        );
    }
    let started = Instant::now();
    let mut child = peer_command(ctx)
        .arg("--input")
        .arg(&ctx.load.topic)
        .arg("--output")
        .arg(&output)
        .arg("--dlq")
        .arg(&dlq)
        .arg("--application-id")
        .arg(&source.group_id)
        .arg("--guarantee")
        .arg(source.guarantee.streams())
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .arg("--expect-records")
        .arg(ctx.load.total_events().to_string())
        .arg("--restore-only")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting the peer")?;
    let stderr = child.stderr.take().context("the peer's stderr")?;
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut text);
        text
    });
    let stdout = child.stdout.take().context("the peer's stdout")?;
    let mut report_line = None;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if line.starts_with('{') {
            report_line = Some((started.elapsed(), line));
        }
    }
    let status = child.wait()?;
    let errors = errors.join().unwrap_or_default();
    if !status.success() {
        bail!("(kr) peer --restore-only exited {status}\n{errors}");
    }
    let (ready_after, line) = report_line.context("the peer printed no JSON line")?;
    let report: serde_json::Value = serde_json::from_str(&line)?;
    let records = report["records_restored"].as_u64().unwrap_or(0);
    let read_seconds = report["restore_s"].as_f64().unwrap_or(0.0);
    let seconds = ready_after.as_secs_f64();
    eprintln!(
        "pipeline: (kr) {records} changelog records restored by a cold peer: ready {seconds:.2} s after its start, \
         {read_seconds:.2} s from the first restore start to the last end"
    );
    Ok(RestoreRun {
        key: "kr".into(),
        contender: Contender::KafkaStreams,
        how: format!(
            "a cold peer run --restore-only --application-id {} (fresh state dir): from its start until its report; restore by its StateRestoreListener",
            source.group_id
        ),
        changelog_records: records,
        seconds,
        records_per_s: records as f64 / seconds.max(1e-9),
        read_seconds,
        read_records_per_s: records as f64 / read_seconds.max(1e-9),
        orders: ctx.expected.as_ref().map(|e| e.len() as u64).unwrap_or(0),
        own_report: report,
    })
}

impl SideBySideOut {
    /// Each run and restore as a `Phase` for the main table.
    pub fn phases(&self) -> Vec<Phase> {
        let mut out = Vec::new();
        for r in &self.runs {
            let who = match r.contender {
                Contender::Orderly => "orderly run (child)",
                Contender::KafkaStreams => "Kafka Streams peer",
            };
            out.push(Phase {
                key: r.key.clone(),
                name: format!(
                    "{who}, {}",
                    match r.contender {
                        Contender::Orderly => r.guarantee.orderly(),
                        Contender::KafkaStreams => r.guarantee.streams(),
                    }
                ),
                events: r.events,
                seconds: r.seconds,
                events_per_s: r.events_per_s.unwrap_or(0.0),
                cpu_seconds: r.cpu_seconds,
                broker_cpu_seconds: r.broker_cpu_seconds,
                steady_events_per_s: r.steady_events_per_s.unwrap_or(0.0),
                peak_rss_mib: r.peak_rss_mib,
                rss_at_start_mib: 0.0,
                keys_written_per_event: None,
                bytes_written_per_event: None,
                disk_bytes_per_event: None,
                written_bytes: None,
                written_bytes_per_event: None,
                http: None,
            });
        }
        out
    }

    pub fn table_lines(&self) -> Vec<String> {
        let mut lines = vec![String::new(), format!("side by side (each in its own process; medians over rounds; orderly: {}, peer: {})", self.orderly_bin, self.peer)];
        if !self.orderly_config_overrides.is_empty() {
            lines.push(format!(
                "orderly config overrides: {}",
                self.orderly_config_overrides.join("; ")
            ));
        }
        lines.push(format!(
            "{:<14} {:<16} {:>6} {:>10} {:>12} {:>12} {:>9} {:>9} {:>11} {:>11} {:>13} {:>12} {:>9} {:>10}",
            "contender",
            "guarantee",
            "rounds",
            "ev/s",
            "1st rec ev/s",
            "middle ev/s",
            "RSS MiB",
            "cpu s/1M",
            "mid cpu/1M",
            "broker s/1M",
            "broker cpu/s",
            "cold r/s",
            "ready s",
            "restore r/s"
        ));
        for r in &self.rows {
            let (who, g) = match r.contender {
                Contender::Orderly => ("orderly", r.guarantee.orderly()),
                Contender::KafkaStreams => ("kafka streams", r.guarantee.streams()),
            };
            let rounds = if r.valid_rounds == r.rounds {
                r.rounds.to_string()
            } else {
                format!("{}/{} ok", r.valid_rounds, r.rounds)
            };
            lines.push(format!(
                "{:<14} {:<16} {:>6} {:>10} {:>12} {:>12} {:>9} {:>9} {:>11} {:>11} {:>13} {:>12} {:>9} {:>10}",
                who,
                g,
                rounds,
                r.events_per_s
                    .map(|x| format!("{x:.0}"))
                    .unwrap_or_else(|| "MISMATCH".into()),
                fmt_opt(r.steady_events_per_s, 0),
                fmt_opt(r.middle_events_per_s, 0),
                fmt_opt(r.peak_rss_mib, 0),
                fmt_opt(r.cpu_seconds_per_million, 2),
                fmt_opt(r.middle_cpu_seconds_per_million, 2),
                fmt_opt(r.broker_cpu_seconds_per_million, 2),
                fmt_opt(r.broker_cpu_per_second, 2),
                fmt_opt(r.restore_records_per_s, 0),
                fmt_opt(r.restore_seconds, 2),
                fmt_opt(r.restore_read_records_per_s, 0),
            ));
        }
        if !self.restores.is_empty() {
            lines.push(
                "  (restores, at_least_once rows: a cold process with empty state; ready s: from its start until ready to process; \
                 cold r/s: records / ready s; restore r/s: records / the first partition's restore start to the last one's end)"
                    .into(),
            );
        }
        lines.push(format!(
            "  (ev/s: records / spawn to the committed offsets covering the input; 1st rec: from the first record; \
             middle: between the polls that saw {:.0}% and {:.0}% of the offsets committed; cpu s/1M with start-up, mid cpu/1M without; \
             broker cpu/s: the broker's CPU seconds per second of the run)",
            MIDDLE.0 * 100.0,
            MIDDLE.1 * 100.0
        ));
        for q in &self.ratios {
            if let Some(why) = &q.refused {
                lines.push(format!(
                    "orderly / peer, {:<13}: no ratio, the contenders did different work: {why}",
                    q.guarantee.orderly()
                ));
                continue;
            }
            lines.push(format!(
                "orderly / peer, {:<13}: ev/s {}, 1st rec {}, middle {}, RSS {}, cpu/ev {}, middle cpu/ev {}, broker cpu/ev {}, cold restore r/s {}, ready s {}, restore r/s {}",
                q.guarantee.orderly(),
                fmt_opt(q.events_per_s, 2),
                fmt_opt(q.steady_events_per_s, 2),
                fmt_opt(q.middle_events_per_s, 2),
                fmt_opt(q.peak_rss, 2),
                fmt_opt(q.cpu_per_event, 2),
                fmt_opt(q.middle_cpu_per_event, 2),
                fmt_opt(q.broker_cpu_per_event, 2),
                fmt_opt(q.restore_records_per_s, 2),
                fmt_opt(q.restore_seconds, 2),
                fmt_opt(q.restore_read_records_per_s, 2),
            ));
        }
        lines.push("per run:".into());
        for r in &self.runs {
            lines.push(format!(
                "  ({:<3}) load {:>4.1}  {:>7.2} s  first record {:>5} s  ev/s {:>8}  1st rec {:>8}  middle {:>8} ({})  RSS {:>4.0} MiB  cpu {:>6.2} s  broker {:>6} s  stop {:>5.2} s  counts {}  states {}",
                r.key,
                r.load1_at_start,
                r.seconds,
                fmt_opt(r.first_record_seconds, 2),
                fmt_opt(r.events_per_s, 0),
                fmt_opt(r.steady_events_per_s, 0),
                fmt_opt(r.middle_events_per_s, 0),
                r.middle
                    .map(|m| format!(
                        "{:.0}%-{:.0}% in {:.2}-{:.2} s, cpu {:.2} s",
                        m.from_share * 100.0,
                        m.to_share * 100.0,
                        m.from_seconds,
                        m.to_seconds,
                        m.cpu_seconds
                    ))
                    .unwrap_or_else(|| format!("fewer than {MIDDLE_MIN_STEPS} commits in it")),
                r.peak_rss_mib,
                r.cpu_seconds,
                fmt_opt(r.broker_cpu_seconds, 2),
                r.shutdown_seconds,
                if r.counts_match { "ok".to_string() } else { format!("MISMATCH {:?}", r.counts) },
                match r.states_mismatched {
                    Some(0) => "ok".to_string(),
                    Some(n) => format!("{n} MISMATCHED"),
                    None => "-".into(),
                }
            ));
        }
        for r in &self.restores {
            lines.push(format!(
                "  ({}) restore: {} changelog records, ready {:.2} s after the process started = {:.0} records/s; from the restore's first start to its last end {:.2} s = {:.0} records/s ({})",
                r.key, r.changelog_records, r.seconds, r.records_per_s, r.read_seconds, r.read_records_per_s, r.how
            ));
        }
        lines
    }
}
