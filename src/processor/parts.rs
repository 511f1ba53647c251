//! What the parts of a running processor share, split by concern: the
//! input side ([`Input`]), where write-outs go besides the store
//! ([`Outputs`]), what is reported and how a failure stops the process
//! ([`Reporting`]), and this group member's store, flusher and cache budget
//! ([`Member`]). Each is built once when the processor starts; a partition
//! task's phases reach only the parts they use, and none of them the
//! whole `Config` (the group member's wiring in `processor/run.rs` keeps
//! that: it builds the Kafka clients).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::producer::FutureProducer;
use tokio::sync::{mpsc, Notify, Semaphore, SemaphorePermit};
use tracing::error;

use crate::engine::codec::Decoder;
use crate::engine::entity::Entity;
use crate::engine::store::Store;
use crate::kafka::ReaderSettings;
use crate::observe::errors::{Failure, Stage};
use crate::observe::Telemetry;
use crate::processor::counters::Counters;
use crate::processor::dlq::DeadLetters;
use crate::processor::error::ProcessError;
use crate::processor::flush_msg::FlushMsg;
use crate::processor::outbox::OutboxEncoder;
use crate::processor::transaction::TxnSettings;

/// What deciding a batch needs: where the records come from, how they are
/// decoded, where poison goes and how long the inbox remembers.
pub(crate) struct Input<E: Entity> {
    /// The input topic (the partitions' queues, seeks, committed offsets).
    pub topic: String,
    /// Decodes each record's value (through the schema registry).
    pub decoder: Decoder<E>,
    /// Where records that cannot be decoded or decided go.
    pub dead_letters: DeadLetters,
    /// How long an order's inbox remembers event ids (duplicates).
    pub retention: Duration,
}

/// Where write-outs go besides the store, and what the partition tasks' own
/// Kafka clients (the restore's reader, the transactional producer, the
/// output topic's read-back) are built from.
pub(crate) struct Outputs<E: Entity> {
    /// The changelog topic (written by each partition's transactional
    /// producer); `None` when the changelog is off.
    pub changelog: Option<String>,
    /// `None` when the outbox is off.
    pub outbox: Option<OutboxSetup<E>>,
    /// The reader of a changelog partition (restore) and of an output
    /// partition (what was published before).
    pub reader: ReaderSettings,
    /// Each partition's transactional producer (with a changelog).
    pub txn: TxnSettings,
}

/// What the processor reports, and the slot where the first fatal error
/// waits for [`crate::processor::Processor::run`] to stop on it.
pub(crate) struct Reporting {
    /// Live totals for the progress lines and the run report.
    pub counters: Counters,
    /// Per-partition status and latency histograms (`/metrics`, the status page).
    pub telemetry: Arc<Telemetry>,
    /// The first fatal error, until the processor takes it.
    fatal: Mutex<Option<ProcessError>>,
    /// Wakes the processor when a fatal error is recorded.
    fatal_notify: Notify,
}

impl Reporting {
    pub(crate) fn new(telemetry: Arc<Telemetry>) -> Self {
        Reporting {
            counters: Counters::default(),
            telemetry,
            fatal: Mutex::new(None),
            fatal_notify: Notify::new(),
        }
    }

    /// Records an unrecoverable error; the processor stops without
    /// committing anything not yet durable.
    pub(crate) fn fatal(&self, error: ProcessError) {
        // A refusal at start-up is printed once, on the exit line; a failure
        // while running is logged where it happened, among the other lines.
        if error.stage() != Stage::Start {
            error!(%error, stage = %error.stage(), "fatal error; stopping");
        }
        self.telemetry.errors.count(&error);
        if let Ok(mut slot) = self.fatal.lock() {
            slot.get_or_insert(error);
        }
        self.fatal_notify.notify_one();
    }

    /// Completes once a fatal error was recorded (or at once if one was
    /// recorded before).
    pub(crate) async fn fatal_recorded(&self) {
        self.fatal_notify.notified().await
    }

    /// The first fatal error, taken.
    pub(crate) fn take_fatal(&self) -> Option<ProcessError> {
        self.fatal.lock().ok().and_then(|mut s| s.take())
    }
}

