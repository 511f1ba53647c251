//! The re-drive log: which letters `dlq replay` re-published, kept in a
//! compacted topic of its own (`kafka.redrive_topic`, default
//! `<dlq_topic>.redrive`, one partition) so the dead-letter topic holds dead
//! letters only.
//!
//! One record per re-driven letter, keyed by the input topic and the
//! letter's source position (`orders/3:1234`), so compaction keeps each
//! once; its JSON value names the letter and the count it was re-published
//! with. A run reads the whole log before it decides anything: the log is
//! small (one record per re-driven letter, whatever the traffic) and it is
//! the only place a re-drive is remembered for `--source`.
//!
//! Dead-letter topics written by orderly before the log existed hold
//! re-drive records among their letters (header `orderly.redrive.done`);
//! [`super::letter::parse`] still reads those, so nothing re-driven then is
//! sent again.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use rdkafka::types::RDKafkaErrorCode;
use serde::{Deserialize, Serialize};
use tracing::{info, warn};

use super::letter::{RedrivenSet, SourcePos};
use super::scan::Dlq;
use super::{RedriveError, Redriven};
use crate::config::Config;

/// How long creating the log topic, and seeing it in the metadata, may take.
const CREATE_TIMEOUT: Duration = Duration::from_secs(10);

/// One record of the log: a letter that was re-published.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct LogRecord {
    pub input_topic: String,
    /// The letter's source position, `partition:offset`.
    pub source: String,
    pub(crate) dlq_partition: i32,
    pub(crate) dlq_offset: i64,
    /// The re-drive count the re-published record carries.
    pub redrive_count: u32,
}

/// The log's key for a source position of an input topic.
pub fn key(input_topic: &str, source: SourcePos) -> String {
    format!("{input_topic}/{source}")
}

/// The log topic of a configuration.
pub(crate) struct RedriveLog {
    pub topic: String,
}

impl RedriveLog {
    pub(crate) fn of(config: &Config) -> Self {
        RedriveLog {
            topic: config.redrive_topic(),
        }
    }

    /// Whether the topic exists.
    pub(crate) fn exists(&self, dlq: &Dlq) -> Result<bool, RedriveError> {
        let [partitions] = dlq.partitions_of([self.topic.as_str()])?;
        Ok(partitions.is_some())
    }

    /// Adds every source position of `input_topic` the log names to `done`.
    /// A missing log names none.
    pub(crate) fn read_into(
        &self,
        dlq: &Dlq,
        input_topic: &str,
        done: &mut RedrivenSet,
    ) -> Result<usize, RedriveError> {
        let [partitions] = dlq.partitions_of([self.topic.as_str()])?;
        let Some(partitions) = partitions else {
            return Ok(0);
        };
        let mut read = 0;
        for partition in 0..partitions {
            let (low, end) = dlq.watermarks_in(&self.topic, partition)?;
            dlq.scan_in(&self.topic, partition, low, end, |message| {
                let parsed = message.payload().and_then(|p| serde_json::from_slice::<LogRecord>(p).ok());
                match parsed.and_then(|r| r.source.parse::<SourcePos>().ok().map(|s| (r.input_topic, s))) {
                    Some((topic, source)) => {
                        done.add(input_topic, &topic, vec![source]);
                        read += 1;
                    }
                    None => warn!(topic = %self.topic, partition, offset = message.offset(), "unreadable re-drive log record ignored"),
                }
                Ok(())
            })?;
        }
        Ok(read)
    }

    /// Creates the topic when missing: one partition, `cleanup.policy=compact`,
    /// the broker's default replication factor.
    pub(crate) fn ensure(&self, config: &Config, dlq: &Dlq) -> Result<(), RedriveError> {
        if self.exists(dlq)? {
            return Ok(());
        }
        let failed = |message: String| RedriveError::RedriveLog {
            topic: self.topic.clone(),
            message,
        };
        let admin: AdminClient<DefaultClientContext> = crate::kafka::admin_config(config)
            .create()
            .map_err(|e| failed(format!("cannot create an admin client: {e}")))?;
        let new = NewTopic::new(&self.topic, 1, TopicReplication::Fixed(-1))
            .set("cleanup.policy", "compact");
        let options = AdminOptions::new()
            .operation_timeout(Some(CREATE_TIMEOUT))
            .request_timeout(Some(CREATE_TIMEOUT));
        let results = futures::executor::block_on(admin.create_topics([&new], &options))
            .map_err(|e| failed(format!("cannot create it: {e}")))?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(failed(format!(
                        "cannot create it ({code}); create it with kafka-topics.sh --create --topic {} --partitions 1 \
                         --config cleanup.policy=compact, or set kafka.redrive_topic to one that exists",
                        self.topic
                    )))
                }
            }
        }
        let deadline = Instant::now() + CREATE_TIMEOUT;
        while !self.exists(dlq)? {
            if Instant::now() >= deadline {
                return Err(failed(
                    "created, but it did not appear in the metadata within 10 s".into(),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        info!(topic = %self.topic, "created the re-drive log topic (cleanup.policy=compact)");
        Ok(())
    }

    /// Appends one record per re-driven letter and waits for every
    /// acknowledgement.
    pub(crate) fn record(
        &self,
        producer: &FutureProducer,
        input_topic: &str,
        redriven: &[Redriven],
    ) -> Result<(), RedriveError> {
        let record_error = |cause| RedriveError::RedriveRecord {
            topic: self.topic.clone(),
            partition: 0,
            cause,
        };
        let mut deliveries: Vec<DeliveryFuture> = Vec::with_capacity(redriven.len());
        for r in redriven {
            let source = SourcePos {
                partition: r.source_partition,
                offset: r.source_offset,
            };
            let value = LogRecord {
                input_topic: input_topic.to_string(),
                source: source.to_string(),
                dlq_partition: r.dlq_partition,
                dlq_offset: r.dlq_offset,
                redrive_count: r.redrive_count,
            };
            // Strings and integers only: serializing cannot fail.
            let payload = serde_json::to_vec(&value).unwrap_or_default();
            let key = key(input_topic, source);
            let record: FutureRecord<'_, str, [u8]> = FutureRecord::to(&self.topic)
                .partition(0)
                .key(key.as_str())
                .payload(payload.as_slice());
            let delivery = crate::kafka::send_blocking(producer, record).map_err(record_error)?;
            deliveries.push(delivery);
        }
        for result in futures::executor::block_on(futures::future::join_all(deliveries)) {
            match result {
                Ok(Ok(_)) => {}
                Ok(Err((cause, _))) => return Err(record_error(cause)),
                Err(_) => return Err(record_error(KafkaError::Canceled)),
            }
        }
        Ok(())
    }
}
