//! Reading one partition of a topic by assignment, up to a known end: a
//! consumer that never joins a group, its watermarks, and a range read
//! record by record. The changelog's restore and `orderly replay`, the
//! outbox relay's read-back of the output topic and the re-drive commands'
//! scans of the dead-letter topic and the re-drive log all read this way.
//!
//! The client settings are the caller's (built in [`crate::kafka`]); this
//! module only reads. It knows nothing of what the records mean: the caller's
//! `visit` does, and its error type carries this module's [`ReadError`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tracing::{debug, warn};

/// How long one watermark request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// The first try's wait for the watermarks (see [`PartitionReader::watermarks`]).
const FIRST_WATERMARK_WAIT: Duration = Duration::from_millis(30);
/// How long one poll waits before the read checks its end, cancel and stall.
const POLL: Duration = Duration::from_millis(100);

/// Answers the broker (or librdkafka) gives at once and soon stops giving:
/// between the bootstrap connection's close and the first connection to a
/// broker the metadata named, and on a topic created moments ago, before its
/// leaders are known everywhere.
const REFUSED_FOR_NOW: [RDKafkaErrorCode; 5] = [
    RDKafkaErrorCode::AllBrokersDown,
    RDKafkaErrorCode::NotLeaderForPartition,
    RDKafkaErrorCode::LeaderNotAvailable,
    RDKafkaErrorCode::UnknownTopicOrPartition,
    // librdkafka's own answer while its metadata holds the topic without
    // this partition: seen on Apache Kafka 4.4 just after a broker restart,
    // for a changelog partition orderly had checked at start (the e2e
    // late_writes scenario stopped on it with "Unknown partition").
    RDKafkaErrorCode::UnknownPartition,
];

/// Each message names the partition and states its cause once (the
/// underlying error is in a field named `cause`).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot create a consumer of {topic} partition {partition}: {cause}")]
    Client {
        topic: String,
        partition: i32,
        cause: KafkaError,
    },
    #[error("cannot read the offsets of {topic} partition {partition}: {cause}")]
    Watermarks {
        topic: String,
        partition: i32,
        cause: KafkaError,
    },
    #[error("cannot assign {topic} partition {partition} at offset {offset}: {cause}")]
    Assign {
        topic: String,
        partition: i32,
        offset: i64,
        cause: KafkaError,
    },
    #[error("cannot read the consumer's position in {topic} partition {partition}: {cause}")]
    Position {
        topic: String,
        partition: i32,
        cause: KafkaError,
    },
    #[error("reading {topic} partition {partition} was cancelled")]
    Cancelled { topic: String, partition: i32 },
    #[error("reading {topic} partition {partition} stopped at offset {at}, before its end offset {end}: no record for {waited_s} s")]
    Stalled {
        topic: String,
        partition: i32,
        at: i64,
        end: i64,
        waited_s: u64,
    },
}

impl ReadError {
    /// True for a failure of the broker's that passes: refused for now
    /// ([`REFUSED_FOR_NOW`]), no broker reachable, a request timed out. A
    /// read that failed so can be started again.
    pub(crate) fn is_transient(&self) -> bool {
        let (ReadError::Watermarks { cause, .. }
        | ReadError::Assign { cause, .. }
        | ReadError::Position { cause, .. }) = self
        else {
            return false;
        };
        cause.rdkafka_error_code().is_some_and(|code| {
            REFUSED_FOR_NOW.contains(&code)
                || matches!(
                    code,
                    RDKafkaErrorCode::OperationTimedOut
                        | RDKafkaErrorCode::RequestTimedOut
                        | RDKafkaErrorCode::BrokerTransportFailure
                        | RDKafkaErrorCode::NetworkException
                        | RDKafkaErrorCode::NotEnoughReplicas
                )
        })
    }
}

/// What a range read does when the broker sends nothing while records
/// remain before its end.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stall {
    /// Warns every this long and keeps waiting: a restore must finish, and
    /// a slow broker is not a reason to give up on it.
    Warn(Duration),
    /// Fails with [`ReadError::Stalled`] after this long: an operator's
    /// command should say so rather than hang.
    Fail(Duration),
}

/// A reader's consumer, closed on a thread of its own when the reader is
/// dropped. librdkafka wants a group id to assign partitions, and
/// rust-rdkafka closes a consumer with one by polling in 100 ms steps until
/// it is closed: closed in place, one such step would be added to most
/// restores, and to the start of the partition's processing after it
/// (docs/performance.md, "Client settings: the measurements behind them").
struct Closing(Option<BaseConsumer>);

