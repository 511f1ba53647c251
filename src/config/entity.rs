//! `[entity]`: which entity the `orderly` binary processes.

use serde::{Deserialize, Serialize};

/// `[entity]`: which entity the `orderly` binary processes.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EntityConfig {
    /// `entity.kind`: orders, stock or latest.
    pub kind: EntityKind,
    /// `latest`: the name of the field holding each event's key.
    pub key_field: String,
    /// `latest`: the field holding the per-key version (a `long` or `int`).
    pub version_field: String,
    /// `latest`: the field holding the event id (a `string`).
    pub event_id_field: String,
    /// `latest`: the field holding when the event occurred (milliseconds);
    /// `""`: none (0 is kept).
    pub occurred_at_field: String,
    /// `latest`: a field whose changes are published to the output topic;
    /// `""`: none.
    pub status_field: String,
}

/// `entity.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    /// Orders, the built-in domain.
    Orders,
    /// Per-SKU stock levels (restocked, reserved, released).
    Stock,
    /// Any Avro topic, no code: the state of a key is its newest event.
    Latest,
}
