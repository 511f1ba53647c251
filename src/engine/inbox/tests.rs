//! The inbox's unit tests: its packed form against the two lists it once
//! was, round trips of the stored bytes, damage, and the heap it holds.

use serde::Serialize;

use super::encoding::{Run, CHUNK_PACKED};
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
            let back = Inbox::from_stored(packed.recent_packed(), packed.chunk_refs().collect());
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
