//! The processing phase: batches of the partition's records (up to
//! `batch_max_records`, or what came within `batch_max_wait_ms`), each
//! decided, and a write-out once per commit interval, when the changed
//! orders pass their memory share, or `caught_up_write_ms` after the last
//! one once the partition has read everything its input holds. Ends when
//! the partition is drained, lost, or stopped by the dead-letter breaker.

use crate::engine::entity::Entity;
use std::time::Duration;

use tracing::{info, warn};

use super::batch::take_available;
use super::draining::Draining;
use super::live::Live;
use super::mode::WriteOutMode;
use super::schedule::{Settings, Wake, WriteSchedule};
use super::source::RecordSource;
use super::stopped::Stopped;
use super::task::{Command, PartitionTask};
use crate::engine::store::Checkpoint;
use crate::observe::Phase;
use crate::processor::error::ProcessError;
use crate::processor::flusher::FlushMsg;
use crate::processor::transaction::TxnError;

/// How long a task that was paused past the session timeout holds its
/// write-outs: several heartbeat intervals (500 ms), time for the
/// coordinator's answer to arrive as a revoke if the member was evicted.
const PAUSE_HOLD: Duration = Duration::from_secs(3);

/// How long an idle task sleeps before polling its queue again even without
/// a non-empty signal (a safety net; the signal is the normal wake-up).
const IDLE_RECHECK: Duration = Duration::from_millis(500);

/// A restored partition task taking records.
pub(super) struct Processing<E: Entity> {
    live: Live<E>,
}

/// How the processing phase ended.
pub(super) enum Ended<E: Entity, M> {
    /// A drain (revoke, shutdown, or the router gone), with the records
    /// fetched and not yet decided: they are decided before the release.
    Drain {
        draining: Draining<E>,
        fetched: Vec<M>,
    },
    /// The partition was lost: released, its unwritten work dropped.
    Lost,
    /// The dead-letter breaker tripped.
    Stopped(Stopped<E>),
    /// The partition's transactional producer was fenced: nothing of the
    /// failed write-out is visible; the task is handed back without its
    /// relay, to be released or started over.
    Fenced {
        task: PartitionTask<E>,
        cause: TxnError,
    },
}

impl<E: Entity> Processing<E> {
    /// Enters processing: the outbox relay starts over the restored state,
    /// and the flusher learns the written checkpoint.
    pub(super) async fn enter(
        task: PartitionTask<E>,
        mode: WriteOutMode<E>,
    ) -> Result<Self, ProcessError> {
        task.enter(Phase::Processing);
        let live = Live::start(task, mode)?;
        if let Some(checkpoint) = live.task.state.written() {
            // A checkpoint made durable before a crash may never have been
            // committed to Kafka; the flusher commits it if the group's
            // offset is behind, without waiting for new input.
            let resume = FlushMsg::Resume {
                partition: live.task.partition,
                next_offset: checkpoint.next_offset,
            };
            live.task
                .member
                .flush_tx
                .send(resume)
                .await
                .map_err(|_| ProcessError::FlusherGone)?;
        }
        Ok(Processing { live })
    }

