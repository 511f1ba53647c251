//! Stock, the second built-in domain: per SKU, units on hand and units
//! reserved. Its events carry deltas (restocked, reserved, released), so a
//! SKU's state is the accumulation of every applied event: an event applied
//! twice or lost is a wrong stock level, which is what the engine's inbox
//! and version check exist to prevent. A change of availability (in stock,
//! out of stock) is published by the outbox as `StockAvailabilityChanged`.
//!
//! What it assumes of its producers: each SKU has one writer that numbers
//! its events 1, 2, 3, ... in the order it emits them, and keys them by SKU
//! (so Kafka keeps them in that order). An event whose version is not newer
//! than the SKU's is dropped as stale, as for every entity; for an
//! accumulating entity a version that skips ahead and an older one arriving
//! after it would lose the older delta, so gaps are counted
//! (`orderly_version_gaps_total`) and worth an alert.

pub mod workload;

use std::sync::OnceLock;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::Schema;
use serde::{Deserialize, Serialize};

use crate::engine::codec::{
    read_value, resolving_reader, DatumWriter, DecodeError, Fields, PoisonKind,
};
use crate::engine::entity::{Entity, Event, State};

/// The reader schema of stock events.
pub(crate) const EVENT_SCHEMA: &str = include_str!("../../../schemas/stock_event_v1.avsc");
/// The output schema of availability changes.
pub const STATUS_SCHEMA: &str = include_str!("../../../schemas/stock_availability_changed_v1.avsc");

/// The stock entity (a marker: it needs no configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stock;

/// What a stock event does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StockEventKind {
    /// Units arrived: on hand grows.
    Restocked,
    /// Units promised to an order: reserved grows.
    Reserved,
    /// A reservation given back: reserved shrinks.
    Released,
}

impl StockEventKind {
    /// The Avro enum symbols, in schema order.
    pub const SYMBOLS: [&'static str; 3] = ["RESTOCKED", "RESERVED", "RELEASED"];

    pub fn as_str(self) -> &'static str {
        Self::SYMBOLS[self.index()]
    }

    pub fn index(self) -> usize {
        match self {
            StockEventKind::Restocked => 0,
            StockEventKind::Reserved => 1,
            StockEventKind::Released => 2,
        }
    }

    fn from_symbol(symbol: &str) -> Option<Self> {
        match symbol {
            "RESTOCKED" => Some(StockEventKind::Restocked),
            "RESERVED" => Some(StockEventKind::Reserved),
            "RELEASED" => Some(StockEventKind::Released),
            _ => None,
        }
    }
}

/// What one stock event carries beyond the engine's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockChange {
    pub kind: StockEventKind,
    /// Units; positive once decoded.
    pub quantity: i64,
}

/// A SKU's stock: the accumulation of its applied events. The serde
/// (bincode) layout is the stored layout.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockLevel {
    /// Units restocked, in total.
    pub on_hand: i64,
    /// Units reserved and not released.
    pub reserved: i64,
}

impl StockLevel {
    /// Units that can still be reserved (negative when oversold).
    pub fn available(&self) -> i64 {
        self.on_hand - self.reserved
    }

    /// The level after one more change.
    pub fn after(self, change: StockChange) -> StockLevel {
        let q = change.quantity;
        match change.kind {
            StockEventKind::Restocked => StockLevel {
                on_hand: self.on_hand.saturating_add(q),
                ..self
            },
            StockEventKind::Reserved => StockLevel {
                reserved: self.reserved.saturating_add(q),
                ..self
            },
            StockEventKind::Released => StockLevel {
                reserved: self.reserved.saturating_sub(q),
                ..self
            },
        }
    }
}

/// Whether a SKU can be reserved: the status whose changes are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Availability {
    /// Some units are available to reserve.
    InStock,
    /// None are.
    OutOfStock,
}

/// A SKU's state as `state get`, `state dump` and `/state/{sku}` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockView {
    pub sku: String,
    pub version: i64,
    pub on_hand: i64,
    pub reserved: i64,
    pub available: i64,
    pub event_id: String,
    pub occurred_at: i64,
}

