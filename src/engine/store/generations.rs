//! A partition tree's generations of packed runs ([`crate::engine::generation`]):
//! loaded at open (older layouts brought over once), written by every
//! write-out and restore, read newest first, and merged.
//!
//! Keys:
//!
//! * `\x00generations`: the [`LiveList`] (the next generation number, then
//!   the live ones, oldest first). Its presence also says the tree's states
//!   live in runs only: a tree without it (layout 7 and before) is brought
//!   over at open, its states written as a generation on top.
//! * `g` + number (u32, big-endian): a generation's [`GenerationIndex`].
//! * `r` + number + last key: its runs ([`crate::engine::runs`]).
//!
//! Every change of the live list is one atomic sled batch: a write-out's
//! generation with its checkpoint; a merge's switch from the generations it
//! merged to the one it wrote (whose runs were written before, under a
//! number not yet live). A crash in a merge leaves runs no list names; the
//! next open deletes them, and the merged generations still answer.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use crate::engine::generation::{
    plan_merge, Entry, GenerationIndex, IndexBuilder, KeyHash, LiveList, Merge,
};
use crate::engine::runs::{self, Found, Run, RunBuilder, RUNS_KEY, RUN_PREFIX};
use crate::engine::store::error::StoreError;
use crate::engine::store::layout::ORDER_PREFIX;
use crate::engine::store::live::{Generations, ListState, MergeStop, Staged};
use crate::engine::store::partition::PartitionStore;

pub(crate) const GENERATIONS_KEY: &[u8] = b"\x00generations";
const INDEX_PREFIX: u8 = b'g';
/// A merge of at most this many bytes runs on the thread whose write-out
/// called for it (a few milliseconds); a larger one on a thread of its own,
/// while the partition goes on.
const MERGE_INLINE_BYTES: u64 = 8 << 20;
/// A merge writes its runs in sled batches of about this many bytes.
const MERGE_BATCH_BYTES: usize = 4 << 20;

/// A generation's index is stored cut into pieces of at most this many
/// bytes, under `g`, the generation's number and the piece's. A sled leaf
/// holds up to 17 values, and one past sled's blob threshold (128 KiB) is
/// written to a blob file of its own each time it changes; the leaf of a
/// large generation's index, whole, changed with every write-out's index
/// beside it, and its blobs outlived it (2.5 GiB of them for 151 MiB of
/// state on `lifecycle`, docs/performance.md).
const INDEX_PIECE_BYTES: usize = 4 << 10;

/// The prefix of generation `id`'s index pieces (before layout 8 was cut
/// into pieces, the key of its index whole).
fn index_key(id: u32) -> [u8; 5] {
    let mut key = [INDEX_PREFIX, 0, 0, 0, 0];
    key[1..].copy_from_slice(&id.to_be_bytes());
    key
}

/// Puts `index` into `batch` in pieces.
fn put_index(batch: &mut sled::Batch, id: u32, index: &GenerationIndex) {
    for (n, piece) in index.encode().chunks(INDEX_PIECE_BYTES).enumerate() {
        let mut key = [0; 9];
        key[..5].copy_from_slice(&index_key(id));
        key[5..].copy_from_slice(&(n as u32).to_be_bytes());
        batch.insert(&key, piece);
    }
}

/// Removes, in `batch`, generation `id`'s index pieces (or its index
/// whole, as an earlier build stored it).
fn remove_index(tree: &sled::Tree, batch: &mut sled::Batch, id: u32) -> sled::Result<()> {
    for key in tree.scan_prefix(index_key(id)).keys() {
        batch.remove(key?);
    }
    Ok(())
}

fn list_of(next_id: u32, live: &[Arc<GenerationIndex>]) -> LiveList {
    LiveList {
        next_id,
        ids: live.iter().map(|g| g.id).collect(),
    }
}

