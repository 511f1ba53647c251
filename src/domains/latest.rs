//! Latest, the no-code entity (`entity.kind = "latest"`): for any Avro
//! topic, configuration names the fields that carry each event's key,
//! version and id (and optionally when it occurred and a status), and the
//! state of a key is its newest event, every field as its writer wrote it.
//! The engine gives it what it gives every entity: the inbox, version
//! ordering, the changelog and restore, dead letters, exactly-once. When a
//! status field is configured, a change of it is published as
//! `io.orderly.latest.StatusChanged`.
//!
//! Each record is read with its own writer schema (there is no reader
//! schema to resolve against), so producers may evolve the schema freely as
//! long as the configured fields stay. What it assumes of its producers:
//! per key, versions increase in the order events are emitted (an event
//! whose version is not newer than the key's is stale, as for every entity),
//! and a redelivered event carries the same event id.

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::Schema;
use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::config::EntityConfig;
use crate::engine::codec::{read_value, DecodeError, PoisonKind};
use crate::engine::entity::{Entity, Event, State};

/// The output schema of status changes.
pub const STATUS_SCHEMA: &str = include_str!("../../schemas/latest_status_changed_v1.avsc");

/// A `latest` entity's field names, from `[entity]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latest {
    key_field: String,
    version_field: String,
    event_id_field: String,
    /// `None`: events carry no time (0 is kept).
    occurred_at_field: Option<String>,
    /// `None`: nothing is published.
    status_field: Option<String>,
}

/// Why `[entity]` does not describe a `latest` entity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LatestConfigError {
    #[error(
        "{setting} must name a field of the input topic's events with entity.kind = \"latest\""
    )]
    Unnamed { setting: &'static str },
}

/// One event, and so one key's state: every field of the event as JSON
/// text and the configured status. The serde (bincode) layout is the
/// stored layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatestEvent {
    /// The event's fields, a JSON object (text: the stored layout is
    /// bincode, which cannot hold a `serde_json::Value`).
    pub event: String,
    /// The status field's value (`None`: no status field configured, or
    /// null in this event).
    pub status: Option<String>,
}

/// A writer schema, read as it is (no resolution).
pub struct LatestReader(GenericDatumReader<'static>);

impl Latest {
    /// The entity `[entity]` describes (its `kind` is not checked).
    pub fn from_config(config: &EntityConfig) -> Result<Latest, LatestConfigError> {
        let named = |setting: &'static str, name: &str| {
            if name.trim().is_empty() {
                Err(LatestConfigError::Unnamed { setting })
            } else {
                Ok(name.to_string())
            }
        };
        let optional = |name: &str| (!name.trim().is_empty()).then(|| name.to_string());
        Ok(Latest {
            key_field: named("entity.key_field", &config.key_field)?,
            version_field: named("entity.version_field", &config.version_field)?,
            event_id_field: named("entity.event_id_field", &config.event_id_field)?,
            occurred_at_field: optional(&config.occurred_at_field),
            status_field: optional(&config.status_field),
        })
    }

    /// The field that carries each event's key.
    pub fn key_field(&self) -> &str {
        &self.key_field
    }
}

impl Entity for Latest {
    type Body = LatestEvent;
    type Data = LatestEvent;
    type Status = String;
    type View = serde_json::Value;
    type Reader = LatestReader;

    /// The output schema's key field; views name the key as configured.
    const KEY_FIELD: &'static str = "key";

    fn apply(_data: Option<&LatestEvent>, body: LatestEvent) -> LatestEvent {
        body
    }

    fn status(data: &LatestEvent) -> Option<String> {
        data.status.clone()
    }

    fn view(&self, state: &State<Self>) -> serde_json::Value {
        let event = serde_json::from_str(&state.data.event)
            .unwrap_or_else(|_| serde_json::Value::String(state.data.event.clone()));
        let mut view = serde_json::Map::new();
        view.insert(self.key_field.clone(), state.key.clone().into());
        view.insert("version".into(), state.version.into());
        view.insert("event_id".into(), state.event_id.clone().into());
        view.insert("occurred_at".into(), state.occurred_at.into());
        view.insert("event".into(), event);
        serde_json::Value::Object(view)
    }

