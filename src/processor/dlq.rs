//! Dead letters: poison records are produced to the dead-letter topic with
//! headers naming where they came from and why, and acknowledged by the
//! broker before the checkpoint moves past them.

use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use tracing::warn;

use crate::codec::PoisonKind;

pub const HEADER_TOPIC: &str = "orderly.source.topic";
pub const HEADER_PARTITION: &str = "orderly.source.partition";
pub const HEADER_OFFSET: &str = "orderly.source.offset";
pub const HEADER_ERROR_KIND: &str = "orderly.error.kind";
pub const HEADER_ERROR_MESSAGE: &str = "orderly.error.message";

/// One record to dead-letter.
pub struct DeadLetter<'a> {
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
    pub partition: i32,
    pub offset: i64,
    pub kind: PoisonKind,
    pub message: String,
}

pub struct DeadLetters {
    producer: FutureProducer,
    dlq_topic: String,
    source_topic: String,
}

impl DeadLetters {
    pub fn new(producer: FutureProducer, dlq_topic: String, source_topic: String) -> Self {
        DeadLetters { producer, dlq_topic, source_topic }
    }

    /// Produces every letter and waits until the broker acknowledged each.
    /// Failures are transient (broker): retried with backoff until acknowledged.
    pub async fn send_all(&self, letters: &[DeadLetter<'_>]) {
        let mut backoff = Duration::from_millis(100);
        let mut pending: Vec<&DeadLetter<'_>> = letters.iter().collect();
        while !pending.is_empty() {
            let results = futures::future::join_all(pending.iter().map(|l| self.send_one(l))).await;
            let mut failed = Vec::new();
            for (letter, result) in pending.into_iter().zip(results) {
                if let Err(error) = result {
                    warn!(partition = letter.partition, offset = letter.offset, %error, "dead-letter produce failed; retrying");
                    failed.push(letter);
                }
            }
            pending = failed;
            if !pending.is_empty() {
                tokio::time::sleep(crate::processor::jitter(backoff)).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }

    async fn send_one(&self, letter: &DeadLetter<'_>) -> Result<(), rdkafka::error::KafkaError> {
        let partition = letter.partition.to_string();
        let offset = letter.offset.to_string();
        let headers = OwnedHeaders::new_with_capacity(5)
            .insert(Header { key: HEADER_TOPIC, value: Some(self.source_topic.as_str()) })
            .insert(Header { key: HEADER_PARTITION, value: Some(partition.as_str()) })
            .insert(Header { key: HEADER_OFFSET, value: Some(offset.as_str()) })
            .insert(Header { key: HEADER_ERROR_KIND, value: Some(letter.kind.as_str()) })
            .insert(Header { key: HEADER_ERROR_MESSAGE, value: Some(letter.message.as_str()) });
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.dlq_topic).headers(headers);
        if let Some(key) = letter.key {
            record = record.key(key);
        }
        if let Some(payload) = letter.payload {
            record = record.payload(payload);
        }
        self.producer.send(record, Duration::from_secs(30)).await.map(|_| ()).map_err(|(e, _)| e)
    }
}
