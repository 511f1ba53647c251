//! Shipment events, a schema that is neither orders nor stock, for the
//! no-code entity (`entity.kind = "latest"`): the schemas (an `int`
//! version, a nullable enum status, a nested record, two writer versions,
//! and another team's schema without the key field), the `[entity]` section
//! that reads them, and a planned stream with redeliveries, stale
//! out-of-order events and poison records, with what it implies per key
//! and in total. Shared by `tests/latest_mock.rs` (the mock cluster) and
//! the end-to-end suite's `latest` drill (Apache Kafka).

use std::collections::HashMap;

use apache_avro::types::Value;
use apache_avro::Schema;
use orderly::testkit::orders::workload::PlannedRecord;
use orderly::testkit::{wire, EntityConfig, EntityKind};
use orderly::Registry;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const SHIPMENT_V1: &str = r#"{
  "type": "record", "name": "ShipmentEvent", "namespace": "com.example.logistics",
  "fields": [
    {"name": "id", "type": "string"},
    {"name": "shipment_id", "type": ["null", "string"], "default": null},
    {"name": "seq", "type": "int"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "status", "type": ["null", {"type": "enum", "name": "ShipmentStatus",
      "symbols": ["LABEL_CREATED", "IN_TRANSIT", "OUT_FOR_DELIVERY", "DELIVERED", "EXCEPTION"]}],
     "default": null},
    {"name": "destination", "type": {"type": "record", "name": "Address", "fields": [
      {"name": "city", "type": "string"}, {"name": "country", "type": "string"}]}},
    {"name": "weight_grams", "type": "long"}
  ]
}"#;

/// v1 with a field added (with a default): read as written, so a v2 event's
/// state has it and a v1 event's does not.
fn shipment_v2() -> String {
    SHIPMENT_V1.replace(
        r#"{"name": "weight_grams", "type": "long"}"#,
        r#"{"name": "weight_grams", "type": "long"},
    {"name": "signed_by", "type": ["null", "string"], "default": null}"#,
    )
}

/// Another team's events on the same topic, without the key field: poison.
const PARCEL_SCAN: &str = r#"{
  "type": "record", "name": "ParcelScan", "namespace": "com.example.depot",
  "fields": [
    {"name": "id", "type": "string"},
    {"name": "seq", "type": "int"},
    {"name": "parcel", "type": "string"}
  ]
}"#;

const STATUSES: [&str; 5] = [
    "LABEL_CREATED",
    "IN_TRANSIT",
    "OUT_FOR_DELIVERY",
    "DELIVERED",
    "EXCEPTION",
];
const CITIES: [(&str, &str); 3] = [("Lyon", "FR"), ("Porto", "PT"), ("Graz", "AT")];

/// The `[entity]` section that reads these events.
pub fn entity_config() -> EntityConfig {
    EntityConfig {
        kind: EntityKind::Latest,
        key_field: "shipment_id".into(),
        version_field: "seq".into(),
        event_id_field: "id".into(),
        occurred_at_field: "at".into(),
        status_field: "status".into(),
    }
}

pub struct Schemas {
    v1: (Schema, u32),
    v2: (Schema, u32),
    parcel: (Schema, u32),
}

impl Schemas {
    pub async fn register(registry: &Registry, topic: &str) -> Schemas {
        let subject = format!("{topic}-value");
        let mut ids = Vec::new();
        for (subject, text) in [
            (subject.as_str(), SHIPMENT_V1),
            (subject.as_str(), &shipment_v2()),
            ("depot-scans-value", PARCEL_SCAN),
        ] {
            let id = registry.register(subject, text).await.expect("register");
            ids.push((Schema::parse_str(text).expect("schema"), id));
        }
        let parcel = ids.pop().expect("parcel");
        let v2 = ids.pop().expect("v2");
        let v1 = ids.pop().expect("v1");
        Schemas { v1, v2, parcel }
    }
}

fn encode((schema, id): &(Schema, u32), fields: Vec<(&str, Value)>) -> Vec<u8> {
    let record = Value::Record(fields.into_iter().map(|(n, v)| (n.into(), v)).collect());
    #[allow(deprecated)]
    let body = apache_avro::to_avro_datum(schema, record).expect("encode");
    wire(*id, &body)
}

/// One shipment event as the producer writes it.
#[derive(Clone)]
struct Shipment {
    key: Option<String>,
    seq: i32,
    id: String,
    at: i64,
    status: Option<usize>,
    city: usize,
    weight: i64,
    /// `Some`: written with v2 (its `signed_by`, maybe null).
    signed_by: Option<Option<String>>,
}

impl Shipment {
    fn encode(&self, schemas: &Schemas) -> Vec<u8> {
        let nullable = |s: &Option<String>| match s {
            None => Value::Union(0, Box::new(Value::Null)),
            Some(s) => Value::Union(1, Box::new(Value::String(s.clone()))),
        };
        let (city, country) = CITIES[self.city];
        let mut fields = vec![
            ("id", Value::String(self.id.clone())),
            ("shipment_id", nullable(&self.key)),
            ("seq", Value::Int(self.seq)),
            ("at", Value::TimestampMillis(self.at)),
            (
                "status",
                match self.status {
                    None => Value::Union(0, Box::new(Value::Null)),
                    Some(i) => {
                        Value::Union(1, Box::new(Value::Enum(i as u32, STATUSES[i].to_string())))
                    }
                },
            ),
            (
                "destination",
                Value::Record(vec![
                    ("city".into(), Value::String(city.into())),
                    ("country".into(), Value::String(country.into())),
                ]),
            ),
            ("weight_grams", Value::Long(self.weight)),
        ];
        match &self.signed_by {
            None => encode(&schemas.v1, fields),
            Some(signed_by) => {
                fields.push(("signed_by", nullable(signed_by)));
                encode(&schemas.v2, fields)
            }
        }
    }

