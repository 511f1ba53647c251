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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkRef {
    /// Version of the chunk's first entry (its key).
    pub(crate) first_version: i64,
    /// When its newest entry was applied: the chunk expires with it.
    pub(crate) last_applied_at_ms: i64,
}

impl ChunkRef {
    /// The version of the chunk's first entry.
    pub fn first_version(&self) -> i64 {
        self.first_version
    }
}

/// A full chunk of inbox entries that left the state value, packed as the
/// store holds it ([`encode_chunk`]'s form): held so until its write-out,
/// about 11 bytes an entry, in the store's own buffer type, so the
/// write-out's batch and the store's cached leaf share these bytes instead
/// of copying them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    reference: ChunkRef,
    packed: sled::IVec,
}

impl Chunk {
    /// The chunk's reference (its first version and newest apply time).
    pub fn reference(&self) -> ChunkRef {
        self.reference
    }

    /// Its entries, by version.
    pub fn entries(&self) -> Vec<InboxEntry> {
        Entries::of(&self.packed).collect()
    }

    /// Its entry of `version`, if any.
    pub(crate) fn find(&self, version: i64) -> Option<InboxEntry> {
        Entries::of(&self.packed).find(|e| e.version == version)
    }

    /// The stored value (shared, not copied).
    pub(crate) fn packed(&self) -> &sled::IVec {
        &self.packed
    }

    /// Heap bytes held, for the cache budget.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.packed.len()
    }
}

#[cfg(test)]
impl ChunkRef {
    /// The reference to a chunk of `entries` (`None`: empty).
    pub(crate) fn of(entries: &[InboxEntry]) -> Option<ChunkRef> {
        Some(ChunkRef {
            first_version: entries.first()?.version,
            last_applied_at_ms: entries.last()?.applied_at_ms,
        })
    }
}

#[cfg(test)]
impl Chunk {
    /// A chunk of `entries` (`None`: empty).
    pub(crate) fn of(entries: &[InboxEntry]) -> Option<Chunk> {
        Some(Chunk {
            reference: ChunkRef::of(entries)?,
            packed: encode_chunk(entries).into(),
        })
    }
}

/// Entries packed the way a chunk's value holds them ([`encode_chunk`]):
/// the newest entries of an inbox, kept so as they arrive (an append of
/// about 11 bytes, where the decoded form takes 24), which a write-out
/// stores as they are and which become a chunk's value as they are when
/// they fill. The bytes are canonical (only [`Run::push`] writes them), so
/// equal entries make equal runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Run {
    /// Empty, or [`CHUNK_PACKED`], the count (a varint) and the entries.
    bytes: Vec<u8>,
    len: u32,
    /// The newest entry's version and apply time: the next entry is
    /// packed as its difference from them.
    last_version: i64,
    last_at: i64,
}

/// The packed form of no entries.
const EMPTY_RUN: [u8; 2] = [CHUNK_PACKED, 0];

impl Run {
    fn of(entries: &[InboxEntry]) -> Run {
        match entries.last() {
            None => Run::default(),
            Some(last) => Run {
                bytes: encode_chunk(entries),
                len: entries.len() as u32,
                last_version: last.version,
                last_at: last.applied_at_ms,
            },
        }
    }

    /// A run of stored bytes in [`encode_chunk`]'s form (`None`: they do
    /// not decode, as [`decode_packed`]). Held as they are, one copy and no
    /// re-encoding, when their count is written as this module writes it
    /// ([`Run::push`] rewrites it in place); packed again otherwise.
    fn from_stored(bytes: &[u8]) -> Option<Run> {
        let mut last = None;
        let (count, header) = walk_packed(bytes, |entry| last = Some(entry))?;
        let Some(last) = last else {
            return Some(Run::default());
        };
        if header != 1 + varint_len(count as u64) {
            return decode_packed(bytes).map(|entries| Run::of(&entries));
        }
        Some(Run {
            bytes: bytes.to_vec(),
            len: u32::try_from(count).ok()?,
            last_version: last.version,
            last_at: last.applied_at_ms,
        })
    }