/// What this group member's partitions share: the store, the flusher they
/// report write-outs to, the order cache budget they split, and the turns
/// their write-outs take.
pub(crate) struct Member {
    /// Every partition's tree (a restore flushes it).
    pub store: Store,
    /// To the flusher: write-outs to make durable and commit.
    pub flush_tx: mpsc::Sender<FlushMsg>,
    /// `processing.cache_max_bytes`: the order caches' budget, split among
    /// the partitions with a running task.
    cache_max_bytes: usize,
    /// Partitions with a running task.
    assigned: AtomicUsize,
    /// `processing.concurrent_write_outs` (`None`: no limit): a write-out
    /// holds a turn from encoding its changes to its store batch. Each one
    /// in flight holds its encoded changes, the producer's copies and the
    /// store's garbage (sled frees what a batch replaced only after it), so
    /// partitions writing out at once add up.
    write_turns: Option<Semaphore>,
}

impl Member {
    pub(crate) fn new(
        store: Store,
        flush_tx: mpsc::Sender<FlushMsg>,
        cache_max_bytes: u64,
        write_out_turns: Option<usize>,
        assigned: usize,
    ) -> Self {
        Member {
            store,
            flush_tx,
            cache_max_bytes: usize::try_from(cache_max_bytes).unwrap_or(usize::MAX),
            assigned: AtomicUsize::new(assigned),
            write_turns: write_out_turns.map(|n| Semaphore::new(n.max(1))),
        }
    }

    /// Whether a write-out could take a turn now without waiting.
    pub(crate) fn write_turn_free(&self) -> bool {
        self.write_turns
            .as_ref()
            .is_none_or(|turns| turns.available_permits() > 0)
    }

    /// Waits for a write-out turn; it is given back when the returned
    /// permit is dropped. `None` without a limit (and if the turns were
    /// closed, which nothing does: the write-out then goes ahead).
    pub(crate) async fn write_turn(&self) -> Option<SemaphorePermit<'_>> {
        match &self.write_turns {
            Some(turns) => turns.acquire().await.ok(),
            None => None,
        }
    }

    /// One partition's share of `processing.cache_max_bytes`.
    pub(crate) fn cache_share(&self) -> usize {
        self.cache_max_bytes / self.assigned.load(Ordering::Relaxed).max(1)
    }

    /// `count` more partitions have a running task.
    pub(crate) fn tasks_started(&self, count: usize) {
        self.assigned.fetch_add(count, Ordering::Relaxed);
    }

    /// `count` partitions' tasks were stopped.
    pub(crate) fn tasks_stopped(&self, count: usize) {
        self.assigned.fetch_sub(count, Ordering::Relaxed);
    }
}

/// What each partition's outbox relay is built from.
pub(crate) struct OutboxSetup<E: Entity> {
    pub topic: String,
    pub encoder: Arc<OutboxEncoder<E>>,
    pub producer_config: rdkafka::ClientConfig,
    /// One producer for every partition's relay.
    pub producer: Arc<Mutex<Option<FutureProducer>>>,
    pub(crate) warn_count: u64,
    pub(crate) warn_age: Duration,
}

impl<E: Entity> OutboxSetup<E> {
    /// The shared producer, created (again, after a fatal error) when needed.
    pub(crate) fn producer(&self) -> Result<FutureProducer, rdkafka::error::KafkaError> {
        crate::kafka::shared_producer(&self.producer, &self.producer_config)
    }
}

/// Every part, for the group member's wiring (the supervisor, which hands
/// each partition task its parts, and the poll thread).
pub(crate) struct Parts<E: Entity> {
    pub input: Arc<Input<E>>,
    pub outputs: Arc<Outputs<E>>,
    pub reporting: Arc<Reporting>,
    pub member: Arc<Member>,
}

impl<E: Entity> Clone for Parts<E> {
    fn clone(&self) -> Self {
        Parts {
            input: self.input.clone(),
            outputs: self.outputs.clone(),
            reporting: self.reporting.clone(),
            member: self.member.clone(),
        }
    }
}
