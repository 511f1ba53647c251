//! The Prometheus exposition of [`Telemetry`], in the OpenMetrics text
//! format of the `prometheus-client` crate. Per-partition series come from
//! the assigned partitions at scrape time: a partition that moves away
//! leaves this instance's output, and its counters reappear, seeded from
//! the durable checkpoint, wherever it is assigned next.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use super::histogram::Histogram;
use super::{PartitionStatus, Telemetry};

/// The content type of [`render`]'s output.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The outcome label's values, with the counter each reads.
type Counter = fn(&PartitionStatus) -> &AtomicU64;
const OUTCOMES: [(&str, Counter); 4] = [
    ("applied", |p| &p.outcomes.applied),
    ("duplicate", |p| &p.outcomes.duplicates),
    ("stale", |p| &p.outcomes.stale),
    ("dead_lettered", |p| &p.outcomes.dead_lettered),
];

/// A registry holding the processor's collector (built once, rendered on
/// every scrape).
pub(crate) fn registry(telemetry: Arc<Telemetry>) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(TelemetryCollector(telemetry)));
    registry
}

pub(crate) fn render(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut out = String::with_capacity(16 * 1024);
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}

#[derive(Debug)]
struct TelemetryCollector(Arc<Telemetry>);

fn partition_label(p: &PartitionStatus) -> [(&'static str, String); 1] {
    [("partition", p.partition.to_string())]
}

fn histogram(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    h: &Histogram,
) -> Result<(), std::fmt::Error> {
    let snapshot = h.snapshot();
    // The encoder accumulates: it takes each bucket's own count.
    let mut previous = 0;
    let own: Vec<(f64, u64)> = snapshot
        .buckets
        .iter()
        .map(|&(bound, cumulative)| {
            let n = cumulative - previous;
            previous = cumulative;
            (bound, n)
        })
        .collect();
    let mut metric = encoder.encode_descriptor(name, help, unit, MetricType::Histogram)?;
    metric.encode_histogram::<NoLabelSet>(snapshot.sum, snapshot.count, &own, None)
}

/// A per-partition gauge family, skipping partitions without a value.
fn partition_gauge<N>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    partitions: &[Arc<PartitionStatus>],
    value: impl Fn(&PartitionStatus) -> Option<N>,
) -> Result<(), std::fmt::Error>
where
    ConstGauge<N>: EncodeMetric,
{
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for p in partitions {
        if let Some(v) = value(p) {
            ConstGauge::new(v).encode(family.encode_family(&partition_label(p))?)?;
        }
    }
    Ok(())
}

impl Collector for TelemetryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let t = &self.0;
        let partitions = t.partitions();
        record_counters(&mut encoder, &partitions)?;
        progress_gauges(&mut encoder, t, &partitions)?;
        outbox_series(&mut encoder, &partitions)?;
        instance_series(&mut encoder, t, &partitions)?;
        histograms(&mut encoder, t)
    }
}

/// The records consumed, by outcome, and the version gaps, per partition.
fn record_counters(
    encoder: &mut DescriptorEncoder,
    partitions: &[Arc<PartitionStatus>],
) -> Result<(), std::fmt::Error> {
    {
        let mut family = encoder.encode_descriptor(
            "orderly_records",
            "Consumed records by outcome; the four outcomes add up to the records consumed (seeded from the durable checkpoint)",
            None,
            MetricType::Counter,
        )?;
        for p in partitions {
            for (outcome, counter) in OUTCOMES {
                let labels = [
                    ("partition", p.partition.to_string()),
                    ("outcome", outcome.to_string()),
                ];
                ConstCounter::new(counter(p).load(Ordering::Relaxed))
                    .encode(family.encode_family(&labels)?)?;
            }
        }
    }
    let mut family = encoder.encode_descriptor(
        "orderly_version_gaps",
        "Applied events whose version skipped one or more versions of their order",
        None,
        MetricType::Counter,
    )?;
    for p in partitions {
        ConstCounter::new(p.version_gaps.load(Ordering::Relaxed))
            .encode(family.encode_family(&partition_label(p))?)?;
    }
    Ok(())
}

