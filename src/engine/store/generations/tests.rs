//! Generations written by write-outs, read newest first, and merged, with a
//! crash in the middle of a merge: every key reads its newest value (or its
//! absence) before, during and after, and across a reopen.

use super::*;
use crate::engine::store::layout::{order_key, CHECKPOINT_KEY};
use crate::engine::store::{BatchWrite, Checkpoint, Store};

/// Values large enough that a generation of a few keys spans several runs.
fn value(tag: &str, key: &str) -> Vec<u8> {
    let mut out = format!("{tag}:{key}:").into_bytes();
    out.resize(9_000, b'.');
    out
}

/// One write-out: `puts` as (key, tag), `removes` deleted.
fn write_out(tree: &PartitionStore, puts: &[(&str, &str)], removes: &[&str], offset: i64) {
    let mut write = BatchWrite::default();
    for (key, tag) in puts {
        write.insert(order_key(key), value(tag, key));
    }
    for key in removes {
        write.remove(order_key(key));
    }
    let mut checkpoint = Checkpoint::starting_at(0);
    checkpoint.next_offset = offset;
    tree.commit_batch(write, &checkpoint).expect("write-out");
}

fn read(tree: &PartitionStore, key: &str) -> Option<String> {
    tree.lookup(&order_key(key))
        .expect("read")
        .map(|v| String::from_utf8_lossy(&v[..v.len().min(12)]).into_owned())
}

fn tag_of(read: Option<String>) -> Option<String> {
    read.map(|r| r.split(':').next().unwrap_or_default().to_string())
}

/// What the scan of every state reads: (key, tag).
fn scanned(tree: &PartitionStore) -> Vec<(String, String)> {
    let mut out = Vec::new();
    tree.scan_packable(b'o', |key, value| {
        let tag = String::from_utf8_lossy(value);
        out.push((
            String::from_utf8_lossy(&key[1..]).into_owned(),
            tag.split(':').next().unwrap_or_default().to_string(),
        ));
        Ok(())
    })
    .expect("scan");
    out
}

/// Keys: `one` in the oldest generation only, `many` in all three (newest
/// `v3`), `gone` written then deleted in the newest, `never` in none, and
/// fillers so that each generation spans several runs.
fn three_generations(tree: &PartitionStore) {
    let fill: Vec<String> = (0..8).map(|i| format!("fill{i}")).collect();
    let mut first: Vec<(&str, &str)> = vec![("one", "v1"), ("many", "v1"), ("gone", "v1")];
    first.extend(fill.iter().map(|k| (k.as_str(), "v1")));
    write_out(tree, &first, &[], 10);
    let second: Vec<(&str, &str)> = vec![("many", "v2")];
    write_out(tree, &second, &[], 20);
    let mut third: Vec<(&str, &str)> = vec![("many", "v3")];
    third.extend(fill.iter().take(4).map(|k| (k.as_str(), "v3")));
    write_out(tree, &third, &["gone"], 30);
}

fn assert_newest(tree: &PartitionStore, when: &str) {
    assert_eq!(tag_of(read(tree, "one")), Some("v1".into()), "{when}: one");
    assert_eq!(
        tag_of(read(tree, "many")),
        Some("v3".into()),
        "{when}: many"
    );
    assert_eq!(read(tree, "gone"), None, "{when}: gone");
    assert_eq!(read(tree, "never"), None, "{when}: never");
    for i in 0..8 {
        let want = if i < 4 { "v3" } else { "v1" };
        assert_eq!(
            tag_of(read(tree, &format!("fill{i}"))),
            Some(want.into()),
            "{when}: fill{i}"
        );
    }
    let keys: Vec<(String, String)> = scanned(tree);
    assert_eq!(keys.len(), 10, "{when}: {keys:?}");
    assert!(
        keys.iter().all(|(k, _)| k != "gone" && k != "never"),
        "{when}"
    );
    assert!(keys.contains(&("many".into(), "v3".into())), "{when}");
    let checkpoint = tree.checkpoint().expect("checkpoint").expect("written");
    assert_eq!(checkpoint.next_offset, 30, "{when}");
}