    fn push(&mut self, entry: InboxEntry) {
        if self.bytes.is_empty() {
            // Room for four entries: most entities see few events.
            self.bytes.reserve(EMPTY_RUN.len() + 4 * 11);
            self.bytes.extend_from_slice(&EMPTY_RUN);
            (self.last_version, self.last_at) = (0, 0);
        }
        let (old, new) = (u64::from(self.len), u64::from(self.len) + 1);
        if new < 0x80 {
            // A one-byte count, as it was.
            self.bytes[1] = new as u8;
        } else {
            let mut count = Vec::with_capacity(10);
            put_varint(&mut count, new);
            self.bytes.splice(1..1 + varint_len(old), count);
        }
        put_entry(&mut self.bytes, (self.last_version, self.last_at), &entry);
        self.len += 1;
        (self.last_version, self.last_at) = (entry.version, entry.applied_at_ms);
    }

    fn entries(&self) -> Entries<'_> {
        Entries::of(self.packed())
    }

    /// The stored form (that of no entries when empty).
    fn packed(&self) -> &[u8] {
        if self.bytes.is_empty() {
            &EMPTY_RUN
        } else {
            &self.bytes
        }
    }

    /// The packed bytes, leaving the run empty.
    fn take(&mut self) -> Vec<u8> {
        let bytes = std::mem::take(&mut self.bytes);
        *self = Run::default();
        bytes
    }
}

/// The entries of a packed run, decoded one at a time. Stops at the count,
/// or early at bytes that do not decode (never from a run this module
/// packed; [`decode_packed`] checks stored ones).
struct Entries<'a> {
    rest: &'a [u8],
    remaining: usize,
    previous: (i64, i64),
}

impl<'a> Entries<'a> {
    /// The entries of `bytes` in [`encode_chunk`]'s form (`None`: not that
    /// form).
    fn parse(bytes: &'a [u8]) -> Option<Entries<'a>> {
        let mut rest = match bytes.split_first()? {
            (&CHUNK_PACKED, rest) => rest,
            _ => return None,
        };
        let remaining = usize::try_from(take_varint(&mut rest)?).ok()?;
        Some(Entries {
            rest,
            remaining,
            previous: (0, 0),
        })
    }

    /// The entries of a run this module packed (none for anything else).
    fn of(bytes: &'a [u8]) -> Entries<'a> {
        Entries::parse(bytes).unwrap_or(Entries {
            rest: &[],
            remaining: 0,
            previous: (0, 0),
        })
    }
}

impl Iterator for Entries<'_> {
    type Item = InboxEntry;

    fn next(&mut self) -> Option<InboxEntry> {
        if self.remaining == 0 {
            return None;
        }
        let mut rest = self.rest;
        let version = self
            .previous
            .0
            .wrapping_add(unzigzag(take_varint(&mut rest)?));
        let at = self
            .previous
            .1
            .wrapping_add(unzigzag(take_varint(&mut rest)?));
        let Some((hash, tail)) = rest.split_first_chunk::<8>() else {
            self.remaining = 0;
            return None;
        };
        self.rest = tail;
        self.remaining -= 1;
        self.previous = (version, at);
        Some(InboxEntry {
            version,
            id_hash: u64::from_le_bytes(*hash),
            applied_at_ms: at,
        })
    }
}

/// Chunk references packed: each as its first version and newest apply
/// time less the previous reference's (zig-zag varints: about 3 bytes a
/// reference where the decoded form takes 16). Read in order only: a look-up
/// among them is for an old redelivery, rare and about to read a chunk
/// from the store anyway.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Refs {
    bytes: Vec<u8>,
    len: u32,
    /// The newest reference: the next is packed as its difference.
    last: ChunkRef,
    /// The oldest reference's newest apply time (`i64::MAX`: none), which
    /// every applied event checks for expiry without reading the bytes.
    oldest_at: i64,
}

impl Refs {
    fn empty() -> Refs {
        Refs {
            oldest_at: i64::MAX,
            ..Refs::default()
        }
    }

    fn of(refs: impl IntoIterator<Item = ChunkRef>) -> Refs {
        let mut packed = Refs::empty();
        for chunk in refs {
            packed.push(chunk);
        }
        packed
    }

    fn push(&mut self, chunk: ChunkRef) {
        if self.len == 0 {
            self.oldest_at = chunk.last_applied_at_ms;
        }
        put_varint(
            &mut self.bytes,
            zigzag(chunk.first_version.wrapping_sub(self.last.first_version)),
        );
        put_varint(
            &mut self.bytes,
            zigzag(
                chunk
                    .last_applied_at_ms
                    .wrapping_sub(self.last.last_applied_at_ms),
            ),
        );
        self.len += 1;
        self.last = chunk;
    }

