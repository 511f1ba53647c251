//! How a run ended: the [`RunReport`] [`crate::processor::Processor::run`]
//! returns, taken from the live counters and the latency histograms, and
//! the line that says it.

use std::sync::atomic::Ordering;

use tracing::info;

use crate::engine::outcomes::Outcomes;
use crate::processor::parts::Reporting;

/// How a run ended (all zero: stopped before it joined the group).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunReport {
    /// What this run decided.
    pub outcomes: Outcomes,
    /// Applied events that skipped versions.
    pub version_gaps: u64,
    /// Batches decided.
    pub batches: u64,
    /// Write-outs (one atomic sled batch each), and the keys and bytes they
    /// wrote.
    pub write_outs: u64,
    /// Group flushes (each makes the write-outs before it durable, then
    /// commits).
    pub flushes: u64,
    /// Keys written by the write-outs.
    pub keys_written: u64,
    /// Bytes written by the write-outs.
    pub bytes_written: u64,
    /// Time to process a batch, median, in milliseconds.
    pub batch_p50_ms: f64,
    /// Time to process a batch, p99, in milliseconds.
    pub batch_p99_ms: f64,
    /// Time of a write-out, median, in milliseconds.
    pub write_p50_ms: f64,
    /// Time of a write-out, p99, in milliseconds.
    pub write_p99_ms: f64,
    /// Time of a group flush, median, in milliseconds.
    pub flush_p50_ms: f64,
    /// How late partition task timers fired (p99), in milliseconds.
    pub timer_late_p99_ms: f64,
    /// From the start of the first batch to the end of the last one.
    pub decide_seconds: f64,
    /// Partitions restored from the changelog, the records they applied and
    /// the time they took (summed).
    pub restores: u64,
    pub(crate) restored_records: u64,
    /// The time restores took, summed over partitions.
    pub restore_seconds: f64,
}

impl RunReport {
    /// What `reporting` counted this run.
    pub(crate) fn of(reporting: &Reporting) -> RunReport {
        let c = &reporting.counters;
        let t = &reporting.telemetry;
        let (batch_p50_ms, batch_p99_ms) = percentiles_ms(&t.batch_duration);
        let (write_p50_ms, write_p99_ms) = percentiles_ms(&t.write_out_duration);
        RunReport {
            outcomes: c.outcomes.load(),
            version_gaps: c.version_gaps.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            write_outs: c.write_outs.load(Ordering::Relaxed),
            flushes: c.flushes.load(Ordering::Relaxed),
            keys_written: c.keys_written.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            batch_p50_ms,
            batch_p99_ms,
            write_p50_ms,
            write_p99_ms,
            flush_p50_ms: percentiles_ms(&t.flush_duration).0,
            timer_late_p99_ms: percentiles_ms(&t.timer_lateness).1,
            decide_seconds: c.decide_span().as_secs_f64(),
            restores: c.restores.load(Ordering::Relaxed),
            restored_records: t.restored_records.load(Ordering::Relaxed),
            restore_seconds: c.restore_micros.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }

    /// The line a clean stop ends with.
    pub(crate) fn log_stopped(&self) {
        info!(
            decided = self.outcomes.total(),
            applied = self.outcomes.applied,
            duplicates = self.outcomes.duplicates,
            stale = self.outcomes.stale,
            dead_lettered = self.outcomes.dead_lettered,
            batches = self.batches,
            write_outs = self.write_outs,
            flushes = self.flushes,
            first_to_last_batch_s = format!("{:.1}", self.decide_seconds),
            restored_records = self.restored_records,
            "stopped cleanly; these figures are this run's (the store's durable totals follow on the exit line)"
        );
    }
}

/// (p50, p99) of a histogram, in milliseconds (0 without observations).
fn percentiles_ms(histogram: &crate::observe::histogram::Histogram) -> (f64, f64) {
    let snapshot = histogram.snapshot();
    let at = |q| snapshot.quantile(q).unwrap_or(0.0) * 1000.0;
    (at(0.5), at(0.99))
}
