//! Dead letters: poison records are produced to the dead-letter topic with
//! headers naming where they came from and why, and acknowledged by the
//! broker before the checkpoint moves past them.
//!
//! A produce failure is classified on rdkafka's error code. Transient ones
//! (broker down, leader moving, timeouts, a full queue) are retried with
//! jittered backoff and a rate-limited warning. Permanent ones (the topic
//! does not exist, this client may not write to it, the record is too large
//! for it, the broker rejects the record) cannot heal by retrying: `try_send_all`
//! returns them, the partition task fails, and the processor stops with a
//! message that names the topic and what to do. Either way the record is
//! never skipped: the batch is not written, so its checkpoint and offset
//! commit never move past it.

use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Header;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tracing::{debug, warn};

use crate::engine::codec::PoisonKind;
use crate::kafka::retry::Backoff;

use crate::kafka::headers::{
    HEADER_ERROR_KIND, HEADER_ERROR_MESSAGE, HEADER_OFFSET, HEADER_PARTITION, HEADER_REDRIVE_COUNT,
    HEADER_TOPIC,
};

/// How long librdkafka may queue one dead letter before `send` gives up on
/// enqueueing it (the retry loop then tries again).
const QUEUE_TIMEOUT: Duration = Duration::from_secs(30);
/// Transient failures are logged at most this often (each at debug level).
const WARN_EVERY: Duration = Duration::from_secs(10);
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// One record to dead-letter.
pub struct DeadLetter<'a> {
    /// The input record's key, copied as it is.
    pub key: Option<&'a [u8]>,
    /// The input record's value, copied as it is.
    pub payload: Option<&'a [u8]>,
    /// The input partition.
    pub partition: i32,
    /// The record's input offset.
    pub offset: i64,
    /// Why it is poison.
    pub kind: PoisonKind,
    /// What is wrong with it.
    pub message: String,
    /// The input record's [`HEADER_REDRIVE_COUNT`] value, copied as it is
    /// (`None` when the record was never re-driven).
    pub redrive_count: Option<&'a [u8]>,
}

/// Why a dead letter can never be produced as things stand: an operator has
/// to change the topic, its configuration or this client's rights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermanentCause {
    /// The topic or partition does not exist (reported after librdkafka's
    /// own wait, `topic.metadata.propagation.max.ms`).
    MissingTopic,
    /// This client may not write to the topic (or to the cluster as an
    /// idempotent producer).
    NotAuthorized,
    /// The record is larger than the topic or the client accepts.
    TooLarge,
    /// The broker rejects the record itself (policy, format, timestamp).
    Rejected,
    /// The idempotent producer hit a fatal error and cannot produce again.
    ProducerFailed,
}

impl PermanentCause {
    /// Sorts an rdkafka error code; `None` for transient codes. Codes not
    /// listed count as transient: retrying never loses a record, and the
    /// rate-limited warning names the code, so a stall is never silent.
    pub fn of(code: RDKafkaErrorCode) -> Option<Self> {
        use RDKafkaErrorCode as C;
        Some(match code {
            C::UnknownTopic
            | C::UnknownTopicOrPartition
            | C::UnknownPartition
            | C::InvalidTopic => PermanentCause::MissingTopic,
            C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::SaslAuthenticationFailed
            | C::Authentication => PermanentCause::NotAuthorized,
            C::MessageSizeTooLarge | C::InvalidMessageSize | C::MessageBatchTooLarge => {
                PermanentCause::TooLarge
            }
            C::InvalidRecord
            | C::InvalidTimestamp
            | C::PolicyViolation
            | C::UnsupportedForMessageFormat
            | C::InvalidRequiredAcks
            | C::BadMessage
            | C::InvalidArgument => PermanentCause::Rejected,
            C::Fatal | C::ProducerFenced => PermanentCause::ProducerFailed,
            _ => return None,
        })
    }

