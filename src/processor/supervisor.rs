//! The partition supervisor: owns every assigned partition's task and its
//! lifecycle (restoring -> processing -> draining).
//!
//! The rebalance callback (on the poll thread) only does local work: on
//! assignment it reads each partition's stored checkpoint (its start offset,
//! set in the list before it is assigned), splits the partition's queue off
//! the consumer and spawns its task; the task restores from the changelog
//! when needed and then processes, off the poll thread. On revoke each task
//! finishes the records already in its queue, writes them out (changelog
//! acknowledged first), the flusher flushes and commits, and only then is
//! the partition given up; every wait has the configured deadline.

use crate::engine::entity::Entity;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use futures::FutureExt;
use rdkafka::consumer::BaseConsumer;
use rdkafka::{Offset, TopicPartitionList};
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio::task::JoinHandle;
use tracing::{error, info, info_span, warn, Instrument};

use super::context::{OrderlyContext, Rebalance};
use super::flusher::FlushMsg;
use super::partition::settings::TaskSettings;
use super::partition::{Command, PartitionInput, PartitionTask};
use super::parts::Parts;
use super::transaction::TxnError;
use crate::engine::partition_state::PartitionState;
use crate::engine::store::{Checkpoint, PartitionStore};
use crate::observe::errors::Stage;
use crate::observe::PartitionStatus;
use crate::processor::error::ProcessError;

struct PartitionHandle {
    tx: mpsc::Sender<Command>,
    join: JoinHandle<()>,
}

/// Owns the partition tasks: starts them on assignment, drains them on
/// revoke and shutdown, and stops the process when one fails or panics.
pub(crate) struct PartitionSupervisor<E: Entity> {
    /// What it hands each partition task (and reports and fails to).
    parts: Parts<E>,
    /// What the tasks read from the configuration, taken once at start.
    settings: TaskSettings,
    /// The consumer group, named in each partition task's span.
    group_id: String,
    runtime: Handle,
    tasks: Mutex<HashMap<i32, PartitionHandle>>,
    /// Set once the consumer exists (it is created with this router inside
    /// its context); weak, so the router does not keep the consumer alive.
    consumer: OnceLock<Weak<BaseConsumer<OrderlyContext>>>,
    /// The standby keeper's partitions, when standbys are on: a partition
    /// is taken from it before its task starts, and given back on release.
    standbys: OnceLock<Arc<super::standby::Standbys>>,
}

impl<E: Entity> PartitionSupervisor<E> {
    pub(crate) fn new(
        parts: Parts<E>,
        settings: TaskSettings,
        group_id: String,
        runtime: Handle,
    ) -> Self {
        PartitionSupervisor {
            parts,
            settings,
            group_id,
            runtime,
            tasks: Mutex::new(HashMap::new()),
            consumer: OnceLock::new(),
            standbys: OnceLock::new(),
        }
    }

    fn tasks(&self) -> std::sync::MutexGuard<'_, HashMap<i32, PartitionHandle>> {
        // Only the poll thread touches the map; a poisoned lock means it
        // panicked earlier, and the map itself is still consistent.
        self.tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn runtime(&self) -> &Handle {
        &self.runtime
    }

    /// Standbys are on: partitions are taken from the keeper on assignment.
    pub(crate) fn attach_standbys(&self, standbys: Arc<super::standby::Standbys>) {
        let _ = self.standbys.set(standbys);
    }

    /// Lets the supervisor split partition queues off `consumer` on assignment.
    pub(crate) fn attach(&self, consumer: &Arc<BaseConsumer<OrderlyContext>>) {
        let _ = self.consumer.set(Arc::downgrade(consumer));
    }

    /// Opens each partition's store, sets its start offset from the stored
    /// checkpoint, splits its queue off the consumer's main queue (before
    /// the partition is assigned, so no record reaches the main queue) and
    /// spawns its task.
    fn assign(&self, tpl: &mut TopicPartitionList) {
        let Some(consumer) = self.attached_consumer(tpl) else {
            return;
        };
        self.parts
            .reporting
            .telemetry
            .joined
            .store(true, Ordering::Relaxed);
        let mut assigned = Vec::new();
        for elem in tpl.elements() {
            assigned.push((elem.topic().to_string(), elem.partition()));
        }
        for (topic, partition) in assigned {
            self.start_partition(tpl, &consumer, &topic, partition);
        }
    }

    /// The consumer an assignment is for: a fatal error before it was
    /// attached, `None` too while it closes.
    fn attached_consumer(
        &self,
        tpl: &TopicPartitionList,
    ) -> Option<Arc<BaseConsumer<OrderlyContext>>> {
        let Some(weak) = self.consumer.get() else {
            self.parts.reporting.fatal(ProcessError::Process {
                stage: Stage::Assign,
                message: "assignment before the consumer was attached".into(),
            });
            return None;
        };
        let Some(consumer) = weak.upgrade() else {
            // The consumer is closing (shutdown): an assignment that arrives
            // now (a rebalance still in flight) is not processed here; the
            // group gives it to another member once this one has left.
            info!(
                partitions = tpl.count(),
                "assignment while closing the consumer; not starting its partitions"
            );
            return None;
        };
        Some(consumer)
    }

