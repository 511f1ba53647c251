//! Test support: a partition task past its restore, in the store-only
//! write-out mode, reading an in-memory [`MemorySource`] and reporting to a
//! flusher channel the test holds: the processing and draining phases run
//! with no broker. (The restore, the changelog and exactly-once
//! transactions, the outbox relay and the flusher's commits need one.)

use std::sync::{Arc, Weak};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use super::mode::WriteOutMode;
use super::processing::{Ended, Processing};
use super::settings::TaskSettings;
use super::source::MemorySource;
use super::strategy::StatusRoute;
use super::task::{Command, PartitionTask};
use crate::config::Config;
use crate::engine::breaker::Breaker;
use crate::engine::codec::Decoder;
use crate::engine::entity::Entity;
use crate::engine::partition_state::PartitionState;
use crate::engine::store::{Checkpoint, PartitionStore, Store};
use crate::observe::{PartitionStatus, Telemetry};
use crate::processor::dlq::DeadLetters;
use crate::processor::error::ProcessError;
use crate::processor::flusher::FlushMsg;
use crate::processor::parts::{Input, Member, Outputs, Reporting};
use crate::processor::transaction::TxnSettings;

/// A running partition task over `source`, and what a test looks at.
pub(crate) struct Harness<E: Entity> {
    /// The task's input side (its dead letters).
    pub input: Arc<Input<E>>,
    /// The task's counters and telemetry.
    pub reporting: Arc<Reporting>,
    pub status: Arc<PartitionStatus>,
    /// The partition's tree, as the task writes it.
    pub store: PartitionStore,
    /// What the task handed to the flusher.
    pub flushes: mpsc::Receiver<FlushMsg>,
    /// What the task shares with the member's other partitions (a test
    /// holds a write-out turn as another partition's write-out would).
    pub member: Arc<Member>,
    commands: mpsc::Sender<Command>,
    join: JoinHandle<Result<(), ProcessError>>,
    _watchdog: Watchdog,
}

/// Aborts the test process when a harness lives longer than
/// [`Watchdog::LIMIT`] of real time. The tests run on tokio's paused clock,
/// which only moves when every task waits: a task that spins would hang the
/// test (and CI) rather than fail it, and no tokio timeout could fire.
struct Watchdog(Arc<std::sync::atomic::AtomicBool>);

impl Watchdog {
    const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

    fn arm(what: String) -> Self {
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let seen = done.clone();
        std::thread::spawn(move || {
            let started = std::time::Instant::now();
            while started.elapsed() < Self::LIMIT {
                if seen.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            eprintln!(
                "{what}: still running after {:?} of real time (a task that spins \
                 under the paused clock?): aborting",
                Self::LIMIT
            );
            std::process::abort();
        });
        Watchdog(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl<E: Entity> Harness<E> {
    /// Starts partition `partition`'s task on `source` (processing, then
    /// draining on a drain), from the checkpoint its tree holds.
    pub(crate) fn start(
        decoder: Decoder<E>,
        store: Store,
        config: Config,
        partition: i32,
        source: Arc<MemorySource>,
    ) -> Self {
        let topic = config.kafka.input_topic.clone();
        let (flush_tx, flushes) = mpsc::channel(1024);
        let input = Arc::new(Input {
            dead_letters: DeadLetters::in_memory(config.kafka.dlq_topic.clone(), topic.clone()),
            topic: topic.clone(),
            decoder,
            retention: config.inbox_retention(),
        });
        let outputs = Arc::new(Outputs {
            changelog: None,
            outbox: None,
            reader: crate::kafka::ReaderSettings::of(&config),
            txn: TxnSettings::of(&config),
        });
        let reporting = Arc::new(Reporting::new(Arc::new(Telemetry::default())));
        let member = Arc::new(Member::new(
            store.clone(),
            flush_tx,
            config.processing.cache_max_bytes,
            config.processing.write_out_turns(),
            1,
        ));
        let tree = store.partition(&topic, partition).unwrap();
        let checkpoint = tree.checkpoint().unwrap();
        let status = Arc::new(PartitionStatus::new(partition, checkpoint.as_ref()));
        let (commands, rx) = mpsc::channel(1);
        let settings = TaskSettings::of(&config);
        let task = PartitionTask {
            input: input.clone(),
            outputs,
            reporting: reporting.clone(),
            member: member.clone(),
            partition,
            state: PartitionState::new(tree.clone(), checkpoint),
            rx,
            status: status.clone(),
            consumer: Weak::new(),
            assigned_at: checkpoint.map(|c| c.next_offset),
            settings: settings.clone(),
            breaker: Breaker::new(settings.breaker),
            first_offset: None,
            rewind: None,
            fences: Vec::new(),
            republished_below: None,
            pending_seek: None,
        };
        // No broker: the store-only mode, whatever the configuration's
        // strategy.
        let mode = WriteOutMode::StoreOnly {
            publish_status: settings.strategy.status() == StatusRoute::WithWriteOut,
        };
        let join = tokio::spawn(async move {
            match Processing::enter(task, mode).await?.run(&*source).await? {
                Ended::Drain { draining, fetched } => draining.run(&*source, fetched).await,
                Ended::Stopped(stopped) => stopped.run().await,
                Ended::Lost | Ended::Fenced { .. } => Ok(()),
            }
        });
        Harness {
            input,
            reporting,
            status,
            store: tree,
            flushes,
            member,
            commands,
            join,
            _watchdog: Watchdog::arm(format!("partition {partition}'s task harness")),
        }
    }

    /// Revokes the partition: the task finishes what its source holds,
    /// writes it out and answers with the written checkpoint; then how the
    /// task ended.
    pub(crate) async fn drain(&mut self) -> (Option<Checkpoint>, Result<(), ProcessError>) {
        let (reply, answer) = oneshot::channel();
        let _ = self
            .commands
            .send(Command::Drain { reply, lost: false })
            .await;
        let checkpoint = answer.await.ok().flatten();
        let ended = match (&mut self.join).await {
            Ok(ended) => ended,
            Err(panicked) => std::panic::resume_unwind(panicked.into_panic()),
        };
        (checkpoint, ended)
    }

    /// Every message the task handed to the flusher so far.
    pub(crate) fn flushed(&mut self) -> Vec<FlushMsg> {
        let mut all = Vec::new();
        while let Ok(message) = self.flushes.try_recv() {
            all.push(message);
        }
        all
    }
}
