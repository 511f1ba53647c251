//! (c) the full `Processor` with durability and the changelog on, from start
//! (including joining the group) to the moment the store's checkpoints cover
//! the end offsets, with a fresh group id and store, the outbox on too
//! (every status change published to `<topic>-status`); (o) the same with
//! the outbox off; (e) with the changelog and the outbox off. A watcher thread samples the
//! checkpoints every 20 ms for the first batch, stalls and the end.
//!
//! With `--http` or `--http-load` the processor also serves its HTTP
//! endpoint on 127.0.0.1 (a free port); with `--http-load` an abuse load
//! runs against it from `Processor::run` until the store covers the ends,
//! and the processor's shutdown waits for the load's requests in flight
//! (`crate::http_load`).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use anyhow::anyhow;

use orderly::testkit::PartitionStore;
use orderly::{Config, Processor, Registry, RunReport, Store};

use super::passthrough;
use crate::figures::{Counts, FullPipeline, Phase};
use crate::http_load::{HttpLoad, HttpOut};
use crate::loader::LoadInfo;
use crate::measure::{dir_size, process_cpu, thread_cpu, thread_group, Meter};
use crate::Args;

/// Key + value bytes the processor handed to sled over the run, when its
/// `RunReport` says.
/// Bytes of keys and values the processor handed to sled.
fn bytes_written(report: &RunReport) -> Option<u64> {
    Some(report.bytes_written)
}

