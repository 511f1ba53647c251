//! The four outcomes of a record, counted: applied, duplicate, stale,
//! dead-lettered. One value type ([`Outcomes`]) for every place that adds
//! them up (a batch, a run, the status page's totals), and one shared,
//! lock-free form ([`AtomicOutcomes`]) for the counters that partition
//! tasks bump and the metrics read. The durable counters live in each
//! partition's checkpoint ([`crate::engine::store::Checkpoint::counts`]).

use std::ops::{Add, AddAssign};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::engine::decide::Decision;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcomes {
    pub applied: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub dead_lettered: u64,
}

impl Outcomes {
    /// Every record counted, whatever its outcome.
    pub fn total(&self) -> u64 {
        self.applied + self.duplicates + self.stale + self.dead_lettered
    }

    /// Counts one decision.
    pub fn count(&mut self, decision: Decision) {
        match decision {
            Decision::Apply => self.applied += 1,
            Decision::Duplicate => self.duplicates += 1,
            Decision::Stale => self.stale += 1,
        }
    }
}

impl Add for Outcomes {
    type Output = Outcomes;

    fn add(self, other: Outcomes) -> Outcomes {
        Outcomes {
            applied: self.applied + other.applied,
            duplicates: self.duplicates + other.duplicates,
            stale: self.stale + other.stale,
            dead_lettered: self.dead_lettered + other.dead_lettered,
        }
    }
}

impl AddAssign for Outcomes {
    fn add_assign(&mut self, other: Outcomes) {
        *self = *self + other;
    }
}

impl std::iter::Sum for Outcomes {
    fn sum<I: Iterator<Item = Outcomes>>(iter: I) -> Outcomes {
        iter.fold(Outcomes::default(), Add::add)
    }
}

/// [`Outcomes`] as shared counters.
#[derive(Debug, Default)]
pub struct AtomicOutcomes {
    pub applied: AtomicU64,
    pub duplicates: AtomicU64,
    pub stale: AtomicU64,
    pub dead_lettered: AtomicU64,
}

impl AtomicOutcomes {
    pub fn add(&self, o: &Outcomes) {
        self.applied.fetch_add(o.applied, Ordering::Relaxed);
        self.duplicates.fetch_add(o.duplicates, Ordering::Relaxed);
        self.stale.fetch_add(o.stale, Ordering::Relaxed);
        self.dead_lettered
            .fetch_add(o.dead_lettered, Ordering::Relaxed);
    }

    pub fn set(&self, o: &Outcomes) {
        self.applied.store(o.applied, Ordering::Relaxed);
        self.duplicates.store(o.duplicates, Ordering::Relaxed);
        self.stale.store(o.stale, Ordering::Relaxed);
        self.dead_lettered.store(o.dead_lettered, Ordering::Relaxed);
    }

    pub fn load(&self) -> Outcomes {
        Outcomes {
            applied: self.applied.load(Ordering::Relaxed),
            duplicates: self.duplicates.load(Ordering::Relaxed),
            stale: self.stale.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_add_up() {
        let mut a = Outcomes::default();
        for d in [
            Decision::Apply,
            Decision::Apply,
            Decision::Duplicate,
            Decision::Stale,
        ] {
            a.count(d);
        }
        let b = Outcomes {
            dead_lettered: 2,
            ..Outcomes::default()
        };
        assert_eq!(
            a + b,
            Outcomes {
                applied: 2,
                duplicates: 1,
                stale: 1,
                dead_lettered: 2
            }
        );
        assert_eq!([a, b].into_iter().sum::<Outcomes>().total(), 6);
        let shared = AtomicOutcomes::default();
        shared.add(&a);
        shared.add(&b);
        assert_eq!(shared.load(), a + b);
        shared.set(&b);
        assert_eq!(shared.load(), b);
    }
}
