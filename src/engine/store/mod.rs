//! The embedded sled store. One tree per input partition holds that
//! partition's order states (each with its recent inbox entries), older
//! inbox chunks, and its checkpoint (next input offset and durable
//! counters). A write-out is one `apply_batch` on that tree: states, chunks
//! and checkpoint move together or not at all. `Store::flush` makes every
//! earlier batch of every tree durable with one sync.
//!
//! Keys of a partition tree:
//!
//! * `\x00checkpoint`: the [`Checkpoint`];
//! * `o` + key: the entity's [`crate::engine::entity::State`] (bincode);
//! * `i` + order id length (u32, big-endian) + order id + first version
//!   (i64, big-endian): a chunk of `INBOX_CHUNK`
//!   inbox entries;
//! * `x` + source offset (i64, big-endian): a pending
//!   [`crate::engine::outbox_record::OutboxRecord`] (bincode), deleted once
//!   the relay's publish was acknowledged;
//! * `r` + generation + last key: a packed run of states and chunks written
//!   by a restore from nothing, and `\x00runs`: how many generations of
//!   them the tree holds ([`crate::engine::runs`]). A state or chunk key in
//!   the tree shadows the runs; while the tree has runs, an empty value
//!   under such a key is a tombstone (written only where a run holds the
//!   key).
//!
//! The default tree holds `format`: the layout version, checked at open, and
//! `binding`: the group, input topic and changelog topic the store was built
//! for (a store is refused for another).
//!
//! Every key but the format and binding has a changelog form
//! (`to_changelog_key`): an order's key is its `order_id`, every other key
//! is prefixed with `0xFF`, a byte no UTF-8 text (so no valid `order_id`)
//! contains. The changelog value is the sled value, byte for byte.
//!
//! Here: the layout, the checkpoint, the store and its trees. A tree's reads
//! and write-outs are in `partition.rs`, its restore and the reads through
//! packed runs in `restore.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::engine::entity::{Entity, State};
use crate::engine::inbox::ChunkRef;
use crate::engine::runs::RUNS_KEY;

mod partition;
mod restore;

pub use partition::BatchWrite;
pub(crate) use partition::ChangeRecord;
pub use restore::RestoreWrite;

pub(crate) const CHECKPOINT_KEY: &[u8] = b"\x00checkpoint";
/// Present while a restore from the changelog is under way: the tree's
/// states may be ahead of its checkpoint until the restore ends.
pub(crate) const RESTORING_KEY: &[u8] = b"\x00restoring";
/// Present after `orderly repair` moved the partition back, until its
/// checkpoint passes the value (an input offset, big-endian): status
/// changes and dead letters of records below it were published already.
pub(crate) const REPUBLISHED_BELOW_KEY: &[u8] = b"\x00republished-below";
const BINDING_KEY: &[u8] = b"binding";
/// Prefix of changelog keys that are not orders (no UTF-8 text has it).
pub(crate) const CHANGELOG_RESERVED: u8 = 0xFF;
const ORDER_PREFIX: u8 = b'o';
/// Inbox chunks as layouts 2 to 6 keyed them: by order, then first version.
const LEGACY_CHUNK_PREFIX: u8 = b'i';
/// Inbox chunks as layout 7 keys them: by the time of their newest entry
/// first ([`chunk_key`]).
const CHUNK_PREFIX: u8 = b'j';
const OUTBOX_PREFIX: u8 = b'x';
/// The share of `store.cache_capacity_mb` given, beside it, to the leaves of
/// inbox chunks (sled's cold leaves), and its floor: sled splits that
/// budget into 256 shards, each of which should hold a leaf or two (16
/// chunks, about 8 KiB).
const COLD_SHARE: u64 = 16;
const COLD_MIN_BYTES: u64 = 2 << 20;
const FORMAT_KEY: &[u8] = b"format";
/// The store layout this build reads and writes. 1: whole inbox in the
/// state value (before write coalescing); 2: recent entries plus chunks;
/// 3: the checkpoint records its changelog position; 4: packed runs; 5:
/// inbox chunks packed ([`crate::engine::inbox::encode_chunk`]); 6: states
/// packed ([`crate::engine::stored_state`]); 7: inbox chunks keyed by the
/// time of their newest entry ([`chunk_key`]). Each of 3, 4, 5 and 6 is a
/// layout-7 store without what came later (states and chunks in bincode's
/// form still read, chunks under their order-grouped keys still found and
/// deleted), and is marked 7 at open, so an older orderly refuses it from
/// then on.
pub(crate) const FORMAT: u32 = 7;
/// The layouts a store is opened from as it is, and marked [`FORMAT`].
const FORMATS_OPENED_AS_IS: [u32; 4] = [3, 4, 5, 6];
const TREE_PREFIX: &str = "partition/";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot open the store at {path}: {cause}. If another orderly process is running on this store, stop it first; \
         if the store is damaged, move the directory aside and rebuild it (see docs/replay-and-restore.md, \"Rebuilding the store\")"
    )]
    Open { path: PathBuf, cause: sled::Error },
    /// Another process holds the store's lock (sled opens a store in one
    /// process at a time; it has no read-only mode).
    #[error(
        "the store at {path} is in use by another process (a running processor on this store holds it: a store \
         opens in one process at a time)"
    )]
    Locked { path: PathBuf },
    #[error("store I/O error at {path}: {cause}")]
    Io { path: PathBuf, cause: sled::Error },
    #[error("corrupt value under key {key:?} in tree {tree}: {message}")]
    Corrupt {
        tree: String,
        key: String,
        message: String,
    },
    #[error(
        "the store at {path} has layout {found}, this orderly reads layout {FORMAT}; \
         move the directory aside and rebuild it (see docs/replay-and-restore.md, \"Rebuilding the store\")"
    )]
    Format { path: PathBuf, found: String },
    #[error(
        "the store at {path} was built for {found}, and this configuration is for {wanted}; point store.path at \
         another directory (each group, input topic and changelog topic needs its own store)"
    )]
    Binding {
        path: PathBuf,
        found: String,
        wanted: String,
    },
}

