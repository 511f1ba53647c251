//! Failures, counted: `orderly_errors_total{stage, kind}`, a small fixed
//! set of label values. `stage` is where in the pipeline it happened;
//! `kind` is `retryable` (waited out and tried again: a registry outage, a
//! broker that refused a dead letter for now, a failed commit, an aborted
//! transaction) or `permanent` (the process, or a partition, stops).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a failure happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Start-up: clients, topics, the schema registry, threads.
    Start,
    /// Taking a newly assigned partition: its store, its checkpoint, its queue.
    Assign,
    /// Restoring a partition from the changelog.
    Restore,
    /// Decoding a record (the schema registry).
    Decode,
    /// Producing a dead letter, or the dead-letter breaker.
    DeadLetter,
    /// A write-out: changelog records (and status changes published with
    /// it), then the store batch.
    WriteOut,
    /// A write-out's Kafka transaction (with a changelog, either guarantee).
    Transaction,
    /// Syncing the store to disk.
    Flush,
    /// Committing offsets to the group.
    Commit,
    /// The outbox relay publishing status changes.
    Relay,
    /// The consumer's poll loop and rebalances.
    Poll,
    /// A partition task that panicked.
    Task,
}

impl Stage {
    pub(crate) const ALL: [Stage; 12] = [
        Stage::Start,
        Stage::Assign,
        Stage::Restore,
        Stage::Decode,
        Stage::DeadLetter,
        Stage::WriteOut,
        Stage::Transaction,
        Stage::Flush,
        Stage::Commit,
        Stage::Relay,
        Stage::Poll,
        Stage::Task,
    ];

    /// The stage's `stage` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Start => "start",
            Stage::Assign => "assign",
            Stage::Restore => "restore",
            Stage::Decode => "decode",
            Stage::DeadLetter => "dead_letter",
            Stage::WriteOut => "write_out",
            Stage::Transaction => "transaction",
            Stage::Flush => "flush",
            Stage::Commit => "commit",
            Stage::Relay => "relay",
            Stage::Poll => "poll",
            Stage::Task => "task",
        }
    }
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a failure is waited out or stops the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Waited out: the work goes on once it passes.
    Retryable,
    /// Stops the work it hit.
    Permanent,
}

impl Kind {
    /// The kind's `kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Retryable => "retryable",
            Kind::Permanent => "permanent",
        }
    }
}

/// What every error type of the pipeline says about itself.
pub trait Failure: std::error::Error {
    /// Where in the pipeline it happened.
    fn stage(&self) -> Stage;
    /// Whether it is waited out or stops the work.
    fn kind(&self) -> Kind;
}

/// The counts behind `orderly_errors_total`.
#[derive(Debug, Default)]
pub struct ErrorCounts([[AtomicU64; 2]; Stage::ALL.len()]);

impl ErrorCounts {
    pub fn record(&self, stage: Stage, kind: Kind) {
        let i = Stage::ALL.iter().position(|s| *s == stage).unwrap_or(0);
        self.0[i][kind as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one failure of an error type that classifies itself.
    pub fn count(&self, failure: &dyn Failure) {
        self.record(failure.stage(), failure.kind());
    }

    /// `(stage, kind, count)` for every label pair, zeros included (a
    /// series that exists from the start makes `increase()` see the first).
    pub fn snapshot(&self) -> Vec<(Stage, Kind, u64)> {
        let mut out = Vec::with_capacity(Stage::ALL.len() * 2);
        for (i, stage) in Stage::ALL.iter().enumerate() {
            for kind in [Kind::Retryable, Kind::Permanent] {
                out.push((
                    *stage,
                    kind,
                    self.0[i][kind as usize].load(Ordering::Relaxed),
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_stage_and_kind() {
        let counts = ErrorCounts::default();
        counts.record(Stage::Commit, Kind::Retryable);
        counts.record(Stage::Commit, Kind::Retryable);
        counts.record(Stage::Flush, Kind::Permanent);
        let snapshot = counts.snapshot();
        assert_eq!(snapshot.len(), 24);
        let get = |s, k| {
            snapshot
                .iter()
                .find(|(a, b, _)| *a == s && *b == k)
                .map(|(_, _, n)| *n)
        };
        assert_eq!(get(Stage::Commit, Kind::Retryable), Some(2));
        assert_eq!(get(Stage::Flush, Kind::Permanent), Some(1));
        assert_eq!(get(Stage::Relay, Kind::Retryable), Some(0));
    }
}
