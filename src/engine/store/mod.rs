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
//! * `o` + key: the entity's [`crate::engine::entity::State`], held in the
//!   tree's generations of packed runs only, never under this key in the
//!   tree itself (`generations.rs`): every write-out writes the states it
//!   changed as one new generation (`r` + generation + last key: runs of
//!   about 4 KiB; `g` + generation + piece: its run index and Bloom filter,
//!   in pieces of 4 KiB, so no leaf of them passes sled's blob threshold;
//!   `\x00generations`: the live generations, oldest first), in the same
//!   batch as its checkpoint, and generations are merged by size;
//! * `j` + time + order id + first version (`i` + order id + first version
//!   in layouts 2 to 6): a chunk of `INBOX_CHUNK` inbox entries, written key
//!   by key; a restore into a cleared tree packs them into its generations
//!   too, and a chunk key in the tree shadows them (an empty value, while
//!   runs are there, is a tombstone);
//! * `x` + source offset (i64, big-endian): a pending
//!   [`crate::engine::outbox_record::OutboxRecord`] (bincode), deleted once
//!   the relay's publish was acknowledged.
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
//! Here: the store and its trees. The keys and the layout version are in
//! `layout.rs`, the checkpoint in `checkpoint.rs`, the errors in
//! `error.rs`; a tree's reads and write-outs in `partition.rs`, its restore
//! and its lookups and scans in `restore.rs`, its generations of runs (kept
//! in memory in `live.rs`) written, read and merged in `generations.rs`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::engine::entity::{Entity, State};
use live::Generations;

mod checkpoint;
mod error;
mod generations;
mod layout;
mod live;
mod partition;
mod restore;

pub use checkpoint::Checkpoint;
pub(crate) use error::StoreError;
pub(crate) use layout::changelog_checkpoint_key;
/// The layout's keys and values, for the store's unit tests
/// (`domains/orders/engine_tests`).
#[cfg(test)]
pub(crate) use layout::*;
pub(crate) use partition::ChangeRecord;
pub use partition::{BatchWrite, PartitionStore};
pub use restore::RestoreWrite;

/// The layout this build reads and writes (also named by the unit tests).
pub(crate) use layout::FORMAT;
use layout::{
    BINDING_KEY, CHUNK_PREFIX, FORMATS_OPENED_AS_IS, FORMAT_KEY, LEGACY_CHUNK_PREFIX, ORDER_PREFIX,
    OUTBOX_PREFIX,
};

/// The share of `store.cache_capacity_mb` given, beside it, to the leaves of
/// inbox chunks (sled's cold leaves), and its floor: sled splits that
/// budget into 256 shards, each of which should hold a leaf or two (16
/// chunks, about 8 KiB).
const COLD_SHARE: u64 = 16;
const COLD_MIN_BYTES: u64 = 2 << 20;
const TREE_PREFIX: &str = "partition/";

/// The next offset to read after processing `offset`. The only `+ 1` between
/// "last processed" and "next to read".
pub(crate) fn next_offset_after(offset: i64) -> i64 {
    offset + 1
}

/// One partition's checkpoint, as `state stats` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStats {
    pub topic: String,
    pub partition: i32,
    #[serde(flatten)]
    pub checkpoint: Checkpoint,
    pub orders: usize,
    /// Bytes of the live states, keys and stored values.
    #[serde(default)]
    pub state_bytes: u64,
    /// Bytes of the inbox chunks, keys and stored values (the event ids
    /// an order remembers past those its state holds).
    #[serde(default)]
    pub inbox_bytes: u64,
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
    /// Each partition tree's generations of packed runs, shared by every
    /// [`PartitionStore`] of the tree (a restore adds generations that the
    /// partition's task must see).
    generations: Arc<Mutex<HashMap<String, Arc<Generations>>>>,
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
            generations: Arc::default(),
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
        // A poisoned lock only means another thread panicked while holding
        // it; the map itself is always whole.
        let mut shared = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(generations) = shared.get(&name) {
            return Ok(PartitionStore {
                tree,
                name,
                path: self.path.clone(),
                generations: generations.clone(),
            });
        }
        let mut store = PartitionStore {
            tree,
            name: name.clone(),
            path: self.path.clone(),
            generations: Arc::new(Generations::empty()),
        };
        let generations = Arc::new(store.load_generations()?);
        shared.insert(name, generations.clone());
        store.generations = generations;
        Ok(store)
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

    /// [`Store::open`], retried while an earlier handle in this process
    /// still holds the lock (sled releases it on a background thread, later
    /// under load): a test's reopen after a simulated crash.
    #[cfg(test)]
    pub(crate) fn open_when_released(path: &Path, cache_capacity_mb: u64) -> Store {
        (0..100)
            .find_map(|_| match Store::open(path, cache_capacity_mb) {
                Err(StoreError::Locked { .. }) => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    None
                }
                other => Some(other),
            })
            .expect("the earlier handle lets go of the lock")
            .expect("the store opens")
    }

    /// Bytes the store's files take on disk (blocks allocated).
    pub fn disk_bytes(&self) -> Result<u64, StoreError> {
        fn walk(dir: &Path, total: &mut u64) -> std::io::Result<()> {
            use std::os::unix::fs::MetadataExt;
            for entry in std::fs::read_dir(dir)? {
                let entry = entry?;
                // sled deletes segments of its own as it goes.
                let meta = match entry.metadata() {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    meta => meta?,
                };
                if meta.is_dir() {
                    walk(&entry.path(), total)?;
                } else {
                    *total += meta.blocks() * 512;
                }
            }
            Ok(())
        }
        let mut total = 0;
        walk(self.path(), &mut total).map_err(|e| StoreError::Io {
            path: self.path().to_path_buf(),
            cause: sled::Error::Io(e),
        })?;
        Ok(total)
    }

    /// Per-partition checkpoints and order counts (scans every order).
    pub fn stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        let mut out = Vec::new();
        for (topic, partition) in self.partitions() {
            let tree = self.partition(&topic, partition)?;
            let checkpoint = tree.checkpoint()?.unwrap_or_default();
            let (orders, state_bytes) = tree.state_footprint()?;
            let inbox_bytes =
                tree.footprint(CHUNK_PREFIX)?.1 + tree.footprint(LEGACY_CHUNK_PREFIX)?.1;
            let outbox_pending = tree.tree.scan_prefix([OUTBOX_PREFIX]).count();
            out.push(PartitionStats {
                topic,
                partition,
                checkpoint,
                orders,
                state_bytes,
                inbox_bytes,
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
