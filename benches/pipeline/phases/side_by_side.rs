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
//! The bare consumer, (a), runs first by default: it gives the rate a
//! processor is measured against, and it warms the broker's read path.
//! Without it the first contender to read the freshly loaded topic paid
//! for that warm-up (up to twice the broker CPU of the same run second).
//!
//! Order within a round: for each guarantee, orderly then the peer in
//! rounds 1, 3, ..., the peer first in rounds 2, 4, ..., so neither always
//! runs right after the other's load on the broker.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use serde::Serialize;

use orderly::testkit::orders::workload::{fingerprint, order_index};
use orderly::testkit::orders::StateView;

use crate::figures::Counts;
use crate::figures::{fmt_opt, median};
use crate::loader::LoadInfo;
use crate::measure::pid_status_kib;
use crate::Args;

mod contenders;
mod restores;
mod setup;
mod table;
mod watch;

use contenders::{orderly_run, peer_run};
use restores::{orderly_restore, peer_restore};
pub(super) use setup::{create_topics_like_input, offsets_reader, overrides_toml, OrderlyConfig};
pub use watch::Middle;

/// What `--side-by-side` runs.
pub const PHASES: &str = "a,oa,ka,ox,kx,or,kr";
const KEYS: [&str; 6] = ["oa", "ka", "ox", "kx", "or", "kr"];

pub fn wanted(phases: &[String]) -> bool {
    phases.iter().any(|p| KEYS.contains(&p.as_str()))
}

/// Every order's expected final state, as a fingerprint by order index
/// (what the loader wrote: 8 bytes an order, where the states themselves
/// would take 2 GiB at 10M orders).
pub struct ExpectedStates {
    pub prefix: String,
    pub fingerprints: Vec<u64>,
}

impl ExpectedStates {
    /// Whether `got` is its order's expected state.
    pub fn matches(&self, got: &StateView) -> bool {
        order_index(&self.prefix, &got.order_id)
            .and_then(|i| self.fingerprints.get(i as usize))
            .is_some_and(|f| *f == fingerprint(got))
    }
}

/// Reads what [`crate::loader`] wrote: a header line `fingerprints <prefix>
/// <count>`, then `count` little-endian u64s.
pub fn read_expected(path: &Path) -> anyhow::Result<ExpectedStates> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let mut reader = std::io::BufReader::new(file);
    let mut header = String::new();
    reader.read_line(&mut header)?;
    let mut words = header.split_whitespace();
    let (Some("fingerprints"), Some(prefix), Some(count), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        bail!(
            "{}: not an expected-states file (header {header:?})",
            path.display()
        );
    };
    let count: usize = count.parse().context("the fingerprint count")?;
    let mut bytes = Vec::with_capacity(count * 8);
    reader.read_to_end(&mut bytes)?;
    if bytes.len() != count * 8 {
        bail!(
            "{}: {} bytes of fingerprints, not {}",
            path.display(),
            bytes.len(),
            count * 8
        );
    }
    let fingerprints = bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect();
    Ok(ExpectedStates {
        prefix: prefix.to_string(),
        fingerprints,
    })
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
    expected: Option<ExpectedStates>,
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
    expected: Option<ExpectedStates>,
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
