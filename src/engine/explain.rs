//! Why each record of one key was applied, dropped or dead-lettered: the
//! engine's own rules ([`crate::engine::decide::step`]) replayed over the
//! key's input records in offset order, from the state the key had before
//! the first of them. Pure: `orderly explain` reads the records and the
//! stored state; this says what the engine decided.
//!
//! One thing the replay cannot know exactly is when the processor applied
//! each event (its wall clock then), which the inbox's retention compares
//! against: a record's own timestamp stands in for it. A redelivery that
//! came more than `processing.inbox_retention_ms` after its original is
//! stale rather than a duplicate either way; near that edge the two clocks
//! can disagree, and [`Explanation::disagreement`] says so when the end
//! state differs from the stored one.

use std::collections::HashMap;

use serde::Serialize;

use crate::engine::codec::PoisonKind;
use crate::engine::decide::{step, Decision};
use crate::engine::entity::{Entity, Event, State};
use crate::engine::inbox::InboxEntry;

/// One input record of the key, read and decoded (or not).
pub(crate) struct Record<B> {
    pub(crate) offset: i64,
    /// The record's timestamp (milliseconds since the Unix epoch).
    pub(crate) timestamp_ms: i64,
    /// The decoded event, or why it is poison.
    pub(crate) read: Result<Event<B>, (PoisonKind, String)>,
}

/// What the engine did with one record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// The event became the state.
    Applied {
        /// The state's version before it (`None`: the key's first state).
        from_version: Option<i64>,
        to_version: i64,
    },
    /// Its event id was applied before at this version.
    Duplicate {
        /// The offset of the record it repeats, when that record was read.
        of_offset: Option<i64>,
    },
    /// Not newer than the state: its version against the state's.
    Stale { stored_version: i64 },
    /// Poison: sent to the dead-letter topic.
    DeadLettered { kind: &'static str, message: String },
    /// Keyed so in the input, but its event names another key: it was
    /// decided for that key, not this one.
    OtherKey { event_key: String },
}

impl Verdict {
    /// The short label a line or a counter uses (`applied`, `duplicate`,
    /// `stale`, `dead_lettered`, `other_key`).
    pub(crate) fn label(&self) -> &'static str {
        match self {
            Verdict::Applied { .. } => "applied",
            Verdict::Duplicate { .. } => "duplicate",
            Verdict::Stale { .. } => "stale",
            Verdict::DeadLettered { .. } => "dead_lettered",
            Verdict::OtherKey { .. } => "other_key",
        }
    }
}

/// One record explained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Explained {
    pub(crate) offset: i64,
    pub(crate) timestamp_ms: i64,
    /// The event's id and version (`None` for poison).
    pub(crate) event_id: Option<String>,
    pub(crate) version: Option<i64>,
    #[serde(flatten)]
    pub(crate) verdict: Verdict,
}

/// The replay of one key's records.
pub(crate) struct Explainer<E: Entity> {
    key: String,
    state: Option<State<E>>,
    retention_ms: i64,
    /// Inbox chunks spilled by the replay, by their first version.
    chunks: HashMap<i64, Vec<InboxEntry>>,
    /// Where each applied (version, event id) was read.
    applied_at: HashMap<(i64, String), i64>,
}

impl<E: Entity> Explainer<E> {
    /// A replay of `key` from `start` (its state before the first record
    /// read; `None`: no state), with the inbox retention the run used.
    pub(crate) fn new(key: &str, start: Option<State<E>>, retention_ms: i64) -> Self {
        Explainer {
            key: key.to_string(),
            state: start,
            retention_ms,
            chunks: HashMap::new(),
            applied_at: HashMap::new(),
        }
    }

    /// Decides the next record of the key, as the engine does.
    pub(crate) fn next(&mut self, record: Record<E::Body>) -> Explained {
        let Record {
            offset,
            timestamp_ms,
            read,
        } = record;
        let event = match read {
            Err((kind, message)) => {
                return Explained {
                    offset,
                    timestamp_ms,
                    event_id: None,
                    version: None,
                    verdict: Verdict::DeadLettered {
                        kind: kind.as_str(),
                        message,
                    },
                }
            }
            Ok(event) => event,
        };
        let (event_id, version) = (event.event_id.clone(), event.version);
        let explained = |verdict| Explained {
            offset,
            timestamp_ms,
            event_id: Some(event_id.clone()),
            version: Some(version),
            verdict,
        };
        if event.key != self.key {
            return explained(Verdict::OtherKey {
                event_key: event.key,
            });
        }
        let from_version = self.state.as_ref().map(|s| s.version);
        let chunks = &self.chunks;
        let (decision, state, spill) = step(
            self.state.take(),
            event,
            timestamp_ms,
            self.retention_ms,
            |first| chunks.get(&first).cloned(),
        );
        self.state = state;
        if let Some(chunk) = spill.chunk {
            self.chunks
                .insert(chunk.reference().first_version(), chunk.entries());
        }
        match decision {
            Decision::Apply => {
                self.applied_at.insert((version, event_id.clone()), offset);
                explained(Verdict::Applied {
                    from_version,
                    to_version: version,
                })
            }
            Decision::Duplicate => explained(Verdict::Duplicate {
                of_offset: self.applied_at.get(&(version, event_id.clone())).copied(),
            }),
            Decision::Stale => explained(Verdict::Stale {
                stored_version: from_version.unwrap_or(0),
            }),
        }
    }

