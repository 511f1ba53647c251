//! What one phase measured: the figures the phases fill in and the report
//! prints. Below both, so the phases never import the report that holds
//! their outputs.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The four outcome counters, as the store's checkpoints or the workload's
/// expectation give them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub applied: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub dead_lettered: u64,
}

#[derive(Debug, Serialize, Clone)]
pub struct Phase {
    pub key: String,
    pub name: String,
    pub events: u64,
    pub seconds: f64,
    pub events_per_s: f64,
    /// CPU seconds of this process during the phase (user + system).
    pub cpu_seconds: f64,
    /// CPU seconds of the mock broker's process during the phase.
    pub broker_cpu_seconds: Option<f64>,
    /// Events/s after the phase's first record (excludes connecting, the
    /// first fetch and, for (c), joining the group).
    pub steady_events_per_s: f64,
    /// Peak RSS (VmHWM) of this process during the phase, reset at its start.
    pub peak_rss_mib: f64,
    pub rss_at_start_mib: f64,
    /// Keys written to sled per event, the checkpoints included ((c), (d)).
    pub keys_written_per_event: Option<f64>,
    /// Key + value bytes handed to sled per event ((d); (c) once the
    /// processor's `RunReport` reports them).
    pub bytes_written_per_event: Option<f64>,
    /// Growth of the store directory on disk per event ((c), (d)).
    pub disk_bytes_per_event: Option<f64>,
    /// Bytes this process passed to write(2)/pwrite(2) during the phase
    /// (/proc/self/io `wchar`): in (c) and (d) almost all sled's writes to
    /// its log (socket sends are not counted).
    pub written_bytes: Option<u64>,
    /// `written_bytes` per event (set once the phase's events are final).
    pub written_bytes_per_event: Option<f64>,
    /// With `--http` or `--http-load` ((c), (o), (e)): the endpoint served
    /// during the phase, and the abuse load's outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http: Option<crate::http_load::HttpOut>,
}

#[derive(Debug, Serialize)]
pub struct FullPipeline {
    /// Seconds from `Processor::run` to the checkpoints covering the end offsets.
    pub total_seconds: f64,
    /// Seconds until the first batch was visible in the store (group join).
    pub join_seconds: f64,
    /// Events/s after the first batch (excludes joining the group).
    pub steady_events_per_s: f64,
    pub batches: u64,
    pub avg_records_per_batch: f64,
    pub batch_p50_ms: f64,
    pub batch_p99_ms: f64,
    /// Write-outs (changed orders + checkpoint, one sled batch each).
    pub write_outs: u64,
    pub write_p50_ms: f64,
    pub write_p99_ms: f64,
    /// p99 of how late partition-task timers fired (batch wait, write-out due).
    pub timer_late_p99_ms: f64,
    pub flush_p50_ms: f64,
    pub flushes: u64,
    pub flushes_per_s: f64,
    pub keys_written_per_event: f64,
    /// Key + value bytes handed to sled per event: `None` until the
    /// processor's `RunReport` reports its bytes written.
    pub bytes_written_per_event: Option<f64>,
    /// Growth of the store directory (apparent file sizes) per event, from
    /// the freshly opened store to the closed one.
    pub store_disk_bytes_per_event: f64,
    pub counters: Counts,
    pub counters_match_expected: bool,
    pub peak_rss_mib: f64,
    pub rss_target_mib: f64,
    /// CPU seconds per thread group of this process while (c) ran (until covered).
    pub thread_cpu_seconds: BTreeMap<String, f64>,
    /// Time after the first batch during which no checkpoint moved (20 ms
    /// samples), and the longest such stretch.
    pub stalled_seconds: f64,
    pub longest_stall_seconds: f64,
    /// (ms since start, events covered) every 20 ms; with --timeline only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<(u64, u64)>,
    pub timed_out: bool,
}

#[derive(Debug, Serialize)]
pub struct StorageOut {
    pub batches: u64,
    pub flushes: u64,
    pub flushes_per_s: f64,
    pub keys_per_event: f64,
    /// Key + value bytes of order states handed to sled per event.
    pub bytes_per_event: f64,
    /// Bytes `Store::flush` reported per event.
    pub flushed_bytes_per_event: f64,
    /// Growth of the store directory (apparent file sizes) per event, from
    /// the freshly opened store to the closed one.
    pub disk_bytes_per_event: f64,
    /// Key + value bytes of one written order state.
    pub avg_state_value_bytes: f64,
    pub batch_p50_ms: f64,
    pub batch_p99_ms: f64,
    pub flush_p50_ms: f64,
    /// Share of (d)'s time spent in `Store::flush`.
    pub flush_share: f64,
}

/// The median of `xs` (the mean of the middle two for an even count).
pub fn median(mut xs: Vec<f64>) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

/// `x` with `decimals` decimals, or `-`.
pub fn fmt_opt(x: Option<f64>, decimals: usize) -> String {
    x.map(|x| format!("{x:.decimals$}"))
        .unwrap_or_else(|| "-".into())
}
