//! Standby replicas: warm copies of partitions this member does not own.
//!
//! With `processing.standby_replicas = n`, each member keeps the partitions
//! that the `n` members after their owner (in member-id order) should keep
//! ([`choice::standbys_of`]), reading the group's assignment every few
//! seconds, so the choice follows members as they come and go. A keeper
//! thread brings each standby's tree up to its changelog partition once a
//! round ([`ROUND_EVERY`]) with the restore's own logic
//! ([`Restore::catch_up`]: records covered by the last checkpoint record,
//! the epoch of a replay, a store ahead of a recreated changelog), on one
//! changelog reader per standby kept between rounds. When the group assigns
//! such a partition to this member, its restore reads only the tail the
//! standby had not read.
//!
//! A standby only ever writes its own tree of a partition this member does
//! not own: it produces nothing, commits nothing, and `/state` answers only
//! for owned partitions. The supervisor takes a partition over
//! ([`Standbys::take_over`]) before it reads the tree's checkpoint at
//! assignment: a round on it is cut short and waited for, and no new round
//! starts on it until it is given up again.

mod choice;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::changelog::reader::ChangelogReader;
use super::changelog::restore::Restore;
use super::changelog::ChangelogError;
use super::owners::OwnersSlot;
use crate::config::Config;
use crate::engine::store::Store;
use crate::observe::{RestoreProgress, Telemetry};

/// How often each standby is brought up to its changelog.
const ROUND_EVERY: Duration = Duration::from_secs(1);
/// How long a take-over waits for a round on its partition to stop (the
/// round stops at its reader's next poll, well within this).
const TAKE_OVER_WAIT: Duration = Duration::from_secs(10);
/// A standby's failure is logged at most this often per partition.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Which partitions the keeper may work on, shared with the supervisor.
pub(crate) struct Standbys {
    replicas: usize,
    /// Partitions this member owns: never kept as standbys.
    owned: Mutex<BTreeSet<i32>>,
    /// The partition a round is on now.
    active: Mutex<Option<i32>>,
    /// Signalled when a round ends.
    idle: Condvar,
    /// Cuts the running round short (a take-over, or the process stopping).
    cancel: AtomicBool,
    stop: AtomicBool,
}

