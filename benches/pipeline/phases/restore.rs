//! (r) restore: every partition of the changelog (c) wrote, restored into a
//! fresh store the way a new owner restores it (one thread per partition,
//! as the processor's partition tasks run their restores in parallel),
//! until each tree holds the last checkpoint. Events here are changelog
//! records applied.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::anyhow;

use orderly::testkit::{ReaderSettings, Restore};
use orderly::{Config, Store};

use super::passthrough;
use crate::figures::Phase;
use crate::loader::LoadInfo;
use crate::measure::Meter;
use crate::Args;

pub fn run(args: &Args, load: &LoadInfo, broker_pid: Option<u32>) -> anyhow::Result<Phase> {
    let topic = super::full::changelog_topic(load);
    run_topic(
        args,
        load,
        broker_pid,
        &topic,
        "r",
        "restore (c)'s changelog into a fresh store",
    )
    .map(|(phase, _)| phase)
}

/// Restores `topic` (a changelog with the input's partitions) into a fresh
/// store, in this process: (r), and the side-by-side restore of an `orderly
/// run` child's changelog.
///
/// Also returns the seconds from the first partition's first record read
/// (its watermarks and last checkpoint located) to the end of the final
/// flush: the part a Kafka Streams `StateRestoreListener` times (from the
/// first `onRestoreStart`, which comes with the offsets found).
pub fn run_topic(
    args: &Args,
    load: &LoadInfo,
    broker_pid: Option<u32>,
    topic: &str,
    key: &str,
    name: &str,
) -> anyhow::Result<(Phase, f64)> {
    let dir = tempfile::Builder::new()
        .prefix("orderly-bench-r-")
        .tempdir()?;
    let mut config = Config::defaults()?;
    passthrough(args, &mut config)?;
    config.kafka.bootstrap_servers = load.bootstrap.clone();
    config.kafka.group_id = format!("orderly-bench-r-{}", uuid::Uuid::new_v4().simple());
    config.store.path = dir.path().join("store");
    if let Some(mb) = args.cache_mb {
        config.store.cache_capacity_mb = mb;
    }
    let topic = topic.to_string();
    let store = Store::open(&config.store.path, config.store.cache_capacity_mb)?;
    let cancel = AtomicBool::new(false);
    let meter = Meter::start(broker_pid);
    let reader = ReaderSettings::of(&config);
    let results: Vec<anyhow::Result<(u64, Instant, Duration)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = load
            .ends
            .keys()
            .map(|partition| {
                let (reader, topic, store, cancel) = (&reader, &topic, &store, &cancel);
                scope.spawn(move || -> anyhow::Result<(u64, Instant, Duration)> {
                    let started = Instant::now();
                    let tree = store.partition(&load.topic, *partition)?;
                    let progress = orderly::testkit::RestoreProgress::default();
                    let restored = Restore {
                        reader,
                        topic,
                        partition: *partition,
                        tree: &tree,
                        cancel,
                        progress: &progress,
                    }
                    .run()?;
                    if !restored.restored {
                        return Err(anyhow!("partition {partition}: nothing restored"));
                    }
                    Ok((
                        restored.applied,
                        started + restored.located,
                        restored.store_write,
                    ))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| anyhow!("restore thread panicked"))?)
            .collect()
    });
    let flushing = Instant::now();
    store.flush()?;
    let flushed = Instant::now();
    let flush_seconds = flushed.duration_since(flushing).as_secs_f64();
    let (mut records, mut first_read, mut store_write) = (0, flushed, Duration::ZERO);
    for result in results {
        let (applied, read_from, written) = result?;
        records += applied;
        first_read = first_read.min(read_from);
        store_write = store_write.max(written);
    }
    let read_seconds = flushed.duration_since(first_read).as_secs_f64();
    let mut phase = meter.finish(key, name, records);
    phase.steady_events_per_s = phase.events_per_s;
    // The restored checkpoints are (c)'s: its counters came back with it.
    let outcomes: u64 = store
        .checkpoints()?
        .iter()
        .map(|(_, _, cp)| cp.outcomes())
        .sum();
    eprintln!(
        "pipeline: ({key}) {records} changelog records restored in {:.2} s, {read_seconds:.2} s of them from the first record read, the last {flush_seconds:.2} s the store's flush ({outcomes} events' counters); sled's writes {:.2} s of a partition's restore at most; cpu {:.2} s, broker cpu {}",
        phase.seconds,
        store_write.as_secs_f64(),
        phase.cpu_seconds,
        phase.broker_cpu_seconds.map_or("-".to_string(), |s| format!("{s:.2} s")),
    );
    Ok((phase, read_seconds))
}
