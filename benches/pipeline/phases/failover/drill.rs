//! One failover run: three instances, one killed while the feed is read,
//! and what the others did until every partition processed again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::measure::{dir_disk_usage, kib_to_mib, load1, pid_status_kib};
use crate::phases::child::{field, lock, Instance};
use crate::phases::side_by_side::{create_topics_like_input, offsets_reader, OrderlyConfig};

use super::{
    committed, numbers, owned, processing, start_feed, Ctx, FailoverRun, FEED_BEFORE_KILL,
    INSTANCES, POLL,
};

pub(super) fn one_run(ctx: &Ctx<'_>, standbys: u32, round: usize) -> FailoverRun {
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
pub(super) fn drill(ctx: &Ctx<'_>, run: &mut FailoverRun) -> anyhow::Result<()> {
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
pub(super) fn measure(
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

pub(super) fn alive(instances: &mut [Instance]) -> anyhow::Result<()> {
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
pub(super) fn settled(statuses: &[&serde_json::Value], all: &[i32], standbys: u32) -> bool {
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
pub(super) fn kill_and_watch(
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
