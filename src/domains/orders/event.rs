//! The order event model: what an order event carries and what an order's state keeps.

use serde::{Deserialize, Serialize};

/// The lifecycle step an event records; stored as the order's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    /// The order was placed.
    Created,
    /// The order was paid for.
    Paid,
    /// The order left the warehouse (sent again for each shipping update).
    Shipped,
    /// The order reached its customer.
    Delivered,
    /// The order was cancelled.
    Cancelled,
}

impl EventType {
    /// The Avro enum symbols, in schema order.
    pub(crate) const SYMBOLS: [&'static str; 5] =
        ["CREATED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"];

    /// The Avro enum symbol (`"CREATED"`, ...).
    pub fn as_str(self) -> &'static str {
        Self::SYMBOLS[self.index()]
    }

    /// The position of the symbol in the schema's enum.
    pub fn index(self) -> usize {
        match self {
            EventType::Created => 0,
            EventType::Paid => 1,
            EventType::Shipped => 2,
            EventType::Delivered => 3,
            EventType::Cancelled => 4,
        }
    }

    pub(crate) fn from_index(index: usize) -> Option<Self> {
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

    pub(crate) fn from_symbol(symbol: &str) -> Option<Self> {
        Self::SYMBOLS
            .iter()
            .position(|s| *s == symbol)
            .and_then(Self::from_index)
    }
}

/// The currency a v1 record (which has no `currency` field) is read with: the
/// default of the v2 reader schema.
pub(crate) const DEFAULT_CURRENCY: &str = "EUR";

/// One decoded order event (the v2 reader's view of any writer version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderEvent {
    /// The event's unique id (what the inbox remembers).
    pub event_id: String,
    /// The order's id: the record key.
    pub order_id: String,
    /// Per-order sequence, starting at 1; always positive once decoded.
    pub version: i64,
    /// The lifecycle step the event records.
    pub event_type: EventType,
    /// Order total in minor units.
    pub amount: i64,
    /// ISO 4217 code (`DEFAULT_CURRENCY` for a v1 record).
    pub currency: String,
    /// Milliseconds since the Unix epoch.
    pub occurred_at: i64,
}

/// An order's domain fields: what its newest applied event carries
/// (event-carried state). The engine reads none of them, except the status
/// whose changes the outbox reports; a later step lets users bring their
/// own entity type here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// The lifecycle step of the newest applied event.
    pub status: EventType,
    /// Order total in minor units.
    pub amount: i64,
    /// ISO 4217 code.
    pub currency: String,
}

/// An order's state without its inbox: what `state get` prints and what
/// expectations compare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateView {
    /// The order's id.
    pub order_id: String,
    /// The version of the newest applied event.
    pub version: i64,
    /// The lifecycle step of the newest applied event.
    pub status: EventType,
    /// Order total in minor units.
    pub amount: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// The newest applied event.
    pub event_id: String,
    /// When the newest applied event occurred (milliseconds since the Unix
    /// epoch).
    pub occurred_at: i64,
}

impl StateView {
    /// The state an event carries, as the store would hold it after applying it.
    pub(crate) fn of_event(event: &OrderEvent) -> Self {
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
    use crate::domains::orders::OrderState;
    use crate::engine::inbox::{Inbox, InboxEntry};
    use serde::Serialize;

    /// The stored layout did not move when the domain fields were grouped:
    /// a state stored as the flat struct it used to be (bincode's
    /// fixed-width form, before layout 6) still reads.
    #[test]
    fn grouping_the_domain_fields_keeps_the_stored_bytes() {
        #[derive(Serialize)]
        struct Flat<'a> {
            order_id: &'a str,
            version: i64,
            status: EventType,
            amount: i64,
            currency: &'a str,
            event_id: &'a str,
            occurred_at: i64,
            inbox: &'a Inbox,
        }
        let inbox = Inbox::from_parts(
            &[InboxEntry {
                version: 3,
                id_hash: 7,
                applied_at_ms: 9,
            }],
            &[],
        );
        let state = OrderState {
            key: "order-1".into(),
            version: 3,
            data: Order {
                status: EventType::Shipped,
                amount: 1_250,
                currency: "EUR".into(),
            },
            event_id: "e-3".into(),
            occurred_at: 42,
            inbox: inbox.clone(),
        };
        let flat = Flat {
            order_id: "order-1",
            version: 3,
            status: EventType::Shipped,
            amount: 1_250,
            currency: "EUR",
            event_id: "e-3",
            occurred_at: 42,
            inbox: &inbox,
        };
        let flat = bincode::serialize(&flat).expect("encode");
        assert_eq!(
            crate::engine::stored_state::decode_state(&flat).as_ref(),
            Ok(&state)
        );
    }
}