/// The next offset to read after processing `offset`. The only `+ 1` between
/// "last processed" and "next to read".
pub(crate) fn next_offset_after(offset: i64) -> i64 {
    offset + 1
}

/// Where a partition stands, written in the same atomic batch as the states
/// it covers. `applied + duplicates + stale + dead_lettered` always equals
/// `next_offset - start_offset + replayed - skipped` (for topics without
/// offset gaps; [`Checkpoint::consumed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The first offset this store processed on this partition.
    pub start_offset: i64,
    /// The next input offset to process: every record before it is covered.
    pub next_offset: i64,
    /// Records applied (durable counter).
    pub applied: u64,
    /// Records dropped as duplicates (durable counter).
    pub duplicates: u64,
    /// Records dropped as stale (durable counter).
    pub stale: u64,
    /// Records dead-lettered (durable counter).
    pub dead_lettered: u64,
    /// The changelog offset after the checkpoint record this state reflects
    /// (`None` without a changelog, or before the first write-out to it).
    /// Below the changelog's end offset means the store is behind it.
    pub changelog_next: Option<i64>,
    /// Records read again after `orderly replay` moved the partition back.
    pub replayed: u64,
    /// Records passed over by a replay that moved the partition forward.
    pub skipped: u64,
    /// Incremented by `orderly replay --reset-state`: state of an older
    /// epoch is never restored.
    pub epoch: u32,
}

impl Checkpoint {
    /// A partition's first checkpoint: nothing processed before `offset`.
    pub fn starting_at(offset: i64) -> Self {
        Checkpoint {
            start_offset: offset,
            next_offset: offset,
            ..Default::default()
        }
    }

    /// The records this checkpoint covers, whatever their outcome.
    pub fn outcomes(&self) -> u64 {
        self.counts().total()
    }

    /// The durable counters, as one value.
    pub fn counts(&self) -> crate::engine::outcomes::Outcomes {
        crate::engine::outcomes::Outcomes {
            applied: self.applied,
            duplicates: self.duplicates,
            stale: self.stale,
            dead_lettered: self.dead_lettered,
        }
    }

    /// A checkpoint's bytes, as stored and as its changelog record carries them.
    pub fn encode(&self) -> Result<Vec<u8>, String> {
        encode(self)
    }

    /// The inverse of [`Self::encode`].
    pub fn decode(bytes: &[u8]) -> Result<Checkpoint, String> {
        bincode::deserialize(bytes).map_err(|e| format!("not a checkpoint: {e}"))
    }