/// Cuts entries given in key order into the runs of generation `id`,
/// handing each run (its key and value) to `put`.
fn build<X>(
    id: u32,
    keys_hint: u64,
    entries: impl Iterator<Item = Result<Entry, X>>,
    mut put: impl FnMut(Vec<u8>, Vec<u8>) -> Result<(), X>,
) -> Result<GenerationIndex, X> {
    let mut builder = RunBuilder::default();
    let mut index = IndexBuilder::new(id, keys_hint);
    let mut cut = |last: Vec<u8>, run: Vec<u8>, index: &mut IndexBuilder| {
        index.run(&last, run.len());
        put(runs::run_key(id, &last), run)
    };
    for entry in entries {
        let (key, value) = entry?;
        index.key(&key);
        if let Some((last, run)) = builder.push(&key, value.as_deref()) {
            cut(last, run, &mut index)?;
        }
    }
    if let Some((last, run)) = builder.finish() {
        cut(last, run, &mut index)?;
    }
    Ok(index.finish())
}

/// Deletes, in `batch`, the runs and index of every generation a merge
/// replaced that no snapshot of the live list holds any more (a reader
/// holding one keeps its `Arc`).
fn collect_garbage(
    tree: &sled::Tree,
    list: &mut ListState,
    batch: &mut sled::Batch,
) -> sled::Result<()> {
    let (free, held): (Vec<_>, Vec<_>) = std::mem::take(&mut list.garbage)
        .into_iter()
        .partition(|generation| Arc::strong_count(generation) == 1);
    list.garbage = held;
    for generation in free {
        for last in &generation.last_keys {
            batch.remove(runs::run_key(generation.id, last));
        }
        remove_index(tree, batch, generation.id)?;
    }
    Ok(())
}

impl PartitionStore {
    fn corrupt_generation(&self, what: String, message: String) -> StoreError {
        StoreError::Corrupt {
            tree: self.name.clone(),
            key: what,
            message,
        }
    }

    /// The generations of `tree` as stored, bringing an older layout's tree
    /// over first, and deleting runs a crashed merge left.
    pub(crate) fn load_generations(&self) -> Result<Generations, StoreError> {
        let list = match self.tree.get(GENERATIONS_KEY).map_err(|e| self.io(e))? {
            Some(bytes) => {
                let list = LiveList::decode(&bytes)
                    .map_err(|m| self.corrupt_generation("generations".into(), m))?;
                self.delete_stray_states()?;
                list
            }
            None => self.bring_over()?,
        };
        let mut live = Vec::with_capacity(list.ids.len());
        for id in &list.ids {
            let mut bytes = Vec::new();
            for piece in self.tree.scan_prefix(index_key(*id)).values() {
                bytes.extend_from_slice(&piece.map_err(|e| self.io(e))?);
            }
            if bytes.is_empty() {
                return Err(self.corrupt_generation(format!("generation {id}"), "no index".into()));
            }
            let index = GenerationIndex::decode(&bytes)
                .map_err(|m| self.corrupt_generation(format!("generation {id}"), m))?;
            live.push(Arc::new(index));
        }
        self.delete_orphans(&list)?;
        Ok(Generations::new(list.next_id, live))
    }

