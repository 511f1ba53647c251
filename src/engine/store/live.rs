//! A tree's generations as memory holds them ([`Generations`]), shared by
//! every handle of the tree; `generations.rs` reads, writes and merges them.

use std::sync::atomic::AtomicBool;

use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::engine::generation::GenerationIndex;

/// The live generations, oldest first.
pub(crate) type Live = Arc<Vec<Arc<GenerationIndex>>>;

/// A tree's generations as memory holds them, shared by every handle of the
/// tree.
pub(crate) struct Generations {
    live: RwLock<Live>,
    /// Held while the live list changes (from reading it to writing it), and
    /// holds the next generation number and the count of clears.
    list: Mutex<ListState>,
    pub(crate) merging: AtomicBool,
}

#[derive(Default)]
pub(crate) struct ListState {
    pub(crate) next_id: u32,
    /// Counts `PartitionStore::clear`s: a merge begun before one is dropped.
    pub(crate) clears: u64,
    /// The newest generations that are spilled, not settled: written by
    /// `PartitionStore::spill` since the last write-out, read like the
    /// others, but named by no stored list until the next write-out's
    /// batch settles them with its checkpoint (a crash deletes them).
    pub(crate) pending: usize,
    /// Generations a merge replaced, their runs kept while a reader's
    /// snapshot of the live list may still name them: deleted by a later
    /// change of the list once nothing else holds them.
    pub(crate) garbage: Vec<Arc<GenerationIndex>>,
}

impl ListState {
    /// The settled generations of `live` (all but the pending newest).
    pub(crate) fn settled<'a>(
        &self,
        live: &'a [Arc<GenerationIndex>],
    ) -> &'a [Arc<GenerationIndex>] {
        &live[..live.len().saturating_sub(self.pending)]
    }
}

/// Where a merge stops, for the tests of a crash in the middle of one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MergeStop {
    /// It runs to the end.
    Never,
    /// After writing this many of its runs, before the switch.
    AfterRuns(usize),
}

impl Generations {
    /// None yet (a handle's while its tree's are loaded).
    pub(crate) fn empty() -> Self {
        Generations::new(0, Vec::new())
    }

    pub(crate) fn new(next_id: u32, live: Vec<Arc<GenerationIndex>>) -> Self {
        Generations {
            live: RwLock::new(Arc::new(live)),
            list: Mutex::new(ListState {
                next_id,
                clears: 0,
                pending: 0,
                garbage: Vec::new(),
            }),
            merging: AtomicBool::new(false),
        }
    }

    pub(crate) fn live(&self) -> Live {
        // A poisoned lock only means a thread panicked while holding it; the
        // list itself is always whole (it is replaced, never edited).
        self.live.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_live(&self, live: Vec<Arc<GenerationIndex>>) {
        *self.live.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(live);
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, ListState> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets every generation (the tree was cleared).
    pub(crate) fn cleared(&self) {
        let mut list = self.lock();
        list.clears += 1;
        list.pending = 0;
        list.garbage.clear();
        self.set_live(Vec::new());
    }
}

/// A generation staged in a batch (or only the settling of the pending
/// ones): the list lock, held until the batch is applied, and the live list
/// to publish then, every generation of it settled.
pub(crate) struct Staged<'a> {
    pub(crate) _list: MutexGuard<'a, ListState>,
    pub(crate) next: Vec<Arc<GenerationIndex>>,
}
