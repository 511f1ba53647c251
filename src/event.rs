//! The event model: what an order event carries and what the store keeps per order.

use serde::{Deserialize, Serialize};

/// The lifecycle step an event records; stored as the order's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    Created,
    Paid,
    Shipped,
    Delivered,
    Cancelled,
}

impl EventType {
    /// The Avro enum symbols, in schema order.
    pub(crate) const SYMBOLS: [&'static str; 5] =
        ["CREATED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"];

    pub fn as_str(self) -> &'static str {
        Self::SYMBOLS[self.index()]
    }

    pub fn index(self) -> usize {
        match self {
            EventType::Created => 0,
            EventType::Paid => 1,
            EventType::Shipped => 2,
            EventType::Delivered => 3,
            EventType::Cancelled => 4,
        }
    }

    pub(crate) fn from_index(index: usize) -> Option<Self> {
        [
            EventType::Created,
            EventType::Paid,
            EventType::Shipped,
            EventType::Delivered,
            EventType::Cancelled,
        ]
        .get(index)
        .copied()
    }

    pub(crate) fn from_symbol(symbol: &str) -> Option<Self> {
        Self::SYMBOLS
            .iter()
            .position(|s| *s == symbol)
            .and_then(Self::from_index)
    }
}

/// The currency a v1 record (which has no `currency` field) is read with: the
/// default of the v2 reader schema.
pub(crate) const DEFAULT_CURRENCY: &str = "EUR";

/// One decoded order event (the v2 reader's view of any writer version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderEvent {
    pub event_id: String,
    pub order_id: String,
    /// Per-order sequence, starting at 1; always positive once decoded.
    pub version: i64,
    pub event_type: EventType,
    /// Order total in minor units.
    pub amount: i64,
    pub currency: String,
    /// Milliseconds since the Unix epoch.
    pub occurred_at: i64,
}

/// An event id as the inbox stores it: a fixed-width 64-bit hash (XXH3) of
/// the id's text, whatever its format (UUID, hex, anything). Fixed width keeps
/// an inbox entry at 24 bytes and its lookup allocation-free.
///
/// A hash collision can never change state: the inbox is consulted only for
/// an event whose version is not newer than the stored one, and such an event
/// is dropped either way. A collision could only count a stale event as a
/// duplicate, with probability 2^-64 per look-up (it must also carry the same
/// order and version as an applied event).
pub(crate) fn event_id_hash(event_id: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(event_id.as_bytes())
}

/// An applied event remembered in the inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InboxEntry {
    /// The applied event's version: applied versions of one order strictly
    /// increase, so an inbox is sorted by version and searched by it.
    pub version: i64,
    /// [`event_id_hash`] of the applied event's id.
    pub(crate) id_hash: u64,
    /// Wall-clock milliseconds when the event was applied; an entry older than
    /// the retention window no longer counts (it is as if pruned).
    pub(crate) applied_at_ms: i64,
}

impl InboxEntry {
    /// True when this entry records `event` (same version and id) and is
    /// still within the retention window that starts at `horizon_ms`.
    pub fn records(&self, version: i64, id_hash: u64, horizon_ms: i64) -> bool {
        self.version == version && self.id_hash == id_hash && self.applied_at_ms >= horizon_ms
    }
}

/// How many entries the inbox keeps inside the order's state value; when the
/// tail reaches this many, they move into one chunk key of their own, written
/// once and read only to classify an old redelivery.
pub(crate) const INBOX_CHUNK: usize = 32;

/// A chunk of older inbox entries stored under its own key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    /// Version of the chunk's first entry (its key).
    pub(crate) first_version: i64,
    /// When its newest entry was applied: the chunk expires with it.
    pub(crate) last_applied_at_ms: i64,
}

/// An order's applied event ids within the retention window: the newest
/// (fewer than [`INBOX_CHUNK`]) in the state value, older ones in chunks of
/// [`INBOX_CHUNK`] under their own keys. Applying an event costs the same
/// whatever the order's history: an append, and every [`INBOX_CHUNK`]
/// events one chunk written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inbox {
    /// Newest entries, by version.
    pub(crate) recent: Vec<InboxEntry>,
    /// Older chunks within the retention window, by version.
    pub chunks: Vec<ChunkRef>,
}

/// Where the inbox entry for a version lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InboxSlot {
    /// In the state value (found or not).
    Recent(Option<InboxEntry>),
    /// In the chunk that starts at this version (read it to know).
    Chunk(i64),
    /// Nowhere: never applied, or expired.
    Absent,
}

