//! One partition's state between write-outs, as Kafka Streams' record cache
//! keeps it: every decoded event is decided against an in-memory cache of the
//! partition's order states (read through from its sled tree), and each
//! changed order is written once per write-out, with the checkpoint, in one
//! atomic sled batch. An order touched a hundred times between two
//! write-outs costs one key.
//!
//! The processor's partition tasks and the store-limit benchmark both drive
//! this, so they write exactly the same keys.
//!
//! Nothing here is durable until a write-out's batch is flushed
//! (`Store::flush`); a crash loses only what the last durable checkpoint
//! does not cover, and a restart re-processes exactly that.

use std::collections::HashMap;

use crate::engine::decide::{
    apply, apply_in_place, decide, needs, recent_entry, Decision, InboxSpill, Needs,
};
use crate::engine::entity::{Entity, Event, State};
use crate::engine::inbox::{Chunk, ChunkRef, InboxEntry};
use crate::engine::outbox_record::{status_id_hash, status_id_of_hash, OutboxRecord};
use crate::engine::outcomes::Outcomes;
use crate::engine::store::{BatchWrite, Checkpoint, PartitionStore, StoreError};

/// What one batch of decisions did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// Applied, duplicates and stale (dead letters are counted before a
    /// batch is decided, by the partition task).
    pub outcomes: Outcomes,
    /// Applied events that skipped versions (the order's previous version
    /// was not `version - 1`; its first event not version 1).
    pub(crate) version_gaps: u64,
    /// Inbox chunks read from the store to classify an old redelivery.
    pub(crate) chunk_reads: u64,
}

/// What one write-out wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOutcome {
    /// Orders written.
    pub orders: usize,
    /// Keys written or deleted, the checkpoint included.
    pub keys: usize,
    /// Bytes of keys and values handed to sled.
    pub bytes: usize,
    /// The checkpoint written.
    pub checkpoint: Checkpoint,
}

/// A write-out falls due early once the changes it would carry (in memory
/// and spilled) pass this many times the partition's cache share
/// ([`PartitionState::over_budget`]).
pub(crate) const WRITE_OUT_SHARES: usize = 3;

/// An entity in the cache.
struct Cached<E: Entity> {
    state: State<E>,
    /// Changed since the last write-out.
    dirty: bool,
    /// Full inbox chunks not yet written (packed as they will be).
    new_chunks: Vec<Chunk>,
    /// Chunks past the retention window, not yet deleted.
    expired_chunks: Vec<ChunkRef>,
    /// Approximate memory held, for the cache budget.
    bytes: usize,
    /// The batch that last read it in or changed it
    /// ([`PartitionState::shed`] forgets the least recently touched first).
    touched: u64,
}

/// Per-entry overhead beyond the state's heap: the map's slot (key and
/// entry inline, the state among them) with the table's spare slots (it
/// is at most 7/8 full) and control byte, and the allocator's header of
/// each heap block an entry holds (its key twice, the event id, the data,
/// the inbox: about five).
const fn entry_overhead<E: Entity>() -> usize {
    std::mem::size_of::<(String, Cached<E>)>() * 8 / 7 + 1 + 5 * 16
}

impl<E: Entity> Cached<E> {
    fn measure(&self, key_len: usize) -> usize {
        entry_overhead::<E>()
            + key_len
            + self.state.heap_bytes()
            + self.new_chunks.capacity() * std::mem::size_of::<Chunk>()
            + self.new_chunks.iter().map(Chunk::heap_bytes).sum::<usize>()
            + self.expired_chunks.capacity() * std::mem::size_of::<ChunkRef>()
    }
}

/// One partition's entity cache, pending checkpoint and store tree.
pub struct PartitionState<E: Entity> {
    store: PartitionStore,
    cache: HashMap<String, Cached<E>>,
    /// Covers every record decided so far (in memory until written).
    pending: Option<Checkpoint>,
    /// The checkpoint of the last write-out (or as opened).
    written: Option<Checkpoint>,
    /// Bytes of dirty entries.
    dirty_bytes: usize,
    /// Bytes of the entries spilled since the last write-out (which carries
    /// them to the changelog).
    spilled_bytes: usize,
    /// Bytes of all entries.
    cached_bytes: usize,
    /// Where the status changes of applied events go.
    status_changes: StatusChanges,
    /// Counts [`Self::apply`] calls: the cache's clock for [`Cached::touched`].
    batches: u64,
    /// Status changes decided since the last write-out.
    new_outbox: Vec<OutboxRecord<E::Status>>,
    /// Published outbox records up to this source offset are to be deleted
    /// at the next write-out (`None`: nothing to delete).
    outbox_delete_through: Option<i64>,
    /// Deleted through this source offset already (-1: nothing yet).
    outbox_deleted_through: i64,
    /// `occurred_at` of the events applied since the last write-out began
    /// (the completion-time histogram, observed once they are durable).
    applied_at: Vec<i64>,
}