    /// The event's fields as the state shows them, written independently
    /// of the entity's converter.
    fn json(&self) -> serde_json::Value {
        let (city, country) = CITIES[self.city];
        let mut fields = json!({
            "id": self.id,
            "shipment_id": self.key,
            "seq": self.seq,
            "at": self.at,
            "status": self.status.map(|i| STATUSES[i]),
            "destination": {"city": city, "country": country},
            "weight_grams": self.weight,
        });
        if let Some(signed_by) = &self.signed_by {
            fields["signed_by"] = json!(signed_by);
        }
        fields
    }
}

/// What the planned stream implies, per key and in total.
#[derive(Default)]
pub struct Oracle {
    /// Per shipment: its newest event (version, id, time, fields) and the
    /// status its last status change names.
    pub newest: HashMap<String, (i64, String, i64, serde_json::Value, String)>,
    pub applied: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub dead_lettered: u64,
}

/// `keys` shipments of 3 to 20 events each (the first with a status, later
/// ones sometimes without one; v1 and v2 writers mixed), about one event in
/// six delivered again later in the stream (a producer retry or a replay),
/// about one shipment in four followed by an older event under a new id
/// (stale: a late event from a migrated topic), and poison: garbage, a
/// schema without the key field, a null key, version 0.
pub fn plan(schemas: &Schemas, keys: usize, seed: u64) -> (Vec<PlannedRecord>, Oracle) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut records: Vec<(f64, PlannedRecord)> = Vec::new();
    let mut oracle = Oracle::default();
    for k in 0..keys {
        let key = format!("shp-{k:05}");
        let events = rng.gen_range(3..=20);
        let mut at = rng.gen_range(0.0..1.0);
        let mut last_status = String::new();
        let mut newest = None;
        for seq in 1..=events {
            let shipment = Shipment {
                key: Some(key.clone()),
                seq,
                id: format!("{key}-{seq}-{:08x}", rng.gen::<u32>()),
                at: 1_764_547_200_000 + i64::from(seq) * 60_000,
                status: if seq == 1 {
                    Some(0)
                } else if rng.gen_bool(0.7) {
                    Some(rng.gen_range(1..STATUSES.len()))
                } else {
                    None
                },
                city: rng.gen_range(0..CITIES.len()),
                weight: rng.gen_range(100..30_000),
                signed_by: if rng.gen_bool(0.5) {
                    Some(
                        rng.gen_bool(0.5)
                            .then(|| format!("courier-{}", rng.gen_range(0..9))),
                    )
                } else {
                    None
                },
            };
            if let Some(i) = shipment.status {
                last_status = STATUSES[i].to_string();
            }
            let payload = shipment.encode(schemas);
            at += rng.gen_range(0.0..0.01);
            records.push((
                at,
                PlannedRecord {
                    key: key.clone(),
                    payload: payload.clone(),
                },
            ));
            oracle.applied += 1;
            if rng.gen_bool(1.0 / 6.0) {
                records.push((
                    at + rng.gen_range(0.0..0.2),
                    PlannedRecord {
                        key: key.clone(),
                        payload,
                    },
                ));
                oracle.duplicates += 1;
            }
            newest = Some(shipment);
        }
        if rng.gen_bool(0.25) {
            // An older version under a new id, after the newest: stale.
            let late = Shipment {
                seq: rng.gen_range(1..=events),
                id: format!("{key}-late-{:08x}", rng.gen::<u32>()),
                status: Some(4),
                ..newest.clone().expect("an event")
            };
            records.push((
                at + 0.3,
                PlannedRecord {
                    key: key.clone(),
                    payload: late.encode(schemas),
                },
            ));
            oracle.stale += 1;
        }
        let newest = newest.expect("an event");
        oracle.newest.insert(
            key,
            (
                i64::from(newest.seq),
                newest.id.clone(),
                newest.at,
                newest.json(),
                last_status,
            ),
        );
    }
    for i in 0..6 {
        let shipment = |key: Option<&str>, seq| Shipment {
            key: key.map(String::from),
            seq,
            id: format!("poison-{i}"),
            at: 0,
            status: None,
            city: 0,
            weight: 1,
            signed_by: None,
        };
        let payload = match i {
            // Garbage under a schema id the registry does not know.
            0 | 1 => vec![0, 0, 0, 0, 99, 1, 2, 3],
            // Another schema, without the key field.
            2 | 3 => encode(
                &schemas.parcel,
                vec![
                    ("id", Value::String(format!("scan-{i}"))),
                    ("seq", Value::Int(1)),
                    ("parcel", Value::String("p".into())),
                ],
            ),
            // A null key.
            4 => shipment(None, 1).encode(schemas),
            // Version 0.
            _ => shipment(Some("shp-poison-5"), 0).encode(schemas),
        };
        records.push((
            rng.gen_range(0.0..1.0),
            PlannedRecord {
                key: format!("shp-poison-{i}"),
                payload,
            },
        ));
        oracle.dead_lettered += 1;
    }
    // A stable sort keeps each shipment's events in version order (their
    // times increase); a redelivered copy lands after its original, a late
    // event after the shipment's newest.
    records.sort_by(|a, b| a.0.total_cmp(&b.0));
    (records.into_iter().map(|(_, r)| r).collect(), oracle)
}
