//! Restore: brings one partition's tree up to its changelog partition before
//! any input record of it is processed.
//!
//! 1. The tree's recorded changelog position (`changelog_next`), or the
//!    changelog's start without one, is compared with the changelog's end:
//!    its last stable offset once no transaction is open on it
//!    (`ChangelogReader::settled_watermarks`: a restore that stopped at an
//!    open transaction would miss what was committed after it). Not below
//!    it: nothing to do.
//! 2. The last checkpoint record after that position is found by reading
//!    the changelog's tail backwards in growing windows (a write-out ends
//!    with its checkpoint record, so it is usually in the first window).
//!    None there: only a torn tail follows the position; nothing to apply.
//! 3. Records from the position up to that checkpoint record, those it
//!    covers only (`covers <= next_offset`), are gathered newest-per-key
//!    and written to the tree in batches, with the tree marked as
//!    restoring; after the last batch one atomic sled batch writes the
//!    checkpoint (with its changelog position) and clears the mark. A crash
//!    or a revoke mid-restore leaves the mark, and the next restore starts
//!    again from the recorded position: records are re-applied in log
//!    order, so the result is the same. A restore from nothing (no
//!    checkpoint in the tree, or a new epoch) clears the tree first (of
//!    what an interrupted one left) and writes each batch's states and
//!    chunks as a generation of packed runs ([`crate::engine::runs`]): a
//!    few sled writes per thousand keys. A restore of a tail writes key by
//!    key.
//! 4. A restore that fails on the broker's side (no leader, no broker
//!    reachable, a timeout) is started again after a wait, up to
//!    `RESTORE_TRIES` in all ([`Restore::run_with_retries`]).
//!
//! Runs on a blocking thread with its own consumer (no group), so the poll
//! thread and the other partitions go on meanwhile.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::message::Message;
use tracing::{info, warn};

use super::reader::ChangelogReader;
use super::ChangelogError;
use crate::engine::store::{changelog_checkpoint_key, Checkpoint, PartitionStore, RestoreWrite};
use crate::kafka::retry::Backoff;
use crate::kafka::ReaderSettings;
use crate::observe::RestoreProgress;

/// Keys held before they are written to sled while restoring, at most, and
/// the bytes of those keys and their values: a batch keeps one write per key
/// (the newest), so the larger it is, the fewer sled writes an uncompacted
/// changelog costs (a state rewritten by every write-out is written once
/// per batch); the bounds cap its memory (each partition's restore holds
/// one). Replaced values do not count: 10k orders' state restores in one
/// batch per partition however many versions the changelog holds.
const RESTORE_BATCH_KEYS: usize = 100_000;
const RESTORE_BATCH_BYTES: usize = 8 << 20;
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Restores of a partition started, at most, when the broker's failures
/// pass ([`ChangelogError::is_transient`]), and the wait before the
/// second, doubling for each one after it (each jittered by ±25%): with the watermarks' own 10 s
/// of tries, about a minute of an unreachable or leaderless changelog
/// before the partition's task (and the process) fails.
const RESTORE_TRIES: u32 = 4;
const FIRST_RETRY_WAIT: Duration = Duration::from_secs(2);
const PROGRESS_CHECK_EVERY: u64 = 1024;

/// What a restore did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Restored {
    /// True when the tree was changed (a checkpoint was restored).
    pub restored: bool,
    /// The tree's checkpoint afterwards.
    pub checkpoint: Option<Checkpoint>,
    /// The changelog's end the restore read up to (its last stable offset).
    pub end: i64,
    /// Changelog records read and applied.
    pub applied: u64,
    /// Records read and not applied: beyond the checkpoint that ends the
    /// restore (a torn or obsolete write-out).
    pub skipped: u64,
    pub elapsed: Duration,
    /// The part of `elapsed` spent before the first record was read: the
    /// watermarks and the search for the last checkpoint record.
    pub located: Duration,
    /// The part of `elapsed` spent writing the store (sled's inserts, the
    /// last batch and the checkpoint included); the rest after `located`
    /// was spent reading the changelog and keeping each key's newest value.
    pub store_write: Duration,
}

