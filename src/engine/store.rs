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
//!   inbox entries.
//!
//! * `x` + source offset (i64, big-endian): a pending [`OutboxRecord`]
//!   (bincode), deleted once the relay's publish was acknowledged.
//! * `r` + generation + last key: a packed run of states and chunks written
//!   by a restore from nothing, and `\x00runs`: how many generations of
//!   them the tree holds ([`crate::engine::runs`]). A state or chunk key in
//!   the tree shadows the runs; while the tree has runs, an empty value
//!   under such a key is a tombstone.
//!
//! The default tree holds `format`: the layout version, checked at open, and
//! `binding`: the group, input topic and changelog topic the store was built
//! for (a store is refused for another).
//!
//! Every key but the format and binding has a changelog form
//! (`to_changelog_key`): an order's key is its `order_id`, every other key
//! is prefixed with `0xFF`, a byte no UTF-8 text (so no valid `order_id`)
//! contains. The changelog value is the sled value, byte for byte.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::engine::entity::{Entity, State};
use crate::engine::inbox::InboxEntry;
use crate::engine::outbox_record::OutboxRecord;
use crate::engine::runs::{self, Found, Run, RunBuilder, RUNS_KEY};

pub(crate) const CHECKPOINT_KEY: &[u8] = b"\x00checkpoint";
/// Present while a restore from the changelog is under way: the tree's
/// states may be ahead of its checkpoint until the restore ends.
pub(crate) const RESTORING_KEY: &[u8] = b"\x00restoring";
const BINDING_KEY: &[u8] = b"binding";
/// Prefix of changelog keys that are not orders (no UTF-8 text has it).
pub(crate) const CHANGELOG_RESERVED: u8 = 0xFF;
const ORDER_PREFIX: u8 = b'o';
const CHUNK_PREFIX: u8 = b'i';
const OUTBOX_PREFIX: u8 = b'x';
const FORMAT_KEY: &[u8] = b"format";
/// The store layout this build reads and writes. 1: whole inbox in the
/// state value (before write coalescing); 2: recent entries plus chunks;
/// 3: the checkpoint records its changelog position; 4: packed runs. A
/// layout-3 store is a layout-4 store without runs, and is marked 4 at open.
pub(crate) const FORMAT: u32 = 4;
const FORMAT_WITHOUT_RUNS: u32 = 3;
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
        "the store at {path} is in use by another process (a running `orderly run` on this store holds it: a store \
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
        let db = sled::Config::new()
            .path(path)
            .cache_capacity(cache_capacity_mb.saturating_mul(1024 * 1024))
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
            Some(bytes) if bytes.as_ref() == FORMAT_WITHOUT_RUNS.to_be_bytes() => {
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

/// One change of a write-out as the changelog carries it: the key in its
/// changelog form, the value (`None`: a deletion, a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRecord {
    pub key: Vec<u8>,
    pub value: Option<sled::IVec>,
}

/// Restored changelog records not yet written to the tree: the newest value
/// of each key. A changelog that is not compacted yet holds many versions of
/// an order's state; only the last one held here is written, so each key
/// costs one sled write per `PartitionStore::restore_batch`. Keys are held
/// in their changelog form, so a key seen before costs no allocation, and a
/// newer value of it reuses the buffer of the one it replaces. Held in a hash
/// map (a B-tree's key comparisons were a fifth of a restore's CPU), sorted
/// once when written.
#[derive(Default)]
pub(crate) struct RestoreWrite {
    changes: std::collections::HashMap<Vec<u8>, Option<Vec<u8>>>,
    /// Bytes of the keys and values held: a replaced value no longer counts.
    bytes: usize,
}