/// What the keeper thread reads and writes.
pub(crate) struct Keeper {
    pub config: Config,
    pub store: Store,
    pub input_topic: String,
    pub changelog_topic: String,
    pub owners: Arc<OwnersSlot>,
    pub telemetry: Arc<Telemetry>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The sets stay consistent whatever panicked while holding them.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Standbys {
    pub(crate) fn new(replicas: usize) -> Self {
        Standbys {
            replicas,
            owned: Mutex::new(BTreeSet::new()),
            active: Mutex::new(None),
            idle: Condvar::new(),
            cancel: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        }
    }

    /// The partition is being assigned to this member: no standby round
    /// runs on it from now on (one running is cut short and waited for, up
    /// to [`TAKE_OVER_WAIT`]), so its task alone writes its tree.
    pub(crate) fn take_over(&self, partition: i32) {
        lock(&self.owned).insert(partition);
        let mut active = lock(&self.active);
        if *active != Some(partition) {
            return;
        }
        self.cancel.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + TAKE_OVER_WAIT;
        while *active == Some(partition) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                warn!(
                    partition,
                    "a standby round on a newly assigned partition did not stop in time"
                );
                return;
            }
            active = self
                .idle
                .wait_timeout(active, left)
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .0;
        }
    }

    /// The partition was released: it may be kept as a standby again.
    pub(crate) fn give_up(&self, partitions: &[i32]) {
        let mut owned = lock(&self.owned);
        for partition in partitions {
            owned.remove(partition);
        }
    }

    /// Stops the keeper (its running round is cut short).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.cancel.store(true, Ordering::SeqCst);
    }

    /// Marks a round on `partition` as running, unless this member owns it.
    fn claim(&self, partition: i32) -> bool {
        let owned = lock(&self.owned);
        if owned.contains(&partition) || self.stop.load(Ordering::SeqCst) {
            return false;
        }
        *lock(&self.active) = Some(partition);
        self.cancel.store(false, Ordering::SeqCst);
        true
    }

    /// The round ended.
    fn finish(&self) {
        *lock(&self.active) = None;
        self.idle.notify_all();
    }

    /// The standbys this member should keep now: `None` while the group's
    /// members cannot be read (the previous choice stands meanwhile).
    fn wanted(&self, keeper: &Keeper) -> Option<BTreeSet<i32>> {
        let (me, members) = match keeper.owners.members() {
            Ok(read) => read,
            Err(error) => {
                debug!(%error, "cannot read the group's members to choose standbys");
                return None;
            }
        };
        let mut wanted = choice::standbys_of(&me?, &members, self.replicas);
        let owned = lock(&self.owned);
        wanted.retain(|partition| !owned.contains(partition));
        Some(wanted)
    }

    /// The keeper thread: a round over every standby, then a pause, until
    /// stopped.
    pub(crate) fn run(self: Arc<Self>, keeper: Keeper) {
        let progress = RestoreProgress::default();
        let mut readers: BTreeMap<i32, ChangelogReader<'_>> = BTreeMap::new();
        let mut kept: BTreeSet<i32> = BTreeSet::new();
        let mut warned: BTreeMap<i32, Instant> = BTreeMap::new();
        info!(
            replicas = self.replicas,
            "standby replicas on: keeping warm copies of partitions other members own"
        );
        while !self.stop.load(Ordering::SeqCst) {
            if let Some(wanted) = self.wanted(&keeper) {
                if wanted != kept {
                    info!(standbys = ?wanted, "standby partitions chosen");
                    kept = wanted;
                }
            }
            readers.retain(|partition, _| kept.contains(partition));
            keeper.telemetry.retain_standbys(&kept);
            for &partition in &kept {
                if !self.claim(partition) {
                    continue;
                }
                let round = self.round(&keeper, partition, &mut readers, &progress);
                self.finish();
                match round {
                    Ok(lag) => {
                        keeper.telemetry.set_standby(partition, lag);
                        warned.remove(&partition);
                    }
                    Err(ChangelogError::Cancelled { .. }) => {}
                    Err(error) => {
                        // A fresh reader next round.
                        readers.remove(&partition);
                        let due = warned
                            .get(&partition)
                            .is_none_or(|at| at.elapsed() >= WARN_EVERY);
                        if due {
                            warn!(partition, %error, "a standby round failed; trying again next round");
                            warned.insert(partition, Instant::now());
                        }
                    }
                }
            }
            let until = Instant::now() + ROUND_EVERY;
            while Instant::now() < until && !self.stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        debug!("standby keeper stopped");
    }

    /// One round on one standby: its tree brought up to the changelog's
    /// last stable offset. Returns the changelog records it has not applied.
    fn round<'s>(
        &'s self,
        keeper: &Keeper,
        partition: i32,
        readers: &mut BTreeMap<i32, ChangelogReader<'s>>,
        progress: &RestoreProgress,
    ) -> Result<i64, ChangelogError> {
        let tree = keeper.store.partition(&keeper.input_topic, partition)?;
        let reader = match readers.entry(partition) {
            std::collections::btree_map::Entry::Occupied(held) => held.into_mut(),
            std::collections::btree_map::Entry::Vacant(slot) => slot.insert(ChangelogReader::new(
                &keeper.config,
                &keeper.changelog_topic,
                partition,
                &self.cancel,
            )?),
        };
        let restore = Restore {
            config: &keeper.config,
            topic: &keeper.changelog_topic,
            partition,
            tree: &tree,
            cancel: &self.cancel,
            progress,
        };
        let restored = match restore.catch_up(reader) {
            Err(ChangelogError::StoreAhead { local, end, .. }) => {
                // The changelog was recreated since this copy was made.
                warn!(
                    partition,
                    local, end, "a standby's copy is ahead of its changelog; rebuilding it"
                );
                tree.clear()?;
                restore.catch_up(reader)
            }
            other => other,
        };
        progress.end();
        let restored = restored?;
        let position = restored
            .checkpoint
            .and_then(|c| c.changelog_next)
            .unwrap_or(0);
        // Each write-out ends with its transaction's commit marker, which
        // takes an offset and is no record: one offset past the position
        // is caught up.
        Ok((restored.end - position - 1).max(0))
    }
}
