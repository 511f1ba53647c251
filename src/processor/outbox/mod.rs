//! The outbox: an applied event that changes its order's status leaves an
//! [`OutboxRecord`], published to the output topic as `OrderStatusChanged`
//! (Confluent wire format, idempotent producer, the input partition's
//! number), by one of two deliveries (`outbox.delivery`):
//!
//! * `"write_out"` (the default): produced with the write-out that makes
//!   the state change durable, in its transaction with a changelog
//!   (`direct` without one: acknowledged before its store batch); nothing
//!   is stored for it;
//! * [`relay`] (`"relay"`): stored in the same atomic sled batch as the
//!   state change and the checkpoint (and so in the changelog too), and
//!   published, in order, by a relay per partition, which has it deleted
//!   only after the broker acknowledged it.
//!
//! Delivery is at least once: a crash between the broker's acknowledgement
//! and the write-out (or the deletion) publishes a record again, with the
//! same `event_id` (derived from the source event), so consumers
//! deduplicate; `read_back` keeps a re-publish from going back past what
//! an input partition published before. Nothing is published for a change
//! that was not applied. (exactly_once sends the records in each
//! write-out's transaction: `processor::transaction`.)

pub(crate) mod direct;
pub(crate) mod read_back;
pub(crate) mod relay;
#[cfg(test)]
mod tests;

use apache_avro::types::Value;
use apache_avro::Schema;

use crate::engine::codec::{DatumWriter, EncodeError};
use crate::engine::entity::Entity;
pub(crate) use crate::engine::outbox_record::{status_event_id, OutboxRecord};
use crate::registry::{Registry, RegistryError};

/// The output schema of an entity whose status is a string: the fields
/// of `OrderStatusChanged` with the entity's key field (`key_field`) and
/// string statuses, as record `name` in `namespace`.
pub fn string_status_schema(name: &str, namespace: &str, key_field: &str) -> String {
    serde_json::json!({
        "type": "record", "name": name, "namespace": namespace,
        "fields": [
            {"name": "event_id", "type": "string"},
            {"name": key_field, "type": "string"},
            {"name": "version", "type": "long"},
            {"name": "from_status", "type": ["null", "string"], "default": null},
            {"name": "to_status", "type": "string"},
            {"name": "occurred_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "source_topic", "type": "string"},
            {"name": "source_partition", "type": "int"},
            {"name": "source_offset", "type": "long"}
        ]
    })
    .to_string()
}

/// The headers of a status change on the output topic: its source topic,
/// input partition, source offset and epoch (`orderly.source.*`,
/// `orderly.epoch`).
pub(crate) fn status_headers<S>(
    source_topic: &str,
    partition: i32,
    record: &OutboxRecord<S>,
) -> rdkafka::message::OwnedHeaders {
    use crate::kafka::headers;
    let (partition, offset, epoch) = (
        partition.to_string(),
        record.source_offset.to_string(),
        record.epoch.to_string(),
    );
    headers::headers([
        (headers::HEADER_TOPIC, source_topic.as_bytes()),
        (headers::HEADER_PARTITION, partition.as_bytes()),
        (headers::HEADER_OFFSET, offset.as_bytes()),
        (headers::HEADER_EPOCH, epoch.as_bytes()),
    ])
}

/// Encodes an entity's outbox records in its output schema
/// (`OrderStatusChanged` for orders) in the wire format.
pub(crate) struct OutboxEncoder<E: Entity> {
    writer: DatumWriter,
    schema_id: u32,
    source_topic: String,
    entity: std::marker::PhantomData<fn() -> E>,
}

impl<E: Entity> OutboxEncoder<E> {
    /// Registers `entity`'s output schema under `<output_topic>-value`.
    pub(crate) async fn register_for(
        entity: &E,
        registry: &Registry,
        output_topic: &str,
        source_topic: &str,
    ) -> Result<Self, RegistryError> {
        let text = entity.status_schema();
        let rejected = |message: String| RegistryError::Rejected {
            subject: format!("{output_topic}-value"),
            message,
        };
        // Built before the schema is registered: one this process cannot
        // write is not registered either.
        let schema = Schema::parse_str(text).map_err(|e| rejected(e.to_string()))?;
        let mut encoder =
            Self::with_schema(schema, 0, source_topic).map_err(|e| rejected(e.to_string()))?;
        encoder.schema_id = registry
            .register(&format!("{output_topic}-value"), text)
            .await?;
        Ok(encoder)
    }

    /// An encoder of `schema`, registered as `schema_id`.
    pub(crate) fn with_schema(
        schema: Schema,
        schema_id: u32,
        source_topic: &str,
    ) -> Result<Self, EncodeError> {
        Ok(OutboxEncoder {
            writer: DatumWriter::new(schema)?,
            schema_id,
            source_topic: source_topic.into(),
            entity: std::marker::PhantomData,
        })
    }

    pub(crate) fn encode(&self, record: &OutboxRecord<E::Status>) -> Result<Vec<u8>, EncodeError> {
        let from = match &record.from_status {
            None => Value::Union(0, Box::new(Value::Null)),
            Some(s) => Value::Union(1, Box::new(E::status_value(s))),
        };
        let fields = vec![
            (
                "event_id".to_string(),
                Value::String(record.event_id.clone()),
            ),
            (E::KEY_FIELD.to_string(), Value::String(record.key.clone())),
            ("version".to_string(), Value::Long(record.version)),
            ("from_status".to_string(), from),
            ("to_status".to_string(), E::status_value(&record.to_status)),
            (
                "occurred_at".to_string(),
                Value::TimestampMillis(record.occurred_at),
            ),
            (
                "source_topic".to_string(),
                Value::String(self.source_topic.clone()),
            ),
            (
                "source_partition".to_string(),
                Value::Int(record.source_partition),
            ),
            (
                "source_offset".to_string(),
                Value::Long(record.source_offset),
            ),
        ];
        self.writer.wire(self.schema_id, &Value::Record(fields))
    }

    /// Decodes a published record's body (tests and tools).
    pub(crate) fn decode(&self, payload: &[u8]) -> Result<Value, String> {
        let body = payload.get(5..).ok_or("shorter than the wire header")?;
        #[allow(deprecated)]
        apache_avro::from_avro_datum(self.writer.schema(), &mut &body[..], None)
            .map_err(|e| e.to_string())
    }
}
