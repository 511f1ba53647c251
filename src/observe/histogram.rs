//! A fixed-bucket histogram of atomics: observed from the hot path without a
//! lock, exported as a Prometheus histogram, and read back for percentiles
//! (the status page, the run report).

use std::sync::atomic::{AtomicU64, Ordering};

/// Bucket upper bounds, seconds, for durations inside the pipeline (a batch,
/// a write-out, a flush, a commit): 0.25 ms to about 2 minutes, each 1.5x
/// the last, so a percentile read back is within 25% of the truth.
pub(crate) fn duration_bounds() -> Vec<f64> {
    (0..33).map(|i| 0.000_25 * 1.5f64.powi(i)).collect()
}

/// Bucket upper bounds, seconds, for completion time (event time to
/// durable): 5 ms to about a week, each twice the last (the event's clock
/// is the producer's, and replays and restores complete old events).
pub(crate) fn completion_bounds() -> Vec<f64> {
    (0..27).map(|i| 0.005 * 2f64.powi(i)).collect()
}

/// Bucket upper bounds for records per batch: 1 to 65,536, powers of two.
pub(crate) fn count_bounds() -> Vec<f64> {
    (0..17).map(|i| 2f64.powi(i)).collect()
}

#[derive(Debug)]
pub struct Histogram {
    bounds: Vec<f64>,
    /// One per bound, plus the +Inf bucket; not cumulative.
    counts: Vec<AtomicU64>,
    /// The sum of observations, in millionths (of a second, of a record).
    sum_micros: AtomicU64,
}

/// A histogram read at one instant.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub count: u64,
    pub sum: f64,
    /// (upper bound, cumulative count), the last bound `+Inf`.
    pub(crate) buckets: Vec<(f64, u64)>,
}

impl Histogram {
    pub fn new(bounds: Vec<f64>) -> Self {
        debug_assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "bucket bounds must increase"
        );
        let counts = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Histogram {
            bounds,
            counts,
            sum_micros: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, value: f64) {
        self.observe_n(value, 1);
    }

    /// Observes `value` `n` times.
    pub(crate) fn observe_n(&self, value: f64, n: u64) {
        let value = if value.is_finite() {
            value.max(0.0)
        } else {
            0.0
        };
        let bucket = self.bounds.partition_point(|bound| *bound < value);
        self.counts[bucket].fetch_add(n, Ordering::Relaxed);
        self.sum_micros
            .fetch_add((value * 1e6).round() as u64 * n, Ordering::Relaxed);
    }

    /// Observes many values with one atomic add per bucket they fall in.
    pub(crate) fn observe_all(&self, values: impl Iterator<Item = f64>) {
        let mut local = vec![0u64; self.counts.len()];
        let mut sum = 0u64;
        for value in values {
            let value = if value.is_finite() {
                value.max(0.0)
            } else {
                0.0
            };
            local[self.bounds.partition_point(|bound| *bound < value)] += 1;
            sum += (value * 1e6).round() as u64;
        }
        for (slot, n) in self.counts.iter().zip(local) {
            if n > 0 {
                slot.fetch_add(n, Ordering::Relaxed);
            }
        }
        self.sum_micros.fetch_add(sum, Ordering::Relaxed);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    pub fn snapshot(&self) -> Snapshot {
        let mut running = 0;
        let mut buckets = Vec::with_capacity(self.counts.len());
        for (i, count) in self.counts.iter().enumerate() {
            running += count.load(Ordering::Relaxed);
            buckets.push((
                self.bounds.get(i).copied().unwrap_or(f64::INFINITY),
                running,
            ));
        }
        Snapshot {
            count: running,
            sum: self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6,
            buckets,
        }
    }
}

impl Snapshot {
    /// The `q` quantile (0..=1), interpolated linearly inside its bucket as
    /// Prometheus's `histogram_quantile` does; the highest finite bound when
    /// it falls in the +Inf bucket. `None` without observations.
    pub(crate) fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = q.clamp(0.0, 1.0) * self.count as f64;
        let mut lower = (0.0, 0u64);
        for &(bound, cumulative) in &self.buckets {
            if cumulative as f64 >= rank && cumulative > lower.1 {
                if bound.is_infinite() {
                    return Some(lower.0);
                }
                let within = (rank - lower.1 as f64) / (cumulative - lower.1) as f64;
                return Some(lower.0 + (bound - lower.0) * within.clamp(0.0, 1.0));
            }
            lower = (bound, cumulative);
        }
        Some(lower.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_count_everything() {
        let h = Histogram::new(vec![1.0, 2.0, 4.0]);
        for v in [0.5, 1.0, 1.5, 3.0, 100.0, f64::NAN, -1.0] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.count, 7);
        // NaN and negatives count as 0; a value equal to a bound is in it.
        assert_eq!(
            s.buckets,
            vec![(1.0, 4), (2.0, 5), (4.0, 6), (f64::INFINITY, 7)]
        );
        assert!((s.sum - 106.0).abs() < 1e-9);
    }

    #[test]
    fn quantiles_interpolate_inside_a_bucket() {
        let h = Histogram::new(vec![1.0, 2.0]);
        h.observe_n(1.5, 100);
        let s = h.snapshot();
        assert_eq!(s.quantile(0.5), Some(1.5));
        assert_eq!(s.quantile(1.0), Some(2.0));
        assert_eq!(Histogram::new(vec![1.0]).snapshot().quantile(0.5), None);
        h.observe_n(10.0, 1000);
        assert_eq!(
            h.snapshot().quantile(0.99),
            Some(2.0),
            "the +Inf bucket reads as the highest bound"
        );
    }

    #[test]
    fn duration_percentiles_are_within_a_quarter() {
        let h = Histogram::new(duration_bounds());
        for ms in 1..=1000 {
            h.observe(ms as f64 / 1000.0);
        }
        let p50 = h.snapshot().quantile(0.5).unwrap_or_default();
        assert!((p50 - 0.5).abs() / 0.5 < 0.25, "p50 {p50}");
    }
}
