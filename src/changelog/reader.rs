//! Reading one changelog partition: its watermarks, a range of it, the last
//! checkpoint record in a range. Used by restore and by `orderly replay`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tracing::warn;

use super::ChangelogError;
use crate::config::Config;
use crate::store::{changelog_checkpoint_key, Checkpoint};

/// The first window searched backwards for the last checkpoint record.
const FIRST_WINDOW: i64 = 4_096;
/// A broker that sends nothing for this long is reported (and waited for).
const STALL_WARN: Duration = Duration::from_secs(15);

/// The restore consumer's settings: it never joins a group (partitions are
/// assigned by hand; librdkafka wants a group id for that) and commits
/// nothing.
pub fn consumer_config(config: &Config) -> ClientConfig {
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
        // Records of aborted transactions (exactly_once) are never restored.
        .set("isolation.level", "read_committed")
        .set("queued.max.messages.kbytes", "16384")
        // A restore reads up to a known end: a fetch that finds nothing new
        // should come back at once rather than wait for data.
        .set("fetch.wait.max.ms", "10");
    client
}

/// A consumer of one changelog partition (assigned, never in a group).
pub struct PartitionReader<'a> {
    consumer: BaseConsumer,
    topic: String,
    partition: i32,
    /// Set to stop a read at its next poll.
    cancel: &'a AtomicBool,
}

impl<'a> PartitionReader<'a> {
    pub fn new(config: &Config, topic: &str, partition: i32, cancel: &'a AtomicBool) -> Result<Self, ChangelogError> {
        let consumer = consumer_config(config)
            .create()
            .map_err(|cause| ChangelogError::Read { topic: topic.into(), partition, cause })?;
        Ok(PartitionReader { consumer, topic: topic.into(), partition, cancel })
    }

    /// (low, high) watermarks.
    pub fn watermarks(&self) -> Result<(i64, i64), ChangelogError> {
        self.consumer
            .fetch_watermarks(&self.topic, self.partition, Duration::from_secs(10))
            .map_err(|cause| self.read_error(cause))
    }

    /// The last checkpoint record in `[from, high)`: its offset and value.
    pub fn last_checkpoint(&self, from: i64, high: i64) -> Result<Option<(i64, Checkpoint)>, ChangelogError> {
        let key = changelog_checkpoint_key();
        let mut window = FIRST_WINDOW;
        let mut end = high;
        while end > from {
            let start = (end - window).max(from);
            let mut found = None;
            self.scan(start, end, |message| {
                if message.key() == Some(key.as_slice()) {
                    let bytes = message.payload().unwrap_or_default();
                    let checkpoint = Checkpoint::decode(bytes).map_err(|text| self.corrupt(message, text))?;
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

    /// A numeric header of a record (`None` when absent).
    pub fn header(&self, message: &BorrowedMessage<'_>, name: &str) -> Result<Option<i64>, ChangelogError> {
        let Some(value) = crate::kafka::header(message, name) else { return Ok(None) };
        std::str::from_utf8(value)
            .ok()
            .and_then(|text| text.parse().ok())
            .map(Some)
            .ok_or_else(|| self.corrupt(message, format!("{name} header is not a number")))
    }

    pub fn corrupt(&self, message: &BorrowedMessage<'_>, text: String) -> ChangelogError {
        ChangelogError::Corrupt { topic: self.topic.clone(), partition: self.partition, offset: message.offset(), message: text }
    }

    /// Reads `[start, end)` of the partition, calling `visit` for each record.
    pub fn scan(
        &self,
        start: i64,
        end: i64,
        mut visit: impl FnMut(&BorrowedMessage<'_>) -> Result<(), ChangelogError>,
    ) -> Result<(), ChangelogError> {
        if start >= end {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::with_capacity(1);
        tpl.add_partition_offset(&self.topic, self.partition, Offset::Offset(start))
            .map_err(|cause| self.read_error(cause))?;
        self.consumer.assign(&tpl).map_err(|cause| self.read_error(cause))?;
        drop(tpl);
        let mut last_record = Instant::now();
        loop {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(ChangelogError::Cancelled { partition: self.partition });
            }
            match self.consumer.poll(Duration::from_millis(100)) {
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
                    if self.position()? >= end {
                        break;
                    }
                    if last_record.elapsed() >= STALL_WARN {
                        warn!(partition = self.partition, start, end, "changelog read stalled; waiting for the broker");
                        last_record = Instant::now();
                    }
                }
            }
        }
        self.consumer.unassign().map_err(|cause| self.read_error(cause))?;
        Ok(())
    }

    fn position(&self) -> Result<i64, ChangelogError> {
        let list = self.consumer.position().map_err(|cause| self.read_error(cause))?;
        let position = list
            .find_partition(&self.topic, self.partition)
            .and_then(|e| if let Offset::Offset(o) = e.offset() { Some(o) } else { None })
            .unwrap_or(-1);
        Ok(position)
    }

    fn read_error(&self, cause: rdkafka::error::KafkaError) -> ChangelogError {
        ChangelogError::Read { topic: self.topic.clone(), partition: self.partition, cause }
    }
}
