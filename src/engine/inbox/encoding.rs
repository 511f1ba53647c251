//! The inbox's encoding: its entries, chunk references and chunks, and the
//! bytes the store keeps of them (the packed form of a chunk's value and of
//! the newest entries, the fixed-width hash of an event id). The stored
//! format: states and chunks written by every earlier release must still
//! read, so nothing here changes what is written without a new layout.

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
    pub(super) reference: ChunkRef,
    pub(super) packed: sled::IVec,
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
pub(super) struct Run {
    /// Empty, or [`CHUNK_PACKED`], the count (a varint) and the entries.
    pub(super) bytes: Vec<u8>,
    pub(super) len: u32,
    /// The newest entry's version and apply time: the next entry is
    /// packed as its difference from them.
    pub(super) last_version: i64,
    pub(super) last_at: i64,
}

/// The packed form of no entries.
const EMPTY_RUN: [u8; 2] = [CHUNK_PACKED, 0];

impl Run {
    pub(super) fn of(entries: &[InboxEntry]) -> Run {
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
    pub(super) fn from_stored(bytes: &[u8]) -> Option<Run> {
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

    pub(super) fn push(&mut self, entry: InboxEntry) {
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

    pub(super) fn entries(&self) -> Entries<'_> {
        Entries::of(self.packed())
    }

    /// The stored form (that of no entries when empty).
    pub(super) fn packed(&self) -> &[u8] {
        if self.bytes.is_empty() {
            &EMPTY_RUN
        } else {
            &self.bytes
        }
    }

    /// The packed bytes, leaving the run empty.
    pub(super) fn take(&mut self) -> Vec<u8> {
        let bytes = std::mem::take(&mut self.bytes);
        *self = Run::default();
        bytes
    }
}

/// The entries of a packed run, decoded one at a time. Stops at the count,
/// or early at bytes that do not decode (never from a run this module
/// packed; [`decode_packed`] checks stored ones).
pub(super) struct Entries<'a> {
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
pub(super) struct Refs {
    pub(super) bytes: Vec<u8>,
    pub(super) len: u32,
    /// The newest reference: the next is packed as its difference.
    last: ChunkRef,
    /// The oldest reference's newest apply time (`i64::MAX`: none), which
    /// every applied event checks for expiry without reading the bytes.
    pub(super) oldest_at: i64,
}

impl Refs {
    pub(super) fn empty() -> Refs {
        Refs {
            oldest_at: i64::MAX,
            ..Refs::default()
        }
    }

    pub(super) fn of(refs: impl IntoIterator<Item = ChunkRef>) -> Refs {
        let mut packed = Refs::empty();
        for chunk in refs {
            packed.push(chunk);
        }
        packed
    }

    pub(super) fn push(&mut self, chunk: ChunkRef) {
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

    pub(super) fn iter(&self) -> RefIter<'_> {
        RefIter {
            rest: &self.bytes,
            remaining: self.len as usize,
            previous: ChunkRef::default(),
        }
    }

    /// Removes and returns the `n` oldest references.
    pub(super) fn drain_front(&mut self, n: usize) -> Vec<ChunkRef> {
        let mut all: Vec<ChunkRef> = self.iter().collect();
        let rest = all.split_off(n.min(all.len()));
        *self = Refs::of(rest);
        all
    }
}

/// Packed references, decoded one at a time.
pub(super) struct RefIter<'a> {
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

/// The first byte of a chunk value in the packed form ([`encode_chunk`]).
pub(super) const CHUNK_PACKED: u8 = 0xC2;

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
