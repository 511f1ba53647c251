//! (oa) / (ox) and (ka) / (kx): one timed run of each contender, orderly
//! and the Kafka Streams peer, to the end of the input.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::figures::Counts;
use crate::measure::{load1, process_cpu};

use super::setup::{check_dump, create_topics, orderly_config};
use super::watch::{watch, Covered};
use super::{epoch_ms, stop, Contender, ContenderRun, Ctx, Guarantee};

pub(super) fn orderly_run(
    ctx: &Ctx<'_>,
    guarantee: Guarantee,
    round: usize,
) -> anyhow::Result<ContenderRun> {
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
    let mut child = crate::phases::child::run_command(&ctx.orderly_bin, &config_path)
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
        // Read as it is printed: at 10M orders the dump is gigabytes.
        let mut dump = Command::new(&ctx.orderly_bin)
            .arg("--config")
            .arg(&config_path)
            .args(["state", "dump"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let stdout = dump.stdout.take().context("orderly state dump's stdout")?;
        let checked = check_dump(ctx, std::io::BufReader::new(stdout).lines());
        let done = dump.wait_with_output()?;
        if !done.status.success() {
            bail!(
                "orderly state dump: {}",
                String::from_utf8_lossy(&done.stderr)
            );
        }
        checked?
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
pub(super) fn finish(
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

pub(super) fn peer_command(ctx: &Ctx<'_>) -> Command {
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

pub(super) fn peer_run(
    ctx: &Ctx<'_>,
    guarantee: Guarantee,
    round: usize,
) -> anyhow::Result<ContenderRun> {
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
        let file = std::fs::File::open(&dump_path).context("the peer's --dump-state file")?;
        check_dump(ctx, std::io::BufReader::new(file).lines())?
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
