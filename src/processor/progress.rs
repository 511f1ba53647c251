//! What the poll thread refreshes between polls: each partition's end
//! offset, the rate of records decided, and the progress lines.

use std::collections::VecDeque;
use std::ffi::{CStr, CString};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::BaseConsumer;
use tracing::info;

use crate::observe::cadence::{Cadence, Due, QUIET_EVERY};
use crate::observe::{Phase, Telemetry};
use crate::processor::context::OrderlyContext;
use crate::processor::parts::Reporting;

/// The poll thread's progress: when the next progress line is due, the
/// total it last wrote, and the window the rate is taken over.
pub(crate) struct Progress {
    lines: Cadence,
    last_total: u64,
    last_refresh: Instant,
    rate_window: VecDeque<(Instant, u64)>,
    /// The input topic, for the fetch state's look-ups. Topic names have
    /// no NUL byte (the broker refuses them).
    topic: Option<CString>,
    outbox_on: bool,
    status_in_write_outs: bool,
}

impl Progress {
    pub(crate) fn new(topic: &str, outbox_on: bool, status_in_write_outs: bool) -> Self {
        Progress {
            lines: Cadence::new(Instant::now()),
            last_total: 0,
            last_refresh: Instant::now(),
            rate_window: VecDeque::new(),
            topic: CString::new(topic).ok(),
            outbox_on,
            status_in_write_outs,
        }
    }

    /// After each poll: the end offsets, the rate once a second, and the
    /// progress lines when they are due.
    pub(crate) fn after_poll(
        &mut self,
        consumer: &BaseConsumer<OrderlyContext>,
        reporting: &Reporting,
    ) {
        if let Some(topic) = &self.topic {
            refresh_end_offsets(consumer, &reporting.telemetry, topic);
        }
        if self.last_refresh.elapsed() >= Duration::from_secs(1) {
            refresh_rate(reporting, &mut self.rate_window);
            self.last_refresh = Instant::now();
        }
        let last_total = self.last_total;
        let due = self
            .lines
            .due(Instant::now(), || anything_moved(reporting, last_total));
        if let Due::Write(interval) = due {
            log_progress(
                reporting,
                self.outbox_on,
                self.status_in_write_outs,
                last_total,
                interval,
            );
            self.last_total = reporting.counters.total();
        }
    }
}

/// Each assigned partition's end offset, from the consumer's fetch state (no
/// request). The processed position is a lower bound of the true end: a
/// fetch state older than the last batch does not show an end behind it.
fn refresh_end_offsets(
    consumer: &BaseConsumer<OrderlyContext>,
    telemetry: &Telemetry,
    topic: &CStr,
) {
    for status in telemetry.partitions() {
        if let Some(high) = crate::kafka::cached_high_watermark(consumer, topic, status.partition) {
            status.end_offset.store(
                high.max(status.position.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
    }
}

/// Once a second: the rate of records decided over the last five seconds.
fn refresh_rate(reporting: &Reporting, window: &mut VecDeque<(Instant, u64)>) {
    let telemetry = &reporting.telemetry;
    let now = Instant::now();
    window.push_back((now, reporting.counters.total()));
    while window.len() > 6 {
        window.pop_front();
    }
    if let (Some(first), Some(last)) = (window.front(), window.back()) {
        let seconds = last.0.saturating_duration_since(first.0).as_secs_f64();
        telemetry.set_rate(if seconds > 0.0 {
            (last.1 - first.1) as f64 / seconds
        } else {
            0.0
        });
    }
}

/// Whether anything the progress lines count moved since they were last
/// written: records processed, partitions restoring, status changes waiting.
fn anything_moved(reporting: &Reporting, last_total: u64) -> bool {
    reporting.counters.total() != last_total
        || reporting.telemetry.partitions().iter().any(|p| {
            p.phase() == Phase::Restoring
                || p.outbox
                    .get()
                    .is_some_and(|backlog| backlog.pending.load(Ordering::Relaxed) > 0)
        })
}

/// The progress lines: restoring partitions, the outbox backlog (outbox on;
/// worded by who delivers the status changes), totals. While nothing moves
/// they come once, then every few minutes ([`Cadence`]).
fn log_progress(
    reporting: &Reporting,
    outbox_on: bool,
    status_in_write_outs: bool,
    last_total: u64,
    elapsed: Duration,
) {
    let partitions = reporting.telemetry.partitions();
    let restoring: Vec<i32> = partitions
        .iter()
        .filter(|p| p.phase() == Phase::Restoring)
        .map(|p| p.partition)
        .collect();
    if !restoring.is_empty() {
        info!(partitions = ?restoring, "restoring from the changelog");
    }
    if outbox_on {
        let (mut pending, mut oldest_ms, mut published, mut in_write_outs) =
            (0u64, 0u64, 0u64, 0u64);
        for backlog in partitions.iter().filter_map(|p| p.outbox.get()) {
            pending += backlog.pending.load(Ordering::Relaxed);
            oldest_ms = oldest_ms.max(backlog.oldest_age_ms.load(Ordering::Relaxed));
            published += backlog.published.load(Ordering::Relaxed);
            in_write_outs += backlog.in_write_outs.load(Ordering::Relaxed);
        }
        // Worded by who delivers the status changes: with write-out delivery
        // the relay runs only over rows an earlier relay left.
        if !status_in_write_outs {
            info!(
                pending,
                oldest_age_s = oldest_ms as f64 / 1000.0,
                published,
                "outbox relay: status changes published by the relay"
            );
        } else if pending > 0 || published > 0 {
            info!(
                in_write_outs,
                left_by_a_relay_pending = pending,
                left_by_a_relay_published = published,
                "status changes delivered with the write-outs"
            );
        } else {
            info!(
                in_write_outs,
                "status changes delivered with the write-outs"
            );
        }
    }
    let total = reporting.counters.total();
    let rate = (total - last_total) as f64 / elapsed.as_secs_f64().max(1e-3);
    let c = reporting.counters.outcomes.load();
    if total == last_total && restoring.is_empty() {
        info!(
            processed = total,
            applied = c.applied,
            duplicates = c.duplicates,
            stale = c.stale,
            dead_lettered = c.dead_lettered,
            "progress: idle, nothing to process (the next line when records arrive, or in {} minutes)",
            QUIET_EVERY.as_secs() / 60
        );
        return;
    }
    info!(
        processed = total,
        per_second = rate.round() as u64,
        applied = c.applied,
        duplicates = c.duplicates,
        stale = c.stale,
        dead_lettered = c.dead_lettered,
        "progress"
    );
}