    fn data_heap_bytes(data: &LatestEvent) -> usize {
        data.event.capacity() + data.status.as_ref().map_or(0, String::capacity)
    }

    fn reader_schema(&self) -> Option<&Schema> {
        None
    }

    fn reader(&self, id: u32, writer: Schema) -> Result<LatestReader, DecodeError> {
        // Lives for the rest of the process: one per schema id, a few KiB.
        let writer: &'static Schema = Box::leak(Box::new(writer));
        GenericDatumReader::builder(writer)
            .build()
            .map(LatestReader)
            .map_err(|e| {
                DecodeError::poison(
                    PoisonKind::BadSchema,
                    format!("schema id {id} cannot be read: {e}"),
                )
            })
    }

    fn read(&self, reader: &LatestReader, body: &[u8]) -> Result<Event<LatestEvent>, DecodeError> {
        let Value::Record(fields) = read_value(&reader.0, body)? else {
            return Err(DecodeError::poison(
                PoisonKind::Undecodable,
                "top-level value is not a record",
            ));
        };
        let key = self.text(&fields, &self.key_field, "entity.key_field")?;
        let event_id = self.text(&fields, &self.event_id_field, "entity.event_id_field")?;
        let version = match required(&fields, &self.version_field, "entity.version_field")? {
            Value::Long(v) => *v,
            Value::Int(v) => i64::from(*v),
            other => {
                return Err(mistyped(
                    &self.version_field,
                    "entity.version_field",
                    other,
                    "a long or int",
                ))
            }
        };
        let occurred_at = match &self.occurred_at_field {
            None => 0,
            Some(name) => match required(&fields, name, "entity.occurred_at_field")? {
                Value::Null => 0,
                Value::Long(v) | Value::TimestampMillis(v) | Value::LocalTimestampMillis(v) => *v,
                Value::Int(v) => i64::from(*v),
                Value::TimestampMicros(v) | Value::LocalTimestampMicros(v) => v / 1_000,
                Value::TimestampNanos(v) | Value::LocalTimestampNanos(v) => v / 1_000_000,
                other => {
                    return Err(mistyped(
                        name,
                        "entity.occurred_at_field",
                        other,
                        "a long or timestamp (milliseconds)",
                    ))
                }
            },
        };
        let status = match &self.status_field {
            None => None,
            Some(name) => match required(&fields, name, "entity.status_field")? {
                Value::Null => None,
                Value::String(s) | Value::Enum(_, s) => Some(s.clone()),
                other => {
                    return Err(mistyped(
                        name,
                        "entity.status_field",
                        other,
                        "a string or enum",
                    ))
                }
            },
        };
        let event = serde_json::Value::Object(
            fields
                .into_iter()
                .map(|(name, value)| (name, to_json(value)))
                .collect(),
        )
        .to_string();
        Ok(Event {
            event_id,
            key,
            version,
            occurred_at,
            body: LatestEvent { event, status },
        })
    }

    fn status_value(status: &String) -> Value {
        Value::String(status.clone())
    }

    fn status_schema(&self) -> &str {
        STATUS_SCHEMA
    }
}

impl Latest {
    /// A required, non-empty string (or UUID) field.
    fn text(
        &self,
        fields: &[(String, Value)],
        name: &str,
        setting: &str,
    ) -> Result<String, DecodeError> {
        let text = match required(fields, name, setting)? {
            Value::String(s) => s.clone(),
            Value::Uuid(u) => u.to_string(),
            other => return Err(mistyped(name, setting, other, "a string")),
        };
        if text.is_empty() {
            return Err(DecodeError::poison(
                PoisonKind::Invalid,
                format!("field `{name}` ({setting}) is empty"),
            ));
        }
        Ok(text)
    }
}

