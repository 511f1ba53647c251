//! The broker connection as the log tells it: one line when it is lost, a
//! reminder every [`REMINDER`] while it stays lost (the bootstrap address
//! tried, the last error, how many client errors were folded into it), one
//! line when it is back. librdkafka's own repeats (every client's "N/N
//! brokers are down", per-broker transport errors, a burst of identical
//! errors) are folded into those lines instead of printed one by one.
//!
//! [`KafkaLogFold`] is a `tracing` layer: it takes the warnings and errors
//! every client's default context logs (targets `librdkafka` and
//! `rdkafka::*`), so producers, readers and admin clients are folded like
//! the processor's consumer, whose context reports through
//! [`client_error`] directly.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;

/// How often a connection that stays lost is logged again.
pub(crate) const REMINDER: Duration = Duration::from_secs(15);

/// How long an identical librdkafka warning is not repeated.
const REPEAT_WINDOW: Duration = Duration::from_secs(60);

/// Distinct repeated texts remembered (a bound on memory, not a limit that
/// matters: past it the memory starts over).
const MAX_REMEMBERED: usize = 256;

/// The hint every "lost" line carries.
const HINT: &str =
    "`orderly config check` tests the bootstrap address, the topics and the registry in seconds";

/// What one client error or log line means for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// No broker reachable (librdkafka's AllBrokersDown, a bootstrap
    /// address that does not resolve or answer).
    AllDown,
    /// One broker's connection failed (a rolling restart, a broker down).
    BrokerDown,
    /// A coordinator not ready yet (a fresh broker loading its internal
    /// topics): librdkafka retries, and it passes within seconds.
    CoordinatorLoading,
    /// Anything else.
    Other,
}

/// How long a coordinator may stay "loading" before it is worth a line.
const COORDINATOR_PATIENCE: Duration = Duration::from_secs(15);

/// Classifies the text of a librdkafka error or log line.
pub(crate) fn classify(text: &str) -> Class {
    const ALL: [&str; 3] = [
        "brokers are down",
        "AllBrokersDown",
        "All broker connections are down",
    ];
    const ONE: [&str; 9] = [
        "BrokerTransportFailure",
        "Broker transport failure",
        "Connection refused",
        "Failed to resolve",
        "Resolve",
        "Disconnected",
        "Connection reset",
        "Connect to ",
        "Host resolution failure",
    ];
    const LOADING: [&str; 6] = [
        "Coordinator load in progress",
        "CoordinatorLoadInProgress",
        "Not coordinator",
        "NotCoordinator",
        "Coordinator not available",
        "CoordinatorNotAvailable",
    ];
    if LOADING.iter().any(|s| text.contains(s)) {
        Class::CoordinatorLoading
    } else if ALL.iter().any(|s| text.contains(s)) {
        Class::AllDown
    } else if ONE.iter().any(|s| text.contains(s)) {
        Class::BrokerDown
    } else {
        Class::Other
    }
}

/// A line the connection's state asks to be logged.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Line {
    /// The first failure: nothing reachable.
    Lost { error: String },
    /// Still lost, `for_` long; `folded` client errors since the last line.
    StillLost {
        for_: Duration,
        folded: u64,
        error: String,
    },
    /// Reachable again after `after`.
    Back { after: Duration, folded: u64 },
}

/// The connection's state, pure: the caller passes the clock.
#[derive(Debug, Default)]
pub(crate) struct Link {
    down: Option<Down>,
}

#[derive(Debug)]
struct Down {
    since: Instant,
    last_line: Instant,
    folded: u64,
    error: String,
}

impl Link {
    /// A failure was seen at `now`. A per-broker failure while some broker
    /// answers is not a lost connection ([`Class::BrokerDown`] is only
    /// folded while the connection is already lost).
    pub(crate) fn trouble(&mut self, now: Instant, class: Class, error: &str) -> Option<Line> {
        match (&mut self.down, class) {
            (None, Class::AllDown) => {
                self.down = Some(Down {
                    since: now,
                    last_line: now,
                    folded: 0,
                    error: error.to_string(),
                });
                Some(Line::Lost {
                    error: error.to_string(),
                })
            }
            (None, _) => None,
            (Some(down), _) => {
                down.folded += 1;
                if class != Class::Other {
                    down.error = error.to_string();
                }
                if now.saturating_duration_since(down.last_line) >= REMINDER {
                    down.last_line = now;
                    let folded = std::mem::take(&mut down.folded);
                    return Some(Line::StillLost {
                        for_: now.saturating_duration_since(down.since),
                        folded,
                        error: down.error.clone(),
                    });
                }
                None
            }
        }
    }

    /// Something answered at `now`.
    pub(crate) fn reachable(&mut self, now: Instant) -> Option<Line> {
        self.down.take().map(|down| Line::Back {
            after: now.saturating_duration_since(down.since),
            folded: down.folded,
        })
    }

    /// True while the connection is lost.
    pub(crate) fn is_down(&self) -> bool {
        self.down.is_some()
    }

