//! The group flush: partition tasks report the offsets their written batches
//! cover; the flusher makes all of them durable with one sled flush, then
//! commits them to Kafka in one call. It is the only place offsets are
//! committed, so commits never go backwards.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::TopicPartitionList;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::context::OrderlyContext;
use super::parts::Reporting;
use crate::engine::fault::{self, Point};
use crate::engine::store::Store;
use crate::observe::errors::{Kind, Stage};
use crate::processor::error::ProcessError;

pub(crate) use super::flush_msg::FlushMsg;

/// A barrier as the flusher holds it: the partitions released, whether
/// they were lost, and whom to answer.
type Barrier = (Vec<i32>, bool, std::sync::mpsc::SyncSender<()>);

/// Per partition, the next offset a flush or a commit covers: an offset
/// only moves forward, whatever order the reports arrive in. The one place
/// that rule is written; reads go through the map.
#[derive(Debug, Default)]
struct Covered(BTreeMap<i32, i64>);

impl Covered {
    /// Covers `partition` through `next_offset` (kept if already further).
    fn cover(&mut self, partition: i32, next_offset: i64) {
        let entry = self.0.entry(partition).or_insert(next_offset);
        *entry = (*entry).max(next_offset);
    }

    fn merge<'a>(&mut self, offsets: impl IntoIterator<Item = (&'a i32, &'a i64)>) {
        for (&partition, &next_offset) in offsets {
            self.cover(partition, next_offset);
        }
    }

    fn remove(&mut self, partition: &i32) {
        self.0.remove(partition);
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

impl std::ops::Deref for Covered {
    type Target = BTreeMap<i32, i64>;

    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

pub(crate) struct Flusher {
    /// Where flushes and commits are counted and timed, and a failed flush
    /// stops the process.
    reporting: Arc<Reporting>,
    /// What it flushes.
    store: Store,
    /// The input topic, whose offsets it commits.
    topic: String,
    consumer: Arc<BaseConsumer<OrderlyContext>>,
    rx: mpsc::Receiver<FlushMsg>,
    /// Flushed offsets not yet committed (a failed commit is retried).
    uncommitted: Covered,
    /// Per partition, the newest checkpoint its task reported in this
    /// assignment (written or resumed from): a release compares the tree's
    /// checkpoint with it ([`Flusher::stranded`]).
    reported: Covered,
}

impl Flusher {
    pub(super) fn new(
        reporting: Arc<Reporting>,
        store: Store,
        topic: String,
        consumer: Arc<BaseConsumer<OrderlyContext>>,
        rx: mpsc::Receiver<FlushMsg>,
    ) -> Self {
        Flusher {
            reporting,
            store,
            topic,
            consumer,
            rx,
            uncommitted: Covered::default(),
            reported: Covered::default(),
        }
    }

    /// Runs until told to stop (or every sender is dropped).
    pub(super) async fn run(mut self) {
        loop {
            let first = if self.uncommitted.is_empty() {
                self.rx.recv().await
            } else {
                match tokio::time::timeout(Duration::from_secs(1), self.rx.recv()).await {
                    Ok(msg) => msg,
                    Err(_) => {
                        self.commit(&[]).await;
                        continue;
                    }
                }
            };
            let Some(first) = first else { break };
            let mut covered = Covered::default();
            let mut resumed: BTreeMap<i32, i64> = BTreeMap::new();
            let mut applied_at: Vec<Vec<i64>> = Vec::new();
            let mut barriers = Vec::new();
            let mut stop = false;
            let mut take = |msg: FlushMsg| match msg {
                FlushMsg::Stop => stop = true,
                FlushMsg::Resume {
                    partition,
                    next_offset,
                } => {
                    resumed.insert(partition, next_offset);
                }
                FlushMsg::Covered {
                    partition,
                    next_offset,
                    applied_at: times,
                } => {
                    applied_at.push(times);
                    covered.cover(partition, next_offset);
                }
                FlushMsg::Barrier {
                    release,
                    lost,
                    reply,
                } => barriers.push((release, lost, reply)),
            };
            take(first);
            while let Ok(msg) = self.rx.try_recv() {
                take(msg);
            }
            self.reported.merge(covered.iter().chain(resumed.iter()));
            // Read before the flush below, so the flush covers what was read.
            let stranded = self.stranded(&barriers);
            covered.merge(
                stranded
                    .iter()
                    .map(|(partition, offset)| (partition, offset)),
            );
            if !covered.is_empty() {
                if !self.flush().await {
                    // The disk failed: nothing more may be committed.
                    return;
                }
                fault::hit(Point::AfterFlush);
                let now_ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as i64)
                    .unwrap_or(0);
                for times in &applied_at {
                    self.reporting.telemetry.complete(times, now_ms);
                }
                self.uncommitted.merge(covered.iter());
            }
            if !resumed.is_empty() {
                self.resume(resumed).await;
            }
            let mut lost: Vec<i32> = Vec::new();
            for (release, was_lost, _) in &barriers {
                if *was_lost {
                    lost.extend(release);
                }
            }
            self.commit(&lost).await;
            for (release, _, reply) in barriers {
                for partition in release {
                    self.uncommitted.remove(&partition);
                    self.reported.remove(&partition);
                }
                let _ = reply.send(());
            }
            if stop {
                return;
            }
        }
    }

    /// Released partitions (not lost) whose tree holds a newer checkpoint
    /// than their task reported: a task stopped at the drain's deadline
    /// after its store batch and before its report (the batch's blocking
    /// write goes on when the task is stopped). Committing it keeps the
    /// group's offset with the store instead of behind it. Only partitions
    /// whose task reported in this assignment: a tree this instance wrote in
    /// an earlier one (a restore cut short by the release) holds an old
    /// checkpoint, and a commit must never go backwards.
    fn stranded(&self, barriers: &[Barrier]) -> Vec<(i32, i64)> {
        let mut out = Vec::new();
        for (release, lost, _) in barriers {
            if *lost {
                continue;
            }
            for &partition in release {
                let Some(&reported) = self.reported.get(&partition) else {
                    continue;
                };
                let checkpoint = self
                    .store
                    .partition(&self.topic, partition)
                    .and_then(|tree| tree.checkpoint());
                match checkpoint {
                    Ok(Some(c)) if c.next_offset > reported => {
                        info!(
                            partition,
                            reported,
                            checkpoint = c.next_offset,
                            "a released partition's store is ahead of what its task reported \
                             (stopped at the drain's deadline); committing its checkpoint after the flush"
                        );
                        out.push((partition, c.next_offset));
                    }
                    Ok(_) => {}
                    Err(error) => {
                        warn!(partition, %error, "cannot read a released partition's checkpoint; committing what its task reported")
                    }
                }
            }
        }
        out
    }

    /// One sync for every batch reported so far. False on a disk error, which
    /// is fatal for the processor.
    async fn flush(&self) -> bool {
        let started = Instant::now();
        let store = self.store.clone();
        let result = tokio::task::spawn_blocking(move || store.flush()).await;
        self.reporting
            .counters
            .flushes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.reporting
            .telemetry
            .flush_duration
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(Ok(_)) => true,
            Ok(Err(error)) => {
                self.reporting.fatal(ProcessError::Flush(error));
                false
            }
            Err(join) => {
                self.reporting.fatal(ProcessError::Process {
                    stage: Stage::Flush,
                    message: format!("store flush panicked: {join}"),
                });
                false
            }
        }
    }

    /// Queues for commit each resumed checkpoint that is ahead of the group's
    /// committed offset. (Never one that is behind: that store is stale, and
    /// the commit must not go backwards.) The checkpoints were read from the
    /// store, so they are durable already.
    async fn resume(&mut self, resumed: BTreeMap<i32, i64>) {
        let consumer = self.consumer.clone();
        let topic = self.topic.clone();
        let partitions: Vec<i32> = resumed.keys().copied().collect();
        // The list lives only inside the blocking call (a list alive when the
        // consumer drops can hang the drop).
        let committed = tokio::task::spawn_blocking(move || {
            let mut tpl = TopicPartitionList::with_capacity(partitions.len());
            for partition in &partitions {
                tpl.add_partition(&topic, *partition);
            }
            consumer
                .committed_offsets(tpl, Duration::from_secs(10))
                .map(|list| {
                    list.elements()
                        .iter()
                        .map(|e| (e.partition(), crate::kafka::offset_of(e)))
                        .collect::<Vec<_>>()
                })
        })
        .await;
        let committed = match committed {
            Ok(Ok(list)) => list,
            Ok(Err(error)) => {
                warn!(%error, "cannot read the group's committed offsets; committing the durable checkpoints");
                resumed.keys().map(|p| (*p, None)).collect()
            }
            Err(join) => {
                warn!(%join, "committed-offsets task failed; committing the durable checkpoints");
                resumed.keys().map(|p| (*p, None)).collect()
            }
        };
        for (partition, group_offset) in committed {
            let Some(&next_offset) = resumed.get(&partition) else {
                continue;
            };
            if group_offset.is_none_or(|o| o < next_offset) {
                info!(partition, committed = ?group_offset, checkpoint = next_offset, "durable checkpoint ahead of the group's offset; committing it");
                self.uncommitted.cover(partition, next_offset);
            }
        }
    }

    /// Commits the flushed offsets, except for partitions whose assignment
    /// was lost. A failure keeps them for the next attempt: the store holds
    /// the truth, the Kafka commit is advisory.
    async fn commit(&mut self, skip: &[i32]) {
        for partition in skip {
            self.uncommitted.remove(partition);
        }
        if self.uncommitted.is_empty() {
            return;
        }
        let tpl = match crate::kafka::commit_list(
            &self.topic,
            self.uncommitted.iter().map(|(p, o)| (*p, *o)),
        ) {
            Ok(tpl) => tpl,
            Err(error) => {
                warn!(%error, "cannot build the commit list; will retry");
                return;
            }
        };
        let consumer = self.consumer.clone();
        let started = Instant::now();
        let result =
            tokio::task::spawn_blocking(move || consumer.commit(&tpl, CommitMode::Sync)).await;
        self.reporting
            .telemetry
            .commit_duration
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(Ok(())) => {
                debug!(
                    partitions = self.uncommitted.len(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "committed"
                );
                self.uncommitted.clear();
            }
            Ok(Err(error)) => {
                self.reporting
                    .telemetry
                    .errors
                    .record(Stage::Commit, Kind::Retryable);
                warn!(%error, "offset commit failed; will retry (state and checkpoint are already durable)")
            }
            Err(join) => {
                self.reporting
                    .telemetry
                    .errors
                    .record(Stage::Commit, Kind::Retryable);
                warn!(%join, "offset commit task failed; will retry")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Covered;

    #[test]
    fn a_covered_offset_only_moves_forward() {
        let mut covered = Covered::default();
        covered.cover(0, 10);
        covered.cover(0, 7);
        covered.cover(1, 3);
        covered.merge([(&0, &12), (&1, &2), (&2, &5)]);
        assert_eq!(covered.get(&0), Some(&12));
        assert_eq!(covered.get(&1), Some(&3));
        assert_eq!(covered.get(&2), Some(&5));
        covered.remove(&1);
        assert_eq!(covered.len(), 2);
        covered.clear();
        assert!(covered.is_empty());
    }
}