/// Who a restore's lines are for: a partition's restore says what it does
/// at info level; a standby's rounds (one a second) at debug level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Voice {
    Restore,
    Standby,
}

/// An info line for a restore, a debug line for a standby's round.
macro_rules! say {
    ($voice:expr, $($rest:tt)*) => {
        if $voice == Voice::Restore {
            info!($($rest)*)
        } else {
            tracing::debug!($($rest)*)
        }
    };
}

/// One partition's restore.
pub struct Restore<'a> {
    /// What the changelog's reader is built from.
    pub reader: &'a ReaderSettings,
    /// The changelog topic.
    pub topic: &'a str,
    /// The partition (the same number in the input and the changelog).
    pub partition: i32,
    /// The store's tree of the partition, brought up to the changelog.
    pub tree: &'a PartitionStore,
    /// Set when the partition is revoked: the restore stops at its next poll.
    pub cancel: &'a AtomicBool,
    /// How far the restore has come, kept current while restoring (for the
    /// metrics, `/readyz` and the status page).
    pub progress: &'a RestoreProgress,
}

impl Restore<'_> {
    /// [`Restore::run`], started again after a wait when the broker's
    /// failure passes (no leader, no broker reachable, a timeout), up to
    /// [`RESTORE_TRIES`] in all. A restore stopped half-way keeps the tree's
    /// restoring mark; the next one starts from the recorded position and
    /// re-applies the records in log order, to the same result.
    pub fn run_with_retries(&self) -> Result<Restored, ChangelogError> {
        // The cap never binds: RESTORE_TRIES - 1 waits of 2, 4 and 8 s.
        let mut backoff = Backoff::new(FIRST_RETRY_WAIT, FIRST_RETRY_WAIT * 4);
        let mut tries = 1;
        loop {
            match self.run() {
                Err(error) if error.is_transient() && tries < RESTORE_TRIES => {
                    let wait = backoff.next_wait();
                    warn!(
                        partition = self.partition,
                        %error,
                        try_number = tries,
                        retry_in_s = wait.as_secs_f64(),
                        "restore failed on the broker's side; starting it again"
                    );
                    self.sleep_unless_cancelled(wait)?;
                    tries += 1;
                }
                result => return result,
            }
        }
    }

    fn sleep_unless_cancelled(&self, wait: Duration) -> Result<(), ChangelogError> {
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if self.cancel.load(Ordering::Relaxed) {
                return Err(ChangelogError::Cancelled {
                    partition: self.partition,
                });
            }
            std::thread::sleep(
                until
                    .saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(100)),
            );
        }
        Ok(())
    }

    /// Restores the tree when it is behind the changelog (see the module doc).
    pub fn run(&self) -> Result<Restored, ChangelogError> {
        let started = Instant::now();
        let reader = ChangelogReader::new(self.reader, self.topic, self.partition, self.cancel)?;
        let (low, high) = reader.settled_watermarks()?;
        self.run_to(&reader, low, high, started, Voice::Restore)
    }

    /// A standby's round: brings the tree up to the changelog's last stable
    /// offset, on a reader kept between rounds, without waiting for an open
    /// transaction to end (the owner has one open most of the time; what
    /// it commits is read next round), and with its lines at debug level.
    pub(crate) fn catch_up(
        &self,
        reader: &ChangelogReader<'_>,
    ) -> Result<Restored, ChangelogError> {
        let started = Instant::now();
        let (low, high) = reader.watermarks()?;
        self.run_to(reader, low, high, started, Voice::Standby)
    }

    fn run_to(
        &self,
        reader: &ChangelogReader<'_>,
        low: i64,
        high: i64,
        started: Instant,
        voice: Voice,
    ) -> Result<Restored, ChangelogError> {
        let local = self.tree.checkpoint()?;
        let marked = self.tree.restoring()?;
        let recorded = local.and_then(|c| c.changelog_next);
        if let Some(position) = recorded {
            if position > high {
                return Err(ChangelogError::StoreAhead {
                    topic: self.topic.into(),
                    partition: self.partition,
                    local: position,
                    end: high,
                });
            }
        }
        let from = recorded.unwrap_or(low).max(low);
        let unchanged = Restored {
            checkpoint: local,
            end: high,
            elapsed: started.elapsed(),
            ..Default::default()
        };
        if from >= high {
            return Ok(unchanged);
        }
        let Some(found) = reader.last_marked_checkpoint(from, high)? else {
            if marked && voice == Voice::Restore {
                warn!(
                    partition = self.partition,
                    "a restore was interrupted and no checkpoint record follows its position"
                );
            }
            say!(
                voice,
                partition = self.partition,
                from,
                end = high,
                "changelog holds no complete write-out past the store's position"
            );
            return Ok(unchanged);
        };
        let (at, checkpoint, published_to) = (found.offset, found.checkpoint, found.published_to);
        if let Some(published_to) = published_to {
            say!(
                voice,
                partition = self.partition,
                next_offset = checkpoint.next_offset,
                published_to,
                "the partition was repaired (`orderly repair`): records from its checkpoint are processed again, \
                 and the status changes and dead letters of those below published_to are not published again"
            );
        }
        // A checkpoint of another epoch (`replay --reset-state` ran since
        // this store was written): the store's state is from before the
        // reset. Clear it and restore the new epoch from the start.
        let mut from = from;
        // A tree with no checkpoint holds nothing but what an interrupted
        // restore left: it is cleared, and the restore writes packed runs.
        let mut packed = local.is_none();
        if packed {
            self.tree.clear()?;
        }
        if local.is_some_and(|l| l.epoch != checkpoint.epoch) {
            say!(
                voice,
                partition = self.partition,
                store_epoch = local.map(|l| l.epoch),
                changelog_epoch = checkpoint.epoch,
                "the changelog was reset by a replay since this store was written; clearing it"
            );
            self.tree.clear()?;
            from = low;
            packed = true;
        }
        say!(
            voice,
            partition = self.partition,
            from,
            to = at + 1,
            records = at + 1 - from,
            next_offset = checkpoint.next_offset,
            "restoring from the changelog"
        );
        self.progress.begin(at + 1 - from);
        // Watermarks and the search for the last checkpoint record: time
        // spent on the broker before the first record is restored.
        let located = started.elapsed();
        self.tree.begin_restore()?;
        let mut write = RestoreWrite::default();
        let (mut applied, mut skipped, mut batches) = (0u64, 0u64, 1u64);
        let mut last_log = Instant::now();
        let mut last_applied = 0u64;
        // Time spent writing the store, and its value at the last progress
        // line: the rest of an interval was spent waiting for fetched records.
        let mut store_write = Duration::ZERO;
        let mut store_write_at_log = Duration::ZERO;
        let checkpoint_key = changelog_checkpoint_key();
        reader.scan(from, at + 1, |message| {
            self.progress.advance(at - message.offset());
            if message.offset() == at {
                return Ok(());
            }
            let key = message.key().unwrap_or_default();
            if key == checkpoint_key.as_slice() {
                return Ok(());
            }
            // Only records of the checkpoint's epoch, and only those it covers.
            if !reader.covered_by(message, &checkpoint)? {
                skipped += 1;
                return Ok(());
            }
            write.restore(key, message.payload());
            applied += 1;
            if write.keys() >= RESTORE_BATCH_KEYS || write.bytes() >= RESTORE_BATCH_BYTES {
                let writing = Instant::now();
                self.tree
                    .restore_batch(std::mem::take(&mut write), packed)?;
                store_write += writing.elapsed();
                batches += 1;
            }
            // The clock is read every PROGRESS_CHECK_EVERY records, not per record.
            if applied % PROGRESS_CHECK_EVERY != 0 {
                return Ok(());
            }
            let interval = last_log.elapsed();
            if interval >= PROGRESS_EVERY {
                let rate = (applied - last_applied) as f64 / interval.as_secs_f64();
                let store_share =
                    (store_write - store_write_at_log).as_secs_f64() / interval.as_secs_f64();
                let progress = self.progress.view();
                say!(
                    voice,
                    partition = self.partition,
                    restored = applied,
                    to_go = at - message.offset(),
                    per_second = rate.round() as u64,
                    seconds_left = progress
                        .and_then(|p| p.time_left())
                        .map(|left| left.as_secs()),
                    store_write_share = format!("{:.0}%", store_share * 100.0),
                    "{}; waiting mostly on {}",
                    progress.map_or_else(|| "restoring".to_string(), |p| p.describe()),
                    if store_share >= 0.5 {
                        "the store (sled writes)"
                    } else {
                        "the broker (changelog fetches)"
                    }
                );
                last_log = Instant::now();
                last_applied = applied;
                store_write_at_log = store_write;
            }
            Ok(())
        })?;
        let checkpoint = Checkpoint {
            changelog_next: Some(at + 1),
            ..checkpoint
        };
        let last_batch_keys = write.keys();
        let writing = Instant::now();
        self.tree
            .finish_restore(write, packed, &checkpoint, published_to)?;
        let store_write = store_write + writing.elapsed();
        let elapsed = started.elapsed();
        let read = (applied + skipped) as f64;
        say!(
            voice,
            partition = self.partition,
            restored = applied,
            skipped,
            last_batch_keys,
            batches,
            next_offset = checkpoint.next_offset,
            seconds = elapsed.as_secs_f64(),
            locate_seconds = located.as_secs_f64(),
            store_write_seconds = store_write.as_secs_f64(),
            per_second = (applied as f64 / elapsed.as_secs_f64().max(1e-6)).round() as u64,
            read_per_second = (read / (elapsed - located).as_secs_f64().max(1e-6)).round() as u64,
            "restore finished (locate_seconds: watermarks and the search for the last checkpoint; store_write_seconds: \
             sled's writes; read_per_second: records read, applied or skipped, after locating)"
        );
        Ok(Restored {
            restored: true,
            checkpoint: Some(checkpoint),
            end: high,
            applied,
            skipped,
            elapsed,
            located,
            store_write,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    use super::*;
    use crate::engine::store::Store;
    use crate::kafka::headers::HEADER_COVERS;

    const CHANGELOG: &str = "state-changelog";

    /// A mock cluster whose one-partition changelog holds `records` state
    /// records (each covered by the checkpoint) and then a checkpoint record
    /// at input offset 5, and an empty tree to restore it into.
    struct Fixture {
        cluster: MockCluster<'static, DefaultProducerContext>,
        reader: ReaderSettings,
        tree: PartitionStore,
        _store: Store,
        _dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new(records: i64) -> Self {
            let cluster: MockCluster<'static, DefaultProducerContext> =
                MockCluster::new(1).expect("mock cluster");
            cluster.create_topic(CHANGELOG, 1, 1).expect("topic");
            let producer: BaseProducer = rdkafka::ClientConfig::new()
                .set("bootstrap.servers", cluster.bootstrap_servers())
                .set("linger.ms", "5")
                .create()
                .expect("producer");
            let value = vec![7u8; 50];
            let checkpoint = Checkpoint::starting_at(5)
                .encode()
                .expect("checkpoint encodes");
            for i in 0..=records {
                let (key, payload) = if i < records {
                    (format!("order-{i}").into_bytes(), value.as_slice())
                } else {
                    (changelog_checkpoint_key(), checkpoint.as_slice())
                };
                let headers =
                    rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
                        key: HEADER_COVERS,
                        value: Some("5"),
                    });
                let mut record = BaseRecord::to(CHANGELOG)
                    .partition(0)
                    .key(&key)
                    .payload(payload)
                    .headers(headers);
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((_, returned)) => {
                            producer.poll(Duration::from_millis(10));
                            record = returned;
                        }
                    }
                }
            }
            producer.flush(Duration::from_secs(30)).expect("flush");
            let mut config = crate::config::Config::defaults().expect("config");
            config.kafka.bootstrap_servers = cluster.bootstrap_servers();
            let dir = tempfile::tempdir().expect("tempdir");
            let store = Store::open(&dir.path().join("store"), 16).expect("store");
            let tree = store.partition("orders", 0).expect("tree");
            Fixture {
                cluster,
                reader: ReaderSettings::of(&config),
                tree,
                _store: store,
                _dir: dir,
            }
        }
    }

    /// A changelog partition whose leader stays unknown for longer than the
    /// watermarks' own 10 s of tries: the restore is started again after a
    /// wait instead of failing the partition's task (and the process).
    #[test]
    fn a_restore_that_finds_no_leader_for_longer_than_its_tries_starts_again() {
        let fixture = Fixture::new(0);
        let (cluster, tree) = (&fixture.cluster, &fixture.tree);
        let (cancel, progress) = (AtomicBool::new(false), RestoreProgress::default());
        let restore = Restore {
            reader: &fixture.reader,
            topic: CHANGELOG,
            partition: 0,
            tree,
            cancel: &cancel,
            progress: &progress,
        };
        // More "not leader" answers than one restore's watermark tries take
        // in their 10 s (two offset requests per try, nine tries at most).
        cluster.request_errors(
            RDKafkaApiKey::ListOffsets,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 30],
        );
        let restored = restore
            .run_with_retries()
            .expect("restored once the leader is known");
        assert!(restored.restored);
        assert_eq!(
            restored
                .checkpoint
                .map(|c| (c.next_offset, c.changelog_next)),
            Some((5, Some(1)))
        );
        assert_eq!(
            tree.checkpoint()
                .expect("checkpoint read")
                .map(|c| c.next_offset),
            Some(5)
        );
        assert!(
            !tree.restoring().expect("mark read"),
            "the restore finished"
        );
    }

    /// While a restore reads, its progress is seen from another thread
    /// (as `/readyz`, the status page and the metrics see it): part-way
    /// through, with an estimate once there is a rate; after it, nothing.
    #[test]
    fn a_restores_progress_is_seen_part_way_and_cleared_at_the_end() {
        // Kept under the mock partition's log size (5 MB), past which it drops
        // the oldest records.
        const RECORDS: i64 = 20_000;
        let fixture = Fixture::new(RECORDS);
        let (cancel, progress) = (AtomicBool::new(false), RestoreProgress::default());
        let done = AtomicBool::new(false);
        let seen = std::thread::scope(|scope| {
            let watcher = scope.spawn(|| {
                let mut seen = Vec::new();
                while !done.load(Ordering::Relaxed) {
                    if let Some(view) = progress.view() {
                        seen.push(view);
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                seen
            });
            let restored = Restore {
                reader: &fixture.reader,
                topic: CHANGELOG,
                partition: 0,
                tree: &fixture.tree,
                cancel: &cancel,
                progress: &progress,
            }
            .run();
            // As the partition task does after every restore.
            progress.end();
            done.store(true, Ordering::Relaxed);
            let restored = restored.expect("restored");
            assert_eq!((restored.applied, restored.skipped), (RECORDS as u64, 0));
            watcher.join().expect("watcher")
        });
        assert!(
            seen.iter().all(|v| v.total == RECORDS + 1),
            "the total is what the restore reads, the checkpoint record included"
        );
        assert!(
            seen.iter()
                .any(|v| v.remaining > 0 && v.remaining < v.total),
            "seen part-way through: {:?}",
            seen.first()
        );
        assert!(
            seen.windows(2).all(|w| w[1].remaining <= w[0].remaining),
            "what is left only shrinks"
        );
        assert_eq!(progress.view(), None, "cleared once the restore ended");
    }

    /// A restore from nothing that was cut short (its mark and some packed
    /// runs left, no checkpoint) is started again on a cleared tree: what
    /// the interrupted one wrote cannot outlive it.
    #[test]
    fn an_interrupted_restore_from_nothing_leaves_nothing_behind() {
        const RECORDS: i64 = 5;
        let fixture = Fixture::new(RECORDS);
        let tree = &fixture.tree;
        tree.begin_restore().expect("mark");
        let mut left = RestoreWrite::default();
        left.restore(b"ghost", Some(&[1u8; 20]));
        tree.restore_batch(left, true)
            .expect("a generation written");
        assert!(tree.has_runs() && tree.restoring().expect("mark read"));
        let (cancel, progress) = (AtomicBool::new(false), RestoreProgress::default());
        let restored = Restore {
            reader: &fixture.reader,
            topic: CHANGELOG,
            partition: 0,
            tree,
            cancel: &cancel,
            progress: &progress,
        }
        .run()
        .expect("restored");
        assert_eq!(restored.applied, RECORDS as u64);
        assert!(!tree.restoring().expect("mark read"));
        assert_eq!(
            tree.state_count().expect("states"),
            RECORDS as usize,
            "the changelog's states only, not the interrupted restore's"
        );
    }

    #[test]
    fn only_the_brokers_passing_failures_are_transient() {
        let corrupt = ChangelogError::Corrupt {
            topic: "t".into(),
            partition: 0,
            offset: 1,
            message: "bad".into(),
        };
        assert!(!corrupt.is_transient());
        let ahead = ChangelogError::StoreAhead {
            topic: "t".into(),
            partition: 0,
            local: 5,
            end: 1,
        };
        assert!(!ahead.is_transient());
        let watermarks = |code| ChangelogError::Read {
            cause: crate::kafka::partition_reader::ReadError::Watermarks {
                topic: "t".into(),
                partition: 0,
                cause: rdkafka::error::KafkaError::MetadataFetch(code),
            },
        };
        assert!(watermarks(rdkafka::types::RDKafkaErrorCode::LeaderNotAvailable).is_transient());
        assert!(watermarks(rdkafka::types::RDKafkaErrorCode::OperationTimedOut).is_transient());
        assert!(watermarks(rdkafka::types::RDKafkaErrorCode::UnknownPartition).is_transient());
        assert!(
            !watermarks(rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed).is_transient()
        );
    }

    /// What `orderly repair` writes: keys changed after the checkpoint it
    /// goes back to, written back (here: deleted, as a key that did not
    /// exist there), then that checkpoint with the `published-to` header.
    /// A store ahead of it (restored to a later write-out) comes back to
    /// the checkpoint's state, and keeps where outputs were published to.
    #[test]
    fn a_repair_marker_brings_a_store_ahead_back_and_keeps_what_was_published() {
        let fixture = Fixture::new(3);
        let tree = &fixture.tree;
        let (cancel, progress) = (AtomicBool::new(false), RestoreProgress::default());
        let restore = Restore {
            reader: &fixture.reader,
            topic: CHANGELOG,
            partition: 0,
            tree,
            cancel: &cancel,
            progress: &progress,
        };
        let producer: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", fixture.cluster.bootstrap_servers())
            .create()
            .expect("producer");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let later = Checkpoint {
            next_offset: 9,
            ..Checkpoint::starting_at(0)
        };
        // A later write-out: order-3, covered by a checkpoint at 9.
        runtime
            .block_on(super::super::replay::write_marker(
                &producer,
                CHANGELOG,
                0,
                &[(b"order-3".to_vec(), Some(vec![8u8; 20]))],
                &later,
                None,
            ))
            .expect("write-out");
        let ahead = restore.run().expect("restored");
        assert_eq!(ahead.checkpoint.map(|c| c.next_offset), Some(9));
        assert_eq!(tree.state_count().expect("states"), 4);
        assert_eq!(tree.republished_below().expect("read"), None);

        let repaired = Checkpoint::starting_at(5);
        runtime
            .block_on(super::super::replay::write_marker(
                &producer,
                CHANGELOG,
                0,
                &[(b"order-3".to_vec(), None)],
                &repaired,
                Some(9),
            ))
            .expect("repair marker");
        let back = restore.run().expect("restored");
        assert_eq!(back.checkpoint.map(|c| c.next_offset), Some(5));
        assert_eq!(
            tree.state_count().expect("states"),
            3,
            "order-3, written after the checkpoint, is gone again"
        );
        assert_eq!(
            tree.republished_below().expect("read"),
            Some(9),
            "outputs below 9 were published before the repair"
        );

        // A fresh store restores the same from the changelog alone.
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("store"), 16).expect("store");
        let fresh = store.partition("orders", 0).expect("tree");
        let fresh_restore = Restore {
            tree: &fresh,
            ..restore
        };
        let restored = fresh_restore.run().expect("restored");
        assert_eq!(restored.checkpoint.map(|c| c.next_offset), Some(5));
        assert_eq!(fresh.state_count().expect("states"), 3);
        assert_eq!(fresh.republished_below().expect("read"), Some(9));
    }
}
