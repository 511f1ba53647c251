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

use crate::engine::entity::Entity;
use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use tokio::sync::watch;
use tracing::{info, warn};

mod error;

use super::read_back::{read_back, ReadBack};

pub(crate) use error::RelayError;

use super::{OutboxEncoder, OutboxRecord};
use crate::engine::store::PartitionStore;
use crate::kafka::retry::Backoff;
use crate::kafka::ReaderSettings;
use crate::observe::errors::{Kind, Stage};
use crate::observe::Backlog;

/// Records read from the store and published per round.
const ROUND: usize = 5_000;
const WARN_EVERY: Duration = Duration::from_secs(10);

/// What a relay needs.
pub(crate) struct Relay<E: Entity> {
    pub tree: PartitionStore,
    pub partition: i32,
    /// The outbox producer, shared by every partition's relay (fewer,
    /// fuller requests), and its settings (recreated after a fatal error).
    pub producer: Arc<std::sync::Mutex<Option<FutureProducer>>>,
    pub producer_config: ClientConfig,
    pub topic: String,
    pub encoder: Arc<OutboxEncoder<E>>,
    /// The written checkpoint's next offset: records below it are written.
    pub written: watch::Receiver<i64>,
    /// Highest source offset acknowledged by the broker (-1: none).
    pub published: Arc<AtomicI64>,
    pub backlog: Arc<Backlog>,
    pub(crate) warn_count: u64,
    pub(crate) warn_age: Duration,
    /// For reading the output topic back (what was published before).
    pub reader: ReaderSettings,
    /// Where failed publishes are counted (`orderly_errors_total`).
    pub telemetry: Arc<crate::observe::Telemetry>,
    pub source_topic: String,
}

