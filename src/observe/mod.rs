//! What a running processor reports about itself: per-partition status
//! (phase, offsets, the four outcome counters seeded from the durable
//! checkpoint, restore progress, outbox backlog) and latency histograms.
//! The partition tasks, the flusher and the poll thread write it with
//! atomics; `/metrics`, `/readyz`, `/api/status` and the status page read it.
//!
//! * `histogram`: lock-free fixed-bucket histograms with percentiles.
//! * `exposition`: the Prometheus (OpenMetrics) text of all of it.
//! * [`status`]: the JSON the status page shows, and readiness.

pub(crate) mod cadence;
pub(crate) mod errors;
pub(crate) mod exposition;
pub(crate) mod histogram;
pub(crate) mod kafka_link;
pub(crate) mod restore_progress;
pub(crate) mod status;
pub(crate) mod vocabulary;

pub(crate) use restore_progress::RestoreProgress;
pub(crate) use vocabulary::{Backlog, GroupOwners, Member, OwnersError, Phase, UNKNOWN};

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use histogram::{completion_bounds, count_bounds, duration_bounds, Histogram};

use crate::engine::outcomes::{AtomicOutcomes, Outcomes};
use crate::engine::store::Checkpoint;

/// One assigned partition, as its task and the poll thread last saw it.
#[derive(Debug)]
pub struct PartitionStatus {
    pub partition: i32,
    /// The task's [`Phase`] as a `u8`: set only through [`Self::enter`],
    /// by the phase the task's lifecycle moves into.
    phase: AtomicU8,
    /// Records decided since the start of the store's checkpoint: the
    /// durable counters at assignment (or after a restore), plus what this
    /// process decided since.
    pub outcomes: AtomicOutcomes,
    pub(crate) version_gaps: AtomicU64,
    /// The next offset to process (decided, maybe not yet written).
    pub position: AtomicI64,
    /// The written checkpoint's next offset (durable at the next flush).
    pub checkpoint: AtomicI64,
    /// The partition's high watermark, from the consumer's fetch state.
    pub end_offset: AtomicI64,
    /// How far a restore from the changelog has come, while one runs.
    pub restore: RestoreProgress,
    /// The outbox relay's view, once it runs.
    pub outbox: OnceLock<Arc<Backlog>>,
    /// Why the dead-letter breaker stopped the partition, once it did.
    pub stopped: OnceLock<String>,
    /// The librdkafka call the partition's write-out waits in, while it
    /// does: `/readyz`, the status page and the log name a call that does
    /// not return.
    pub(crate) waiting: Waiting,
}

/// The blocking call a write-out waits in, and since when.
#[derive(Debug, Default)]
pub(crate) struct Waiting(std::sync::Mutex<Option<(Instant, &'static str)>>);

impl Waiting {
    /// The write-out enters `call`; it has left when the guard drops.
    pub(crate) fn enter(&self, call: &'static str) -> WaitingGuard<'_> {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), call));
        WaitingGuard(self)
    }

    /// Enters `call` until [`Self::clear`] (a wait that outlives the
    /// caller's scope).
    pub(crate) fn set(&self, call: &'static str) {
        let mut held = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if held.is_none_or(|(_, c)| c != call) {
            *held = Some((Instant::now(), call));
        }
    }

    /// Leaves the call [`Self::set`] entered.
    pub(crate) fn clear(&self) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The call waited in, and how long at `now`.
    pub(crate) fn get(&self, now: Instant) -> Option<(Duration, &'static str)> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .map(|(since, call)| (now.saturating_duration_since(since), call))
    }
}

/// Clears [`Waiting`] when the call returns (or its wait is given up).
pub(crate) struct WaitingGuard<'a>(&'a Waiting);

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        *self.0 .0.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// How long a write-out may wait in one call before `/readyz` says the
/// partition is stalled (a healthy transactional call takes milliseconds;
/// librdkafka's own timeout is 30 s).
pub(crate) const STALL_REPORT: Duration = Duration::from_secs(10);

