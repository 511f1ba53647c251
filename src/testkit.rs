//! The surface the crate's own integration tests (`tests/`), benches
//! (`benches/`) and binary use: the
//! insides they drive directly. It is not API: hidden from the docs, and it
//! may change without notice. A program of its own uses the root's
//! re-exports.
//!
//! What the root already re-exports (`Config`, `Store`, `Registry`,
//! `Processor`, the entities, ...) is used from there, not repeated here.
//! Each built-in domain's parts are in a module of their own ([`orders`],
//! [`stock`], [`latest`]), where their names (`STATUS_SCHEMA`, `workload`)
//! do not collide.

// The configuration's parts a test sets.
pub use crate::config::{EntityConfig, EntityKind, Guarantee};

// The engine: the pure core, a partition's cache, the store, the wire format.
pub use crate::engine::codec::{wire, Decoder};
pub use crate::engine::decide::{apply, decide, step};
pub use crate::engine::inbox::InboxEntry;
pub use crate::engine::partition_state::{Decoded, PartitionState, Sourced};
pub use crate::engine::store::{BatchWrite, Checkpoint, PartitionStore, RestoreWrite};
pub use crate::engine::stored_state::encode_state;

// Kafka: the consumer's settings, the offset commits' metadata, a partition
// read to a known end, the record headers orderly writes.
pub use crate::kafka::headers;
pub use crate::kafka::{consumer_config, ReaderSettings, COMMIT_METADATA};

// The registry's errors.
pub use crate::registry::RegistryError;

// The processor's parts: dead letters, a changelog restore, the outbox's ids.
pub use crate::engine::outbox_record::status_event_id;
pub use crate::processor::changelog::restore::Restore;
pub use crate::processor::dlq::{DeadLetter, DeadLetters};

// Observation: the telemetry, its failures by stage and kind, readiness.
pub use crate::observe::errors::{Failure, Kind, Stage};
pub use crate::observe::restore_progress::RestoreProgress;
pub use crate::observe::status::not_ready;
pub use crate::observe::Telemetry;

// The operator surface: producing a workload, waiting for a store to cover
// it, the HTTP endpoint, the store check of `config check`.
pub use crate::ops::demo::covers;
pub use crate::ops::http::{bind, serve};
pub use crate::ops::load::{produce_planned, produce_streamed};
pub use crate::ops::preflight::store_present;

/// `dlq replay`'s parts: a request, its progress group, the re-drive log's
/// keys.
pub mod redrive {
    pub use crate::ops::redrive::letter::SourcePos;
    pub use crate::ops::redrive::log::key as log_key;
    pub use crate::ops::redrive::redrive_group;
    pub use crate::ops::redrive::replay::{replay, ReplayRequest, Selection};
}

/// The orders domain: its events, codec, read plan and workload generator.
pub mod orders {
    pub use crate::domains::orders::codec::{
        decode_generic, reader_schema, Encoder, WriterVersion, SCHEMA_V1, SCHEMA_V2,
    };
    pub use crate::domains::orders::event::{EventType, Order, OrderEvent, StateView};
    pub use crate::domains::orders::plan::Plan;
    pub use crate::domains::orders::workload;
    pub use crate::domains::orders::{OrderState, STATUS_SCHEMA};
}

/// The stock domain: its encoder, availability and workload generator.
pub mod stock {
    pub use crate::domains::stock::workload;
    pub use crate::domains::stock::{Availability, StockEncoder, STATUS_SCHEMA};
}

/// The latest domain: its event and output schema.
pub mod latest {
    pub use crate::domains::latest::{LatestEvent, STATUS_SCHEMA};
}

/// Leaves a transaction open on `topic`'s `partition` that no coordinator
/// tracks (the signature of a lost marker) and returns its first offset.
/// `brokers` are every broker's `host:port` (PLAINTEXT), `leader` the
/// index of the partition's leader among them.
pub fn leave_hanging_transaction(
    brokers: &[&str],
    leader: usize,
    topic: &str,
    partition: i32,
) -> Result<i64, String> {
    leave_hanging_transaction_with(brokers, leader, topic, partition, &[], None)
}

/// [`leave_hanging_transaction`], the same transaction also writing to
/// `also` (more partitions on the same leader) and, with `offsets` (group,
/// topic, partition, offset), leaving a pending offset commit for the
/// group: an exactly_once write-out whose markers were all lost. Returns
/// its first offset on `topic`'s `partition`.
pub fn leave_hanging_transaction_with(
    brokers: &[&str],
    leader: usize,
    topic: &str,
    partition: i32,
    also: &[(&str, i32)],
    offsets: Option<(&str, &str, i32, i64)>,
) -> Result<i64, String> {
    let mut connections = brokers
        .iter()
        .map(|b| {
            crate::kafka::wire::Connection::open(b, crate::kafka::hanging::CALL_TIMEOUT)
                .map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut targets = vec![(topic, partition)];
    targets.extend_from_slice(also);
    crate::kafka::hanging::leave_hanging(&mut connections, leader, &targets, offsets)
        .map_err(|e| e.to_string())
}
