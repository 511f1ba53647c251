//! Watching a contender from the outside: its CPU and memory samples, the
//! group's committed offsets polled until they cover the input, and the
//! steady middle between 25% and 75% of it.

use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::bail;
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::measure::{pid_status_kib, process_cpu};

use super::setup::offsets_reader;
use super::Ctx;

#[derive(Clone, Copy, Default)]
pub(super) struct Sample {
    pub(super) cpu: f64,
    pub(super) hwm_kib: u64,
}

pub(super) fn sample(pid: u32) -> Option<Sample> {
    Some(Sample {
        cpu: process_cpu(Some(pid))?,
        hwm_kib: pid_status_kib(pid, "VmHWM")?,
    })
}

/// What the watcher saw when the committed offsets covered the input.
pub(super) struct Covered {
    pub(super) at: Duration,
    pub(super) sample: Sample,
    pub(super) broker_cpu: Option<f64>,
    pub(super) middle: Option<Middle>,
}

/// The steady middle of a run: from the first poll that saw at least
/// `MIDDLE.0` of the input's offsets committed to the first that saw
/// `MIDDLE.1`. Both ends are commits the poll saw land, so the rate between
/// them is the contender's own, without its start-up or its last commit.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Middle {
    pub from_seconds: f64,
    pub to_seconds: f64,
    /// Committed offsets at each end, as a share of the input's.
    pub from_share: f64,
    pub to_share: f64,
    /// The input's records between the two ends.
    pub events: f64,
    /// The contender's CPU (utime + stime) between the two ends.
    pub cpu_seconds: f64,
    pub broker_cpu_seconds: Option<f64>,
}

/// The share of the input's offsets that bounds the steady middle.
pub(super) const MIDDLE: (f64, f64) = (0.25, 0.75);

/// Polls that saw the committed offsets move, after the middle's first
/// and up to its last, below which there is no middle: over fewer, the
/// rate is that of one or two commits landing (a contender that writes
/// out once a second per partition covers half of a 2 s run in one or
/// two), not a steady one. A run of 1M events is that short for orderly.
pub(super) const MIDDLE_MIN_STEPS: usize = 4;

/// One poll that saw the committed offsets move.
#[derive(Clone, Copy)]
pub(super) struct Progress {
    pub(super) at: Duration,
    pub(super) committed: i64,
    pub(super) cpu: f64,
    pub(super) broker_cpu: Option<f64>,
}

/// The steady middle of `seen` (polls that saw progress, in time order)
/// for an input of `total` offsets holding `events` records; None when
/// fewer than [`MIDDLE_MIN_STEPS`] commits landed in it.
pub(super) fn middle_of(seen: &[Progress], total: i64, events: u64) -> Option<Middle> {
    if total <= 0 {
        return None;
    }
    let share = |p: &Progress| p.committed as f64 / total as f64;
    let first = seen.iter().position(|p| share(p) >= MIDDLE.0)?;
    let last = seen.iter().position(|p| share(p) >= MIDDLE.1)?;
    let (from, to) = (&seen[first], &seen[last]);
    if to.committed <= from.committed || to.at <= from.at {
        return None;
    }
    // Each of `seen` saw the offsets move.
    if last - first < MIDDLE_MIN_STEPS {
        return None;
    }
    let per_offset = events as f64 / total as f64;
    Some(Middle {
        from_seconds: from.at.as_secs_f64(),
        to_seconds: to.at.as_secs_f64(),
        from_share: share(from),
        to_share: share(to),
        events: (to.committed - from.committed) as f64 * per_offset,
        cpu_seconds: to.cpu - from.cpu,
        broker_cpu_seconds: to.broker_cpu.zip(from.broker_cpu).map(|(t, f)| t - f),
    })
}

impl Middle {
    pub fn events_per_s(&self) -> f64 {
        self.events / (self.to_seconds - self.from_seconds).max(1e-9)
    }
    pub fn cpu_seconds_per_million(&self) -> f64 {
        self.cpu_seconds / (self.events / 1e6).max(1e-9)
    }
    pub fn broker_cpu_seconds_per_million(&self) -> Option<f64> {
        self.broker_cpu_seconds
            .map(|c| c / (self.events / 1e6).max(1e-9))
    }
}

/// Polls `group`'s committed offsets every 50 ms until they equal the
/// input's end offsets, sampling the child meanwhile.
pub(super) fn watch(
    ctx: &Ctx<'_>,
    child: &mut Child,
    group: &str,
    started: Instant,
    what: &str,
) -> anyhow::Result<Covered> {
    let pid = child.id();
    let consumer = offsets_reader(&ctx.load.bootstrap, group)?;
    let mut tpl = TopicPartitionList::new();
    for p in ctx.load.ends.keys() {
        tpl.add_partition(&ctx.load.topic, *p);
    }
    let mut last = Sample::default();
    let mut errors = 0u32;
    let total: i64 = ctx.load.ends.values().sum();
    let mut seen: Vec<Progress> = Vec::new();
    loop {
        if let Some(status) = child.try_wait()? {
            bail!("{what} (pid {pid}) exited ({status}) before its group's committed offsets covered the input");
        }
        if let Some(s) = sample(pid) {
            last = s;
        }
        match consumer.committed_offsets(tpl.clone(), Duration::from_secs(5)) {
            Ok(committed) => {
                let at = started.elapsed();
                let offset = |p: i32| match committed
                    .find_partition(&ctx.load.topic, p)
                    .map(|e| e.offset())
                {
                    Some(Offset::Offset(o)) => o,
                    _ => 0,
                };
                let sum: i64 = ctx
                    .load
                    .ends
                    .iter()
                    .map(|(p, end)| offset(*p).min(*end))
                    .sum();
                if seen.last().map(|p| p.committed) != Some(sum) {
                    if let Some(s) = sample(pid) {
                        last = s;
                    }
                    seen.push(Progress {
                        at,
                        committed: sum,
                        cpu: last.cpu,
                        broker_cpu: ctx.broker_pid.and_then(|b| process_cpu(Some(b))),
                    });
                }
                let all = ctx
                    .load
                    .ends
                    .iter()
                    .all(|(p, end)| *end == 0 || offset(*p) >= *end);
                if all {
                    let broker_cpu = ctx.broker_pid.and_then(|b| process_cpu(Some(b)));
                    if let Some(s) = sample(pid) {
                        last = s;
                    }
                    return Ok(Covered {
                        at,
                        sample: last,
                        broker_cpu,
                        middle: middle_of(&seen, total, ctx.load.total_events()),
                    });
                }
            }
            Err(e) => {
                errors += 1;
                if errors <= 3 {
                    eprintln!("pipeline: {what}: committed offsets of {group}: {e}");
                }
            }
        }
        if started.elapsed() > ctx.timeout {
            let _ = child.kill();
            bail!(
                "{what}: its group's committed offsets did not cover the input within {:?}",
                ctx.timeout
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