    /// The key's state after every record given so far.
    pub(crate) fn state(&self) -> Option<&State<E>> {
        self.state.as_ref()
    }

    /// Where the replay's state and the stored one differ (their version
    /// or the event that produced them), as a sentence; `None` when they
    /// agree. A difference is a bug, or a history the input no longer
    /// holds (retention), or records the processor has not reached yet.
    pub(crate) fn disagreement(&self, stored: Option<&State<E>>) -> Option<String> {
        let summary = |s: Option<&State<E>>| s.map(|s| (s.version, s.event_id.clone()));
        let (replayed, stored) = (summary(self.state()), summary(stored));
        (replayed != stored).then(|| {
            let say = |s: Option<(i64, String)>| match s {
                Some((version, event_id)) => format!("version {version} (event {event_id})"),
                None => "no state".to_string(),
            };
            format!(
                "the replay ends at {} but the store holds {}",
                say(replayed),
                say(stored)
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::orders::event::Order;
    use crate::domains::orders::event::{EventType, OrderEvent};
    use crate::domains::orders::Orders;

    fn event(key: &str, id: &str, version: i64) -> Event<Order> {
        OrderEvent {
            event_id: id.into(),
            order_id: key.into(),
            version,
            event_type: EventType::Shipped,
            amount: version,
            currency: "EUR".into(),
            occurred_at: version,
        }
        .into()
    }

    fn record(offset: i64, read: Result<Event<Order>, (PoisonKind, String)>) -> Record<Order> {
        Record {
            offset,
            timestamp_ms: 1_000 + offset,
            read,
        }
    }

    #[test]
    fn each_record_gets_the_engines_decision_and_the_record_it_repeats() {
        let mut explainer = Explainer::<Orders>::new("o-1", None, 60_000);
        let verdicts: Vec<Verdict> = [
            record(0, Ok(event("o-1", "e1", 1))),
            record(1, Ok(event("o-1", "e3", 3))),
            record(2, Ok(event("o-1", "e1", 1))),
            record(3, Ok(event("o-1", "e2", 2))),
            record(4, Err((PoisonKind::Undecodable, "short".into()))),
            record(5, Ok(event("o-2", "x", 9))),
            record(6, Ok(event("o-1", "e4", 4))),
        ]
        .into_iter()
        .map(|r| explainer.next(r).verdict)
        .collect();
        assert_eq!(
            verdicts,
            vec![
                Verdict::Applied {
                    from_version: None,
                    to_version: 1
                },
                Verdict::Applied {
                    from_version: Some(1),
                    to_version: 3
                },
                Verdict::Duplicate { of_offset: Some(0) },
                Verdict::Stale { stored_version: 3 },
                Verdict::DeadLettered {
                    kind: "undecodable",
                    message: "short".into()
                },
                Verdict::OtherKey {
                    event_key: "o-2".into()
                },
                Verdict::Applied {
                    from_version: Some(3),
                    to_version: 4
                },
            ]
        );
        assert_eq!(explainer.state().map(|s| s.version), Some(4));
        assert_eq!(explainer.disagreement(explainer.state()), None);
        let said = explainer.disagreement(None).expect("differs from no state");
        assert!(
            said.contains("version 4 (event e4)") && said.contains("no state"),
            "{said}"
        );
    }

    #[test]
    fn a_redelivery_of_an_event_whose_inbox_entry_left_in_a_chunk_is_still_a_duplicate() {
        let mut explainer = Explainer::<Orders>::new("o-1", None, i64::MAX / 4);
        for version in 1..=100 {
            let out = explainer.next(record(
                version,
                Ok(event("o-1", &format!("e{version}"), version)),
            ));
            assert_eq!(out.verdict.label(), "applied");
        }
        // Version 3's entry is in a spilled chunk by now.
        let out = explainer.next(record(200, Ok(event("o-1", "e3", 3))));
        assert_eq!(out.verdict, Verdict::Duplicate { of_offset: Some(3) });
        let out = explainer.next(record(201, Ok(event("o-1", "other", 3))));
        assert_eq!(
            out.verdict,
            Verdict::Stale {
                stored_version: 100
            }
        );
    }

    #[test]
    fn past_the_inbox_retention_a_redelivery_is_stale() {
        let mut explainer = Explainer::<Orders>::new("o-1", None, 10);
        explainer.next(record(0, Ok(event("o-1", "e1", 1))));
        explainer.next(record(1, Ok(event("o-1", "e2", 2))));
        let late = Record {
            offset: 2,
            timestamp_ms: 1_000_000,
            read: Ok(event("o-1", "e1", 1)),
        };
        assert_eq!(
            explainer.next(late).verdict,
            Verdict::Stale { stored_version: 2 }
        );
    }
}
