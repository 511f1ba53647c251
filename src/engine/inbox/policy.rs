//! The inbox's policy: what counts as a duplicate (an entry within the
//! retention window), when the newest entries leave the state value as a
//! chunk, and which chunks expire. How it is all held and stored is
//! [`super::encoding`]'s.

use serde::{Deserialize, Serialize};

use super::encoding::{Chunk, ChunkRef, InboxEntry, Refs, Run};

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

/// An order's applied event ids within the retention window: the newest
/// (fewer than `INBOX_CHUNK`) in the state value, older ones in chunks of
/// `INBOX_CHUNK` under their own keys. Applying an event costs the same
/// whatever the order's history: an append, and every `INBOX_CHUNK`
/// events one chunk written.
///
/// Held packed, as the store holds it: the newest entries about 11 bytes
/// each and a chunk reference about 3, so a long-lived entity's cached
/// state stays small (its serde form is the decoded lists, as before).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "InboxLists", into = "InboxLists")]
pub struct Inbox {
    /// Newest entries, by version.
    pub(super) recent: Run,
    /// Older chunks within the retention window, by version.
    chunks: Refs,
}

impl Default for Inbox {
    fn default() -> Self {
        Inbox {
            recent: Run::default(),
            chunks: Refs::empty(),
        }
    }
}

/// An inbox decoded: the serde form of [`Inbox`] (bincode's fixed-width
/// form of it is in states stored before layout 6).
#[derive(Serialize, Deserialize)]
struct InboxLists {
    recent: Vec<InboxEntry>,
    chunks: Vec<ChunkRef>,
}

impl From<InboxLists> for Inbox {
    fn from(lists: InboxLists) -> Inbox {
        Inbox::from_parts(&lists.recent, &lists.chunks)
    }
}

impl From<Inbox> for InboxLists {
    fn from(inbox: Inbox) -> InboxLists {
        InboxLists {
            recent: inbox.recent_entries().collect(),
            chunks: inbox.chunk_refs().collect(),
        }
    }
}

/// Where the inbox entry for a version lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InboxSlot {
    /// In the state value (found or not).
    Recent(Option<InboxEntry>),
    /// In this chunk (read it to know).
    Chunk(ChunkRef),
    /// Nowhere: never applied, or expired.
    Absent,
}

impl Inbox {
    /// An inbox of these newest entries and older chunks (both by version).
    pub(crate) fn from_parts(recent: &[InboxEntry], chunks: &[ChunkRef]) -> Inbox {
        Inbox {
            recent: Run::of(recent),
            chunks: Refs::of(chunks.iter().copied()),
        }
    }

    /// An inbox from its stored form: the newest entries packed, the chunk
    /// references. `None` when the entries do not decode.
    pub(crate) fn from_stored(recent: &[u8], chunks: Vec<ChunkRef>) -> Option<Inbox> {
        Some(Inbox {
            recent: Run::from_stored(recent)?,
            chunks: Refs::of(chunks),
        })
    }

    /// The newest entries as stored ([`super::encode_chunk`]'s form).
    pub(crate) fn recent_packed(&self) -> &[u8] {
        self.recent.packed()
    }

    /// The newest entries, by version.
    pub(crate) fn recent_entries(&self) -> impl Iterator<Item = InboxEntry> + '_ {
        self.recent.entries()
    }

    /// How many newest entries the state value holds.
    pub(crate) fn recent_len(&self) -> usize {
        self.recent.len as usize
    }

    /// The older chunks within the window, by version.
    pub fn chunk_refs(&self) -> impl ExactSizeIterator<Item = ChunkRef> + '_ {
        self.chunks.iter()
    }

    /// Entries within the window, the chunked ones included.
    pub fn len(&self) -> usize {
        self.recent_len() + self.chunks.len as usize * INBOX_CHUNK
    }

    /// No entries within the window.
    pub fn is_empty(&self) -> bool {
        self.recent.len == 0 && self.chunks.len == 0
    }

    /// Where the entry of `version` would be. No I/O; linear in the entries
    /// and chunks it decodes, for an event not newer than the state only.
    pub(crate) fn slot(&self, version: i64) -> InboxSlot {
        let mut recent = self.recent.entries().peekable();
        if let Some(first) = recent.peek() {
            if version >= first.version {
                let found = recent
                    .take_while(|e| e.version <= version)
                    .find(|e| e.version == version);
                return InboxSlot::Recent(found);
            }
        }
        match self
            .chunks
            .iter()
            .take_while(|c| c.first_version <= version)
            .last()
        {
            None => InboxSlot::Absent,
            Some(chunk) => InboxSlot::Chunk(chunk),
        }
    }

    /// Appends the entry of an applied event. Returns the entries that fill a
    /// chunk (to be written under their own key) and the chunks that expired
    /// before `horizon_ms` (to be deleted).
    pub fn push(&mut self, entry: InboxEntry, horizon_ms: i64) -> (Option<Chunk>, Vec<ChunkRef>) {
        debug_assert!(self.recent.len == 0 || self.recent.last_version < entry.version);
        self.recent.push(entry);
        let mut spilled = None;
        if self.recent_len() >= INBOX_CHUNK {
            let first_version = self
                .recent
                .entries()
                .next()
                .map_or(entry.version, |e| e.version);
            let reference = ChunkRef {
                first_version,
                last_applied_at_ms: self.recent.last_at,
            };
            // The next entries start a fresh run: an order that never fills
            // it again holds only what it uses (the cache's budget counts it).
            // One copy, of exactly its length, into the store's buffer type.
            let packed = sled::IVec::from(self.recent.take());
            self.chunks.push(reference);
            spilled = Some(Chunk { reference, packed });
        }
        let mut dropped = Vec::new();
        if self.chunks.oldest_at < horizon_ms {
            let expired = self
                .chunks
                .iter()
                .take_while(|c| c.last_applied_at_ms < horizon_ms)
                .count();
            dropped = self.chunks.drain_front(expired);
        }
        (spilled, dropped)
    }

    /// Rough heap bytes, for the cache budget.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.recent.bytes.capacity() + self.chunks.bytes.capacity()
    }
}
