//! A partition tree's reads and its write-outs: states and chunks (found in
//! the tree, else in its packed runs), the outbox, and the atomic batch of
//! a write-out with its checkpoint.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::engine::entity::{Entity, State};
use crate::engine::inbox::{Chunk, ChunkRef, InboxEntry};
use crate::engine::outbox_record::OutboxRecord;
use crate::engine::store::checkpoint::Checkpoint;
use crate::engine::store::error::StoreError;
use crate::engine::store::layout::{
    chunk_key, encode, legacy_chunk_key, order_key, outbox_key, to_changelog_key, CHECKPOINT_KEY,
    ORDER_PREFIX, OUTBOX_PREFIX, REPUBLISHED_BELOW_KEY, RESTORING_KEY,
};
use crate::engine::store::live::Generations;
use crate::engine::stored_state::{decode_state, encode_state};

/// One input partition's tree.
#[derive(Clone)]
pub struct PartitionStore {
    pub(crate) tree: sled::Tree,
    pub(crate) name: String,
    pub(crate) path: PathBuf,
    /// The tree's generations of packed runs, shared with every other
    /// handle of the tree.
    pub(crate) generations: Arc<Generations>,
}

/// One change of a write-out as the changelog carries it: the key in its
/// changelog form, the value (`None`: a deletion, a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRecord {
    pub key: Vec<u8>,
    pub value: Option<sled::IVec>,
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

    pub(crate) fn insert(&mut self, key: Vec<u8>, value: impl Into<sled::IVec>) {
        let value: sled::IVec = value.into();
        self.keys += 1;
        self.bytes += key.len() + value.len();
        if let Some(changes) = &mut self.changes {
            changes.push(ChangeRecord {
                key: to_changelog_key(&key),
                value: Some(value.clone()),
            });
        }
        self.ops.push((key, Some(value)));
    }

    pub(crate) fn remove(&mut self, key: Vec<u8>) {
        self.keys += 1;
        if let Some(changes) = &mut self.changes {
            changes.push(ChangeRecord {
                key: to_changelog_key(&key),
                value: None,
            });
        }
        self.ops.push((key, None));
    }

    /// A changelog record with no write of its own: a spilled state, already
    /// in a pending generation, that the write-out settles.
    pub(crate) fn changelog_only(&mut self, key: Vec<u8>, value: Option<sled::IVec>) {
        if let Some(changes) = &mut self.changes {
            changes.push(ChangeRecord {
                key: to_changelog_key(&key),
                value,
            });
        }
    }

    /// Stores a full chunk of an order's older inbox entries.
    pub(crate) fn put_chunk(&mut self, order_id: &str, chunk: &Chunk) {
        // No copy: the batch and the changelog record share the chunk's
        // buffer with the cache until the write-out ends.
        self.insert(
            chunk_key(order_id, &chunk.reference()),
            chunk.packed().clone(),
        );
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
    pub(crate) fn delete_chunk(&mut self, order_id: &str, chunk: &ChunkRef, legacy: bool) {
        if legacy {
            self.remove(legacy_chunk_key(order_id, chunk.first_version));
        } else {
            self.remove(chunk_key(order_id, chunk));
        }
    }

    /// Writes an entity's state.
    pub fn put_state<E: Entity>(&mut self, state: &State<E>) -> Result<(), StoreError> {
        let value = encode_state(state).map_err(|message| StoreError::Corrupt {
            tree: String::new(),
            key: state.key.clone(),
            message,
        })?;
        self.insert(order_key(&state.key), value);
        Ok(())
    }
}

impl PartitionStore {
    pub(crate) fn io(&self, cause: sled::Error) -> StoreError {
        StoreError::Io {
            path: self.path.clone(),
            cause,
        }
    }

    /// The error for a value of this tree that does not read (or encode):
    /// the tree, what `key` describes, and what was wrong.
    fn corrupt(&self, key: impl Into<String>, message: impl ToString) -> StoreError {
        StoreError::Corrupt {
            tree: self.name.clone(),
            key: key.into(),
            message: message.to_string(),
        }
    }

    /// A stored value, or the error that names the tree and what `key`
    /// describes.
    fn decode<T: serde::de::DeserializeOwned>(
        &self,
        value: &[u8],
        key: impl FnOnce() -> String,
    ) -> Result<T, StoreError> {
        bincode::deserialize(value).map_err(|e| self.corrupt(key(), e))
    }

    pub(crate) fn decode_state<E: Entity>(
        &self,
        key: &[u8],
        value: &[u8],
    ) -> Result<State<E>, StoreError> {
        decode_state(value).map_err(|message| self.corrupt(String::from_utf8_lossy(key), message))
    }

