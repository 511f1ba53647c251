//! The changelog: every write-out's changes, produced to a compacted topic
//! (one partition per input partition, same number) before they are written
//! to the local store, so a partition that moves to another instance, or a
//! store that is lost, is restored from it.
//!
//! A record's key is the changed key in its changelog form
//! (`crate::engine::store::to_changelog_key`: an order's `order_id`, or a reserved
//! key no `order_id` can equal); its value is the store's value, byte for
//! byte (`None`, a tombstone, for a deletion). Each write-out's records carry
//! the header [`crate::kafka::headers::HEADER_COVERS`]: the input offset its checkpoint moves to.
//! The checkpoint record comes last, under the reserved checkpoint key.
//!
//! Restore applies a record only when the checkpoint it ends at covers it
//! (`covers <= checkpoint.next_offset`): the tail of a write-out whose
//! checkpoint record never made it (a crash mid-produce), and records a
//! re-processed write-out with other boundaries made obsolete, are not
//! applied beyond the checkpoint (the scheme Quix Streams uses with its
//! processed-offset header).
//!
//! * [`restore`]: brings a partition's tree up to the changelog.
//! * [`topic`]: creates the topic at start-up, or checks the one there is.

pub(crate) mod reader;
pub(crate) mod replay;
pub(crate) mod restore;
pub(crate) mod topic;

use rdkafka::error::KafkaError;

use crate::engine::store::StoreError;
use crate::kafka::partition_reader::ReadError;

impl crate::observe::errors::Failure for ChangelogError {
    fn stage(&self) -> crate::observe::errors::Stage {
        use crate::observe::errors::Stage;
        match self {
            ChangelogError::Topic { .. } => Stage::Start,
            ChangelogError::Produce { .. } => Stage::WriteOut,
            _ => Stage::Restore,
        }
    }

    fn kind(&self) -> crate::observe::errors::Kind {
        crate::observe::errors::Kind::Permanent
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChangelogError {
    #[error("changelog topic {topic}: {message}")]
    Topic { topic: String, message: String },
    #[error("changelog {topic} partition {partition}: produce failed: {cause}")]
    Produce {
        topic: String,
        partition: i32,
        cause: KafkaError,
    },
    #[error("changelog read failed: {cause}")]
    Read { cause: ReadError },
    #[error(
        "changelog {topic} partition {partition} ends at offset {end}, but the store recorded position {local}: \
         the changelog topic was deleted or recreated. Move the store directory aside and rebuild it from the \
         input topic (see docs/replay-and-restore.md, \"Rebuilding the store\")"
    )]
    StoreAhead {
        topic: String,
        partition: i32,
        local: i64,
        end: i64,
    },
    #[error("changelog {topic} partition {partition}: record at offset {offset}: {message}")]
    Corrupt {
        topic: String,
        partition: i32,
        offset: i64,
        message: String,
    },
    #[error(
        "changelog {topic} partition {partition}: a transaction open at offset {stable} did not end in {:.0} s \
         (high watermark {high}), so what was committed after it cannot be read and the partition is not restored. \
         When no coordinator has it in flight, Kafka lost its marker (KAFKA-20734: Kafka 4.3 and 4.4, after the \
         partition had no leader): `{} repair --partitions {partition}` says whether it is so, and with --apply, \
         every instance of the group stopped, repairs it (docs/operating.md, \"Repairing a lost transaction \
         marker\"). Aborting it with kafka-transactions.sh alone (brokers {bootstrap}) would drop the write-out it \
         carried",
        .waited.as_secs_f64(),
        crate::program::name()
    )]
    OpenTransaction {
        bootstrap: String,
        topic: String,
        partition: i32,
        stable: i64,
        high: i64,
        waited: std::time::Duration,
    },
    #[error("restore of partition {partition} was cancelled (the partition was revoked)")]
    Cancelled { partition: i32 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ChangelogError {
    /// True for a read that failed on the broker's side and passes
    /// ([`ReadError::is_transient`]). A restore that fails so is started
    /// again ([`restore::Restore::run_with_retries`]).
    pub fn is_transient(&self) -> bool {
        matches!(self, ChangelogError::Read { cause } if cause.is_transient())
    }
}

/// A cancelled read is the restore's cancellation (the partition was
/// revoked); any other failure of the partition read is a read failure.
impl From<ReadError> for ChangelogError {
    fn from(error: ReadError) -> Self {
        match error {
            ReadError::Cancelled { partition, .. } => ChangelogError::Cancelled { partition },
            cause => ChangelogError::Read { cause },
        }
    }
}
