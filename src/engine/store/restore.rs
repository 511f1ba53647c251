//! A partition tree's restore: the changelog's newest value per key held
//! in memory, then written key by key or, into a cleared tree, as packed
//! runs; and the reads that look through the runs ([`crate::engine::runs`]).

use std::sync::atomic::Ordering;

use crate::engine::runs::{self, Found, Run, RunBuilder, RUNS_KEY};
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
    pub fn restore_batch(&self, write: RestoreWrite, packed: bool) -> Result<(), StoreError> {
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
                None if self.needs_tombstone(&key)? => {
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
    pub fn has_runs(&self) -> bool {
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
    pub(crate) fn lookup(&self, key: &[u8]) -> Result<Option<sled::IVec>, StoreError> {
        let generations = self.runs.load(Ordering::Acquire);
        match self.tree.get(key).map_err(|e| self.io(e))? {
            Some(value) if generations > 0 && value.is_empty() => Ok(None),
            Some(value) => Ok(Some(value)),
            None => Ok(self.in_runs(key)?.flatten()),
        }
    }

    /// What the newest generation of runs that holds `key` says (`None`: no
    /// run holds it; `Some(None)`: deleted there).
    fn in_runs(&self, key: &[u8]) -> Result<Option<Option<sled::IVec>>, StoreError> {
        for generation in (0..self.runs.load(Ordering::Acquire)).rev() {
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
                    return Ok(Some(Some(bytes.subslice(offset, len))));
                }
                Found::Deleted => return Ok(Some(None)),
                Found::Absent => {}
            }
        }
        Ok(None)
    }

    /// True when removing `key` from the tree needs a tombstone: a run still
    /// holds a value for it that would show again. Keys written only since
    /// the runs (most inbox chunks that expire) are removed outright, so
    /// tombstones do not pile up.
    pub(crate) fn needs_tombstone(&self, key: &[u8]) -> Result<bool, StoreError> {
        if !packable(key) || !self.has_runs() {
            return Ok(false);
        }
        Ok(matches!(self.in_runs(key)?, Some(Some(_))))
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
    /// `prefix`, in key order (deletions as `None`), read a run at a time.
    fn generation_entries(&self, generation: u32, prefix: u8) -> impl Iterator<Item = Entry> + '_ {
        let runs = self
            .tree
            .range(runs::generation_start(generation, &[prefix])..runs::generation_end(generation));
        // Set once a run holds a key past the prefix: no later run has one in it.
        let mut past = false;
        runs.map_while(move |item| (!past).then(|| self.run_entries(item, prefix, &mut past)))
            .flat_map(|entries| match entries {
                Ok(entries) => entries.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(error) => vec![Err(error)],
            })
    }

    /// One run's entries with keys starting with `prefix`; sets `past` when
    /// the run goes on beyond them.
    fn run_entries(
        &self,
        item: sled::Result<(sled::IVec, sled::IVec)>,
        prefix: u8,
        past: &mut bool,
    ) -> Result<Vec<Scanned>, StoreError> {
        let (_, bytes) = item.map_err(|e| self.io(e))?;
        let corrupt = |m| self.corrupt_run(&[prefix], m);
        let run = Run::parse(&bytes).map_err(corrupt)?;
        let mut entries = Vec::new();
        for index in run.lower_bound(&[prefix]).map_err(corrupt)?..run.len() {
            let (key, value) = run.entry(index).map_err(corrupt)?;
            if key.first() != Some(&prefix) {
                *past = true;
                break;
            }
            entries.push((key.to_vec(), value.map(<[u8]>::to_vec)));
        }
        Ok(entries)
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

/// A key met by a scan of a tree and its runs, and its value (`None`: deleted).
type Scanned = (Vec<u8>, Option<Vec<u8>>);
type Entry = Result<Scanned, StoreError>;