    /// While the connection is lost: for how long at `now`, and the last
    /// error that said so.
    pub(crate) fn down_for(&self, now: Instant) -> Option<(Duration, &str)> {
        self.down.as_ref().map(|down| {
            (
                now.saturating_duration_since(down.since),
                down.error.as_str(),
            )
        })
    }
}

/// The process's connection state and its repeat filter.
#[derive(Default)]
struct Shared {
    link: Link,
    bootstrap: String,
    /// Texts (digits masked) printed lately, and when.
    seen: HashMap<String, Instant>,
    /// When a coordinator was first seen loading, and whether that was said.
    loading: Option<(Instant, bool)>,
}

fn shared() -> &'static Mutex<Shared> {
    static SHARED: OnceLock<Mutex<Shared>> = OnceLock::new();
    SHARED.get_or_init(Mutex::default)
}

fn with_shared<T>(f: impl FnOnce(&mut Shared) -> T) -> T {
    let mut guard = shared().lock().unwrap_or_else(|p| p.into_inner());
    f(&mut guard)
}

/// Names the bootstrap address the lines say was tried.
pub(crate) fn set_bootstrap(bootstrap: &str) {
    with_shared(|s| s.bootstrap = bootstrap.to_string());
}

/// True while the connection is lost (the poll loop then probes for its
/// return).
pub(crate) fn is_down() -> bool {
    with_shared(|s| s.link.is_down())
}

/// While no broker answers: what `/readyz` says about it (the bootstrap
/// address, for how long, the last error).
pub(crate) fn why_down() -> Option<String> {
    with_shared(|s| {
        s.link.down_for(Instant::now()).map(|(for_, error)| {
            format!(
                "no broker at {} has answered for {}s ({error}): check kafka.bootstrap_servers and that the cluster is up",
                s.bootstrap,
                for_.as_secs()
            )
        })
    })
}

/// A request to the cluster succeeded: logs "back" once after a loss.
pub(crate) fn reachable() {
    let (line, bootstrap) =
        with_shared(|s| (s.link.reachable(Instant::now()), s.bootstrap.clone()));
    if let Some(line) = line {
        emit(&line, &bootstrap);
    }
}

/// A request that could reach no broker failed (`error` says how): the
/// connection is lost, or stays lost.
pub(crate) fn unreachable(error: &str) {
    report(Class::AllDown, error);
}

/// True when `text` (an error's) says no broker could be reached.
pub(crate) fn is_connection_failure(text: &str) -> bool {
    matches!(classify(text), Class::AllDown | Class::BrokerDown)
}

/// An error a client reported (the processor's consumer context calls
/// this): folded when it is about the connection, logged once per
/// `REPEAT_WINDOW` otherwise.
pub(crate) fn client_error(error: &rdkafka::error::KafkaError, reason: &str) {
    use rdkafka::types::RDKafkaErrorCode as C;
    let class = match error.rdkafka_error_code() {
        Some(C::AllBrokersDown) => Class::AllDown,
        Some(C::BrokerTransportFailure | C::Resolve) => Class::BrokerDown,
        Some(C::NotCoordinator | C::CoordinatorLoadInProgress | C::CoordinatorNotAvailable) => {
            Class::CoordinatorLoading
        }
        _ => classify(reason),
    };
    let text = format!("{error}: {reason}");
    if class == Class::Other {
        if first_in_window(&text) {
            tracing::warn!(target: "orderly::kafka", error = %error, reason, "kafka client error (librdkafka retries on its own; repeats are not logged for a minute)");
        }
        return;
    }
    report(class, &text);
}

/// A coordinator that is not ready: quiet while it is new, one line if it
/// stays so past [`COORDINATOR_PATIENCE`].
fn coordinator_loading(error: &str) {
    let now = Instant::now();
    let say = with_shared(|s| {
        let (since, said) = s.loading.get_or_insert((now, false));
        if now.saturating_duration_since(*since) > REPEAT_WINDOW {
            // Long after the last episode: a new one.
            *since = now;
            *said = false;
        }
        let due = !*said && now.saturating_duration_since(*since) >= COORDINATOR_PATIENCE;
        *said |= due;
        due.then(|| now.saturating_duration_since(*since))
    });
    if let Some(for_) = say {
        tracing::warn!(
            target: "orderly::kafka",
            error,
            waited_s = for_.as_secs(),
            "the kafka group or transaction coordinator is still not ready (librdkafka keeps retrying); a broker that \
             just started loads its internal topics first, longer than this is worth a look at the broker's log"
        );
    }
}

/// Folds a connection failure into the state; logs what the state says.
fn report(class: Class, error: &str) {
    if class == Class::CoordinatorLoading {
        coordinator_loading(error);
        return;
    }
    let (line, bootstrap, repeat) = with_shared(|s| {
        let line = s.link.trouble(Instant::now(), class, error);
        // Every broker failure shares one key: one line a minute at most.
        let repeat =
            line.is_none() && !s.link.is_down() && !first_seen(s, "broker connection failed");
        (line, s.bootstrap.clone(), repeat)
    });
    match line {
        Some(line) => emit(&line, &bootstrap),
        // One broker's failure while the connection is not known lost (a
        // broker restarting in a cluster, or the first sign of an outage,
        // whose line then follows): once a minute, as information.
        None if class == Class::BrokerDown && !repeat && !is_down() => {
            tracing::info!(target: "orderly::kafka", error, "a kafka broker connection failed; librdkafka reconnects on its own")
        }
        None => {}
    }
}

