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

impl ChunkRef {
    /// The reference to a chunk of `entries` (by version; `None`: empty):
    /// what the inbox records when they fill, and what their store key is
    /// made of, so the two always agree.
    pub(crate) fn of(entries: &[InboxEntry]) -> Option<ChunkRef> {
        Some(ChunkRef {
            first_version: entries.first()?.version,
            last_applied_at_ms: entries.last()?.applied_at_ms,
        })
    }
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
    /// In this chunk (read it to know).
    Chunk(ChunkRef),
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
            i => InboxSlot::Chunk(self.chunks[i - 1]),
        }
    }

    /// Appends the entry of an applied event. Returns the entries that fill a
    /// chunk (to be written under their own key) and the chunks that expired
    /// before `horizon_ms` (to be deleted).
    pub fn push(
        &mut self,
        entry: InboxEntry,
        horizon_ms: i64,
    ) -> (Option<Vec<InboxEntry>>, Vec<ChunkRef>) {
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
            self.chunks.extend(ChunkRef::of(&full));
            spilled = Some(full);
        }
        let expired = self
            .chunks
            .iter()
            .take_while(|c| c.last_applied_at_ms < horizon_ms)
            .count();
        let dropped = self.chunks.drain(..expired).collect();
        (spilled, dropped)
    }

    /// Rough heap bytes, for the cache budget.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.recent.capacity() * std::mem::size_of::<InboxEntry>()
            + self.chunks.capacity() * std::mem::size_of::<ChunkRef>()
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
    let (mut version, mut at) = (0i64, 0i64);
    for entry in entries {
        put_varint(&mut out, zigzag(entry.version.wrapping_sub(version)));
        put_varint(&mut out, zigzag(entry.applied_at_ms.wrapping_sub(at)));
        out.extend_from_slice(&entry.id_hash.to_le_bytes());
        (version, at) = (entry.version, entry.applied_at_ms);
    }
    out
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
    let (&tag, mut rest) = bytes.split_first()?;
    if tag != CHUNK_PACKED {
        return None;
    }
    let count = usize::try_from(take_varint(&mut rest)?).ok()?;
    // Each entry takes at least 10 bytes: a count beyond what is left is damage.
    if count > rest.len() / 10 {
        return None;
    }
    let mut entries = Vec::with_capacity(count);
    let (mut version, mut at) = (0i64, 0i64);
    for _ in 0..count {
        version = version.wrapping_add(unzigzag(take_varint(&mut rest)?));
        at = at.wrapping_add(unzigzag(take_varint(&mut rest)?));
        let (hash, tail) = rest.split_first_chunk::<8>()?;
        rest = tail;
        entries.push(InboxEntry {
            version,
            id_hash: u64::from_le_bytes(*hash),
            applied_at_ms: at,
        });
    }
    rest.is_empty().then_some(entries)
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
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
                InboxSlot::Chunk(chunk) => {
                    let chunk = spilled
                        .iter()
                        .find(|c| c[0].version == chunk.first_version)
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
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
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
}