/// Run keys stored for generation `id`.
fn runs_of(tree: &PartitionStore, id: u32) -> usize {
    tree.tree
        .range(runs::generation_start(id, &[])..runs::generation_end(id))
        .count()
}

fn open(dir: &std::path::Path) -> (Store, PartitionStore) {
    let store = Store::open_when_released(dir, 8);
    let tree = store.partition("orders", 0).expect("tree");
    (store, tree)
}

#[test]
fn a_key_in_no_run_one_or_several_reads_its_newest_value_across_a_crash_in_a_merge() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let (store, tree) = open(dir.path());
        // Held: the test runs the merge itself, and stops it in the middle.
        tree.generations.merging.store(true, Ordering::Release);
        three_generations(&tree);
        assert_eq!(tree.generations.live().len(), 3);
        assert!(tree
            .generations
            .live()
            .iter()
            .all(|g| g.last_keys.len() > 1 || g.keys < 3));
        assert_newest(&tree, "three generations");
        let merged_id = tree.generations.lock().next_id;
        assert!(!tree.merge(MergeStop::AfterRuns(2)).expect("merge"));
        assert_eq!(
            runs_of(&tree, merged_id),
            2,
            "the merge wrote two runs, then stopped"
        );
        assert_eq!(tree.generations.live().len(), 3, "nothing switched");
        assert_newest(&tree, "in the middle of a merge");
        store.flush().expect("flush");
        // The crash: every handle goes, nothing more is written.
    }
    let (store, tree) = open(dir.path());
    tree.generations.merging.store(true, Ordering::Release);
    assert_newest(&tree, "reopened after the crash");
    let live: Vec<u32> = tree.generations.live().iter().map(|g| g.id).collect();
    assert_eq!(live.len(), 3);
    let orphans: usize = (0..8)
        .filter(|id| !live.contains(id))
        .map(|id| runs_of(&tree, id))
        .sum();
    assert_eq!(orphans, 0, "the crashed merge's runs are deleted at open");
    // The merge again, to the end this time.
    while tree.merge(MergeStop::Never).expect("merge") {}
    assert_eq!(tree.generations.live().len(), 1, "all merged into one");
    let only = tree.generations.live()[0].id;
    assert_newest(&tree, "merged");
    // The merged generations' runs go with the next change of the list.
    write_out(&tree, &[("one", "v1")], &[], 30);
    let live: Vec<u32> = tree.generations.live().iter().map(|g| g.id).collect();
    let stored: usize = (0..32).map(|id| runs_of(&tree, id)).sum();
    let live_runs: usize = live.iter().map(|id| runs_of(&tree, *id)).sum();
    assert_eq!(
        stored, live_runs,
        "the merged generations' runs are deleted"
    );
    assert!(live.contains(&only));
    store.flush().expect("flush");
    drop((store, tree));
    let (_store, tree) = open(dir.path());
    assert_newest(&tree, "merged, reopened");
    assert_eq!(
        tree.generations.live().first().map(|g| g.keys),
        Some(10),
        "the merge to the bottom left the deletion out"
    );
}

#[test]
fn write_outs_merge_on_their_own_and_keep_the_count_logarithmic() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_store, tree) = open(dir.path());
    let keys: Vec<String> = (0..40).map(|i| format!("k{i:02}")).collect();
    for round in 0..64 {
        let tag = format!("r{round}");
        let puts: Vec<(&str, &str)> = keys
            .iter()
            .skip(round % 5)
            .step_by(5)
            .map(|k| (k.as_str(), tag.as_str()))
            .collect();
        write_out(&tree, &puts, &[], round as i64 + 1);
        assert!(tree.generations.live().len() <= 8, "round {round}");
    }
    for (i, key) in keys.iter().enumerate() {
        let last = (0..64)
            .rev()
            .find(|round| round % 5 == i % 5)
            .expect("a round");
        assert_eq!(tag_of(read(&tree, key)), Some(format!("r{last}")), "{key}");
    }
}

