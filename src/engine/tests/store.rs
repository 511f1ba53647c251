//! The tests of `engine::store`, with orders as the entity.

use crate::domains::orders::event::{EventType, Order};
use crate::domains::orders::OrderState;
use crate::domains::orders::Orders;
use crate::engine::inbox::{event_id_hash, Inbox, InboxEntry};
use crate::engine::outbox_record::OutboxRecord;
use crate::engine::store::*;
use crate::engine::stored_state::{decode_state, encode_state};

/// A state in bincode's fixed-width form, as orderly stored states before
/// layout 6 (field by field, the inbox as its derived form).
pub(super) fn fixed_width(state: &OrderState) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct FixedWidth<'a> {
        key: &'a str,
        version: i64,
        data: &'a Order,
        event_id: &'a str,
        occurred_at: i64,
        inbox: &'a Inbox,
    }
    bincode::serialize(&FixedWidth {
        key: &state.key,
        version: state.version,
        data: &state.data,
        event_id: &state.event_id,
        occurred_at: state.occurred_at,
        inbox: &state.inbox,
    })
    .expect("encodes")
}

pub(super) fn state(order: &str, version: i64) -> OrderState {
    OrderState {
        key: order.into(),
        version,
        data: Order {
            status: EventType::Paid,
            amount: 10,
            currency: "EUR".into(),
        },
        event_id: format!("{order}-{version}"),
        occurred_at: 1,
        inbox: Inbox::from_parts(
            &[InboxEntry {
                version,
                id_hash: event_id_hash(&format!("{order}-{version}")),
                applied_at_ms: 5,
            }],
            &[],
        ),
    }
}

/// The order of the pinned bytes, and the 32 entries of its one chunk.
fn golden_order() -> (OrderState, Vec<InboxEntry>) {
    let mut order = state("ord-golden-1", 33);
    let entries: Vec<InboxEntry> = (1..=32)
        .map(|v| InboxEntry {
            version: v,
            id_hash: event_id_hash(&format!("ord-golden-1-{v}")),
            applied_at_ms: 1_700_000_000_000 + v,
        })
        .collect();
    let recent: Vec<InboxEntry> = order.inbox.recent_entries().collect();
    order.inbox = Inbox::from_parts(
        &recent,
        &[crate::engine::inbox::ChunkRef {
            first_version: 1,
            last_applied_at_ms: 1_700_000_000_032,
        }],
    );
    order.occurred_at = 1_700_000_000_033;
    (order, entries)
}

/// The outbox row of the pinned bytes.
fn golden_outbox() -> OutboxRecord<EventType> {
    OutboxRecord {
        event_id: "ord-golden-1-33".into(),
        key: "ord-golden-1".into(),
        version: 33,
        from_status: Some(EventType::Created),
        to_status: EventType::Paid,
        occurred_at: 1_700_000_000_033,
        source_partition: 2,
        source_offset: 4_242,
        created_ms: 1_700_000_000_040,
        epoch: 1,
    }
}

/// The checkpoint of the pinned bytes.
fn golden_checkpoint() -> Checkpoint {
    Checkpoint {
        start_offset: 7,
        next_offset: 4_243,
        applied: 4_000,
        duplicates: 120,
        stale: 80,
        dead_lettered: 36,
        changelog_next: Some(9_001),
        replayed: 3,
        skipped: 2,
        epoch: 1,
    }
}

