//! The relay of one partition's outbox: publishes its pending records, in
//! source-offset order, to the output topic (keyed by `order_id`, into the
//! input partition's number), and reports how far the broker acknowledged
//! them; the partition task deletes those at its next write-out (so the
//! deletions reach the changelog in order, and one task writes the tree).
//!
//! Only records of written write-outs are read (below the written
//! checkpoint's next offset), so nothing is published for a change that
//! was not applied. A broker that refuses the output topic does not stop
//! the input: the relay retries with backoff and the backlog grows, with a
//! warning past `[outbox] backlog_warn` records or `backlog_warn_age`.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::ClientConfig;
use tokio::sync::watch;
use tracing::{info, warn};

use super::{OutboxEncoder, OutboxRecord};
use crate::store::PartitionStore;

/// Records read from the store and published per round.
const ROUND: usize = 5_000;
const WARN_EVERY: Duration = Duration::from_secs(10);

/// One partition's outbox, as the relay last saw it (for logs and status).
#[derive(Debug, Default)]
pub struct Backlog {
    /// Records pending (written, not yet acknowledged and deleted).
    pub pending: AtomicU64,
    /// Age of the oldest pending record, milliseconds (0 when none).
    pub oldest_age_ms: AtomicU64,
    /// Records the broker acknowledged.
    pub published: AtomicU64,
}

/// What a relay needs.
pub struct Relay {
    pub tree: PartitionStore,
    pub partition: i32,
    /// The outbox producer's settings (recreated after a fatal error).
    pub producer_config: ClientConfig,
    pub topic: String,
    pub encoder: Arc<OutboxEncoder>,
    /// The written checkpoint's next offset: records below it are written.
    pub written: watch::Receiver<i64>,
    /// Highest source offset acknowledged by the broker (-1: none).
    pub published: Arc<AtomicI64>,
    pub backlog: Arc<Backlog>,
    pub warn_count: u64,
    pub warn_age: Duration,
}

impl Relay {
    /// Runs until the partition task drops its end of `written`.
    pub async fn run(mut self) {
        let mut producer: Option<FutureProducer> = None;
        let mut backoff = Duration::from_millis(100);
        let mut last_warn: Option<Instant> = None;
        let mut last_status = Instant::now() - Duration::from_secs(60);
        loop {
            let limit = *self.written.borrow_and_update();
            let after = self.published.load(Ordering::SeqCst);
            let tree = self.tree.clone();
            let round = tokio::task::spawn_blocking(move || tree.outbox_between(after, limit, ROUND)).await;
            let records = match round {
                Ok(Ok(records)) => records,
                Ok(Err(error)) => {
                    warn!(partition = self.partition, %error, "cannot read the outbox; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
                Err(join) => {
                    warn!(partition = self.partition, %join, "outbox read task failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if last_status.elapsed() >= Duration::from_secs(1) || records.is_empty() {
                self.report(&mut last_warn).await;
                last_status = Instant::now();
            }
            if records.is_empty() {
                tokio::select! {
                    changed = self.written.changed() => if changed.is_err() { return },
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                continue;
            }
            let producer = match &producer {
                Some(p) if p.client().fatal_error().is_none() => p,
                _ => match self.producer_config.create::<FutureProducer>() {
                    Ok(p) => producer.insert(p),
                    Err(error) => {
                        warn!(partition = self.partition, %error, "cannot create the outbox producer; retrying");
                        tokio::time::sleep(backoff).await;
                        continue;
                    }
                },
            };
            match self.publish(producer, &records).await {
                Ok(()) => backoff = Duration::from_millis(100),
                Err(error) => {
                    if last_warn.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                        warn!(
                            partition = self.partition,
                            topic = %self.topic,
                            pending = self.backlog.pending.load(Ordering::Relaxed),
                            %error,
                            "outbox publish failing; retrying (input goes on, the backlog grows)"
                        );
                        last_warn = Some(Instant::now());
                    }
                    tokio::time::sleep(crate::processor::jitter(backoff)).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
    }

    /// Publishes `records` in order; every acknowledged prefix is recorded
    /// in `published` as it is reached. The first failure ends the round.
    async fn publish(&self, producer: &FutureProducer, records: &[OutboxRecord]) -> Result<(), String> {
        let mut acks = Vec::with_capacity(records.len());
        for record in records {
            let payload = self.encoder.encode(record).map_err(|e| e.to_string())?;
            let mut message = FutureRecord::<str, Vec<u8>>::to(&self.topic)
                .partition(self.partition)
                .key(record.order_id.as_str())
                .payload(&payload);
            let ack = loop {
                match producer.send_result(message) {
                    Ok(ack) => break ack,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                        message = back;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((error, _)) => return Err(error.to_string()),
                }
            };
            acks.push((record.source_offset, ack));
        }
        for (source_offset, ack) in acks {
            match ack.await {
                Ok(Ok(_)) => {
                    self.published.store(source_offset, Ordering::SeqCst);
                    self.backlog.published.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err((error, _))) => return Err(error.to_string()),
                Err(_) => return Err("the producer dropped a delivery".into()),
            }
        }
        Ok(())
    }

    /// Updates the backlog figures and warns past the thresholds.
    async fn report(&self, last_warn: &mut Option<Instant>) {
        let tree = self.tree.clone();
        let Ok(Ok((pending, oldest))) = tokio::task::spawn_blocking(move || tree.outbox_backlog()).await else { return };
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        let age_ms = oldest.map(|t| (now_ms - t).max(0) as u64).unwrap_or(0);
        self.backlog.pending.store(pending, Ordering::Relaxed);
        self.backlog.oldest_age_ms.store(age_ms, Ordering::Relaxed);
        let over = pending > self.warn_count || Duration::from_millis(age_ms) > self.warn_age;
        if over && last_warn.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            warn!(
                partition = self.partition,
                pending,
                oldest_age_s = age_ms as f64 / 1000.0,
                "outbox backlog past its warning threshold ([outbox] backlog_warn, backlog_warn_age)"
            );
            *last_warn = Some(Instant::now());
        } else if pending == 0 && self.backlog.published.load(Ordering::Relaxed) > 0 && last_warn.is_some() {
            info!(partition = self.partition, "outbox backlog drained");
            *last_warn = None;
        }
    }
}