/// Where a partition's status changes go (the outbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusChanges {
    /// Nowhere: the outbox is off.
    Off,
    /// Stored as outbox rows in each write-out's batch, for the relay.
    Stored { partition: i32 },
    /// Handed to each write-out ([`PreparedWrite::status`]) and never
    /// stored: produced in its transaction, or acknowledged before its batch.
    WithWriteOut { partition: i32 },
}

impl StatusChanges {
    /// The input partition whose records the changes are, when on.
    fn partition(self) -> Option<i32> {
        match self {
            StatusChanges::Off => None,
            StatusChanges::Stored { partition } | StatusChanges::WithWriteOut { partition } => {
                Some(partition)
            }
        }
    }
}

/// A decoded record with the input offset it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Sourced<E> {
    /// The record's input offset.
    pub offset: i64,
    /// What it decoded to.
    pub value: E,
}

/// One batch of a partition's records, decoded, for [`PartitionState::apply`].
#[derive(Debug, Clone)]
pub struct Decoded<B> {
    /// The decoded records, in offset order.
    pub events: Vec<Sourced<Event<B>>>,
    /// Records of the batch that were dead-lettered instead (counted).
    pub dead_lettered: u64,
    /// The batch's first record: where the checkpoint starts on a partition
    /// this store never processed.
    pub first_offset: i64,
    /// The offset after the batch's last record.
    pub next_offset: i64,
}

impl<E: Entity> PartitionState<E> {
    /// The partition as its store holds it (`checkpoint` as read from it).
    pub fn new(store: PartitionStore, checkpoint: Option<Checkpoint>) -> Self {
        PartitionState {
            store,
            cache: HashMap::new(),
            pending: checkpoint,
            written: checkpoint,
            dirty_bytes: 0,
            spilled_bytes: 0,
            cached_bytes: 0,
            batches: 0,
            status_changes: StatusChanges::Off,
            new_outbox: Vec::new(),
            outbox_delete_through: None,
            outbox_deleted_through: -1,
            applied_at: Vec::new(),
        }
    }

    /// The partition as its store holds it, starting over from
    /// `checkpoint` (a task's start, after a fence or a restore): states
    /// spilled by an earlier attempt that never wrote out are past it and
    /// are dropped.
    pub fn starting_over(store: PartitionStore, checkpoint: Option<Checkpoint>) -> Self {
        store.discard_pending();
        PartitionState::new(store, checkpoint)
    }

    /// The `occurred_at` of every event applied since the last call: the
    /// events the write-out about to start makes durable.
    pub(crate) fn take_applied_times(&mut self) -> Vec<i64> {
        std::mem::take(&mut self.applied_at)
    }

    /// From now on, status changes of applied events go where `changes`
    /// says.
    pub(crate) fn send_status_changes(&mut self, changes: StatusChanges) {
        self.status_changes = changes;
    }

    /// The relay published (and the broker acknowledged) every outbox record
    /// up to `source_offset`: delete them at the next write-out.
    pub(crate) fn outbox_published_through(&mut self, source_offset: i64) {
        if source_offset > self.outbox_deleted_through
            && self.outbox_delete_through.is_none_or(|d| d < source_offset)
        {
            self.outbox_delete_through = Some(source_offset);
        }
    }

    /// An empty stand-in over the same tree (no cache, no checkpoint), for
    /// while the state is lent to a blocking thread.
    pub(crate) fn empty_like(&self) -> Self {
        PartitionState::new(self.store.clone(), None)
    }

    /// The partition's tree.
    pub fn store(&self) -> &PartitionStore {
        &self.store
    }

