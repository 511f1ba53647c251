//! One ordered task per assigned partition, through its lifecycle:
//!
//! * **restoring**: with a changelog, bring the partition's tree up to it
//!   (on a blocking thread, cancelled by a revoke); without one, refuse a
//!   partition whose committed offset is ahead of the store (its state is
//!   elsewhere);
//! * **processing**: batch, decode, dead-letter, decide against the
//!   partition's order cache; once per commit interval (or when its changed
//!   orders pass their memory share) produce the changes to the changelog,
//!   wait for the acknowledgements, write them with the checkpoint in one
//!   atomic sled batch and report it to the flusher;
//! * **draining** (revoke, shutdown): finish the records already fetched,
//!   write them out, reply with the checkpoint and stop.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::{mpsc, oneshot, Notify};
use tracing::{debug, error, info, warn};

use super::context::OrderlyContext;
use super::dlq::{DeadLetter, HeldLetter};
use crate::headers::HEADER_REDRIVE_COUNT;
use super::transaction::{Round, TxnError, TxnWriter};
use super::flusher::FlushMsg;
use super::{ProcessError, Shared};
use crate::retry::Backoff;
use crate::telemetry::errors::{Kind, Stage};
use crate::breaker::Breaker;
use crate::changelog::restore::Restore;
use crate::codec::DecodeError;
use crate::event::OrderEvent;
use crate::fault::{self, Point};
use crate::outcomes::Outcomes;
use crate::partition_state::{BatchOutcome, PartitionState};
use crate::config::Guarantee;
use crate::store::{next_offset_after, Checkpoint};
use crate::telemetry::{PartitionStatus, Phase};

/// The consumer side of one partition: its own librdkafka queue (split off
/// the consumer's main queue, so records reach the task without a copy or a
/// hand-off through the poll thread) and the signal that it became non-empty.
pub struct PartitionInput {
    pub queue: PartitionQueue<OrderlyContext>,
    pub ready: Arc<Notify>,
}

/// What the rebalance callback tells a partition task.
pub enum Command {
    /// Finish every record already in the queue, then reply with the
    /// checkpoint and stop. With `lost` (the group took the partition away
    /// without a revoke: this member was presumed dead), write nothing: the
    /// partition has another owner already, and a late write-out of this
    /// one would land in the changelog after the new owner's.
    Drain { reply: oneshot::Sender<Option<Checkpoint>>, lost: bool },
}

pub struct PartitionTask {
    pub shared: Arc<Shared>,
    pub partition: i32,
    /// The order cache, the pending and written checkpoints (`None` until
    /// the first batch on a partition this store never processed).
    pub state: PartitionState,
    pub rx: mpsc::Receiver<Command>,
    /// The task's [`Phase`], offsets and counters, for the supervisor, the
    /// metrics and the status page.
    pub status: Arc<PartitionStatus>,
    /// To seek after a restore and read the group's committed offset.
    pub consumer: Weak<BaseConsumer<OrderlyContext>>,
    /// The offset the partition was assigned at (the stored checkpoint);
    /// `None`: the group's committed offset.
    pub assigned_at: Option<i64>,
    /// The outbox relay, once processing started (outbox on,
    /// at_least_once).
    pub relay: Option<RelayHandle>,
    /// exactly_once: the partition's transactional producer, opened before
    /// the restore.
    pub txn: Option<TxnWriter>,
    /// exactly_once: dead letters decided since the last write-out, sent in
    /// its transaction.
    pub held_letters: Vec<HeldLetter>,
    /// Stops the partition when it dead-letters too much.
    pub breaker: Breaker,
}

/// The partition task's end of its outbox relay.
pub struct RelayHandle {
    /// The written checkpoint's next offset, for the relay.
    written: tokio::sync::watch::Sender<i64>,
    /// How far the broker acknowledged (source offset; -1 none).
    published: Arc<std::sync::atomic::AtomicI64>,
    join: tokio::task::JoinHandle<()>,
}