    /// Processes until the partition is drained, lost or stopped.
    pub(super) async fn run<'q, S: RecordSource>(
        mut self,
        source: &'q S,
    ) -> Result<Ended<E, S::Record<'q>>, ProcessError> {
        let max_records = self.live.task.settings.batch_max_records;
        let mut schedule = self.schedule();
        loop {
            let mut batch: Vec<S::Record<'q>> = Vec::with_capacity(max_records);
            let drain = self.fill(source, &mut schedule, &mut batch).await;
            if let Some(Some((reply, true))) = drain {
                warn!(
                    partition = self.live.task.partition,
                    written = ?self.live.task.state.written().map(|c| c.next_offset),
                    "partition lost (this member was presumed dead); its unwritten work is dropped, the new owner redoes it"
                );
                self.live.stop_relay();
                self.live.reply(Some(reply));
                return Ok(Ended::Lost);
            }
            let drain = drain.map(|command| command.map(|(reply, _)| reply));
            if let Some(reply) = drain {
                return Ok(Ended::Drain {
                    draining: Draining::enter(self.live, reply),
                    fetched: batch,
                });
            }
            // The queue was empty when the batch closed short of its maximum.
            let drained = batch.len() < max_records;
            if !batch.is_empty() {
                match self.live.process(&batch).await {
                    Err(tripped @ ProcessError::DeadLetterBreaker { .. }) => {
                        return Ok(Ended::Stopped(Stopped::enter(self.live, tripped)));
                    }
                    other => other?,
                }
            }
            drop(batch);
            self.live.collect_published();
            if let Err(cause) = self
                .write_out_if_due(source, &mut schedule, drained)
                .await?
            {
                return Ok(Ended::Fenced {
                    task: self.live.into_task(),
                    cause,
                });
            }
        }
    }

    /// When this task writes out. Without a changelog, a task that did not
    /// run for longer than the session timeout (the process was paused:
    /// SIGSTOP, a GC or VM freeze) may have been presumed dead, its
    /// partition given to another member: it holds its write-outs until
    /// the group has had time to say so (a revoke with `lost`, which drops
    /// the work). A changelog needs no hold: every write-out is a
    /// transaction the new owner fenced, so a late one fails and nothing of
    /// it is visible (a network cut, which no pause measures, is covered
    /// the same way).
    fn schedule(&self) -> WriteSchedule {
        let settings = &self.live.task.settings;
        WriteSchedule::new(
            Settings {
                interval: settings.commit_interval,
                // Caught up with the input: write out this soon after the
                // last write-out instead of a whole interval later.
                caught_up_after: settings.caught_up_write,
                session: settings.session_timeout,
                pause_hold: PAUSE_HOLD,
                hold_pauses: self.live.mode.unfenced(),
            },
            tokio::time::Instant::now(),
        )
    }

    /// Takes records into `batch` until it is full, its wait is over or a
    /// write-out is due; returns the drain command when one came (`Some(None)`:
    /// the router is gone).
    async fn fill<'q, S: RecordSource>(
        &mut self,
        source: &'q S,
        schedule: &mut WriteSchedule,
        batch: &mut Vec<S::Record<'q>>,
    ) -> Option<Option<(tokio::sync::oneshot::Sender<Option<Checkpoint>>, bool)>> {
        let (max_records, max_wait) = (
            self.live.task.settings.batch_max_records,
            self.live.task.settings.batch_max_wait,
        );
        let mut deadline: Option<tokio::time::Instant> = None;
        loop {
            self.woke(schedule);
            // A restored checkpoint librdkafka was not fetching for
            // yet: tried before the first record of a batch is taken
            // (records taken before a seek come again after it, and the
            // batch skips what the checkpoint covers).
            if batch.is_empty() {
                self.live.retry_pending_seek().await;
            }
            take_available(source, batch, max_records, self.live.task.partition);
            if batch.len() >= max_records {
                return None;
            }
            if !batch.is_empty() && deadline.is_none() {
                deadline = Some(tokio::time::Instant::now() + max_wait);
            }
            let mut wait_until =
                deadline.unwrap_or_else(|| tokio::time::Instant::now() + IDLE_RECHECK);
            let due = schedule.due(self.live.task.state.has_unwritten(), || {
                batch.is_empty() && at_end(source, &self.live)
            });
            if let Some(due) = due {
                if tokio::time::Instant::now() >= due {
                    return None;
                }
                wait_until = wait_until.min(due);
            }
            tokio::select! {
                biased;
                command = self.live.task.rx.recv() => {
                    // A closed channel means the router is gone: stop as on a drain.
                    return Some(command.map(|Command::Drain { reply, lost }| (reply, lost)));
                }
                _ = source.ready().notified() => {}
                _ = tokio::time::sleep_until(wait_until) => {
                    // How late the runtime woke this task: the batch wait
                    // and the write-out interval hold only this well.
                    let late = tokio::time::Instant::now().saturating_duration_since(wait_until);
                    self.live.task.reporting.telemetry.timer_lateness.observe(late.as_secs_f64());
                    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                        return None;
                    }
                    // Idle: take the relay's progress, so records it
                    // published leave the outbox (and its backlog) at the
                    // next write-out even when no input comes.
                    if batch.is_empty() && !self.live.task.state.has_unwritten() {
                        self.live.collect_published();
                    }
                }
            }
        }
    }

    /// Tells the schedule the task runs again, and says a long wait on the
    /// registry or a pause.
    fn woke(&self, schedule: &mut WriteSchedule) {
        // Time spent waiting on the schema registry is time this
        // task ran (and the poll thread kept the membership).
        let on_registry = Duration::from_millis(
            self.live
                .registry_waited_ms
                .swap(0, std::sync::atomic::Ordering::Relaxed),
        );
        match schedule.woke(tokio::time::Instant::now(), on_registry) {
            Wake::Ran => {}
            Wake::WaitedOnRegistry(waited) => info!(
                partition = self.live.task.partition,
                waited_s = format!("{:.1}", waited.as_secs_f64()),
                "this task waited on the schema registry for longer than the session timeout; the poll thread \
                 kept this member in the group meanwhile"
            ),
            Wake::Paused { asleep, held: true } => warn!(
                partition = self.live.task.partition,
                paused_s = format!("{:.1}", asleep.as_secs_f64()),
                hold_ms = PAUSE_HOLD.as_millis() as u64,
                "this task did not run for longer than the session timeout (was the process paused?); holding \
                 its write-out until the group confirms this member still owns the partition"
            ),
            Wake::Paused { held: false, .. } => {}
        }
    }

    /// Writes out when the schedule says so (and the member's write-out
    /// turn is free, or it cannot be put off). `Ok(Err(cause))`: the
    /// partition's producer was fenced.
    async fn write_out_if_due<S: RecordSource>(
        &mut self,
        source: &S,
        schedule: &mut WriteSchedule,
        drained: bool,
    ) -> Result<Result<(), TxnError>, ProcessError> {
        let now = tokio::time::Instant::now();
        let state = &self.live.task.state;
        let member = &self.live.task.member;
        let over_share = state.over_budget(member.cache_share());
        let due = schedule.write_now(now, state.has_unwritten(), over_share, || {
            drained && at_end(source, &self.live)
        });
        // While other partitions hold the member's write-out turns, a
        // write-out that may wait does.
        let put_off = !member.write_turn_free() && schedule.may_put_off(now, !drained, over_share);
        if !due || put_off {
            return Ok(Ok(()));
        }
        match self.live.write_out().await {
            Err(ProcessError::Txn(
                cause @ (TxnError::Fenced { .. } | TxnError::Stalled { .. }),
            )) => return Ok(Err(cause)),
            other => other?,
        }
        schedule.written(now);
        Ok(Ok(()))
    }
}

/// True when every record up to the partition's end as last fetched (its
/// cached high watermark: no request to the broker) is decided, allowing
/// one offset: a transactional producer's last record is followed by its
/// commit marker, which no consumer sees. Under load the fetched end runs
/// ahead of the position; a fetch state older than the last batch (or one
/// record not yet fetched) can make this true early, which costs one early
/// write-out (they stay `caught_up_write_ms` apart), never a record.
fn at_end<E: Entity>(source: &impl RecordSource, live: &Live<E>) -> bool {
    let Some(position) = live.task.state.pending().map(|c| c.next_offset) else {
        return false;
    };
    source.fetched_end().is_some_and(|end| position + 1 >= end)
}