    /// Records consumed: `next_offset - start_offset + replayed - skipped`,
    /// which [`Self::outcomes`] always equals.
    pub fn consumed(&self) -> i64 {
        self.next_offset - self.start_offset + self.replayed as i64 - self.skipped as i64
    }
}

/// One partition's checkpoint, as `state stats` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStats {
    pub topic: String,
    pub partition: i32,
    #[serde(flatten)]
    pub checkpoint: Checkpoint,
    pub orders: usize,
    /// Outbox records not yet published.
    pub outbox_pending: usize,
}

/// The embedded sled store: one tree per input partition with its
/// entities' states, inbox chunks, pending status changes and checkpoint.
/// A clone shares the same database.
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    path: PathBuf,
    /// Each partition tree's count of run generations, shared by every
    /// [`PartitionStore`] of the tree (a restore adds generations that the
    /// partition's task must see).
    runs: Arc<Mutex<HashMap<String, Arc<AtomicU32>>>>,
}

impl Store {
    /// Opens (or creates) the store. Fails with the path named when another
    /// process holds it or it cannot be read.
    pub fn open(path: &Path, cache_capacity_mb: u64) -> Result<Self, StoreError> {
        let cache_bytes = cache_capacity_mb.saturating_mul(1024 * 1024);
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache_bytes)
            // Leaves of inbox chunks, written once at the tree's right edge
            // and seldom read again, evict each other in a budget of their
            // own instead of filling the cache (vendor/sled/PATCH.md).
            .cold_prefix(Some(CHUNK_PREFIX))
            .cold_cache_capacity((cache_bytes / COLD_SHARE).max(COLD_MIN_BYTES))
            .open()
            .map_err(|cause| match cause {
                // sled 0.34 words its lock failure as an I/O error of kind
                // Other, with the flock's WouldBlock in the text.
                sled::Error::Io(ref io)
                    if io.kind() == std::io::ErrorKind::WouldBlock
                        || io.to_string().contains("could not acquire lock") =>
                {
                    StoreError::Locked {
                        path: path.to_path_buf(),
                    }
                }
                cause => StoreError::Open {
                    path: path.to_path_buf(),
                    cause,
                },
            })?;
        let store = Store {
            db,
            path: path.to_path_buf(),
            runs: Arc::default(),
        };
        store.check_format()?;
        Ok(store)
    }

    /// Refuses a store of another layout; marks a new store with this one.
    fn check_format(&self) -> Result<(), StoreError> {
        let found = self.db.get(FORMAT_KEY).map_err(|e| self.io(e))?;
        match found {
            Some(bytes) if bytes.as_ref() == FORMAT.to_be_bytes() => Ok(()),
            Some(bytes)
                if FORMATS_OPENED_AS_IS
                    .iter()
                    .any(|f| bytes.as_ref() == f.to_be_bytes()) =>
            {
                self.db
                    .insert(FORMAT_KEY, &FORMAT.to_be_bytes())
                    .map_err(|e| self.io(e))?;
                Ok(())
            }
            Some(bytes) => Err(StoreError::Format {
                path: self.path.clone(),
                found: <[u8; 4]>::try_from(bytes.as_ref())
                    .map(|b| u32::from_be_bytes(b).to_string())
                    .unwrap_or_else(|_| format!("{:?}", bytes.as_ref())),
            }),
            None if self.partitions().is_empty() => {
                self.db
                    .insert(FORMAT_KEY, &FORMAT.to_be_bytes())
                    .map_err(|e| self.io(e))?;
                Ok(())
            }
            None => Err(StoreError::Format {
                path: self.path.clone(),
                found: "1 (no layout mark)".into(),
            }),
        }
    }

    /// The directory it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records what the store is built for on first use; refuses a store
    /// built for another group, input topic or changelog topic.
    pub fn bind(&self, binding: &Binding) -> Result<(), StoreError> {
        let wanted = binding.to_string();
        match self.db.get(BINDING_KEY).map_err(|e| self.io(e))? {
            Some(found) if found.as_ref() == wanted.as_bytes() => Ok(()),
            Some(found) => Err(StoreError::Binding {
                path: self.path.clone(),
                found: String::from_utf8_lossy(&found).into_owned(),
                wanted,
            }),
            None => {
                self.db
                    .insert(BINDING_KEY, wanted.as_bytes())
                    .map_err(|e| self.io(e))?;
                Ok(())
            }
        }
    }

    fn io(&self, cause: sled::Error) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            cause,
        }
    }

    /// The tree of one input partition.
    pub fn partition(&self, topic: &str, partition: i32) -> Result<PartitionStore, StoreError> {
        let name = format!("{TREE_PREFIX}{topic}/{partition}");
        let tree = self.db.open_tree(name.as_bytes()).map_err(|e| self.io(e))?;
        let runs = {
            // A poisoned lock only means another thread panicked while
            // holding it; the map itself is always whole.
            let mut shared = self.runs.lock().unwrap_or_else(|e| e.into_inner());
            match shared.get(&name) {
                Some(runs) => runs.clone(),
                None => {
                    let count = match tree.get(RUNS_KEY).map_err(|e| self.io(e))? {
                        None => 0,
                        Some(bytes) => <[u8; 4]>::try_from(bytes.as_ref())
                            .map(u32::from_be_bytes)
                            .map_err(|_| StoreError::Corrupt {
                                tree: name.clone(),
                                key: "runs".into(),
                                message: format!("{} bytes, not 4", bytes.len()),
                            })?,
                    };
                    let runs = Arc::new(AtomicU32::new(count));
                    shared.insert(name.clone(), runs.clone());
                    runs
                }
            }
        };
        Ok(PartitionStore {
            tree,
            name,
            path: self.path.clone(),
            runs,
        })
    }

    /// Every partition tree in the store, as (topic, partition).
    pub fn partitions(&self) -> Vec<(String, i32)> {
        let mut out: Vec<(String, i32)> = self
            .db
            .tree_names()
            .iter()
            .filter_map(|name| {
                let name = std::str::from_utf8(name).ok()?.strip_prefix(TREE_PREFIX)?;
                let (topic, partition) = name.rsplit_once('/')?;
                Some((topic.to_string(), partition.parse().ok()?))
            })
            .collect();
        out.sort();
        out
    }

    /// Makes every earlier write in every tree durable (one sync). Returns the
    /// bytes flushed.
    pub fn flush(&self) -> Result<usize, StoreError> {
        self.db.flush().map_err(|e| self.io(e))
    }

    /// Per-partition checkpoints, without counting orders (cheap: one key
    /// per partition).
    pub fn checkpoints(&self) -> Result<Vec<(String, i32, Checkpoint)>, StoreError> {
        let mut out = Vec::new();
        for (topic, partition) in self.partitions() {
            let checkpoint = self
                .partition(&topic, partition)?
                .checkpoint()?
                .unwrap_or_default();
            out.push((topic, partition, checkpoint));
        }
        Ok(out)
    }

    /// Per-partition checkpoints and order counts (scans every order).
    pub fn stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        let mut out = Vec::new();
        for (topic, partition) in self.partitions() {
            let tree = self.partition(&topic, partition)?;
            let checkpoint = tree.checkpoint()?.unwrap_or_default();
            let orders = tree.state_count()?;
            let outbox_pending = tree.tree.scan_prefix([OUTBOX_PREFIX]).count();
            out.push(PartitionStats {
                topic,
                partition,
                checkpoint,
                orders,
                outbox_pending,
            });
        }
        Ok(out)
    }

    /// The state of one entity, looked up in every partition tree (an
    /// entity lives in the tree of the partition its key hashes to).
    pub fn find<E: Entity>(&self, key: &str) -> Result<Option<State<E>>, StoreError> {
        for (topic, partition) in self.partitions() {
            if let Some(state) = self.partition(&topic, partition)?.get(key)? {
                return Ok(Some(state));
            }
        }
        Ok(None)
    }

    /// Visits every entity state in the store.
    pub fn for_each<E: Entity>(&self, mut visit: impl FnMut(State<E>)) -> Result<(), StoreError> {
        self.for_each_in_partition(|_, state| visit(state))
    }

    /// Visits every entity state in the store with its input partition.
    pub fn for_each_in_partition<E: Entity>(
        &self,
        mut visit: impl FnMut(i32, State<E>),
    ) -> Result<(), StoreError> {
        for (topic, partition) in self.partitions() {
            let tree = self.partition(&topic, partition)?;
            tree.scan_packable(ORDER_PREFIX, |key, value| {
                visit(partition, tree.decode_state(key, value)?);
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// What a store is built for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub group: String,
    pub input_topic: String,
    /// Empty without a changelog.
    pub changelog_topic: String,
}

impl std::fmt::Display for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let changelog = if self.changelog_topic.is_empty() {
            "no changelog"
        } else {
            self.changelog_topic.as_str()
        };
        write!(
            f,
            "group {}, input topic {}, changelog {}",
            self.group, self.input_topic, changelog
        )
    }
}

/// A key of a partition tree in its changelog form: an order's `order_id`,
/// anything else behind [`CHANGELOG_RESERVED`].
pub(crate) fn to_changelog_key(key: &[u8]) -> Vec<u8> {
    match key.split_first() {
        Some((&ORDER_PREFIX, order_id)) => order_id.to_vec(),
        _ => {
            let mut out = Vec::with_capacity(1 + key.len());
            out.push(CHANGELOG_RESERVED);
            out.extend_from_slice(key);
            out
        }
    }
}

/// The tree key of a changelog key.
pub(crate) fn from_changelog_key(key: &[u8]) -> Vec<u8> {
    match key.split_first() {
        Some((&CHANGELOG_RESERVED, rest)) => rest.to_vec(),
        _ => {
            let mut out = Vec::with_capacity(1 + key.len());
            out.push(ORDER_PREFIX);
            out.extend_from_slice(key);
            out
        }
    }
}

/// The changelog key of a partition's checkpoint record.
pub(crate) fn changelog_checkpoint_key() -> Vec<u8> {
    to_changelog_key(CHECKPOINT_KEY)
}

/// One input partition's tree.
#[derive(Clone)]
pub struct PartitionStore {
    pub(crate) tree: sled::Tree,
    name: String,
    path: PathBuf,
    /// Generations of packed runs in the tree (0: none), shared with every
    /// other handle of the tree.
    runs: Arc<AtomicU32>,
}

/// True for the keys packed runs may hold: states and inbox chunks.
fn packable(key: &[u8]) -> bool {
    matches!(
        key.first(),
        Some(&ORDER_PREFIX) | Some(&CHUNK_PREFIX) | Some(&LEGACY_CHUNK_PREFIX)
    )
}

pub(crate) fn order_key(order_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + order_id.len());
    key.push(ORDER_PREFIX);
    key.extend_from_slice(order_id.as_bytes());
    key
}

