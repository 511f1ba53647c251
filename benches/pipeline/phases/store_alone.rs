//! (d) the store alone: the processor's state work on pre-decoded events,
//! no Kafka: the storage limit. Per partition, batches of the processor's
//! configured size are decided against its order cache
//! (`orderly::testkit::PartitionState::apply`, what a partition task
//! calls per batch); once per commit interval (or when a partition's changed
//! orders pass their share of `cache_max_bytes`) every partition writes out
//! (`write_out`: changed orders + checkpoint in one sled batch) and one
//! `flush` makes them durable, as the processor's group flush does.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::message::Message;

use orderly::testkit::Decoder;
use orderly::Config;
type OrderEvent = orderly::Event<orderly::testkit::orders::Order>;
use orderly::testkit::{Decoded, PartitionState, Sourced};
use orderly::Store;

use super::{plain_consumer, read_all};
use crate::figures::{Phase, StorageOut};
use crate::loader::LoadInfo;
use crate::measure::{dir_size, percentiles_ms, Meter};
use crate::Args;

/// (d): reads and decodes every record (untimed), then times the store's
/// work on them. Returns the phase and the storage figures.
pub fn run(
    args: &Args,
    load: &LoadInfo,
    decoder: &Decoder<orderly::Orders>,
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
        by_partition
            .entry(msg.partition())
            .or_default()
            .push(decoded.ok());
    })?;
    drop(consumer);
    // The same batch size as (c): the processor's configured one.
    let defaults = Config::defaults()?.processing;
    let settings = Settings {
        batch: args.batch_max_records.unwrap_or(defaults.batch_max_records),
        interval: Duration::from_millis(
            args.commit_interval_ms
                .unwrap_or(defaults.commit_interval_ms),
        ),
        cache_max_bytes: args.cache_max_bytes.unwrap_or(defaults.cache_max_bytes) as usize,
        cache_mb: args.cache_mb.unwrap_or(64),
    };
    // Untimed: the batches, by value (the processor moves decoded events
    // into its cache).
    let batches: Vec<(i32, Vec<Batch>)> = by_partition
        .iter()
        .map(|(p, records)| (*p, records.batches(settings.batch)))
        .collect();
    drop(by_partition);
    let m = Meter::start(broker_pid);
    let (n, s) = store_alone(batches, &settings, &load.topic)?;
    let mut phase = m.finish("d", "store alone (cache + write-out + flush)", n);
    eprintln!("pipeline: (d) {n} events in {:.2} s", phase.seconds);
    phase.keys_written_per_event = Some(s.keys_per_event);
    phase.bytes_written_per_event = Some(s.bytes_per_event);
    phase.disk_bytes_per_event = Some(s.disk_bytes_per_event);
    let storage = StorageOut {
        flushes_per_s: s.flushes as f64 / phase.seconds.max(1e-9),
        ..s
    };
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

    /// The records cut into batches of `size`.
    fn batches(&self, size: usize) -> Vec<Batch> {
        (0..self.records)
            .step_by(size.max(1))
            .map(|from| {
                let to = (from + size).min(self.records);
                let (events, dead) = self.slice(from, to);
                Batch {
                    events: events.to_vec(),
                    dead,
                    from: from as i64,
                    to: to as i64,
                }
            })
            .collect()
    }
}

/// One batch of (d): its decoded events, its poison count, its offsets.
struct Batch {
    events: Vec<OrderEvent>,
    dead: u64,
    from: i64,
    to: i64,
}

/// The processor settings (d) uses.
struct Settings {
    batch: usize,
    interval: Duration,
    cache_max_bytes: usize,
    cache_mb: u64,
}

/// (d): the processor's state work on pre-decoded events, round-robin over
/// the partitions one batch at a time; every commit interval all partitions
/// write out and one flush follows. Returns the records processed.
fn store_alone(
    partitions: Vec<(i32, Vec<Batch>)>,
    settings: &Settings,
    topic: &str,
) -> anyhow::Result<(u64, StorageOut)> {
    let dir = tempfile::Builder::new()
        .prefix("orderly-bench-d-")
        .tempdir()?;
    let store_path = dir.path().join("store");
    let store = Store::open(&store_path, settings.cache_mb)?;
    let retention_ms = Config::defaults()?.inbox_retention().as_millis() as i64;
    let share = settings.cache_max_bytes / partitions.len().max(1);
    let mut parts = Vec::new();
    for (p, batches) in partitions {
        parts.push((
            PartitionState::<orderly::Orders>::new(store.partition(topic, p)?, None),
            batches.into_iter(),
        ));
    }
    let disk_at_start = dir_size(&store_path);
    let (
        mut records_done,
        mut batches,
        mut write_outs,
        mut flushes,
        mut keys,
        mut bytes,
        mut flushed,
    ) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
    let mut orders_written = 0u64;
    let mut batch_micros = Vec::new();
    let mut write_micros = Vec::new();
    let mut flush_micros = Vec::new();
    let mut flush_time = Duration::ZERO;
    let started = Instant::now();
    let mut last_write = Instant::now();
    loop {
        let mut decided = false;
        let mut over_budget = false;
        for (state, queue) in parts.iter_mut() {
            let Some(batch) = queue.next() else { continue };
            let t = Instant::now();
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            let records = (batch.to - batch.from) as u64;
            let events = batch
                .events
                .into_iter()
                .zip(batch.from..)
                .map(|(value, offset)| Sourced { offset, value })
                .collect();
            let decoded = Decoded {
                events,
                dead_lettered: batch.dead,
                first_offset: batch.from,
                next_offset: batch.to,
            };
            let outcome = state.apply(decoded, now_ms, retention_ms)?;
            state.shed(share);
            black_box(&outcome);
            over_budget |= state.dirty_bytes() > share;
            batch_micros.push(t.elapsed().as_micros() as u64);
            records_done += records;
            batches += 1;
            decided = true;
        }
        if decided && !over_budget && last_write.elapsed() < settings.interval {
            continue;
        }
        // A write-out round: every partition with unwritten work, then one
        // flush for all of them.
        let mut wrote = false;
        for (state, _) in parts.iter_mut() {
            let t = Instant::now();
            if let Some(w) = state.write_out(share)? {
                keys += w.keys as u64;
                bytes += w.bytes as u64;
                orders_written += w.orders as u64;
                write_outs += 1;
                write_micros.push(t.elapsed().as_micros() as u64);
                wrote = true;
            }
        }
        last_write = Instant::now();
        if wrote {
            let t = Instant::now();
            flushed += store.flush()? as u64;
            let took = t.elapsed();
            flush_time += took;
            flush_micros.push(took.as_micros() as u64);
            flushes += 1;
        }
        if !decided {
            break;
        }
    }
    let elapsed = started.elapsed();
    let per_event = |x: u64| x as f64 / records_done.max(1) as f64;
    let (b50, b99) = percentiles_ms(&mut batch_micros);
    let (w50, w99) = percentiles_ms(&mut write_micros);
    let (f50, _) = percentiles_ms(&mut flush_micros);
    eprintln!(
        "pipeline: (d) {batches} batches, {write_outs} write-outs (p50 {w50:.1} ms, p99 {w99:.1} ms), {orders_written} orders written"
    );
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
        avg_state_value_bytes: bytes as f64 / orders_written.max(1) as f64,
        batch_p50_ms: b50,
        batch_p99_ms: b99,
        flush_p50_ms: f50,
        flush_share: flush_time.as_secs_f64() / elapsed.as_secs_f64().max(1e-9),
    };
    Ok((records_done, out))
}