/// The value of top-level field `name` (a union's branch, not the union),
/// or poison naming the setting. A null is `Value::Null`: the callers that
/// accept one (`occurred_at`, status) say so, for the others it is
/// mistyped.
fn required<'v>(
    fields: &'v [(String, Value)],
    name: &str,
    setting: &str,
) -> Result<&'v Value, DecodeError> {
    fields
        .iter()
        .find(|(field, _)| field == name)
        .map(|(_, value)| unwrap_union(value))
        .ok_or_else(|| {
            DecodeError::poison(
                PoisonKind::Invalid,
                format!("field `{name}` ({setting}) is missing from the event"),
            )
        })
}

fn unwrap_union(value: &Value) -> &Value {
    match value {
        Value::Union(_, inner) => unwrap_union(inner),
        other => other,
    }
}

fn mistyped(name: &str, setting: &str, value: &Value, want: &str) -> DecodeError {
    let what = match value {
        Value::Null => "null",
        Value::Boolean(_) => "boolean",
        Value::Int(_) => "int",
        Value::Long(_) => "long",
        Value::Float(_) => "float",
        Value::Double(_) => "double",
        Value::Bytes(_) => "bytes",
        Value::String(_) => "string",
        Value::Fixed(..) => "fixed",
        Value::Enum(..) => "enum",
        Value::Union(..) => "union",
        Value::Array(_) => "array",
        Value::Map(_) => "map",
        Value::Record(_) => "record",
        Value::Date(_) => "date",
        Value::Decimal(_) | Value::BigDecimal(_) => "decimal",
        Value::TimeMillis(_) | Value::TimeMicros(_) => "time",
        Value::TimestampMillis(_)
        | Value::TimestampMicros(_)
        | Value::TimestampNanos(_)
        | Value::LocalTimestampMillis(_)
        | Value::LocalTimestampMicros(_)
        | Value::LocalTimestampNanos(_) => "timestamp",
        Value::Duration(_) => "duration",
        Value::Uuid(_) => "uuid",
    };
    DecodeError::poison(
        PoisonKind::Invalid,
        format!("field `{name}` ({setting}) is {what}, not {want}"),
    )
}

