//! The patched sled (`vendor/sled/PATCH.md`): a write-out's batch lets the
//! epoch advance while it is applied, so what its inserts replace is freed
//! as it goes; it applies the keys of one leaf to one copy of it, and
//! holds what a map would; it caches the leaves of keys written once apart,
//! in a budget of their own; a read waiting on a batch's lock does not hold
//! back what the batch frees; it counts a read's pulled leaf against the
//! cache within a few reads; a freed segment gives its disk space back;
//! a leaf of large values splits for its bytes, so a read pulls a few of
//! them, and does not merge back; a group's leaf is cut into such leaves
//! before it is written, so a batch of runs is logged about once; and the
//! batch is still all or nothing across a SIGKILL. The tests of leaves of
//! packed runs are in `sled_batches/leaves.rs`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::BufRead;
use std::path::Path;
use std::process::Stdio;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The tests of leaves of packed runs (the sixth to the tenth changes).
#[path = "sled_batches/leaves.rs"]
mod leaves;

/// Counts the bytes live on the heap, and the most seen since the last reset.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Every byte ever allocated.
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: usize = 20_000;

fn key(i: usize) -> [u8; 9] {
    let mut key = [b'o'; 9];
    key[1..].copy_from_slice(&(i as u64).to_be_bytes());
    key
}

fn open(path: &Path) -> sled::Tree {
    open_with(path, None, 0)
}

/// The tree, with the leaves of `cold_prefix` cached apart in `cold_bytes`.
fn open_with(path: &Path, cold_prefix: Option<u8>, cold_bytes: u64) -> sled::Tree {
    let db = sled::Config::new()
        .path(path)
        .cache_capacity(64 << 20)
        .cold_prefix(cold_prefix)
        .cold_cache_capacity(cold_bytes)
        .open()
        .expect("open the store");
    db.open_tree("partition/0").expect("open the tree")
}

/// The store at `path` with a cache of `bytes`, and its partition tree.
/// A store just dropped keeps its file lock until its flusher thread has
/// ended (on a loaded machine, a while): a reopen waits up to 20 s for it.
fn open_with_cache(path: &Path, bytes: u64) -> (sled::Db, sled::Tree) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let db = loop {
        match sled::Config::new().path(path).cache_capacity(bytes).open() {
            Ok(db) => break db,
            Err(e) if std::time::Instant::now() < deadline && e.to_string().contains("lock") => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("open the store: {e:?}"),
        }
    };
    let tree = db.open_tree("partition/0").expect("open the tree");
    (db, tree)
}

/// Run `i`'s key, as a generation of 64 runs names it (`r`, the
/// generation, the run).
fn run_key(i: u64) -> Vec<u8> {
    let mut k = vec![b'r'];
    k.extend_from_slice(&(i / 64).to_be_bytes());
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// Run `i`'s value, `len` bytes.
fn packed_run(i: u64, len: usize) -> Vec<u8> {
    vec![(i % 251) as u8; len]
}

/// The value of every key in seeding round `round` (the batch is round 2).
fn value(round: u8) -> Vec<u8> {
    vec![round; 300]
}

/// A tree of [`KEYS`] keys written twice and flushed, and a batch that
/// replaces every one of them.
fn seeded_with_a_batch_replacing_every_key(path: &Path) -> (sled::Tree, sled::Batch) {
    let tree = open(path);
    for round in 0..2u8 {
        let mut batch = sled::Batch::default();
        for i in 0..KEYS {
            batch.insert(&key(i), value(round));
        }
        tree.apply_batch(batch).expect("seed");
        tree.flush().expect("flush");
    }
    let mut batch = sled::Batch::default();
    for i in 0..KEYS {
        batch.insert(&key(i), value(2));
    }
    (tree, batch)
}

/// One write-out's worth of replaced values: before the patch, sled held
/// every node copy and io buffer the batch replaced until the batch ended
/// (one pin of the epoch for all of it), about 1.5 KiB per key here.
#[test]
fn a_large_batch_frees_what_it_replaces_as_it_goes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let (tree, batch) = seeded_with_a_batch_replacing_every_key(dir.path());
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    tree.apply_batch(batch).expect("the batch");
    let grew = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    assert_eq!(tree.len(), KEYS);
    assert_eq!(
        tree.get(key(KEYS - 1)).unwrap().as_deref(),
        Some(&value(2)[..])
    );
    // The batch's own values are counted in `before`; what it may add is the
    // tree's new nodes and some garbage in flight, not a copy per key.
    assert!(
        grew < 4 << 20,
        "applying {KEYS} keys held {} MiB at its peak",
        grew >> 20
    );
    drop(tree);
}