impl PartitionStatus {
    /// A newly assigned partition: [`Phase::Restoring`] until its task
    /// says otherwise.
    pub fn new(partition: i32, checkpoint: Option<&Checkpoint>) -> Self {
        let status = PartitionStatus {
            partition,
            phase: AtomicU8::new(Phase::Restoring as u8),
            outcomes: AtomicOutcomes::default(),
            version_gaps: AtomicU64::new(0),
            position: AtomicI64::new(UNKNOWN),
            checkpoint: AtomicI64::new(UNKNOWN),
            end_offset: AtomicI64::new(UNKNOWN),
            restore: RestoreProgress::default(),
            outbox: OnceLock::new(),
            stopped: OnceLock::new(),
            waiting: Waiting::default(),
        };
        status.seed(checkpoint);
        status
    }

    /// Sets the counters and offsets from a durable checkpoint (at
    /// assignment, and again after a restore replaced it).
    pub fn seed(&self, checkpoint: Option<&Checkpoint>) {
        let c = checkpoint.copied().unwrap_or_default();
        self.outcomes.set(&c.counts());
        let next = checkpoint.map(|c| c.next_offset).unwrap_or(UNKNOWN);
        self.position.store(next, Ordering::Relaxed);
        self.checkpoint.store(next, Ordering::Relaxed);
    }

    /// Records one decided batch.
    pub fn record(&self, outcomes: &Outcomes, gaps: u64, next_offset: i64) {
        self.outcomes.add(outcomes);
        self.version_gaps.fetch_add(gaps, Ordering::Relaxed);
        self.position.store(next_offset, Ordering::Relaxed);
    }

    /// Publishes the phase the partition's task entered (status page,
    /// `/readyz`, metrics).
    pub(crate) fn enter(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// Where the partition's task is in its life.
    pub fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Relaxed))
    }

    /// Records between the end of the partition and the processed position.
    pub fn lag(&self) -> Option<i64> {
        let (end, position) = (
            self.end_offset.load(Ordering::Relaxed),
            self.position.load(Ordering::Relaxed),
        );
        (end >= 0 && position >= 0).then(|| (end - position).max(0))
    }

    pub fn consumed(&self) -> u64 {
        self.outcomes.load().total()
    }
}

/// Everything the processor reports.
#[derive(Debug)]
pub struct Telemetry {
    partitions: RwLock<BTreeMap<i32, Arc<PartitionStatus>>>,
    /// Time to decide one batch (decode, dead letters, decide).
    pub(crate) batch_duration: Histogram,
    /// Records per decided batch.
    pub(crate) batch_records: Histogram,
    /// One write-out: changelog acknowledged, then the atomic store batch.
    pub(crate) write_out_duration: Histogram,
    /// A write-out's wait for its turn (`processing.concurrent_write_outs`).
    pub(crate) write_out_wait: Histogram,
    pub(crate) flush_duration: Histogram,
    pub(crate) commit_duration: Histogram,
    /// From an applied event's `occurred_at` to its write-out being flushed.
    pub completion: Histogram,
    /// How late partition tasks' timers fired (batch wait, write-out due).
    pub(crate) timer_lateness: Histogram,
    pub(crate) restored_records: AtomicU64,
    /// Partitions the dead-letter breaker stopped.
    pub breaker_trips: AtomicU64,
    /// Failures by stage and kind (`orderly_errors_total`).
    pub errors: errors::ErrorCounts,
    /// Records per writer schema id (the decoder counts into it).
    pub(crate) schema_records: Arc<crate::engine::codec::SchemaCounts>,
    started: Instant,
    /// When the poll loop last turned (milliseconds since `started`).
    poll_turned_ms: AtomicU64,
    /// The group assigned this member partitions (or none) at least once.
    pub joined: AtomicBool,
    /// Records decided per second, over the last few seconds (f64 bits).
    rate_bits: AtomicU64,
    /// Set once the process is stopping or failed: not ready.
    pub stopping: OnceLock<String>,
    /// Partitions of the input topic (0 until connected).
    input_partitions: AtomicU32,
    /// The partitions this member keeps warm as standbys (it does not own
    /// them), each with the changelog records it has not applied yet.
    standbys: RwLock<BTreeMap<i32, i64>>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            partitions: RwLock::new(BTreeMap::new()),
            batch_duration: Histogram::new(duration_bounds()),
            batch_records: Histogram::new(count_bounds()),
            write_out_duration: Histogram::new(duration_bounds()),
            write_out_wait: Histogram::new(duration_bounds()),
            flush_duration: Histogram::new(duration_bounds()),
            commit_duration: Histogram::new(duration_bounds()),
            completion: Histogram::new(completion_bounds()),
            timer_lateness: Histogram::new(duration_bounds()),
            restored_records: AtomicU64::new(0),
            breaker_trips: AtomicU64::new(0),
            errors: errors::ErrorCounts::default(),
            schema_records: Arc::default(),
            started: Instant::now(),
            poll_turned_ms: AtomicU64::new(0),
            joined: AtomicBool::new(false),
            rate_bits: AtomicU64::new(0),
            stopping: OnceLock::new(),
            input_partitions: AtomicU32::new(0),
            standbys: RwLock::new(BTreeMap::new()),
        }
    }
}