impl std::ops::Deref for Closing {
    type Target = BaseConsumer;

    fn deref(&self) -> &BaseConsumer {
        // Taken only by `drop` below.
        self.0
            .as_ref()
            .expect("a reader's consumer is present until the reader is dropped")
    }
}

impl Drop for Closing {
    fn drop(&mut self) {
        let Some(consumer) = self.0.take() else {
            return;
        };
        // When no thread can be started, the consumer closes here, on the
        // caller's thread, as it would have without this.
        let _ = std::thread::Builder::new()
            .name("reader-close".into())
            .spawn(move || drop(consumer));
    }
}

/// A consumer of one partition (assigned, never in a group).
///
/// Settings that report the end of a partition (`enable.partition.eof`)
/// end a read there; a late report of an earlier read could end a later one
/// early, so a reader with such settings is for one [`PartitionReader::scan`].
pub(crate) struct PartitionReader<'a> {
    consumer: Closing,
    topic: String,
    partition: i32,
    /// Set to stop a read at its next poll.
    cancel: Option<&'a AtomicBool>,
    stall: Stall,
}

impl PartitionReader<'static> {
    /// A reader of `topic` partition `partition` with `client`'s settings;
    /// it warns every 15 s of a stalled read and is not cancellable.
    pub(crate) fn new(
        client: &ClientConfig,
        topic: &str,
        partition: i32,
    ) -> Result<Self, ReadError> {
        let consumer = client.create().map_err(|cause| ReadError::Client {
            topic: topic.into(),
            partition,
            cause,
        })?;
        Ok(PartitionReader {
            consumer: Closing(Some(consumer)),
            topic: topic.into(),
            partition,
            cancel: None,
            stall: Stall::Warn(Duration::from_secs(15)),
        })
    }
}

