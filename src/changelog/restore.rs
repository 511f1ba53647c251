//! Restore: brings one partition's tree up to its changelog partition before
//! any input record of it is processed.
//!
//! 1. The tree's recorded changelog position (`changelog_next`), or the
//!    changelog's start without one, is compared with the changelog's end.
//!    Not below it: nothing to do.
//! 2. The last checkpoint record after that position is found by reading
//!    the changelog's tail backwards in growing windows (a write-out ends
//!    with its checkpoint record, so it is usually in the first window).
//!    None there: only a torn tail follows the position; nothing to apply.
//! 3. Records from the position up to that checkpoint record are applied to
//!    the tree in batches, those it covers only (`covers <= next_offset`),
//!    with the tree marked as restoring; the last batch writes the
//!    checkpoint (with its changelog position) and clears the mark
//!    atomically. A crash or a revoke mid-restore leaves the mark, and the
//!    next restore starts again from the recorded position: records are
//!    re-applied in log order, so the result is the same.
//!
//! Runs on a blocking thread with its own consumer (no group), so the poll
//! thread and the other partitions go on meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tracing::{info, warn};

use super::{ChangelogError, HEADER_COVERS};
use crate::config::Config;
use crate::store::{changelog_checkpoint_key, BatchWrite, ChangeRecord, Checkpoint, PartitionStore};

/// Records applied to sled per batch while restoring.
const RESTORE_BATCH: usize = 10_000;
/// The first window searched backwards for the last checkpoint record.
const FIRST_WINDOW: i64 = 4_096;
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// A broker that sends nothing for this long is reported (and waited for).
const STALL_WARN: Duration = Duration::from_secs(15);

/// What a restore did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Restored {
    /// True when the tree was changed (a checkpoint was restored).
    pub restored: bool,
    /// The tree's checkpoint afterwards.
    pub checkpoint: Option<Checkpoint>,
    /// Changelog records read and applied.
    pub applied: u64,
    /// Records read and not applied: beyond the checkpoint that ends the
    /// restore (a torn or obsolete write-out).
    pub skipped: u64,
    pub elapsed: Duration,
}

/// The restore consumer's settings: it never joins a group (partitions are
/// assigned by hand; librdkafka wants a group id for that) and commits
/// nothing.
fn consumer_config(config: &Config) -> ClientConfig {
    let mut client = ClientConfig::new();
    for (key, value) in config.librdkafka_passthrough() {
        // Group membership settings belong to the processor's consumer.
        if !key.starts_with("group.") {
            client.set(key, value);
        }
    }
    client
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", format!("{}-restore", config.kafka.group_id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        .set("queued.max.messages.kbytes", "16384")
        // A restore reads up to a known end: a fetch that finds nothing new
        // should come back at once rather than wait for data.
        .set("fetch.wait.max.ms", "10");
    client
}

/// One partition's restore.
pub struct Restore<'a> {
    pub config: &'a Config,
    pub topic: &'a str,
    pub partition: i32,
    pub tree: &'a PartitionStore,
    /// Set when the partition is revoked: the restore stops at its next poll.
    pub cancel: &'a AtomicBool,
}

