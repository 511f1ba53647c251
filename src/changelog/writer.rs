//! Produces a write-out's changes to the changelog and waits until the
//! broker acknowledged every one of them, the checkpoint record last.


use rdkafka::error::KafkaError;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::ChangelogError;
use crate::headers::{HEADER_COVERS, HEADER_EPOCH, HEADER_WRITER};
use crate::fault::{self, Point};
use crate::store::{changelog_checkpoint_key, ChangeRecord};

/// A write-out's changelog records handed to the producer, its checkpoint
/// record not yet sent.
pub(crate) struct InFlight {
    partition: i32,
    headers: OwnedHeaders,
    acks: Vec<rdkafka::producer::DeliveryFuture>,
}

/// The changelog's producer (idempotent, `acks=all`) and topic.
#[derive(Clone)]
pub struct ChangelogWriter {
    producer: FutureProducer,
    topic: String,
}

impl ChangelogWriter {
    pub fn new(producer: FutureProducer, topic: String) -> Self {
        ChangelogWriter { producer, topic }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The changelog's producer: status changes published with the
    /// write-out share it (one librdkafka producer, one set of buffers).
    pub fn producer(&self) -> &FutureProducer {
        &self.producer
    }

    /// Produces `changes` then the checkpoint record (`checkpoint`, the
    /// checkpoint's bytes) into `partition`, each tagged with `covers`, and
    /// returns the changelog offset after the checkpoint record once every
    /// record is acknowledged. An error leaves nothing to undo: the local
    /// store is written only after this returns, and a restore never applies
    /// records past the last checkpoint record that covers them.
    pub async fn publish(
        &self,
        partition: i32,
        changes: &[ChangeRecord],
        checkpoint: &[u8],
        covers: i64,
        epoch: u32,
    ) -> Result<i64, ChangelogError> {
        let in_flight = self.send_changes(partition, changes, covers, epoch).await?;
        self.seal(in_flight, checkpoint).await
    }

    /// The first half of [`Self::publish`]: hands `changes` to librdkafka
    /// without waiting for their acknowledgements. Until [`Self::seal`]
    /// sends the checkpoint record, a restore applies none of them, so what
    /// must be durable before the write-out counts as done (its status
    /// changes) is awaited in between.
    pub(crate) async fn send_changes(
        &self,
        partition: i32,
        changes: &[ChangeRecord],
        covers: i64,
        epoch: u32,
    ) -> Result<InFlight, ChangelogError> {
        let covers_text = covers.to_string();
        let epoch_text = epoch.to_string();
        let headers = OwnedHeaders::new_with_capacity(3)
            .insert(Header { key: HEADER_COVERS, value: Some(covers_text.as_str()) })
            .insert(Header { key: HEADER_EPOCH, value: Some(epoch_text.as_str()) })
            .insert(Header { key: HEADER_WRITER, value: Some(crate::kafka::client_id()) });
        let mut acks = Vec::with_capacity(changes.len() + 1);
        let torn_at = fault::due(Point::TornChangelog).then_some(changes.len() / 2);
        for (i, change) in changes.iter().enumerate() {
            if torn_at == Some(i) {
                break;
            }
            let record = FutureRecord::<[u8], [u8]>::to(&self.topic)
                .partition(partition)
                .key(change.key.as_slice())
                .headers(headers.clone());
            let record = match &change.value {
                Some(value) => record.payload(value.as_ref()),
                None => record,
            };
            acks.push(self.enqueue(partition, record).await?);
        }
        if torn_at.is_some() {
            // The crash drill's torn tail: half the changes acknowledged,
            // the checkpoint record never sent.
            for ack in acks {
                let _ = ack.await;
            }
            fault::abort(Point::TornChangelog);
        }
        Ok(InFlight { partition, headers, acks })
    }

    /// The second half of [`Self::publish`]: sends the checkpoint record
    /// after the changes in flight and waits until every one is
    /// acknowledged; returns the changelog offset after the checkpoint
    /// record.
    pub(crate) async fn seal(&self, in_flight: InFlight, checkpoint: &[u8]) -> Result<i64, ChangelogError> {
        let InFlight { partition, headers, mut acks } = in_flight;
        let key = changelog_checkpoint_key();
        let record = FutureRecord::<[u8], [u8]>::to(&self.topic)
            .partition(partition)
            .key(key.as_slice())
            .payload(checkpoint)
            .headers(headers);
        acks.push(self.enqueue(partition, record).await?);
        let mut last = None;
        for ack in acks {
            match ack.await {
                Ok(Ok(delivery)) => last = Some(delivery.offset),
                Ok(Err((cause, _))) => return Err(self.produce_error(partition, cause)),
                Err(_cancelled) => return Err(self.produce_error(partition, KafkaError::Canceled)),
            }
        }
        let offset = last.ok_or_else(|| self.produce_error(partition, KafkaError::Canceled))?;
        Ok(offset + 1)
    }

    /// Hands one record to librdkafka, waiting while its queue is full.
    async fn enqueue(
        &self,
        partition: i32,
        record: FutureRecord<'_, [u8], [u8]>,
    ) -> Result<rdkafka::producer::DeliveryFuture, ChangelogError> {
        crate::kafka::send_when_queued(&self.producer, record).await.map_err(|cause| self.produce_error(partition, cause))
    }

    fn produce_error(&self, partition: i32, cause: KafkaError) -> ChangelogError {
        ChangelogError::Produce { topic: self.topic.clone(), partition, cause }
    }
}
