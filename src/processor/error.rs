//! What stops the processor, or one partition: [`ProcessError`], the error
//! every part of the processor reports a failure with.

use crate::engine::store::StoreError;
use crate::observe::errors::{Failure, Kind, Stage};
use crate::processor::dlq;
use crate::processor::transaction;

/// What stops the processor (or, for [`ProcessError::DeadLetterBreaker`]
/// and a fenced [`ProcessError::Txn`], one partition). Each says where it
/// happened ([`Failure::stage`]); `orderly_errors_total` counts them.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("store flush failed: {0}")]
    Flush(StoreError),
    #[error(transparent)]
    DeadLetter(#[from] dlq::DeadLetterError),
    #[error("the flusher stopped (a store flush failed)")]
    FlusherGone,
    #[error("kafka client setup failed: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error(transparent)]
    Changelog(#[from] crate::processor::changelog::ChangelogError),
    #[error(transparent)]
    Txn(#[from] transaction::TxnError),
    #[error(transparent)]
    Status(#[from] crate::processor::outbox::direct::PublishError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("partition {partition} stopped at offset {offset} by the dead-letter breaker: {trip}; {cause}")]
    DeadLetterBreaker {
        partition: i32,
        offset: i64,
        trip: crate::engine::breaker::Trip,
        /// What the dead letters of the batch that tripped it had in common:
        /// the most frequent error kind, with an example.
        cause: String,
    },
    /// One partition's work failed, with the error that made it fail.
    #[error("partition {partition}: {source}")]
    InPartition {
        partition: i32,
        source: Box<ProcessError>,
    },
    /// One partition's work failed at `stage`, for a reason no typed error
    /// carries (a task that panicked, a thread that failed, a refusal).
    #[error("partition {partition}: {message}")]
    Partition {
        partition: i32,
        stage: Stage,
        message: String,
    },
    /// The process failed at `stage` (start-up, the poll thread, ...).
    #[error("{message}")]
    Process { stage: Stage, message: String },
}

impl ProcessError {
    /// `self`, naming `partition` unless it does already.
    pub(crate) fn in_partition(self, partition: i32) -> ProcessError {
        match self {
            named @ (ProcessError::InPartition { .. }
            | ProcessError::Partition { .. }
            | ProcessError::Txn(_)
            | ProcessError::DeadLetterBreaker { .. }) => named,
            other => ProcessError::InPartition {
                partition,
                source: Box::new(other),
            },
        }
    }
}

impl Failure for ProcessError {
    fn stage(&self) -> Stage {
        match self {
            ProcessError::Store(_) => Stage::WriteOut,
            ProcessError::Flush(_) | ProcessError::FlusherGone => Stage::Flush,
            ProcessError::DeadLetter(_) | ProcessError::DeadLetterBreaker { .. } => {
                Stage::DeadLetter
            }
            ProcessError::Kafka(_) | ProcessError::Config(_) => Stage::Start,
            ProcessError::Changelog(e) => e.stage(),
            ProcessError::Txn(_) => Stage::Transaction,
            ProcessError::Status(_) => Stage::WriteOut,
            ProcessError::InPartition { source, .. } => source.stage(),
            ProcessError::Partition { stage, .. } | ProcessError::Process { stage, .. } => *stage,
        }
    }

    fn kind(&self) -> Kind {
        match self {
            ProcessError::InPartition { source, .. } => source.kind(),
            ProcessError::Txn(e) => e.kind(),
            _ => Kind::Permanent,
        }
    }
}