/// The pinned bytes as they are made now: one line a key, its value in hex
/// (`-`: a deletion), the changelog's checkpoint last.
fn golden_lines(
    order: &OrderState,
    entries: &[InboxEntry],
    outbox: &OutboxRecord<EventType>,
    checkpoint: &Checkpoint,
) -> String {
    let mut write = BatchWrite::with_changelog();
    write.put_state(order).unwrap();
    write.put_chunk(
        "ord-golden-1",
        &crate::engine::inbox::Chunk::of(entries).unwrap(),
    );
    write.put_outbox(outbox).unwrap();
    let expired = crate::engine::inbox::ChunkRef {
        first_version: 1,
        last_applied_at_ms: 1_699_000_000_032,
    };
    write.delete_chunk("ord-golden-0", &expired, false);
    // A chunk layout 6 or before wrote, under its order-grouped key.
    write.delete_chunk("ord-golden-2", &expired, true);
    let mut lines: Vec<String> = write
        .changes
        .take()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{} {}",
                hex(&c.key),
                c.value.as_ref().map_or("-".to_string(), |v| hex(v))
            )
        })
        .collect();
    lines.push(format!(
        "{} {}",
        hex(&changelog_checkpoint_key()),
        hex(&checkpoint.encode().unwrap())
    ));
    lines.join("\n") + "\n"
}

/// The bytes orderly stores and writes to its changelog (state, inbox
/// chunk, outbox row, checkpoint), pinned: stores and changelogs written
/// by an earlier build must stay readable. A change that alters them
/// fails here; `ORDERLY_BLESS_GOLDEN=1` rewrites the file only for a
/// deliberate format change (with a migration).
#[test]
fn stored_and_changelog_bytes_are_pinned() {
    let (order, entries) = golden_order();
    let outbox = golden_outbox();
    let checkpoint = golden_checkpoint();
    let now = golden_lines(&order, &entries, &outbox, &checkpoint);
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/stored-bytes.txt");
    if std::env::var_os("ORDERLY_BLESS_GOLDEN").is_some() {
        std::fs::write(&path, &now).unwrap();
    }
    let pinned = std::fs::read_to_string(&path).expect("tests/golden/stored-bytes.txt");
    assert_eq!(
        now, pinned,
        "the stored bytes changed: stores and changelogs written before would not read"
    );
    // And the pinned bytes read back as the values they were made from.
    let values: Vec<Vec<u8>> = pinned
        .lines()
        .map(|l| unhex(l.split(' ').nth(1).unwrap()))
        .collect();
    let read: OrderState = decode_state(&values[0]).unwrap();
    assert_eq!(read, order);
    // A state as orderly stored it before the packed form (store layout 5
    // and earlier, and changelogs written then) still reads.
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/state-fixed-width.txt");
    let old = unhex(
        std::fs::read_to_string(&path)
            .expect("tests/golden/state-fixed-width.txt")
            .trim(),
    );
    assert_eq!(old, fixed_width(&order), "the fixed-width form is pinned");
    assert_eq!(decode_state::<Orders>(&old), Ok(order.clone()));
    assert_eq!(
        crate::engine::inbox::decode_chunk(&values[1]).unwrap(),
        entries
    );
    // A chunk as orderly wrote it before the packed form (store layout 4 and
    // earlier, and changelogs written then) still reads.
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/chunk-bincode.txt");
    let old = std::fs::read_to_string(&path).expect("tests/golden/chunk-bincode.txt");
    assert_eq!(
        crate::engine::inbox::decode_chunk(&unhex(old.trim())).unwrap(),
        entries
    );
    let read: OutboxRecord<crate::domains::orders::event::EventType> =
        bincode::deserialize(&values[2]).unwrap();
    assert_eq!(read, outbox);
    let last = values.last().expect("the checkpoint line");
    assert_eq!(Checkpoint::decode(last).unwrap(), checkpoint);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    if text == "-" {
        return Vec::new();
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn batch_and_checkpoint_round_trip_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = Store::open(dir.path(), 8).unwrap();
        let p = store.partition("orders", 3).unwrap();
        let mut write = BatchWrite::default();
        write.put_state(&state("a", 1)).unwrap();
        write.put_state(&state("b", 2)).unwrap();
        let chunk: Vec<InboxEntry> = (1..=3)
            .map(|v| InboxEntry {
                version: v,
                id_hash: v as u64,
                applied_at_ms: v,
            })
            .collect();
        write.put_chunk("b", &crate::engine::inbox::Chunk::of(&chunk).unwrap());
        let cp = Checkpoint {
            start_offset: 0,
            next_offset: 2,
            applied: 2,
            ..Default::default()
        };
        p.commit_batch(write, &cp).unwrap();
        store.flush().unwrap();
    }
    // sled's background flusher lets go of the directory lock shortly
    // after the last handle drops; within one process, wait for it.
    let store = (0..100)
        .find_map(|_| {
            Store::open(dir.path(), 8).ok().or_else(|| {
                std::thread::sleep(std::time::Duration::from_millis(50));
                None
            })
        })
        .expect("reopen within 5 s");
    assert_eq!(store.partitions(), vec![("orders".to_string(), 3)]);
    let p = store.partition("orders", 3).unwrap();
    assert_eq!(p.checkpoint().unwrap().unwrap().next_offset, 2);
    assert_eq!(store.find::<Orders>("b").unwrap().unwrap().version, 2);
    let chunk = |first_version, last_applied_at_ms| crate::engine::inbox::ChunkRef {
        first_version,
        last_applied_at_ms,
    };
    assert_eq!(p.get_chunk("b", chunk(1, 3)).unwrap().unwrap().len(), 3);
    assert_eq!(p.get_chunk("b", chunk(2, 3)).unwrap(), None);
    let stats = store.stats().unwrap();
    assert_eq!(stats[0].orders, 2, "chunks are not orders");
    assert_eq!(stats[0].checkpoint.outcomes(), 2);
}

