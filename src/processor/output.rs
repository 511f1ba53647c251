//! The output topic at start-up (outbox on): the outbox's
//! OrderStatusChanged schema registered before the group is joined
//! ([`outbox_setup`]), and the topic checked once the broker answers
//! ([`check_output_topic`]).

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use tracing::{info, warn};

use crate::config::Config;
use crate::engine::entity::Entity;
use crate::kafka::retry::Backoff;
use crate::observe::errors::Stage;
use crate::observe::Telemetry;
use crate::processor::context::OrderlyContext;
use crate::processor::error::ProcessError;
use crate::processor::outbox::OutboxEncoder;
use crate::processor::parts::OutboxSetup;
use crate::registry::{Registry, RegistryError};

/// What waiting for something at start-up came to: it is ready, or a
/// shutdown was requested first.
pub(crate) enum Waited<T> {
    Ready(T),
    ShutDown,
}

/// The outbox's setup (`None`: the outbox is off), its schema registered
/// first; a shutdown requested while the registry is waited for ends the
/// start there.
pub(crate) async fn outbox_setup<E: Entity, S: std::future::Future<Output = ()>>(
    entity: &E,
    registry: &Registry,
    config: &Config,
    shutdown: Pin<&mut S>,
) -> Result<Waited<Option<OutboxSetup<E>>>, ProcessError> {
    let Some(topic) = config.output_topic() else {
        return Ok(Waited::Ready(None));
    };
    let registering = register_outbox_schema(entity, registry, &topic, &config.kafka.input_topic);
    let encoder = tokio::select! {
        registered = registering => registered?,
        _ = shutdown => {
            info!("shutdown requested while waiting for the schema registry; nothing was consumed");
            return Ok(Waited::ShutDown);
        }
    };
    info!(topic = %topic, "outbox on: status changes are published to the output topic");
    Ok(Waited::Ready(Some(OutboxSetup {
        topic,
        encoder: Arc::new(encoder),
        producer_config: crate::kafka::outbox_producer_config(config),
        producer: Arc::new(Mutex::new(None)),
        warn_count: config.outbox.backlog_warn,
        warn_age: config.outbox_warn_age(),
    })))
}

/// The output topic at start-up (outbox on): missing is an error in
/// exactly_once (every transaction would fail), a warning naming the fix in
/// at_least_once (status changes wait in the outbox until it exists; the
/// input goes on).
pub(crate) fn check_output_topic<E: Entity>(
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

/// Registers the output topic's OrderStatusChanged schema, waiting for a
/// registry that cannot be reached (as records wait for it): a line when it
/// starts waiting, a reminder every 30 s, a line when it is done. A
/// registry that refuses (credentials, a schema it rejects) stops the start.
async fn register_outbox_schema<E: Entity>(
    entity: &E,
    registry: &Registry,
    topic: &str,
    source_topic: &str,
) -> Result<OutboxEncoder<E>, ProcessError> {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let started = std::time::Instant::now();
    let mut said: Option<std::time::Instant> = None;
    loop {
        match OutboxEncoder::register_for(entity, registry, topic, source_topic).await {
            Ok(encoder) => {
                if said.is_some() {
                    info!(
                        waited_s = started.elapsed().as_secs(),
                        "schema registry reachable again: the OrderStatusChanged schema is registered"
                    );
                }
                return Ok(encoder);
            }
            Err(RegistryError::Unavailable(cause)) => {
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