    /// The checkpoint covering every record decided so far.
    pub fn pending(&self) -> Option<Checkpoint> {
        self.pending
    }

    /// The checkpoint last written to the store.
    pub fn written(&self) -> Option<Checkpoint> {
        self.written
    }

    /// True when decisions were made, or published outbox records are to
    /// be deleted, since the last write-out.
    pub(crate) fn has_unwritten(&self) -> bool {
        self.pending != self.written
            || (self.outbox_delete_through.is_some() && self.pending.is_some())
    }

    /// Memory held by changed, unwritten orders.
    pub fn dirty_bytes(&self) -> usize {
        self.dirty_bytes
    }

    /// True when the changes since the last write-out, in memory and
    /// spilled, pass what a write-out may carry for a cache share of
    /// `share` bytes: the changed orders alone past it (none could be
    /// spilled), or with the spilled ones past [`WRITE_OUT_SHARES`] times
    /// it. A write-out then falls due before the commit interval, so its
    /// encoded changes and changelog records stay bounded.
    pub fn over_budget(&self, share: usize) -> bool {
        self.dirty_bytes > share
            || self.dirty_bytes + self.spilled_bytes > share.saturating_mul(WRITE_OUT_SHARES)
    }

    /// Orders in the cache.
    #[cfg(test)]
    pub(crate) fn cached_orders(&self) -> usize {
        self.cache.len()
    }

    /// Whether `key` is in the cache.
    #[cfg(test)]
    pub(crate) fn is_cached(&self, key: &str) -> bool {
        self.cache.contains_key(key)
    }

    /// Memory held by all cached orders.
    #[cfg(test)]
    pub(crate) fn cached_bytes(&self) -> usize {
        self.cached_bytes
    }

    /// The state of one order as decided so far (cache, then store).
    pub fn get(&self, key: &str) -> Result<Option<State<E>>, StoreError> {
        match self.cache.get(key) {
            Some(cached) => Ok(Some(cached.state.clone())),
            None => self.store.get(key),
        }
    }

    /// Decides a decoded batch against the cache and moves the pending
    /// checkpoint to its `next_offset`, counting its dead-lettered records
    /// too. Nothing is written.
    pub fn apply(
        &mut self,
        batch: Decoded<E::Body>,
        now_ms: i64,
        retention_ms: i64,
    ) -> Result<BatchOutcome, StoreError> {
        let Decoded {
            events,
            dead_lettered,
            first_offset,
            next_offset,
        } = batch;
        let horizon = now_ms.saturating_sub(retention_ms);
        let mut outcome = BatchOutcome::default();
        self.batches += 1;
        for Sourced {
            offset,
            value: event,
        } in events
        {
            let mut cached = self.cache.get(event.key.as_str());
            if cached.is_none() {
                if let Some(state) = self.store.get(&event.key)? {
                    let mut read = Cached {
                        state,
                        dirty: false,
                        new_chunks: Vec::new(),
                        expired_chunks: Vec::new(),
                        bytes: 0,
                        touched: self.batches,
                    };
                    read.bytes = read.measure(event.key.len());
                    self.cached_bytes += read.bytes;
                    self.cache.insert(event.key.clone(), read);
                    cached = self.cache.get(event.key.as_str());
                }
            }
            let state = cached.map(|c| &c.state);
            let entry = match needs(state, &event) {
                Needs::Nothing => recent_entry(state, &event),
                Needs::Chunk(chunk) => {
                    outcome.chunk_reads += 1;
                    self.chunk_entry(cached, &event.key, chunk, event.version)?
                }
            };
            let decision = decide(state, entry.as_ref(), &event, horizon);
            outcome.outcomes.count(decision);
            match decision {
                Decision::Duplicate | Decision::Stale => {}
                Decision::Apply => {
                    let previous = state.map(|s| s.version).unwrap_or(0);
                    if event.version != previous + 1 {
                        outcome.version_gaps += 1;
                    }
                    self.applied_at.push(event.occurred_at);
                    let Some(partition) = self.status_changes.partition() else {
                        self.apply_one(event, now_ms, retention_ms, None);
                        continue;
                    };
                    let from_status = state.and_then(|s| E::status(&s.data));
                    // The change's id is formatted only if the status changes.
                    let (id_hash, version, occurred_at) = (
                        status_id_hash(&event.event_id),
                        event.version,
                        event.occurred_at,
                    );
                    let changed = self.apply_one(event, now_ms, retention_ms, Some(&from_status));
                    if let Some((to_status, key)) = changed {
                        self.new_outbox.push(OutboxRecord {
                            event_id: status_id_of_hash(id_hash),
                            key,
                            version,
                            from_status,
                            to_status,
                            occurred_at,
                            source_partition: partition,
                            source_offset: offset,
                            created_ms: now_ms,
                            epoch: self.pending.map(|c| c.epoch).unwrap_or(0),
                        });
                    }
                }
            }
        }
        let mut next = self
            .pending
            .unwrap_or_else(|| Checkpoint::starting_at(first_offset));
        next.next_offset = next_offset;
        next.applied += outcome.outcomes.applied;
        next.duplicates += outcome.outcomes.duplicates;
        next.stale += outcome.outcomes.stale;
        next.dead_lettered += dead_lettered;
        self.pending = Some(next);
        Ok(outcome)
    }

