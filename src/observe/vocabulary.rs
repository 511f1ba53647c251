//! The words the processor, the outbox relay and the HTTP endpoint share
//! about a running partition and the group: where a partition task is in its
//! life, its outbox backlog, and who owns a partition. They live here, at
//! the bottom, so the ones who write them and the ones who read them import
//! downwards.

use std::sync::atomic::AtomicU64;

use serde::Serialize;

/// "Not known yet" in an offset or count slot.
pub(crate) const UNKNOWN: i64 = -1;

/// Where a partition task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Bringing the store up to the changelog; no input record is processed.
    Restoring = 0,
    Processing = 1,
    /// Finishing what was fetched before the partition is released.
    Draining = 2,
    /// Stopped by the dead-letter breaker: nothing more is decided until
    /// the partition is assigned again (a restart, a rebalance).
    Stopped = 3,
}

impl Phase {
    pub(crate) fn from_u8(value: u8) -> Phase {
        match value {
            0 => Phase::Restoring,
            1 => Phase::Processing,
            3 => Phase::Stopped,
            _ => Phase::Draining,
        }
    }
}

/// One partition's outbox, as the relay last saw it (for logs and status).
#[derive(Debug, Default)]
pub struct Backlog {
    /// Records pending (written, not yet acknowledged and deleted).
    pub pending: AtomicU64,
    /// Age of the oldest pending record, milliseconds (0 when none).
    pub(crate) oldest_age_ms: AtomicU64,
    /// Records the relay published (the broker acknowledged them).
    pub published: AtomicU64,
    /// Status changes delivered with the write-outs (published before the
    /// store batch, or committed in the write-out's transaction), when the
    /// relay does not deliver them.
    pub in_write_outs: AtomicU64,
    /// The last publish failed (a missing or refusing output topic):
    /// readiness and the status page say so until one succeeds.
    pub failing: std::sync::atomic::AtomicBool,
}

/// A member of the consumer group, as the group's metadata names it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    pub client_id: String,
    pub host: String,
}

/// Who owns a partition, from the group's metadata (a broker request).
pub trait GroupOwners: Send + Sync {
    /// `Ok(None)`: the group metadata does not say (no member lists it).
    fn owner(&self, partition: i32) -> Result<Option<Member>, OwnersError>;
}

/// Why [`GroupOwners::owner`] cannot say. The HTTP endpoint answers "not
/// here" all the same (without an owner) and logs this at debug level.
#[derive(Debug, thiserror::Error)]
pub enum OwnersError {
    #[error("the processor has not joined the group yet")]
    NotJoined,
    #[error("the consumer is closed")]
    Closed,
    /// The group's metadata could not be read (the message names the group).
    #[error(transparent)]
    Describe(#[from] crate::kafka::group_members::DescribeError),
}
