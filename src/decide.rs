//! The pure heart of `orderly`: what to do with one event given the
//! entity's stored state. No I/O, no clock: the caller passes `now_ms`.
//! Generic over the entity: only the engine's fields (key, version, event
//! id) decide; the entity's [`Entity::apply`] computes the new data.

use crate::entity::{Entity, Event, State};
use crate::event::{event_id_hash, Inbox, InboxEntry, InboxSlot};

/// The outcome of one decoded event. (Undecodable records never get here:
/// they are dead-lettered.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The event is newer than the stored state: it becomes the state.
    Apply,
    /// This `event_id` was applied before, within the inbox retention window.
    Duplicate,
    /// The event's version is not greater than the stored version.
    Stale,
}

/// What deciding an event needs to know first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Needs {
    /// Nothing more: the answer is in the state.
    Nothing,
    /// The inbox chunk starting at this version (a store read).
    Chunk(i64),
}

/// Whether `event` can be decided from `state` alone. Only an event that is
/// not newer than the state can be a redelivery (applied versions strictly
/// increase), and only its version's entry is looked at: a redelivery
/// carries the version of its original.
pub fn needs<E: Entity>(state: Option<&State<E>>, event: &Event<E::Body>) -> Needs {
    match state {
        Some(current) if event.version <= current.version => {
            match current.inbox.slot(event.version) {
                InboxSlot::Chunk(first_version) => Needs::Chunk(first_version),
                InboxSlot::Recent(_) | InboxSlot::Absent => Needs::Nothing,
            }
        }
        _ => Needs::Nothing,
    }
}

/// Decides one event against the entity's stored state.
///
/// `entry` is the inbox entry recorded for the event's version, when there
/// is one (from the state's recent entries or from a chunk, see [`needs`]).
/// The inbox check comes first so redeliveries are counted as duplicates,
/// not as stale; a redelivery whose entry expired is still caught by the
/// version check and counted stale.
pub fn decide<E: Entity>(
    state: Option<&State<E>>,
    entry: Option<&InboxEntry>,
    event: &Event<E::Body>,
    horizon_ms: i64,
) -> Decision {
    let Some(current) = state else {
        return Decision::Apply;
    };
    if event.version > current.version {
        return Decision::Apply;
    }
    let id_hash = event_id_hash(&event.event_id);
    if entry.is_some_and(|e| e.records(event.version, id_hash, horizon_ms)) {
        return Decision::Duplicate;
    }
    Decision::Stale
}

/// The entry for `event`'s version among the state's recent inbox entries.
pub(crate) fn recent_entry<E: Entity>(
    state: Option<&State<E>>,
    event: &Event<E::Body>,
) -> Option<InboxEntry> {
    match state?.inbox.slot(event.version) {
        InboxSlot::Recent(entry) => entry,
        _ => None,
    }
}

/// What applying an event wrote into the inbox beyond the state value.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct InboxSpill {
    /// A full chunk of entries to store under its own key.
    pub chunk: Option<Vec<InboxEntry>>,
    /// Chunks (by first version) past the retention window, to delete.
    pub(crate) expired: Vec<i64>,
}

/// Applies `event` (decided [`Decision::Apply`]) to the entity's state in
/// place: the entity's new data, the event's id appended to the inbox.
/// Takes the event by value so its strings move into the state.
pub(crate) fn apply_in_place<E: Entity>(
    state: &mut State<E>,
    event: Event<E::Body>,
    now_ms: i64,
    retention_ms: i64,
) -> InboxSpill {
    debug_assert_eq!(state.key, event.key);
    let (chunk, expired) = state.inbox.push(
        inbox_entry(&event, now_ms),
        now_ms.saturating_sub(retention_ms),
    );
    state.version = event.version;
    state.data = E::apply(Some(&state.data), event.body);
    state.event_id = event.event_id;
    state.occurred_at = event.occurred_at;
    InboxSpill { chunk, expired }
}

