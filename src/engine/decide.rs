//! The pure heart of `orderly`: what to do with one event given the
//! entity's stored state. No I/O, no clock: the caller passes `now_ms`.
//! Generic over the entity: only the engine's fields (key, version, event
//! id) decide; the entity's [`Entity::apply`] computes the new data.

use crate::engine::entity::{Entity, Event, State};
use crate::engine::inbox::{event_id_hash, Chunk, ChunkRef, Inbox, InboxEntry, InboxSlot};

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
pub(crate) enum Needs {
    /// Nothing more: the answer is in the state.
    Nothing,
    /// This inbox chunk (a store read).
    Chunk(ChunkRef),
}

/// Whether `event` can be decided from `state` alone. Only an event that is
/// not newer than the state can be a redelivery (applied versions strictly
/// increase), and only its version's entry is looked at: a redelivery
/// carries the version of its original.
pub(crate) fn needs<E: Entity>(state: Option<&State<E>>, event: &Event<E::Body>) -> Needs {
    match state {
        Some(current) if event.version <= current.version => {
            match current.inbox.slot(event.version) {
                InboxSlot::Chunk(chunk) => Needs::Chunk(chunk),
                InboxSlot::Recent(_) | InboxSlot::Absent => Needs::Nothing,
            }
        }
        _ => Needs::Nothing,
    }
}

/// Decides one event against the entity's stored state.
///
/// `entry` is the inbox entry recorded for the event's version, when there
/// is one (from the state's recent entries or from a chunk, see `needs`).
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
/// `None` without looking for an event newer than the state, which
/// [`decide`] applies whatever the inbox holds: most events are, and the
/// search would read an entity's entries for nothing.
pub(crate) fn recent_entry<E: Entity>(
    state: Option<&State<E>>,
    event: &Event<E::Body>,
) -> Option<InboxEntry> {
    let state = state?;
    if event.version > state.version {
        return None;
    }
    match state.inbox.slot(event.version) {
        InboxSlot::Recent(entry) => entry,
        _ => None,
    }
}

/// What applying an event wrote into the inbox beyond the state value.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct InboxSpill {
    /// A full chunk of entries to store under its own key.
    pub chunk: Option<Chunk>,
    /// Chunks past the retention window, to delete.
    pub(crate) expired: Vec<ChunkRef>,
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

/// The state after applying `event` (decided `Decision::Apply`) to
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
/// benches; the processor goes through `crate::engine::partition_state`.
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
        Needs::Chunk(first) => chunk(first.first_version)
            .and_then(|c| c.into_iter().find(|e| e.version == event.version)),
    };
    let decision = decide(state.as_ref(), entry.as_ref(), &event, horizon);
    if decision != Decision::Apply {
        return (decision, state, InboxSpill::default());
    }
    let (after, spill) = apply(state, event, now_ms, retention_ms);
    (decision, Some(after), spill)
}
