//! When a partition task writes out: once per commit interval, sooner when
//! its changed orders pass their memory share or soon after the last
//! write-out once it has read everything its input holds, and never during
//! the hold after a pause (without a changelog). Pure: the caller passes
//! the time, so every rule is unit-tested without a clock or a cluster.
//! A due write-out may also be put off for a while when the process's
//! write-out turns are taken (`processing.concurrent_write_outs`).

use std::time::Duration;

use tokio::time::Instant;

/// The schedule's settings.
#[derive(Debug, Clone, Copy)]
pub(super) struct Settings {
    /// `processing.commit_interval_ms`.
    pub interval: Duration,
    /// `processing.caught_up_write_ms` (at most the interval); `None`: off.
    pub caught_up_after: Option<Duration>,
    /// `kafka.session_timeout_ms`: a task that did not run for longer may
    /// have been presumed dead.
    pub session: Duration,
    /// How long write-outs are held after such a pause.
    pub pause_hold: Duration,
    /// Whether pauses hold write-outs: without a changelog (with one, the
    /// transaction's fencing covers a member presumed dead).
    pub hold_pauses: bool,
}

/// What the time since the task last ran says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wake {
    /// Nothing unusual.
    Ran,
    /// Longer than the session timeout, but spent waiting on the schema
    /// registry (the poll thread kept the membership): not a pause.
    WaitedOnRegistry(Duration),
    /// The task did not run for longer than the session timeout (the
    /// process was paused); `held`: write-outs are held from now.
    Paused { asleep: Duration, held: bool },
}

/// The write-out schedule of one partition task.
#[derive(Debug)]
pub(super) struct WriteSchedule {
    settings: Settings,
    last_write: Instant,
    last_wake: Instant,
    hold_until: Instant,
}

impl WriteSchedule {
    pub(super) fn new(settings: Settings, now: Instant) -> Self {
        WriteSchedule {
            settings,
            last_write: now,
            last_wake: now,
            hold_until: now,
        }
    }

    /// The task runs again at `now`, having spent `on_registry` of the time
    /// since it last ran waiting on the schema registry.
    pub(super) fn woke(&mut self, now: Instant, on_registry: Duration) -> Wake {
        let asleep = now.saturating_duration_since(self.last_wake);
        self.last_wake = now;
        let session = self.settings.session;
        if asleep <= session {
            return Wake::Ran;
        }
        let paused = asleep.saturating_sub(on_registry);
        if paused <= session {
            return Wake::WaitedOnRegistry(on_registry);
        }
        if self.settings.hold_pauses {
            self.hold_until = now + self.settings.pause_hold;
        }
        Wake::Paused {
            asleep: paused,
            held: self.settings.hold_pauses,
        }
    }

    /// When the next write-out is due while the task waits for records:
    /// `None` when nothing is unwritten. `caught_up` is asked only when it
    /// matters (it reads the consumer's fetch state).
    pub(super) fn due(&self, unwritten: bool, caught_up: impl FnOnce() -> bool) -> Option<Instant> {
        if !unwritten {
            return None;
        }
        let mut due = (self.last_write + self.settings.interval).max(self.hold_until);
        if let Some(after) = self.settings.caught_up_after {
            if caught_up() {
                due = due.min((self.last_write + after).max(self.hold_until));
            }
        }
        Some(due)
    }

    /// After a batch was decided, at `now`: whether to write out now.
    /// `over_share`: the changed orders passed their memory share.
    pub(super) fn write_now(
        &self,
        now: Instant,
        unwritten: bool,
        over_share: bool,
        caught_up: impl FnOnce() -> bool,
    ) -> bool {
        if now < self.hold_until || !unwritten {
            return false;
        }
        now >= self.last_write + self.settings.interval
            || over_share
            || self
                .settings
                .caught_up_after
                .is_some_and(|after| now >= self.last_write + after && caught_up())
    }

    /// Whether a due write-out may be put off while the process's
    /// write-out turns are all taken (by other partitions' write-outs):
    /// only while input is waiting (`more_input`: the last batch was full),
    /// the changed orders are within their memory share (`over_share`
    /// false) and the last write-out is less than two intervals ago.
    /// Otherwise the task waits for a turn. Putting it off keeps the task
    /// deciding records instead of idling behind another write-out.
    pub(super) fn may_put_off(&self, now: Instant, more_input: bool, over_share: bool) -> bool {
        more_input && !over_share && now < self.last_write + self.settings.interval * 2
    }