impl RestoreWrite {
    /// Takes a changelog record (its key in changelog form; no value for a
    /// deletion) in place of any earlier one of its key.
    pub(crate) fn restore(&mut self, changelog_key: &[u8], value: Option<&[u8]>) {
        let added = value.map_or(0, <[u8]>::len);
        match self.changes.get_mut(changelog_key) {
            Some(held) => {
                self.bytes = self.bytes + added - held.as_ref().map_or(0, Vec::len);
                match (held.as_mut(), value) {
                    (Some(buffer), Some(value)) => {
                        buffer.clear();
                        buffer.extend_from_slice(value);
                    }
                    (_, value) => *held = value.map(<[u8]>::to_vec),
                }
            }
            None => {
                self.bytes += changelog_key.len() + added;
                self.changes
                    .insert(changelog_key.to_vec(), value.map(<[u8]>::to_vec));
            }
        }
    }

    /// Keys held.
    pub(crate) fn keys(&self) -> usize {
        self.changes.len()
    }

    /// Bytes of the keys and values held.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The changes as (tree key, value), in the tree's key order, so a
    /// restore writes the same way each time (measured neither faster nor
    /// slower than the hash map's order: docs/performance.md).
    fn into_tree_order(self) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        let mut changes: Vec<_> = self
            .changes
            .into_iter()
            .map(|(key, value)| (from_changelog_key(&key), value))
            .collect();
        changes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        changes
    }
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

/// The writes of one write-out: changed states and inbox chunks, then the
/// checkpoint. With a changelog, the same changes as changelog records.
#[derive(Default)]
pub struct BatchWrite {
    /// Keys and values (`None`: a removal) in the order written; a later
    /// write of a key replaces an earlier one.
    ops: Vec<(Vec<u8>, Option<sled::IVec>)>,
    /// Keys written or removed.
    pub keys: usize,
    /// Bytes written, keys and values.
    pub bytes: usize,
    /// `Some` when the changes also go to a changelog.
    pub changes: Option<Vec<ChangeRecord>>,
}

impl BatchWrite {
    /// A write whose changes are also collected for the changelog.
    pub(crate) fn with_changelog() -> Self {
        BatchWrite {
            changes: Some(Vec::new()),
            ..Default::default()
        }
    }

    fn insert(&mut self, key: Vec<u8>, value: Vec<u8>) {
        self.keys += 1;
        self.bytes += key.len() + value.len();
        let value = sled::IVec::from(value);
        if let Some(changes) = &mut self.changes {
            changes.push(ChangeRecord {
                key: to_changelog_key(&key),
                value: Some(value.clone()),
            });
        }
        self.ops.push((key, Some(value)));
    }

    fn remove(&mut self, key: Vec<u8>) {
        self.keys += 1;
        if let Some(changes) = &mut self.changes {
            changes.push(ChangeRecord {
                key: to_changelog_key(&key),
                value: None,
            });
        }
        self.ops.push((key, None));
    }

    /// Stores a full chunk of an order's older inbox entries.
    pub(crate) fn put_chunk(
        &mut self,
        order_id: &str,
        entries: &[InboxEntry],
    ) -> Result<(), StoreError> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let value = encode(&entries).map_err(|message| StoreError::Corrupt {
            tree: String::new(),
            key: order_id.to_string(),
            message,
        })?;
        self.insert(chunk_key(order_id, first.version), value);
        Ok(())
    }

    /// Stores a pending outbox record under its source offset.
    pub(crate) fn put_outbox<S: Serialize>(
        &mut self,
        record: &OutboxRecord<S>,
    ) -> Result<(), StoreError> {
        let value = encode(record).map_err(|message| StoreError::Corrupt {
            tree: String::new(),
            key: format!("outbox {}", record.source_offset),
            message,
        })?;
        self.insert(outbox_key(record.source_offset), value);
        Ok(())
    }

    /// Deletes a published outbox record.
    pub(crate) fn delete_outbox(&mut self, source_offset: i64) {
        self.remove(outbox_key(source_offset));
    }

    /// Deletes an expired chunk.
    pub(crate) fn delete_chunk(&mut self, order_id: &str, first_version: i64) {
        self.remove(chunk_key(order_id, first_version));
    }

    /// Writes an entity's state.
    pub fn put_state<E: Entity>(&mut self, state: &State<E>) -> Result<(), StoreError> {
        let value = encode(state).map_err(|message| StoreError::Corrupt {
            tree: String::new(),
            key: state.key.clone(),
            message,
        })?;
        self.insert(order_key(&state.key), value);
        Ok(())
    }
}

