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
use crate::engine::store::Store;
use crate::kafka::ReaderSettings;
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
    /// What each standby's changelog reader is built from.
    pub reader: ReaderSettings,
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
                &keeper.reader,
                &keeper.changelog_topic,
                partition,
                &self.cancel,
            )?),
        };
        let restore = Restore {
            reader: &keeper.reader,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};

    use super::*;
    use crate::engine::store::{
        changelog_checkpoint_key, Checkpoint, PartitionStore, RestoreWrite,
    };
    use crate::kafka::headers::{HEADER_COVERS, HEADER_EPOCH};

    const CHANGELOG: &str = "state-changelog";

    /// A mock cluster whose changelog partition 0 holds `records` state
    /// records and a checkpoint record covering them, and a keeper over an
    /// empty store.
    fn keeper_over(
        records: usize,
    ) -> (
        MockCluster<'static, DefaultProducerContext>,
        Keeper,
        tempfile::TempDir,
    ) {
        keeper_over_epoch(records, 0)
    }

    /// [`keeper_over`], the changelog written in `epoch` (after as many
    /// `orderly replay --reset-state` runs).
    fn keeper_over_epoch(
        records: usize,
        epoch: u32,
    ) -> (
        MockCluster<'static, DefaultProducerContext>,
        Keeper,
        tempfile::TempDir,
    ) {
        let cluster: MockCluster<'static, DefaultProducerContext> =
            MockCluster::new(1).expect("mock cluster");
        cluster.create_topic(CHANGELOG, 1, 1).expect("topic");
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .create()
            .expect("producer");
        let checkpoint = Checkpoint {
            epoch,
            ..Checkpoint::starting_at(5)
        }
        .encode()
        .expect("encodes");
        let epoch_text = epoch.to_string();
        for i in 0..=records {
            let (key, value) = if i < records {
                (format!("order-{i}").into_bytes(), b"state".to_vec())
            } else {
                (changelog_checkpoint_key(), checkpoint.clone())
            };
            let headers = rdkafka::message::OwnedHeaders::new()
                .insert(rdkafka::message::Header {
                    key: HEADER_COVERS,
                    value: Some("5"),
                })
                .insert(rdkafka::message::Header {
                    key: HEADER_EPOCH,
                    value: Some(epoch_text.as_str()),
                });
            producer
                .send(
                    BaseRecord::to(CHANGELOG)
                        .partition(0)
                        .key(&key)
                        .payload(&value)
                        .headers(headers),
                )
                .map_err(|(e, _)| e)
                .expect("send");
        }
        producer.flush(Duration::from_secs(10)).expect("flush");
        let mut config = crate::config::Config::defaults().expect("config");
        config.kafka.bootstrap_servers = cluster.bootstrap_servers();
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("store"), 16).expect("store");
        let keeper = Keeper {
            reader: ReaderSettings::of(&config),
            store,
            input_topic: "orders".into(),
            changelog_topic: CHANGELOG.into(),
            owners: Arc::default(),
            telemetry: Arc::default(),
        };
        (cluster, keeper, dir)
    }

    /// One round on partition 0, as the keeper runs it.
    fn one_round(keeper: &Keeper) -> Result<i64, ChangelogError> {
        let standbys = Standbys::new(1);
        let (mut readers, progress) = (BTreeMap::new(), RestoreProgress::default());
        assert!(standbys.claim(0));
        let lag = standbys.round(keeper, 0, &mut readers, &progress);
        standbys.finish();
        assert_eq!(
            progress.view(),
            None,
            "a round leaves no restore progress behind"
        );
        lag
    }

    /// Partition 0's tree, holding an old copy: one state (`value`) under
    /// `checkpoint`, as a standby made it before the changelog changed.
    fn with_an_old_copy(keeper: &Keeper, value: &[u8], checkpoint: &Checkpoint) -> PartitionStore {
        let tree = keeper.store.partition("orders", 0).expect("tree");
        let mut old = RestoreWrite::default();
        old.restore(b"order-old", Some(value));
        tree.finish_restore(old, false, checkpoint, None)
            .expect("old copy");
        tree
    }

    #[test]
    fn a_round_brings_a_standby_up_to_its_changelog() {
        let (_cluster, keeper, _dir) = keeper_over(10);
        let lag = one_round(&keeper);
        assert_eq!(lag.expect("round"), 0);
        let tree = keeper.store.partition("orders", 0).expect("tree");
        // Ten states, and the checkpoint at the changelog's end.
        assert_eq!(tree.state_count().expect("states"), 10);
        let checkpoint = tree.checkpoint().expect("read").expect("a checkpoint");
        assert_eq!(
            (checkpoint.next_offset, checkpoint.changelog_next),
            (5, Some(11))
        );
        // Rounds on a kept reader: the next reads nothing new.
        let standbys = Standbys::new(1);
        let (mut readers, progress) = (BTreeMap::new(), RestoreProgress::default());
        for _ in 0..2 {
            assert!(standbys.claim(0));
            let lag = standbys.round(&keeper, 0, &mut readers, &progress);
            standbys.finish();
            assert_eq!(lag.expect("round"), 0);
            assert_eq!(readers.len(), 1, "one reader, kept between rounds");
        }
        assert_eq!(tree.state_count().expect("states"), 10);
    }

    /// A copy made from an earlier changelog of the same name (the topic was
    /// deleted and created again) is ahead of it: the standby drops it and
    /// reads the changelog from its start.
    #[test]
    fn a_standby_ahead_of_its_changelog_rebuilds_itself() {
        let (_cluster, keeper, _dir) = keeper_over(10);
        let ahead = Checkpoint {
            changelog_next: Some(1_000),
            ..Checkpoint::starting_at(900)
        };
        let tree = with_an_old_copy(&keeper, b"from the old changelog", &ahead);
        let lag = one_round(&keeper);
        assert_eq!(lag.expect("rebuilt"), 0);
        assert_eq!(
            tree.state_count().expect("states"),
            10,
            "only the changelog's states"
        );
        let checkpoint = tree.checkpoint().expect("read").expect("a checkpoint");
        assert_eq!(
            (checkpoint.next_offset, checkpoint.changelog_next),
            (5, Some(11))
        );
    }

    /// A copy of an older epoch (a `replay --reset-state` ran since it was
    /// made, and the changelog starts again from the replay's marker): the
    /// standby drops it and restores the new epoch.
    #[test]
    fn a_standby_of_an_older_epoch_rebuilds_itself() {
        let (_cluster, keeper, _dir) = keeper_over_epoch(10, 1);
        let before = Checkpoint {
            changelog_next: Some(3),
            ..Checkpoint::starting_at(2)
        };
        let tree = with_an_old_copy(&keeper, b"before the replay", &before);
        let lag = one_round(&keeper);
        assert_eq!(lag.expect("rebuilt"), 0);
        assert_eq!(
            tree.state_count().expect("states"),
            10,
            "the new epoch's states only"
        );
        let checkpoint = tree.checkpoint().expect("read").expect("a checkpoint");
        assert_eq!((checkpoint.epoch, checkpoint.changelog_next), (1, Some(11)));
    }

    /// A partition assigned to this member while a round runs on it: the
    /// round is cut short and waited for, and no round starts on it again
    /// until it is given up.
    #[test]
    fn a_take_over_cuts_the_running_round_short_and_waits_for_it() {
        let standbys = Arc::new(Standbys::new(1));
        assert!(standbys.claim(3));
        let running = standbys.clone();
        let round = std::thread::spawn(move || {
            // A round that runs until it is told to stop.
            while !running.cancel.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(5));
            }
            std::thread::sleep(Duration::from_millis(50));
            running.finish();
        });
        let started = Instant::now();
        standbys.take_over(3);
        assert_eq!(
            *lock(&standbys.active),
            None,
            "the round ended before the take-over returned"
        );
        assert!(started.elapsed() >= Duration::from_millis(50));
        round.join().expect("round");
        assert!(!standbys.claim(3), "no round on an owned partition");
        assert!(standbys.claim(2), "other partitions go on");
        standbys.finish();
        standbys.give_up(&[3]);
        assert!(standbys.claim(3), "a standby again once given up");
        standbys.finish();
    }
}
