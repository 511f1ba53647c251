//! Status changes published with the write-out (`outbox.delivery =
//! "write_out"`, at_least_once): produced beside the write-out's changelog
//! records and acknowledged before its store batch is written, so none is
//! ever stored. A crash before the store write redoes the write-out from the
//! same input and the same state: the same status changes, with the same
//! event ids, are published again (at least once, as with the relay).

use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::{status_headers, OutboxEncoder};
use crate::event::OutboxRecord;

/// Why a write-out's status changes did not all reach the output topic.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("cannot encode the status change of order {order_id}: {message}")]
    Encode { order_id: String, message: String },
    #[error("cannot publish status changes to {topic} partition {partition}: {cause}")]
    Produce { topic: String, partition: i32, cause: KafkaError },
}

/// Where a partition's status changes go.
pub struct StatusOutput<'a> {
    pub producer: &'a FutureProducer,
    pub topic: &'a str,
    pub encoder: &'a OutboxEncoder,
    /// The input topic, named in each record's headers.
    pub source_topic: &'a str,
    /// The input partition: records go to the output partition of the same
    /// number.
    pub partition: i32,
}

impl StatusOutput<'_> {
    /// Produces `records` in order and returns once the broker acknowledged
    /// every one (librdkafka retries on its own until its delivery timeout).
    pub async fn publish(&self, records: &[OutboxRecord]) -> Result<(), PublishError> {
        let mut acks = Vec::with_capacity(records.len());
        for record in records {
            let payload = self
                .encoder
                .encode(record)
                .map_err(|e| PublishError::Encode { order_id: record.order_id.clone(), message: e.to_string() })?;
            let message = FutureRecord::<str, Vec<u8>>::to(self.topic)
                .partition(self.partition)
                .key(record.order_id.as_str())
                .payload(&payload)
                .headers(status_headers(self.source_topic, self.partition, record));
            acks.push(crate::kafka::send_when_queued(self.producer, message).await.map_err(|cause| self.error(cause))?);
        }
        for ack in acks {
            match ack.await {
                Ok(Ok(_)) => {}
                Ok(Err((cause, _))) => return Err(self.error(cause)),
                Err(_cancelled) => return Err(self.error(KafkaError::Canceled)),
            }
        }
        Ok(())
    }

    fn error(&self, cause: KafkaError) -> PublishError {
        PublishError::Produce { topic: self.topic.to_string(), partition: self.partition, cause }
    }
}