    fn iter(&self) -> RefIter<'_> {
        RefIter {
            rest: &self.bytes,
            remaining: self.len as usize,
            previous: ChunkRef::default(),
        }
    }

    /// Removes and returns the `n` oldest references.
    fn drain_front(&mut self, n: usize) -> Vec<ChunkRef> {
        let mut all: Vec<ChunkRef> = self.iter().collect();
        let rest = all.split_off(n.min(all.len()));
        *self = Refs::of(rest);
        all
    }
}

/// Packed references, decoded one at a time.
struct RefIter<'a> {
    rest: &'a [u8],
    remaining: usize,
    previous: ChunkRef,
}

impl Iterator for RefIter<'_> {
    type Item = ChunkRef;

    fn next(&mut self) -> Option<ChunkRef> {
        if self.remaining == 0 {
            return None;
        }
        let first = unzigzag(take_varint(&mut self.rest)?);
        let at = unzigzag(take_varint(&mut self.rest)?);
        self.remaining -= 1;
        self.previous = ChunkRef {
            first_version: self.previous.first_version.wrapping_add(first),
            last_applied_at_ms: self.previous.last_applied_at_ms.wrapping_add(at),
        };
        Some(self.previous)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for RefIter<'_> {}

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
    recent: Run,
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

    /// The newest entries as stored ([`encode_chunk`]'s form).
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

/// The first byte of a chunk value in the packed form ([`encode_chunk`]).
const CHUNK_PACKED: u8 = 0xC2;

/// A chunk's stored value, packed: [`CHUNK_PACKED`], the entry count, then
/// each entry as its version and apply time less the previous entry's
/// (zig-zag varints: one byte each for consecutive versions applied within
/// 64 ms of each other) and its id hash (8 bytes). About 11 bytes an entry
/// where bincode took 24: a chunk is written once and held by the store, the
/// changelog and every restore.
pub(crate) fn encode_chunk(entries: &[InboxEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + entries.len() * 11);
    out.push(CHUNK_PACKED);
    put_varint(&mut out, entries.len() as u64);
    let mut previous = (0i64, 0i64);
    for entry in entries {
        put_entry(&mut out, previous, entry);
        previous = (entry.version, entry.applied_at_ms);
    }
    out
}

/// One entry of the packed form, as its difference from the entry before
/// (`previous`: its version and apply time; zeros for the first).
fn put_entry(out: &mut Vec<u8>, previous: (i64, i64), entry: &InboxEntry) {
    put_varint(out, zigzag(entry.version.wrapping_sub(previous.0)));
    put_varint(out, zigzag(entry.applied_at_ms.wrapping_sub(previous.1)));
    out.extend_from_slice(&entry.id_hash.to_le_bytes());
}

/// A chunk's entries from its stored value: the packed form, or bincode's
/// (a count as 8 bytes, then 24 bytes an entry), which orderly wrote before
/// the packed form and which changelogs and stores may still hold. An error
/// (never a panic) for anything else.
pub(crate) fn decode_chunk(bytes: &[u8]) -> Result<Vec<InboxEntry>, String> {
    if let Some(entries) = decode_packed(bytes) {
        return Ok(entries);
    }
    let count = bytes
        .get(..8)
        .and_then(|b| <[u8; 8]>::try_from(b).ok())
        .map(u64::from_le_bytes);
    match count {
        Some(count)
            if count.checked_mul(24).and_then(|n| n.checked_add(8)) == Some(bytes.len() as u64) =>
        {
            bincode::deserialize(bytes).map_err(|e| format!("not an inbox chunk: {e}"))
        }
        _ => Err(format!("not an inbox chunk ({} bytes)", bytes.len())),
    }
}

/// Entries in the packed form of [`encode_chunk`] (`None`: another form,
/// or damaged).
pub(crate) fn decode_packed(bytes: &[u8]) -> Option<Vec<InboxEntry>> {
    let mut decoded = Vec::new();
    walk_packed(bytes, |entry| decoded.push(entry))?;
    Some(decoded)
}

/// Hands every entry of `bytes` in the packed form to `visit`, checking
/// that they are all there and nothing follows them; returns their count
/// and the header's length (`None`: another form, or damaged).
fn walk_packed(bytes: &[u8], mut visit: impl FnMut(InboxEntry)) -> Option<(usize, usize)> {
    let mut entries = Entries::parse(bytes)?;
    let count = entries.remaining;
    // Each entry takes at least 10 bytes: a count beyond what is left is damage.
    if count > entries.rest.len() / 10 {
        return None;
    }
    let header = bytes.len() - entries.rest.len();
    let mut decoded = 0;
    for entry in entries.by_ref() {
        decoded += 1;
        visit(entry);
    }
    (decoded == count && entries.rest.is_empty()).then_some((count, header))
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn varint_len(v: u64) -> usize {
    (64 - v.leading_zeros() as usize).div_ceil(7).max(1)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn take_varint(rest: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&byte, tail) = rest.split_first()?;
        *rest = tail;
        let bits = u64::from(byte & 0x7F);
        if shift == 63 && bits > 1 {
            return None;
        }
        v |= bits << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift: the same sequence for a seed on every machine.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
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
    fn after_a_spill_the_newest_entries_hold_only_the_room_they_use() {
        // The cache counts the vector's capacity: a full chunk's worth of
        // room right after each spill made an order measure twice its size
        // until its next write-out.
        let mut inbox = Inbox::default();
        for v in 1..=INBOX_CHUNK as i64 + 1 {
            inbox.push(entry(v, v), 0);
        }
        assert_eq!(inbox.recent_len(), 1);
        assert!(
            inbox.recent.bytes.capacity() < INBOX_CHUNK / 2 * 11,
            "capacity {} after a spill",
            inbox.recent.bytes.capacity()
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
                assert_eq!(chunk.entries().len(), INBOX_CHUNK);
                spilled.push(chunk);
            }
        }
        assert_eq!(spilled.len(), 3);
        assert_eq!(inbox.recent_len(), 100 - 3 * INBOX_CHUNK);
        assert_eq!(inbox.len(), 100);
        for v in 1..=100 {
            match inbox.slot(v) {
                InboxSlot::Recent(Some(e)) => assert_eq!(e.version, v),
                InboxSlot::Chunk(chunk) => {
                    let chunk = spilled
                        .iter()
                        .find(|c| c.reference() == chunk)
                        .expect("chunk exists");
                    assert_eq!(chunk.find(v).map(|e| e.version), Some(v));
                    assert_eq!(&chunk.packed()[..], &encode_chunk(&chunk.entries())[..]);
                }
                other => panic!("version {v}: {other:?}"),
            }
        }
        assert_eq!(inbox.slot(0), InboxSlot::Absent);
        assert_eq!(inbox.slot(101), InboxSlot::Recent(None));
    }

    /// The inbox as it was held before it was packed: two lists.
    #[derive(Default)]
    struct Lists {
        recent: Vec<InboxEntry>,
        chunks: Vec<ChunkRef>,
    }

    impl Lists {
        fn push(
            &mut self,
            entry: InboxEntry,
            horizon: i64,
        ) -> (Option<Vec<InboxEntry>>, Vec<ChunkRef>) {
            self.recent.push(entry);
            let mut spilled = None;
            if self.recent.len() >= INBOX_CHUNK {
                let full = std::mem::take(&mut self.recent);
                self.chunks.extend(ChunkRef::of(&full));
                spilled = Some(full);
            }
            let expired = self
                .chunks
                .iter()
                .take_while(|c| c.last_applied_at_ms < horizon)
                .count();
            (spilled, self.chunks.drain(..expired).collect())
        }

        fn slot(&self, version: i64) -> InboxSlot {
            if let Some(first) = self.recent.first() {
                if version >= first.version {
                    return InboxSlot::Recent(
                        self.recent.iter().find(|e| e.version == version).copied(),
                    );
                }
            }
            match self.chunks.partition_point(|c| c.first_version <= version) {
                0 => InboxSlot::Absent,
                i => InboxSlot::Chunk(self.chunks[i - 1]),
            }
        }
    }

    /// Packed, the inbox answers every question as the two lists did:
    /// random version gaps, apply times that jump and go back, a horizon
    /// that expires chunks, and every look-up between pushes.
    #[test]
    fn the_packed_inbox_answers_as_the_lists_did() {
        let mut next = xorshift(0x2545_F491_4F6C_DD1D);
        for round in 0..40 {
            let (mut packed, mut lists) = (Inbox::default(), Lists::default());
            let mut version = (next() % 1_000) as i64 - 500;
            let mut at = 1_700_000_000_000i64 + (next() % 1_000) as i64;
            let mut horizon = i64::MIN;
            for _ in 0..(200 + round * 20) {
                version += 1 + (next() % if round % 2 == 0 { 3 } else { 100_000 }) as i64;
                at += (next() % 2_000) as i64 - 300;
                if next() % 40 == 0 {
                    horizon = at - (next() % 5_000) as i64;
                }
                let entry = InboxEntry {
                    version,
                    id_hash: next(),
                    applied_at_ms: at,
                };
                let (chunk, expired) = packed.push(entry, horizon);
                let (want_chunk, want_expired) = lists.push(entry, horizon);
                assert_eq!(chunk.as_ref().map(Chunk::entries), want_chunk);
                if let Some(chunk) = &chunk {
                    assert_eq!(
                        Some(chunk.reference()),
                        want_chunk.as_deref().and_then(ChunkRef::of)
                    );
                    assert_eq!(&chunk.packed()[..], &encode_chunk(&chunk.entries())[..]);
                }
                assert_eq!(expired, want_expired);
                assert_eq!(packed.recent_entries().collect::<Vec<_>>(), lists.recent);
                assert_eq!(packed.chunk_refs().collect::<Vec<_>>(), lists.chunks);
                assert_eq!(packed.recent_packed(), encode_chunk(&lists.recent));
                assert_eq!(
                    packed.len(),
                    lists.recent.len() + lists.chunks.len() * INBOX_CHUNK
                );
                for _ in 0..3 {
                    let probe = version - (next() % 3_000) as i64;
                    assert_eq!(packed.slot(probe), lists.slot(probe), "version {probe}");
                }
                let back =
                    Inbox::from_stored(packed.recent_packed(), packed.chunk_refs().collect());
                assert_eq!(back.as_ref(), Some(&packed));
            }
        }
    }

    /// Its serde form (bincode's, in states stored before layout 6) is the
    /// two lists, as before it was packed.
    #[test]
    fn the_serde_form_is_still_the_two_lists() {
        let mut inbox = Inbox::default();
        let mut lists = Lists::default();
        for v in 1..=100 {
            inbox.push(entry(v, v * 7), 0);
            lists.push(entry(v, v * 7), 0);
        }
        #[derive(Serialize)]
        struct Wire<'a> {
            recent: &'a [InboxEntry],
            chunks: &'a [ChunkRef],
        }
        let bytes = bincode::serialize(&inbox).unwrap();
        let want = bincode::serialize(&Wire {
            recent: &lists.recent,
            chunks: &lists.chunks,
        })
        .unwrap();
        assert_eq!(bytes, want);
        assert_eq!(bincode::deserialize::<Inbox>(&bytes).unwrap(), inbox);
    }

    /// Packed, a long-lived entity's inbox holds under half the heap bytes
    /// of the lists' capacity; an inbox of more newest entries than a
    /// one-byte count holds (an earlier layout's) packs and grows right.
    #[test]
    fn a_long_lived_inbox_is_held_in_under_half_the_bytes() {
        let mut inbox = Inbox::default();
        let mut lists = Lists::default();
        for v in 1..=1_000 {
            let e = entry(v, 1_700_000_000_000 + v * 20);
            inbox.push(e, 0);
            lists.push(e, 0);
        }
        let as_lists = lists.recent.capacity() * std::mem::size_of::<InboxEntry>()
            + lists.chunks.capacity() * std::mem::size_of::<ChunkRef>();
        assert!(
            inbox.heap_bytes() * 2 < as_lists,
            "{} against {as_lists}",
            inbox.heap_bytes()
        );
        let many: Vec<InboxEntry> = (1..=300).map(|v| entry(v, v)).collect();
        let mut run = Run::of(&many[..127]);
        assert_eq!(run.packed(), encode_chunk(&many[..127]));
        for e in &many[127..] {
            run.push(*e);
        }
        assert_eq!(run.packed(), encode_chunk(&many));
        assert_eq!(run.entries().collect::<Vec<_>>(), many);
    }

    #[test]
    fn expired_chunks_are_dropped_in_order() {
        let mut inbox = Inbox::default();
        for v in 1..=64 {
            inbox.push(entry(v, v), 0);
        }
        assert_eq!(inbox.chunk_refs().len(), 2);
        // The first chunk's newest entry was applied at 32.
        let (_, expired) = inbox.push(entry(65, 65), 33);
        assert_eq!(
            expired,
            vec![ChunkRef {
                first_version: 1,
                last_applied_at_ms: 32
            }]
        );
        assert_eq!(inbox.slot(5), InboxSlot::Absent);
        assert_eq!(
            inbox.slot(40),
            InboxSlot::Chunk(ChunkRef {
                first_version: 33,
                last_applied_at_ms: 64
            })
        );
    }

    #[test]
    fn a_chunk_round_trips_packed_at_under_half_of_bincodes_size() {
        let entries: Vec<InboxEntry> = (1..=INBOX_CHUNK as i64)
            .map(|v| entry(1_000 + v, 1_700_000_000_000 + v * 3))
            .collect();
        let packed = encode_chunk(&entries);
        let old = bincode::serialize(&entries).unwrap();
        assert_eq!(decode_chunk(&packed).unwrap(), entries);
        assert_eq!(
            decode_chunk(&old).unwrap(),
            entries,
            "the bincode form still reads"
        );
        assert!(
            packed.len() * 2 < old.len(),
            "{} against {}",
            packed.len(),
            old.len()
        );
    }

    #[test]
    fn any_entries_round_trip_packed() {
        let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
        for len in [0usize, 1, 2, 31, 32, 100] {
            for _ in 0..50 {
                let entries: Vec<InboxEntry> = (0..len)
                    .map(|_| InboxEntry {
                        version: next() as i64,
                        id_hash: next(),
                        applied_at_ms: next() as i64,
                    })
                    .collect();
                assert_eq!(decode_chunk(&encode_chunk(&entries)).unwrap(), entries);
            }
        }
        let extremes = [i64::MIN, -1, 0, 1, i64::MAX]
            .iter()
            .map(|&v| InboxEntry {
                version: v,
                id_hash: u64::MAX,
                applied_at_ms: v,
            })
            .collect::<Vec<_>>();
        assert_eq!(decode_chunk(&encode_chunk(&extremes)).unwrap(), extremes);
    }

    #[test]
    fn a_damaged_chunk_is_an_error_never_a_panic() {
        let entries: Vec<InboxEntry> = (1..=INBOX_CHUNK as i64)
            .map(|v| entry(v, 5_000 + v))
            .collect();
        for value in [
            encode_chunk(&entries),
            bincode::serialize(&entries).unwrap(),
        ] {
            for cut in 0..value.len() {
                assert!(decode_chunk(&value[..cut]).is_err(), "cut at {cut}");
            }
            let mut longer = value.clone();
            longer.push(0);
            assert!(decode_chunk(&longer).is_err());
        }
        assert!(decode_chunk(&[
            CHUNK_PACKED,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0xFF,
            0x7F
        ])
        .is_err());
        assert!(decode_chunk(&[CHUNK_PACKED, 0x80]).is_err());
    }

    /// Stored newest entries are held as they are when their count is
    /// written canonically, packed again when it is not (an overlong
    /// varint), and refused when damaged; either way the inbox grows and
    /// answers as one built by pushes.
    #[test]
    fn stored_newest_entries_are_held_as_they_are_or_packed_again() {
        let entries: Vec<InboxEntry> = (1..=3).map(|v| entry(v, 5_000 + v)).collect();
        let canonical = encode_chunk(&entries);
        let mut overlong = vec![CHUNK_PACKED, 0x83, 0x00];
        overlong.extend_from_slice(&canonical[2..]);
        let mut built = Inbox::default();
        for e in &entries {
            built.push(*e, 0);
        }
        for stored in [&canonical, &overlong] {
            let mut held = Inbox::from_stored(stored, Vec::new()).expect("decodes");
            assert_eq!(held, built);
            assert_eq!(held.recent_packed(), &canonical[..]);
            let next = entry(4, 5_004);
            held.push(next, 0);
            let mut grown = built.clone();
            grown.push(next, 0);
            assert_eq!(held, grown);
            assert_eq!(
                held.recent_entries().collect::<Vec<_>>(),
                grown.recent_entries().collect::<Vec<_>>()
            );
        }
        for cut in 0..canonical.len() {
            assert!(
                Inbox::from_stored(&canonical[..cut], Vec::new()).is_none(),
                "cut at {cut}"
            );
        }
        let empty = Inbox::from_stored(&[CHUNK_PACKED, 0], Vec::new()).expect("empty");
        assert_eq!(empty, Inbox::default());
    }
}