impl<'a> PartitionReader<'a> {
    /// The same reader, stopped with [`ReadError::Cancelled`] once `cancel` is set.
    pub(crate) fn cancelled_by<'b>(self, cancel: &'b AtomicBool) -> PartitionReader<'b> {
        PartitionReader {
            consumer: self.consumer,
            topic: self.topic,
            partition: self.partition,
            cancel: Some(cancel),
            stall: self.stall,
        }
    }

    /// The same reader with another [`Stall`] policy.
    pub(crate) fn on_stall(self, stall: Stall) -> Self {
        PartitionReader { stall, ..self }
    }

    pub(crate) fn topic(&self) -> &str {
        &self.topic
    }

    pub(crate) fn partition(&self) -> i32 {
        self.partition
    }

    /// (low, high) watermarks: the first offset and the next to be written.
    ///
    /// Asked with a short timeout that doubles on each try, within
    /// [`REQUEST_TIMEOUT`] in all: a new consumer's first query sometimes
    /// finds no leader in its metadata yet (the only answer so far named
    /// brokers, not topics) and waits for librdkafka's next refresh, where a
    /// new query is answered at once. Short tries that grow find that
    /// answer far sooner than one long query, and fetching the topic's
    /// metadata first does not avoid the wait (docs/performance.md,
    /// "Client settings: the measurements behind them").
    pub(crate) fn watermarks(&self) -> Result<(i64, i64), ReadError> {
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        let mut wait = FIRST_WATERMARK_WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .consumer
                .fetch_watermarks(&self.topic, self.partition, wait.min(left))
            {
                Err(KafkaError::MetadataFetch(RDKafkaErrorCode::OperationTimedOut))
                    if wait < left =>
                {
                    wait *= 2
                }
                // Refused at once, and soon answered: between the bootstrap
                // connection's close and the first connection to a broker the
                // metadata named (all brokers down); and on a topic created
                // moments ago, before its leaders are known everywhere (seen
                // on Apache Kafka 4.4 with a changelog topic orderly had just
                // created: "not leader for partition").
                Err(KafkaError::MetadataFetch(code))
                    if REFUSED_FOR_NOW.contains(&code) && wait < left =>
                {
                    std::thread::sleep(wait);
                    wait *= 2;
                }
                result => {
                    return result.map_err(|cause| ReadError::Watermarks {
                        topic: self.topic.clone(),
                        partition: self.partition,
                        cause,
                    })
                }
            }
        }
    }

    /// Reads `[start, end)` of the partition in offset order, calling
    /// `visit` for each record, and stops at `end` (records written
    /// meanwhile are left alone). Offsets below the partition's start
    /// (retention) are skipped by the broker; offsets that hold no record
    /// (compaction, transaction markers) are recognised by the consumer's
    /// position or the end-of-partition report.
    pub(crate) fn scan<E: From<ReadError>>(
        &self,
        start: i64,
        end: i64,
        mut visit: impl FnMut(&BorrowedMessage<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        if start >= end {
            return Ok(());
        }
        self.assign(start)?;
        let mut next = start;
        let mut last_record = Instant::now();
        // Records read since the stall was last checked: the clock is read
        // at the next poll that brings none, not once per record.
        let mut read_since_check = false;
        loop {
            if self
                .cancel
                .is_some_and(|cancel| cancel.load(Ordering::Relaxed))
            {
                return Err(ReadError::Cancelled {
                    topic: self.topic.clone(),
                    partition: self.partition,
                }
                .into());
            }
            match self.consumer.poll(POLL) {
                Some(Ok(message)) if message.partition() == self.partition => {
                    if message.offset() >= end {
                        break;
                    }
                    visit(&message)?;
                    // `end` is exclusive: the record before it is the range's last.
                    next = message.offset() + 1;
                    if next >= end {
                        break;
                    }
                    read_since_check = true;
                    continue;
                }
                // The partition's end as of this read, at or past `end`.
                Some(Err(KafkaError::PartitionEOF(p))) if p == self.partition => break,
                // librdkafka reports connection trouble and retries on its
                // own. A read that waits through it says so; one that fails
                // on a stall reports it then.
                Some(Err(cause)) => match self.stall {
                    Stall::Warn(_) => {
                        warn!(topic = %self.topic, partition = self.partition, %cause, "consumer error while reading; retrying")
                    }
                    Stall::Fail(_) => {
                        debug!(topic = %self.topic, partition = self.partition, %cause, "consumer error while reading; retrying")
                    }
                },
                Some(Ok(_)) => {}
                None => {
                    if self.position()? >= end {
                        break;
                    }
                }
            }
            if std::mem::take(&mut read_since_check) {
                last_record = Instant::now();
            }
            match self.stall {
                Stall::Warn(every) if last_record.elapsed() >= every => {
                    warn!(topic = %self.topic, partition = self.partition, at = next, end, "partition read stalled; waiting for the broker");
                    last_record = Instant::now();
                }
                Stall::Fail(limit) if last_record.elapsed() >= limit => {
                    let (topic, partition, waited_s) =
                        (self.topic.clone(), self.partition, limit.as_secs());
                    return Err(ReadError::Stalled {
                        topic,
                        partition,
                        at: next,
                        end,
                        waited_s,
                    }
                    .into());
                }
                _ => {}
            }
        }
        self.consumer
            .unassign()
            .map_err(|cause| self.assign_error(start, cause))?;
        Ok(())
    }

    fn assign(&self, offset: i64) -> Result<(), ReadError> {
        let mut assignment = TopicPartitionList::with_capacity(1);
        assignment
            .add_partition_offset(&self.topic, self.partition, Offset::Offset(offset))
            .and_then(|()| self.consumer.assign(&assignment))
            .map_err(|cause| self.assign_error(offset, cause))
        // The list is dropped here, before the consumer: a list alive at a
        // consumer's drop can hang it (rust-rdkafka issue 453).
    }

    fn assign_error(&self, offset: i64, cause: KafkaError) -> ReadError {
        ReadError::Assign {
            topic: self.topic.clone(),
            partition: self.partition,
            offset,
            cause,
        }
    }

    /// The offset the next record read will have (-1 before the first fetch).
    fn position(&self) -> Result<i64, ReadError> {
        let list = self
            .consumer
            .position()
            .map_err(|cause| ReadError::Position {
                topic: self.topic.clone(),
                partition: self.partition,
                cause,
            })?;
        let position = list
            .find_partition(&self.topic, self.partition)
            .and_then(|e| super::offset_of(&e))
            .unwrap_or(-1);
        Ok(position)
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::DefaultProducerContext;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    use super::*;

    /// A topic created moments ago can answer "not leader" (or "leader not
    /// available") to the first offset queries: the watermarks are asked
    /// again within the deadline instead of failing the partition's task.
    #[test]
    fn watermarks_are_asked_again_while_a_new_topic_has_no_leader_yet() {
        let cluster: MockCluster<'static, DefaultProducerContext> =
            MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("fresh", 1, 1).expect("topic");
        let mut client = ClientConfig::new();
        client
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("group.id", "watermarks-test");
        let reader = PartitionReader::new(&client, "fresh", 0).expect("reader");
        cluster.request_errors(
            RDKafkaApiKey::ListOffsets,
            &[
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
            ],
        );
        assert_eq!(
            reader
                .watermarks()
                .expect("watermarks after the leader is known"),
            (0, 0)
        );
    }
}