    /// The inbox entry of `version` in the chunk `chunk`: among the chunks
    /// not yet written, else in the store.
    fn chunk_entry(
        &self,
        cached: Option<&Cached<E>>,
        order_id: &str,
        chunk: ChunkRef,
        version: i64,
    ) -> Result<Option<InboxEntry>, StoreError> {
        let unwritten = cached.and_then(|c| c.new_chunks.iter().find(|c| c.reference() == chunk));
        match unwritten {
            Some(unwritten) => Ok(unwritten.find(version)),
            None => Ok(self
                .store
                .get_chunk(order_id, chunk)?
                .and_then(|entries| entries.into_iter().find(|e| e.version == version))),
        }
    }

    /// Applies one event. With `watch` (the status before it), returns the
    /// status after it and the key when the status changed.
    fn apply_one(
        &mut self,
        event: Event<E::Body>,
        now_ms: i64,
        retention_ms: i64,
        watch: Option<&Option<E::Status>>,
    ) -> Option<(E::Status, String)> {
        let changed = |state: &State<E>| {
            let from = watch?;
            E::status(&state.data)
                .filter(|to| from.as_ref() != Some(to))
                .map(|to| (to, state.key.clone()))
        };
        match self.cache.get_mut(event.key.as_str()) {
            Some(cached) => {
                cached.touched = self.batches;
                let spill = apply_in_place(&mut cached.state, event, now_ms, retention_ms);
                let key_len = cached.state.key.len();
                record_spill(cached, spill);
                let before = cached.bytes;
                cached.bytes = cached.measure(key_len);
                self.cached_bytes = self.cached_bytes + cached.bytes - before;
                if cached.dirty {
                    self.dirty_bytes = self.dirty_bytes + cached.bytes - before;
                } else {
                    cached.dirty = true;
                    self.dirty_bytes += cached.bytes;
                }
                changed(&cached.state)
            }
            None => {
                let key = event.key.clone();
                let (state, spill) = apply(None, event, now_ms, retention_ms);
                let mut cached = Cached {
                    state,
                    dirty: true,
                    new_chunks: Vec::new(),
                    expired_chunks: Vec::new(),
                    bytes: 0,
                    touched: self.batches,
                };
                record_spill(&mut cached, spill);
                cached.bytes = cached.measure(key.len());
                self.cached_bytes += cached.bytes;
                self.dirty_bytes += cached.bytes;
                let change = changed(&cached.state);
                self.cache.insert(key, cached);
                change
            }
        }
    }

    /// Writes every changed order (state, new inbox chunks, expired chunk
    /// deletions) and the pending checkpoint in one atomic sled batch: the
    /// write-out without a changelog ([`Self::prepare_write_out`] then
    /// [`Self::finish_write_out`]). Not durable until the store is flushed.
    /// `None` when nothing was decided since the last write-out.
    pub fn write_out(&mut self, keep_bytes: usize) -> Result<Option<WriteOutcome>, StoreError> {
        match self.prepare_write_out(false)? {
            None => Ok(None),
            Some(prepared) => self.finish_write_out(prepared, None, keep_bytes).map(Some),
        }
    }

