//! The event model: what an order event carries and what the store keeps per order.

use serde::{Deserialize, Serialize};

/// The lifecycle step an event records; stored as the order's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    Created,
    Paid,
    Shipped,
    Delivered,
    Cancelled,
}

impl EventType {
    /// The Avro enum symbols, in schema order.
    pub const SYMBOLS: [&'static str; 5] = ["CREATED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"];

    pub fn as_str(self) -> &'static str {
        Self::SYMBOLS[self.index()]
    }

    pub fn index(self) -> usize {
        match self {
            EventType::Created => 0,
            EventType::Paid => 1,
            EventType::Shipped => 2,
            EventType::Delivered => 3,
            EventType::Cancelled => 4,
        }
    }

    pub fn from_index(index: usize) -> Option<Self> {
        [
            EventType::Created,
            EventType::Paid,
            EventType::Shipped,
            EventType::Delivered,
            EventType::Cancelled,
        ]
        .get(index)
        .copied()
    }

    pub fn from_symbol(symbol: &str) -> Option<Self> {
        Self::SYMBOLS.iter().position(|s| *s == symbol).and_then(Self::from_index)
    }
}

/// The currency a v1 record (which has no `currency` field) is read with: the
/// default of the v2 reader schema.
pub const DEFAULT_CURRENCY: &str = "EUR";

/// One decoded order event (the v2 reader's view of any writer version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderEvent {
    pub event_id: String,
    pub order_id: String,
    /// Per-order sequence, starting at 1; always positive once decoded.
    pub version: i64,
    pub event_type: EventType,
    /// Order total in minor units.
    pub amount: i64,
    pub currency: String,
    /// Milliseconds since the Unix epoch.
    pub occurred_at: i64,
}

/// An event id as the inbox stores it: 16 bytes for a canonical (lowercase,
/// hyphenated) UUID, which is what producers send, and the text otherwise.
/// Stored compactly (bincode: 25 bytes for a UUID instead of 44), shown as
/// the original string in JSON.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventId {
    Uuid(u128),
    Text(String),
}

impl EventId {
    pub fn new(text: &str) -> Self {
        match uuid::Uuid::try_parse(text) {
            Ok(uuid) if text.len() == 36 && uuid.hyphenated().encode_lower(&mut uuid::Uuid::encode_buffer()) == text => {
                EventId::Uuid(uuid.as_u128())
            }
            _ => EventId::Text(text.to_string()),
        }
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EventId::Uuid(value) => uuid::Uuid::from_u128(*value).hyphenated().fmt(f),
            EventId::Text(text) => f.write_str(text),
        }
    }
}

const EVENT_ID_UUID: u8 = 0;
const EVENT_ID_TEXT: u8 = 1;

impl Serialize for EventId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            return serializer.collect_str(self);
        }
        let mut bytes = Vec::with_capacity(17);
        match self {
            EventId::Uuid(value) => {
                bytes.push(EVENT_ID_UUID);
                bytes.extend_from_slice(&value.to_be_bytes());
            }
            EventId::Text(text) => {
                bytes.push(EVENT_ID_TEXT);
                bytes.extend_from_slice(text.as_bytes());
            }
        }
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for EventId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = EventId;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an event id")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<EventId, E> {
                Ok(EventId::new(text))
            }
            fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<EventId, E> {
                match bytes.split_first() {
                    Some((&EVENT_ID_UUID, rest)) => {
                        let raw: [u8; 16] = rest.try_into().map_err(|_| E::custom("uuid event id is not 16 bytes"))?;
                        Ok(EventId::Uuid(u128::from_be_bytes(raw)))
                    }
                    Some((&EVENT_ID_TEXT, rest)) => std::str::from_utf8(rest)
                        .map(|t| EventId::Text(t.to_string()))
                        .map_err(|_| E::custom("event id is not UTF-8")),
                    _ => Err(E::custom("unknown event id encoding")),
                }
            }
        }
        if deserializer.is_human_readable() {
            deserializer.deserialize_str(Visitor)
        } else {
            deserializer.deserialize_bytes(Visitor)
        }
    }
}

/// An applied event id remembered in the inbox, with when it was applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxEntry {
    pub event_id: EventId,
    /// Wall-clock milliseconds when the event was applied; entries older than
    /// the retention window are pruned.
    pub applied_at_ms: i64,
}

/// What the store keeps for one order: the newest applied event's fields
/// (event-carried state) plus the order's inbox of applied event ids.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderState {
    pub order_id: String,
    pub version: i64,
    pub status: EventType,
    pub amount: i64,
    pub currency: String,
    /// The event that produced this state.
    pub event_id: String,
    pub occurred_at: i64,
    /// Applied event ids within the retention window, oldest first. Kept in the
    /// state value so one key per order is written per event.
    pub inbox: Vec<InboxEntry>,
}

impl OrderState {
    /// True when `event_id` was applied to this order within the retention window.
    pub fn inbox_contains(&self, event_id: &EventId) -> bool {
        self.inbox.iter().any(|entry| entry.event_id == *event_id)
    }

    /// The state fields without the inbox, for comparing against an expected
    /// state computed elsewhere.
    pub fn view(&self) -> StateView {
        StateView {
            order_id: self.order_id.clone(),
            version: self.version,
            status: self.status,
            amount: self.amount,
            currency: self.currency.clone(),
            event_id: self.event_id.clone(),
            occurred_at: self.occurred_at,
        }
    }
}

/// An order's state without its inbox: what `state get` prints and what
/// expectations compare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateView {
    pub order_id: String,
    pub version: i64,
    pub status: EventType,
    pub amount: i64,
    pub currency: String,
    pub event_id: String,
    pub occurred_at: i64,
}

impl StateView {
    /// The state an event carries, as the store would hold it after applying it.
    pub fn of_event(event: &OrderEvent) -> Self {
        StateView {
            order_id: event.order_id.clone(),
            version: event.version,
            status: event.event_type,
            amount: event.amount,
            currency: event.currency.clone(),
            event_id: event.event_id.clone(),
            occurred_at: event.occurred_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_round_trip_compactly_and_as_text() {
        for text in ["5f0c6f2e-0000-4000-8000-000000000001", "5F0C6F2E-0000-4000-8000-000000000001", "evt-7", ""] {
            let id = EventId::new(text);
            assert_eq!(id.to_string(), text);
            let bytes = bincode::serialize(&id).unwrap();
            assert_eq!(bincode::deserialize::<EventId>(&bytes).unwrap(), id);
            let json = serde_json::to_string(&id).unwrap();
            assert_eq!(json, format!("\"{text}\""));
            assert_eq!(serde_json::from_str::<EventId>(&json).unwrap(), id);
        }
        assert!(matches!(EventId::new("5f0c6f2e-0000-4000-8000-000000000001"), EventId::Uuid(_)));
        assert!(matches!(EventId::new("5F0C6F2E-0000-4000-8000-000000000001"), EventId::Text(_)), "non-canonical stays text");
        assert_eq!(bincode::serialize(&EventId::new("5f0c6f2e-0000-4000-8000-000000000001")).unwrap().len(), 8 + 17);
    }
}
