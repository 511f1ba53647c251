//! How far a partition's restore from the changelog has come, and an
//! estimate of the time it still takes: written by the restore (a blocking
//! thread) with atomics, read by `/readyz`, the status page, the metrics and
//! the restore's own progress lines, which all say it the same way
//! ([`RestoreView::describe`]).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use crate::observe::vocabulary::UNKNOWN;

/// One partition's restore progress: `UNKNOWN` (-1) counts while it does not
/// restore.
#[derive(Debug)]
pub struct RestoreProgress {
    /// Changelog records the restore reads in all.
    total: AtomicI64,
    /// Changelog records still to read.
    remaining: AtomicI64,
    /// When the restore began reading, in milliseconds after `origin`.
    began_ms: AtomicI64,
    origin: Instant,
}

impl Default for RestoreProgress {
    fn default() -> Self {
        RestoreProgress {
            total: AtomicI64::new(UNKNOWN),
            remaining: AtomicI64::new(UNKNOWN),
            began_ms: AtomicI64::new(UNKNOWN),
            origin: Instant::now(),
        }
    }
}

impl RestoreProgress {
    /// The restore starts reading `total` changelog records now.
    pub(crate) fn begin(&self, total: i64) {
        let now = self.origin.elapsed().as_millis() as i64;
        self.remaining.store(total, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
        self.began_ms.store(now, Ordering::Relaxed);
    }

    /// `remaining` changelog records are still to read.
    pub(crate) fn advance(&self, remaining: i64) {
        self.remaining.store(remaining, Ordering::Relaxed);
    }

    /// The restore ended (finished, failed or cancelled).
    pub(crate) fn end(&self) {
        self.total.store(UNKNOWN, Ordering::Relaxed);
        self.remaining.store(UNKNOWN, Ordering::Relaxed);
        self.began_ms.store(UNKNOWN, Ordering::Relaxed);
    }

    /// Changelog records still to read; `None` while not reading any.
    pub fn remaining(&self) -> Option<i64> {
        let left = self.remaining.load(Ordering::Relaxed);
        (left >= 0).then_some(left)
    }

    /// The progress now; `None` while the partition does not restore.
    pub fn view(&self) -> Option<RestoreView> {
        let (total, remaining, began) = (
            self.total.load(Ordering::Relaxed),
            self.remaining.load(Ordering::Relaxed),
            self.began_ms.load(Ordering::Relaxed),
        );
        if total < 0 || remaining < 0 || began < 0 {
            return None;
        }
        let now = self.origin.elapsed().as_millis() as i64;
        Some(RestoreView {
            total,
            remaining: remaining.min(total),
            elapsed: Duration::from_millis((now - began).max(0) as u64),
        })
    }
}

/// A restore's progress at one moment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RestoreView {
    /// Changelog records to read in all.
    pub total: i64,
    /// Changelog records still to read.
    pub remaining: i64,
    /// Since the restore began reading.
    pub elapsed: Duration,
}

/// Below this much reading, or this share of the records, the rate so far
/// says too little to estimate from.
const ESTIMATE_AFTER: Duration = Duration::from_millis(500);
const ESTIMATE_AFTER_SHARE: f64 = 0.01;

impl RestoreView {
    /// The share of the records read, 0 to 1 (1 for an empty restore).
    pub fn done(&self) -> f64 {
        if self.total <= 0 {
            return 1.0;
        }
        (self.total - self.remaining) as f64 / self.total as f64
    }

    /// The time the rest of the reading takes at the rate so far; `None`
    /// until enough was read to tell. Zero once everything was read (the
    /// last batch is then being written to the store).
    pub fn time_left(&self) -> Option<Duration> {
        if self.remaining == 0 {
            return Some(Duration::ZERO);
        }
        let done = self.done();
        if self.elapsed < ESTIMATE_AFTER || done < ESTIMATE_AFTER_SHARE {
            return None;
        }
        Some(self.elapsed.mul_f64((1.0 - done) / done))
    }

    /// One phrase for a person: "restoring from the changelog: 40% (60,000
    /// of 100,000 records to go, about 3 s left)".
    pub fn describe(&self) -> String {
        if self.remaining == 0 {
            return format!(
                "restoring from the changelog: all {} records read, writing the last of them to the store",
                grouped(self.total)
            );
        }
        let left = match self.time_left() {
            Some(left) => format!(", about {} left", rounded(left)),
            None => String::new(),
        };
        format!(
            "restoring from the changelog: {:.0}% ({} of {} records to go{left})",
            (self.done() * 100.0).floor(),
            grouped(self.remaining),
            grouped(self.total),
        )
    }
}

/// 1234567 as "1,234,567".
fn grouped(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A duration as a person reads an estimate: "under 1 s", "12 s", "3 min".
fn rounded(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        "under 1 s".into()
    } else if s < 120.0 {
        format!("{} s", s.round() as u64)
    } else {
        format!("{} min", (s / 60.0).round() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(total: i64, remaining: i64, elapsed_ms: u64) -> RestoreView {
        RestoreView {
            total,
            remaining,
            elapsed: Duration::from_millis(elapsed_ms),
        }
    }

    #[test]
    fn the_time_left_is_the_rate_so_far_applied_to_what_is_left() {
        // 40% read in 2 s: 60% takes 3 s more.
        assert_eq!(
            view(100_000, 60_000, 2_000).time_left(),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            view(100_000, 60_000, 2_000).describe(),
            "restoring from the changelog: 40% (60,000 of 100,000 records to go, about 3 s left)"
        );
        assert_eq!(
            view(1_000_000, 100_000, 1_800_000).describe(),
            "restoring from the changelog: 90% (100,000 of 1,000,000 records to go, about 3 min left)"
        );
    }

    #[test]
    fn no_estimate_before_there_is_a_rate_to_go_by() {
        assert_eq!(view(100_000, 100_000, 10_000).time_left(), None);
        assert_eq!(view(100_000, 50_000, 100).time_left(), None);
        assert_eq!(
            view(100_000, 100_000, 10_000).describe(),
            "restoring from the changelog: 0% (100,000 of 100,000 records to go)"
        );
    }

    #[test]
    fn everything_read_means_the_last_batch_is_being_written() {
        assert_eq!(view(5, 0, 0).time_left(), Some(Duration::ZERO));
        assert_eq!(
            view(1234, 0, 3_000).describe(),
            "restoring from the changelog: all 1,234 records read, writing the last of them to the store"
        );
    }

    #[test]
    fn a_progress_is_seen_only_while_a_restore_runs() {
        let progress = RestoreProgress::default();
        assert_eq!(progress.view(), None);
        assert_eq!(progress.remaining(), None);
        progress.begin(10);
        progress.advance(4);
        let seen = progress.view().expect("restoring");
        assert_eq!((seen.total, seen.remaining), (10, 4));
        assert_eq!(progress.remaining(), Some(4));
        progress.end();
        assert_eq!(progress.view(), None);
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1_000), "1,000");
        assert_eq!(grouped(-1_234_567), "-1,234,567");
    }
}
