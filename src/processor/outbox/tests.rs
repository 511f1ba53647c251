//! The tests of `processor::outbox`, with orders as the entity.

use crate::domains::orders::event::EventType;
use crate::domains::orders::{Orders, STATUS_SCHEMA};
use crate::processor::outbox::*;
use apache_avro::types::Value;
use apache_avro::Schema;

impl OutboxEncoder<Orders> {
    /// An order encoder whose schema is registered as `schema_id`.
    fn with_id(schema_id: u32, source_topic: &str) -> Self {
        // Compiled in and covered by tests: failing to parse it is a build defect.
        let schema = Schema::parse_str(STATUS_SCHEMA).expect("compiled-in schema parses");
        Self::with_schema(schema, schema_id, source_topic).expect("its names resolve")
    }
}

#[test]
fn ids_are_stable_and_distinct() {
    assert_eq!(status_event_id("a"), status_event_id("a"));
    assert_ne!(status_event_id("a"), status_event_id("b"));
    assert_eq!(status_event_id("a").len(), 36);
}

#[test]
fn records_round_trip_through_avro() {
    let encoder = OutboxEncoder::with_id(7, "orders");
    let record = OutboxRecord {
        event_id: status_event_id("e1"),
        key: "o1".into(),
        version: 2,
        from_status: Some(EventType::Created),
        to_status: EventType::Paid,
        occurred_at: 1_764_547_200_000,
        source_partition: 3,
        source_offset: 41,
        created_ms: 5,
        epoch: 0,
    };
    let bytes = encoder.encode(&record).unwrap();
    assert_eq!(&bytes[..5], &[0, 0, 0, 0, 7]);
    let Value::Record(fields) = encoder.decode(&bytes).unwrap() else {
        panic!("a record")
    };
    let get = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap()
    };
    assert_eq!(get("order_id"), Value::String("o1".into()));
    assert_eq!(
        get("from_status"),
        Value::Union(1, Box::new(Value::Enum(0, "CREATED".into())))
    );
    assert_eq!(get("source_offset"), Value::Long(41));
    let first = OutboxRecord {
        from_status: None,
        ..record
    };
    let Value::Record(fields) = encoder.decode(&encoder.encode(&first).unwrap()).unwrap() else {
        panic!()
    };
    assert!(fields
        .iter()
        .any(|(n, v)| n == "from_status" && *v == Value::Union(0, Box::new(Value::Null))));
}