fn outbox_key(source_offset: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(9);
    key.push(OUTBOX_PREFIX);
    key.extend_from_slice(&source_offset.to_be_bytes());
    key
}

/// An inbox chunk's key: the time its newest entry was applied, then its
/// order and first version. A chunk is written once, when it fills, so new
/// chunks land at the tree's right edge, among the other chunks of the same
/// write-out; a leaf of chunks is written when it fills and never again
/// until its chunks expire, oldest first. (Keyed by order, as layouts 2 to
/// 6 did, every write-out inserted into a leaf per order it changed,
/// copying and rewriting leaves of older chunks, and read evicted ones
/// back from disk to do it.)
pub(crate) fn chunk_key(order_id: &str, chunk: &ChunkRef) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + 8 + 4 + order_id.len() + 8);
    key.push(CHUNK_PREFIX);
    // Sign bit flipped: big-endian bytes then sort as the numbers do.
    let at = (chunk.last_applied_at_ms as u64) ^ (1 << 63);
    key.extend_from_slice(&at.to_be_bytes());
    key.extend_from_slice(&(order_id.len() as u32).to_be_bytes());
    key.extend_from_slice(order_id.as_bytes());
    key.extend_from_slice(&chunk.first_version.to_be_bytes());
    key
}

/// An inbox chunk's key in layouts 2 to 6 (and in changelogs they wrote):
/// its order, then its first version.
pub(crate) fn legacy_chunk_key(order_id: &str, first_version: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + 4 + order_id.len() + 8);
    key.push(LEGACY_CHUNK_PREFIX);
    key.extend_from_slice(&(order_id.len() as u32).to_be_bytes());
    key.extend_from_slice(order_id.as_bytes());
    key.extend_from_slice(&first_version.to_be_bytes());
    key
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    bincode::serialize(value).map_err(|e| e.to_string())
}
