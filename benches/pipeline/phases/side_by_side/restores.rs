//! (or) / (kr): each contender's cold restore of its first at_least_once
//! run's changelogs.

use std::io::{BufRead, BufReader, Read};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::measure::{pid_status_kib, process_cpu};

use super::contenders::peer_command;
use super::setup::{wait_group_empty, OrderlyConfig};
use super::{Contender, ContenderRun, Ctx, RestoreRun};

/// (or): a cold `orderly run` process with an empty store joins (oa)'s
/// group and restores its changelog, as a new instance does. Timed from the
/// process's start until its `/readyz` answers 200 (every partition restored
/// and processing; no record was waiting), and from the first partition's
/// restore start to the last one's end, both as its log lines arrive.
pub(super) fn orderly_restore(ctx: &Ctx<'_>, source: &ContenderRun) -> anyhow::Result<RestoreRun> {
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
    let mut instance = crate::phases::child::Instance::spawn(&ctx.orderly_bin, &home, &config)?;
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
        let finished = crate::phases::child::lock(&instance.restores).len();
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
    let finished = crate::phases::child::lock(&instance.restores).clone();
    let records: i64 = finished
        .iter()
        .filter_map(|(_, line)| crate::phases::child::field(line, "restored"))
        .sum();
    let first_start = crate::phases::child::lock(&instance.restore_starts)
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
pub(super) fn peer_restore(ctx: &Ctx<'_>, source: &ContenderRun) -> anyhow::Result<RestoreRun> {
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
        orders: ctx.expected.as_ref().map(|e| e.fingerprints.len() as u64).unwrap_or(0),
        own_report: report,
    })
}
