//! The pure heart of `orderly`: what to do with one event given the order's
//! stored state. No I/O, no clock: the caller passes `now_ms`.

use crate::event::{EventId, InboxEntry, OrderEvent, OrderState};

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

/// Decides one event against the order's stored state.
///
/// `seen_in_inbox` is whether the event's id is in the order's inbox (applied
/// within the retention window). The inbox check comes first so redeliveries
/// are counted as duplicates, not as stale; an old redelivery whose inbox
/// entry was pruned is still caught by the version check and counted stale.
pub fn decide(state: Option<&OrderState>, seen_in_inbox: bool, event: &OrderEvent) -> Decision {
    if seen_in_inbox {
        return Decision::Duplicate;
    }
    match state {
        Some(current) if event.version <= current.version => Decision::Stale,
        _ => Decision::Apply,
    }
}

/// Decides `event` against `state` (inbox lookup included) and returns the
/// order's state after it: the new state when the event applies, the given
/// one otherwise. Takes the state by value so its inbox is reused, not copied.
/// `retention_ms` bounds the inbox.
pub fn step(state: Option<OrderState>, event: &OrderEvent, now_ms: i64, retention_ms: i64) -> (Decision, Option<OrderState>) {
    let id = EventId::new(&event.event_id);
    let seen = state.as_ref().is_some_and(|s| s.inbox_contains(&id));
    let decision = decide(state.as_ref(), seen, event);
    if decision != Decision::Apply {
        return (decision, state);
    }
    (decision, Some(apply(state, event, id, now_ms, retention_ms)))
}

/// The state after applying `event` (whose id is `id`): the event's carried
/// state, with the inbox pruned to the retention window and `id` appended.
pub fn apply(state: Option<OrderState>, event: &OrderEvent, id: EventId, now_ms: i64, retention_ms: i64) -> OrderState {
    let horizon = now_ms.saturating_sub(retention_ms);
    let mut inbox: Vec<InboxEntry> = state.map(|s| s.inbox).unwrap_or_default();
    inbox.retain(|e| e.applied_at_ms >= horizon);
    inbox.push(InboxEntry { event_id: id, applied_at_ms: now_ms });
    OrderState {
        order_id: event.order_id.clone(),
        version: event.version,
        status: event.event_type,
        amount: event.amount,
        currency: event.currency.clone(),
        event_id: event.event_id.clone(),
        occurred_at: event.occurred_at,
        inbox,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::EventType;
    use proptest::prelude::*;

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

    #[test]
    fn first_event_applies() {
        assert_eq!(decide(None, false, &event(1)), Decision::Apply);
    }

    #[test]
    fn redelivery_is_duplicate_not_stale() {
        let (_, state) = step(None, &event(1), 0, DAY_MS);
        assert_eq!(step(state, &event(1), 1, DAY_MS).0, Decision::Duplicate);
    }

    #[test]
    fn older_version_is_stale() {
        let (_, state) = step(None, &event(3), 0, DAY_MS);
        let (decision, kept) = step(state.clone(), &event(2), 1, DAY_MS);
        assert_eq!(decision, Decision::Stale);
        assert_eq!(kept, state, "a stale event leaves the state as it was");
    }

    #[test]
    fn equal_version_with_new_id_is_stale() {
        let (_, state) = step(None, &event(3), 0, DAY_MS);
        let mut again = event(3);
        again.event_id = "other".into();
        assert_eq!(step(state, &again, 1, DAY_MS).0, Decision::Stale);
    }

    #[test]
    fn redelivery_past_retention_is_caught_as_stale() {
        let (_, s1) = step(None, &event(1), 0, DAY_MS);
        let (_, s2) = step(s1, &event(2), 2 * DAY_MS, DAY_MS);
        assert!(!s2.as_ref().unwrap().inbox_contains(&EventId::new("e-1")), "e-1 should be pruned");
        assert_eq!(step(s2, &event(1), 2 * DAY_MS, DAY_MS).0, Decision::Stale);
    }

    proptest! {
        /// Any interleaving of duplicates and reorderings of one order's
        /// events ends in the state of the highest version seen, and the
        /// three outcomes add up to the events seen.
        #[test]
        fn final_state_is_highest_version(
            versions in 1i64..20,
            picks in proptest::collection::vec(0usize..1000, 1..80),
        ) {
            let all: Vec<OrderEvent> = (1..=versions).map(event).collect();
            let delivered: Vec<&OrderEvent> = picks.iter().map(|p| &all[p % all.len()]).collect();
            let mut state: Option<OrderState> = None;
            let (mut applied, mut dups, mut stale) = (0usize, 0usize, 0usize);
            for (now, ev) in delivered.iter().enumerate() {
                let (decision, next) = step(state.take(), ev, now as i64, DAY_MS);
                state = next;
                match decision {
                    Decision::Apply => applied += 1,
                    Decision::Duplicate => dups += 1,
                    Decision::Stale => stale += 1,
                }
            }
            let highest = delivered.iter().map(|e| e.version).max().unwrap();
            let final_state = state.expect("at least one event applies");
            prop_assert_eq!(final_state.view(), crate::event::StateView::of_event(&all[(highest - 1) as usize]));
            prop_assert_eq!(applied + dups + stale, delivered.len());
            // Every applied event's id is unique: nothing applied twice.
            let mut ids: Vec<String> = final_state.inbox.iter().map(|e| e.event_id.to_string()).collect();
            ids.sort_unstable();
            ids.dedup();
            prop_assert_eq!(ids.len(), applied);
        }

        /// Version order is monotone: each applied event has a greater version
        /// than the one before it.
        #[test]
        fn state_only_moves_forward(picks in proptest::collection::vec(1i64..30, 1..60)) {
            let mut state: Option<OrderState> = None;
            for (now, v) in picks.iter().enumerate() {
                let before = state.as_ref().map(|s| s.version).unwrap_or(0);
                let (decision, next) = step(state.take(), &event(*v), now as i64, DAY_MS);
                state = next;
                let after = state.as_ref().map(|s| s.version).unwrap_or(0);
                prop_assert!(after >= before);
                prop_assert_eq!(decision == Decision::Apply, after > before);
            }
        }
    }
}
