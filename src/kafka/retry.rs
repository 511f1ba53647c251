//! Exponential backoff with jitter, for every retry loop: a registry
//! outage, a dead letter the broker will not take yet, a relay that cannot
//! publish, an aborted transaction, a failed commit.

use std::time::Duration;

/// Doubles from `initial` up to `max`; each wait is jittered by ±25% so
/// that many partitions retrying together do not hit the broker in step.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
    jitter: bool,
}

impl Backoff {
    pub(crate) fn new(initial: Duration, max: Duration) -> Self {
        Backoff {
            initial,
            max,
            next: initial,
            jitter: true,
        }
    }

    /// Without jitter: waits exactly `initial`, `2 * initial`, ... (tests).
    #[cfg(test)]
    pub(crate) fn exact(initial: Duration, max: Duration) -> Self {
        Backoff {
            jitter: false,
            ..Self::new(initial, max)
        }
    }

    /// The next wait, and doubles the one after it.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        if self.jitter {
            jitter(base)
        } else {
            base
        }
    }

    /// Waits the next wait (tokio).
    pub(crate) async fn sleep(&mut self) {
        tokio::time::sleep(self.next_wait()).await;
    }

    /// Back to `initial`, after a success.
    pub(crate) fn reset(&mut self) {
        self.next = self.initial;
    }
}

/// `base` scaled by a random factor in [0.75, 1.25).
pub(crate) fn jitter(base: Duration) -> Duration {
    let factor = 0.75 + rand::random::<f64>() * 0.5;
    base.mul_f64(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_cap_and_resets() {
        let ms = Duration::from_millis;
        let mut b = Backoff::exact(ms(100), ms(500));
        let waits: Vec<Duration> = (0..5).map(|_| b.next_wait()).collect();
        assert_eq!(waits, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
        b.reset();
        assert_eq!(b.next_wait(), ms(100));
    }

    #[test]
    fn jitter_stays_within_a_quarter() {
        let mut b = Backoff::new(Duration::from_millis(1000), Duration::from_secs(10));
        for _ in 0..100 {
            let wait = b.next_wait();
            b.reset();
            assert!((750..1250).contains(&wait.as_millis()), "{wait:?}");
        }
    }
}