/// How the restoring phase ended.
enum Started {
    /// Restored (or nothing to restore): on to processing.
    Ready,
    /// A drain came first: the partition is released before processing,
    /// with the drain's reply channel (`None`: the router is gone).
    Released { reply: Option<oneshot::Sender<Option<Checkpoint>>> },
}

/// How long a task that was paused past the session timeout holds its
/// write-outs: several heartbeat intervals (500 ms), time for the
/// coordinator's answer to arrive as a revoke if the member was evicted.
const PAUSE_HOLD: Duration = Duration::from_secs(3);

/// How long an idle task sleeps before polling its queue again even without
/// a non-empty signal (a safety net; the signal is the normal wake-up).
const IDLE_RECHECK: Duration = Duration::from_millis(500);

impl PartitionTask {
    pub async fn run(mut self, input: PartitionInput) -> Result<(), ProcessError> {
        let max_records = self.shared.config.processing.batch_max_records;
        let max_wait = Duration::from_millis(self.shared.config.processing.batch_max_wait_ms);
        let interval = Duration::from_millis(self.shared.config.processing.commit_interval_ms);
        let PartitionInput { queue, ready } = input;
        if let Started::Released { reply } = self.start().await? {
            // Revoked while restoring: nothing was processed.
            if let Some(reply) = reply {
                let _ = reply.send(self.state.written());
            }
            return Ok(());
        }
        self.enter(Phase::Processing);
        self.start_relay();
        if let Some(checkpoint) = self.state.written() {
            // A checkpoint made durable before a crash may never have been
            // committed to Kafka; the flusher commits it if the group's
            // offset is behind, without waiting for new input.
            let resume = FlushMsg::Resume { partition: self.partition, next_offset: checkpoint.next_offset };
            self.shared.flush_tx.send(resume).await.map_err(|_| ProcessError::FlusherGone)?;
        }
        let mut last_write = tokio::time::Instant::now();
        // at_least_once: a task that did not run for longer than the session
        // timeout (the process was paused: SIGSTOP, a GC or VM freeze) may have been
        // presumed dead, its partition given to another member. It holds
        // its write-outs until the group has had time to say so (a revoke
        // with `lost`, which drops the work): a zombie's late write-out
        // would land in the changelog after the new owner's.
        let session = Duration::from_millis(self.shared.config.kafka.session_timeout_ms);
        let mut last_wake = tokio::time::Instant::now();
        let mut hold_until = last_wake;
        loop {
            let mut batch: Vec<BorrowedMessage<'_>> = Vec::with_capacity(max_records);
            let mut drain = None;
            let mut deadline: Option<tokio::time::Instant> = None;
            loop {
                let woke = tokio::time::Instant::now();
                let asleep = woke.saturating_duration_since(last_wake);
                last_wake = woke;
                // exactly_once needs no hold: the new owner fenced this
                // producer, so a late write-out fails and nothing of it is
                // visible (and a network cut, which no pause measures, is
                // covered the same way).
                if asleep > session && self.txn.is_none() {
                    hold_until = woke + PAUSE_HOLD;
                    warn!(
                        partition = self.partition,
                        paused_s = format!("{:.1}", asleep.as_secs_f64()),
                        hold_ms = PAUSE_HOLD.as_millis() as u64,
                        "this task did not run for longer than the session timeout (was the process paused?); holding \
                         its write-out until the group confirms this member still owns the partition"
                    );
                }
                take_available(&queue, &mut batch, max_records, self.partition);
                if batch.len() >= max_records {
                    break;
                }
                if !batch.is_empty() && deadline.is_none() {
                    deadline = Some(tokio::time::Instant::now() + max_wait);
                }
                let mut wait_until = deadline.unwrap_or_else(|| tokio::time::Instant::now() + IDLE_RECHECK);
                let write_due = (last_write + interval).max(hold_until);
                if self.state.has_unwritten() {
                    if tokio::time::Instant::now() >= write_due {
                        break;
                    }
                    wait_until = wait_until.min(write_due);
                }
                tokio::select! {
                    biased;
                    command = self.rx.recv() => {
                        // A closed channel means the router is gone: stop as on a drain.
                        drain = Some(command.map(|Command::Drain { reply, lost }| (reply, lost)));
                        break;
                    }
                    _ = ready.notified() => {}
                    _ = tokio::time::sleep_until(wait_until) => {
                        // How late the runtime woke this task: the batch wait
                        // and the write-out interval hold only this well.
                        let late = tokio::time::Instant::now().saturating_duration_since(wait_until);
                        self.shared.telemetry.timer_lateness.observe(late.as_secs_f64());
                        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                            break;
                        }
                        // Idle: take the relay's progress, so records it
                        // published leave the outbox (and its backlog) at the
                        // next write-out even when no input comes.
                        if batch.is_empty() && !self.state.has_unwritten() {
                            self.collect_published();
                        }
                    }
                }
            }
            if let Some(Some((reply, true))) = drain {
                warn!(
                    partition = self.partition,
                    written = ?self.state.written().map(|c| c.next_offset),
                    "partition lost (this member was presumed dead); its unwritten work is dropped, the new owner redoes it"
                );
                self.stop_relay();
                let _ = reply.send(self.state.written());
                return Ok(());
            }
            let drain = drain.map(|command| command.map(|(reply, _)| reply));
            if let Some(reply) = drain {
                self.enter(Phase::Draining);
                // Everything already fetched for this partition is processed
                // before it is released.
                loop {
                    take_available(&queue, &mut batch, max_records, self.partition);
                    if batch.is_empty() {
                        break;
                    }
                    match self.process(&batch).await {
                        Err(tripped @ ProcessError::DeadLetterBreaker { .. }) => {
                            // Released now: what was decided before the
                            // batch is written, the rest is the next owner's.
                            self.report_trip(&tripped);
                            break;
                        }
                        other => other?,
                    }
                    batch.clear();
                }
                self.write_out().await?;
                self.drain_outbox().await?;
                if let Some(reply) = reply {
                    let _ = reply.send(self.state.written());
                }
                return Ok(());
            }
            if !batch.is_empty() {
                match self.process(&batch).await {
                    Err(tripped @ ProcessError::DeadLetterBreaker { .. }) => {
                        drop(batch);
                        return self.stopped(tripped).await;
                    }
                    other => other?,
                }
            }
            drop(batch);
            self.collect_published();
            let now = tokio::time::Instant::now();
            if now >= hold_until
                && self.state.has_unwritten()
                && (now >= last_write + interval || self.state.dirty_bytes() > self.shared.cache_share())
            {
                self.write_out().await?;
                last_write = now;
            }
        }
    }

    /// The dead-letter breaker tripped: logged, counted and shown (phase
    /// [`Phase::Stopped`], the reason on `/readyz`).
    fn report_trip(&self, tripped: &ProcessError) {
        error!(
            partition = self.partition,
            error = %tripped,
            "dead-letter breaker tripped: this partition stops (nothing after its checkpoint is dead-lettered, decided \
             or committed); fix the cause (a producer's deploy, the registry's schemas), then restart this instance"
        );
        self.shared.telemetry.breaker_trips.fetch_add(1, Ordering::Relaxed);
        self.shared.telemetry.errors.record(Stage::DeadLetter, Kind::Permanent);
        let _ = self.status.stopped.set(tripped.to_string());
        self.enter(Phase::Stopped);
    }

    /// A stopped partition: writes out what was decided before the batch
    /// that tripped the breaker, then only answers the rebalance (or
    /// shutdown) that releases it.
    async fn stopped(&mut self, tripped: ProcessError) -> Result<(), ProcessError> {
        self.report_trip(&tripped);
        self.write_out().await?;
        match self.rx.recv().await {
            Some(Command::Drain { reply, lost }) => {
                if lost {
                    self.stop_relay();
                } else {
                    self.drain_outbox().await?;
                }
                let _ = reply.send(self.state.written());
            }
            None => self.stop_relay(),
        }
        Ok(())
    }

    /// The restoring phase. With a changelog: restores the tree when it is
    /// behind and seeks the partition to the restored checkpoint. Without:
    /// refuses a partition whose state is elsewhere. `Some` when a drain
    /// came first (its reply, if any).
    async fn start(&mut self) -> Result<Started, ProcessError> {
        let Some(changelog) = self.shared.changelog.clone() else {
            self.check_without_changelog().await?;
            return Ok(Started::Ready);
        };
        if self.shared.config.processing.guarantee == Guarantee::ExactlyOnce {
            // Fence the partition's earlier producers first: after this, no
            // write of a previous owner can land behind the restore.
            let output = self.shared.outbox.as_ref().map(|o| (o.topic.clone(), o.encoder.clone()));
            self.txn = Some(TxnWriter::open(&self.shared.config, self.partition, changelog.topic().to_string(), output).await?);
        }
        let cancel = Arc::new(AtomicBool::new(false));
        let tree = self.state.store().clone();
        let job = {
            let (shared, cancel, tree) = (self.shared.clone(), cancel.clone(), tree.clone());
            let (topic, partition) = (changelog.topic().to_string(), self.partition);
            let status = self.status.clone();
            // The partition's span, so the restore's log lines name it.
            let span = tracing::Span::current();
            tokio::task::spawn_blocking(move || {
                let _entered = span.enter();
                let remaining = &status.restore_remaining;
                let restored = Restore { config: &shared.config, topic: &topic, partition, tree: &tree, cancel: &cancel, remaining }.run();
                remaining.store(crate::telemetry::UNKNOWN, Ordering::Relaxed);
                let restored = restored?;
                if restored.restored {
                    shared.store.flush()?;
                }
                Ok::<_, crate::changelog::ChangelogError>(restored)
            })
        };
        tokio::pin!(job);
        let joined = tokio::select! {
            biased;
            command = self.rx.recv() => {
                cancel.store(true, Ordering::Relaxed);
                // The restore stops at its next poll; the store keeps its
                // restoring mark and the next owner starts it again.
                let _ = (&mut job).await;
                return Ok(Started::Released { reply: command.map(|Command::Drain { reply, .. }| reply) });
            }
            joined = &mut job => joined,
        };
        let restored = joined
            .map_err(|join| ProcessError::Partition {
                partition: self.partition,
                stage: Stage::Restore,
                message: format!("restore thread failed: {join}"),
            })??;
        if !restored.restored {
            return Ok(Started::Ready);
        }
        self.shared.counters.record_restore(restored.elapsed);
        self.shared.telemetry.restored_records.fetch_add(restored.applied, Ordering::Relaxed);
        self.status.seed(restored.checkpoint.as_ref());
        self.state = PartitionState::new(tree, restored.checkpoint);
        if let Some(checkpoint) = restored.checkpoint {
            if self.assigned_at != Some(checkpoint.next_offset) {
                self.seek(checkpoint.next_offset).await;
            }
        }
        Ok(Started::Ready)
    }

    /// Moves the task to `phase` and publishes it (status page, `/readyz`,
    /// metrics).
    fn enter(&self, phase: Phase) {
        self.status.phase.store(phase as u8, Ordering::Relaxed);
    }

    /// Starts the outbox relay (outbox on), over the state as restored.
    fn start_relay(&mut self) {
        let Some(setup) = &self.shared.outbox else { return };
        if self.txn.is_some() {
            // exactly_once: status changes go out in each write-out's
            // transaction; no outbox rows, no relay.
            self.state.send_status_directly(self.partition);
            return;
        }
        self.state.enable_outbox(self.partition);
        let written_at = self.state.written().map(|c| c.next_offset).unwrap_or(0);
        let (written, written_rx) = tokio::sync::watch::channel(written_at);
        let published = Arc::new(std::sync::atomic::AtomicI64::new(-1));
        let backlog = self.status.outbox.get_or_init(Default::default).clone();
        let relay = crate::outbox::relay::Relay {
            tree: self.state.store().clone(),
            partition: self.partition,
            producer_config: setup.producer_config.clone(),
            producer: setup.producer.clone(),
            topic: setup.topic.clone(),
            encoder: setup.encoder.clone(),
            written: written_rx,
            published: published.clone(),
            backlog: backlog.clone(),
            warn_count: setup.warn_count,
            warn_age: setup.warn_age,
            config: self.shared.config.clone(),
            source_topic: self.shared.topic.clone(),
            telemetry: self.shared.telemetry.clone(),
        };
        let join = tokio::spawn(tracing::Instrument::instrument(relay.run(), tracing::Span::current()));
        self.relay = Some(RelayHandle { written, published, join });
    }

    /// Takes the relay's progress: published records are deleted at the
    /// next write-out.
    fn collect_published(&mut self) {
        if let Some(relay) = &self.relay {
            let through = relay.published.load(Ordering::SeqCst);
            if through >= 0 {
                self.state.outbox_published_through(through);
            }
        }
    }

    /// On a drain: lets the relay publish what was written, within half the
    /// shutdown deadline, deleting what it published; what is left stays
    /// in the store and the changelog for the next owner. Then stops it.
    async fn drain_outbox(&mut self) -> Result<(), ProcessError> {
        let Some(relay) = self.relay.take() else { return Ok(()) };
        let deadline = Instant::now() + Duration::from_millis(self.shared.config.processing.shutdown_timeout_ms / 2);
        let tree = self.state.store().clone();
        let limit = self.state.written().map(|c| c.next_offset).unwrap_or(0);
        let pending = |tree: &crate::store::PartitionStore, after: i64| tree.outbox_between(after, limit, 1).map(|r| r.is_empty());
        loop {
            let through = relay.published.load(Ordering::SeqCst);
            if pending(&tree, through)? {
                break;
            }
            if Instant::now() >= deadline {
                let left = tree.outbox_backlog()?.0;
                warn!(partition = self.partition, left, "outbox not drained before the deadline; the next owner publishes the rest");
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.relay = Some(relay);
        self.collect_published();
        self.write_out().await?;
        if let Some(relay) = self.relay.take() {
            drop(relay.written);
            relay.join.abort();
        }
        Ok(())
    }

    /// Stops the outbox relay without waiting for it (a lost partition).
    fn stop_relay(&mut self) {
        if let Some(relay) = self.relay.take() {
            drop(relay.written);
            relay.join.abort();
        }
    }

    /// Moves the partition's fetch position (after a restore). Records
    /// before the checkpoint that still arrive are skipped by `process`.
    async fn seek(&self, offset: i64) {
        let Some(consumer) = self.consumer.upgrade() else { return };
        let (topic, partition) = (self.shared.topic.clone(), self.partition);
        let result = tokio::task::spawn_blocking(move || {
            consumer.seek(&topic, partition, Offset::Offset(offset), Duration::from_secs(10))
        })
        .await;
        match result {
            Ok(Ok(())) => info!(partition = self.partition, offset, "seeked to the restored checkpoint"),
            Ok(Err(error)) => warn!(partition = self.partition, offset, %error, "cannot seek to the restored checkpoint; records before it are skipped as they arrive"),
            Err(join) => warn!(partition = self.partition, %join, "seek task failed"),
        }
    }

    /// Without a changelog, a partition whose committed offset is ahead of
    /// this store's checkpoint (or that has a committed offset and no local
    /// state) was processed elsewhere: its state is not here. Refused.
    async fn check_without_changelog(&self) -> Result<(), ProcessError> {
        let partition = self.partition;
        if self.state.store().restoring()? {
            return Err(ProcessError::Partition {
                partition,
                stage: Stage::Assign,
                message: "the store holds an interrupted restore from a changelog, and the changelog is off; turn it \
                          back on (kafka.changelog_topic) or rebuild the store"
                    .into(),
            });
        }
        let Some(consumer) = self.consumer.upgrade() else { return Ok(()) };
        let topic = self.shared.topic.clone();
        let committed = tokio::task::spawn_blocking(move || {
            let mut tpl = TopicPartitionList::with_capacity(1);
            tpl.add_partition(&topic, partition);
            consumer.committed_offsets(tpl, Duration::from_secs(10)).map(|list| {
                list.elements().first().and_then(|e| if let Offset::Offset(o) = e.offset() { Some(o) } else { None })
            })
        })
        .await
        .map_err(|join| ProcessError::Partition {
            partition,
            stage: Stage::Assign,
            message: format!("committed-offset task failed: {join}"),
        })?
        .map_err(ProcessError::Kafka)?;
        let local = self.state.written().map(|c| c.next_offset);
        match committed {
            Some(group) if local.is_none_or(|l| group > l) => Err(ProcessError::Partition {
                partition,
                stage: Stage::Assign,
                message: format!(
                "the group's committed offset {group} is ahead of this store's checkpoint \
                 ({}); the state of the records in between is not in this store (another instance processed them, \
                 or the store was lost), and processing on would apply stale events and let duplicates through. \
                 Turn the changelog on (kafka.changelog_topic) so the state is restored, or rebuild the store from \
                 the start of the topic (see docs/replay-and-restore.md, \"Rebuilding the store\")",
                local.map(|l| l.to_string()).unwrap_or_else(|| "none".into())
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Writes out the changed orders and the checkpoint: produced to the
    /// changelog first (when on) and acknowledged, then written to the store
    /// in one atomic batch and reported to the flusher (which makes it
    /// durable, then commits).
    async fn write_out(&mut self) -> Result<(), ProcessError> {
        if !self.state.has_unwritten() {
            return Ok(());
        }
        let started = Instant::now();
        let applied_at = self.state.take_applied_times();
        // Encoding and writing every changed order takes tens of
        // milliseconds: it runs on a blocking thread so the async workers
        // keep the other partitions' timers and batches on time. The task
        // owns its state and waits, so nothing else touches it meanwhile.
        let changelog = self.shared.changelog.clone();
        let with_changelog = changelog.is_some();
        let (state, prepared) = self.lend_state(move |state| state.prepare_write_out(with_changelog)).await?;
        self.state = state;
        let Some(mut prepared) = prepared? else { return Ok(()) };
        let position = match &changelog {
            Some(_) if self.txn.is_some() => Some(self.commit_transaction(&mut prepared).await?),
            Some(writer) => {
                let changes = prepared.write.changes.take().unwrap_or_default();
                let (covers, epoch) = (prepared.checkpoint.next_offset, prepared.checkpoint.epoch);
                Some(writer.publish(self.partition, &changes, &prepared.checkpoint_bytes, covers, epoch).await?)
            }
            None => None,
        };
        let share = self.shared.cache_share();
        let (state, result) = self.lend_state(move |state| state.finish_write_out(prepared, position, share)).await?;
        self.state = state;
        let written = result?;
        fault::hit(Point::AfterBatch);
        self.shared.counters.record_write(written.keys, written.bytes);
        self.shared.telemetry.write_out_duration.observe(started.elapsed().as_secs_f64());
        let next_offset = written.checkpoint.next_offset;
        self.status.checkpoint.store(next_offset, Ordering::Relaxed);
        debug!(partition = self.partition, orders = written.orders, keys = written.keys, next_offset, "write-out");
        if let Some(relay) = &self.relay {
            let _ = relay.written.send(next_offset);
        }
        self.shared
            .flush_tx
            .send(FlushMsg::Covered { partition: self.partition, next_offset, applied_at })
            .await
            .map_err(|_| ProcessError::FlusherGone)
    }

    /// exactly_once: commits the write-out's transaction (held letters,
    /// changelog records, status changes, input offset), retrying an
    /// aborted round with backoff. Returns the changelog position.
    async fn commit_transaction(&mut self, prepared: &mut crate::partition_state::PreparedWrite) -> Result<i64, ProcessError> {
        let changes = prepared.write.changes.take().unwrap_or_default();
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let group = self
                .consumer
                .upgrade()
                .and_then(|c| c.group_metadata())
                .ok_or_else(|| ProcessError::Partition {
                    partition: self.partition,
                    stage: Stage::Transaction,
                    message: "the consumer is closed".into(),
                })?;
            let Some(txn) = &self.txn else {
                return Err(ProcessError::Partition {
                    partition: self.partition,
                    stage: Stage::Transaction,
                    message: "no transactional producer".into(),
                });
            };
            let round = Round {
                letters: &self.held_letters,
                changes: &changes,
                checkpoint: &prepared.checkpoint_bytes,
                covers: prepared.checkpoint.next_offset,
                epoch: prepared.checkpoint.epoch,
                status: &prepared.status,
                group,
            };
            match txn.commit(round).await {
                Ok(position) => {
                    self.held_letters.clear();
                    return Ok(position);
                }
                Err(TxnError::Aborted { cause, .. }) => {
                    self.shared.telemetry.errors.record(Stage::Transaction, Kind::Retryable);
                    warn!(partition = self.partition, error = %cause, "transaction aborted (nothing of it is visible); retrying the write-out");
                    backoff.sleep().await;
                }
                Err(fenced) => return Err(fenced.into()),
            }
        }
    }

    /// Runs `work` on the partition's state on a blocking thread and hands
    /// the state back with its result.
    async fn lend_state<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(&mut PartitionState) -> T + Send + 'static,
    ) -> Result<(PartitionState, T), ProcessError> {
        let placeholder = self.state.empty_like();
        let mut state = std::mem::replace(&mut self.state, placeholder);
        tokio::task::spawn_blocking(move || {
            let result = work(&mut state);
            (state, result)
        })
        .await
        .map_err(|join| ProcessError::Partition {
            partition: self.partition,
            stage: Stage::WriteOut,
            message: format!("write-out thread failed: {join}"),
        })
    }

    /// Processes one batch: everything in it ends applied, duplicate, stale
    /// or dead-lettered, decided against the order cache; the pending
    /// checkpoint moves past it (written at the next write-out).
    async fn process(&mut self, batch: &[BorrowedMessage<'_>]) -> Result<(), ProcessError> {
        let started = Instant::now();
        let expected = self.state.pending().map(|c| c.next_offset);
        // Records the checkpoint already covers were processed before a crash
        // or a rebalance: skip them, they are counted already.
        let fresh: Vec<&BorrowedMessage<'_>> =
            batch.iter().filter(|m| expected.is_none_or(|next| m.offset() >= next)).collect();
        let (Some(first), Some(last)) = (fresh.first(), fresh.last()) else { return Ok(()) };
        match expected {
            None => info!(partition = self.partition, offset = first.offset(), "first batch on this partition; starting the checkpoint here"),
            Some(next) if first.offset() != next => warn!(
                partition = self.partition,
                expected = next,
                got = first.offset(),
                "offset gap (retention, compaction or transaction markers); counters will not add up to the offset span"
            ),
            Some(_) => {}
        }
        let first_offset = first.offset();
        let next_offset = next_offset_after(last.offset());

        let mut events: Vec<OrderEvent> = Vec::with_capacity(fresh.len());
        let mut offsets: Vec<i64> = Vec::with_capacity(fresh.len());
        let mut letters: Vec<DeadLetter<'_>> = Vec::new();
        let mut dead: Vec<bool> = Vec::with_capacity(fresh.len());
        for message in &fresh {
            let decoded = self.decode(message).await;
            dead.push(decoded.is_err());
            match decoded {
                Ok(event) => {
                    events.push(event);
                    offsets.push(message.offset());
                }
                Err((kind, text)) => letters.push(DeadLetter {
                    key: message.key(),
                    payload: message.payload(),
                    partition: self.partition,
                    offset: message.offset(),
                    kind,
                    message: text,
                    redrive_count: redrive_count(message),
                }),
            }
        }
        if let Some(trip) = self.breaker.observe(dead) {
            // Nothing of this batch is sent, decided or counted: the
            // partition's checkpoint stays before it.
            return Err(ProcessError::DeadLetterBreaker { partition: self.partition, offset: first_offset, trip });
        }
        if !letters.is_empty() && self.txn.is_some() {
            // exactly_once: the letters commit with the write-out that
            // moves the checkpoint past their records.
            self.held_letters.extend(letters.iter().map(HeldLetter::hold));
        } else if !letters.is_empty() {
            // A permanent failure stops the processor before this batch is
            // decided: nothing moves past a record whose letter is not durable.
            self.shared.dead_letters.try_send_all(&letters).await?;
            fault::hit(Point::AfterDlq);
        }

        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
        let retention_ms = self.shared.retention.as_millis() as i64;
        let dead = letters.len() as u64;
        fault::hit(Point::PanicBatch);
        let outcome = self.state.apply_sourced(events, &offsets, dead, first_offset, next_offset, now_ms, retention_ms)?;
        let BatchOutcome { outcomes, version_gaps, .. } = outcome;
        let outcomes = Outcomes { dead_lettered: dead, ..outcomes };
        let elapsed = started.elapsed();
        self.shared.counters.record_batch(&outcomes, version_gaps, elapsed);
        self.status.record(&outcomes, version_gaps, next_offset);
        self.shared.telemetry.batch_duration.observe(elapsed.as_secs_f64());
        self.shared.telemetry.batch_records.observe(fresh.len() as f64);
        debug!(partition = self.partition, records = fresh.len(), ?outcomes, next_offset, "batch decided");
        Ok(())
    }

    /// Decodes one record; a registry outage is retried here (the record is
    /// not poison, it must not be skipped).
    async fn decode(&self, message: &BorrowedMessage<'_>) -> Result<OrderEvent, (crate::codec::PoisonKind, String)> {
        let decoder = &self.shared.decoder;
        if let Some(result) = decoder.decode_cached(message.payload()) {
            return result.map_err(poison_parts);
        }
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        loop {
            match decoder.decode(message.payload()).await {
                Err(DecodeError::Transient(error)) => {
                    self.shared.telemetry.errors.record(Stage::Decode, Kind::Retryable);
                    warn!(partition = self.partition, offset = message.offset(), %error, "schema registry unavailable; retrying");
                    backoff.sleep().await;
                }
                other => return other.map_err(poison_parts),
            }
        }
    }
}

/// Moves every record already in the queue into the batch, up to `max`.
fn take_available<'q>(
    queue: &'q PartitionQueue<OrderlyContext>,
    batch: &mut Vec<BorrowedMessage<'q>>,
    max: usize,
    partition: i32,
) {
    while batch.len() < max {
        match queue.poll(Duration::ZERO) {
            Some(Ok(message)) => batch.push(message),
            Some(Err(error)) => warn!(partition, %error, "partition queue error (librdkafka retries on its own)"),
            None => return,
        }
    }
}

/// The record's re-drive count header, as it is: a letter of a re-driven
/// record that fails again keeps the count `orderly dlq replay` gave it.
fn redrive_count<'m>(message: &'m BorrowedMessage<'_>) -> Option<&'m [u8]> {
    crate::kafka::header(message, HEADER_REDRIVE_COUNT)
}

fn poison_parts(error: DecodeError) -> (crate::codec::PoisonKind, String) {
    match error {
        DecodeError::Poison { kind, message } => (kind, message),
        // Unreachable by construction (transient errors are retried), but a
        // typed answer beats a panic.
        DecodeError::Transient(message) => (crate::codec::PoisonKind::Undecodable, message),
    }
}
