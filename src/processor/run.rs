//! The group member's wiring: [`Processor`] builds the Kafka clients and
//! the parts from the configuration, starts the supervisor, the standbys,
//! the flusher and the poll thread, and stops them in order.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rdkafka::consumer::BaseConsumer;
use rdkafka::producer::FutureProducer;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::config::Config;
use crate::engine::codec::Decoder;
use crate::engine::entity::Entity;
use crate::engine::store::{Binding, Store};
use crate::kafka::{consumer_config, producer_config};
use crate::observe::errors::Stage;
use crate::observe::Telemetry;
use crate::processor::context::OrderlyContext;
use crate::processor::dlq::DeadLetters;
use crate::processor::error::ProcessError;
use crate::processor::flusher::{FlushMsg, Flusher};
use crate::processor::output::{outbox_setup, Waited};
use crate::processor::owners::OwnersSlot;
use crate::processor::partition::settings::TaskSettings;
use crate::processor::parts::{Input, Member, OutboxSetup, Outputs, Parts, Reporting};
use crate::processor::poll::poll_loop;
use crate::processor::report::RunReport;
use crate::processor::standby::{Keeper, Standbys};
use crate::processor::supervisor::PartitionSupervisor;
use crate::processor::transaction::TxnSettings;
use crate::registry::Registry;

/// A consumer-group member processing `E`'s events (orders by default).
pub struct Processor<E: Entity> {
    entity: E,
    config: Config,
    store: Store,
    registry: Registry,
    telemetry: Arc<Telemetry>,
    /// Who owns each partition, once the consumer exists (for `/state`).
    owners: Arc<OwnersSlot>,
}

/// The standby replicas' keeper and the thread it runs on.
type StandbyThread = (Arc<Standbys>, JoinHandle<()>);

/// The partition supervisor and the group member's consumer.
type Joined<E> = (
    Arc<PartitionSupervisor<E>>,
    Arc<BaseConsumer<OrderlyContext>>,
);

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
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<RunReport, ProcessError> {
        tokio::pin!(shutdown);
        let producer: FutureProducer = producer_config(&self.config).create()?;
        self.bind_store()?;
        let outbox = match outbox_setup(
            &self.entity,
            &self.registry,
            &self.config,
            shutdown.as_mut(),
        )
        .await?
        {
            Waited::Ready(outbox) => outbox,
            Waited::ShutDown => return Ok(RunReport::default()),
        };
        let (flush_tx, flush_rx) = mpsc::channel(1024);
        let (parts, config, owners) = self.into_parts(producer, outbox, flush_tx);
        let (supervisor, consumer) = join_as_member(&parts, &config, &owners)?;
        let standbys = start_standbys(&parts, &config, &supervisor, &owners)?;
        let topic = parts.input.topic.clone();
        let flusher = tokio::spawn(
            Flusher::new(
                parts.reporting.clone(),
                parts.member.store.clone(),
                topic,
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
        stop_threads(&reporting, standbys, &stop, poll).await?;
        if let Some(error) = reporting.take_fatal() {
            return Err(error);
        }
        let report = RunReport::of(&reporting);
        report.log_stopped();
        Ok(report)
    }

    /// Records what the store is built for; refuses a store built for
    /// another group, input topic or changelog topic.
    fn bind_store(&self) -> Result<(), ProcessError> {
        self.store.bind(&Binding {
            group: self.config.kafka.group_id.clone(),
            input_topic: self.config.kafka.input_topic.clone(),
            changelog_topic: self.config.changelog_topic().unwrap_or_default(),
        })?;
        Ok(())
    }

    /// The parts every partition task, the flusher and the poll thread
    /// share, with what is left of the processor: its configuration and its
    /// owners' slot.
    fn into_parts(
        self,
        producer: FutureProducer,
        outbox: Option<OutboxSetup<E>>,
        flush_tx: mpsc::Sender<FlushMsg>,
    ) -> (Parts<E>, Config, Arc<OwnersSlot>) {
        let config = self.config;
        let topic = config.kafka.input_topic.clone();
        let parts = Parts {
            input: Arc::new(Input {
                dead_letters: DeadLetters::new(
                    producer,
                    config.kafka.dlq_topic.clone(),
                    topic.clone(),
                )
                .counting_into(self.telemetry.clone()),
                topic,
                decoder: Decoder::with_counts(
                    self.entity,
                    self.registry,
                    self.telemetry.schema_records.clone(),
                ),
                retention: config.inbox_retention(),
            }),
            outputs: Arc::new(Outputs {
                changelog: config.changelog_topic(),
                outbox,
                reader: crate::kafka::ReaderSettings::of(&config),
                txn: TxnSettings::of(&config),
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
        (parts, config, self.owners)
    }
}

/// The partition supervisor and the consumer whose rebalances it handles
/// (not subscribed yet: the poll thread subscribes once the broker answers).
fn join_as_member<E: Entity>(
    parts: &Parts<E>,
    config: &Config,
    owners: &OwnersSlot,
) -> Result<Joined<E>, ProcessError> {
    let supervisor = Arc::new(PartitionSupervisor::new(
        parts.clone(),
        TaskSettings::of(config),
        config.kafka.group_id.clone(),
        tokio::runtime::Handle::current(),
    ));
    let consumer: BaseConsumer<OrderlyContext> =
        consumer_config(config).create_with_context(OrderlyContext {
            owner: supervisor.clone(),
        })?;
    let consumer = Arc::new(consumer);
    supervisor.attach(&consumer);
    owners.attach(config, &consumer);
    Ok((supervisor, consumer))
}

/// The standby replicas' thread, with a changelog and
/// `processing.standby_replicas` above 0.
fn start_standbys<E: Entity>(
    parts: &Parts<E>,
    config: &Config,
    supervisor: &PartitionSupervisor<E>,
    owners: &Arc<OwnersSlot>,
) -> Result<Option<StandbyThread>, ProcessError> {
    let (Some(changelog), replicas) =
        (&parts.outputs.changelog, config.processing.standby_replicas)
    else {
        return Ok(None);
    };
    if replicas == 0 {
        return Ok(None);
    }
    let standbys = Arc::new(Standbys::new(replicas as usize));
    supervisor.attach_standbys(standbys.clone());
    let keeper = Keeper {
        reader: parts.outputs.reader.clone(),
        store: parts.member.store.clone(),
        input_topic: parts.input.topic.clone(),
        changelog_topic: changelog.clone(),
        owners: owners.clone(),
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
    Ok(Some((standbys, thread)))
}

/// Stops the standbys, then the poll thread (which drains every partition,
/// stops the flusher and leaves the group), and waits for both.
async fn stop_threads(
    reporting: &Reporting,
    standbys: Option<StandbyThread>,
    stop: &AtomicBool,
    poll: JoinHandle<()>,
) -> Result<(), ProcessError> {
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
    Ok(())
}