    /// Encodes every changed order (state, new inbox chunks, expired chunk
    /// deletions) into one batch, with the changelog records of the same
    /// changes when `changelog`. Nothing is written; the cache must not
    /// change before [`Self::finish_write_out`].
    pub(crate) fn prepare_write_out(
        &self,
        changelog: bool,
    ) -> Result<Option<PreparedWrite<E::Status>>, StoreError> {
        let Some(checkpoint) = self.pending.filter(|_| self.has_unwritten()) else {
            return Ok(None);
        };
        let mut write = if changelog {
            BatchWrite::with_changelog()
        } else {
            BatchWrite::default()
        };
        let mut orders = 0;
        if changelog {
            // States spilled since the last write-out are in the store, no
            // longer in the cache (unless changed again).
            orders += self.store.spilled_into(&mut write, |order_id| {
                self.cache.get(order_id).is_some_and(|c| c.dirty)
            })?;
        }
        for (order_id, cached) in self.cache.iter().filter(|(_, c)| c.dirty) {
            orders += 1;
            write.put_state(&cached.state)?;
            for chunk in &cached.new_chunks {
                write.put_chunk(order_id, chunk);
            }
            for chunk in &cached.expired_chunks {
                // A chunk written by layout 6 or before (or restored from a
                // changelog it wrote) is under the order-grouped key.
                let legacy = self.store.has_legacy_chunk(order_id, chunk.first_version)?;
                write.delete_chunk(order_id, chunk, legacy);
            }
        }
        let mut status = Vec::new();
        if let StatusChanges::WithWriteOut { .. } = self.status_changes {
            status = self.new_outbox.clone();
        } else {
            for record in &self.new_outbox {
                write.put_outbox(record)?;
            }
        }
        let outbox_deleted = match self.outbox_delete_through {
            Some(through) => {
                for offset in self.store.outbox_through(through)? {
                    write.delete_outbox(offset);
                }
                Some(through)
            }
            None => None,
        };
        let checkpoint_bytes = self.store.encode_checkpoint(&checkpoint)?;
        Ok(Some(PreparedWrite {
            write,
            orders,
            checkpoint,
            checkpoint_bytes,
            outbox_deleted,
            status,
        }))
    }

    /// Writes a prepared write-out with its checkpoint (recording the
    /// changelog position `changelog_next` when it went to a changelog).
    /// Then, when the cache holds more than `keep_bytes`, forgets the least
    /// recently touched orders ([`Self::shed`]; all are clean now).
    pub(crate) fn finish_write_out(
        &mut self,
        prepared: PreparedWrite<E::Status>,
        changelog_next: Option<i64>,
        keep_bytes: usize,
    ) -> Result<WriteOutcome, StoreError> {
        let PreparedWrite {
            write,
            orders,
            mut checkpoint,
            outbox_deleted,
            ..
        } = prepared;
        if changelog_next.is_some() {
            checkpoint.changelog_next = changelog_next;
        }
        let (keys, bytes) = (write.keys + 1, write.bytes);
        self.store.commit_batch(write, &checkpoint)?;
        self.written = Some(checkpoint);
        self.pending = Some(checkpoint);
        self.new_outbox.clear();
        if let Some(deleted) = outbox_deleted {
            self.outbox_deleted_through = self.outbox_deleted_through.max(deleted);
            if self.outbox_delete_through == Some(deleted) {
                self.outbox_delete_through = None;
            }
        }
        for cached in self.cache.values_mut().filter(|c| c.dirty) {
            cached.dirty = false;
            cached.new_chunks = Vec::new();
            cached.expired_chunks = Vec::new();
            let key_len = cached.state.key.len();
            let before = cached.bytes;
            cached.bytes = cached.measure(key_len);
            self.cached_bytes = self.cached_bytes + cached.bytes - before;
        }
        self.dirty_bytes = 0;
        self.spilled_bytes = 0;
        self.shed(keep_bytes);
        Ok(WriteOutcome {
            orders,
            keys,
            bytes,
            checkpoint,
        })
    }

