//! The tests of `engine::decide`, with orders as the entity.

use crate::domains::orders::event::{EventType, OrderEvent};
use crate::domains::orders::OrderState;
use crate::domains::orders::Orders;
use crate::engine::decide::*;
use crate::engine::inbox::InboxEntry;
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
            self.chunks
                .insert(chunk.reference().first_version(), chunk.entries());
        }
        for chunk in spill.expired {
            let first = chunk.first_version;
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
    assert!(o.state.as_ref().unwrap().inbox.recent_len() < crate::engine::inbox::INBOX_CHUNK);
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
        prop_assert_eq!(final_state.view(), crate::domains::orders::event::StateView::of_event(&all[(highest - 1) as usize]));
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
