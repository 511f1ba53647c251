//! `[outbox]`: how status changes reach the output topic, and when its
//! backlog is a warning.

use serde::{Deserialize, Serialize};

use super::duration::HumanDuration;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// How status changes reach the output topic (at_least_once; exactly_once
    /// always sends them in the write-out's transaction).
    pub delivery: OutboxDelivery,
    /// Pending records per partition past which the backlog is a warning.
    pub(crate) backlog_warn: u64,
    /// Age of the oldest pending record past which it is a warning.
    pub(crate) backlog_warn_age: HumanDuration,
}

/// `outbox.delivery`: how an at_least_once processor publishes status
/// changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxDelivery {
    /// Produced with each write-out (with a changelog, in its
    /// transaction; without, acknowledged before the store is written):
    /// nothing is stored for them, and an output topic that cannot take
    /// them holds the partition's write-outs back (as the changelog does).
    WriteOut,
    /// Stored as outbox rows in the write-out's sled batch (and its
    /// changelog), published by a relay task per partition and deleted once
    /// acknowledged: the input goes on while the output topic is down, and
    /// the backlog grows.
    Relay,
}