    /// When the changed orders alone hold more than `keep_bytes`, writes the
    /// least recently touched of them to the store as a pending generation
    /// and forgets them, down to half of it: the store reads them back from
    /// there, the next write-out settles them with its checkpoint (and
    /// sends them to the changelog), and a crash before it drops them, as
    /// it drops everything after the checkpoint. A write-out early, with its
    /// flush, commit and transaction, is then due only when what stays
    /// changed (orders with inbox chunks to write) passes the budget.
    /// Returns the orders spilled.
    pub fn spill(&mut self, keep_bytes: usize) -> Result<usize, StoreError> {
        if self.dirty_bytes <= keep_bytes {
            return Ok(0);
        }
        let mut dirty: Vec<(u64, &String, usize)> = self
            .cache
            .iter()
            .filter(|(_, c)| c.dirty && c.new_chunks.is_empty() && c.expired_chunks.is_empty())
            .map(|(key, c)| (c.touched, key, c.bytes))
            .collect();
        dirty.sort_unstable_by_key(|d| d.0);
        let mut to_free = self.dirty_bytes - keep_bytes / 2;
        let mut chosen: Vec<String> = Vec::new();
        for (_, key, bytes) in dirty {
            if to_free == 0 {
                break;
            }
            chosen.push(key.clone());
            to_free = to_free.saturating_sub(bytes);
        }
        if chosen.is_empty() {
            return Ok(0);
        }
        let cache = &self.cache;
        self.store.spill_states(
            chosen
                .iter()
                .filter_map(|key| cache.get(key))
                .map(|c| &c.state),
        )?;
        for key in &chosen {
            if let Some(cached) = self.cache.remove(key) {
                self.dirty_bytes -= cached.bytes;
                self.cached_bytes -= cached.bytes;
                self.spilled_bytes += cached.bytes;
            }
        }
        Ok(chosen.len())
    }

    /// When the cache holds more than `keep_bytes`, forgets unchanged
    /// orders, least recently touched first, until it holds at most three
    /// quarters of it (so the next pass is a quarter of the budget away).
    /// Changed orders stay until a write-out: when they alone pass the
    /// budget, the write-out is due. O(n log n) in the unchanged orders
    /// cached; a pass that frees what it should leaves a quarter of the
    /// budget before the next.
    pub fn shed(&mut self, keep_bytes: usize) {
        let clean_bytes = self.cached_bytes.saturating_sub(self.dirty_bytes);
        if self.cached_bytes <= keep_bytes || clean_bytes == 0 {
            return;
        }
        let target = keep_bytes - keep_bytes / 4;
        let mut to_free = self.cached_bytes.saturating_sub(target).min(clean_bytes);
        let mut clean: Vec<(u64, usize)> = self
            .cache
            .values()
            .filter(|c| !c.dirty)
            .map(|c| (c.touched, c.bytes))
            .collect();
        clean.sort_unstable();
        // Every clean order touched at or before `through` goes: the oldest
        // touches until enough is freed, and the rest of the last one's batch.
        let mut through = 0;
        for (touched, bytes) in clean {
            if to_free == 0 && touched > through {
                break;
            }
            through = touched;
            to_free = to_free.saturating_sub(bytes);
        }
        let mut freed = 0;
        self.cache.retain(|_, c| {
            let forget = !c.dirty && c.touched <= through;
            if forget {
                freed += c.bytes;
            }
            !forget
        });
        self.cached_bytes -= freed;
    }
}

/// A write-out encoded and not yet written.
pub(crate) struct PreparedWrite<S> {
    /// The changed keys (and their changelog records, when collected).
    pub write: BatchWrite,
    pub orders: usize,
    /// The checkpoint it moves the partition to.
    pub checkpoint: Checkpoint,
    /// Its bytes, for the changelog's checkpoint record.
    pub(crate) checkpoint_bytes: Vec<u8>,
    /// Published outbox records deleted, through this source offset.
    pub(crate) outbox_deleted: Option<i64>,
    /// The status changes to produce with it (direct status only; otherwise
    /// they are outbox rows in `write`).
    pub status: Vec<OutboxRecord<S>>,
}

fn record_spill<E: Entity>(cached: &mut Cached<E>, spill: InboxSpill) {
    if let Some(chunk) = spill.chunk {
        cached.new_chunks.push(chunk);
    }
    for chunk in spill.expired {
        // A chunk that expires before it was ever written is just dropped.
        match cached
            .new_chunks
            .iter()
            .position(|c| c.reference() == chunk)
        {
            Some(i) => {
                cached.new_chunks.remove(i);
            }
            None => cached.expired_chunks.push(chunk),
        }
    }
}
