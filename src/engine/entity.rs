//! The seam between the engine and a domain.
//!
//! The engine (inbox, version check, cache, store, changelog, restore, dead
//! letters, outbox, exactly-once, replay, metrics, `/state`) needs four
//! things from an event: the entity's key, its version, its event id and
//! when it occurred. Everything else is the domain's: how an event changes
//! an entity's data ([`Entity::apply`]), what status, if any, a change
//! publishes ([`Entity::status`]), and how records are decoded
//! ([`Entity::reader`], [`Entity::read`]). Orders ([`crate::domains::orders::Orders`])
//! are one implementation.
//!
//! The engine keeps, per entity, a [`State`]: its own fields (key, version,
//! the event that produced it, the inbox of applied event ids) around the
//! domain's [`Entity::Data`].

use std::fmt::Debug;

use apache_avro::types::Value;
use apache_avro::Schema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::engine::codec::error::DecodeError;
use crate::engine::inbox::Inbox;

/// One decoded event: the fields the engine reads, around the domain's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event<B> {
    /// Unique per event; redeliveries carry the same id (the inbox).
    pub event_id: String,
    /// The entity's key (also the Kafka record key).
    pub key: String,
    /// Per-entity sequence, starting at 1; positive once decoded.
    pub version: i64,
    /// Milliseconds since the Unix epoch.
    pub occurred_at: i64,
    /// What the domain reads.
    pub body: B,
}

/// An entity type: its events, its data, and how the engine reads them.
///
/// The associated functions are the pure domain logic (no I/O, no clock);
/// the methods taking `&self` decode records, and may depend on
/// configuration (a no-code entity reads field names from it).
pub trait Entity: Clone + Send + Sync + 'static {
    /// What an event carries beyond the engine's fields.
    type Body: Debug + Clone + Send + Sync + 'static;
    /// What the store keeps for one entity beside the engine's fields. Its
    /// serde (bincode) layout is the stored layout: change it only with a
    /// migration.
    type Data: Debug + Clone + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static;
    /// A status whose changes go to the output topic (the outbox).
    type Status: Debug + Clone + PartialEq + Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What `state get`, `state dump` and `/state/{key}` show of a state.
    type View: Debug + Clone + PartialEq + Serialize + Send + Sync + 'static;
    /// A writer schema resolved against the entity's reader schema.
    type Reader: Send + Sync + 'static;

    /// The name of the key field in events and views (`order_id`).
    const KEY_FIELD: &'static str;

    /// What one entity is called in messages (`order`).
    const NAME: &'static str = "entity";

    /// The entity's data after `body`'s event, decided to apply, on `data`
    /// (`None`: the entity's first event).
    fn apply(data: Option<&Self::Data>, body: Self::Body) -> Self::Data;

    /// The status of `data` whose changes are published, if the entity has one.
    fn status(data: &Self::Data) -> Option<Self::Status>;

    /// The view of a state (it may depend on configuration: a no-code
    /// entity names the key as configured).
    fn view(&self, state: &State<Self>) -> Self::View
    where
        Self: Sized;

    /// `state get`'s line for a state (by default its view as JSON).
    fn describe(&self, state: &State<Self>) -> String
    where
        Self: Sized,
    {
        format!(
            "{} {}: version {}, {}, {} event ids in inbox",
            Self::NAME,
            state.key,
            state.version,
            serde_json::to_string(&self.view(state)).unwrap_or_default(),
            state.inbox.len()
        )
    }

    /// Rough heap bytes of `data`, for the cache budget.
    fn data_heap_bytes(_data: &Self::Data) -> usize {
        0
    }

    /// The schema writer schemas are resolved against (the schema guard
    /// checks every registered writer version against it); `None`: each
    /// record is read with its writer's schema as it is.
    fn reader_schema(&self) -> Option<&Schema>;

    /// Resolves writer schema `writer` (registry id `id`), or says why it
    /// cannot be read (a poison record).
    fn reader(&self, id: u32, writer: Schema) -> Result<Self::Reader, DecodeError>;

    /// Decodes one Avro body written with `reader`'s writer schema.
    fn read(&self, reader: &Self::Reader, body: &[u8]) -> Result<Event<Self::Body>, DecodeError>;

    /// The Avro value of a status in the output schema.
    fn status_value(status: &Self::Status) -> Value;

    /// The output topic's schema (status changes).
    fn status_schema(&self) -> &str;
}

/// What the store keeps for one entity: the engine's fields (the key, the
/// version that orders events, the producing event and its time, the inbox
/// of applied event ids) around the entity's data.
///
/// Stored packed (`src/engine/stored_state.rs`); its `Deserialize` reads
/// the fixed-width form orderly stored before layout 6, field by field in
/// this order.
#[derive(Deserialize)]
#[serde(bound = "")]
pub struct State<E: Entity> {
    /// The entity's key.
    pub key: String,
    /// The version of the newest applied event.
    pub version: i64,
    /// The domain's fields.
    pub data: E::Data,
    /// The event that produced this state.
    pub event_id: String,
    /// When that event occurred (milliseconds since the Unix epoch).
    pub occurred_at: i64,
    /// Applied event ids within the retention window.
    pub inbox: Inbox,
}

impl<E: Entity> Clone for State<E> {
    fn clone(&self) -> Self {
        State {
            key: self.key.clone(),
            version: self.version,
            data: self.data.clone(),
            event_id: self.event_id.clone(),
            occurred_at: self.occurred_at,
            inbox: self.inbox.clone(),
        }
    }
}

impl<E: Entity> Debug for State<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("key", &self.key)
            .field("version", &self.version)
            .field("data", &self.data)
            .field("event_id", &self.event_id)
            .field("occurred_at", &self.occurred_at)
            .field("inbox", &self.inbox)
            .finish()
    }
}

impl<E: Entity> PartialEq for State<E> {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
            && self.version == other.version
            && self.data == other.data
            && self.event_id == other.event_id
            && self.occurred_at == other.occurred_at
            && self.inbox == other.inbox
    }
}

impl<E: Entity> State<E> {
    /// Rough heap bytes (what it holds beyond its own inline size), for
    /// the cache budget.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.key.capacity()
            + E::data_heap_bytes(&self.data)
            + self.event_id.capacity()
            + self.inbox.heap_bytes()
    }
}