    /// One assigned partition: its old task drained (assigned again without
    /// a revoke), its store opened at the checkpoint, its queue split off
    /// and its task spawned. A failure is fatal, and the partition is not
    /// started.
    fn start_partition(
        &self,
        tpl: &mut TopicPartitionList,
        consumer: &Arc<BaseConsumer<OrderlyContext>>,
        topic: &str,
        partition: i32,
    ) {
        let Parts {
            input,
            outputs,
            reporting,
            member,
        } = &self.parts;
        let settings = &self.settings;
        if self.tasks().contains_key(&partition) {
            // Assigned again without a revoke in between (the assignment
            // was lost): stop the old task first so one task at a time
            // writes the partition's tree.
            warn!(
                partition,
                "partition assigned while its task still runs; draining the old task"
            );
            self.drain(Some(&[partition]), true);
        }
        // A standby round on the partition stops before its checkpoint
        // is read; none starts again while this member owns it.
        if let Some(standbys) = self.standbys.get() {
            standbys.take_over(partition);
        }
        let Some((store, checkpoint)) = self.open_at_checkpoint(tpl, topic, partition) else {
            return;
        };
        let Some(mut queue) = consumer.split_partition_queue(topic, partition) else {
            reporting.fatal(ProcessError::Partition {
                partition,
                stage: Stage::Assign,
                message: "cannot split its queue".into(),
            });
            return;
        };
        let ready = Arc::new(Notify::new());
        let signal = ready.clone();
        queue.set_nonempty_callback(move || signal.notify_one());
        info!(partition, checkpoint = ?checkpoint.map(|c| c.next_offset), "partition assigned");
        let (tx, rx) = mpsc::channel(1);
        let state = PartitionState::starting_over(store, checkpoint);
        let status = Arc::new(PartitionStatus::new(partition, checkpoint.as_ref()));
        reporting.telemetry.insert(status.clone());
        let task = PartitionTask {
            input: input.clone(),
            outputs: outputs.clone(),
            reporting: reporting.clone(),
            member: member.clone(),
            partition,
            state,
            rx,
            status,
            consumer: Arc::downgrade(consumer),
            assigned_at: checkpoint.map(|c| c.next_offset),
            settings: settings.clone(),
            breaker: crate::engine::breaker::Breaker::new(settings.breaker),
            first_offset: None,
            rewind: None,
            fences: Vec::new(),
            republished_below: None,
            pending_seek: None,
        };
        let input = PartitionInput::new(queue, ready, Arc::downgrade(consumer), topic, partition);
        let join = self.spawn_task(task, input, topic, partition);
        self.tasks().insert(partition, PartitionHandle { tx, join });
        member.tasks_started(1);
    }

    /// The partition's store and stored checkpoint, its start offset set in
    /// the list from the checkpoint; `None` (after a fatal error) when the
    /// store cannot be read.
    fn open_at_checkpoint(
        &self,
        tpl: &mut TopicPartitionList,
        topic: &str,
        partition: i32,
    ) -> Option<(PartitionStore, Option<Checkpoint>)> {
        let reporting = &self.parts.reporting;
        let store = match self.parts.member.store.partition(topic, partition) {
            Ok(store) => store,
            Err(e) => {
                reporting.fatal(ProcessError::from(e).in_partition(partition));
                return None;
            }
        };
        let checkpoint = match store.checkpoint() {
            Ok(cp) => cp,
            Err(e) => {
                reporting.fatal(ProcessError::from(e).in_partition(partition));
                return None;
            }
        };
        if let Some(cp) = checkpoint {
            if let Err(e) =
                tpl.set_partition_offset(topic, partition, Offset::Offset(cp.next_offset))
            {
                reporting.fatal(ProcessError::Partition {
                    partition,
                    stage: Stage::Assign,
                    message: format!("cannot seek: {e}"),
                });
            }
        }
        Some((store, checkpoint))
    }

