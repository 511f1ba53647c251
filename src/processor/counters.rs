//! The live totals of a run ([`Counters`]): what the progress lines and the
//! run report say.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::engine::outcomes::{AtomicOutcomes, Outcomes};

/// Live totals for progress logs and the run report. The durable, exact
/// counters are in each partition's checkpoint; latencies are histograms in
/// [`crate::observe::Telemetry`].
#[derive(Default)]
pub(crate) struct Counters {
    pub outcomes: AtomicOutcomes,
    pub batches: AtomicU64,
    /// Applied events that skipped versions.
    pub(crate) version_gaps: AtomicU64,
    /// Write-outs (one atomic sled batch each) and what they wrote.
    pub write_outs: AtomicU64,
    pub keys_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub flushes: AtomicU64,
    /// Partitions restored from the changelog, and the time restores took
    /// (microseconds, summed over partitions).
    pub(crate) restore_micros: AtomicU64,
    pub restores: AtomicU64,
    /// When the first batch started being decided, and the last one ended.
    first_batch_at: OnceLock<Instant>,
    last_batch_at: Mutex<Option<Instant>>,
}

impl Counters {
    pub(crate) fn record_batch(&self, outcomes: &Outcomes, version_gaps: u64, elapsed: Duration) {
        self.outcomes.add(outcomes);
        self.version_gaps.fetch_add(version_gaps, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let _ = self
            .first_batch_at
            .set(now.checked_sub(elapsed).unwrap_or(now));
        if let Ok(mut last) = self.last_batch_at.lock() {
            *last = Some(now);
        }
    }

    /// From the start of the first batch to the end of the last one: the
    /// time spent deciding, without waiting for write-outs.
    pub(crate) fn decide_span(&self) -> Duration {
        let last = self.last_batch_at.lock().ok().and_then(|l| *l);
        match (self.first_batch_at.get(), last) {
            (Some(first), Some(last)) => last.saturating_duration_since(*first),
            _ => Duration::ZERO,
        }
    }

    pub(crate) fn record_write(&self, keys: usize, bytes: usize) {
        self.write_outs.fetch_add(1, Ordering::Relaxed);
        self.keys_written.fetch_add(keys as u64, Ordering::Relaxed);
        self.bytes_written
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn record_restore(&self, elapsed: Duration) {
        self.restores.fetch_add(1, Ordering::Relaxed);
        self.restore_micros.fetch_add(
            elapsed.as_micros().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    pub(crate) fn total(&self) -> u64 {
        self.outcomes.load().total()
    }
}
