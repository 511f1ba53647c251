//! A partition tree's restore: the changelog's newest value per key held
//! in memory, then written key by key or, into a cleared tree, as packed
//! runs; and the reads that look through the runs ([`crate::engine::runs`]).

use crate::engine::generation::{Entry, Merge};
use crate::engine::store::checkpoint::Checkpoint;
use crate::engine::store::error::StoreError;
use crate::engine::store::layout::{
    from_changelog_key, packable, ORDER_PREFIX, REPUBLISHED_BELOW_KEY, RESTORING_KEY,
};
use crate::engine::store::partition::{BatchWrite, PartitionStore};

/// Restored changelog records not yet written to the tree: the newest value
/// of each key. A changelog that is not compacted yet holds many versions of
/// an order's state; only the last one held here is written, so each key
/// costs one sled write per `PartitionStore::restore_batch`. Keys are held
/// in their changelog form, so a key seen before costs no allocation, and a
/// newer value of it reuses the buffer of the one it replaces. Held in a hash
/// map (a B-tree's key comparisons were a fifth of a restore's CPU), sorted
/// once when written.
#[derive(Default)]
pub struct RestoreWrite {
    changes: std::collections::HashMap<Vec<u8>, Option<Vec<u8>>>,
    /// Bytes of the keys and values held: a replaced value no longer counts.
    bytes: usize,
}