impl Inbox {
    /// Entries within the window, the chunked ones included.
    pub fn len(&self) -> usize {
        self.recent.len() + self.chunks.len() * INBOX_CHUNK
    }

    pub fn is_empty(&self) -> bool {
        self.recent.is_empty() && self.chunks.is_empty()
    }

    /// Where the entry of `version` would be. O(log n), no I/O.
    pub(crate) fn slot(&self, version: i64) -> InboxSlot {
        if let Some(first) = self.recent.first() {
            if version >= first.version {
                let found = self
                    .recent
                    .binary_search_by_key(&version, |e| e.version)
                    .ok()
                    .map(|i| self.recent[i]);
                return InboxSlot::Recent(found);
            }
        }
        match self.chunks.partition_point(|c| c.first_version <= version) {
            0 => InboxSlot::Absent,
            i => InboxSlot::Chunk(self.chunks[i - 1].first_version),
        }
    }

    /// Appends the entry of an applied event. Returns the entries that fill a
    /// chunk (to be written under their own key) and the chunks that expired
    /// before `horizon_ms` (to be deleted).
    pub fn push(
        &mut self,
        entry: InboxEntry,
        horizon_ms: i64,
    ) -> (Option<Vec<InboxEntry>>, Vec<i64>) {
        debug_assert!(self
            .recent
            .last()
            .is_none_or(|last| last.version < entry.version));
        self.recent.push(entry);
        let mut spilled = None;
        if self.recent.len() >= INBOX_CHUNK {
            let full = std::mem::replace(&mut self.recent, Vec::with_capacity(INBOX_CHUNK));
            let (first, last) = (full[0], full[full.len() - 1]);
            self.chunks.push(ChunkRef {
                first_version: first.version,
                last_applied_at_ms: last.applied_at_ms,
            });
            spilled = Some(full);
        }
        let expired = self
            .chunks
            .iter()
            .take_while(|c| c.last_applied_at_ms < horizon_ms)
            .count();
        let dropped = self
            .chunks
            .drain(..expired)
            .map(|c| c.first_version)
            .collect();
        (spilled, dropped)
    }

    /// Rough heap bytes, for the cache budget.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.recent.capacity() * std::mem::size_of::<InboxEntry>()
            + self.chunks.capacity() * std::mem::size_of::<ChunkRef>()
    }
}

/// An order's domain fields: what its newest applied event carries
/// (event-carried state). The engine reads none of them, except the status
/// whose changes the outbox reports; a later step lets users bring their
/// own entity type here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub status: EventType,
    pub amount: i64,
    pub currency: String,
}

/// An order's state without its inbox: what `state get` prints and what
/// expectations compare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateView {
    pub order_id: String,
    pub version: i64,
    pub status: EventType,
    pub amount: i64,
    pub currency: String,
    pub event_id: String,
    pub occurred_at: i64,
}

