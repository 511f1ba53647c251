//! A partition past its restore (processing, draining or stopped): the
//! task with its outbox relay, and the write-out every one of those phases
//! ends its work with.

use crate::engine::entity::Entity;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use rdkafka::message::Message;

use super::batch::BatchRun;
use super::mode::WriteOutMode;
use super::strategy::StatusRoute;
use super::task::{PartitionTask, Reply};
use crate::engine::fault::{self, Point};
use crate::engine::outbox_record::OutboxRecord;
use crate::engine::partition_state::{PartitionState, StatusChanges};
use crate::observe::errors::Stage;
use crate::processor::error::ProcessError;
use crate::processor::flusher::FlushMsg;
use crate::processor::outbox::direct::{Floor, PublishError, StatusOutput};

/// The partition task's end of its outbox relay. Dropping it stops the
/// relay (a task that ends with an error, fenced among them, must not leave
/// its relay publishing beside the next owner's).
struct RelayHandle {
    /// The written checkpoint's next offset, for the relay.
    written: tokio::sync::watch::Sender<i64>,
    /// How far the broker acknowledged (source offset; -1 none).
    published: Arc<std::sync::atomic::AtomicI64>,
    join: tokio::task::JoinHandle<()>,
}

impl Drop for RelayHandle {
    fn drop(&mut self) {
        self.join.abort();
    }
}

/// A partition task that may process records: restored, its relay (if
/// any) running.
pub(super) struct Live<E: Entity> {
    pub(super) task: PartitionTask<E>,
    /// How this owner's write-outs reach Kafka, opened by the restore.
    pub(super) mode: WriteOutMode<E>,
    /// The outbox relay (outbox on, at_least_once).
    relay: Option<RelayHandle>,
    /// Write-out delivery: the last status change this input partition
    /// published before (read back once, before the first publish); `None`
    /// until read.
    status_floor: Option<Floor>,
    /// Milliseconds this task spent waiting on an unreachable schema
    /// registry (decoding retries), so a long wait is not taken for a
    /// paused process.
    pub(super) registry_waited_ms: std::sync::atomic::AtomicU64,
    /// How long a pending seek had waited when that was last said, in
    /// seconds (0: not yet; see [`Self::retry_pending_seek`]).
    pending_seek_said: u64,
}

impl<E: Entity> Live<E> {
    /// Starts the relay over the state as restored.
    pub(super) fn start(
        task: PartitionTask<E>,
        mode: WriteOutMode<E>,
    ) -> Result<Self, ProcessError> {
        let mut live = Live {
            task,
            mode,
            relay: None,
            pending_seek_said: 0,
            status_floor: None,
            registry_waited_ms: Default::default(),
        };
        live.start_relay()?;
        Ok(live)
    }

    /// Processes one batch: everything in it ends applied, duplicate, stale
    /// or dead-lettered, decided against the order cache (decoded, its
    /// dead letters sent or held by the mode, checked by the breaker:
    /// [`BatchRun`]).
    pub(super) async fn process<M: Message + Sync>(
        &mut self,
        batch: &[M],
    ) -> Result<(), ProcessError> {
        BatchRun {
            task: &mut self.task,
            mode: &mut self.mode,
            registry_waited_ms: &self.registry_waited_ms,
        }
        .process(batch)
        .await
    }

    /// Answers a drain with the written checkpoint.
    pub(super) fn reply(&self, reply: Reply) {
        self.task.reply(reply);
    }