/// Events the checkpoints cover, and whether they reached every end offset.
fn covered_by(trees: &[(i32, PartitionStore)], ends: &BTreeMap<i32, i64>) -> (u64, bool) {
    let mut processed = 0u64;
    let mut all = true;
    for (p, tree) in trees {
        let cp = tree.checkpoint().ok().flatten();
        let next = cp.map(|c| c.next_offset).unwrap_or(0);
        processed += cp
            .map(|c| (c.next_offset - c.start_offset).max(0) as u64)
            .unwrap_or(0);
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

/// The changelog topic (c) writes (and (r) restores from).
pub fn changelog_topic(load: &LoadInfo) -> String {
    format!("{}-changelog", load.topic)
}

/// (c) with the changelog (or (e) without): the full processor, fresh group
/// and store, until the store covers the ends. `exactly_once`: (x), (c) in
/// `processing.guarantee = "exactly_once"`. `round` > 0: a repeat of the
/// phase (`--rounds`), with a changelog of its own.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    args: &Args,
    load: &LoadInfo,
    registry: Registry,
    broker_pid: Option<u32>,
    timeout: Duration,
    changelog: bool,
    outbox: bool,
    exactly_once: bool,
    round: usize,
) -> anyhow::Result<(Phase, FullPipeline)> {
    let (key, name) = match (changelog, outbox, exactly_once) {
        (true, true, true) => (
            "x",
            "full orderly Processor, exactly_once (transactions; changelog and outbox on)",
        ),
        (true, true, false) => (
            "c",
            "full orderly Processor (durable, changelog and outbox on)",
        ),
        (true, false, _) => (
            "o",
            "full orderly Processor (durable, changelog on, outbox off)",
        ),
        _ => (
            "e",
            "full orderly Processor (durable, changelog and outbox off)",
        ),
    };
    let dir = tempfile::Builder::new()
        .prefix("orderly-bench-c-")
        .tempdir()?;
    let store_path = dir.path().join("store");
    let mut config = Config::defaults()?;
    passthrough(args, &mut config)?;
    config.kafka.bootstrap_servers = load.bootstrap.clone();
    config.kafka.group_id = format!("orderly-bench-{}", uuid::Uuid::new_v4().simple());
    config.kafka.input_topic = load.topic.clone();
    config.kafka.dlq_topic = load.dlq_topic.clone();
    // Each phase its own changelog: a fresh store finding another phase's
    // changelog would restore from it instead of processing.
    config.kafka.changelog_topic = match (changelog, key, round) {
        (false, _, _) => String::new(),
        (true, "c", 0) => changelog_topic(load),
        (true, other, round) => format!("{}-{other}{round}", changelog_topic(load)),
    };
    if exactly_once {
        config.processing.guarantee = orderly::testkit::Guarantee::ExactlyOnce;
    }
    config.kafka.output_topic = if outbox {
        format!("{}-status", load.topic)
    } else {
        String::new()
    };
    config.store.path = store_path.clone();
    if let Some(ms) = args.commit_interval_ms {
        config.processing.commit_interval_ms = ms;
    }
    if let Some(bytes) = args.cache_max_bytes {
        config.processing.cache_max_bytes = bytes;
    }
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
    let disk_at_start = dir_size(&store_path);
    let processor = Processor::for_entity(orderly::Orders, config, store.clone(), registry);
    let (http_address, http_server) = if args.http || args.http_load {
        let listener = orderly::testkit::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let address = listener.local_addr()?;
        let server = orderly::testkit::serve(listener, &processor)?;
        eprintln!(
            "pipeline: ({key}) http endpoint at http://{address}/{}",
            if args.http_load {
                " under an abuse load"
            } else {
                ""
            }
        );
        (Some(address), Some(server))
    } else {
        (None, None)
    };

    let threads_before = thread_cpu();
    let meter = Meter::start(broker_pid);
    // The watcher is an OS thread: while partition tasks keep both tokio
    // workers busy, tokio timers fire hundreds of milliseconds late (they are
    // only checked when a worker parks or every 61 task polls), so a
    // `tokio::time::sleep` loop would see the end late.
    let started = Instant::now();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let mut http_load = match (args.http_load, http_address) {
        (true, Some(address)) => Some(HttpLoad::start(address, args.http_bursts)?),
        _ => None,
    };
    let http_load_done = http_load.as_mut().map(|l| l.done());
    let watcher = {
        let trees: Vec<(i32, PartitionStore)> = trees.clone();
        let ends = load.ends.clone();
        let stop = stop.clone();
        let load_stop = http_load.as_ref().map(|l| l.stopper());
        std::thread::Builder::new()
            .name("bench-watcher".into())
            .spawn(move || {
                let mut p = Progress::default();
                while started.elapsed() < timeout && !stop.load(std::sync::atomic::Ordering::SeqCst)
                {
                    std::thread::sleep(Duration::from_millis(20));
                    let (processed, all) = covered_by(&trees, &ends);
                    p.timeline
                        .push((started.elapsed().as_millis() as u64, processed));
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
                    eprintln!("pipeline: ({key}) stopped before the store covered the end offsets");
                }
                if let Some(load_stop) = load_stop {
                    load_stop.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                let _ = done_tx.send(());
                p
            })?
    };
    let result = processor
        .run(async {
            let _ = done_rx.await;
            // The endpoint stops with the processor: let the load's
            // requests in flight finish first.
            if let Some(load_done) = http_load_done {
                let _ = load_done.await;
            }
        })
        .await;
    if let Some(server) = http_server {
        server.stop().await;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let load_out = http_load.map(|l| l.join());
    let progress = watcher
        .join()
        .map_err(|_| anyhow!("the watcher thread panicked"))?;
    let report: RunReport = result?;
    // A repeated round reports as c2, x2, ...
    let key = if round == 0 {
        key.to_string()
    } else {
        format!("{key}{}", round + 1)
    };
    let mut phase = meter.finish(&key, name, 0);
    let timed_out = progress.covered_at.is_none();
    let total_seconds = progress
        .covered_at
        .unwrap_or_else(|| started.elapsed())
        .as_secs_f64();
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
        Some((at, at_events)) if total_seconds > at.as_secs_f64() => (
            at.as_secs_f64(),
            (processed - at_events) as f64 / (total_seconds - at.as_secs_f64()),
        ),
        _ => (0.0, phase.events_per_s),
    };
    phase.steady_events_per_s = steady;
    // Stalls: 20 ms samples after the first batch without any new checkpoint.
    let mut stalled_ms = 0u64;
    let mut longest_stall_ms = 0u64;
    let mut run_ms = 0u64;
    for pair in progress.timeline.windows(2) {
        let ((t0, n0), (t1, n1)) = (pair[0], pair[1]);
        if n0 == 0 || n0 >= load.total_events() {
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
    eprintln!("pipeline: ({key}) {processed} events in {total_seconds:.2} s");
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
    if let Some(address) = http_address {
        let cpu = |group: &str| thread_cpu_seconds.get(group).copied().unwrap_or(0.0);
        phase.http = Some(HttpOut {
            mode: if args.http_load {
                "served + abuse load".into()
            } else {
                "served (idle)".into()
            },
            address: address.to_string(),
            server_thread_cpu_seconds: cpu("orderly-http"),
            load_thread_cpu_seconds: cpu("bench-http-load"),
            load: load_out,
        });
    }
    thread_cpu_seconds.retain(|_, s| *s >= 0.005);
    drop(trees);
    drop(store);
    let disk = dir_size(&store_path).saturating_sub(disk_at_start);
    let per_event = |x: u64| x as f64 / processed.max(1) as f64;
    let bytes_written_per_event = bytes_written(&report).map(per_event);
    phase.keys_written_per_event = Some(per_event(report.keys_written));
    phase.bytes_written_per_event = bytes_written_per_event;
    phase.disk_bytes_per_event = Some(per_event(disk));
    let full = FullPipeline {
        total_seconds,
        join_seconds,
        steady_events_per_s: steady,
        batches: report.batches,
        avg_records_per_batch: processed as f64 / report.batches.max(1) as f64,
        batch_p50_ms: report.batch_p50_ms,
        batch_p99_ms: report.batch_p99_ms,
        write_outs: report.write_outs,
        write_p50_ms: report.write_p50_ms,
        write_p99_ms: report.write_p99_ms,
        timer_late_p99_ms: report.timer_late_p99_ms,
        flush_p50_ms: report.flush_p50_ms,
        flushes: report.flushes,
        flushes_per_s: report.flushes as f64 / total_seconds.max(1e-9),
        keys_written_per_event: per_event(report.keys_written),
        bytes_written_per_event,
        store_disk_bytes_per_event: per_event(disk),
        counters: counts,
        counters_match_expected: counts == load.expected,
        peak_rss_mib: phase.peak_rss_mib,
        rss_target_mib: 512.0,
        thread_cpu_seconds,
        stalled_seconds: stalled_ms as f64 / 1000.0,
        longest_stall_seconds: longest_stall_ms as f64 / 1000.0,
        timeline: if args.timeline {
            progress.timeline.clone()
        } else {
            Vec::new()
        },
        timed_out,
    };
    Ok((phase, full))
}