    /// Writes changed states evicted from memory before their write-out as a
    /// pending generation ([`Self::spill`]).
    pub(crate) fn spill_states<'a, E: Entity + 'a>(
        &self,
        states: impl Iterator<Item = &'a State<E>>,
    ) -> Result<(), StoreError> {
        let mut entries = Vec::new();
        for state in states {
            let value =
                encode_state(state).map_err(|message| self.corrupt(&*state.key, message))?;
            entries.push((order_key(&state.key), Some(value)));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        self.spill(entries)
    }

    /// Adds to `write`'s changelog the spilled states ([`Self::spill`]) that
    /// `changed_again` (given an entity key) does not say are in the write
    /// already.
    pub(crate) fn spilled_into(
        &self,
        write: &mut BatchWrite,
        changed_again: impl Fn(&str) -> bool,
    ) -> Result<usize, StoreError> {
        let mut added = 0;
        for entry in self.spilled() {
            let (key, value) = entry?;
            let order_id = key
                .strip_prefix(&[ORDER_PREFIX])
                .and_then(|k| std::str::from_utf8(k).ok());
            if order_id.is_some_and(&changed_again) {
                continue;
            }
            write.changelog_only(key, value.map(sled::IVec::from));
            added += 1;
        }
        Ok(added)
    }

    /// The partition's checkpoint (`None`: nothing written out yet).
    pub fn checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        match self.tree.get(CHECKPOINT_KEY).map_err(|e| self.io(e))? {
            None => Ok(None),
            Some(bytes) => self.decode(&bytes, || "checkpoint".into()).map(Some),
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
        chunk: ChunkRef,
    ) -> Result<Option<Vec<InboxEntry>>, StoreError> {
        let first_version = chunk.first_version;
        let found = match self.lookup(&chunk_key(order_id, &chunk))? {
            Some(bytes) => Some(bytes),
            // Written by layout 6 or before, or restored from a changelog
            // it wrote.
            None => self.lookup(&legacy_chunk_key(order_id, first_version))?,
        };
        match found {
            None => Ok(None),
            Some(bytes) => crate::engine::inbox::decode_chunk(&bytes)
                .map(Some)
                .map_err(|message| {
                    self.corrupt(format!("inbox chunk {order_id}@{first_version}"), message)
                }),
        }
    }

    /// True when the chunk of `order_id` starting at `first_version` is
    /// stored under its layout-6 key ([`legacy_chunk_key`]).
    pub(crate) fn has_legacy_chunk(
        &self,
        order_id: &str,
        first_version: i64,
    ) -> Result<bool, StoreError> {
        Ok(self
            .lookup(&legacy_chunk_key(order_id, first_version))?
            .is_some())
    }

    /// Writes the batch's changes and `checkpoint` in one atomic batch: the
    /// states as one new generation of packed runs on top of the others
    /// ([`crate::engine::generation`]), every other key on its own, and the
    /// list of live generations settling the spilled ones. Not durable
    /// until `Store::flush`. Then merges generations when due.
    pub fn commit_batch(
        &self,
        write: BatchWrite,
        checkpoint: &Checkpoint,
    ) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        let mut states = Vec::new();
        for (key, value) in write.ops {
            if key.first() == Some(&ORDER_PREFIX) {
                states.push((key, value.map(|v| v.to_vec())));
                continue;
            }
            match value {
                Some(value) => batch.insert(key, value),
                None if self.needs_tombstone(&key)? => batch.insert(key, sled::IVec::default()),
                None => batch.remove(key),
            }
        }
        batch.insert(CHECKPOINT_KEY, self.encode_checkpoint(checkpoint)?);
        if states.is_empty() {
            let settling = self.stage_settling(&mut batch);
            self.tree.apply_batch(batch).map_err(|e| self.io(e))?;
            if let Some(staged) = settling {
                self.publish(staged);
            }
            return Ok(());
        }
        // Key order, each key once: its last write wins.
        states.sort_by(|a, b| a.0.cmp(&b.0));
        states.reverse();
        states.dedup_by(|later, earlier| later.0 == earlier.0);
        states.reverse();
        let staged = self.stage_generation(states, &mut batch)?;
        self.apply_with_generation(batch, staged)
    }

    /// The checkpoint's bytes (as stored, and as its changelog record carries them).
    pub(crate) fn encode_checkpoint(&self, checkpoint: &Checkpoint) -> Result<Vec<u8>, StoreError> {
        checkpoint
            .encode()
            .map_err(|message| self.corrupt("checkpoint", message))
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
            out.push(self.decode(&value, || String::from_utf8_lossy(&key).into_owned())?);
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

    /// The input offset below which this partition's status changes and
    /// dead letters were published before a repair moved it back (see
    /// [`crate::kafka::headers::HEADER_PUBLISHED_TO`]).
    pub(crate) fn republished_below(&self) -> Result<Option<i64>, StoreError> {
        let value = self
            .tree
            .get(REPUBLISHED_BELOW_KEY)
            .map_err(|e| self.io(e))?;
        Ok(value.and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok().map(i64::from_be_bytes)))
    }

    /// Forgets [`Self::republished_below`]: the checkpoint has passed it.
    pub(crate) fn clear_republished_below(&self) -> Result<(), StoreError> {
        self.tree
            .remove(REPUBLISHED_BELOW_KEY)
            .map_err(|e| self.io(e))?;
        Ok(())
    }

    /// Removes every key of the tree (a restore of a newer epoch, or a
    /// replay with `--reset-state` without a changelog).
    pub fn clear(&self) -> Result<(), StoreError> {
        self.tree.clear().map_err(|e| self.io(e))?;
        self.generations.cleared();
        Ok(())
    }

    /// The tree's name, for messages.
    pub fn name(&self) -> &str {
        &self.name
    }
}