    /// Spawns a partition's task in its span.
    fn spawn_task(
        &self,
        task: PartitionTask<E>,
        input: PartitionInput,
        topic: &str,
        partition: i32,
    ) -> JoinHandle<()> {
        let span = info_span!("partition", topic = %topic, partition, group = %self.group_id);
        let fatal = self.parts.reporting.clone();
        // Supervised: an error or a panic in the task stops the process
        // (non-zero exit, naming the partition). Nothing it had not
        // written out is committed: offsets reach the flusher only after
        // their write-out.
        self.runtime.spawn(
            async move {
                match AssertUnwindSafe(task.run(input)).catch_unwind().await {
                    Ok(Ok(())) => {}
                    Ok(Err(ProcessError::Txn(fenced @ (TxnError::Fenced { .. } | TxnError::Stalled { .. })))) => {
                        // Fenced while draining: the partition is being
                        // released anyway. (A fence while processing or
                        // restoring is handled by the task itself.)
                        // Nothing this task had not committed reached
                        // the broker; the process carries on.
                        warn!(error = %fenced, "partition fenced; its uncommitted work is dropped and the group reassigns it");
                        fatal.telemetry.remove(partition);
                    }
                    Ok(Err(e)) => {
                        error!(error = %e, "partition task failed");
                        fatal.fatal(e.in_partition(partition));
                    }
                    Err(panic) => {
                        let what = panic_message(panic.as_ref());
                        error!(panic = %what, "partition task panicked");
                        fatal.fatal(ProcessError::Partition { partition, stage: Stage::Task, message: format!("task panicked: {what}") });
                    }
                }
            }
            .instrument(span),
        )
    }

    /// Finishes, flushes and commits the given partitions (or all), then
    /// stops their tasks. Uncommitted when the assignment was lost.
    pub(crate) fn drain(&self, partitions: Option<&[i32]>, lost: bool) {
        let handles: Vec<(i32, PartitionHandle)> = {
            let mut tasks = self.tasks();
            let chosen: Vec<i32> = match partitions {
                Some(list) => list
                    .iter()
                    .copied()
                    .filter(|p| tasks.contains_key(p))
                    .collect(),
                None => tasks.keys().copied().collect(),
            };
            chosen
                .into_iter()
                .filter_map(|p| tasks.remove(&p).map(|h| (p, h)))
                .collect()
        };
        if handles.is_empty() {
            return;
        }
        self.parts.member.tasks_stopped(handles.len());
        let deadline = Instant::now() + self.settings.shutdown_timeout;
        let release: Vec<i32> = handles.iter().map(|(p, _)| *p).collect();
        let runtime = self.runtime.clone();
        let finished = runtime.block_on(async {
            let mut replies = Vec::new();
            for (partition, handle) in &handles {
                let (reply, rx) = oneshot::channel();
                let remaining = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(remaining, handle.tx.send(Command::Drain { reply, lost })).await {
                    Ok(Ok(())) => replies.push((*partition, rx)),
                    _ => warn!(partition, "could not ask partition task to drain"),
                }
            }
            let mut all = replies.len() == handles.len();
            for (partition, rx) in replies {
                let remaining = deadline.saturating_duration_since(Instant::now());
                match tokio::time::timeout(remaining, rx).await {
                    Ok(Ok(checkpoint)) => info!(partition, next_offset = ?checkpoint.map(|c| c.next_offset), "partition drained"),
                    _ => {
                        warn!(partition, "partition task did not drain before the deadline");
                        all = false;
                    }
                }
            }
            all
        });
        // Tasks that drained have returned; one that missed the deadline is
        // stopped here, at an await point between atomic batches, so its store
        // is consistent at its last checkpoint. Waiting for each to end also
        // releases its partition queue (which holds the consumer).
        runtime.block_on(async {
            for (partition, handle) in handles {
                self.parts.reporting.telemetry.remove(partition);
                handle.join.abort();
                if handle.join.await.is_err() {
                    warn!(partition, "partition task was stopped at the deadline");
                }
            }
        });
        // Their tasks have ended: the partitions may be kept as standbys.
        if let Some(standbys) = self.standbys.get() {
            standbys.give_up(&release);
        }
        let (reply, rx) = std::sync::mpsc::sync_channel(1);
        let barrier = FlushMsg::Barrier {
            release: release.clone(),
            lost,
            reply,
        };
        if self.parts.member.flush_tx.blocking_send(barrier).is_err() {
            warn!("flusher is gone; revoked partitions are not committed");
            return;
        }
        match rx.recv_timeout(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100)),
        ) {
            Ok(()) => {
                info!(partitions = ?release, finished, lost, "partitions released after flush and commit")
            }
            Err(_) => {
                warn!(partitions = ?release, "flush and commit did not finish before the deadline")
            }
        }
    }
}

impl<E: Entity> Rebalance for PartitionSupervisor<E> {
    fn on_assign(&self, tpl: &mut TopicPartitionList) {
        self.assign(tpl);
    }

    fn on_revoke(&self, partitions: &[i32], lost: bool) {
        self.drain(Some(partitions), lost);
    }

    fn fatal(&self, error: ProcessError) {
        self.parts.reporting.fatal(error);
    }
}

/// The text of a panic payload.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "non-text panic payload".into()
    }
}
