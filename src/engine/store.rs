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
//!
//! The default tree holds `format`: the layout version, checked at open, and
//! `binding`: the group, input topic and changelog topic the store was built
//! for (a store is refused for another).
//!
//! Every key but the format and binding has a changelog form
//! (`to_changelog_key`): an order's key is its `order_id`, every other key
//! is prefixed with `0xFF`, a byte no UTF-8 text (so no valid `order_id`)
//! contains. The changelog value is the sled value, byte for byte.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::engine::entity::{Entity, State};
use crate::engine::inbox::InboxEntry;
use crate::engine::outbox_record::OutboxRecord;

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
/// 3: the checkpoint records its changelog position.
pub(crate) const FORMAT: u32 = 3;
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
        };
        store.check_format()?;
        Ok(store)
    }

    /// Refuses a store of another layout; marks a new store with this one.
    fn check_format(&self) -> Result<(), StoreError> {
        let found = self.db.get(FORMAT_KEY).map_err(|e| self.io(e))?;
        match found {
            Some(bytes) if bytes.as_ref() == FORMAT.to_be_bytes() => Ok(()),
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
        Ok(PartitionStore {
            tree,
            name,
            path: self.path.clone(),
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
            let orders = tree.tree.scan_prefix([ORDER_PREFIX]).count();
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
            for item in tree.tree.scan_prefix([ORDER_PREFIX]) {
                let (key, value) = item.map_err(|e| self.io(e))?;
                visit(partition, tree.decode_state(&key, &value)?);
            }
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
}

/// The writes of one write-out: changed states and inbox chunks, then the
/// checkpoint. With a changelog, the same changes as changelog records.
#[derive(Default)]
pub struct BatchWrite {
    batch: sled::Batch,
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
        self.batch.insert(key, value);
    }

    fn remove(&mut self, key: Vec<u8>) {
        self.keys += 1;
        if let Some(changes) = &mut self.changes {
            changes.push(ChangeRecord {
                key: to_changelog_key(&key),
                value: None,
            });
        }
        self.batch.remove(key);
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
        match self.tree.get(&key).map_err(|e| self.io(e))? {
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
        match self.tree.get(&key).map_err(|e| self.io(e))? {
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
        mut write: BatchWrite,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        write
            .batch
            .insert(CHECKPOINT_KEY, self.encode_checkpoint(checkpoint)?);
        self.tree.apply_batch(write.batch).map_err(|e| self.io(e))
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
        self.tree.clear().map_err(|e| self.io(e))
    }

    /// Marks the tree as being restored.
    pub(crate) fn begin_restore(&self) -> Result<(), StoreError> {
        self.tree
            .insert(RESTORING_KEY, &[])
            .map(|_| ())
            .map_err(|e| self.io(e))
    }

    /// Writes restored changes while the tree is marked as
    /// restoring. One key at a time, not as an atomic batch: the mark makes
    /// a half-written restore start again, and sled's batches hold a lock
    /// over every tree while they apply, where single writes to different
    /// trees run side by side (the partitions' restores, and the write-outs
    /// of the partitions already processing).
    pub(crate) fn restore_batch(&self, write: RestoreWrite) -> Result<(), StoreError> {
        for (key, value) in write.into_tree_order() {
            match value {
                Some(value) => self.tree.insert(key, value).map(drop),
                None => self.tree.remove(key).map(drop),
            }
            .map_err(|e| self.io(e))?;
        }
        Ok(())
    }

    /// Writes the last restored changes, then the checkpoint that covers
    /// them and the clearing of the restoring mark in one atomic batch.
    pub(crate) fn finish_restore(
        &self,
        write: RestoreWrite,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        self.restore_batch(write)?;
        let mut finish = BatchWrite::default();
        finish.batch.remove(RESTORING_KEY);
        self.commit_batch(finish, checkpoint)
    }

    /// The tree's name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }
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