    /// A write-out was made at `now`.
    pub(super) fn written(&mut self, now: Instant) {
        self.last_write = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn settings(hold_pauses: bool) -> Settings {
        Settings {
            interval: 1_000 * MS,
            caught_up_after: Some(100 * MS),
            session: 6_000 * MS,
            pause_hold: 3_000 * MS,
            hold_pauses,
        }
    }

    #[test]
    fn nothing_unwritten_is_never_due() {
        let t0 = Instant::now();
        let schedule = WriteSchedule::new(settings(false), t0);
        assert_eq!(schedule.due(false, || true), None);
        assert!(!schedule.write_now(t0 + 5_000 * MS, false, true, || true));
    }

    #[test]
    fn a_write_out_is_due_once_per_interval() {
        let t0 = Instant::now();
        let mut schedule = WriteSchedule::new(settings(false), t0);
        assert_eq!(schedule.due(true, || false), Some(t0 + 1_000 * MS));
        assert!(!schedule.write_now(t0 + 999 * MS, true, false, || false));
        assert!(schedule.write_now(t0 + 1_000 * MS, true, false, || false));
        schedule.written(t0 + 1_000 * MS);
        assert_eq!(schedule.due(true, || false), Some(t0 + 2_000 * MS));
    }

    #[test]
    fn caught_up_brings_it_forward_and_off_keeps_the_interval() {
        let t0 = Instant::now();
        let schedule = WriteSchedule::new(settings(false), t0);
        assert_eq!(schedule.due(true, || true), Some(t0 + 100 * MS));
        assert!(schedule.write_now(t0 + 100 * MS, true, false, || true));
        assert!(!schedule.write_now(t0 + 99 * MS, true, false, || true));
        let off = WriteSchedule::new(
            Settings {
                caught_up_after: None,
                ..settings(false)
            },
            t0,
        );
        assert_eq!(off.due(true, || true), Some(t0 + 1_000 * MS));
        assert!(!off.write_now(t0 + 100 * MS, true, false, || true));
    }

    #[test]
    fn caught_up_is_asked_only_when_it_matters() {
        let t0 = Instant::now();
        let schedule = WriteSchedule::new(
            Settings {
                caught_up_after: None,
                ..settings(false)
            },
            t0,
        );
        let _ = schedule.due(true, || panic!("asked without caught_up_write_ms"));
        let _ = schedule.write_now(t0, true, false, || {
            panic!("asked without caught_up_write_ms")
        });
        let on = WriteSchedule::new(settings(false), t0);
        let _ = on.due(false, || panic!("asked with nothing unwritten"));
    }

    #[test]
    fn a_due_write_out_is_put_off_only_with_input_waiting_and_within_bounds() {
        let t0 = Instant::now();
        let mut schedule = WriteSchedule::new(settings(false), t0);
        // Input waiting, within the share, within two intervals.
        assert!(schedule.may_put_off(t0 + 1_000 * MS, true, false));
        assert!(schedule.may_put_off(t0 + 1_999 * MS, true, false));
        // Nothing waiting: the task would idle, so it waits for the turn.
        assert!(!schedule.may_put_off(t0 + 1_000 * MS, false, false));
        // Over the share: the cache's budget holds.
        assert!(!schedule.may_put_off(t0 + 1_000 * MS, true, true));
        // Two intervals since the last write-out.
        assert!(!schedule.may_put_off(t0 + 2_000 * MS, true, false));
        schedule.written(t0 + 2_000 * MS);
        assert!(schedule.may_put_off(t0 + 3_000 * MS, true, false));
    }

    #[test]
    fn over_the_memory_share_writes_out_before_the_interval() {
        let t0 = Instant::now();
        let schedule = WriteSchedule::new(settings(false), t0);
        assert!(schedule.write_now(t0 + MS, true, true, || false));
    }

    #[test]
    fn a_pause_without_a_changelog_holds_write_outs() {
        let t0 = Instant::now();
        let mut schedule = WriteSchedule::new(settings(true), t0);
        let woke = t0 + 8_000 * MS;
        assert_eq!(
            schedule.woke(woke, Duration::ZERO),
            Wake::Paused {
                asleep: 8_000 * MS,
                held: true
            }
        );
        // Overdue by the interval, over the share, caught up: held anyway.
        assert!(!schedule.write_now(woke + 2_999 * MS, true, true, || true));
        assert_eq!(schedule.due(true, || true), Some(woke + 3_000 * MS));
        assert!(schedule.write_now(woke + 3_000 * MS, true, false, || false));
    }

    #[test]
    fn a_pause_with_a_changelog_holds_nothing() {
        let t0 = Instant::now();
        let mut schedule = WriteSchedule::new(settings(false), t0);
        let woke = t0 + 8_000 * MS;
        assert_eq!(
            schedule.woke(woke, Duration::ZERO),
            Wake::Paused {
                asleep: 8_000 * MS,
                held: false
            }
        );
        assert!(schedule.write_now(woke, true, false, || false));
    }

    #[test]
    fn time_waiting_on_the_registry_is_not_a_pause() {
        let t0 = Instant::now();
        let mut schedule = WriteSchedule::new(settings(true), t0);
        let woke = t0 + 9_000 * MS;
        assert_eq!(
            schedule.woke(woke, 7_000 * MS),
            Wake::WaitedOnRegistry(7_000 * MS)
        );
        assert!(schedule.write_now(woke, true, false, || false));
        // Short gaps are nothing, whatever the registry did.
        assert_eq!(schedule.woke(woke + 500 * MS, 400 * MS), Wake::Ran);
        // A pause longer than the session even after the registry's share.
        assert_eq!(
            schedule.woke(woke + 15_000 * MS, 1_000 * MS),
            Wake::Paused {
                asleep: 13_500 * MS,
                held: true
            }
        );
    }
}
