//! Status changes published with the write-out (`outbox.delivery =
//! "write_out"`, at_least_once) when there is no changelog: acknowledged
//! before its store batch is written, so none is ever stored. (With a
//! changelog they go in the write-out's transaction:
//! `processor::transaction`.) A crash before the store write redoes the write-out from the
//! same input and the same state: the same status changes, with the same
//! event ids, are published again (at least once, as with the relay).
//!
//! A redo may cut its write-outs differently, so before a partition's
//! first publish its output partition is read back for the last status
//! change its input partition published ([`StatusOutput::published_floor`]),
//! and what is at or below it is not sent again: per order the versions
//! never go backwards on the output topic.

use crate::engine::entity::Entity;
use rdkafka::error::KafkaError;
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::read_back::read_back;
use super::{status_headers, OutboxEncoder};
use crate::engine::outbox_record::OutboxRecord;
use crate::kafka::ReaderSettings;

/// Why a write-out's status changes did not all reach the output topic.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("cannot encode the status change of order {order_id}: {message}")]
    Encode { order_id: String, message: String },
    #[error("cannot publish status changes to {topic} partition {partition}: {cause}")]
    Produce {
        topic: String,
        partition: i32,
        cause: KafkaError,
    },
    #[error("cannot read output partition {partition} of {topic} back: {cause}")]
    ReadBack {
        topic: String,
        partition: i32,
        cause: String,
    },
}

/// The (epoch, source offset) of the last status change an input
/// partition published; `None`: none found.
pub(crate) type Floor = Option<(u32, i64)>;

/// Where a partition's status changes go.
pub(crate) struct StatusOutput<'a, E: Entity> {
    pub producer: &'a FutureProducer,
    pub topic: &'a str,
    pub encoder: &'a OutboxEncoder<E>,
    /// The input topic, named in each record's headers.
    pub source_topic: &'a str,
    /// The input partition: records go to the output partition of the same
    /// number.
    pub partition: i32,
}

impl<E: Entity> StatusOutput<'_, E> {
    /// Reads the output partition back for the last status change of this
    /// input partition (on a blocking thread).
    pub(crate) async fn published_floor(
        &self,
        reader: &ReaderSettings,
    ) -> Result<Floor, PublishError> {
        let (reader, topic, source, partition) = (
            reader.clone(),
            self.topic.to_string(),
            self.source_topic.to_string(),
            self.partition,
        );
        let read = tokio::task::spawn_blocking(move || {
            read_back(&reader, &topic, &source, partition, None)
        });
        let error = |cause: String| PublishError::ReadBack {
            topic: self.topic.to_string(),
            partition: self.partition,
            cause,
        };
        match read.await {
            Ok(Ok((last, _))) => Ok(last),
            Ok(Err(e)) => Err(error(e.to_string())),
            Err(join) => Err(error(join.to_string())),
        }
    }

    /// Produces the `records` above `floor`, in order, and returns once the
    /// broker acknowledged every one (librdkafka retries on its own until
    /// its delivery timeout).
    pub(crate) async fn publish(
        &self,
        records: &[OutboxRecord<E::Status>],
        floor: Floor,
    ) -> Result<(), PublishError> {
        let mut acks = Vec::with_capacity(records.len());
        for record in records
            .iter()
            .filter(|r| floor.is_none_or(|f| (r.epoch, r.source_offset) > f))
        {
            let payload = self
                .encoder
                .encode(record)
                .map_err(|e| PublishError::Encode {
                    order_id: record.key.clone(),
                    message: e.to_string(),
                })?;
            let message = FutureRecord::<str, Vec<u8>>::to(self.topic)
                .partition(self.partition)
                .key(record.key.as_str())
                .payload(&payload)
                .headers(status_headers(self.source_topic, self.partition, record));
            acks.push(
                crate::kafka::send_when_queued(self.producer, message)
                    .await
                    .map_err(|cause| self.error(cause))?,
            );
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
        PublishError::Produce {
            topic: self.topic.to_string(),
            partition: self.partition,
            cause,
        }
    }
}