impl StateView {
    /// The state an event carries, as the store would hold it after applying it.
    pub(crate) fn of_event(event: &OrderEvent) -> Self {
        StateView {
            order_id: event.order_id.clone(),
            version: event.version,
            status: event.event_type,
            amount: event.amount,
            currency: event.currency.clone(),
            event_id: event.event_id.clone(),
            occurred_at: event.occurred_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::orders::OrderState;

    /// The stored layout did not move when the domain fields were grouped:
    /// a state encodes to the bytes of the flat struct it used to be.
    #[test]
    fn grouping_the_domain_fields_keeps_the_stored_bytes() {
        #[derive(Serialize)]
        struct Flat<'a> {
            order_id: &'a str,
            version: i64,
            status: EventType,
            amount: i64,
            currency: &'a str,
            event_id: &'a str,
            occurred_at: i64,
            inbox: &'a Inbox,
        }
        let inbox = Inbox {
            recent: vec![InboxEntry {
                version: 3,
                id_hash: 7,
                applied_at_ms: 9,
            }],
            chunks: Vec::new(),
        };
        let state = OrderState {
            key: "order-1".into(),
            version: 3,
            data: Order {
                status: EventType::Shipped,
                amount: 1_250,
                currency: "EUR".into(),
            },
            event_id: "e-3".into(),
            occurred_at: 42,
            inbox: inbox.clone(),
        };
        let flat = Flat {
            order_id: "order-1",
            version: 3,
            status: EventType::Shipped,
            amount: 1_250,
            currency: "EUR",
            event_id: "e-3",
            occurred_at: 42,
            inbox: &inbox,
        };
        let (grouped, flat) = (
            bincode::serialize(&state).expect("encode"),
            bincode::serialize(&flat).expect("encode"),
        );
        assert_eq!(grouped, flat);
        assert_eq!(
            bincode::deserialize::<OrderState>(&flat).expect("decode"),
            state
        );
    }

    fn entry(version: i64, at: i64) -> InboxEntry {
        InboxEntry {
            version,
            id_hash: event_id_hash(&format!("e-{version}")),
            applied_at_ms: at,
        }
    }

    #[test]
    fn ids_of_any_format_hash_to_fixed_width() {
        let a = event_id_hash("5f0c6f2e-0000-4000-8000-000000000001");
        assert_eq!(
            a,
            event_id_hash("5f0c6f2e-0000-4000-8000-000000000001"),
            "stable"
        );
        assert_ne!(
            a,
            event_id_hash("5F0C6F2E-0000-4000-8000-000000000001"),
            "case matters: ids are opaque"
        );
        assert_ne!(
            event_id_hash("0123456789abcdef0123456789abcdef"),
            event_id_hash("0123456789abcdef0123456789abcdee")
        );
        // Persisted values: the hash must never change between releases.
        assert_eq!(event_id_hash("evt-7"), xxhash_rust::xxh3::xxh3_64(b"evt-7"));
    }

    #[test]
    fn inbox_spills_full_chunks_and_finds_every_version() {
        let mut inbox = Inbox::default();
        let mut spilled = Vec::new();
        for v in 1..=100 {
            let (chunk, expired) = inbox.push(entry(v, v), 0);
            assert!(expired.is_empty());
            if let Some(chunk) = chunk {
                assert_eq!(chunk.len(), INBOX_CHUNK);
                spilled.push(chunk);
            }
        }
        assert_eq!(spilled.len(), 3);
        assert_eq!(inbox.recent.len(), 100 - 3 * INBOX_CHUNK);
        assert_eq!(inbox.len(), 100);
        for v in 1..=100 {
            match inbox.slot(v) {
                InboxSlot::Recent(Some(e)) => assert_eq!(e.version, v),
                InboxSlot::Chunk(first) => {
                    let chunk = spilled
                        .iter()
                        .find(|c| c[0].version == first)
                        .expect("chunk exists");
                    assert!(chunk.iter().any(|e| e.version == v));
                }
                other => panic!("version {v}: {other:?}"),
            }
        }
        assert_eq!(inbox.slot(0), InboxSlot::Absent);
        assert_eq!(inbox.slot(101), InboxSlot::Recent(None));
    }

    #[test]
    fn expired_chunks_are_dropped_in_order() {
        let mut inbox = Inbox::default();
        for v in 1..=64 {
            inbox.push(entry(v, v), 0);
        }
        assert_eq!(inbox.chunks.len(), 2);
        // The first chunk's newest entry was applied at 32.
        let (_, expired) = inbox.push(entry(65, 65), 33);
        assert_eq!(expired, vec![1]);
        assert_eq!(inbox.slot(5), InboxSlot::Absent);
        assert_eq!(inbox.slot(40), InboxSlot::Chunk(33));
    }
}

/// One pending status change of an entity whose status is an `S` (an
/// order's [`EventType`]), stored under its source offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxRecord<S = EventType> {
    pub event_id: String,
    /// The entity's key.
    pub key: String,
    pub version: i64,
    pub(crate) from_status: Option<S>,
    pub(crate) to_status: S,
    pub occurred_at: i64,
    pub source_partition: i32,
    pub source_offset: i64,
    /// When the change was applied (milliseconds since the epoch): the
    /// backlog's age.
    pub(crate) created_ms: i64,
    /// The partition's state epoch when it was applied (see
    /// `orderly replay --reset-state`).
    pub epoch: u32,
}

/// The `event_id` of the status change an event caused: XXH3-128 of the
/// source `event_id`, written as a UUID. The same source event always gives
/// the same id, whoever re-emits it.
pub fn status_event_id(source_event_id: &str) -> String {
    status_id_of_hash(status_id_hash(source_event_id))
}

/// The hash [`status_event_id`] writes as a UUID.
pub(crate) fn status_id_hash(source_event_id: &str) -> u128 {
    xxhash_rust::xxh3::xxh3_128_with_seed(source_event_id.as_bytes(), 0x6f72_6465_726c_7921)
}

/// [`status_event_id`] of a hash from [`status_id_hash`].
pub(crate) fn status_id_of_hash(hash: u128) -> String {
    uuid::Uuid::from_u128(hash).hyphenated().to_string()
}
