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

fn status_record(key_field: &str, from: Value, to: Value) -> Value {
    Value::Record(vec![
        ("event_id".into(), Value::String("7f7a-c0de".into())),
        (key_field.into(), Value::String("o-000042".into())),
        ("version".into(), Value::Long(3)),
        ("from_status".into(), from),
        ("to_status".into(), to),
        (
            "occurred_at".into(),
            Value::TimestampMillis(1_765_000_000_000),
        ),
        ("source_topic".into(), Value::String("orders".into())),
        ("source_partition".into(), Value::Int(2)),
        ("source_offset".into(), Value::Long(-1)),
    ])
}

/// The status records of the built-in entities, their first change (no
/// `from_status`) and a later one, are written directly (not through
/// apache-avro's writer) and as apache-avro writes them.
#[test]
fn the_built_in_status_records_are_written_directly() {
    let paid = || Value::Enum(1, "PAID".into());
    let stock = |i: u32, s: &str| Value::Enum(i, s.into());
    let cases = [
        (
            crate::domains::orders::STATUS_SCHEMA,
            "order_id",
            [Value::Enum(0, "CREATED".into()), paid()],
        ),
        (
            crate::domains::stock::STATUS_SCHEMA,
            "sku",
            [stock(0, "IN_STOCK"), stock(1, "OUT_OF_STOCK")],
        ),
        (
            crate::domains::latest::STATUS_SCHEMA,
            "key",
            [Value::String("a".into()), Value::String("b".into())],
        ),
    ];
    for (text, key_field, [from, to]) in cases {
        let schema = Schema::parse_str(text).unwrap();
        let writer = crate::engine::codec::DatumWriter::new(schema.clone()).unwrap();
        for from in [
            Value::Union(0, Box::new(Value::Null)),
            Value::Union(1, Box::new(from.clone())),
        ] {
            let value = status_record(key_field, from, to.clone());
            assert!(
                writer.write_direct(&value, writer.schema(), &mut Vec::new()),
                "{key_field}: {value:?}"
            );
            let mut out = Vec::new();
            writer.write(&value, &mut out).expect("written");
            #[allow(deprecated)]
            let apache = apache_avro::to_avro_datum(&schema, value.clone()).expect("apache");
            assert_eq!(out, apache);
        }
    }
}
