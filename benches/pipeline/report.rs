//! The benchmark's results: what each phase measured, as one JSON object
//! (`--json`) or a table.

use serde::Serialize;

use orderly::testkit::orders::workload::{IdFormat, Shape};

use crate::figures::{Counts, FullPipeline, Phase, StorageOut};

#[derive(Debug, Serialize)]
pub struct Results {
    pub machine: Machine,
    pub workload: WorkloadOut,
    pub phases: Vec<Phase>,
    /// (c) events/s over the slower of (a) and (d).
    pub ratio_c_to_slower_of_a_d: Option<f64>,
    /// The same with steady rates (after the first record / first batch).
    pub ratio_c_to_slower_of_a_d_steady: Option<f64>,
    /// (o) (changelog on, outbox off) over (e) (both off), total rates.
    pub ratio_changelog_on_to_off: Option<f64>,
    /// (c) (changelog and outbox on) over (o) (outbox off), total rates.
    pub ratio_outbox_on_to_off: Option<f64>,
    pub full_pipeline: Option<FullPipeline>,
    pub storage: Option<StorageOut>,
    /// The side-by-side phases (`--side-by-side`): each contender in its own process.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub side_by_side: Option<crate::phases::side_by_side::SideBySideOut>,
    /// The failover drill (`--phases fo`): standbys 2 against none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failover: Option<crate::phases::failover::FailoverOut>,
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub broker: String,
}

#[derive(Debug, Serialize)]
pub struct WorkloadOut {
    pub topic: String,
    pub partitions: i32,
    pub requested_partitions: i32,
    pub broker_log_mib: f64,
    pub shape: Shape,
    pub id_format: IdFormat,
    pub orders: usize,
    pub events_per_order: u32,
    pub records: u64,
    pub duplicate_rate: f64,
    pub reorder_rate: f64,
    pub poison_rate: f64,
    pub v1_share: f64,
    pub expected: Counts,
    pub plan_seconds: f64,
    pub produce_seconds: f64,
    pub produce_events_per_s: f64,
}