/// A read that waits for a batch's lock must not hold the epoch back while it
/// waits: before the fourth change, `get` pinned the epoch and then blocked
/// on the lock the batch holds, so nothing the batch replaced (node copies,
/// io buffers) could be freed until it ended, whatever the batch's own
/// repins did. orderly's partition tasks read states while another
/// partition's write-out applies its batch.
#[test]
fn a_read_waiting_on_a_batch_does_not_hold_back_its_garbage() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let (tree, batch) = seeded_with_a_batch_replacing_every_key(dir.path());
    let done = std::sync::atomic::AtomicBool::new(false);
    let reads = AtomicUsize::new(0);
    let before = LIVE.load(Ordering::Relaxed);
    let grew = std::thread::scope(|scope| {
        scope.spawn(|| {
            // Reads without a pause, so one of them waits on the batch's
            // lock for as long as the batch is applied.
            while !done.load(Ordering::Acquire) {
                tree.get(key(7)).expect("read");
                reads.fetch_add(1, Ordering::Relaxed);
            }
        });
        while reads.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
        tree.apply_batch(batch).expect("the batch");
        let grew = PEAK.load(Ordering::Relaxed).saturating_sub(before);
        done.store(true, Ordering::Release);
        grew
    });
    eprintln!(
        "a batch of {KEYS} keys beside a waiting read: the heap grew {} KiB at its peak",
        grew >> 10
    );
    assert_eq!(
        tree.get(key(KEYS - 1)).unwrap().as_deref(),
        Some(&value(2)[..])
    );
    assert!(
        grew < 4 << 20,
        "applying {KEYS} keys beside a waiting read held {} MiB at its peak",
        grew >> 20
    );
    drop(tree);
}

const CHILD_ENV: &str = "ORDERLY_TEST_SLED_BATCH_CHILD";
const BATCH_KEYS: usize = 2_000;
const READY: &str = "orderly-sled-batches: first batch applied";

/// The tests share the process's allocation counters: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// In the child: batches of `BATCH_KEYS` keys (each many repin intervals),
/// every key of batch `g` holding `g`, with `gen` = `g`, until killed.
fn write_batches_forever(path: &Path) -> ! {
    let tree = open(path);
    let mut generation = read_generation(&tree).unwrap_or(0);
    let mut first = true;
    loop {
        generation += 1;
        let mut batch = sled::Batch::default();
        for i in 0..BATCH_KEYS {
            batch.insert(&key(i), &generation.to_be_bytes());
        }
        for j in 0..RUNS_PER_BATCH {
            let (key, value) = batch_run(generation, j);
            batch.insert(key, value);
        }
        batch.insert("gen", &generation.to_be_bytes());
        tree.apply_batch(batch).expect("batch");
        if first {
            // Tells the parent a batch is durable; nothing more is printed,
            // so the child never blocks on a full pipe.
            tree.flush().expect("flush");
            println!("{READY}");
            first = false;
        }
        if generation % 3 == 0 {
            tree.flush().expect("flush");
        }
    }
}

/// Runs of 1-5 KiB each batch of the SIGKILL test adds at the right edge,
/// where the tenth change cuts a group's leaf into new leaves.
const RUNS_PER_BATCH: u64 = 32;

/// Run `j` of the batch of `generation`: its key, and a value of 1-5 KiB
/// that starts with the generation.
fn batch_run(generation: u64, j: u64) -> (Vec<u8>, Vec<u8>) {
    let mut value = generation.to_be_bytes().to_vec();
    value.resize(1024 + (j as usize * 373) % 4096, j as u8);
    (run_key(generation * RUNS_PER_BATCH + j), value)
}