    /// A tree of layout 7 or before: its generations (numbered 0 up to the
    /// count `\x00runs` held) are indexed, and the states it holds key by
    /// key (which shadowed the runs) become a generation on top. One batch
    /// makes the list live; the states are removed after it.
    fn bring_over(&self) -> Result<LiveList, StoreError> {
        let count = match self.tree.get(RUNS_KEY).map_err(|e| self.io(e))? {
            None => 0,
            Some(bytes) => <[u8; 4]>::try_from(bytes.as_ref())
                .map(u32::from_be_bytes)
                .map_err(|_| self.corrupt_generation("runs".into(), "not 4 bytes".into()))?,
        };
        let mut batch = sled::Batch::default();
        let mut ids: Vec<u32> = (0..count).collect();
        for id in 0..count {
            let keys = self.generation_scan(id, None).count() as u64;
            let entries = self.generation_scan(id, None);
            let mut index = build(id, keys, entries, |_, _| Ok(()))?;
            // The runs stay as they are; only their index is new.
            index.last_keys = self.run_last_keys(id)?;
            put_index(&mut batch, id, &index);
        }
        let states: Vec<Result<Entry, StoreError>> = self
            .tree
            .scan_prefix([ORDER_PREFIX])
            .map(|item| {
                let (key, value) = item.map_err(|e| self.io(e))?;
                let value = (!(count > 0 && value.is_empty())).then(|| value.to_vec());
                Ok((key.to_vec(), value))
            })
            .collect();
        let mut state_keys = Vec::with_capacity(states.len());
        if !states.is_empty() {
            let id = count;
            let hint = states.len() as u64;
            let entries = states.into_iter().inspect(|e| {
                if let Ok((key, _)) = e {
                    state_keys.push(key.clone());
                }
            });
            let index = build(id, hint, entries, |key, run| {
                batch.insert(key, run);
                Ok(())
            })?;
            put_index(&mut batch, id, &index);
            ids.push(id);
        }
        let list = LiveList {
            next_id: ids.len() as u32,
            ids,
        };
        batch.insert(GENERATIONS_KEY, list.encode());
        batch.remove(RUNS_KEY);
        self.tree.apply_batch(batch).map_err(|e| self.io(e))?;
        for key in state_keys {
            self.tree.remove(key).map_err(|e| self.io(e))?;
        }
        Ok(list)
    }

    /// States left key by key after a crash in [`Self::bring_over`], once
    /// its batch had made them a generation: no read looks at them.
    fn delete_stray_states(&self) -> Result<(), StoreError> {
        for key in self.tree.scan_prefix([ORDER_PREFIX]).keys() {
            self.tree
                .remove(key.map_err(|e| self.io(e))?)
                .map_err(|e| self.io(e))?;
        }
        Ok(())
    }

    /// The last keys of generation `id`'s runs, from their sled keys.
    fn run_last_keys(&self, id: u32) -> Result<Vec<Box<[u8]>>, StoreError> {
        let start = runs::generation_start(id, &[]);
        let mut out = Vec::new();
        for item in self.tree.range(start.clone()..runs::generation_end(id)) {
            let (key, _) = item.map_err(|e| self.io(e))?;
            out.push(key[start.len()..].into());
        }
        Ok(out)
    }

    /// Deletes the runs and index of every generation number below the
    /// list's next one that the list does not name (a merge that did not
    /// switch). Visits one run key per generation, live or not.
    fn delete_orphans(&self, list: &LiveList) -> Result<(), StoreError> {
        let mut from = vec![RUN_PREFIX];
        loop {
            let Some(item) = self.tree.range(from..vec![RUN_PREFIX + 1]).next() else {
                return Ok(());
            };
            let (key, _) = item.map_err(|e| self.io(e))?;
            let id = key
                .get(1..5)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map(u32::from_be_bytes)
                .ok_or_else(|| self.corrupt_generation("run".into(), "short key".into()))?;
            if !list.ids.contains(&id) {
                let doomed: Vec<sled::IVec> = self
                    .tree
                    .range(runs::generation_start(id, &[])..runs::generation_end(id))
                    .keys()
                    .collect::<Result<_, _>>()
                    .map_err(|e| self.io(e))?;
                let mut batch = sled::Batch::default();
                for key in doomed {
                    batch.remove(key);
                }
                remove_index(&self.tree, &mut batch, id).map_err(|e| self.io(e))?;
                self.tree.apply_batch(batch).map_err(|e| self.io(e))?;
            }
            match id.checked_add(1) {
                Some(next) => from = runs::generation_start(next, &[]),
                None => return Ok(()),
            }
        }
    }