#[test]
fn a_restore_write_keeps_the_newest_record_of_each_key_and_counts_only_what_it_holds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 8).unwrap();
    let p = store.partition("orders", 0).unwrap();
    let key = |order: &str| to_changelog_key(&order_key(order));
    let value = |order: &str, version: i64| encode_state(&state(order, version)).unwrap();
    let mut write = RestoreWrite::default();
    write.restore(&key("a"), Some(&value("a", 1)));
    let one = write.bytes();
    write.restore(&key("a"), Some(&value("a", 2)));
    write.restore(&key("b"), Some(&value("b", 1)));
    write.restore(&key("a"), Some(&value("a", 3)));
    assert_eq!(write.keys(), 2);
    // "a" at versions 1 to 3 encodes to the same length: held once.
    assert_eq!(write.bytes(), 2 * one, "replaced values no longer count");
    // A deletion replaces a value too, and then holds only its key.
    write.restore(&key("b"), None);
    assert_eq!(write.bytes(), one + key("b").len());
    p.begin_restore().unwrap();
    p.tree
        .insert(order_key("b"), encode_state(&state("b", 1)).unwrap())
        .unwrap();
    let cp = Checkpoint {
        start_offset: 0,
        next_offset: 7,
        changelog_next: Some(5),
        ..Default::default()
    };
    p.finish_restore(write, false, &cp, None).unwrap();
    assert!(
        !p.restoring().unwrap(),
        "the mark is cleared with the checkpoint"
    );
    assert_eq!(
        p.get::<Orders>("a").unwrap().unwrap().version,
        3,
        "the newest record is written"
    );
    assert_eq!(
        p.get::<Orders>("b").unwrap(),
        None,
        "a restored deletion removes the key"
    );
    assert_eq!(p.checkpoint().unwrap(), Some(cp));
}