impl Restore<'_> {
    /// Restores the tree when it is behind the changelog (see the module doc).
    pub fn run(&self) -> Result<Restored, ChangelogError> {
        let started = Instant::now();
        let local = self.tree.checkpoint()?;
        let marked = self.tree.restoring()?;
        let consumer: BaseConsumer = consumer_config(self.config).create().map_err(|cause| self.read_error(cause))?;
        let (low, high) = consumer
            .fetch_watermarks(self.topic, self.partition, Duration::from_secs(10))
            .map_err(|cause| self.read_error(cause))?;
        let recorded = local.and_then(|c| c.changelog_next);
        if let Some(position) = recorded {
            if position > high {
                return Err(ChangelogError::StoreAhead { topic: self.topic.into(), partition: self.partition, local: position, end: high });
            }
        }
        let from = recorded.unwrap_or(low).max(low);
        let unchanged = Restored { checkpoint: local, elapsed: started.elapsed(), ..Default::default() };
        if from >= high {
            return Ok(unchanged);
        }
        let Some((at, checkpoint)) = self.last_checkpoint(&consumer, from, high)? else {
            if marked {
                warn!(partition = self.partition, "a restore was interrupted and no checkpoint record follows its position");
            }
            info!(partition = self.partition, from, end = high, "changelog holds no complete write-out past the store's position");
            return Ok(unchanged);
        };
        if let Some(local) = local {
            if checkpoint.next_offset < local.next_offset {
                return Err(ChangelogError::Corrupt {
                    topic: self.topic.into(),
                    partition: self.partition,
                    offset: at,
                    message: format!(
                        "its checkpoint (input offset {}) is behind the store's ({})",
                        checkpoint.next_offset, local.next_offset
                    ),
                });
            }
        }
        info!(
            partition = self.partition,
            from,
            to = at + 1,
            records = at + 1 - from,
            next_offset = checkpoint.next_offset,
            "restoring from the changelog"
        );
        self.tree.begin_restore()?;
        let mut write = BatchWrite::default();
        let (mut applied, mut skipped, mut in_batch) = (0u64, 0u64, 0usize);
        let mut last_log = Instant::now();
        let mut last_applied = 0u64;
        let checkpoint_key = changelog_checkpoint_key();
        self.scan(&consumer, from, at + 1, |message| {
            if message.offset() == at {
                return Ok(());
            }
            let key = message.key().unwrap_or_default();
            if key == checkpoint_key.as_slice() {
                return Ok(());
            }
            if self.covers(message)? > checkpoint.next_offset {
                skipped += 1;
                return Ok(());
            }
            write.restore(ChangeRecord { key: key.to_vec(), value: message.payload().map(sled::IVec::from) });
            applied += 1;
            in_batch += 1;
            if in_batch >= RESTORE_BATCH {
                self.tree.restore_batch(std::mem::take(&mut write))?;
                in_batch = 0;
            }
            if last_log.elapsed() >= PROGRESS_EVERY {
                let rate = (applied - last_applied) as f64 / last_log.elapsed().as_secs_f64();
                info!(
                    partition = self.partition,
                    restored = applied,
                    to_go = at - message.offset(),
                    per_second = rate.round() as u64,
                    "restoring"
                );
                last_log = Instant::now();
                last_applied = applied;
            }
            Ok(())
        })?;
        let checkpoint = Checkpoint { changelog_next: Some(at + 1), ..checkpoint };
        self.tree.finish_restore(write, &checkpoint)?;
        let elapsed = started.elapsed();
        info!(
            partition = self.partition,
            restored = applied,
            skipped,
            next_offset = checkpoint.next_offset,
            seconds = elapsed.as_secs_f64(),
            per_second = (applied as f64 / elapsed.as_secs_f64().max(1e-6)).round() as u64,
            "restore finished"
        );
        Ok(Restored { restored: true, checkpoint: Some(checkpoint), applied, skipped, elapsed })
    }

    /// The last checkpoint record in `[from, high)`: its offset and value.
    fn last_checkpoint(&self, consumer: &BaseConsumer, from: i64, high: i64) -> Result<Option<(i64, Checkpoint)>, ChangelogError> {
        let key = changelog_checkpoint_key();
        let mut window = FIRST_WINDOW;
        let mut end = high;
        while end > from {
            let start = (end - window).max(from);
            let mut found = None;
            self.scan(consumer, start, end, |message| {
                if message.key() == Some(key.as_slice()) {
                    let bytes = message.payload().unwrap_or_default();
                    let checkpoint = self.tree.decode_checkpoint(bytes)?;
                    found = Some((message.offset(), checkpoint));
                }
                Ok(())
            })?;
            if found.is_some() {
                return Ok(found);
            }
            end = start;
            window = window.saturating_mul(4);
        }
        Ok(None)
    }

    /// The input offset a record's write-out covers (its header).
    fn covers(&self, message: &BorrowedMessage<'_>) -> Result<i64, ChangelogError> {
        let corrupt = |message_text: String| ChangelogError::Corrupt {
            topic: self.topic.into(),
            partition: self.partition,
            offset: message.offset(),
            message: message_text,
        };
        let headers = message.headers().ok_or_else(|| corrupt(format!("no {HEADER_COVERS} header")))?;
        let value = headers
            .iter()
            .find(|h| h.key == HEADER_COVERS)
            .and_then(|h| h.value)
            .ok_or_else(|| corrupt(format!("no {HEADER_COVERS} header")))?;
        std::str::from_utf8(value)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| corrupt(format!("{HEADER_COVERS} header is not an offset")))
    }

    /// Reads `[start, end)` of the partition, calling `visit` for each record.
    fn scan(
        &self,
        consumer: &BaseConsumer,
        start: i64,
        end: i64,
        mut visit: impl FnMut(&BorrowedMessage<'_>) -> Result<(), ChangelogError>,
    ) -> Result<(), ChangelogError> {
        if start >= end {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::with_capacity(1);
        tpl.add_partition_offset(self.topic, self.partition, Offset::Offset(start))
            .map_err(|cause| self.read_error(cause))?;
        consumer.assign(&tpl).map_err(|cause| self.read_error(cause))?;
        drop(tpl);
        let mut last_record = Instant::now();
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(ChangelogError::Cancelled { partition: self.partition });
            }
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(message)) => {
                    last_record = Instant::now();
                    if message.offset() >= end {
                        break;
                    }
                    visit(&message)?;
                    if message.offset() + 1 >= end {
                        break;
                    }
                }
                Some(Err(cause)) => warn!(partition = self.partition, %cause, "changelog read error (retrying)"),
                None => {
                    // A compacted changelog can have no record at `end - 1`:
                    // the consumer's position says when the range is read.
                    if self.position(consumer)? >= end {
                        break;
                    }
                    if last_record.elapsed() >= STALL_WARN {
                        warn!(partition = self.partition, start, end, "changelog read stalled; waiting for the broker");
                        last_record = Instant::now();
                    }
                }
            }
        }
        consumer.unassign().map_err(|cause| self.read_error(cause))?;
        Ok(())
    }

    fn position(&self, consumer: &BaseConsumer) -> Result<i64, ChangelogError> {
        let list = consumer.position().map_err(|cause| self.read_error(cause))?;
        let position = list
            .find_partition(self.topic, self.partition)
            .and_then(|e| if let Offset::Offset(o) = e.offset() { Some(o) } else { None })
            .unwrap_or(-1);
        Ok(position)
    }

    fn read_error(&self, cause: rdkafka::error::KafkaError) -> ChangelogError {
        ChangelogError::Read { topic: self.topic.into(), partition: self.partition, cause }
    }
}
