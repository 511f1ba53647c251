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

/// Where a run starts: the changelog's watermarks it runs to, when it
/// started (its elapsed time counts from there) and who its lines are for.
#[derive(Debug, Clone, Copy)]
struct Start {
    low: i64,
    high: i64,
    started: Instant,
    voice: Voice,
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
        self.run_to(
            &reader,
            Start {
                low,
                high,
                started,
                voice: Voice::Restore,
            },
        )
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
        self.run_to(
            reader,
            Start {
                low,
                high,
                started,
                voice: Voice::Standby,
            },
        )
    }

    fn run_to(
        &self,
        reader: &ChangelogReader<'_>,
        start: Start,
    ) -> Result<Restored, ChangelogError> {
        let Start { started, voice, .. } = start;
        let plan = match self.plan(reader, start)? {
            Planned::Unchanged(unchanged) => return Ok(unchanged),
            Planned::Restore(plan) => plan,
        };
        let (from, at) = (plan.from, plan.at);
        say!(
            voice,
            partition = self.partition,
            from,
            to = at + 1,
            records = at + 1 - from,
            next_offset = plan.checkpoint.next_offset,
            "restoring from the changelog"
        );
        self.progress.begin(at + 1 - from);
        // Watermarks and the search for the last checkpoint record: time
        // spent on the broker before the first record is restored.
        let located = started.elapsed();
        self.tree.begin_restore()?;
        let scanned = self.scan(reader, &plan, voice)?;
        self.finish(plan, scanned, start, located)
    }

    /// Where a restore starts and ends: nothing to do when the tree is at
    /// the changelog's end or no complete write-out follows its position;
    /// else the range up to the last checkpoint record, the tree cleared
    /// first when it holds no checkpoint or one of another epoch.
    fn plan(&self, reader: &ChangelogReader<'_>, start: Start) -> Result<Planned, ChangelogError> {
        let Start {
            low,
            high,
            started,
            voice,
        } = start;
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
            return Ok(Planned::Unchanged(unchanged));
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
            return Ok(Planned::Unchanged(unchanged));
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
        Ok(Planned::Restore(Plan {
            from,
            at,
            checkpoint,
            published_to,
            packed,
        }))
    }

    /// Reads the plan's range and writes the records its checkpoint covers
    /// to the tree in batches (all but the last one, which [`Self::finish`]
    /// writes with the checkpoint), with a progress line every
    /// [`PROGRESS_EVERY`].
    fn scan(
        &self,
        reader: &ChangelogReader<'_>,
        plan: &Plan,
        voice: Voice,
    ) -> Result<Scanned, ChangelogError> {
        let at = plan.at;
        let mut scanned = Scanned {
            write: RestoreWrite::default(),
            applied: 0,
            skipped: 0,
            batches: 1,
            store_write: Duration::ZERO,
        };
        let mut lines = ProgressLines {
            last_log: Instant::now(),
            last_applied: 0,
            store_write_at_log: Duration::ZERO,
        };
        let checkpoint_key = changelog_checkpoint_key();
        reader.scan(plan.from, at + 1, |message| {
            self.progress.advance(at - message.offset());
            if message.offset() == at {
                return Ok(());
            }
            let key = message.key().unwrap_or_default();
            if key == checkpoint_key.as_slice() {
                return Ok(());
            }
            // Only records of the checkpoint's epoch, and only those it covers.
            if !reader.covered_by(message, &plan.checkpoint)? {
                scanned.skipped += 1;
                return Ok(());
            }
            scanned.write.restore(key, message.payload());
            scanned.applied += 1;
            if scanned.write.keys() >= RESTORE_BATCH_KEYS
                || scanned.write.bytes() >= RESTORE_BATCH_BYTES
            {
                let writing = Instant::now();
                self.tree
                    .restore_batch(std::mem::take(&mut scanned.write), plan.packed)?;
                scanned.store_write += writing.elapsed();
                scanned.batches += 1;
            }
            // The clock is read every PROGRESS_CHECK_EVERY records, not per record.
            if scanned.applied % PROGRESS_CHECK_EVERY == 0 {
                self.say_progress(&mut lines, &scanned, at - message.offset(), voice);
            }
            Ok(())
        })?;
        Ok(scanned)
    }

    /// The progress line, once [`PROGRESS_EVERY`] has passed since the last
    /// one: the rate, the time left, and what the restore waits on mostly.
    fn say_progress(&self, lines: &mut ProgressLines, scanned: &Scanned, to_go: i64, voice: Voice) {
        let interval = lines.last_log.elapsed();
        if interval < PROGRESS_EVERY {
            return;
        }
        let applied = scanned.applied;
        let rate = (applied - lines.last_applied) as f64 / interval.as_secs_f64();
        let store_share =
            (scanned.store_write - lines.store_write_at_log).as_secs_f64() / interval.as_secs_f64();
        let progress = self.progress.view();
        say!(
            voice,
            partition = self.partition,
            restored = applied,
            to_go,
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
        lines.last_log = Instant::now();
        lines.last_applied = applied;
        lines.store_write_at_log = scanned.store_write;
    }

    /// Writes the last batch with the checkpoint (and its changelog
    /// position), clearing the restoring mark, and says what the restore did.
    fn finish(
        &self,
        plan: Plan,
        scanned: Scanned,
        start: Start,
        located: Duration,
    ) -> Result<Restored, ChangelogError> {
        let Start {
            high,
            started,
            voice,
            ..
        } = start;
        let Scanned {
            write,
            applied,
            skipped,
            batches,
            store_write,
        } = scanned;
        let checkpoint = Checkpoint {
            changelog_next: Some(plan.at + 1),
            ..plan.checkpoint
        };
        let last_batch_keys = write.keys();
        let writing = Instant::now();
        self.tree
            .finish_restore(write, plan.packed, &checkpoint, plan.published_to)?;
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

/// What [`Restore::plan`] found: nothing to do, or a range to restore.
enum Planned {
    Unchanged(Restored),
    Restore(Plan),
}

/// A restore's range and how it writes: from the tree's position (or the
/// changelog's start) up to the last checkpoint record, at `at`.
struct Plan {
    from: i64,
    at: i64,
    /// The checkpoint the record at `at` carries.
    checkpoint: Checkpoint,
    /// Set after `orderly repair`: what was published below it.
    published_to: Option<i64>,
    /// Into a cleared tree: each batch as a generation of packed runs.
    packed: bool,
}

/// What the scan of the range gathered and wrote.
struct Scanned {
    /// The last batch, not written yet (it goes with the checkpoint).
    write: RestoreWrite,
    applied: u64,
    skipped: u64,
    batches: u64,
    /// Time spent writing the store.
    store_write: Duration,
}

/// When the last progress line was written, and the figures it had then:
/// the rest of an interval was spent waiting for fetched records.
struct ProgressLines {
    last_log: Instant,
    last_applied: u64,
    store_write_at_log: Duration,
}

#[cfg(test)]
mod tests;