fn read_generation(tree: &sled::Tree) -> Option<u64> {
    let bytes = tree.get("gen").expect("read gen")?;
    Some(u64::from_be_bytes(
        bytes.as_ref().try_into().expect("8 bytes"),
    ))
}

fn spawn_child(path: &Path) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "a_batch_is_all_or_nothing_across_sigkill",
            "--nocapture",
        ])
        .env(CHILD_ENV, path)
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the writer")
}

/// The patch lets the epoch advance inside a batch, not the batch's log
/// reservation go: a writer killed mid-batch, over and over, leaves every
/// key of the last recovered batch at that batch's generation. Each batch
/// also adds runs at the right edge, which the tenth change writes as new
/// leaves cut from a group's copy: those of every recovered batch are
/// there, and none of a batch not recovered.
#[test]
fn a_batch_is_all_or_nothing_across_sigkill() {
    if let Some(path) = std::env::var_os(CHILD_ENV) {
        write_batches_forever(Path::new(&path));
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut seen = Vec::new();
    for round in 0..12u64 {
        let mut child = spawn_child(dir.path());
        let stdout = child.stdout.take().expect("piped stdout");
        let ready = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line == READY);
        assert!(ready, "round {round}: the writer applied no batch");
        // Kill it at a different point of its later batches each round.
        std::thread::sleep(Duration::from_millis((round * 37) % 200));
        // SAFETY: signalling a child we spawned and have not reaped.
        let killed = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
        assert_eq!(killed, 0, "SIGKILL the writer");
        child.wait().expect("reap the writer");
        let tree = open(dir.path());
        let generation = read_generation(&tree);
        for i in 0..BATCH_KEYS {
            let got = tree
                .get(key(i))
                .expect("read")
                .map(|v| u64::from_be_bytes(v.as_ref().try_into().expect("8 bytes")));
            assert_eq!(
                got, generation,
                "round {round}: key {i} against the batch of generation {generation:?}"
            );
        }
        // The runs of every batch up to the recovered one, and none after.
        let last = generation.unwrap_or(0);
        let runs = tree.scan_prefix([b'r']).count() as u64;
        assert_eq!(
            runs,
            last * RUNS_PER_BATCH,
            "round {round}: runs after batch {last}"
        );
        for (batch, j) in (1..=last).flat_map(|g| (0..RUNS_PER_BATCH).map(move |j| (g, j))) {
            let (key, value) = batch_run(batch, j);
            let got = tree.get(key).expect("read a run");
            assert_eq!(
                got.as_deref(),
                Some(&value[..]),
                "round {round}: run {j} of batch {batch}"
            );
        }
        seen.push(last);
        drop(tree);
    }
    // Each writer's first batch was durable before the kill, so every round
    // recovered a newer batch than the last, never an empty store.
    assert!(
        seen.windows(2).all(|w| w[1] > w[0]),
        "generations recovered: {seen:?}"
    );
}

