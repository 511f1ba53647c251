//! The dead-letter breaker: when a partition dead-letters too many of its
//! records (a bad deploy of a producer, a registry serving the wrong
//! schemas), it stops that partition with a clear error instead of
//! dead-lettering everything, as Sentry's arroyo does with its DLQ limit.
//! Pure: the partition task feeds it each batch's outcome before anything
//! of the batch is sent or written.

use std::fmt;

/// The limits, from `[processing]` (0 turns a limit off).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Limits {
    /// Dead letters in a row that trip the breaker.
    pub(crate) max_consecutive: u64,
    /// The share of dead letters among `window` records that trips it (in
    /// `(0, 1]`; 0 is off).
    pub(crate) max_ratio: f64,
    /// The records of one ratio window, counted from the partition's
    /// assignment in windows one after the other.
    pub window: u64,
}

/// Why the breaker tripped.
#[derive(Debug, Clone, PartialEq)]
pub enum Trip {
    /// `count` dead letters in a row.
    Consecutive { count: u64, limit: u64 },
    /// `dead` of the last `window` records were dead letters.
    Ratio { dead: u64, window: u64, limit: f64 },
}

impl fmt::Display for Trip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trip::Consecutive { count, limit } => write!(
                f,
                "{count} records in a row were dead-lettered (processing.dead_letter_max_consecutive = {limit})"
            ),
            Trip::Ratio { dead, window, limit } => write!(
                f,
                "{dead} of the last {window} records were dead-lettered, more than {:.0}% \
                 (processing.dead_letter_max_ratio = {limit})",
                limit * 100.0
            ),
        }
    }
}

/// One partition's breaker.
#[derive(Debug, Clone)]
pub(crate) struct Breaker {
    limits: Limits,
    consecutive: u64,
    in_window: u64,
    dead_in_window: u64,
}

impl Breaker {
    pub(crate) fn new(limits: Limits) -> Self {
        Breaker {
            limits,
            consecutive: 0,
            in_window: 0,
            dead_in_window: 0,
        }
    }

    /// Feeds one batch's records in order (`true`: dead-lettered) and
    /// returns the first trip among them. A tripped breaker's batch is
    /// neither dead-lettered nor decided: nothing moves past it. A batch
    /// that does not trip it is taken into its counts.
    pub(crate) fn observe(&mut self, dead: impl IntoIterator<Item = bool>) -> Option<Trip> {
        let mut next = self.clone();
        for is_dead in dead {
            if let Some(trip) = next.one(is_dead) {
                return Some(trip);
            }
        }
        *self = next;
        None
    }

    fn one(&mut self, dead: bool) -> Option<Trip> {
        let Limits {
            max_consecutive,
            max_ratio,
            window,
        } = self.limits;
        self.consecutive = if dead { self.consecutive + 1 } else { 0 };
        if max_consecutive > 0 && self.consecutive >= max_consecutive {
            return Some(Trip::Consecutive {
                count: self.consecutive,
                limit: max_consecutive,
            });
        }
        if max_ratio > 0.0 && window > 0 {
            self.in_window += 1;
            self.dead_in_window += u64::from(dead);
            if self.in_window >= window {
                let dead = self.dead_in_window;
                (self.in_window, self.dead_in_window) = (0, 0);
                if dead as f64 > max_ratio * window as f64 {
                    return Some(Trip::Ratio {
                        dead,
                        window,
                        limit: max_ratio,
                    });
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_consecutive: u64, max_ratio: f64, window: u64) -> Limits {
        Limits {
            max_consecutive,
            max_ratio,
            window,
        }
    }

    #[test]
    fn consecutive_dead_letters_trip_at_the_limit() {
        let mut b = Breaker::new(limits(3, 0.0, 0));
        assert_eq!(
            b.observe([true, true, false, true, true]),
            None,
            "a good record resets the run"
        );
        assert_eq!(
            b.observe([true]),
            Some(Trip::Consecutive { count: 3, limit: 3 })
        );
    }

    #[test]
    fn a_tripping_batch_leaves_the_counts_as_they_were() {
        let mut b = Breaker::new(limits(3, 0.0, 0));
        assert_eq!(b.observe([true, true]), None);
        assert!(b.observe([true, false]).is_some());
        // The same batch trips again: the records were not taken in.
        assert!(b.observe([true, false]).is_some());
    }

    #[test]
    fn the_ratio_is_judged_per_window() {
        let mut b = Breaker::new(limits(0, 0.5, 4));
        assert_eq!(
            b.observe([true, true, false, false]),
            None,
            "2 of 4 is not more than half"
        );
        assert_eq!(
            b.observe([true, true, true]),
            None,
            "the window is not full yet"
        );
        assert_eq!(
            b.observe([false]),
            Some(Trip::Ratio {
                dead: 3,
                window: 4,
                limit: 0.5
            })
        );
    }

    #[test]
    fn zero_limits_are_off() {
        let mut b = Breaker::new(limits(0, 0.0, 100));
        assert_eq!(b.observe(std::iter::repeat_n(true, 10_000)), None);
    }

    #[test]
    fn trips_say_which_setting_to_look_at() {
        let text = Trip::Ratio {
            dead: 600,
            window: 1000,
            limit: 0.5,
        }
        .to_string();
        assert!(
            text.contains("600 of the last 1000") && text.contains("dead_letter_max_ratio"),
            "{text}"
        );
        let text = Trip::Consecutive {
            count: 1000,
            limit: 1000,
        }
        .to_string();
        assert!(text.contains("dead_letter_max_consecutive"), "{text}");
    }
}
