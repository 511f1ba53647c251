//! The processor: a consumer-group member driven from a dedicated poll
//! thread, one ordered task per assigned partition, and a flusher that makes
//! many partitions' batches durable with one sync before committing offsets.
//!
//! ```text
//! poll thread (BaseConsumer::poll: rebalance callbacks, errors)
//! partition queue (split off the consumer per assigned partition)
//!   -> partition task (batch, decode, dead-letter, decide, one atomic
//!      sled batch)
//!   -> flusher (one flush for many batches, then one offset commit)
//! ```

pub(crate) mod changelog;
pub(crate) mod outbox;

mod context;
pub(crate) mod dlq;
mod fence;
mod flush_msg;
pub(crate) mod flusher;
mod owners;
mod partition;
mod parts;
mod standby;
mod supervisor;
mod transaction;

/// A partition task without a broker, for the tests that need an entity
/// (`src/processor/partition/tests.rs`).
#[cfg(test)]
pub(crate) use partition::{source::MemorySource, testing::Harness};

use crate::engine::entity::Entity;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::FutureProducer;
use tokio::sync::mpsc;
use tracing::{info, warn};

pub(crate) use crate::kafka::{consumer_config, producer_config};
pub(crate) use crate::observe::Phase;
pub(crate) use dlq::DeadLetters;

use crate::config::Config;
use crate::engine::codec::Decoder;
use crate::engine::outcomes::{AtomicOutcomes, Outcomes};
use crate::engine::store::{Binding, Store, StoreError};
use crate::kafka::retry::Backoff;
use crate::observe::cadence::{Cadence, Due, QUIET_EVERY};
use crate::observe::errors::{Failure, Kind, Stage};
use crate::observe::kafka_link as link;
use crate::observe::Telemetry;
use crate::registry::Registry;
use context::OrderlyContext;
use flusher::{FlushMsg, Flusher};
use partition::settings::TaskSettings;
use parts::{Input, Member, Outputs, Parts, Reporting};
use supervisor::PartitionSupervisor;