    /// Starts the outbox relay (outbox on, at_least_once, relay delivery),
    /// over the state as restored; with write-out delivery, only while the
    /// store holds rows a relay left.
    fn start_relay(&mut self) -> Result<(), ProcessError> {
        let Some(setup) = &self.task.outputs.outbox else {
            return Ok(());
        };
        let with_write_out = StatusChanges::WithWriteOut {
            partition: self.task.partition,
        };
        match self.task.settings.strategy.status() {
            StatusRoute::Off => return Ok(()),
            StatusRoute::InTransaction => {
                // exactly_once: status changes go out in each write-out's
                // transaction; no outbox rows, no relay.
                self.task.state.send_status_changes(with_write_out);
                return Ok(());
            }
            StatusRoute::WithWriteOut | StatusRoute::Relay => {}
        }
        if self.task.settings.strategy.status() == StatusRoute::WithWriteOut {
            self.task.state.send_status_changes(with_write_out);
            let (left, _) = self.task.state.store().outbox_backlog::<E::Status>()?;
            if left == 0 {
                return Ok(());
            }
            info!(
                partition = self.task.partition,
                left, "the store holds outbox rows left by relay delivery; relaying them, new status changes go with the write-outs"
            );
        } else {
            self.task.state.send_status_changes(StatusChanges::Stored {
                partition: self.task.partition,
            });
        }
        let written_at = self
            .task
            .state
            .written()
            .map(|c| c.next_offset)
            .unwrap_or(0);
        let (written, written_rx) = tokio::sync::watch::channel(written_at);
        let published = Arc::new(std::sync::atomic::AtomicI64::new(-1));
        let backlog = self
            .task
            .status
            .outbox
            .get_or_init(Default::default)
            .clone();
        let relay = crate::processor::outbox::relay::Relay {
            tree: self.task.state.store().clone(),
            partition: self.task.partition,
            producer_config: setup.producer_config.clone(),
            producer: setup.producer.clone(),
            topic: setup.topic.clone(),
            encoder: setup.encoder.clone(),
            written: written_rx,
            published: published.clone(),
            backlog: backlog.clone(),
            warn_count: setup.warn_count,
            warn_age: setup.warn_age,
            reader: self.task.outputs.reader.clone(),
            source_topic: self.task.input.topic.clone(),
            telemetry: self.task.reporting.telemetry.clone(),
        };
        let join = tokio::spawn(tracing::Instrument::instrument(
            relay.run(),
            tracing::Span::current(),
        ));
        self.relay = Some(RelayHandle {
            written,
            published,
            join,
        });
        Ok(())
    }

    /// Tries again the seek to the restored checkpoint that librdkafka was
    /// not fetching the partition for yet (see
    /// [`super::task::PartitionTask::pending_seek`]); says every minute that it
    /// still waits.
    pub(super) async fn retry_pending_seek(&mut self) {
        let Some(offset) = self.task.pending_seek else {
            return;
        };
        match super::task::seek_to(&self.task, offset).await {
            super::task::Seeked::Done => {
                info!(
                    partition = self.task.partition,
                    offset, "fetching started; seeked to the restored checkpoint"
                );
                self.task.pending_seek = None;
                self.task.status.waiting.clear();
                self.pending_seek_said = 0;
            }
            super::task::Seeked::NotFetching => {
                let waited = self
                    .task
                    .status
                    .waiting
                    .get(std::time::Instant::now())
                    .map_or(0, |(w, _)| w.as_secs());
                // At 10 s, then every minute.
                let due = if self.pending_seek_said == 0 {
                    10
                } else {
                    self.pending_seek_said + 60
                };
                if waited >= due {
                    self.pending_seek_said = waited;
                    warn!(
                        partition = self.task.partition,
                        waited_s = waited,
                        offset,
                        "the partition is not being fetched: librdkafka still waits for the group's committed offset \
                         of it, which Kafka keeps unstable while a transaction's offset commit on it is pending (its \
                         marker lost on __consumer_offsets, KAFKA-20734); `orderly repair` aborts it"
                    );
                }
            }
            super::task::Seeked::Failed(error) => {
                warn!(partition = self.task.partition, offset, %error, "cannot seek to the restored checkpoint; records before it are skipped as they arrive");
                self.task.pending_seek = None;
                self.task.status.waiting.clear();
            }
        }
    }

