//! When `run` writes its progress lines: every [`BUSY_EVERY`] while
//! anything moves (records processed, partitions restoring, status changes
//! waiting), and while nothing does, one line when it goes quiet and then
//! one every [`QUIET_EVERY`], so an idle instance does not fill its log
//! with the same numbers. Pure: the caller passes the clock.

use std::time::{Duration, Instant};

/// How often the progress lines come while anything moves.
pub(crate) const BUSY_EVERY: Duration = Duration::from_secs(10);
/// How often they come while nothing does.
pub(crate) const QUIET_EVERY: Duration = Duration::from_secs(300);

/// The progress lines' schedule.
#[derive(Debug)]
pub(crate) struct Cadence {
    /// When the last interval began.
    interval_began: Instant,
    /// When the last line was written while quiet (`None`: not quiet, or
    /// quiet with no line yet).
    quiet_line: Option<Instant>,
}

/// What to do at the end of an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Due {
    /// Not yet the end of an interval.
    Not,
    /// Write the lines (something moved, or the first or a periodic quiet
    /// line), over an interval of this length.
    Write(Duration),
    /// An interval in which nothing moved, already said: no line.
    Quiet,
}

impl Cadence {
    pub(crate) fn new(now: Instant) -> Self {
        Cadence {
            interval_began: now,
            quiet_line: None,
        }
    }

    /// Called often; `moved` says whether anything moved since the
    /// interval began (asked only at an interval's end).
    pub(crate) fn due(&mut self, now: Instant, moved: impl FnOnce() -> bool) -> Due {
        let interval = now.saturating_duration_since(self.interval_began);
        if interval < BUSY_EVERY {
            return Due::Not;
        }
        self.interval_began = now;
        if moved() {
            self.quiet_line = None;
            return Due::Write(interval);
        }
        match self.quiet_line {
            Some(said) if now.saturating_duration_since(said) < QUIET_EVERY => Due::Quiet,
            _ => {
                self.quiet_line = Some(now);
                Due::Write(interval)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_every_ten_seconds_quiet_once_then_every_five_minutes() {
        let start = Instant::now();
        let at = |s: u64| start + Duration::from_secs(s);
        let mut cadence = Cadence::new(start);
        assert_eq!(cadence.due(at(5), || true), Due::Not);
        assert_eq!(
            cadence.due(at(10), || true),
            Due::Write(Duration::from_secs(10))
        );
        assert_eq!(cadence.due(at(15), || true), Due::Not);
        // Goes quiet: the first quiet interval is said, the next are not.
        assert_eq!(
            cadence.due(at(20), || false),
            Due::Write(Duration::from_secs(10))
        );
        for s in (30..320).step_by(10) {
            assert_eq!(cadence.due(at(s), || false), Due::Quiet, "at {s} s");
        }
        // Five minutes after the last quiet line, one more.
        assert_eq!(
            cadence.due(at(320), || false),
            Due::Write(Duration::from_secs(10))
        );
        assert_eq!(cadence.due(at(330), || false), Due::Quiet);
        // Moving again: every interval is written, and a later quiet spell
        // is said at once.
        assert_eq!(
            cadence.due(at(340), || true),
            Due::Write(Duration::from_secs(10))
        );
        assert_eq!(
            cadence.due(at(350), || false),
            Due::Write(Duration::from_secs(10))
        );
        assert_eq!(cadence.due(at(360), || false), Due::Quiet);
    }

    #[test]
    fn an_interval_that_is_late_reports_its_real_length() {
        let start = Instant::now();
        let mut cadence = Cadence::new(start);
        assert_eq!(
            cadence.due(start + Duration::from_secs(13), || true),
            Due::Write(Duration::from_secs(13))
        );
    }
}
