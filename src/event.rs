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

/// An applied event id remembered in the inbox, with when it was applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxEntry {
    pub event_id: String,
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
    pub fn inbox_contains(&self, event_id: &str) -> bool {
        self.inbox.iter().any(|entry| entry.event_id == event_id)
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