    fn remedy(self, topic: &str) -> String {
        match self {
            PermanentCause::MissingTopic => format!(
                "create topic {topic} (for example `kafka-topics.sh --bootstrap-server BROKER --create --topic {topic} \
                 --partitions 1 --replication-factor 3`) or set kafka.dlq_topic to an existing topic, then restart"
            ),
            PermanentCause::NotAuthorized => format!(
                "grant this client's principal WRITE on topic {topic} (and IDEMPOTENT_WRITE on the cluster for brokers \
                 before 2.8), then restart"
            ),
            PermanentCause::TooLarge => format!(
                "raise max.message.bytes of topic {topic} (and message.max.bytes under [kafka.librdkafka]) above the \
                 record's size, then restart"
            ),
            PermanentCause::Rejected => {
                format!("check the configuration of topic {topic} (policies, message format, timestamps), then restart")
            }
            PermanentCause::ProducerFailed => "restart orderly to get a new producer".to_string(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DeadLetterError {
    /// Producing to the dead-letter topic failed for good. The record was
    /// not skipped: nothing after it was written or committed.
    #[error(
        "cannot dead-letter the record of {source_topic} partition {partition} offset {offset} to topic {topic}: \
         {code} ({code:?}); {remedy}"
    )]
    Permanent {
        topic: String,
        source_topic: String,
        partition: i32,
        offset: i64,
        cause: PermanentCause,
        code: RDKafkaErrorCode,
        remedy: String,
    },
    /// The start-up check did not find the topic.
    #[error(
        "dead-letter topic {topic} does not exist (or this client may not describe it); create it (for example \
         `kafka-topics.sh --bootstrap-server BROKER --create --topic {topic} --partitions 1 --replication-factor 3`) \
         or set kafka.dlq_topic to an existing topic"
    )]
    TopicMissing { topic: String },
    #[error("cannot read cluster metadata to check dead-letter topic {topic}: {source}")]
    Metadata { topic: String, source: KafkaError },
}

/// Sends dead letters to the dead-letter topic, with the source position
/// and the reason in their headers, each acknowledged.
pub struct DeadLetters {
    sink: Sink,
    dlq_topic: String,
    source_topic: String,
    /// Where transient failures are counted (`orderly_errors_total`).
    errors: Option<std::sync::Arc<crate::observe::Telemetry>>,
}

/// Where letters go: the dead-letter topic, or (tests) memory.
enum Sink {
    Kafka(FutureProducer),
    #[cfg(test)]
    Memory(std::sync::Mutex<Vec<(i64, PoisonKind)>>),
}

impl Sink {
    fn producer(&self) -> Option<&FutureProducer> {
        match self {
            Sink::Kafka(producer) => Some(producer),
            #[cfg(test)]
            Sink::Memory(_) => None,
        }
    }
}

impl DeadLetters {
    /// Letters of `source_topic`'s records, sent to `dlq_topic` with
    /// `producer`.
    pub fn new(producer: FutureProducer, dlq_topic: String, source_topic: String) -> Self {
        DeadLetters {
            sink: Sink::Kafka(producer),
            dlq_topic,
            source_topic,
            errors: None,
        }
    }

    /// Letters kept in memory, for tests without a broker.
    #[cfg(test)]
    pub(crate) fn in_memory(dlq_topic: String, source_topic: String) -> Self {
        DeadLetters {
            sink: Sink::Memory(Default::default()),
            dlq_topic,
            source_topic,
            errors: None,
        }
    }

    /// What an in-memory sink was sent: each letter's offset and kind.
    #[cfg(test)]
    pub(crate) fn sent(&self) -> Vec<(i64, PoisonKind)> {
        match &self.sink {
            Sink::Memory(sent) => sent.lock().map(|s| s.clone()).unwrap_or_default(),
            Sink::Kafka(_) => Vec::new(),
        }
    }

    /// Counts transient failures in `telemetry`.
    pub(crate) fn counting_into(
        mut self,
        telemetry: std::sync::Arc<crate::observe::Telemetry>,
    ) -> Self {
        self.errors = Some(telemetry);
        self
    }

    /// The dead-letter topic.
    pub fn topic(&self) -> &str {
        &self.dlq_topic
    }

