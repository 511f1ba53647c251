//! (d) the store alone: the processor's sled writes per batch of the
//! processor's configured size and partition (`orderly::batch::apply_batch`:
//! read state, `step`, put changed states + checkpoint in one
//! `commit_batch`), one `flush` per round of all partitions' batches, on
//! pre-decoded events, no Kafka: the storage limit.
//!
//! Everything that depends on `apply_batch`'s signature and its
//! `BatchOutcome` is in this module.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::message::Message;

use orderly::batch::apply_batch;
use orderly::codec::Decoder;
use orderly::config::Config;
use orderly::event::OrderEvent;
use orderly::store::{Checkpoint, Store};

use super::{plain_consumer, read_all};
use crate::loader::LoadInfo;
use crate::measure::{dir_size, percentiles_ms, Meter};
use crate::report::{Phase, StorageOut};
use crate::Args;

/// (d): reads and decodes every record (untimed), then times the store's
/// work on them. Returns the phase and the storage figures.
pub fn run(
    args: &Args,
    load: &LoadInfo,
    decoder: &Decoder,
    runtime: &tokio::runtime::Runtime,
    broker_pid: Option<u32>,
    timeout: Duration,
) -> anyhow::Result<(Phase, StorageOut)> {
    // Untimed: the decoded events of each partition, in offset order.
    let consumer = plain_consumer(args, &load.bootstrap)?;
    let mut by_partition: BTreeMap<i32, PartitionRecords> = BTreeMap::new();
    read_all(&consumer, load, timeout, |msg| {
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
    let mut phase = m.finish("d", "store alone (apply_batch + flush)", n);
    eprintln!("pipeline: (d) {n} events in {:.2} s", phase.seconds);
    phase.keys_written_per_event = Some(s.keys_per_event);
    phase.bytes_written_per_event = Some(s.bytes_per_event);
    phase.disk_bytes_per_event = Some(s.disk_bytes_per_event);
    let storage = StorageOut { flushes_per_s: s.flushes as f64 / phase.seconds.max(1e-9), ..s };
    drop(by_partition);
    Ok((phase, storage))
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
    let store_path = dir.path().join("store");
    let store = Store::open(&store_path, cache_mb)?;
    let retention_ms = Config::defaults()?.inbox_retention()?.as_millis() as i64;
    let mut parts = Vec::new();
    for (p, records) in by_partition {
        parts.push((store.partition(topic, *p)?, records, 0usize, Checkpoint::starting_at(0)));
    }
    let disk_at_start = dir_size(&store_path);
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
    drop(parts);
    drop(store);
    let disk_growth = dir_size(&store_path).saturating_sub(disk_at_start);
    let out = StorageOut {
        batches,
        flushes,
        flushes_per_s: 0.0,
        keys_per_event: per_event(keys),
        bytes_per_event: per_event(bytes),
        flushed_bytes_per_event: per_event(flushed),
        disk_bytes_per_event: per_event(disk_growth),
        avg_state_value_bytes: bytes as f64 / states.max(1) as f64,
        batch_p50_ms: b50,
        batch_p99_ms: b99,
        flush_p50_ms: f50,
        flush_share: flush_time.as_secs_f64() / elapsed.as_secs_f64().max(1e-9),
    };
    Ok((records_done, out))
}