impl<E: Entity> Relay<E> {
    /// Runs until the partition task drops its end of `written`.
    pub(crate) async fn run(mut self) {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        let mut last_warn: Option<Instant> = None;
        let mut last_status = Instant::now() - Duration::from_secs(60);
        // What this partition published before (by an earlier owner or run):
        // records up to it are not published again, so an order's versions
        // never go backwards on the output topic.
        let mut floor: Option<Option<(u32, i64)>> = None;
        // After a failed round, records past the acknowledged prefix may
        // have landed all the same (a delivery report lost to a broker
        // restart, an in-flight timeout): they are read back and skipped,
        // so a retry never re-sends an order's older version after its newer.
        let mut landed: Option<HashSet<(u32, i64)>> = Some(HashSet::new());
        loop {
            let limit = *self.written.borrow_and_update();
            let after = self.published.load(Ordering::SeqCst);
            let Some(records) = self.read_round(after, limit).await else {
                continue;
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
            let producer = match self.producer() {
                Ok(p) => p,
                Err(error) => {
                    warn!(partition = self.partition, %error, "cannot create the outbox producer; retrying");
                    backoff.sleep().await;
                    continue;
                }
            };
            let published_before = match floor {
                Some(f) => f,
                None => match self.floor(&mut last_warn).await {
                    Some(found) => *floor.insert(found),
                    None => {
                        backoff.sleep().await;
                        continue;
                    }
                },
            };
            let landed_now = match landed.take() {
                Some(set) => set,
                None => match self.read_back(Some((records[0].epoch, after))).await {
                    Ok((_, set)) => set,
                    Err(error) => {
                        self.backlog.failing.store(true, Ordering::Relaxed);
                        warn!(partition = self.partition, topic = %self.topic, %error, "cannot read the output topic back; retrying");
                        backoff.sleep().await;
                        continue;
                    }
                },
            };
            match self
                .publish(&producer, &records, published_before, &landed_now)
                .await
            {
                Ok(()) => {
                    backoff.reset();
                    landed = Some(HashSet::new());
                    self.backlog.failing.store(false, Ordering::Relaxed);
                }
                Err(error) => {
                    self.backlog.failing.store(true, Ordering::Relaxed);
                    self.telemetry.errors.record(Stage::Relay, Kind::Retryable);
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
                    backoff.sleep().await;
                    // `landed` stays None: read back before the retry.
                }
            }
        }
    }

    /// The outbox's records after `after` and below `limit`, a round's at
    /// most; `None` after a failed read and a second's wait.
    async fn read_round(&self, after: i64, limit: i64) -> Option<Vec<OutboxRecord<E::Status>>> {
        let tree = self.tree.clone();
        let round = tokio::task::spawn_blocking(move || {
            tree.outbox_between::<E::Status>(after, limit, ROUND)
        })
        .await;
        match round {
            Ok(Ok(records)) => Some(records),
            Ok(Err(error)) => {
                warn!(partition = self.partition, %error, "cannot read the outbox; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                None
            }
            Err(join) => {
                warn!(partition = self.partition, %join, "outbox read task failed; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                None
            }
        }
    }

    /// What this partition published before, read back from the output
    /// topic (said once found); `None` when it cannot be read (the backlog
    /// marked failing, a warning every [`WARN_EVERY`]).
    async fn floor(&self, last_warn: &mut Option<Instant>) -> Option<Option<(u32, i64)>> {
        match self.last_published().await {
            Ok(found) => {
                if let Some((epoch, offset)) = found {
                    info!(
                        partition = self.partition,
                        epoch,
                        source_offset = offset,
                        "outbox: published before up to here"
                    );
                }
                Some(found)
            }
            Err(error) => {
                self.backlog.failing.store(true, Ordering::Relaxed);
                if last_warn.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    warn!(partition = self.partition, topic = %self.topic, %error, "cannot read the output topic back; retrying");
                    *last_warn = Some(Instant::now());
                }
                None
            }
        }
    }

    /// The shared producer, created (again, after a fatal error) when needed.
    fn producer(&self) -> Result<FutureProducer, KafkaError> {
        crate::kafka::shared_producer(&self.producer, &self.producer_config)
    }

    /// Publishes `records` in order; every acknowledged prefix is recorded
    /// in `published` as it is reached. The first failure ends the round.
    async fn publish(
        &self,
        producer: &FutureProducer,
        records: &[OutboxRecord<E::Status>],
        published_before: Option<(u32, i64)>,
        landed: &HashSet<(u32, i64)>,
    ) -> Result<(), RelayError> {
        let mut acks = Vec::with_capacity(records.len());
        for record in records {
            let key = (record.epoch, record.source_offset);
            if published_before.is_some_and(|floor| key <= floor) || landed.contains(&key) {
                // Published already (its deletion was lost to a crash or a
                // move, or its acknowledgement to a failure).
                self.published.store(record.source_offset, Ordering::SeqCst);
                continue;
            }
            let (partition, source_offset) = (self.partition, record.source_offset);
            let payload = self
                .encoder
                .encode(record)
                .map_err(|cause| RelayError::Encode {
                    partition,
                    source_offset,
                    cause,
                })?;
            let message = FutureRecord::<str, Vec<u8>>::to(&self.topic)
                .partition(self.partition)
                .key(record.key.as_str())
                .payload(&payload)
                .headers(super::status_headers(
                    &self.source_topic,
                    self.partition,
                    record,
                ));
            let ack = crate::kafka::send_when_queued(producer, message)
                .await
                .map_err(|cause| RelayError::Send {
                    topic: self.topic.clone(),
                    partition,
                    source_offset,
                    cause,
                })?;
            acks.push((source_offset, ack));
        }
        for (source_offset, ack) in acks {
            let (topic, partition) = (self.topic.clone(), self.partition);
            match ack.await {
                Ok(Ok(_)) => {
                    self.published.store(source_offset, Ordering::SeqCst);
                    self.backlog.published.fetch_add(1, Ordering::Relaxed);
                }
                Ok(Err((cause, _))) => {
                    return Err(RelayError::Delivery {
                        topic,
                        partition,
                        source_offset,
                        cause,
                    })
                }
                Err(_) => {
                    return Err(RelayError::DeliveryDropped {
                        topic,
                        partition,
                        source_offset,
                    })
                }
            }
        }
        Ok(())
    }

    /// The (epoch, source offset) of the last record this input partition
    /// published to its output partition: the relay publishes in order into
    /// one partition, so the last one of its source found reading back from
    /// the end is the highest.
    async fn last_published(&self) -> Result<Option<(u32, i64)>, RelayError> {
        self.read_back(None).await.map(|(last, _)| last)
    }

    /// [`read_back`] of this relay's output partition, on a blocking thread.
    async fn read_back(&self, down_to: Option<(u32, i64)>) -> Result<ReadBack, RelayError> {
        let (reader, topic, source, partition) = (
            self.reader.clone(),
            self.topic.clone(),
            self.source_topic.clone(),
            self.partition,
        );
        let task = tokio::task::spawn_blocking(move || {
            read_back(&reader, &topic, &source, partition, down_to)
        });
        let read = task.await.map_err(|cause| RelayError::ReadBackTask {
            topic: self.topic.clone(),
            partition,
            cause,
        })?;
        Ok(read?)
    }

    /// Updates the backlog figures and warns past the thresholds.
    async fn report(&self, last_warn: &mut Option<Instant>) {
        let tree = self.tree.clone();
        let Ok(Ok((pending, oldest))) =
            tokio::task::spawn_blocking(move || tree.outbox_backlog::<E::Status>()).await
        else {
            return;
        };
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
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
        } else if pending == 0
            && self.backlog.published.load(Ordering::Relaxed) > 0
            && last_warn.is_some()
        {
            info!(partition = self.partition, "outbox backlog drained");
            *last_warn = None;
        }
    }
}