impl RestoreWrite {
    /// Takes a changelog record (its key in changelog form; no value for a
    /// deletion) in place of any earlier one of its key.
    pub fn restore(&mut self, changelog_key: &[u8], value: Option<&[u8]>) {
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

    /// The changes as (tree key, value), in the tree's key order: packed
    /// runs are cut from it, and key by key a restore writes the same way
    /// each time.
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

impl PartitionStore {
    /// Marks the tree as being restored.
    pub fn begin_restore(&self) -> Result<(), StoreError> {
        self.tree
            .insert(RESTORING_KEY, &[])
            .map(|_| ())
            .map_err(|e| self.io(e))
    }

    /// Writes restored changes while the tree is marked as
    /// restoring. The mark makes a half-written restore start again.
    ///
    /// The states go into one new generation of packed runs
    /// ([`crate::engine::generation`]), a few sled writes for thousands of
    /// keys, in one batch with the live list naming it. With `packed` (a
    /// restore into a tree it cleared) the inbox chunks go there too;
    /// otherwise they, like every other key, are written one at a time
    /// (sled's batches hold a lock over every tree while they apply, where
    /// single writes to different trees run side by side).
    pub fn restore_batch(&self, write: RestoreWrite, packed: bool) -> Result<(), StoreError> {
        // Spilled states of a processing attempt that never wrote out are
        // past the checkpoint the restore rebuilds: never settled.
        self.discard_pending();
        let mut in_runs = Vec::new();
        for (key, value) in write.into_tree_order() {
            if key.first() == Some(&ORDER_PREFIX) || (packed && packable(&key)) {
                in_runs.push((key, value));
                continue;
            }
            match value {
                Some(value) => self.tree.insert(key, value).map(drop),
                None if self.needs_tombstone(&key)? => {
                    self.tree.insert(key, sled::IVec::default()).map(drop)
                }
                None => self.tree.remove(key).map(drop),
            }
            .map_err(|e| self.io(e))?;
        }
        if in_runs.is_empty() {
            return Ok(());
        }
        let mut batch = sled::Batch::default();
        let staged = self.stage_generation(in_runs, &mut batch)?;
        self.apply_with_generation(batch, staged)
    }

    /// Entity states the tree holds (scans every one).
    #[cfg(test)]
    pub(crate) fn state_count(&self) -> Result<usize, StoreError> {
        Ok(self.state_footprint()?.0)
    }

    /// Entity states the tree holds and their bytes, keys and stored
    /// values (scans every one): the live state the disk is measured
    /// against.
    pub(crate) fn state_footprint(&self) -> Result<(usize, u64), StoreError> {
        self.footprint(ORDER_PREFIX)
    }

    /// Entries under `prefix` (states, inbox chunks) and their bytes.
    pub(crate) fn footprint(&self, prefix: u8) -> Result<(usize, u64), StoreError> {
        let (mut entries, mut bytes) = (0, 0u64);
        self.scan_packable(prefix, |key, value| {
            entries += 1;
            bytes += (key.len() + value.len()) as u64;
            Ok(())
        })?;
        Ok((entries, bytes))
    }

    /// True when the tree holds packed runs.
    pub fn has_runs(&self) -> bool {
        !self.generations.live().is_empty()
    }

    pub(crate) fn corrupt_run(&self, key: &[u8], message: String) -> StoreError {
        StoreError::Corrupt {
            tree: self.name.clone(),
            key: format!("run holding {}", String::from_utf8_lossy(key)),
            message,
        }
    }

    /// The value of a state or chunk key (`None`: absent or deleted). A
    /// state lives in the generations of runs only; a chunk in the tree
    /// (an empty value: deleted, while runs are there), else in them.
    pub(crate) fn lookup(&self, key: &[u8]) -> Result<Option<sled::IVec>, StoreError> {
        if key.first() == Some(&ORDER_PREFIX) {
            return Ok(self.in_generations(key)?.flatten());
        }
        match self.tree.get(key).map_err(|e| self.io(e))? {
            Some(value) if value.is_empty() && self.has_runs() => Ok(None),
            Some(value) => Ok(Some(value)),
            None => Ok(self.in_generations(key)?.flatten()),
        }
    }

    /// True when removing `key` from the tree needs a tombstone: a run still
    /// holds a value for it that would show again. Keys written only since
    /// the runs (most inbox chunks that expire) are removed outright, so
    /// tombstones do not pile up.
    pub(crate) fn needs_tombstone(&self, key: &[u8]) -> Result<bool, StoreError> {
        if !packable(key) || !self.has_runs() {
            return Ok(false);
        }
        Ok(matches!(self.in_generations(key)?, Some(Some(_))))
    }

    /// Visits every live key with the one-byte `prefix` (a state or chunk
    /// prefix) and its value, in key order: the generations' keys merged,
    /// the newer's winning, and for chunks the tree's over them all.
    pub(crate) fn scan_packable(
        &self,
        prefix: u8,
        mut visit: impl FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        let live = self.generations.live();
        let tombstones = !live.is_empty();
        let mut sources: Vec<Box<dyn Iterator<Item = Result<Entry, StoreError>> + '_>> = Vec::new();
        if prefix != ORDER_PREFIX {
            sources.push(Box::new(self.tree.scan_prefix([prefix]).map(move |item| {
                let (key, value) = item.map_err(|e| self.io(e))?;
                let value = (!(tombstones && value.is_empty())).then(|| value.to_vec());
                Ok((key.to_vec(), value))
            })));
        }
        for generation in live.iter().rev() {
            sources.push(Box::new(self.generation_scan(generation.id, Some(prefix))));
        }
        for entry in Merge::new(sources, true) {
            let (key, value) = entry?;
            if let Some(value) = value {
                visit(&key, &value)?;
            }
        }
        Ok(())
    }

    /// Writes the last restored changes, then the checkpoint that covers
    /// them, the clearing of the restoring mark and the repair's
    /// [`Self::republished_below`] (`None`: none) in one atomic batch.
    pub fn finish_restore(
        &self,
        write: RestoreWrite,
        packed: bool,
        checkpoint: &Checkpoint,
        republished_below: Option<i64>,
    ) -> Result<(), StoreError> {
        self.restore_batch(write, packed)?;
        let mut finish = BatchWrite::default();
        finish.remove(RESTORING_KEY.to_vec());
        match republished_below {
            Some(offset) => finish.insert(
                REPUBLISHED_BELOW_KEY.to_vec(),
                offset.to_be_bytes().to_vec(),
            ),
            None => finish.remove(REPUBLISHED_BELOW_KEY.to_vec()),
        }
        self.commit_batch(finish, checkpoint)
    }
}