impl Results {
    /// The results as a text table.
    pub fn table(&self) -> String {
        let w = &self.workload;
        let mut s = String::new();
        let mut line = |text: String| {
            s.push_str(&text);
            s.push('\n');
        };
        line(format!(
            "orderly pipeline benchmark: {} records ({} orders x {} events, {}, {} ids, + {:.0}% duplicates, {:.0}% reorderings, poison {}), {} partitions",
            w.records,
            w.orders,
            w.events_per_order,
            w.shape.as_str(),
            w.id_format.as_str(),
            w.duplicate_rate * 100.0,
            w.reorder_rate * 100.0,
            w.poison_rate,
            w.partitions
        ));
        line(format!(
            "machine: {} cores; broker: {}",
            self.machine.cores, self.machine.broker
        ));
        if w.partitions != w.requested_partitions {
            line(format!(
                "NOTE: {} partitions instead of {}: the mock cluster keeps only 5 MiB per partition and this workload is ~{:.0} MiB",
                w.partitions, w.requested_partitions, w.broker_log_mib
            ));
        }
        line(format!(
            "load: plan {:.1} s, produce {:.1} s ({:.0} events/s)",
            w.plan_seconds, w.produce_seconds, w.produce_events_per_s
        ));
        line(String::new());
        let per_event = |x: Option<f64>, decimals: usize| {
            x.map(|x| format!("{x:.decimals$}"))
                .unwrap_or_else(|| "-".into())
        };
        line(format!(
            "{:<4} {:<34} {:>9} {:>7} {:>9} {:>11} {:>7} {:>9} {:>10} {:>10} {:>7} {:>8} {:>9} {:>10}",
            "", "phase", "events", "secs", "events/s", "steady ev/s", "cpu s", "cpu µs/ev", "broker cpu", "peak RSS", "keys/ev", "bytes/ev", "disk B/ev", "wrote B/ev"
        ));
        for p in &self.phases {
            line(format!(
                "({:<2}) {:<34} {:>9} {:>7.2} {:>9.0} {:>11.0} {:>7.2} {:>9.2} {:>10} {:>6.0} MiB {:>7} {:>8} {:>9} {:>10}",
                p.key,
                p.name,
                p.events,
                p.seconds,
                p.events_per_s,
                p.steady_events_per_s,
                p.cpu_seconds,
                p.cpu_seconds * 1e6 / p.events.max(1) as f64,
                p.broker_cpu_seconds.map(|c| format!("{c:.2}")).unwrap_or_else(|| "-".into()),
                p.peak_rss_mib,
                per_event(p.keys_written_per_event, 3),
                per_event(p.bytes_written_per_event, 0),
                per_event(p.disk_bytes_per_event, 0),
                per_event(p.written_bytes_per_event, 0),
            ));
        }
        line(String::new());
        if let (Some(r), Some(steady)) = (
            self.ratio_c_to_slower_of_a_d,
            self.ratio_c_to_slower_of_a_d_steady,
        ) {
            line(format!(
                "(c) / slower of (a) and (d): {r:.2} (steady rates: {steady:.2})"
            ));
        }
        if let Some(r) = self.ratio_changelog_on_to_off {
            line(format!(
                "changelog cost: (o) changelog on / (e) off: {r:.2}"
            ));
        }
        if let Some(r) = self.ratio_outbox_on_to_off {
            line(format!("outbox cost: (c) outbox on / (o) off: {r:.2}"));
        }
        if let Some(f) = &self.full_pipeline {
            line(format!(
                "(c) total {:.2} s = group join {:.2} s + processing; steady state {:.0} events/s{}",
                f.total_seconds,
                f.join_seconds,
                f.steady_events_per_s,
                if f.timed_out { "  (TIMED OUT)" } else { "" }
            ));
            line(format!(
                "(c) batches {} ({:.0} records/batch), batch latency p50 {:.2} ms, p99 {:.2} ms",
                f.batches, f.avg_records_per_batch, f.batch_p50_ms, f.batch_p99_ms
            ));
            line(format!(
                "(c) write-outs {} (p50 {:.2} ms, p99 {:.2} ms); partition timers late by p99 {:.2} ms",
                f.write_outs, f.write_p50_ms, f.write_p99_ms, f.timer_late_p99_ms
            ));
            line(format!(
                "(c) no checkpoint moved for {:.2} s of the processing time (longest stretch {:.2} s)",
                f.stalled_seconds, f.longest_stall_seconds
            ));
            line(format!(
                "(c) flushes {} ({:.1}/s, p50 {:.2} ms); keys written/event {:.3}; bytes written/event {}; store dir growth {:.0} bytes/event",
                f.flushes,
                f.flushes_per_s,
                f.flush_p50_ms,
                f.keys_written_per_event,
                f.bytes_written_per_event.map(|b| format!("{b:.0}")).unwrap_or_else(|| "n/a (RunReport has no bytes_written yet)".into()),
                f.store_disk_bytes_per_event
            ));
            line(format!(
                "(c) peak RSS {:.0} MiB (target < {:.0} MiB); counters {:?} match expected: {}",
                f.peak_rss_mib,
                f.rss_target_mib,
                f.counters,
                if f.counters_match_expected {
                    "yes"
                } else {
                    "NO"
                }
            ));
            let mut threads: Vec<(&String, &f64)> = f.thread_cpu_seconds.iter().collect();
            threads.sort_by(|a, b| b.1.total_cmp(a.1));
            let shown: Vec<String> = threads.iter().map(|(n, s)| format!("{n} {s:.2}")).collect();
            line(format!("(c) cpu s by thread: {}", shown.join(", ")));
        }
        for p in &self.phases {
            if let Some(http) = &p.http {
                for text in crate::http_load::table_lines(&p.key, http) {
                    line(text);
                }
            }
        }
        if let Some(side) = &self.side_by_side {
            for text in side.table_lines() {
                line(text);
            }
        }
        if let Some(failover) = &self.failover {
            for text in failover.table_lines() {
                line(text);
            }
        }
        if let Some(d) = &self.storage {
            line(format!(
                "(d) batches {}, flushes {} ({:.1}/s, p50 {:.2} ms, {:.0}% of the time); batch p50 {:.2} ms, p99 {:.2} ms",
                d.batches,
                d.flushes,
                d.flushes_per_s,
                d.flush_p50_ms,
                d.flush_share * 100.0,
                d.batch_p50_ms,
                d.batch_p99_ms
            ));
            line(format!(
                "(d) keys/event {:.3}, state bytes handed to sled/event {:.0} (avg state key+value {:.0} bytes), bytes flushed/event {:.0}, store dir growth {:.0} bytes/event",
                d.keys_per_event, d.bytes_per_event, d.avg_state_value_bytes, d.flushed_bytes_per_event, d.disk_bytes_per_event
            ));
        }
        s
    }
}