/// What stops the processor (or, for [`ProcessError::DeadLetterBreaker`]
/// and a fenced [`ProcessError::Txn`], one partition). Each says where it
/// happened ([`Failure::stage`]); `orderly_errors_total` counts them.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("store flush failed: {0}")]
    Flush(StoreError),
    #[error(transparent)]
    DeadLetter(#[from] dlq::DeadLetterError),
    #[error("the flusher stopped (a store flush failed)")]
    FlusherGone,
    #[error("kafka client setup failed: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    #[error(transparent)]
    Changelog(#[from] crate::processor::changelog::ChangelogError),
    #[error(transparent)]
    Txn(#[from] transaction::TxnError),
    #[error(transparent)]
    Status(#[from] crate::processor::outbox::direct::PublishError),
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error("partition {partition} stopped at offset {offset} by the dead-letter breaker: {trip}; {cause}")]
    DeadLetterBreaker {
        partition: i32,
        offset: i64,
        trip: crate::engine::breaker::Trip,
        /// What the dead letters of the batch that tripped it had in common:
        /// the most frequent error kind, with an example.
        cause: String,
    },
    /// One partition's work failed, with the error that made it fail.
    #[error("partition {partition}: {source}")]
    InPartition {
        partition: i32,
        source: Box<ProcessError>,
    },
    /// One partition's work failed at `stage`, for a reason no typed error
    /// carries (a task that panicked, a thread that failed, a refusal).
    #[error("partition {partition}: {message}")]
    Partition {
        partition: i32,
        stage: Stage,
        message: String,
    },
    /// The process failed at `stage` (start-up, the poll thread, ...).
    #[error("{message}")]
    Process { stage: Stage, message: String },
}

impl ProcessError {
    /// `self`, naming `partition` unless it does already.
    pub(crate) fn in_partition(self, partition: i32) -> ProcessError {
        match self {
            named @ (ProcessError::InPartition { .. }
            | ProcessError::Partition { .. }
            | ProcessError::Txn(_)
            | ProcessError::DeadLetterBreaker { .. }) => named,
            other => ProcessError::InPartition {
                partition,
                source: Box::new(other),
            },
        }
    }
}

impl Failure for ProcessError {
    fn stage(&self) -> Stage {
        match self {
            ProcessError::Store(_) => Stage::WriteOut,
            ProcessError::Flush(_) | ProcessError::FlusherGone => Stage::Flush,
            ProcessError::DeadLetter(_) | ProcessError::DeadLetterBreaker { .. } => {
                Stage::DeadLetter
            }
            ProcessError::Kafka(_) | ProcessError::Config(_) => Stage::Start,
            ProcessError::Changelog(e) => e.stage(),
            ProcessError::Txn(_) => Stage::Transaction,
            ProcessError::Status(_) => Stage::WriteOut,
            ProcessError::InPartition { source, .. } => source.stage(),
            ProcessError::Partition { stage, .. } | ProcessError::Process { stage, .. } => *stage,
        }
    }

    fn kind(&self) -> Kind {
        match self {
            ProcessError::InPartition { source, .. } => source.kind(),
            ProcessError::Txn(e) => e.kind(),
            _ => Kind::Permanent,
        }
    }
}

/// Live totals for progress logs and the run report. The durable, exact
/// counters are in each partition's checkpoint; latencies are histograms in
/// [`Telemetry`].
#[derive(Default)]
pub(crate) struct Counters {
    pub outcomes: AtomicOutcomes,
    pub batches: AtomicU64,
    /// Applied events that skipped versions.
    pub(crate) version_gaps: AtomicU64,
    /// Write-outs (one atomic sled batch each) and what they wrote.
    pub write_outs: AtomicU64,
    pub keys_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub flushes: AtomicU64,
    /// Partitions restored from the changelog, and the time restores took
    /// (microseconds, summed over partitions).
    pub(crate) restore_micros: AtomicU64,
    pub restores: AtomicU64,
    /// When the first batch started being decided, and the last one ended.
    first_batch_at: OnceLock<Instant>,
    last_batch_at: Mutex<Option<Instant>>,
}

impl Counters {
    fn record_batch(&self, outcomes: &Outcomes, version_gaps: u64, elapsed: Duration) {
        self.outcomes.add(outcomes);
        self.version_gaps.fetch_add(version_gaps, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let _ = self
            .first_batch_at
            .set(now.checked_sub(elapsed).unwrap_or(now));
        if let Ok(mut last) = self.last_batch_at.lock() {
            *last = Some(now);
        }
    }

    /// From the start of the first batch to the end of the last one: the
    /// time spent deciding, without waiting for write-outs.
    pub(crate) fn decide_span(&self) -> Duration {
        let last = self.last_batch_at.lock().ok().and_then(|l| *l);
        match (self.first_batch_at.get(), last) {
            (Some(first), Some(last)) => last.saturating_duration_since(*first),
            _ => Duration::ZERO,
        }
    }

    fn record_write(&self, keys: usize, bytes: usize) {
        self.write_outs.fetch_add(1, Ordering::Relaxed);
        self.keys_written.fetch_add(keys as u64, Ordering::Relaxed);
        self.bytes_written
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    fn record_restore(&self, elapsed: Duration) {
        self.restores.fetch_add(1, Ordering::Relaxed);
        self.restore_micros.fetch_add(
            elapsed.as_micros().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    pub(crate) fn total(&self) -> u64 {
        self.outcomes.load().total()
    }
}

/// (p50, p99) of a histogram, in milliseconds (0 without observations).
fn percentiles_ms(histogram: &crate::observe::histogram::Histogram) -> (f64, f64) {
    let snapshot = histogram.snapshot();
    let at = |q| snapshot.quantile(q).unwrap_or(0.0) * 1000.0;
    (at(0.5), at(0.99))
}

/// What each partition's outbox relay is built from.
pub(crate) struct OutboxSetup<E: Entity> {
    pub topic: String,
    pub encoder: Arc<crate::processor::outbox::OutboxEncoder<E>>,
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

/// How a run ended (all zero: stopped before it joined the group).
#[derive(Debug, Clone, Copy, Default)]
pub struct RunReport {
    /// What this run decided.
    pub outcomes: Outcomes,
    /// Applied events that skipped versions.
    pub version_gaps: u64,
    /// Batches decided.
    pub batches: u64,
    /// Write-outs (one atomic sled batch each), and the keys and bytes they
    /// wrote.
    pub write_outs: u64,
    /// Group flushes (each makes the write-outs before it durable, then
    /// commits).
    pub flushes: u64,
    /// Keys written by the write-outs.
    pub keys_written: u64,
    /// Bytes written by the write-outs.
    pub bytes_written: u64,
    /// Time to process a batch, median, in milliseconds.
    pub batch_p50_ms: f64,
    /// Time to process a batch, p99, in milliseconds.
    pub batch_p99_ms: f64,
    /// Time of a write-out, median, in milliseconds.
    pub write_p50_ms: f64,
    /// Time of a write-out, p99, in milliseconds.
    pub write_p99_ms: f64,
    /// Time of a group flush, median, in milliseconds.
    pub flush_p50_ms: f64,
    /// How late partition task timers fired (p99), in milliseconds.
    pub timer_late_p99_ms: f64,
    /// From the start of the first batch to the end of the last one.
    pub decide_seconds: f64,
    /// Partitions restored from the changelog, the records they applied and
    /// the time they took (summed).
    pub restores: u64,
    pub(crate) restored_records: u64,
    /// The time restores took, summed over partitions.
    pub restore_seconds: f64,
}

/// A consumer-group member processing `E`'s events (orders by default).
pub struct Processor<E: Entity> {
    entity: E,
    config: Config,
    store: Store,
    registry: Registry,
    telemetry: Arc<Telemetry>,
    /// Who owns each partition, once the consumer exists (for `/state`).
    owners: Arc<owners::OwnersSlot>,
}

impl<E: Entity> Processor<E> {
    /// A processor of `entity`'s events.
    pub fn for_entity(entity: E, config: Config, store: Store, registry: Registry) -> Self {
        Processor {
            entity,
            config,
            store,
            registry,
            telemetry: Arc::new(Telemetry::default()),
            owners: Arc::default(),
        }
    }

    /// Who in the group owns a partition: answers once [`Processor::run`]
    /// has created its consumer (before that, an error saying so).
    pub fn owners(&self) -> Arc<dyn crate::observe::GroupOwners> {
        self.owners.clone()
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The entity it processes.
    pub fn entity(&self) -> &E {
        &self.entity
    }

    /// Its store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// What the processor reports (shared with the HTTP endpoint).
    pub fn telemetry(&self) -> Arc<Telemetry> {
        self.telemetry.clone()
    }

    /// Joins the group and processes until `shutdown` completes (or a fatal
    /// error), then finishes in-flight batches, flushes, commits and leaves
    /// the group.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()>,
    ) -> Result<RunReport, ProcessError> {
        tokio::pin!(shutdown);
        let retention = self.config.inbox_retention();
        let producer: FutureProducer = producer_config(&self.config).create()?;
        let topic = self.config.kafka.input_topic.clone();
        let changelog_topic = self.config.changelog_topic();
        self.store.bind(&Binding {
            group: self.config.kafka.group_id.clone(),
            input_topic: topic.clone(),
            changelog_topic: changelog_topic.clone().unwrap_or_default(),
        })?;
        let outbox = match self.config.output_topic() {
            Some(topic) => {
                let registering = register_outbox_schema(
                    &self.entity,
                    &self.registry,
                    &topic,
                    &self.config.kafka.input_topic,
                );
                let encoder = tokio::select! {
                    registered = registering => registered?,
                    _ = &mut shutdown => {
                        info!("shutdown requested while waiting for the schema registry; nothing was consumed");
                        return Ok(RunReport::default());
                    }
                };
                info!(topic = %topic, "outbox on: status changes are published to the output topic");
                Some(OutboxSetup {
                    topic,
                    encoder: Arc::new(encoder),
                    producer_config: crate::kafka::outbox_producer_config(&self.config),
                    producer: Arc::new(Mutex::new(None)),
                    warn_count: self.config.outbox.backlog_warn,
                    warn_age: self.config.outbox_warn_age(),
                })
            }
            None => None,
        };
        let (flush_tx, flush_rx) = mpsc::channel(1024);
        let config = self.config;
        let parts = Parts {
            input: Arc::new(Input {
                dead_letters: DeadLetters::new(
                    producer,
                    config.kafka.dlq_topic.clone(),
                    topic.clone(),
                )
                .counting_into(self.telemetry.clone()),
                topic: topic.clone(),
                decoder: Decoder::with_counts(
                    self.entity,
                    self.registry,
                    self.telemetry.schema_records.clone(),
                ),
                retention,
            }),
            outputs: Arc::new(Outputs {
                changelog: changelog_topic,
                outbox,
                reader: crate::kafka::ReaderSettings::of(&config),
                txn: transaction::TxnSettings::of(&config),
            }),
            reporting: Arc::new(Reporting::new(self.telemetry.clone())),
            member: Arc::new(Member::new(
                self.store,
                flush_tx,
                config.processing.cache_max_bytes,
                config.processing.write_out_turns(),
                0,
            )),
        };
        let supervisor = Arc::new(PartitionSupervisor::new(
            parts.clone(),
            TaskSettings::of(&config),
            config.kafka.group_id.clone(),
            tokio::runtime::Handle::current(),
        ));
        let consumer: BaseConsumer<OrderlyContext> =
            consumer_config(&config).create_with_context(OrderlyContext {
                owner: supervisor.clone(),
            })?;
        let consumer = Arc::new(consumer);
        supervisor.attach(&consumer);
        self.owners.attach(&config, &consumer);
        let standbys = match (&parts.outputs.changelog, config.processing.standby_replicas) {
            (Some(changelog), replicas) if replicas > 0 => {
                let standbys = Arc::new(standby::Standbys::new(replicas as usize));
                supervisor.attach_standbys(standbys.clone());
                let keeper = standby::Keeper {
                    reader: parts.outputs.reader.clone(),
                    store: parts.member.store.clone(),
                    input_topic: topic.clone(),
                    changelog_topic: changelog.clone(),
                    owners: self.owners.clone(),
                    telemetry: parts.reporting.telemetry.clone(),
                };
                let running = standbys.clone();
                let thread = std::thread::Builder::new()
                    .name("orderly-standby".into())
                    .spawn(move || running.run(keeper))
                    .map_err(|e| ProcessError::Process {
                        stage: Stage::Start,
                        message: format!("cannot start the standby thread: {e}"),
                    })?;
                Some((standbys, thread))
            }
            _ => None,
        };
        let flusher = tokio::spawn(
            Flusher::new(
                parts.reporting.clone(),
                parts.member.store.clone(),
                topic.clone(),
                consumer.clone(),
                flush_rx,
            )
            .run(),
        );

        let stop = Arc::new(AtomicBool::new(false));
        let poll = {
            let (parts, supervisor, stop) = (parts.clone(), supervisor.clone(), stop.clone());
            std::thread::Builder::new()
                .name("orderly-poll".into())
                .spawn(move || poll_loop(consumer, supervisor, parts, config, stop, flusher))
                .map_err(|e| ProcessError::Process {
                    stage: Stage::Start,
                    message: format!("cannot start the poll thread: {e}"),
                })?
        };

        let reporting = parts.reporting;
        tokio::select! {
            _ = &mut shutdown => info!("shutdown requested: finishing in-flight batches"),
            _ = reporting.fatal_recorded() => {}
        }
        let _ = reporting.telemetry.stopping.set("stopping".into());
        // Standbys first: the drain below gives partitions up, and no round
        // may start on them meanwhile.
        let standby_thread = standbys.map(|(standbys, thread)| {
            standbys.stop();
            thread
        });
        stop.store(true, Ordering::SeqCst);
        if let Some(thread) = standby_thread {
            if tokio::task::spawn_blocking(move || thread.join())
                .await
                .map_or(true, |joined| joined.is_err())
            {
                warn!("the standby thread panicked");
            }
        }
        let joined = tokio::task::spawn_blocking(move || poll.join()).await;
        if !matches!(joined, Ok(Ok(()))) {
            return Err(ProcessError::Process {
                stage: Stage::Poll,
                message: "the poll thread panicked".into(),
            });
        }
        if let Some(error) = reporting.take_fatal() {
            return Err(error);
        }
        let c = &reporting.counters;
        let t = &reporting.telemetry;
        let (batch_p50_ms, batch_p99_ms) = percentiles_ms(&t.batch_duration);
        let (write_p50_ms, write_p99_ms) = percentiles_ms(&t.write_out_duration);
        let report = RunReport {
            outcomes: c.outcomes.load(),
            version_gaps: c.version_gaps.load(Ordering::Relaxed),
            batches: c.batches.load(Ordering::Relaxed),
            write_outs: c.write_outs.load(Ordering::Relaxed),
            flushes: c.flushes.load(Ordering::Relaxed),
            keys_written: c.keys_written.load(Ordering::Relaxed),
            bytes_written: c.bytes_written.load(Ordering::Relaxed),
            batch_p50_ms,
            batch_p99_ms,
            write_p50_ms,
            write_p99_ms,
            flush_p50_ms: percentiles_ms(&t.flush_duration).0,
            timer_late_p99_ms: percentiles_ms(&t.timer_lateness).1,
            decide_seconds: c.decide_span().as_secs_f64(),
            restores: c.restores.load(Ordering::Relaxed),
            restored_records: t.restored_records.load(Ordering::Relaxed),
            restore_seconds: c.restore_micros.load(Ordering::Relaxed) as f64 / 1e6,
        };
        info!(
            decided = report.outcomes.total(),
            applied = report.outcomes.applied,
            duplicates = report.outcomes.duplicates,
            stale = report.outcomes.stale,
            dead_lettered = report.outcomes.dead_lettered,
            batches = report.batches,
            write_outs = report.write_outs,
            flushes = report.flushes,
            first_to_last_batch_s = format!("{:.1}", report.decide_seconds),
            restored_records = report.restored_records,
            "stopped cleanly; these figures are this run's (the store's durable totals follow on the exit line)"
        );
        Ok(report)
    }
}

/// The poll thread: waits for the broker, subscribes, routes records until
/// stopped, then drains every partition, stops the flusher and closes the
/// consumer (leaving the group).
fn poll_loop<E: Entity>(
    consumer: Arc<BaseConsumer<OrderlyContext>>,
    supervisor: Arc<PartitionSupervisor<E>>,
    parts: Parts<E>,
    config: Config,
    stop: Arc<AtomicBool>,
    flusher: tokio::task::JoinHandle<()>,
) {
    let Parts {
        input,
        outputs,
        reporting,
        member,
    } = parts;
    let topic = input.topic.clone();
    let bootstrap = config.kafka.bootstrap_servers.clone();
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(10));
    let mut input_partitions = 0;
    let (mut missing_input, mut first_missing) = (Instant::now(), true);
    // A broker that is down at start-up is waited for, with a clear message.
    while !stop.load(Ordering::SeqCst) {
        match consumer.fetch_metadata(Some(&topic), Duration::from_secs(5)) {
            Ok(metadata) => {
                let partitions = metadata
                    .topics()
                    .first()
                    .map(|t| (t.partitions().len(), t.error()));
                match partitions {
                    Some((n, None)) if n > 0 => {
                        link::reachable();
                        info!(topic = %topic, partitions = n, bootstrap = %bootstrap, "connected to kafka");
                        input_partitions = n;
                        reporting.telemetry.set_input_partitions(n as u32);
                        break;
                    }
                    _ => {
                        link::reachable();
                        if missing_input.elapsed() >= link::REMINDER || first_missing {
                            warn!(topic = %topic, bootstrap = %bootstrap, "input topic does not exist (yet); create it, retrying");
                            (missing_input, first_missing) = (Instant::now(), false);
                        }
                    }
                }
            }
            // One line when nothing answers, a reminder every REMINDER.
            Err(error) => link::unreachable(&error.to_string()),
        }
        std::thread::sleep(backoff.next_wait());
    }
    if !stop.load(Ordering::SeqCst) {
        // A missing dead-letter topic would stop the first poison record
        // anyway; say so before joining the group.
        let changelog = match &outputs.changelog {
            Some(writer) => {
                let ensure =
                    crate::processor::changelog::topic::ensure(&config, writer, input_partitions);
                supervisor
                    .runtime()
                    .block_on(ensure)
                    .map(|state| info!(changelog = %writer, ?state, "changelog topic ready"))
            }
            None => {
                warn!("the changelog is off (kafka.changelog_topic = \"\"): run a single instance only");
                Ok(())
            }
        };
        let output = check_output_topic(
            outputs.outbox.as_ref(),
            &config,
            &reporting.telemetry,
            &consumer,
        );
        match input
            .dead_letters
            .check_topic(Duration::from_secs(10))
            .map_err(|e| e.to_string())
            .and(changelog.map_err(|e| e.to_string()))
            .and(output)
        {
            Err(message) => reporting.fatal(ProcessError::Process {
                stage: Stage::Start,
                message,
            }),
            Ok(()) => {
                if let Err(e) = consumer.subscribe(&[&topic]) {
                    reporting.fatal(ProcessError::Process {
                        stage: Stage::Start,
                        message: format!("cannot subscribe to {topic}: {e}"),
                    });
                }
            }
        }
    }
    let mut progress_lines = Cadence::new(Instant::now());
    let mut last_total = 0u64;
    let mut last_refresh = Instant::now();
    // Topic names have no NUL byte (the broker refuses them).
    let topic_cstr = std::ffi::CString::new(input.topic.as_str()).ok();
    let mut rate_window: std::collections::VecDeque<(Instant, u64)> =
        std::collections::VecDeque::new();
    let mut last_probe = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        reporting.telemetry.poll_turned();
        // While the connection is lost, a short metadata request once a
        // second finds its return ("kafka reachable again").
        if last_probe.elapsed() >= Duration::from_secs(1) && link::is_down() {
            last_probe = Instant::now();
            if consumer
                .fetch_metadata(Some(&topic), Duration::from_millis(500))
                .is_ok()
            {
                link::reachable();
            }
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(message)) => {
                // Every assigned partition has its own queue, split off before
                // it was assigned; a record here would be processed by no one.
                // Stop rather than skip it: a restart resumes at the checkpoint.
                reporting.fatal(ProcessError::Process {
                    stage: Stage::Poll,
                    message: format!(
                        "record of partition {} offset {} arrived on the main queue",
                        rdkafka::Message::partition(&message),
                        rdkafka::Message::offset(&message)
                    ),
                });
            }
            Some(Err(error)) => {
                reporting
                    .telemetry
                    .errors
                    .record(Stage::Poll, Kind::Retryable);
                // Folded like the client's errors: one line per change of
                // the connection, other errors once a minute.
                link::client_error(&error, "consumer poll");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if let Some(topic) = &topic_cstr {
            refresh_end_offsets(&consumer, &reporting.telemetry, topic);
        }
        if last_refresh.elapsed() >= Duration::from_secs(1) {
            refresh_rate(&reporting, &mut rate_window);
            last_refresh = Instant::now();
        }
        let due = progress_lines.due(Instant::now(), || anything_moved(&reporting, last_total));
        if let Due::Write(interval) = due {
            log_progress(
                &reporting,
                outputs.outbox.is_some(),
                config.status_in_write_outs(),
                last_total,
                interval,
            );
            last_total = reporting.counters.total();
        }
    }
    // Shutdown: finish, flush and commit every partition, then leave.
    supervisor.drain(None, false);
    if member.flush_tx.blocking_send(FlushMsg::Stop).is_ok() {
        wait_for_flusher(flusher);
    }
    // A static member (`group.instance.id`) must not leave the group: it
    // comes back within the session timeout to the same partitions with no
    // rebalance. librdkafka sends no LeaveGroup for one only when the
    // consumer is closed, not on unsubscribe (KIP-345).
    if !config.kafka.librdkafka.contains_key("group.instance.id") {
        consumer.unsubscribe();
    }
    // Dropping the last handle closes the consumer: librdkafka revokes what
    // is left (nothing) and leaves the group (a static member stays).
    drop(consumer);
}

/// Each assigned partition's end offset, from the consumer's fetch state (no
/// request). The processed position is a lower bound of the true end: a
/// fetch state older than the last batch does not show an end behind it.
fn refresh_end_offsets(
    consumer: &BaseConsumer<OrderlyContext>,
    telemetry: &Telemetry,
    topic: &std::ffi::CStr,
) {
    for status in telemetry.partitions() {
        if let Some(high) = crate::kafka::cached_high_watermark(consumer, topic, status.partition) {
            status.end_offset.store(
                high.max(status.position.load(Ordering::Relaxed)),
                Ordering::Relaxed,
            );
        }
    }
}

/// Once a second: the rate of records decided over the last five seconds.
fn refresh_rate(reporting: &Reporting, window: &mut std::collections::VecDeque<(Instant, u64)>) {
    let telemetry = &reporting.telemetry;
    let now = Instant::now();
    window.push_back((now, reporting.counters.total()));
    while window.len() > 6 {
        window.pop_front();
    }
    if let (Some(first), Some(last)) = (window.front(), window.back()) {
        let seconds = last.0.saturating_duration_since(first.0).as_secs_f64();
        telemetry.set_rate(if seconds > 0.0 {
            (last.1 - first.1) as f64 / seconds
        } else {
            0.0
        });
    }
}

/// The output topic at start-up (outbox on): missing is an error in
/// exactly_once (every transaction would fail), a warning naming the fix in
/// at_least_once (status changes wait in the outbox until it exists; the
/// input goes on).
fn check_output_topic<E: Entity>(
    outbox: Option<&OutboxSetup<E>>,
    config: &Config,
    telemetry: &Telemetry,
    consumer: &BaseConsumer<OrderlyContext>,
) -> Result<(), String> {
    let Some(setup) = outbox else {
        return Ok(());
    };
    let topic = &setup.topic;
    // All topics: a metadata request naming a missing topic may create it.
    let exists = match consumer.fetch_metadata(None, Duration::from_secs(10)) {
        Ok(metadata) => metadata
            .topics()
            .iter()
            .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()),
        Err(error) => {
            warn!(%error, topic = %topic, "cannot read cluster metadata to check the output topic");
            return Ok(());
        }
    };
    if exists {
        return Ok(());
    }
    let create = create_output_topic(
        topic,
        &config.kafka.bootstrap_servers,
        telemetry.input_partitions(),
    );
    if config.processing.guarantee == crate::config::Guarantee::ExactlyOnce {
        return Err(format!(
            "output topic {topic} does not exist, and in exactly_once every write-out's transaction publishes to it: \
             create it ({create}) or set kafka.output_topic = \"\""
        ));
    }
    if config.outbox.delivery == crate::config::OutboxDelivery::WriteOut {
        return Err(format!(
            "output topic {topic} does not exist, and with outbox.delivery = \"write_out\" every write-out publishes \
             to it: create it ({create}), set outbox.delivery = \"relay\" (status changes then wait in the store \
             while it is missing, and the input goes on) or kafka.output_topic = \"\""
        ));
    }
    warn!(
        topic = %topic,
        "output topic does not exist: status changes wait in the outbox (its backlog grows) until it is created ({create}); the input goes on"
    );
    Ok(())
}

/// How to create the missing output topic with the input topic's partition
/// count: the quick start's `kafka/broker tool` and Kafka's own script.
fn create_output_topic(topic: &str, bootstrap: &str, partitions: u32) -> String {
    let args = format!(
        "--bootstrap-server {bootstrap} --create --topic {topic} --partitions {partitions}"
    );
    format!(
        "with the input topic's {partitions} partitions: `kafka/broker tool topics {args}` (the quick start's \
         broker), or `kafka-topics.sh {args}`"
    )
}

/// Whether anything the progress lines count moved since they were last
/// written: records processed, partitions restoring, status changes waiting.
fn anything_moved(reporting: &Reporting, last_total: u64) -> bool {
    reporting.counters.total() != last_total
        || reporting.telemetry.partitions().iter().any(|p| {
            p.phase() == Phase::Restoring
                || p.outbox
                    .get()
                    .is_some_and(|backlog| backlog.pending.load(Ordering::Relaxed) > 0)
        })
}

/// The progress lines: restoring partitions, the outbox backlog (outbox on;
/// worded by who delivers the status changes), totals. While nothing moves
/// they come once, then every few minutes ([`Cadence`]).
fn log_progress(
    reporting: &Reporting,
    outbox_on: bool,
    status_in_write_outs: bool,
    last_total: u64,
    elapsed: Duration,
) {
    let partitions = reporting.telemetry.partitions();
    let restoring: Vec<i32> = partitions
        .iter()
        .filter(|p| p.phase() == Phase::Restoring)
        .map(|p| p.partition)
        .collect();
    if !restoring.is_empty() {
        info!(partitions = ?restoring, "restoring from the changelog");
    }
    if outbox_on {
        let (mut pending, mut oldest_ms, mut published, mut in_write_outs) =
            (0u64, 0u64, 0u64, 0u64);
        for backlog in partitions.iter().filter_map(|p| p.outbox.get()) {
            pending += backlog.pending.load(Ordering::Relaxed);
            oldest_ms = oldest_ms.max(backlog.oldest_age_ms.load(Ordering::Relaxed));
            published += backlog.published.load(Ordering::Relaxed);
            in_write_outs += backlog.in_write_outs.load(Ordering::Relaxed);
        }
        // Worded by who delivers the status changes: with write-out delivery
        // the relay runs only over rows an earlier relay left.
        if !status_in_write_outs {
            info!(
                pending,
                oldest_age_s = oldest_ms as f64 / 1000.0,
                published,
                "outbox relay: status changes published by the relay"
            );
        } else if pending > 0 || published > 0 {
            info!(
                in_write_outs,
                left_by_a_relay_pending = pending,
                left_by_a_relay_published = published,
                "status changes delivered with the write-outs"
            );
        } else {
            info!(
                in_write_outs,
                "status changes delivered with the write-outs"
            );
        }
    }
    let total = reporting.counters.total();
    let rate = (total - last_total) as f64 / elapsed.as_secs_f64().max(1e-3);
    let c = reporting.counters.outcomes.load();
    if total == last_total && restoring.is_empty() {
        info!(
            processed = total,
            applied = c.applied,
            duplicates = c.duplicates,
            stale = c.stale,
            dead_lettered = c.dead_lettered,
            "progress: idle, nothing to process (the next line when records arrive, or in {} minutes)",
            QUIET_EVERY.as_secs() / 60
        );
        return;
    }
    info!(
        processed = total,
        per_second = rate.round() as u64,
        applied = c.applied,
        duplicates = c.duplicates,
        stale = c.stale,
        dead_lettered = c.dead_lettered,
        "progress"
    );
}

fn wait_for_flusher(flusher: tokio::task::JoinHandle<()>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !flusher.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if !flusher.is_finished() {
        warn!("flusher did not stop in time");
        flusher.abort();
    }
}

/// Registers the output topic's OrderStatusChanged schema, waiting for a
/// registry that cannot be reached (as records wait for it): a line when it
/// starts waiting, a reminder every 30 s, a line when it is done. A
/// registry that refuses (credentials, a schema it rejects) stops the start.
async fn register_outbox_schema<E: Entity>(
    entity: &E,
    registry: &crate::registry::Registry,
    topic: &str,
    source_topic: &str,
) -> Result<crate::processor::outbox::OutboxEncoder<E>, ProcessError> {
    let mut backoff =
        crate::kafka::retry::Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let started = std::time::Instant::now();
    let mut said: Option<std::time::Instant> = None;
    loop {
        match crate::processor::outbox::OutboxEncoder::register_for(
            entity,
            registry,
            topic,
            source_topic,
        )
        .await
        {
            Ok(encoder) => {
                if said.is_some() {
                    info!(
                        waited_s = started.elapsed().as_secs(),
                        "schema registry reachable again: the OrderStatusChanged schema is registered"
                    );
                }
                return Ok(encoder);
            }
            Err(crate::registry::RegistryError::Unavailable(cause)) => {
                let remind = said.is_none_or(|at| at.elapsed() >= Duration::from_secs(30));
                if remind {
                    warn!(
                        topic,
                        waited_s = started.elapsed().as_secs(),
                        error = %cause,
                        "the schema registry cannot be reached; waiting for it to register the OrderStatusChanged \
                         schema of the outbox before joining the group"
                    );
                    said = Some(std::time::Instant::now());
                }
                backoff.sleep().await;
            }
            Err(e) => {
                return Err(ProcessError::Process {
                    stage: Stage::Start,
                    message: format!(
                    "cannot register the OrderStatusChanged schema for the outbox ({topic}): {e}"
                ),
                })
            }
        }
    }
}