    /// Checks that the dead-letter topic exists, without asking the broker
    /// to create it (a metadata request for every topic never auto-creates).
    /// Blocking, up to `timeout`: call it from a thread that may block.
    pub fn check_topic(&self, timeout: Duration) -> Result<(), DeadLetterError> {
        let Some(producer) = self.sink.producer() else {
            return Ok(());
        };
        let metadata = producer
            .client()
            .fetch_metadata(None, timeout)
            .map_err(|source| DeadLetterError::Metadata {
                topic: self.dlq_topic.clone(),
                source,
            })?;
        let exists = metadata.topics().iter().any(|t| {
            t.name() == self.dlq_topic && t.error().is_none() && !t.partitions().is_empty()
        });
        if exists {
            Ok(())
        } else {
            Err(DeadLetterError::TopicMissing {
                topic: self.dlq_topic.clone(),
            })
        }
    }

    /// Produces every letter and waits until the broker acknowledged each.
    /// Transient failures are retried with jittered backoff until
    /// acknowledged; the first permanent one is returned. The caller must
    /// then stop without writing the batch: its letters are not all durable,
    /// so nothing may move past them.
    pub async fn try_send_all(&self, letters: &[DeadLetter<'_>]) -> Result<(), DeadLetterError> {
        let mut pending: Vec<&DeadLetter<'_>> = letters.iter().collect();
        self.send_pending(&mut pending).await
    }

    /// Sends `pending` until every letter is acknowledged (removing each as
    /// it is) or one fails permanently.
    async fn send_pending(
        &self,
        pending: &mut Vec<&DeadLetter<'_>>,
    ) -> Result<(), DeadLetterError> {
        let started = Instant::now();
        let mut backoff = Backoff::new(BACKOFF_START, BACKOFF_MAX);
        let mut attempts: u64 = 0;
        let mut last_warn: Option<Instant> = None;
        while !pending.is_empty() {
            attempts += 1;
            let results = futures::future::join_all(pending.iter().map(|l| self.send_one(l))).await;
            let mut failed = Vec::new();
            let mut permanent = None;
            let mut transient = None;
            for (letter, result) in pending.drain(..).zip(results) {
                let Err(error) = result else { continue };
                failed.push(letter);
                if permanent.is_none() {
                    permanent = self.permanent(letter, &error);
                }
                debug!(partition = letter.partition, offset = letter.offset, %error, "dead-letter produce failed");
                transient.get_or_insert(error);
            }
            *pending = failed;
            if let Some(error) = permanent {
                return Err(error);
            }
            if let Some(error) = transient {
                if let Some(t) = &self.errors {
                    t.errors.record(
                        crate::observe::errors::Stage::DeadLetter,
                        crate::observe::errors::Kind::Retryable,
                    );
                }
                if last_warn.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
                    warn!(
                        topic = %self.dlq_topic,
                        pending = pending.len(),
                        attempts,
                        waited_ms = started.elapsed().as_millis() as u64,
                        %error,
                        "dead-letter produce failing (transient); retrying, nothing moves past these records"
                    );
                    last_warn = Some(Instant::now());
                }
                backoff.sleep().await;
            }
        }
        Ok(())
    }

    /// The permanent error for `error`, or `None` when it is transient.
    fn permanent(&self, letter: &DeadLetter<'_>, error: &KafkaError) -> Option<DeadLetterError> {
        let KafkaError::MessageProduction(code) = *error else {
            return None;
        };
        let cause = PermanentCause::of(code)?;
        Some(DeadLetterError::Permanent {
            topic: self.dlq_topic.clone(),
            source_topic: self.source_topic.clone(),
            partition: letter.partition,
            offset: letter.offset,
            cause,
            code,
            remedy: cause.remedy(&self.dlq_topic),
        })
    }

    async fn send_one(&self, letter: &DeadLetter<'_>) -> Result<(), KafkaError> {
        let record = letter_record(&self.dlq_topic, &self.source_topic, letter);
        #[cfg(test)]
        if let Sink::Memory(sent) = &self.sink {
            if let Ok(mut sent) = sent.lock() {
                sent.push((letter.offset, letter.kind));
            }
            return Ok(());
        }
        let Some(producer) = self.sink.producer() else {
            return Ok(());
        };
        producer
            .send(record, QUEUE_TIMEOUT)
            .await
            .map(|_| ())
            .map_err(|(e, _)| e)
    }
}