impl Stock {
    /// Whether `level` can take a reservation.
    pub fn status_of(level: &StockLevel) -> Availability {
        if level.available() > 0 {
            Availability::InStock
        } else {
            Availability::OutOfStock
        }
    }
}

impl Entity for Stock {
    type Body = StockChange;
    type Data = StockLevel;
    type Status = Availability;
    type View = StockView;
    type Reader = GenericDatumReader<'static>;

    const KEY_FIELD: &'static str = "sku";
    const NAME: &'static str = "SKU";

    fn apply(data: Option<&StockLevel>, body: StockChange) -> StockLevel {
        data.copied().unwrap_or_default().after(body)
    }

    fn status(data: &StockLevel) -> Option<Availability> {
        Some(Stock::status_of(data))
    }

    fn view(&self, state: &State<Self>) -> StockView {
        StockView {
            sku: state.key.clone(),
            version: state.version,
            on_hand: state.data.on_hand,
            reserved: state.data.reserved,
            available: state.data.available(),
            event_id: state.event_id.clone(),
            occurred_at: state.occurred_at,
        }
    }

    fn reader_schema(&self) -> Option<&Schema> {
        Some(event_schema())
    }

    fn reader(&self, id: u32, writer: Schema) -> Result<Self::Reader, DecodeError> {
        resolving_reader(id, writer, event_schema())
    }

    fn read(&self, reader: &Self::Reader, body: &[u8]) -> Result<Event<StockChange>, DecodeError> {
        event_from_value(read_value(reader, body)?)
    }

    fn status_value(status: &Availability) -> Value {
        match status {
            Availability::InStock => Value::Enum(0, "IN_STOCK".into()),
            Availability::OutOfStock => Value::Enum(1, "OUT_OF_STOCK".into()),
        }
    }

    fn status_schema(&self) -> &str {
        STATUS_SCHEMA
    }
}

/// The stock event reader schema, parsed once per process.
pub(crate) fn event_schema() -> &'static Schema {
    static READER: OnceLock<Schema> = OnceLock::new();
    // Compiled in and covered by tests: failing to parse it is a build defect.
    READER.get_or_init(|| {
        Schema::parse_str(EVENT_SCHEMA).expect("schemas/stock_event_v1.avsc parses")
    })
}

fn event_from_value(value: Value) -> Result<Event<StockChange>, DecodeError> {
    let fields = Fields::of(value)?;
    let kind = fields.string("kind")?;
    let kind = StockEventKind::from_symbol(&kind).ok_or_else(|| {
        DecodeError::poison(
            PoisonKind::Invalid,
            format!("kind {kind} is not a stock event kind"),
        )
    })?;
    let quantity = fields.long("quantity")?;
    if quantity <= 0 {
        return Err(DecodeError::poison(
            PoisonKind::Invalid,
            format!("quantity {quantity} is not positive"),
        ));
    }
    Ok(Event {
        event_id: fields.string("event_id")?,
        key: fields.string("sku")?,
        version: fields.long("version")?,
        occurred_at: fields.long("occurred_at")?,
        body: StockChange { kind, quantity },
    })
}

/// Encodes stock events in the wire format with a registered schema id (the
/// stock generator, tests).
pub struct StockEncoder {
    writer: DatumWriter,
    /// The registry's id of the stock event schema.
    pub schema_id: u32,
}

impl StockEncoder {
    /// Registers the stock event schema under `<topic>-value`.
    pub async fn register(
        registry: &crate::registry::Registry,
        topic: &str,
    ) -> Result<Self, crate::registry::RegistryError> {
        // Compiled in and covered by tests: names that do not resolve are a
        // build defect.
        let writer = DatumWriter::new(event_schema().clone())
            .expect("schemas/stock_event_v1.avsc's names resolve");
        let schema_id = registry
            .register(&format!("{topic}-value"), EVENT_SCHEMA)
            .await?;
        Ok(StockEncoder { writer, schema_id })
    }

