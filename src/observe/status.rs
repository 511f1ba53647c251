//! The status the page at `/` shows (`/api/status`), and readiness.

use std::sync::atomic::Ordering;

use serde::Serialize;

use super::Phase;
use super::{PartitionStatus, Telemetry};

/// Who this process is, for the status page's header.
#[derive(Debug, Clone, Serialize)]
pub struct Identity {
    pub group: String,
    pub topic: String,
    /// `host/pid`.
    pub instance: String,
    pub(crate) outbox_enabled: bool,
    /// Who delivers the status changes: `"write_out"` (with each write-out,
    /// or in its transaction) or `"relay"`.
    pub(crate) outbox_delivery: &'static str,
}

#[derive(Debug, Serialize)]
pub(crate) struct Status {
    pub group: String,
    pub topic: String,
    pub instance: String,
    pub(crate) uptime_seconds: f64,
    pub ready: bool,
    pub(crate) ready_reason: Option<String>,
    pub totals: Totals,
    pub(crate) rate_per_second: f64,
    /// Duplicates per record consumed (0 before any record).
    pub(crate) idempotency_hit_rate: f64,
    pub(crate) version_gaps: u64,
    pub(crate) completion_seconds: Option<Completion>,
    pub outbox: Outbox,
    pub partitions: Vec<PartitionRow>,
    /// Partitions other members own that this one keeps warm, with their
    /// lag in changelog records (empty with `processing.standby_replicas = 0`).
    pub standbys: Vec<StandbyRow>,
}

#[derive(Debug, Serialize, PartialEq, Eq)]
pub(crate) struct StandbyRow {
    pub partition: i32,
    pub lag: i64,
}

#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub(crate) struct Totals {
    pub applied: u64,
    pub duplicate: u64,
    pub stale: u64,
    pub dead_lettered: u64,
    pub consumed: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct Completion {
    pub count: u64,
    /// The histogram's highest bound: a percentile equal to it is above it.
    pub(crate) above_range_seconds: f64,
    pub p50: f64,
    pub(crate) p90: f64,
    pub p99: f64,
}

#[derive(Debug, Default, Serialize)]
pub(crate) struct Outbox {
    pub(crate) enabled: bool,
    pub pending: u64,
    pub(crate) oldest_age_seconds: f64,
    pub published: u64,
    /// `"write_out"` or `"relay"` (see [`Identity`]).
    pub(crate) delivery: &'static str,
    /// Status changes delivered with the write-outs.
    pub(crate) in_write_outs: u64,
}

#[derive(Debug, Serialize)]
pub(crate) struct PartitionRow {
    pub partition: i32,
    pub phase: &'static str,
    pub checkpoint: Option<i64>,
    pub end_offset: Option<i64>,
    pub lag: Option<i64>,
    pub applied: u64,
    pub duplicate: u64,
    pub stale: u64,
    pub dead_lettered: u64,
    pub(crate) restore_remaining: Option<i64>,
    /// The share of the restore's records read, 0 to 100.
    pub(crate) restore_percent: Option<u8>,
    pub(crate) restore_seconds_left: Option<f64>,
    pub outbox_pending: u64,
    pub(crate) outbox_oldest_age_seconds: f64,
    /// The librdkafka call a stalled write-out waits in, and for how long
    /// (the phase then shows "stalled").
    pub(crate) stalled_in: Option<String>,
}

fn known(value: i64) -> Option<i64> {
    (value >= 0).then_some(value)
}

fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Restoring => "restoring",
        Phase::Processing => "processing",
        Phase::Draining => "draining",
        Phase::Stopped => "stopped",
    }
}