impl Telemetry {
    /// The assigned partitions, in order.
    pub fn partitions(&self) -> Vec<Arc<PartitionStatus>> {
        self.partitions
            .read()
            .map(|p| p.values().cloned().collect())
            .unwrap_or_default()
    }

    /// The status of `partition`, when assigned.
    pub fn partition(&self, partition: i32) -> Option<Arc<PartitionStatus>> {
        self.partitions
            .read()
            .ok()
            .and_then(|p| p.get(&partition).cloned())
    }

    /// Adds (or replaces) a partition's status.
    pub fn insert(&self, status: Arc<PartitionStatus>) {
        if let Ok(mut all) = self.partitions.write() {
            all.insert(status.partition, status);
        }
    }

    /// Forgets a partition's status (revoked).
    pub fn remove(&self, partition: i32) {
        if let Ok(mut all) = self.partitions.write() {
            all.remove(&partition);
        }
    }

    /// A standby's lag after its latest round.
    pub(crate) fn set_standby(&self, partition: i32, lag: i64) {
        if let Ok(mut all) = self.standbys.write() {
            all.insert(partition, lag);
        }
    }

    /// Keeps only these partitions' standby series.
    pub(crate) fn retain_standbys(&self, keep: &std::collections::BTreeSet<i32>) {
        if let Ok(mut all) = self.standbys.write() {
            all.retain(|partition, _| keep.contains(partition));
        }
    }

    /// The standbys this member keeps, with their lag in changelog records.
    pub fn standbys(&self) -> Vec<(i32, i64)> {
        self.standbys
            .read()
            .map(|all| all.iter().map(|(p, lag)| (*p, *lag)).collect())
            .unwrap_or_default()
    }

    pub(crate) fn set_input_partitions(&self, partitions: u32) {
        self.input_partitions.store(partitions, Ordering::Relaxed);
    }

    /// Partitions of the input topic (0 until connected).
    pub(crate) fn input_partitions(&self) -> u32 {
        self.input_partitions.load(Ordering::Relaxed)
    }

    pub(crate) fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// Called by the poll loop on every turn.
    pub(crate) fn poll_turned(&self) {
        self.poll_turned_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// How long ago the poll loop last turned.
    pub(crate) fn since_poll(&self) -> Duration {
        self.started.elapsed().saturating_sub(Duration::from_millis(
            self.poll_turned_ms.load(Ordering::Relaxed),
        ))
    }

    pub(crate) fn set_rate(&self, per_second: f64) {
        self.rate_bits
            .store(per_second.to_bits(), Ordering::Relaxed);
    }

    /// Records decided per second, over the last few seconds.
    pub fn rate(&self) -> f64 {
        f64::from_bits(self.rate_bits.load(Ordering::Relaxed))
    }

    /// Observes the completion time of applied events whose write-out was
    /// just made durable, `now_ms` being the flush's end.
    pub(crate) fn complete(&self, occurred_at_ms: &[i64], now_ms: i64) {
        self.completion.observe_all(
            occurred_at_ms
                .iter()
                .map(|at| (now_ms - at).max(0) as f64 / 1000.0),
        );
    }
}
