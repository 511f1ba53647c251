//! The inbox: the applied event ids an entity's state remembers within the
//! retention window, so a redelivery is recognised as a duplicate.

use serde::{Deserialize, Serialize};

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
/// (fewer than `INBOX_CHUNK`) in the state value, older ones in chunks of
/// `INBOX_CHUNK` under their own keys. Applying an event costs the same
/// whatever the order's history: an append, and every `INBOX_CHUNK`
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

    /// No entries within the window.
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
            // The next entries grow a fresh vector: an order that never fills it
            // again holds only what it uses (the cache's budget counts it).
            let full = std::mem::take(&mut self.recent);
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn after_a_spill_the_newest_entries_hold_only_the_room_they_use() {
        // The cache counts the vector's capacity: a full chunk's worth of
        // room right after each spill made an order measure twice its size
        // until its next write-out.
        let mut inbox = Inbox::default();
        for v in 1..=INBOX_CHUNK as i64 + 1 {
            inbox.push(entry(v, v), 0);
        }
        assert_eq!(inbox.recent.len(), 1);
        assert!(
            inbox.recent.capacity() < INBOX_CHUNK / 2,
            "capacity {} after a spill",
            inbox.recent.capacity()
        );
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
