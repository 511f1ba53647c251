//! Orders, the built-in domain: an order's state is what its newest applied
//! event carries (event-carried state), and a change of its status is
//! published as `OrderStatusChanged`.

pub(crate) mod codec;
pub(crate) mod event;
/// Public so the differential fuzz test (`tests/fuzz_read_plan.rs`) can
/// drive it directly; the decoder is the API.
pub(crate) mod plan;
pub mod workload;

use apache_avro::types::Value;
use apache_avro::Schema;

use crate::domains::orders::codec::OrderReader;
use crate::domains::orders::event::{EventType, Order, OrderEvent, StateView};
use crate::engine::codec::DecodeError;
use crate::engine::entity::{Entity, Event, State};

/// The order output schema, registered under `<output_topic>-value`.
pub const STATUS_SCHEMA: &str = include_str!("../../../schemas/order_status_changed_v1.avsc");

/// What the store keeps for one order: the engine's fields around the
/// order's domain fields ([`Order`]). The stored (bincode) layout is the one
/// of the flat struct it once was: `order_id`, `version`, the three domain
/// fields, `event_id`, `occurred_at`, the inbox.
pub type OrderState = State<Orders>;

/// The order entity (a marker: orders need no configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Orders;

impl Entity for Orders {
    type Body = Order;
    type Data = Order;
    type Status = EventType;
    type View = StateView;
    type Reader = OrderReader;

    const KEY_FIELD: &'static str = "order_id";
    const NAME: &'static str = "order";

    fn apply(_data: Option<&Order>, body: Order) -> Order {
        body
    }

    fn status(data: &Order) -> Option<EventType> {
        Some(data.status)
    }

    fn view(&self, state: &State<Self>) -> StateView {
        StateView {
            order_id: state.key.clone(),
            version: state.version,
            status: state.data.status,
            amount: state.data.amount,
            currency: state.data.currency.clone(),
            event_id: state.event_id.clone(),
            occurred_at: state.occurred_at,
        }
    }

    fn describe(&self, state: &State<Self>) -> String {
        format!(
            "order {}: version {}, status {}, amount {} {}, event {}, occurred_at {}, {} event ids in inbox",
            state.key,
            state.version,
            state.data.status.as_str(),
            state.data.amount,
            state.data.currency,
            state.event_id,
            state.occurred_at,
            state.inbox.len()
        )
    }

    fn data_heap_bytes(data: &Order) -> usize {
        data.currency.capacity()
    }

    fn reader_schema(&self) -> Option<&Schema> {
        Some(crate::domains::orders::codec::reader_schema())
    }

    fn reader(&self, id: u32, writer: Schema) -> Result<OrderReader, DecodeError> {
        OrderReader::resolve(id, writer)
    }

    fn read(&self, reader: &OrderReader, body: &[u8]) -> Result<Event<Order>, DecodeError> {
        reader.read(body).map(Event::from)
    }

    fn status_value(status: &EventType) -> Value {
        Value::Enum(status.index() as u32, status.as_str().to_string())
    }

    fn status_schema(&self) -> &str {
        STATUS_SCHEMA
    }
}

impl From<OrderEvent> for Event<Order> {
    fn from(event: OrderEvent) -> Self {
        Event {
            event_id: event.event_id,
            key: event.order_id,
            version: event.version,
            occurred_at: event.occurred_at,
            body: Order {
                status: event.event_type,
                amount: event.amount,
                currency: event.currency,
            },
        }
    }
}

impl From<Event<Order>> for OrderEvent {
    fn from(event: Event<Order>) -> Self {
        OrderEvent {
            event_id: event.event_id,
            order_id: event.key,
            version: event.version,
            event_type: event.body.status,
            amount: event.body.amount,
            currency: event.body.currency,
            occurred_at: event.occurred_at,
        }
    }
}

impl State<Orders> {
    /// What `state get` shows of an order.
    pub fn view(&self) -> StateView {
        Orders.view(self)
    }
}

impl crate::engine::codec::Decoder<Orders> {
    /// An order decoder.
    pub fn new(registry: crate::registry::Registry) -> Self {
        Self::for_entity(Orders, registry)
    }
}