#[test]
fn changelog_keys_round_trip_and_never_collide_with_an_order_id() {
    for order_id in ["a", "order-1", "\u{7f}", "ÿ", "\u{10FFFF}", ""] {
        let key = order_key(order_id);
        let changelog = to_changelog_key(&key);
        assert_eq!(
            changelog,
            order_id.as_bytes(),
            "an order's changelog key is its id"
        );
        assert_eq!(from_changelog_key(&changelog), key);
    }
    for key in [
        CHECKPOINT_KEY.to_vec(),
        chunk_key(
            "o",
            &crate::engine::inbox::ChunkRef {
                first_version: 33,
                last_applied_at_ms: 1_700_000_000_000,
            },
        ),
        legacy_chunk_key("o", 33),
        RESTORING_KEY.to_vec(),
    ] {
        let changelog = to_changelog_key(&key);
        assert_eq!(changelog[0], CHANGELOG_RESERVED);
        assert!(
            std::str::from_utf8(&changelog).is_err(),
            "no valid order_id equals a reserved key"
        );
        assert_eq!(from_changelog_key(&changelog), key);
    }
}

#[test]
fn a_store_is_refused_for_another_group_or_topic() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 8).unwrap();
    let built = Binding {
        group: "g".into(),
        input_topic: "orders".into(),
        changelog_topic: "g-changelog".into(),
    };
    store.bind(&built).unwrap();
    store.bind(&built).unwrap();
    let other = Binding {
        group: "h".into(),
        ..built.clone()
    };
    let err = store.bind(&other).unwrap_err();
    assert!(matches!(err, StoreError::Binding { .. }));
    let text = err.to_string();
    assert!(
        text.contains("group g,") && text.contains("group h,"),
        "{text}"
    );
    let off = Binding {
        changelog_topic: String::new(),
        ..built
    };
    assert!(store
        .bind(&off)
        .unwrap_err()
        .to_string()
        .contains("no changelog"));
}

#[test]
fn unopenable_path_is_named_in_the_error() {
    // (A store held by another process is covered end to end in
    // tests/processor_mock.rs.)
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let err = Store::open(&file, 8).err().expect("a file is not a store");
    assert!(err.to_string().contains("not-a-dir"), "{err}");
}

#[test]
fn a_store_of_another_layout_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = sled::open(dir.path()).unwrap();
        db.open_tree("partition/orders/0")
            .unwrap()
            .insert("x", "y")
            .unwrap();
        db.flush().unwrap();
    }
    let store = (0..100).find_map(|_| match Store::open(dir.path(), 8) {
        // sled's background threads release its lock shortly after the drop.
        Err(StoreError::Open { .. } | StoreError::Locked { .. }) => {
            std::thread::sleep(std::time::Duration::from_millis(50));
            None
        }
        other => Some(other),
    });
    let err = store
        .expect("lock released")
        .err()
        .expect("old layout refused");
    assert!(matches!(err, StoreError::Format { .. }), "{err}");
    assert!(err.to_string().contains("rebuild"), "{err}");
}

/// An order half-way to its next chunk: 16 newest inbox entries, applied a
/// few milliseconds apart, and one chunk.
fn typical(order: &str) -> OrderState {
    let mut state = state(order, 48);
    state.event_id = "5f0c6f2e-0000-4000-8000-000000000030".into();
    state.occurred_at = 1_764_000_000_048;
    let recent: Vec<InboxEntry> = (33..=48)
        .map(|v| InboxEntry {
            version: v,
            id_hash: event_id_hash(&format!("{order}-{v}")),
            applied_at_ms: 1_764_000_000_000 + 3 * v,
        })
        .collect();
    state.inbox = Inbox::from_parts(
        &recent,
        &[crate::engine::inbox::ChunkRef {
            first_version: 1,
            last_applied_at_ms: 1_764_000_000_096,
        }],
    );
    state
}

/// Packed, a typical order's state takes under half of the fixed-width
/// form's bytes, and reads back as it was.
#[test]
fn a_state_round_trips_packed_at_under_half_of_the_fixed_width_size() {
    let order = typical("ord-000017");
    let packed = encode_state(&order).unwrap();
    let fixed = fixed_width(&order);
    assert!(
        packed.len() * 2 < fixed.len(),
        "packed {} bytes against {} fixed-width",
        packed.len(),
        fixed.len()
    );
    assert_eq!(decode_state::<Orders>(&packed), Ok(order.clone()));
    assert_eq!(decode_state::<Orders>(&fixed), Ok(order));
}