/// An Avro value as JSON: records and maps as objects, unions as their
/// branch, enums as their symbol, bytes, fixed and decimals as base64 text,
/// timestamps and dates as their numbers, UUIDs and big decimals as text,
/// floats that JSON cannot hold (NaN, infinities) as text.
pub(crate) fn to_json(value: Value) -> serde_json::Value {
    use serde_json::Value as Json;
    let base64 =
        |bytes: &[u8]| Json::String(base64::engine::general_purpose::STANDARD.encode(bytes));
    let float = |f: f64| {
        serde_json::Number::from_f64(f)
            .map(Json::Number)
            .unwrap_or_else(|| Json::String(f.to_string()))
    };
    match value {
        Value::Null => Json::Null,
        Value::Boolean(b) => Json::Bool(b),
        Value::Int(v) | Value::Date(v) | Value::TimeMillis(v) => v.into(),
        Value::Long(v)
        | Value::TimeMicros(v)
        | Value::TimestampMillis(v)
        | Value::TimestampMicros(v)
        | Value::TimestampNanos(v)
        | Value::LocalTimestampMillis(v)
        | Value::LocalTimestampMicros(v)
        | Value::LocalTimestampNanos(v) => v.into(),
        Value::Float(f) => float(f64::from(f)),
        Value::Double(f) => float(f),
        Value::Bytes(bytes) | Value::Fixed(_, bytes) => base64(&bytes),
        Value::String(s) | Value::Enum(_, s) => Json::String(s),
        Value::Union(_, inner) => to_json(*inner),
        Value::Array(items) => Json::Array(items.into_iter().map(to_json).collect()),
        Value::Map(entries) => Json::Object(
            entries
                .into_iter()
                .map(|(key, value)| (key, to_json(value)))
                .collect(),
        ),
        Value::Record(fields) => Json::Object(
            fields
                .into_iter()
                .map(|(name, value)| (name, to_json(value)))
                .collect(),
        ),
        Value::Decimal(decimal) => match <Vec<u8>>::try_from(&decimal) {
            Ok(bytes) => base64(&bytes),
            Err(_) => Json::Null,
        },
        Value::BigDecimal(decimal) => Json::String(decimal.to_string()),
        Value::Duration(d) => serde_json::json!({
            "months": u32::from(d.months()),
            "days": u32::from(d.days()),
            "millis": u32::from(d.millis()),
        }),
        Value::Uuid(uuid) => Json::String(uuid.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EntityKind;
    use crate::engine::codec::{wire, Decoder};
    use crate::engine::decide::{step, Decision};
    use crate::registry::Registry;

    const SHIPMENT: &str = r#"{
      "type": "record", "name": "ShipmentEvent", "namespace": "com.example.logistics",
      "fields": [
        {"name": "id", "type": "string"},
        {"name": "shipment_id", "type": ["null", "string"], "default": null},
        {"name": "seq", "type": "int"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "status", "type": ["null", {"type": "enum", "name": "ShipmentStatus",
          "symbols": ["LABEL_CREATED", "IN_TRANSIT", "DELIVERED"]}], "default": null},
        {"name": "carrier", "type": ["null", "string"], "default": null},
        {"name": "destination", "type": {"type": "record", "name": "Address", "fields": [
          {"name": "city", "type": "string"}, {"name": "postcode", "type": "string"}]}},
        {"name": "weight_kg", "type": "double"},
        {"name": "label", "type": "bytes"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}}
      ]
    }"#;

    fn entity_config() -> EntityConfig {
        EntityConfig {
            kind: EntityKind::Latest,
            key_field: "shipment_id".into(),
            version_field: "seq".into(),
            event_id_field: "id".into(),
            occurred_at_field: "at".into(),
            status_field: "status".into(),
        }
    }

    fn latest() -> Latest {
        Latest::from_config(&entity_config()).unwrap()
    }

    /// A shipment event with `overrides` replacing fields by name.
    fn shipment(seq: i32, status: Option<(u32, &str)>, overrides: Vec<(&str, Value)>) -> Value {
        let mut fields = vec![
            ("id".to_string(), Value::String(format!("ev-{seq}"))),
            (
                "shipment_id".to_string(),
                Value::Union(1, Box::new(Value::String("shp-1".into()))),
            ),
            ("seq".to_string(), Value::Int(seq)),
            (
                "at".to_string(),
                Value::TimestampMillis(1_764_547_200_000 + i64::from(seq)),
            ),
            (
                "status".to_string(),
                match status {
                    None => Value::Union(0, Box::new(Value::Null)),
                    Some((i, s)) => Value::Union(1, Box::new(Value::Enum(i, s.into()))),
                },
            ),
            (
                "carrier".to_string(),
                Value::Union(0, Box::new(Value::Null)),
            ),
            (
                "destination".to_string(),
                Value::Record(vec![
                    ("city".into(), Value::String("Lyon".into())),
                    ("postcode".into(), Value::String("69001".into())),
                ]),
            ),
            ("weight_kg".to_string(), Value::Double(2.5)),
            ("label".to_string(), Value::Bytes(vec![1, 2, 255])),
            (
                "tags".to_string(),
                Value::Array(vec![Value::String("fragile".into())]),
            ),
            (
                "attrs".to_string(),
                Value::Map([("boxes".to_string(), Value::Long(2))].into()),
            ),
        ];
        for (name, value) in overrides {
            let slot = fields.iter_mut().find(|(n, _)| n == name).unwrap();
            slot.1 = value;
        }
        Value::Record(fields)
    }

    async fn decoder() -> (Decoder<Latest>, u32, Schema) {
        let registry = Registry::memory();
        let id = registry
            .register("shipments-value", SHIPMENT)
            .await
            .unwrap();
        let schema = Schema::parse_str(SHIPMENT).unwrap();
        (Decoder::for_entity(latest(), registry), id, schema)
    }

    fn encode(schema: &Schema, id: u32, value: Value) -> Vec<u8> {
        #[allow(deprecated)]
        let body = apache_avro::to_avro_datum(schema, value).unwrap();
        wire(id, &body)
    }

    async fn poison_message(decoder: &Decoder<Latest>, bytes: &[u8]) -> String {
        match decoder.decode(Some(bytes)).await {
            Err(DecodeError::Poison {
                kind: PoisonKind::Invalid,
                message,
            }) => message,
            other => panic!("expected an invalid record, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_event_decodes_with_every_field_and_its_int_version() {
        let (decoder, id, schema) = decoder().await;
        let bytes = encode(&schema, id, shipment(3, Some((1, "IN_TRANSIT")), vec![]));
        let event = decoder.decode(Some(&bytes)).await.unwrap();
        assert_eq!(event.key, "shp-1");
        assert_eq!(event.version, 3, "an int version is promoted");
        assert_eq!(event.event_id, "ev-3");
        assert_eq!(event.occurred_at, 1_764_547_200_003);
        assert_eq!(event.body.status.as_deref(), Some("IN_TRANSIT"));
        let fields: serde_json::Value = serde_json::from_str(&event.body.event).unwrap();
        assert_eq!(
            fields,
            serde_json::json!({
                "id": "ev-3",
                "shipment_id": "shp-1",
                "seq": 3,
                "at": 1_764_547_200_003_i64,
                "status": "IN_TRANSIT",
                "carrier": null,
                "destination": {"city": "Lyon", "postcode": "69001"},
                "weight_kg": 2.5,
                "label": "AQL/",
                "tags": ["fragile"],
                "attrs": {"boxes": 2},
            })
        );

        // The state is the event; the view names the key as configured.
        let (decision, state, _) = step::<Latest>(None, event, 0, 86_400_000, |_| None);
        assert_eq!(decision, Decision::Apply);
        let state = state.unwrap();
        let view = Latest::from_config(&entity_config()).unwrap().view(&state);
        assert_eq!(view["shipment_id"], "shp-1");
        assert_eq!(view["version"], 3);
        assert_eq!(view["event_id"], "ev-3");
        assert_eq!(view["occurred_at"], 1_764_547_200_003_i64);
        assert_eq!(view["event"], fields);
        assert_eq!(Latest::status(&state.data).as_deref(), Some("IN_TRANSIT"));
        // The stored layout round-trips (bincode).
        let stored = bincode::serialize(&state.data).unwrap();
        assert_eq!(
            bincode::deserialize::<LatestEvent>(&stored).unwrap(),
            state.data
        );

        // A null status is no status; a long version and no time also read.
        let bytes = encode(&schema, id, shipment(4, None, vec![]));
        let event = decoder.decode(Some(&bytes)).await.unwrap();
        assert_eq!(event.body.status, None);
        let mut config = entity_config();
        config.occurred_at_field.clear();
        config.status_field.clear();
        let plain = Decoder::for_entity(Latest::from_config(&config).unwrap(), {
            let registry = Registry::memory();
            registry.register("s-value", SHIPMENT).await.unwrap();
            registry
        });
        let event = plain.decode(Some(&bytes)).await.unwrap();
        assert_eq!((event.occurred_at, event.body.status), (0, None));
    }

    #[tokio::test]
    async fn missing_null_empty_and_mistyped_fields_are_poison_naming_the_setting() {
        let (decoder, id, schema) = decoder().await;
        let null_key = encode(
            &schema,
            id,
            shipment(
                1,
                None,
                vec![("shipment_id", Value::Union(0, Box::new(Value::Null)))],
            ),
        );
        let message = poison_message(&decoder, &null_key).await;
        assert!(
            message.contains("`shipment_id` (entity.key_field) is null"),
            "{message}"
        );
        let empty_id = encode(
            &schema,
            id,
            shipment(1, None, vec![("id", Value::String(String::new()))]),
        );
        let message = poison_message(&decoder, &empty_id).await;
        assert!(
            message.contains("`id` (entity.event_id_field) is empty"),
            "{message}"
        );
        let zero = encode(&schema, id, shipment(0, None, vec![]));
        let message = poison_message(&decoder, &zero).await;
        assert!(message.contains("version 0 is not positive"), "{message}");

        // Configured fields this schema does not have, or has with another type.
        let registry = Registry::memory();
        let id = registry.register("s-value", SHIPMENT).await.unwrap();
        let good = encode(&schema, id, shipment(1, None, vec![]));
        for (setting, field, want) in [
            (
                "key_field",
                "parcel",
                "`parcel` (entity.key_field) is missing",
            ),
            (
                "version_field",
                "version",
                "`version` (entity.version_field) is missing",
            ),
            (
                "event_id_field",
                "event_id",
                "`event_id` (entity.event_id_field) is missing",
            ),
            (
                "version_field",
                "destination",
                "`destination` (entity.version_field) is record, not a long or int",
            ),
            (
                "key_field",
                "seq",
                "`seq` (entity.key_field) is int, not a string",
            ),
            (
                "occurred_at_field",
                "when",
                "`when` (entity.occurred_at_field) is missing",
            ),
            (
                "occurred_at_field",
                "id",
                "`id` (entity.occurred_at_field) is string",
            ),
            (
                "status_field",
                "state",
                "`state` (entity.status_field) is missing",
            ),
            (
                "status_field",
                "weight_kg",
                "`weight_kg` (entity.status_field) is double, not a string or enum",
            ),
        ] {
            let mut config = entity_config();
            match setting {
                "key_field" => config.key_field = field.into(),
                "version_field" => config.version_field = field.into(),
                "event_id_field" => config.event_id_field = field.into(),
                "occurred_at_field" => config.occurred_at_field = field.into(),
                _ => config.status_field = field.into(),
            }
            let decoder =
                Decoder::for_entity(Latest::from_config(&config).unwrap(), registry.clone());
            let message = poison_message(&decoder, &good).await;
            assert!(message.contains(want), "{setting}: {message}");
        }
    }

    #[test]
    fn an_unnamed_required_field_is_a_configuration_error() {
        let mut config = entity_config();
        config.version_field = " ".into();
        assert_eq!(
            Latest::from_config(&config),
            Err(LatestConfigError::Unnamed {
                setting: "entity.version_field"
            })
        );
        let err = LatestConfigError::Unnamed {
            setting: "entity.key_field",
        };
        assert!(err.to_string().starts_with("entity.key_field must name"));
    }

    #[test]
    fn values_convert_to_json() {
        let uuid = uuid::Uuid::nil();
        let json = to_json(Value::Record(vec![
            ("nan".into(), Value::Double(f64::NAN)),
            ("f".into(), Value::Float(0.5)),
            ("fixed".into(), Value::Fixed(2, vec![0, 1])),
            ("day".into(), Value::Date(19_000)),
            ("uuid".into(), Value::Uuid(uuid)),
            ("flag".into(), Value::Boolean(true)),
            (
                "list".into(),
                Value::Array(vec![Value::Union(1, Box::new(Value::Long(7)))]),
            ),
        ]));
        assert_eq!(
            json,
            serde_json::json!({
                "nan": "NaN",
                "f": 0.5,
                "fixed": "AAE=",
                "day": 19_000,
                "uuid": "00000000-0000-0000-0000-000000000000",
                "flag": true,
                "list": [7],
            })
        );
    }

    #[test]
    fn the_output_schema_takes_a_status_change() {
        let schema = Schema::parse_str(STATUS_SCHEMA).unwrap();
        for from in [
            Value::Union(0, Box::new(Value::Null)),
            Value::Union(1, Box::new(Latest::status_value(&"A".to_string()))),
        ] {
            let record = Value::Record(vec![
                ("event_id".into(), Value::String("e".into())),
                ("key".into(), Value::String("k".into())),
                ("version".into(), Value::Long(1)),
                ("from_status".into(), from),
                ("to_status".into(), Latest::status_value(&"B".to_string())),
                ("occurred_at".into(), Value::TimestampMillis(1)),
                ("source_topic".into(), Value::String("t".into())),
                ("source_partition".into(), Value::Int(0)),
                ("source_offset".into(), Value::Long(0)),
            ]);
            #[allow(deprecated)]
            apache_avro::to_avro_datum(&schema, record).unwrap();
        }
        assert_eq!(Latest::KEY_FIELD, "key");
    }
}