/// The dead-letter record of `letter` for `dlq_topic`: its key and payload
/// as they came, headers naming the source and the error.
pub(crate) fn letter_record<'a>(
    dlq_topic: &'a str,
    source_topic: &str,
    letter: &'a DeadLetter<'_>,
) -> FutureRecord<'a, [u8], [u8]> {
    let partition = letter.partition.to_string();
    let offset = letter.offset.to_string();
    let mut headers = crate::kafka::headers::headers([
        (HEADER_TOPIC, source_topic.as_bytes()),
        (HEADER_PARTITION, partition.as_bytes()),
        (HEADER_OFFSET, offset.as_bytes()),
        (HEADER_ERROR_KIND, letter.kind.as_str().as_bytes()),
        (HEADER_ERROR_MESSAGE, letter.message.as_bytes()),
    ]);
    if let Some(count) = letter.redrive_count {
        headers = headers.insert(Header {
            key: HEADER_REDRIVE_COUNT,
            value: Some(count),
        });
    }
    let mut record: FutureRecord<'a, [u8], [u8]> = FutureRecord::to(dlq_topic).headers(headers);
    if let Some(key) = letter.key {
        record = record.key(key);
    }
    if let Some(payload) = letter.payload {
        record = record.payload(payload);
    }
    record
}

/// A dead letter held until its partition's next write-out (exactly_once:
/// letters go out inside the write-out's transaction).
pub(crate) struct HeldLetter {
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
    pub partition: i32,
    pub offset: i64,
    pub kind: PoisonKind,
    pub message: String,
    pub redrive_count: Option<Vec<u8>>,
}

impl HeldLetter {
    pub(super) fn hold(letter: &DeadLetter<'_>) -> Self {
        HeldLetter {
            key: letter.key.map(<[u8]>::to_vec),
            payload: letter.payload.map(<[u8]>::to_vec),
            partition: letter.partition,
            offset: letter.offset,
            kind: letter.kind,
            message: letter.message.clone(),
            redrive_count: letter.redrive_count.map(<[u8]>::to_vec),
        }
    }

    pub(super) fn letter(&self) -> DeadLetter<'_> {
        DeadLetter {
            key: self.key.as_deref(),
            payload: self.payload.as_deref(),
            partition: self.partition,
            offset: self.offset,
            kind: self.kind,
            message: self.message.clone(),
            redrive_count: self.redrive_count.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn produce_errors_are_sorted_by_code() {
        use RDKafkaErrorCode as C;
        for (code, want) in [
            (C::UnknownTopic, Some(PermanentCause::MissingTopic)),
            (
                C::UnknownTopicOrPartition,
                Some(PermanentCause::MissingTopic),
            ),
            (
                C::TopicAuthorizationFailed,
                Some(PermanentCause::NotAuthorized),
            ),
            (
                C::ClusterAuthorizationFailed,
                Some(PermanentCause::NotAuthorized),
            ),
            (C::MessageSizeTooLarge, Some(PermanentCause::TooLarge)),
            (C::InvalidRecord, Some(PermanentCause::Rejected)),
            (C::Fatal, Some(PermanentCause::ProducerFailed)),
            (C::MessageTimedOut, None),
            (C::QueueFull, None),
            (C::NotEnoughReplicas, None),
            (C::LeaderNotAvailable, None),
            (C::NotLeaderForPartition, None),
            (C::RequestTimedOut, None),
            (C::AllBrokersDown, None),
            (C::BrokerTransportFailure, None),
        ] {
            assert_eq!(PermanentCause::of(code), want, "{code:?}");
        }
    }

    #[test]
    fn a_permanent_error_names_the_topic_the_record_and_the_remedy() {
        let error = DeadLetterError::Permanent {
            topic: "orders.dlq".into(),
            source_topic: "orders".into(),
            partition: 3,
            offset: 42,
            cause: PermanentCause::MissingTopic,
            code: RDKafkaErrorCode::UnknownTopic,
            remedy: PermanentCause::MissingTopic.remedy("orders.dlq"),
        };
        let text = error.to_string();
        for part in [
            "orders.dlq",
            "partition 3 offset 42",
            "UnknownTopic",
            "create topic orders.dlq",
            "kafka.dlq_topic",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
    }
}