/// A damaged state value is an error naming it, never a panic: every
/// truncation, a trailing byte, any single byte changed.
#[test]
fn a_damaged_state_is_an_error_never_a_panic() {
    let order = typical("ord-000017");
    let packed = encode_state(&order).unwrap();
    for len in 0..packed.len() {
        assert!(
            decode_state::<Orders>(&packed[..len]).is_err(),
            "truncated to {len}"
        );
    }
    let mut longer = packed.clone();
    longer.push(0);
    assert!(decode_state::<Orders>(&longer).is_err(), "a trailing byte");
    for at in 0..packed.len() {
        for flip in [0x01u8, 0x80, 0xFF] {
            let mut damaged = packed.clone();
            damaged[at] ^= flip;
            // Some changes still decode (a hash byte, a digit of the key):
            // what matters is an answer, not a panic.
            let _ = decode_state::<Orders>(&damaged);
        }
    }
}

proptest::proptest! {
    /// Any state round-trips packed: extreme versions and times, any
    /// number of newest entries, out-of-order apply times, any chunks.
    #[test]
    fn any_state_round_trips_packed(
        key in ".{0,40}",
        version in proptest::num::i64::ANY,
        amount in proptest::num::i64::ANY,
        occurred_at in proptest::num::i64::ANY,
        recent in proptest::collection::vec(
            (proptest::num::i64::ANY, proptest::num::u64::ANY), 0..32),
        chunks in proptest::collection::vec(
            (proptest::num::i64::ANY, proptest::num::i64::ANY), 0..4),
    ) {
        let mut order = state(&key, version);
        order.data.amount = amount;
        order.occurred_at = occurred_at;
        let mut versions: Vec<i64> = recent.iter().map(|(v, _)| *v).collect();
        versions.sort_unstable();
        versions.dedup();
        let recent: Vec<InboxEntry> = versions
            .iter()
            .zip(&recent)
            .map(|(v, (at, hash))| InboxEntry { version: *v, id_hash: *hash, applied_at_ms: *at })
            .collect();
        let chunks: Vec<crate::engine::inbox::ChunkRef> = chunks
            .iter()
            .map(|(first, last)| crate::engine::inbox::ChunkRef {
                first_version: *first,
                last_applied_at_ms: *last,
            })
            .collect();
        order.inbox = Inbox::from_parts(&recent, &chunks);
        let packed = encode_state(&order).unwrap();
        proptest::prop_assert_eq!(decode_state::<Orders>(&packed), Ok(order.clone()));
        proptest::prop_assert_eq!(decode_state::<Orders>(&fixed_width(&order)), Ok(order));
    }
}

/// A changelog written across an upgrade holds states in both forms: a
/// restore, key by key or into packed runs, reads each as it was.
#[test]
fn a_restore_from_a_changelog_of_both_state_forms_reads_each() {
    for packed_runs in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 8).unwrap();
        let p = store.partition("orders", 0).unwrap();
        let key = |order: &str| to_changelog_key(&order_key(order));
        let (old, new) = (typical("ord-old"), typical("ord-new"));
        let mut write = RestoreWrite::default();
        write.restore(&key("ord-old"), Some(&fixed_width(&old)));
        write.restore(&key("ord-new"), Some(&encode_state(&new).unwrap()));
        p.begin_restore().unwrap();
        p.finish_restore(write, packed_runs, &Checkpoint::starting_at(0), None)
            .unwrap();
        assert_eq!(
            p.get::<Orders>("ord-old").unwrap(),
            Some(old),
            "{packed_runs}"
        );
        assert_eq!(
            p.get::<Orders>("ord-new").unwrap(),
            Some(new),
            "{packed_runs}"
        );
    }
}