impl PartitionStore {
    fn io(&self, cause: sled::Error) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            cause,
        }
    }

    fn decode_state<E: Entity>(&self, key: &[u8], value: &[u8]) -> Result<State<E>, StoreError> {
        bincode::deserialize(value).map_err(|e| StoreError::Corrupt {
            tree: self.name.clone(),
            key: String::from_utf8_lossy(key).into_owned(),
            message: e.to_string(),
        })
    }

    /// The partition's checkpoint (`None`: nothing written out yet).
    pub fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        match self.tree.get(CHECKPOINT_KEY).map_err(|e| self.io(e))? {
            None => Ok(None),
            Some(bytes) => {
                bincode::deserialize(&bytes)
                    .map(Some)
                    .map_err(|e| StoreError::Corrupt {
                        tree: self.name.clone(),
                        key: "checkpoint".into(),
                        message: e.to_string(),
                    })
            }
        }
    }

    /// The state of the entity `key` (`None`: no event applied).
    pub fn get<E: Entity>(&self, key: &str) -> Result<Option<State<E>>, StoreError> {
        let key = order_key(key);
        match self.lookup(&key)? {
            None => Ok(None),
            Some(bytes) => self.decode_state(&key, &bytes).map(Some),
        }
    }

    /// One chunk of an order's older inbox entries.
    pub(crate) fn get_chunk(
        &self,
        order_id: &str,
        first_version: i64,
    ) -> Result<Option<Vec<InboxEntry>>, StoreError> {
        let key = chunk_key(order_id, first_version);
        match self.lookup(&key)? {
            None => Ok(None),
            Some(bytes) => {
                bincode::deserialize(&bytes)
                    .map(Some)
                    .map_err(|e| StoreError::Corrupt {
                        tree: self.name.clone(),
                        key: format!("inbox chunk {order_id}@{first_version}"),
                        message: e.to_string(),
                    })
            }
        }
    }

    /// Writes the batch's states and `checkpoint` in one atomic batch. Not
    /// durable until `Store::flush`.
    pub fn commit_batch(
        &self,
        write: BatchWrite,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        let tombstones = self.has_runs();
        let mut batch = sled::Batch::default();
        for (key, value) in write.ops {
            match value {
                Some(value) => batch.insert(key, value),
                None if tombstones && packable(&key) => batch.insert(key, sled::IVec::default()),
                None => batch.remove(key),
            }
        }
        batch.insert(CHECKPOINT_KEY, self.encode_checkpoint(checkpoint)?);
        self.tree.apply_batch(batch).map_err(|e| self.io(e))
    }

    /// The checkpoint's bytes (as stored, and as its changelog record carries them).
    pub(crate) fn encode_checkpoint(&self, checkpoint: &Checkpoint) -> Result<Vec<u8>, StoreError> {
        checkpoint.encode().map_err(|message| StoreError::Corrupt {
            tree: self.name.clone(),
            key: "checkpoint".into(),
            message,
        })
    }

    /// Pending outbox records with source offsets in `(after, below)`, in
    /// offset order, at most `limit`.
    pub(crate) fn outbox_between<S: serde::de::DeserializeOwned>(
        &self,
        after: i64,
        below: i64,
        limit: usize,
    ) -> Result<Vec<OutboxRecord<S>>, StoreError> {
        let start = outbox_key(after.saturating_add(1).max(0));
        let end = outbox_key(below.max(0));
        let mut out = Vec::new();
        for item in self.tree.range(start..end).take(limit) {
            let (key, value) = item.map_err(|e| self.io(e))?;
            out.push(
                bincode::deserialize(&value).map_err(|e| StoreError::Corrupt {
                    tree: self.name.clone(),
                    key: String::from_utf8_lossy(&key).into_owned(),
                    message: e.to_string(),
                })?,
            );
        }
        Ok(out)
    }

    /// Source offsets of pending outbox records at or below `through`.
    pub(crate) fn outbox_through(&self, through: i64) -> Result<Vec<i64>, StoreError> {
        let end = outbox_key(through.saturating_add(1).max(0));
        let mut out = Vec::new();
        for item in self.tree.range(outbox_key(0)..end) {
            let (key, _) = item.map_err(|e| self.io(e))?;
            if let Some(offset) = key
                .get(1..9)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map(i64::from_be_bytes)
            {
                out.push(offset);
            }
        }
        Ok(out)
    }

    /// Pending outbox records (of an entity whose status is an `S`) and the
    /// oldest one's creation time (ms).
    pub(crate) fn outbox_backlog<S: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<(u64, Option<i64>), StoreError> {
        let mut count = 0u64;
        let mut oldest = None;
        for item in self.tree.scan_prefix([OUTBOX_PREFIX]) {
            let (_, value) = item.map_err(|e| self.io(e))?;
            if oldest.is_none() {
                oldest = bincode::deserialize::<OutboxRecord<S>>(&value)
                    .ok()
                    .map(|r| r.created_ms);
            }
            count += 1;
        }
        Ok((count, oldest))
    }

    /// True while a restore into this tree has not finished (its states may
    /// be ahead of its checkpoint).
    pub fn restoring(&self) -> Result<bool, StoreError> {
        self.tree
            .contains_key(RESTORING_KEY)
            .map_err(|e| self.io(e))
    }

    /// Removes every key of the tree (a restore of a newer epoch, or a
    /// replay with `--reset-state` without a changelog).
    pub fn clear(&self) -> Result<(), StoreError> {
        self.tree.clear().map_err(|e| self.io(e))?;
        self.runs.store(0, Ordering::Release);
        Ok(())
    }

    /// Marks the tree as being restored.
    pub(crate) fn begin_restore(&self) -> Result<(), StoreError> {
        self.tree
            .insert(RESTORING_KEY, &[])
            .map(|_| ())
            .map_err(|e| self.io(e))
    }

    /// Writes restored changes while the tree is marked as
    /// restoring. Not as an atomic batch: the mark makes a half-written
    /// restore start again, and sled's batches hold a lock over every tree
    /// while they apply, where single writes to different trees run side by
    /// side (the partitions' restores, and the write-outs of the partitions
    /// already processing).
    ///
    /// `packed` (a restore into a tree it cleared): the states and chunks
    /// go into one new generation of packed runs ([`crate::engine::runs`]),
    /// a few sled writes for thousands of keys; other keys one at a time.
    /// Otherwise every key is written one at a time.
    pub(crate) fn restore_batch(
        &self,
        write: RestoreWrite,
        packed: bool,
    ) -> Result<(), StoreError> {
        let tombstones = self.has_runs();
        let generation = self.runs.load(Ordering::Acquire);
        let mut builder = RunBuilder::default();
        let mut wrote_runs = false;
        for (key, value) in write.into_tree_order() {
            if packed && packable(&key) {
                if let Some((last, run)) = builder.push(&key, value.as_deref()) {
                    self.put_run(generation, &last, run)?;
                    wrote_runs = true;
                }
                continue;
            }
            match value {
                Some(value) => self.tree.insert(key, value).map(drop),
                None if tombstones && packable(&key) => {
                    self.tree.insert(key, sled::IVec::default()).map(drop)
                }
                None => self.tree.remove(key).map(drop),
            }
            .map_err(|e| self.io(e))?;
        }
        if let Some((last, run)) = builder.finish() {
            self.put_run(generation, &last, run)?;
            wrote_runs = true;
        }
        if wrote_runs {
            let count = generation + 1;
            self.tree
                .insert(RUNS_KEY, &count.to_be_bytes())
                .map_err(|e| self.io(e))?;
            self.runs.store(count, Ordering::Release);
        }
        Ok(())
    }

    fn put_run(&self, generation: u32, last: &[u8], run: Vec<u8>) -> Result<(), StoreError> {
        self.tree
            .insert(runs::run_key(generation, last), run)
            .map(drop)
            .map_err(|e| self.io(e))
    }

    /// Entity states the tree holds (scans every one).
    pub(crate) fn state_count(&self) -> Result<usize, StoreError> {
        let mut states = 0;
        self.scan_packable(ORDER_PREFIX, |_, _| {
            states += 1;
            Ok(())
        })?;
        Ok(states)
    }

    /// True when the tree holds packed runs.
    pub(crate) fn has_runs(&self) -> bool {
        self.runs.load(Ordering::Acquire) > 0
    }

    fn corrupt_run(&self, key: &[u8], message: String) -> StoreError {
        StoreError::Corrupt {
            tree: self.name.clone(),
            key: format!("run holding {}", String::from_utf8_lossy(key)),
            message,
        }
    }

    /// The value of a state or chunk key: the tree's, else the newest
    /// generation of runs that holds the key (`None`: absent or deleted).
    fn lookup(&self, key: &[u8]) -> Result<Option<sled::IVec>, StoreError> {
        let generations = self.runs.load(Ordering::Acquire);
        match self.tree.get(key).map_err(|e| self.io(e))? {
            Some(value) if generations > 0 && value.is_empty() => return Ok(None),
            Some(value) => return Ok(Some(value)),
            None if generations == 0 => return Ok(None),
            None => {}
        }
        for generation in (0..generations).rev() {
            let start = runs::generation_start(generation, key);
            let Some(item) = self
                .tree
                .range(start..runs::generation_end(generation))
                .next()
            else {
                continue;
            };
            let (_, bytes) = item.map_err(|e| self.io(e))?;
            let run = Run::parse(&bytes).map_err(|m| self.corrupt_run(key, m))?;
            match run.find(key).map_err(|m| self.corrupt_run(key, m))? {
                Found::Value(value) => {
                    let (offset, len) = run.range_of(value);
                    return Ok(Some(bytes.subslice(offset, len)));
                }
                Found::Deleted => return Ok(None),
                Found::Absent => {}
            }
        }
        Ok(None)
    }

    /// Visits every live key with the one-byte `prefix` (a state or chunk
    /// prefix) and its value, in key order: the tree's keys merged with the
    /// runs', the tree's winning, then the newer generation's.
    pub(crate) fn scan_packable(
        &self,
        prefix: u8,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let generations = self.runs.load(Ordering::Acquire);
        let tombstones = generations > 0;
        let mut sources: Vec<std::iter::Peekable<Box<dyn Iterator<Item = Entry> + '_>>> =
            Vec::new();
        let tree: Box<dyn Iterator<Item = Entry>> =
            Box::new(self.tree.scan_prefix([prefix]).map(move |item| {
                let (key, value) = item.map_err(|e| self.io(e))?;
                let value = (!(tombstones && value.is_empty())).then(|| value.to_vec());
                Ok((key.to_vec(), value))
            }));
        sources.push(tree.peekable());
        for generation in (0..generations).rev() {
            let entries: Box<dyn Iterator<Item = Entry>> =
                Box::new(self.generation_entries(generation, prefix));
            sources.push(entries.peekable());
        }
        loop {
            let mut smallest: Option<(usize, Vec<u8>)> = None;
            for (index, source) in sources.iter_mut().enumerate() {
                if matches!(source.peek(), Some(Err(_))) {
                    if let Some(Err(error)) = source.next() {
                        return Err(error);
                    }
                }
                if let Some(Ok((key, _))) = source.peek() {
                    if smallest.as_ref().is_none_or(|(_, least)| key < least) {
                        smallest = Some((index, key.clone()));
                    }
                }
            }
            let Some((winner, key)) = smallest else {
                return Ok(());
            };
            let mut value = None;
            for (index, source) in sources.iter_mut().enumerate() {
                if matches!(source.peek(), Some(Ok((k, _))) if *k == key) {
                    if let Some(Ok((_, v))) = source.next() {
                        if index == winner {
                            value = v;
                        }
                    }
                }
            }
            if let Some(value) = value {
                visit(&key, &value)?;
            }
        }
    }

    /// The entries of one generation's runs with keys starting with
    /// `prefix`, in key order (deletions as `None`).
    fn generation_entries(&self, generation: u32, prefix: u8) -> impl Iterator<Item = Entry> + '_ {
        let mut runs = self
            .tree
            .range(runs::generation_start(generation, &[prefix])..runs::generation_end(generation));
        let mut current: Option<(sled::IVec, usize)> = None;
        let mut done = false;
        std::iter::from_fn(move || loop {
            if done {
                return None;
            }
            let step = (|| -> Result<Option<Scanned>, StoreError> {
                if let Some((bytes, index)) = current.as_mut() {
                    let run = Run::parse(bytes).map_err(|m| self.corrupt_run(&[prefix], m))?;
                    if *index < run.len() {
                        let (key, value) = run
                            .entry(*index)
                            .map_err(|m| self.corrupt_run(&[prefix], m))?;
                        *index += 1;
                        if key.first() != Some(&prefix) {
                            done = true;
                            return Ok(None);
                        }
                        return Ok(Some((key.to_vec(), value.map(<[u8]>::to_vec))));
                    }
                }
                match runs.next() {
                    None => {
                        done = true;
                        Ok(None)
                    }
                    Some(item) => {
                        let (_, bytes) = item.map_err(|e| self.io(e))?;
                        let run = Run::parse(&bytes).map_err(|m| self.corrupt_run(&[prefix], m))?;
                        let first = run
                            .lower_bound(&[prefix])
                            .map_err(|m| self.corrupt_run(&[prefix], m))?;
                        current = Some((bytes, first));
                        Ok(None)
                    }
                }
            })();
            match step {
                Err(error) => {
                    done = true;
                    return Some(Err(error));
                }
                Ok(Some(entry)) => return Some(Ok(entry)),
                Ok(None) => continue,
            }
        })
    }

    /// Writes the last restored changes, then the checkpoint that covers
    /// them and the clearing of the restoring mark in one atomic batch.
    pub(crate) fn finish_restore(
        &self,
        write: RestoreWrite,
        packed: bool,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        self.restore_batch(write, packed)?;
        let mut finish = BatchWrite::default();
        finish.ops.push((RESTORING_KEY.to_vec(), None));
        self.commit_batch(finish, checkpoint)
    }

    /// The tree's name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A key met by a scan of a tree and its runs, and its value (`None`: deleted).
type Scanned = (Vec<u8>, Option<Vec<u8>>);
type Entry = Result<Scanned, StoreError>;

/// True for the keys packed runs may hold: states and inbox chunks.
fn packable(key: &[u8]) -> bool {
    matches!(key.first(), Some(&ORDER_PREFIX) | Some(&CHUNK_PREFIX))
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

pub(crate) fn chunk_key(order_id: &str, first_version: i64) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + 4 + order_id.len() + 8);
    key.push(CHUNK_PREFIX);
    key.extend_from_slice(&(order_id.len() as u32).to_be_bytes());
    key.extend_from_slice(order_id.as_bytes());
    key.extend_from_slice(&first_version.to_be_bytes());
    key
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, String> {
    bincode::serialize(value).map_err(|e| e.to_string())
}