/// True the first time `text` (digits masked) is seen in a window.
fn first_in_window(text: &str) -> bool {
    with_shared(|s| first_seen(s, text))
}

fn first_seen(s: &mut Shared, text: &str) -> bool {
    let key: String = text
        .chars()
        .map(|c| if c.is_ascii_digit() { '#' } else { c })
        .collect();
    let now = Instant::now();
    if s.seen.len() > MAX_REMEMBERED {
        s.seen.clear();
    }
    match s.seen.get(&key) {
        Some(at) if now.saturating_duration_since(*at) < REPEAT_WINDOW => false,
        _ => {
            s.seen.insert(key, now);
            true
        }
    }
}

fn emit(line: &Line, bootstrap: &str) {
    match line {
        Line::Lost { error } => tracing::warn!(
            target: "orderly::kafka",
            bootstrap = %bootstrap,
            error = %error,
            "kafka unreachable: no broker answers at the bootstrap address; retrying (a reminder every {}s, librdkafka's repeats folded into it). {HINT}",
            REMINDER.as_secs()
        ),
        Line::StillLost {
            for_,
            folded,
            error,
        } => tracing::warn!(
            target: "orderly::kafka",
            bootstrap = %bootstrap,
            down_s = for_.as_secs(),
            folded_errors = folded,
            last_error = %error,
            "kafka still unreachable; retrying. {HINT}"
        ),
        Line::Back { after, folded } => tracing::info!(
            target: "orderly::kafka",
            bootstrap = %bootstrap,
            down_s = format!("{:.1}", after.as_secs_f64()),
            folded_errors = folded,
            "kafka reachable again"
        ),
    }
}

/// The `tracing` layer that folds librdkafka's warnings and errors (logged
/// by the default client contexts) into the connection's lines.
pub(crate) struct KafkaLogFold;

impl<S: Subscriber> tracing_subscriber::Layer<S> for KafkaLogFold {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let meta = event.metadata();
        let target = meta.target();
        let from_librdkafka = target == "librdkafka" || target.starts_with("rdkafka");
        if !from_librdkafka || *meta.level() > Level::WARN {
            return true;
        }
        let mut text = Message::default();
        event.record(&mut text);
        match classify(&text.0) {
            Class::Other => first_in_window(&text.0),
            class => {
                report(class, &text.0);
                false
            }
        }
    }
}

/// The text of an event's `message` field.
#[derive(Default)]
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_outage_is_a_line_when_lost_one_per_reminder_and_one_when_back() {
        let t0 = Instant::now();
        let mut link = Link::default();
        assert_eq!(
            link.trouble(t0, Class::BrokerDown, "refused"),
            None,
            "one broker is not the cluster"
        );
        assert!(matches!(
            link.trouble(t0, Class::AllDown, "1/1 brokers are down"),
            Some(Line::Lost { .. })
        ));
        let mut lines = 1;
        // Ten errors a second for a minute.
        for tenth in 1..600u64 {
            let at = t0 + Duration::from_millis(tenth * 100);
            let class = if tenth % 2 == 0 {
                Class::AllDown
            } else {
                Class::BrokerDown
            };
            if let Some(line) = link.trouble(at, class, "Connect to ipv4#127.0.0.1:1 failed") {
                assert!(matches!(line, Line::StillLost { folded, .. } if folded > 100));
                lines += 1;
            }
        }
        assert_eq!(lines, 1 + 3, "the first line, then one every {REMINDER:?}");
        let back = link.reachable(t0 + Duration::from_secs(61));
        assert!(matches!(back, Some(Line::Back { after, .. }) if after == Duration::from_secs(61)));
        assert_eq!(
            link.reachable(t0 + Duration::from_secs(62)),
            None,
            "back only once"
        );
        assert!(!link.is_down());
    }

    #[test]
    fn librdkafka_texts_are_classified() {
        assert_eq!(classify("1/1 brokers are down"), Class::AllDown);
        assert_eq!(
            classify("Global error: AllBrokersDown (Local: All broker connections are down)"),
            Class::AllDown
        );
        assert_eq!(
            classify("localhost:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)"),
            Class::BrokerDown
        );
        assert_eq!(
            classify("Failed to resolve 'nohost:9092': Name or service not known"),
            Class::BrokerDown
        );
        assert_eq!(
            classify("Topic orders partition count changed"),
            Class::Other
        );
        assert_eq!(
            classify("Failed to acquire idempotence PID from broker localhost:9092/1: Broker: Coordinator load in progress: retrying"),
            Class::CoordinatorLoading
        );
    }
}