    /// Takes the relay's progress: published records are deleted at the
    /// next write-out.
    pub(super) fn collect_published(&mut self) {
        if let Some(relay) = &self.relay {
            let through = relay.published.load(Ordering::SeqCst);
            if through >= 0 {
                self.task.state.outbox_published_through(through);
            }
        }
    }

    /// On a drain: lets the relay publish what was written, within half the
    /// shutdown deadline, deleting what it published; what is left stays
    /// in the store and the changelog for the next owner. Then stops it.
    pub(super) async fn drain_outbox(&mut self) -> Result<(), ProcessError> {
        let Some(relay) = self.relay.take() else {
            return Ok(());
        };
        let deadline = Instant::now() + self.task.settings.shutdown_timeout / 2;
        loop {
            if self.relay_caught_up(&relay)? {
                break;
            }
            if Instant::now() >= deadline {
                let left = self.task.state.store().outbox_backlog::<E::Status>()?.0;
                warn!(
                    partition = self.task.partition,
                    left,
                    "outbox not drained before the deadline; the next owner publishes the rest"
                );
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.relay = Some(relay);
        self.collect_published();
        self.write_out().await?;
        self.stop_relay();
        Ok(())
    }

    /// True when the relay published every outbox row written so far.
    fn relay_caught_up(
        &self,
        relay: &RelayHandle,
    ) -> Result<bool, crate::engine::store::StoreError> {
        let limit = self
            .task
            .state
            .written()
            .map(|c| c.next_offset)
            .unwrap_or(0);
        let through = relay.published.load(Ordering::SeqCst);
        Ok(self
            .task
            .state
            .store()
            .outbox_between::<E::Status>(through, limit, 1)?
            .is_empty())
    }

    /// Write-out delivery over rows a relay left: waits until the relay
    /// published them, so no write-out's newer status change of an order
    /// lands before an older one of the rows.
    async fn wait_for_left_rows(&mut self) -> Result<(), ProcessError> {
        while let Some(relay) = &self.relay {
            if self.relay_caught_up(relay)? {
                info!(
                    partition = self.task.partition,
                    "the outbox rows left by relay delivery are published"
                );
                self.collect_published();
                self.stop_relay();
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Stops the outbox relay without waiting for it (a lost partition, or
    /// once what it had to publish is published).
    pub(super) fn stop_relay(&mut self) {
        // Dropping the handle aborts the relay's task.
        drop(self.relay.take());
    }

    /// The task without its relay (stopped).
    pub(super) fn into_task(mut self) -> PartitionTask<E> {
        self.stop_relay();
        self.task
    }

    /// Writes out the changed orders and the checkpoint: produced to the
    /// changelog first (when on) in the partition's transaction, committed,
    /// then written to the store
    /// in one atomic batch and reported to the flusher (which makes it
    /// durable, then commits).
    pub(super) async fn write_out(&mut self) -> Result<(), ProcessError> {
        if !self.task.state.has_unwritten() {
            return Ok(());
        }
        // A turn from encoding the changes to the store batch: what a
        // write-out holds in memory meanwhile adds up over the partitions
        // writing out at once (`processing.concurrent_write_outs`).
        let member = self.task.member.clone();
        let waited = tokio::time::Instant::now();
        let turn = member.write_turn().await;
        self.task
            .reporting
            .telemetry
            .write_out_wait
            .observe(waited.elapsed().as_secs_f64());
        let started = Instant::now();
        let applied_at = self.task.state.take_applied_times();
        // Encoding and writing every changed order takes tens of
        // milliseconds: it runs on a blocking thread so the async workers
        // keep the other partitions' timers and batches on time. The task
        // owns its state and waits, so nothing else touches it meanwhile.
        let with_changelog = self.mode.writes_changelog();
        let (state, prepared) = self
            .lend_state(move |state| state.prepare_write_out(with_changelog))
            .await?;
        self.task.state = state;
        let Some(mut prepared) = prepared? else {
            return Ok(());
        };
        self.task.drop_republished(&mut prepared.status);
        if !prepared.status.is_empty() {
            // Write-out delivery over rows a relay left: those first.
            self.wait_for_left_rows().await?;
        }
        if self.mode.publishes_status() {
            self.publish_status(&prepared.status).await?;
        }
        let position = self.mode.commit(&self.task, &mut prepared).await?;
        fault::hit(Point::StopAcked);
        let share = self.task.member.cache_share();
        let status_changes = prepared.status.len() as u64;
        let (state, result) = self
            .lend_state(move |state| state.finish_write_out(prepared, position, share))
            .await?;
        self.task.state = state;
        drop(turn);
        let written = result?;
        if status_changes > 0 {
            self.task
                .status
                .outbox
                .get_or_init(Default::default)
                .in_write_outs
                .fetch_add(status_changes, Ordering::Relaxed);
        }
        fault::hit(Point::AfterBatch);
        fault::hit(Point::StopBatched);
        fault::hang(Point::HangBatched).await;
        self.task
            .reporting
            .counters
            .record_write(written.keys, written.bytes);
        self.task
            .reporting
            .telemetry
            .write_out_duration
            .observe(started.elapsed().as_secs_f64());
        let next_offset = written.checkpoint.next_offset;
        self.task.passed_republished(next_offset)?;
        self.task
            .status
            .checkpoint
            .store(next_offset, Ordering::Relaxed);
        debug!(
            partition = self.task.partition,
            orders = written.orders,
            keys = written.keys,
            next_offset,
            "write-out"
        );
        if let Some(relay) = &self.relay {
            let _ = relay.written.send(next_offset);
        }
        self.task
            .member
            .flush_tx
            .send(FlushMsg::Covered {
                partition: self.task.partition,
                next_offset,
                applied_at,
            })
            .await
            .map_err(|_| ProcessError::FlusherGone)
    }

    /// Write-out delivery without a changelog: publishes the write-out's
    /// status changes and waits for the acknowledgements, before the store
    /// is written. (With a changelog they go in the write-out's
    /// transaction.)
    async fn publish_status(
        &mut self,
        records: &[OutboxRecord<E::Status>],
    ) -> Result<(), ProcessError> {
        if records.is_empty() {
            return Ok(());
        }
        let Some(setup) = self.task.outputs.outbox.as_ref() else {
            return Ok(());
        };
        let producer = setup.producer().map_err(|cause| PublishError::Produce {
            topic: setup.topic.clone(),
            partition: self.task.partition,
            cause,
        })?;
        let output = StatusOutput {
            producer: &producer,
            topic: &setup.topic,
            encoder: &setup.encoder,
            source_topic: &self.task.input.topic,
            partition: self.task.partition,
        };
        let floor = match self.status_floor {
            Some(floor) => floor,
            None => {
                let floor = output.published_floor(&self.task.outputs.reader).await?;
                if let Some((epoch, offset)) = floor {
                    debug!(
                        partition = self.task.partition,
                        epoch,
                        offset,
                        "status changes at or below this source offset were published before"
                    );
                }
                floor
            }
        };
        output.publish(records, floor).await?;
        self.status_floor = Some(floor);
        Ok(())
    }

    /// Runs `work` on the partition's state on a blocking thread and hands
    /// the state back with its result.
    async fn lend_state<T: Send + 'static>(
        &mut self,
        work: impl FnOnce(&mut PartitionState<E>) -> T + Send + 'static,
    ) -> Result<(PartitionState<E>, T), ProcessError> {
        let placeholder = self.task.state.empty_like();
        let mut state = std::mem::replace(&mut self.task.state, placeholder);
        tokio::task::spawn_blocking(move || {
            let result = work(&mut state);
            (state, result)
        })
        .await
        .map_err(|join| ProcessError::Partition {
            partition: self.task.partition,
            stage: Stage::WriteOut,
            message: format!("write-out thread failed: {join}"),
        })
    }
}
