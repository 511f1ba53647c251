//! The workload of the re-drive tests (issue 9): records written with a
//! schema the registry does not know yet, so they are dead-lettered until
//! it is registered, next to good records and one record that can never
//! decode.

use serde_json::Value;

use orderly::testkit::orders::workload::PlannedRecord;
use orderly::testkit::orders::{Encoder, EventType, OrderEvent, WriterVersion, SCHEMA_V2};
use orderly::testkit::wire;

/// A schema id no registry will ever know.
pub const NEVER: u32 = 999_999;
/// The order of the record that can never decode.
pub const STUBBORN: &str = "order-stubborn";

/// OrderEvent v2 with one more field at the end: the schema a producer
/// started writing before anyone registered it.
pub fn schema_v3() -> String {
    let mut schema: Value = serde_json::from_str(SCHEMA_V2).expect("v2 schema JSON");
    let fields = schema["fields"].as_array_mut().expect("fields");
    fields.push(serde_json::json!({"name": "channel", "type": "string", "default": "web"}));
    schema.to_string()
}

/// `event` in the wire format under schema id `id` of [`schema_v3`]: the v2
/// body and the extra trailing string "web" (Avro: zigzag length 3, bytes).
pub fn encode_v3(encoder: &Encoder, event: &OrderEvent, id: u32) -> Vec<u8> {
    let v2 = encoder.encode(event, WriterVersion::V2).expect("encode");
    let mut body = v2[5..].to_vec();
    body.extend_from_slice(&[6, b'w', b'e', b'b']);
    wire(id, &body)
}

pub fn event(order_id: &str, version: i64, event_type: EventType) -> OrderEvent {
    OrderEvent {
        event_id: format!("{order_id}-e{version}"),
        order_id: order_id.into(),
        version,
        event_type,
        amount: 2_500,
        currency: "EUR".into(),
        occurred_at: 1_764_547_200_000 + version,
    }
}

/// `fixable` orders (`order-fix-N`) created with v2, then paid with the
/// late schema (id `late_id`, not registered yet); `good` orders
/// (`order-good-N`) created and paid with v2; last, [`STUBBORN`]'s creation
/// under schema id [`NEVER`]. Before the late schema is registered,
/// `fixable + 2 * good` records apply and `fixable + 1` are dead-lettered;
/// after, each re-driven paid event applies (version 2 after version 1).
pub fn records(encoder: &Encoder, late_id: u32, fixable: usize, good: usize) -> Vec<PlannedRecord> {
    let v2 = |order: &str, version, event_type| PlannedRecord {
        key: order.to_string(),
        payload: encoder
            .encode(&event(order, version, event_type), WriterVersion::V2)
            .expect("encode"),
    };
    let mut records = Vec::new();
    for i in 0..fixable {
        records.push(v2(&format!("order-fix-{i}"), 1, EventType::Created));
    }
    for i in 0..good {
        let order = format!("order-good-{i}");
        records.push(v2(&order, 1, EventType::Created));
        records.push(v2(&order, 2, EventType::Paid));
    }
    for i in 0..fixable {
        let order = format!("order-fix-{i}");
        records.push(PlannedRecord {
            key: order.clone(),
            payload: encode_v3(encoder, &event(&order, 2, EventType::Paid), late_id),
        });
    }
    let stubborn = encoder
        .encode(&event(STUBBORN, 1, EventType::Created), WriterVersion::V2)
        .expect("encode");
    records.push(PlannedRecord {
        key: STUBBORN.into(),
        payload: wire(NEVER, &stubborn[5..]),
    });
    records
}
