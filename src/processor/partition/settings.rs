//! What a partition task reads from the configuration, taken once when the
//! supervisor starts: the task's phases receive these settings, not the
//! whole `Config`.

use std::time::Duration;

use super::strategy::Strategy;
use crate::config::Config;
use crate::engine::breaker::Limits;

/// One partition task's settings.
#[derive(Debug, Clone)]
pub(crate) struct TaskSettings {
    /// A batch closes at this many records ...
    pub batch_max_records: usize,
    /// ... or this long after its first record.
    pub batch_max_wait: Duration,
    /// The longest time between two write-outs of unwritten work.
    pub commit_interval: Duration,
    /// Caught up with its input, a task writes out this soon after its last
    /// write-out (never later than the commit interval); `None`: off.
    pub caught_up_write: Option<Duration>,
    /// The group's session timeout: a task that did not run for longer may
    /// have lost its partition (pause detection), and the grace a fenced
    /// task gives the group to move its partition.
    pub session_timeout: Duration,
    /// A drain's deadline; the outbox relay gets half of it.
    pub shutdown_timeout: Duration,
    /// The dead-letter breaker's limits.
    pub breaker: Limits,
    /// How write-outs reach Kafka: guarantee, changelog and status
    /// delivery, chosen once.
    pub strategy: Strategy,
}

impl TaskSettings {
    pub(crate) fn of(config: &Config) -> Self {
        let processing = &config.processing;
        let commit_interval = Duration::from_millis(processing.commit_interval_ms);
        TaskSettings {
            batch_max_records: processing.batch_max_records,
            batch_max_wait: Duration::from_millis(processing.batch_max_wait_ms),
            commit_interval,
            caught_up_write: (processing.caught_up_write_ms > 0)
                .then(|| Duration::from_millis(processing.caught_up_write_ms).min(commit_interval)),
            session_timeout: Duration::from_millis(config.kafka.session_timeout_ms),
            shutdown_timeout: Duration::from_millis(processing.shutdown_timeout_ms),
            // The limits `processing.dead_letter_*` set.
            breaker: Limits {
                max_consecutive: processing.dead_letter_max_consecutive,
                max_ratio: processing.dead_letter_max_ratio,
                window: processing.dead_letter_ratio_window,
            },
            strategy: Strategy::of(config),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_caught_up_write_is_off_at_zero_and_never_later_than_the_commit_interval() {
        let mut config = Config::defaults().unwrap();
        config.processing.commit_interval_ms = 1_000;
        config.processing.caught_up_write_ms = 0;
        assert_eq!(TaskSettings::of(&config).caught_up_write, None);
        config.processing.caught_up_write_ms = 5_000;
        let settings = TaskSettings::of(&config);
        assert_eq!(settings.caught_up_write, Some(Duration::from_secs(1)));
        assert_eq!(settings.commit_interval, Duration::from_secs(1));
        config.processing.caught_up_write_ms = 100;
        assert_eq!(
            TaskSettings::of(&config).caught_up_write,
            Some(Duration::from_millis(100))
        );
    }
}