    /// The wire-format bytes of one event.
    pub fn encode(
        &self,
        event: &Event<StockChange>,
    ) -> Result<Vec<u8>, crate::engine::codec::EncodeError> {
        let fields = vec![
            (
                "event_id".to_string(),
                Value::String(event.event_id.clone()),
            ),
            ("sku".to_string(), Value::String(event.key.clone())),
            ("version".to_string(), Value::Long(event.version)),
            (
                "kind".to_string(),
                Value::Enum(
                    event.body.kind.index() as u32,
                    event.body.kind.as_str().to_string(),
                ),
            ),
            ("quantity".to_string(), Value::Long(event.body.quantity)),
            (
                "occurred_at".to_string(),
                Value::TimestampMillis(event.occurred_at),
            ),
        ];
        self.writer.wire(self.schema_id, &Value::Record(fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::decide::{step, Decision};
    use crate::registry::Registry;

    fn change(version: i64, kind: StockEventKind, quantity: i64) -> Event<StockChange> {
        Event {
            event_id: format!("sku-1-{version}"),
            key: "sku-1".into(),
            version,
            occurred_at: 1_764_547_200_000 + version,
            body: StockChange { kind, quantity },
        }
    }

    #[test]
    fn levels_accumulate_and_a_redelivered_reservation_counts_once() {
        use StockEventKind::*;
        let events = [
            change(1, Restocked, 10),
            change(2, Reserved, 3),
            change(2, Reserved, 3), // redelivered
            change(3, Reserved, 4),
            change(1, Restocked, 10), // redelivered, old
            change(4, Released, 2),
        ];
        let mut state: Option<State<Stock>> = None;
        let mut decisions = Vec::new();
        for (now, event) in events.into_iter().enumerate() {
            let (decision, next, _) = step(state, event, now as i64, 86_400_000, |_| None);
            decisions.push(decision);
            state = next;
        }
        let state = state.expect("a state");
        assert_eq!(
            state.data,
            StockLevel {
                on_hand: 10,
                reserved: 5
            }
        );
        assert_eq!(Stock.view(&state).available, 5);
        assert_eq!(
            decisions,
            [
                Decision::Apply,
                Decision::Apply,
                Decision::Duplicate,
                Decision::Apply,
                Decision::Duplicate,
                Decision::Apply
            ]
        );
        assert_eq!(Stock::status(&state.data), Some(Availability::InStock));
        assert_eq!(
            Stock::status(&StockLevel {
                on_hand: 3,
                reserved: 3
            }),
            Some(Availability::OutOfStock)
        );
    }

    #[tokio::test]
    async fn events_round_trip_through_the_registry_and_bad_ones_are_poison() {
        let registry = Registry::memory();
        let encoder = StockEncoder::register(&registry, "stock").await.unwrap();
        let decoder = crate::engine::codec::Decoder::for_entity(Stock, registry);
        let event = change(7, StockEventKind::Reserved, 2);
        let bytes = encoder.encode(&event).unwrap();
        assert_eq!(decoder.decode(Some(&bytes)).await.unwrap(), event);
        let zero = encoder
            .encode(&change(8, StockEventKind::Released, 0))
            .unwrap();
        assert!(matches!(
            decoder.decode(Some(&zero)).await,
            Err(DecodeError::Poison {
                kind: PoisonKind::Invalid,
                ..
            })
        ));
        let mut no_sku = change(9, StockEventKind::Restocked, 1);
        no_sku.key.clear();
        let err = decoder
            .decode(Some(&encoder.encode(&no_sku).unwrap()))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("sku is empty"), "{err}");
    }

    #[test]
    fn the_output_schema_takes_every_status() {
        let schema = Schema::parse_str(STATUS_SCHEMA).unwrap();
        for status in [Availability::InStock, Availability::OutOfStock] {
            let record = Value::Record(vec![
                ("event_id".into(), Value::String("e".into())),
                ("sku".into(), Value::String("s".into())),
                ("version".into(), Value::Long(1)),
                ("from_status".into(), Value::Union(0, Box::new(Value::Null))),
                ("to_status".into(), Stock::status_value(&status)),
                ("occurred_at".into(), Value::TimestampMillis(1)),
                ("source_topic".into(), Value::String("t".into())),
                ("source_partition".into(), Value::Int(0)),
                ("source_offset".into(), Value::Long(0)),
            ]);
            #[allow(deprecated)]
            apache_avro::to_avro_datum(&schema, record).unwrap();
        }
    }
}