/// How far each partition is from done: its lag, its restore, the
/// standbys' lag, and a write-out's wait in a transactional call.
fn progress_gauges(
    encoder: &mut DescriptorEncoder,
    t: &Telemetry,
    partitions: &[Arc<PartitionStatus>],
) -> Result<(), std::fmt::Error> {
    partition_gauge(
        encoder,
        "orderly_consumer_lag",
        "Records between the partition's end offset and the processed position",
        partitions,
        |p| p.lag(),
    )?;
    partition_gauge(
        encoder,
        "orderly_restore_remaining_records",
        "Changelog records still to restore (only while the partition restores)",
        partitions,
        |p| p.restore.remaining(),
    )?;
    {
        let mut family = encoder.encode_descriptor(
            "orderly_standby_lag_records",
            "Changelog records a standby (a warm copy of a partition another member owns) has not applied yet",
            None,
            MetricType::Gauge,
        )?;
        for (partition, lag) in t.standbys() {
            let label = [("partition", partition.to_string())];
            ConstGauge::new(lag).encode(family.encode_family(&label)?)?;
        }
    }
    partition_gauge(
        encoder,
        "orderly_restore_time_left_seconds",
        "Estimated time a restore still takes, at its rate so far (only while a partition restores, once there is a rate to go by)",
        partitions,
        |p| {
            p.restore
                .view()
                .and_then(|v| v.time_left())
                .map(|left| left.as_secs_f64())
        },
    )?;
    partition_gauge(
        encoder,
        "orderly_write_out_call_wait_seconds",
        "How long the partition's write-out has waited in one librdkafka transactional call (only while it does; past 10 s /readyz says the partition is stalled, at 45 s it starts over)",
        partitions,
        |p| {
            p.waiting
                .get(std::time::Instant::now())
                .map(|(waited, _)| waited.as_secs_f64())
        },
    )
}

/// The outbox's backlog and what its relay published, per partition.
fn outbox_series(
    encoder: &mut DescriptorEncoder,
    partitions: &[Arc<PartitionStatus>],
) -> Result<(), std::fmt::Error> {
    partition_gauge(
        encoder,
        "orderly_outbox_pending",
        "Outbox records written and not yet acknowledged by the broker",
        partitions,
        |p| {
            p.outbox
                .get()
                .map(|b| b.pending.load(Ordering::Relaxed) as i64)
        },
    )?;
    partition_gauge(
        encoder,
        "orderly_outbox_oldest_age_seconds",
        "Age of the oldest pending outbox record (0 when none)",
        partitions,
        |p| {
            p.outbox
                .get()
                .map(|b| b.oldest_age_ms.load(Ordering::Relaxed) as f64 / 1000.0)
        },
    )?;
    let mut family = encoder.encode_descriptor(
        "orderly_outbox_published",
        "Outbox records the broker acknowledged",
        None,
        MetricType::Counter,
    )?;
    for p in partitions {
        if let Some(backlog) = p.outbox.get() {
            ConstCounter::new(backlog.published.load(Ordering::Relaxed))
                .encode(family.encode_family(&partition_label(p))?)?;
        }
    }
    Ok(())
}

/// The instance's own series: its partitions, restored records, records
/// by schema, errors, and the dead-letter breaker's trips and stops.
fn instance_series(
    encoder: &mut DescriptorEncoder,
    t: &Telemetry,
    partitions: &[Arc<PartitionStatus>],
) -> Result<(), std::fmt::Error> {
    ConstGauge::new(partitions.len() as i64).encode(encoder.encode_descriptor(
        "orderly_assigned_partitions",
        "Partitions assigned to this instance",
        None,
        MetricType::Gauge,
    )?)?;
    ConstCounter::new(t.restored_records.load(Ordering::Relaxed)).encode(
        encoder.encode_descriptor(
            "orderly_restored_records",
            "Changelog records applied by restores",
            None,
            MetricType::Counter,
        )?,
    )?;
    {
        let mut family = encoder.encode_descriptor(
            "orderly_records_by_schema",
            "Input records read per writer schema id (each id the registry resolved)",
            None,
            MetricType::Counter,
        )?;
        for (id, records) in t.schema_records.snapshot() {
            ConstCounter::new(records)
                .encode(family.encode_family(&[("schema_id", id.to_string())])?)?;
        }
    }
    {
        let mut family = encoder.encode_descriptor(
            "orderly_errors",
            "Failures by pipeline stage, retryable (waited out, tried again) or permanent (the process or a partition stops)",
            None,
            MetricType::Counter,
        )?;
        for (stage, kind, count) in t.errors.snapshot() {
            ConstCounter::new(count).encode(family.encode_family(&[
                ("stage", stage.as_str().to_string()),
                ("kind", kind.as_str().to_string()),
            ])?)?;
        }
    }
    ConstCounter::new(t.breaker_trips.load(Ordering::Relaxed)).encode(encoder.encode_descriptor(
        "orderly_dead_letter_breaker_trips",
        "Partitions the dead-letter breaker stopped (too many dead letters in a row or in a window)",
        None,
        MetricType::Counter,
    )?)?;
    ConstGauge::new(partitions.iter().filter(|p| p.phase() == crate::observe::Phase::Stopped).count() as i64).encode(
        encoder.encode_descriptor(
            "orderly_stopped_partitions",
            "Assigned partitions stopped by the dead-letter breaker (they decide nothing until reassigned)",
            None,
            MetricType::Gauge,
        )?,
    )
}