    /// Adds `entries` (keys ascending, each once) to `batch` as a new
    /// generation on top, with the live list naming it and settling every
    /// pending one. Returns the lock to hold until the batch is applied,
    /// and what to make live then.
    pub(crate) fn stage_generation(
        &self,
        entries: Vec<Entry>,
        batch: &mut sled::Batch,
    ) -> Result<Staged<'_>, StoreError> {
        let (mut list, index) = self.write_generation(entries, batch)?;
        let mut next: Vec<_> = self.generations.live().iter().cloned().collect();
        next.push(Arc::new(index));
        batch.insert(GENERATIONS_KEY, list_of(list.next_id, &next).encode());
        list.pending = 0;
        Ok(Staged { _list: list, next })
    }

    /// A write-out that changed no state: when spilled generations are
    /// pending, the list that settles them goes into `batch`.
    pub(crate) fn stage_settling(&self, batch: &mut sled::Batch) -> Option<Staged<'_>> {
        let mut list = self.generations.lock();
        if list.pending == 0 {
            return None;
        }
        let next: Vec<_> = self.generations.live().iter().cloned().collect();
        batch.insert(GENERATIONS_KEY, list_of(list.next_id, &next).encode());
        list.pending = 0;
        Some(Staged { _list: list, next })
    }

    /// Makes a staged list live once its batch is applied.
    pub(crate) fn publish(&self, staged: Staged<'_>) {
        self.generations.set_live(staged.next);
    }

    /// Applies `batch`, holding a new generation (`staged`), makes it live,
    /// then merges when due. A failed merge is logged, not returned: the
    /// batch is in, the generations it would have merged stay live, and the
    /// next change plans the merge again.
    pub(crate) fn apply_with_generation(
        &self,
        batch: sled::Batch,
        staged: Staged<'_>,
    ) -> Result<(), StoreError> {
        self.tree.apply_batch(batch).map_err(|e| self.io(e))?;
        self.publish(staged);
        if let Err(error) = self.merge_when_due() {
            tracing::warn!(tree = %self.name, %error, "merging generations of runs failed");
        }
        Ok(())
    }

    /// The runs and index of a new generation of `entries` (keys ascending,
    /// each once) in `batch`, under the next number; the list lock, held.
    fn write_generation(
        &self,
        entries: Vec<Entry>,
        batch: &mut sled::Batch,
    ) -> Result<(MutexGuard<'_, ListState>, GenerationIndex), StoreError> {
        let mut list = self.generations.lock();
        collect_garbage(&self.tree, &mut list, batch).map_err(|e| self.io(e))?;
        let id = list.next_id;
        list.next_id = id.checked_add(1).ok_or_else(|| {
            self.corrupt_generation("generations".into(), "numbers ran out".into())
        })?;
        let hint = entries.len() as u64;
        let index = build(
            id,
            hint,
            entries.into_iter().map(Ok::<_, StoreError>),
            |key, run| {
                batch.insert(key, run);
                Ok(())
            },
        )?;
        put_index(batch, id, &index);
        Ok((list, index))
    }

    /// Writes changed states evicted from memory before their write-out as
    /// a pending generation on top: read from now on like the others,
    /// settled by the next write-out's batch, deleted at the next open if a
    /// crash comes first. No checkpoint moves and nothing is flushed.
    pub(crate) fn spill(&self, entries: Vec<Entry>) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        let (mut list, index) = self.write_generation(entries, &mut batch)?;
        self.tree.apply_batch(batch).map_err(|e| self.io(e))?;
        let mut next: Vec<_> = self.generations.live().iter().cloned().collect();
        next.push(Arc::new(index));
        self.generations.set_live(next);
        list.pending += 1;
        Ok(())
    }

    /// Forgets the pending (spilled) generations: the partition starts over
    /// from its checkpoint, which they are past (a fence, a restore, a
    /// reassignment after a write-out that never came). Their runs go with
    /// the next change of the list, once no reader holds them; a crash
    /// first leaves them to the next open, as no stored list names them.
    pub(crate) fn discard_pending(&self) {
        let mut list = self.generations.lock();
        if list.pending == 0 {
            return;
        }
        let live = self.generations.live();
        let settled = list.settled(&live).len();
        list.garbage.extend(live[settled..].iter().cloned());
        self.generations.set_live(live[..settled].to_vec());
        list.pending = 0;
    }

    /// The entries of the pending (spilled) generations, newest value of
    /// each key, in key order: what the next write-out's changelog carries
    /// for states no longer in memory.
    pub(crate) fn spilled(&self) -> Vec<Result<Entry, StoreError>> {
        let pending = self.generations.lock().pending;
        let live = self.generations.live();
        let sources: Vec<_> = live
            .iter()
            .rev()
            .take(pending)
            .map(|g| self.generation_scan(g.id, None))
            .collect();
        Merge::new(sources, false).collect()
    }

    /// What the newest generation that holds `key` says (`None`: none holds
    /// it; `Some(None)`: deleted there).
    pub(crate) fn in_generations(
        &self,
        key: &[u8],
    ) -> Result<Option<Option<sled::IVec>>, StoreError> {
        let hash = KeyHash::of(key);
        for generation in self.generations.live().iter().rev() {
            let Some(last) = generation.run_for(key, hash) else {
                continue;
            };
            let run_key = runs::run_key(generation.id, last);
            let bytes = self
                .tree
                .get(&run_key)
                .map_err(|e| self.io(e))?
                .ok_or_else(|| {
                    self.corrupt_generation(
                        format!("generation {}", generation.id),
                        format!("its index names a run that is not stored: {run_key:?}"),
                    )
                })?;
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

    /// The entries of generation `id`'s runs (keys starting with `prefix`
    /// only, when given), in key order, read a run at a time.
    pub(crate) fn generation_scan(
        &self,
        id: u32,
        prefix: Option<u8>,
    ) -> impl Iterator<Item = Result<Entry, StoreError>> + '_ {
        let start = runs::generation_start(id, prefix.as_slice());
        let runs = self.tree.range(start..runs::generation_end(id));
        // Set once a run holds a key past the prefix: no later run has one in it.
        let mut past = false;
        runs.map_while(move |item| (!past).then(|| self.run_entries(item, prefix, &mut past)))
            .flat_map(|entries| match entries {
                Ok(entries) => entries.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(error) => vec![Err(error)],
            })
    }

    /// One run's entries (with keys starting with `prefix`, when given);
    /// sets `past` when the run goes on beyond them.
    fn run_entries(
        &self,
        item: sled::Result<(sled::IVec, sled::IVec)>,
        prefix: Option<u8>,
        past: &mut bool,
    ) -> Result<Vec<Entry>, StoreError> {
        let (_, bytes) = item.map_err(|e| self.io(e))?;
        let corrupt = |m| self.corrupt_run(prefix.as_slice(), m);
        let run = Run::parse(&bytes).map_err(corrupt)?;
        let first = run.lower_bound(prefix.as_slice()).map_err(corrupt)?;
        let mut entries = Vec::with_capacity(run.len() - first);
        for index in first..run.len() {
            let (key, value) = run.entry(index).map_err(corrupt)?;
            if prefix.is_some_and(|p| key.first() != Some(&p)) {
                *past = true;
                break;
            }
            entries.push((key.to_vec(), value.map(<[u8]>::to_vec)));
        }
        Ok(entries)
    }

    /// After a write-out: merges what [`plan_merge`] calls for, here when it
    /// is small, else on a thread of its own (one merge per tree at a time).
    pub(crate) fn merge_when_due(&self) -> Result<(), StoreError> {
        let live = self.generations.live();
        let settled = self.generations.lock().settled(&live).len();
        let sizes: Vec<u64> = live[..settled].iter().map(|g| g.bytes).collect();
        let Some(range) = plan_merge(&sizes) else {
            return Ok(());
        };
        if self.generations.merging.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let bytes: u64 = sizes[range].iter().sum();
        if bytes <= MERGE_INLINE_BYTES {
            let merged = self.merge(MergeStop::Never);
            self.generations.merging.store(false, Ordering::Release);
            return merged.map(drop);
        }
        let tree = self.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("merge {}", self.name))
            .spawn(move || {
                // Merging again while the plan calls for it: a large merge
                // may leave the next one due.
                loop {
                    match tree.merge(MergeStop::Never) {
                        Ok(true) => {}
                        Ok(false) => break,
                        Err(error) => {
                            // The generations it read stay live; the next
                            // write-out plans the merge again.
                            tracing::warn!(tree = %tree.name, %error, "merging generations of runs failed");
                            break;
                        }
                    }
                }
                tree.generations.merging.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.generations.merging.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Merges the generations [`plan_merge`] picks into one, written under a
    /// new number, then switches the list to it in one batch that also
    /// deletes the merged runs. Returns whether it merged.
    pub(crate) fn merge(&self, stop: MergeStop) -> Result<bool, StoreError> {
        let (live, clears, id) = {
            let mut list = self.generations.lock();
            let id = list.next_id;
            list.next_id = id.saturating_add(1);
            let live = self.generations.live();
            (list.settled(&live).to_vec(), list.clears, id)
        };
        let sizes: Vec<u64> = live.iter().map(|g| g.bytes).collect();
        let Some(range) = plan_merge(&sizes) else {
            return Ok(false);
        };
        let merged: Vec<Arc<GenerationIndex>> = live[range.clone()].to_vec();
        let written = self.write_merged(id, &merged, range.start == 0, stop)?;
        let Some(index) = written else {
            return Ok(false);
        };
        let mut list = self.generations.lock();
        let now = self.generations.live();
        let position = now.iter().position(|g| g.id == merged[0].id);
        let still_there = list.clears == clears
            && position.is_some_and(|at| {
                now.get(at..at + merged.len())
                    .is_some_and(|s| s.iter().map(|g| g.id).eq(merged.iter().map(|g| g.id)))
            });
        let mut batch = sled::Batch::default();
        let Some(at) = position.filter(|_| still_there) else {
            // Cleared meanwhile: the merged runs are orphans. The lock held
            // keeps a write-out's generation, not yet live, out of the way.
            let orphaned = list_of(list.next_id, &now);
            return self.delete_orphans(&orphaned).map(|_| false);
        };
        collect_garbage(&self.tree, &mut list, &mut batch).map_err(|e| self.io(e))?;
        put_index(&mut batch, id, &index);
        let mut next: Vec<_> = now.iter().cloned().collect();
        next.splice(at..at + merged.len(), [Arc::new(index)]);
        batch.insert(
            GENERATIONS_KEY,
            list_of(list.next_id, list.settled(&next)).encode(),
        );
        self.tree.apply_batch(batch).map_err(|e| self.io(e))?;
        self.generations.set_live(next);
        // Their runs stay while a reader may hold them (`collect_garbage`).
        list.garbage.extend(merged);
        Ok(true)
    }

    /// Writes the merge of `merged` (oldest first) as the runs of generation
    /// `id`, in batches; none of it is live until the switch. `None`: stopped
    /// by `stop`.
    fn write_merged(
        &self,
        id: u32,
        merged: &[Arc<GenerationIndex>],
        bottom: bool,
        stop: MergeStop,
    ) -> Result<Option<GenerationIndex>, StoreError> {
        let sources: Vec<_> = merged
            .iter()
            .rev()
            .map(|g| self.generation_scan(g.id, None))
            .collect();
        let hint: u64 = merged.iter().map(|g| g.keys).sum();
        let mut batch = sled::Batch::default();
        let (mut pending, mut runs_written) = (0usize, 0usize);
        let mut stopped = false;
        let index = build(id, hint, Merge::new(sources, bottom), |key, run| {
            if stopped {
                return Ok(());
            }
            pending += run.len();
            batch.insert(key, run);
            runs_written += 1;
            if pending >= MERGE_BATCH_BYTES || stop == MergeStop::AfterRuns(runs_written) {
                self.tree
                    .apply_batch(std::mem::take(&mut batch))
                    .map_err(|e| self.io(e))?;
                pending = 0;
            }
            stopped = stop == MergeStop::AfterRuns(runs_written);
            Ok(())
        })?;
        if stopped {
            return Ok(None);
        }
        self.tree.apply_batch(batch).map_err(|e| self.io(e))?;
        Ok(Some(index))
    }
}

#[cfg(test)]
mod tests;