fn row(p: &PartitionStatus) -> PartitionRow {
    let backlog = p.outbox.get();
    let restore = p.restore.view();
    let stalled = p
        .waiting
        .get(std::time::Instant::now())
        .filter(|(waited, _)| *waited >= crate::observe::STALL_REPORT);
    PartitionRow {
        partition: p.partition,
        phase: if stalled.is_some() {
            "stalled"
        } else {
            phase_name(p.phase())
        },
        stalled_in: stalled.map(|(waited, call)| format!("{call}, {}s", waited.as_secs())),
        checkpoint: known(p.checkpoint.load(Ordering::Relaxed)),
        end_offset: known(p.end_offset.load(Ordering::Relaxed)),
        lag: p.lag(),
        applied: p.outcomes.applied.load(Ordering::Relaxed),
        duplicate: p.outcomes.duplicates.load(Ordering::Relaxed),
        stale: p.outcomes.stale.load(Ordering::Relaxed),
        dead_lettered: p.outcomes.dead_lettered.load(Ordering::Relaxed),
        restore_remaining: restore.map(|v| v.remaining),
        restore_percent: restore.map(|v| (v.done() * 100.0).floor() as u8),
        restore_seconds_left: restore
            .and_then(|v| v.time_left())
            .map(|left| (left.as_secs_f64() * 10.0).round() / 10.0),
        outbox_pending: backlog
            .map(|b| b.pending.load(Ordering::Relaxed))
            .unwrap_or(0),
        outbox_oldest_age_seconds: backlog
            .map(|b| b.oldest_age_ms.load(Ordering::Relaxed) as f64 / 1000.0)
            .unwrap_or(0.0),
    }
}

/// Why the process is not ready to serve its partitions, or `None` when it
/// is: the group assigned it its partitions and every one is consuming.
pub fn not_ready(t: &Telemetry) -> Option<String> {
    if let Some(reason) = t.stopping.get() {
        return Some(reason.clone());
    }
    if !t.joined.load(Ordering::Relaxed) {
        return Some(match crate::observe::kafka_link::why_down() {
            Some(why) => format!("waiting for the consumer group to assign partitions: {why}"),
            None => "waiting for the consumer group to assign partitions".into(),
        });
    }
    let partitions = t.partitions();
    // Every restoring partition, each with its progress and time left.
    let restoring: Vec<String> = partitions
        .iter()
        .filter(|p| p.phase() == Phase::Restoring)
        .map(|p| match p.restore.view() {
            Some(progress) => format!("partition {} is {}", p.partition, progress.describe()),
            None => format!("partition {} is restoring from the changelog", p.partition),
        })
        .collect();
    if !restoring.is_empty() {
        return Some(restoring.join("; "));
    }
    let now = std::time::Instant::now();
    for p in &partitions {
        if let Some((waited, call)) = p
            .waiting
            .get(now)
            .filter(|(w, _)| *w >= crate::observe::STALL_REPORT)
        {
            if call.starts_with("librdkafka's fetch start") {
                return Some(format!(
                    "partition {} is stalled: not fetched for {}s; {call}",
                    p.partition,
                    waited.as_secs()
                ));
            }
            return Some(format!(
                "partition {} is stalled: its write-out has waited {}s in librdkafka's {call}; it starts over \
                 when the wait passes its bound",
                p.partition,
                waited.as_secs()
            ));
        }
    }
    for p in partitions {
        match p.phase() {
            Phase::Processing | Phase::Restoring => {}
            Phase::Draining => {
                return Some(format!(
                    "partition {} is draining (being released)",
                    p.partition
                ))
            }
            Phase::Stopped => {
                let why = p
                    .stopped
                    .get()
                    .map(String::as_str)
                    .unwrap_or("the dead-letter breaker tripped");
                return Some(format!("{why}; fix the cause, then restart this instance"));
            }
        }
        if p.outbox
            .get()
            .is_some_and(|b| b.failing.load(Ordering::Relaxed))
        {
            return Some(format!(
                "partition {}'s outbox relay cannot publish to the output topic (missing or refusing; see the log); \
                 status changes wait in the outbox",
                p.partition
            ));
        }
    }
    None
}