/// The latency and size histograms.
fn histograms(encoder: &mut DescriptorEncoder, t: &Telemetry) -> Result<(), std::fmt::Error> {
    let seconds = Some(&Unit::Seconds);
    histogram(
        encoder,
        "orderly_batch_duration",
        "Time to decide one batch (decode, dead letters, decide)",
        seconds,
        &t.batch_duration,
    )?;
    histogram(
        encoder,
        "orderly_batch_records",
        "Records per decided batch",
        None,
        &t.batch_records,
    )?;
    histogram(
        encoder,
        "orderly_write_out_duration",
        "One write-out: changelog acknowledged, then one atomic store batch",
        seconds,
        &t.write_out_duration,
    )?;
    histogram(
        encoder,
        "orderly_write_out_wait",
        "A write-out's wait for its turn (processing.concurrent_write_outs)",
        seconds,
        &t.write_out_wait,
    )?;
    histogram(
        encoder,
        "orderly_flush_duration",
        "One store flush (fsync) covering many write-outs",
        seconds,
        &t.flush_duration,
    )?;
    histogram(
        encoder,
        "orderly_commit_duration",
        "One offset commit to the group",
        seconds,
        &t.commit_duration,
    )?;
    histogram(
        encoder,
        "orderly_completion",
        "From an applied event's occurred_at to the write-out holding it being flushed",
        seconds,
        &t.completion,
    )?;
    histogram(
        encoder,
        "orderly_timer_lateness",
        "How late partition tasks' timers fired",
        seconds,
        &t.timer_lateness,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::store::Checkpoint;

    #[test]
    fn exposes_seeded_counters_and_histograms() {
        let telemetry = Arc::new(Telemetry::default());
        let checkpoint = Checkpoint {
            applied: 7,
            duplicates: 2,
            stale: 1,
            dead_lettered: 3,
            next_offset: 13,
            ..Default::default()
        };
        let status = Arc::new(PartitionStatus::new(3, Some(&checkpoint)));
        status.enter(crate::observe::Phase::Processing);
        status.record(
            &crate::engine::outcomes::Outcomes {
                applied: 1,
                ..Default::default()
            },
            1,
            14,
        );
        status.end_offset.store(20, Ordering::Relaxed);
        telemetry.insert(status);
        telemetry.batch_duration.observe(0.002);
        telemetry.complete(&[1_000, 2_000], 3_000);
        let text = render(&registry(telemetry)).expect("renders");
        for line in [
            "orderly_records_total{partition=\"3\",outcome=\"applied\"} 8",
            "orderly_records_total{partition=\"3\",outcome=\"duplicate\"} 2",
            "orderly_records_total{partition=\"3\",outcome=\"dead_lettered\"} 3",
            "orderly_version_gaps_total{partition=\"3\"} 1",
            "orderly_consumer_lag{partition=\"3\"} 6",
            "orderly_assigned_partitions 1",
            "orderly_batch_duration_seconds_count 1",
            "orderly_completion_seconds_count 2",
            "orderly_completion_seconds_sum 3.0",
            "# TYPE orderly_batch_duration_seconds histogram",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(
            !text.contains("orderly_restore_remaining_records{")
                && !text.contains("orderly_restore_time_left_seconds{"),
            "no restore series while not restoring"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    /// The alert rules, their tests and the Grafana dashboard name only
    /// series this exposition has.
    #[test]
    fn rules_and_dashboard_use_exposed_metrics() {
        let telemetry = Arc::new(Telemetry::default());
        let status = Arc::new(PartitionStatus::new(0, None));
        status.restore.begin(5);
        status.restore.advance(0);
        status.end_offset.store(1, Ordering::Relaxed);
        status.position.store(0, Ordering::Relaxed);
        let _ = status.outbox.set(Default::default());
        telemetry.insert(status);
        let text = render(&registry(telemetry)).expect("renders");
        // Series names, and histogram family names (as prose may cite them).
        let exposed: std::collections::BTreeSet<String> = text
            .lines()
            .filter_map(|l| {
                if let Some(family) = l.strip_prefix("# TYPE ") {
                    family.split(' ').next()
                } else if l.starts_with('#') {
                    None
                } else {
                    l.split(['{', ' ']).next()
                }
            })
            .map(str::to_string)
            .collect();
        let root = env!("CARGO_MANIFEST_DIR");
        for file in [
            "config/prometheus/orderly-rules.yml",
            "config/prometheus/orderly-rules.test.yml",
            "config/grafana/orderly-dashboard.json",
        ] {
            let body = std::fs::read_to_string(format!("{root}/{file}")).expect("config file");
            let mut names = 0;
            for (at, _) in body.match_indices("orderly_") {
                // A metric name starts at a word boundary (not `job="orderly_x"` inside another name).
                if body[..at]
                    .chars()
                    .last()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                {
                    continue;
                }
                let name: String = body[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names += 1;
                assert!(
                    exposed.contains(&name),
                    "{file} names {name}, which /metrics does not have; it has {exposed:?}"
                );
            }
            assert!(names > 5, "{file} names metrics");
        }
    }
}