#[test]
fn a_tree_of_layout_7_is_brought_over_with_its_runs_shadowed_by_its_keyed_states() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let db = sled::open(dir.path()).expect("sled");
        db.insert(b"format", &7u32.to_be_bytes()).expect("format");
        let tree = db.open_tree(b"partition/orders/0").expect("tree");
        let mut builder = RunBuilder::default();
        let mut put =
            |key: &str, v: Option<&str>| builder.push(&order_key(key), v.map(str::as_bytes));
        assert!(put("a", Some("run-a")).is_none());
        assert!(put("b", Some("run-b")).is_none());
        assert!(put("c", Some("run-c")).is_none());
        let (last, run) = builder.finish().expect("a run");
        tree.insert(runs::run_key(0, &last), run).expect("run");
        tree.insert(RUNS_KEY, &1u32.to_be_bytes()).expect("count");
        tree.insert(order_key("b"), "tree-b").expect("state");
        tree.insert(order_key("c"), "").expect("tombstone");
        tree.insert(order_key("d"), "tree-d").expect("state");
        tree.insert(
            CHECKPOINT_KEY,
            Checkpoint::starting_at(0).encode().expect("encodes"),
        )
        .expect("checkpoint");
        db.flush().expect("flush");
    }
    let (_store, tree) = open(dir.path());
    let raw = |key: &str| {
        tree.lookup(&order_key(key))
            .expect("read")
            .map(|v| v.to_vec())
    };
    assert_eq!(raw("a"), Some(b"run-a".to_vec()));
    assert_eq!(raw("b"), Some(b"tree-b".to_vec()));
    assert_eq!(raw("c"), None);
    assert_eq!(raw("d"), Some(b"tree-d".to_vec()));
    assert_eq!(
        tree.tree.scan_prefix([ORDER_PREFIX]).count(),
        0,
        "states left the tree"
    );
    assert_eq!(tree.generations.live().len(), 2);
    write_out(&tree, &[("a", "new")], &[], 5);
    assert_eq!(tag_of(read(&tree, "a")), Some("new".into()));
}

/// A store whose indexes an earlier build of layout 8 stored whole (one
/// value under `g` and the generation's number) opens and reads as before.
#[test]
fn an_index_stored_whole_by_an_earlier_build_is_read() {
    let dir = tempfile::tempdir().expect("dir");
    {
        let (store, tree) = open(dir.path());
        three_generations(&tree);
        let ids: Vec<u32> = tree.generations.live().iter().map(|g| g.id).collect();
        assert!(!ids.is_empty());
        for id in ids {
            let mut whole = Vec::new();
            let mut batch = sled::Batch::default();
            for item in tree.tree.scan_prefix(index_key(id)) {
                let (key, piece) = item.expect("piece");
                whole.extend_from_slice(&piece);
                batch.remove(key);
            }
            batch.insert(&index_key(id), whole);
            tree.tree.apply_batch(batch).expect("whole");
        }
        store.flush().expect("flush");
    }
    let (_store, tree) = open(dir.path());
    assert_newest(&tree, "reopened with whole indexes");
}

/// The index of a generation too large for one sled leaf under the blob
/// threshold is stored in pieces: write-outs beside it leave no blob files
/// (before, each one wrote the leaf of the whole index to a blob of its
/// own, and the blobs outlived it).
#[test]
fn write_outs_beside_a_large_index_leave_no_blob_files() {
    let dir = tempfile::tempdir().expect("dir");
    let (store, tree) = open(dir.path());
    let mut write = BatchWrite::default();
    for i in 0..150_000 {
        write.insert(order_key(&format!("k{i:07}")), b"v".to_vec());
    }
    tree.commit_batch(write, &Checkpoint::starting_at(1))
        .expect("large write-out");
    let largest = tree
        .generations
        .live()
        .iter()
        .map(|g| g.encode().len())
        .max();
    assert!(largest > Some(128 << 10), "index of {largest:?} bytes");
    for offset in 2..22 {
        write_out(&tree, &[("small", "v")], &[], offset);
    }
    store.flush().expect("flush");
    let blobs = std::fs::read_dir(dir.path().join("blobs"))
        .map(|files| files.count())
        .unwrap_or(0);
    assert_eq!(blobs, 0, "blob files in the store");
    assert_eq!(tag_of(read(&tree, "k0100000")), Some("v".into()));
}
