//! What partition tasks and the supervisor tell the group flush
//! ([`super::flusher`]): its own module, so the parts that hold the sender
//! and the flusher that receives do not import each other.

pub(crate) enum FlushMsg {
    /// A write-out covering everything before `next_offset` was written;
    /// `applied_at`: its applied events' `occurred_at` (completion time).
    Covered {
        partition: i32,
        next_offset: i64,
        applied_at: Vec<i64>,
    },
    /// A partition task started on a durable checkpoint: commit it if the
    /// group's committed offset is behind it (a crash between a flush and
    /// its commit), without waiting for new input.
    Resume { partition: i32, next_offset: i64 },
    /// Flush and commit everything reported so far, then stop committing
    /// `release`d partitions (revoked); commit them first unless `lost`.
    Barrier {
        release: Vec<i32>,
        lost: bool,
        reply: std::sync::mpsc::SyncSender<()>,
    },
    /// Flush and commit what is pending, then stop.
    Stop,
}