pub(crate) fn snapshot(t: &Telemetry, identity: &Identity) -> Status {
    let statuses = t.partitions();
    let partitions: Vec<PartitionRow> = statuses.iter().map(|p| row(p)).collect();
    let mut totals = Totals::default();
    let mut version_gaps = 0;
    let mut outbox = Outbox {
        enabled: identity.outbox_enabled,
        delivery: identity.outbox_delivery,
        ..Default::default()
    };
    for (row, p) in partitions.iter().zip(&statuses) {
        version_gaps += p.version_gaps.load(Ordering::Relaxed);
        totals.applied += row.applied;
        totals.duplicate += row.duplicate;
        totals.stale += row.stale;
        totals.dead_lettered += row.dead_lettered;
        if let Some(backlog) = p.outbox.get() {
            outbox.pending += backlog.pending.load(Ordering::Relaxed);
            outbox.published += backlog.published.load(Ordering::Relaxed);
            outbox.in_write_outs += backlog.in_write_outs.load(Ordering::Relaxed);
            outbox.oldest_age_seconds = outbox
                .oldest_age_seconds
                .max(backlog.oldest_age_ms.load(Ordering::Relaxed) as f64 / 1000.0);
        }
    }
    totals.consumed = totals.applied + totals.duplicate + totals.stale + totals.dead_lettered;
    let completion = t.completion.snapshot();
    let reason = not_ready(t);
    Status {
        group: identity.group.clone(),
        topic: identity.topic.clone(),
        instance: identity.instance.clone(),
        uptime_seconds: t.uptime().as_secs_f64(),
        ready: reason.is_none(),
        ready_reason: reason,
        idempotency_hit_rate: if totals.consumed == 0 {
            0.0
        } else {
            totals.duplicate as f64 / totals.consumed as f64
        },
        totals,
        rate_per_second: t.rate(),
        version_gaps,
        completion_seconds: (completion.count > 0).then(|| Completion {
            count: completion.count,
            above_range_seconds: completion
                .buckets
                .iter()
                .rev()
                .map(|(bound, _)| *bound)
                .find(|b| b.is_finite())
                .unwrap_or(0.0),
            p50: completion.quantile(0.5).unwrap_or_default(),
            p90: completion.quantile(0.9).unwrap_or_default(),
            p99: completion.quantile(0.99).unwrap_or_default(),
        }),
        outbox,
        partitions,
        standbys: t
            .standbys()
            .into_iter()
            .map(|(partition, lag)| StandbyRow { partition, lag })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::observe::{PartitionStatus, Telemetry};

    fn joined_with(partitions: &[(i32, Phase)]) -> (Telemetry, Vec<Arc<PartitionStatus>>) {
        let telemetry = Telemetry::default();
        telemetry.joined.store(true, Ordering::Relaxed);
        let statuses = partitions
            .iter()
            .map(|&(partition, phase)| {
                let status = Arc::new(PartitionStatus::new(partition, None));
                status.enter(phase);
                telemetry.insert(status.clone());
                status
            })
            .collect();
        (telemetry, statuses)
    }

    #[test]
    fn readiness_names_every_restoring_partition_with_its_progress() {
        let (telemetry, statuses) = joined_with(&[
            (0, Phase::Processing),
            (1, Phase::Restoring),
            (2, Phase::Restoring),
        ]);
        statuses[1].restore.begin(100_000);
        statuses[1].restore.advance(60_000);
        let reason = not_ready(&telemetry).expect("not ready");
        assert!(
            reason.starts_with(
                "partition 1 is restoring from the changelog: 40% (60,000 of 100,000 records to go"
            ),
            "{reason}"
        );
        assert!(
            reason.ends_with("; partition 2 is restoring from the changelog"),
            "{reason}"
        );

        let rows: Vec<PartitionRow> = statuses.iter().map(|p| row(p)).collect();
        assert_eq!(rows[1].restore_remaining, Some(60_000));
        assert_eq!(rows[1].restore_percent, Some(40));
        assert_eq!(rows[0].restore_remaining, None);
        assert_eq!(rows[0].restore_percent, None);

        for status in &statuses[1..] {
            status.restore.end();
            status.enter(Phase::Processing);
        }
        assert_eq!(not_ready(&telemetry), None);
    }
}