fn inbox_entry<B>(event: &Event<B>, now_ms: i64) -> InboxEntry {
    InboxEntry {
        version: event.version,
        id_hash: event_id_hash(&event.event_id),
        applied_at_ms: now_ms,
    }
}

/// The state after applying `event` (decided [`Decision::Apply`]) to
/// `state`, or the entity's first state.
pub fn apply<E: Entity>(
    state: Option<State<E>>,
    event: Event<E::Body>,
    now_ms: i64,
    retention_ms: i64,
) -> (State<E>, InboxSpill) {
    if let Some(mut state) = state {
        let spill = apply_in_place(&mut state, event, now_ms, retention_ms);
        return (state, spill);
    }
    let mut inbox = Inbox::default();
    let (chunk, expired) = inbox.push(
        inbox_entry(&event, now_ms),
        now_ms.saturating_sub(retention_ms),
    );
    let Event {
        event_id,
        key,
        version,
        occurred_at,
        body,
    } = event;
    let state = State {
        key,
        version,
        data: E::apply(None, body),
        event_id,
        occurred_at,
        inbox,
    };
    (state, InboxSpill { chunk, expired })
}

/// Decides and applies one event against a state whose inbox chunks are
/// given by `chunk` (a pure stand-in for the store). For tests and
/// benches; the processor goes through [`crate::partition_state`].
pub fn step<E: Entity>(
    state: Option<State<E>>,
    event: Event<E::Body>,
    now_ms: i64,
    retention_ms: i64,
    chunk: impl Fn(i64) -> Option<Vec<InboxEntry>>,
) -> (Decision, Option<State<E>>, InboxSpill) {
    let horizon = now_ms.saturating_sub(retention_ms);
    let entry = match needs(state.as_ref(), &event) {
        Needs::Nothing => recent_entry(state.as_ref(), &event),
        Needs::Chunk(first) => {
            chunk(first).and_then(|c| c.into_iter().find(|e| e.version == event.version))
        }
    };
    let decision = decide(state.as_ref(), entry.as_ref(), &event, horizon);
    if decision != Decision::Apply {
        return (decision, state, InboxSpill::default());
    }
    let (after, spill) = apply(state, event, now_ms, retention_ms);
    (decision, Some(after), spill)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::orders::OrderState;
    use crate::domains::orders::Orders;
    use crate::event::{EventType, OrderEvent};
    use proptest::prelude::*;
    use std::collections::HashMap;

    const DAY_MS: i64 = 86_400_000;

    fn event(version: i64) -> OrderEvent {
        OrderEvent {
            event_id: format!("e-{version}"),
            order_id: "o-1".into(),
            version,
            event_type: EventType::from_index((version as usize) % 5).unwrap_or(EventType::Created),
            amount: version * 100,
            currency: "EUR".into(),
            occurred_at: 1_700_000_000_000 + version,
        }
    }

    /// Steps through events with an in-memory chunk store, as the partition
    /// state does with sled.
    #[derive(Default)]
    struct Order {
        state: Option<OrderState>,
        chunks: HashMap<i64, Vec<InboxEntry>>,
    }

    impl Order {
        fn step(&mut self, event: OrderEvent, now: i64, retention: i64) -> Decision {
            let chunks = &self.chunks;
            let (decision, state, spill) =
                step(self.state.take(), event.into(), now, retention, |first| {
                    chunks.get(&first).cloned()
                });
            self.state = state;
            if let Some(chunk) = spill.chunk {
                self.chunks.insert(chunk[0].version, chunk);
            }
            for first in spill.expired {
                assert!(
                    self.chunks.remove(&first).is_some(),
                    "expired chunk {first} existed"
                );
            }
            decision
        }
    }

    #[test]
    fn first_event_applies() {
        assert_eq!(
            decide::<Orders>(None, None, &event(1).into(), 0),
            Decision::Apply
        );
    }

    #[test]
    fn redelivery_is_duplicate_not_stale() {
        let mut o = Order::default();
        assert_eq!(o.step(event(1), 0, DAY_MS), Decision::Apply);
        assert_eq!(o.step(event(1), 1, DAY_MS), Decision::Duplicate);
    }

    #[test]
    fn older_version_is_stale() {
        let mut o = Order::default();
        o.step(event(3), 0, DAY_MS);
        let before = o.state.clone();
        assert_eq!(o.step(event(2), 1, DAY_MS), Decision::Stale);
        assert_eq!(o.state, before, "a stale event leaves the state as it was");
    }

    #[test]
    fn equal_version_with_new_id_is_stale() {
        let mut o = Order::default();
        o.step(event(3), 0, DAY_MS);
        let mut again = event(3);
        again.event_id = "other".into();
        assert_eq!(o.step(again, 1, DAY_MS), Decision::Stale);
    }

    #[test]
    fn redelivery_past_retention_is_caught_as_stale() {
        let mut o = Order::default();
        o.step(event(1), 0, DAY_MS);
        o.step(event(2), 2 * DAY_MS, DAY_MS);
        assert_eq!(o.step(event(1), 2 * DAY_MS, DAY_MS), Decision::Stale);
        assert_eq!(o.step(event(2), 2 * DAY_MS, DAY_MS), Decision::Duplicate);
    }

    #[test]
    fn redelivery_of_a_chunked_entry_is_found_in_its_chunk() {
        let mut o = Order::default();
        for v in 1..=200 {
            assert_eq!(o.step(event(v), v, DAY_MS), Decision::Apply);
        }
        assert!(o.chunks.len() >= 6);
        for v in [1, 31, 32, 33, 100, 199, 200] {
            assert_eq!(
                o.step(event(v), 300, DAY_MS),
                Decision::Duplicate,
                "version {v}"
            );
        }
        // The state value stays small: chunked entries are not in it.
        assert!(o.state.as_ref().unwrap().inbox.recent.len() < crate::event::INBOX_CHUNK);
    }

    proptest! {
        /// Any interleaving of duplicates and reorderings of one order's
        /// events ends in the state of the highest version seen; the three
        /// outcomes add up; a redelivery of an applied event within the
        /// window is always a duplicate.
        #[test]
        fn final_state_is_highest_version(
            versions in 1i64..120,
            picks in proptest::collection::vec(0usize..1000, 1..300),
        ) {
            let all: Vec<OrderEvent> = (1..=versions).map(event).collect();
            let delivered: Vec<&OrderEvent> = picks.iter().map(|p| &all[p % all.len()]).collect();
            let mut o = Order::default();
            let mut applied_versions = std::collections::HashSet::new();
            let (mut applied, mut dups, mut stale) = (0usize, 0usize, 0usize);
            for (now, ev) in delivered.iter().enumerate() {
                let was_applied = applied_versions.contains(&ev.version);
                match o.step((*ev).clone(), now as i64, DAY_MS) {
                    Decision::Apply => { applied += 1; prop_assert!(applied_versions.insert(ev.version)); }
                    Decision::Duplicate => { dups += 1; prop_assert!(was_applied); }
                    Decision::Stale => { stale += 1; prop_assert!(!was_applied); }
                }
            }
            let highest = delivered.iter().map(|e| e.version).max().unwrap();
            let final_state = o.state.expect("at least one event applies");
            prop_assert_eq!(final_state.view(), crate::event::StateView::of_event(&all[(highest - 1) as usize]));
            prop_assert_eq!(applied + dups + stale, delivered.len());
            prop_assert_eq!(final_state.inbox.len(), applied);
        }

        /// Version order is monotone: each applied event has a greater version
        /// than the one before it.
        #[test]
        fn state_only_moves_forward(picks in proptest::collection::vec(1i64..30, 1..60)) {
            let mut o = Order::default();
            for (now, v) in picks.iter().enumerate() {
                let before = o.state.as_ref().map(|s| s.version).unwrap_or(0);
                let decision = o.step(event(*v), now as i64, DAY_MS);
                let after = o.state.as_ref().map(|s| s.version).unwrap_or(0);
                prop_assert!(after >= before);
                prop_assert_eq!(decision == Decision::Apply, after > before);
            }
        }
    }
}
