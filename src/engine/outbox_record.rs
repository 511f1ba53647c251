//! A status change as the store keeps it until it is published.

use serde::{Deserialize, Serialize};

/// One pending status change of an entity whose status is an `S` (an
/// order's `EventType`), stored under its source offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct OutboxRecord<S> {
    pub event_id: String,
    /// The entity's key.
    pub key: String,
    pub version: i64,
    pub(crate) from_status: Option<S>,
    pub(crate) to_status: S,
    pub occurred_at: i64,
    pub source_partition: i32,
    pub source_offset: i64,
    /// When the change was applied (milliseconds since the epoch): the
    /// backlog's age.
    pub(crate) created_ms: i64,
    /// The partition's state epoch when it was applied (see
    /// `orderly replay --reset-state`).
    pub epoch: u32,
}

/// The `event_id` of the status change an event caused: XXH3-128 of the
/// source `event_id`, written as a UUID. The same source event always gives
/// the same id, whoever re-emits it.
pub fn status_event_id(source_event_id: &str) -> String {
    status_id_of_hash(status_id_hash(source_event_id))
}

/// The hash [`status_event_id`] writes as a UUID.
pub(crate) fn status_id_hash(source_event_id: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128_with_seed(source_event_id.as_bytes(), 0x6f72_6465_726c_7921)
}

/// [`status_event_id`] of a hash from [`status_id_hash`].
pub(crate) fn status_id_of_hash(hash: u128) -> String {
    uuid::Uuid::from_u128(hash).hyphenated().to_string()
}