/// The patched batch applies the keys of one leaf to one copy of it: a
/// model check that every batch, of new keys at the tree's right edge (as
/// inbox chunks), random keys (as states), updates and removals, leaves the
/// tree holding exactly what a map holds, before and after a reopen. The
/// right-edge keys are cold (cached apart, in 64 KiB), so most of their
/// leaves are evicted and read back from the log by the checks.
#[test]
fn batches_grouped_by_leaf_hold_what_a_map_holds() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut model = std::collections::BTreeMap::<Vec<u8>, Vec<u8>>::new();
    let mut seed = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut edge = 0_u64;
    let check =
        |tree: &sled::Tree, model: &std::collections::BTreeMap<Vec<u8>, Vec<u8>>, when: &str| {
            let held: Vec<(Vec<u8>, Vec<u8>)> = tree
                .iter()
                .map(|item| {
                    let (k, v) = item.expect("read");
                    (k.to_vec(), v.to_vec())
                })
                .collect();
            let expected: Vec<(Vec<u8>, Vec<u8>)> =
                model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            assert_eq!(held.len(), expected.len(), "{when}: key count");
            assert!(held == expected, "{when}: the tree and the map differ");
            for (k, v) in model.iter().step_by(7) {
                assert_eq!(
                    tree.get(k).expect("get").as_deref(),
                    Some(&v[..]),
                    "{when}: get"
                );
            }
        };
    {
        let tree = open_with(dir.path(), Some(b'c'), 64 << 10);
        for round in 0..60 {
            let mut batch = sled::Batch::default();
            let keys = 1 + (next() % 1_500) as usize;
            for _ in 0..keys {
                let value = vec![(next() % 251) as u8; 1 + (next() % 400) as usize];
                match next() % 10 {
                    // New keys at the right edge, in order.
                    0..=3 => {
                        edge += 1;
                        let mut k = vec![b'c'];
                        k.extend_from_slice(&edge.to_be_bytes());
                        batch.insert(k.clone(), value.clone());
                        model.insert(k, value);
                    }
                    // Random keys: new ones and updates.
                    4..=7 => {
                        let mut k = vec![b'o'];
                        k.extend_from_slice(&(next() % 20_000).to_be_bytes());
                        batch.insert(k.clone(), value.clone());
                        model.insert(k, value);
                    }
                    // Removals of held keys (and of keys never written).
                    _ => {
                        let k = if next() % 2 == 0 {
                            let mut k = vec![b'c'];
                            k.extend_from_slice(&(next() % (edge + 1)).to_be_bytes());
                            k
                        } else {
                            let mut k = vec![b'o'];
                            k.extend_from_slice(&(next() % 20_000).to_be_bytes());
                            k
                        };
                        batch.remove(k.clone());
                        model.remove(&k);
                    }
                }
            }
            tree.apply_batch(batch).expect("batch");
            if round % 10 == 9 {
                check(&tree, &model, &format!("after batch {round}"));
            }
        }
        tree.flush().expect("flush");
    }
    let tree = open_with(dir.path(), Some(b'c'), 64 << 10);
    check(&tree, &model, "after a reopen");
}

/// Writes 24 MiB of keys at the right edge of the `b'j'` range (as inbox
/// chunks are) beside a few hot keys, in batches; returns the bytes the
/// heap grew by from the open to after the last batch is flushed, and
/// checks what a read of the oldest and the newest keys gives.
fn heap_held_after_writing_once(cold: Option<u8>) -> usize {
    const MIB: usize = 24;
    const VALUE: usize = 400;
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = open_with(dir.path(), cold, 2 << 20);
    let before = LIVE.load(Ordering::Relaxed);
    let chunk_key = |i: u64| {
        let mut k = vec![b'j'];
        k.extend_from_slice(&i.to_be_bytes());
        k
    };
    let keys = (MIB << 20) / VALUE;
    let mut written = 0_u64;
    while (written as usize) < keys {
        let mut batch = sled::Batch::default();
        for _ in 0..500 {
            batch.insert(chunk_key(written), vec![(written % 251) as u8; VALUE]);
            written += 1;
        }
        // A few states, rewritten in every batch.
        for i in 0..50_u64 {
            batch.insert(key(i as usize).to_vec(), vec![7_u8; 100]);
        }
        tree.apply_batch(batch).expect("batch");
    }
    tree.flush().expect("flush");
    for i in [0, 1, written / 2, written - 1] {
        assert_eq!(
            tree.get(chunk_key(i)).expect("get").as_deref(),
            Some(&vec![(i % 251) as u8; VALUE][..]),
            "key {i}"
        );
    }
    let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    drop(tree);
    held
}

/// Leaves of keys written once (`Config::cold_prefix`) evict each other
/// within their own budget (2 MiB here) instead of filling the 64 MiB cache:
/// after 24 MiB of them the heap grew by 33 MiB without, 13 MiB with (the
/// rest is the log's buffers, the index and evicted pages' log pointers).
#[test]
fn leaves_written_once_are_cached_in_their_own_budget() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let without = heap_held_after_writing_once(None);
    let with = heap_held_after_writing_once(Some(b'j'));
    assert!(
        without > 20 << 20,
        "without a cold prefix the cache should hold the written leaves: {} MiB",
        without >> 20
    );
    assert!(
        with < 16 << 20 && with * 2 < without,
        "with a cold prefix of 2 MiB the heap held {} MiB ({} MiB without)",
        with >> 20,
        without >> 20
    );
}
