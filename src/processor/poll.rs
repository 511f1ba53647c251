//! The poll thread: waits for the broker and the input topic, checks the
//! topics the processor writes to, subscribes, polls (rebalance callbacks,
//! errors) until stopped, then drains every partition, stops the flusher
//! and closes the consumer (leaving the group).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use tracing::{info, warn};

use crate::config::Config;
use crate::engine::entity::Entity;
use crate::kafka::retry::Backoff;
use crate::observe::errors::{Kind, Stage};
use crate::observe::kafka_link as link;
use crate::processor::context::OrderlyContext;
use crate::processor::error::ProcessError;
use crate::processor::flusher::FlushMsg;
use crate::processor::output::check_output_topic;
use crate::processor::parts::{Member, Parts, Reporting};
use crate::processor::progress::Progress;
use crate::processor::supervisor::PartitionSupervisor;

/// The poll thread: waits for the broker, subscribes, routes records until
/// stopped, then drains every partition, stops the flusher and closes the
/// consumer (leaving the group).
pub(crate) fn poll_loop<E: Entity>(
    consumer: Arc<BaseConsumer<OrderlyContext>>,
    supervisor: Arc<PartitionSupervisor<E>>,
    parts: Parts<E>,
    config: Config,
    stop: Arc<AtomicBool>,
    flusher: tokio::task::JoinHandle<()>,
) {
    let input_partitions = wait_for_input_topic(&consumer, &parts, &config, &stop);
    if !stop.load(Ordering::SeqCst) {
        check_topics_and_subscribe(&consumer, &supervisor, &parts, &config, input_partitions);
    }
    let reporting = &parts.reporting;
    let mut progress = Progress::new(
        &parts.input.topic,
        parts.outputs.outbox.is_some(),
        super::partition::strategy::Strategy::of(&config).status_in_write_outs(),
    );
    let mut last_probe = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        reporting.telemetry.poll_turned();
        probe_while_down(&consumer, &parts.input.topic, &mut last_probe);
        poll_once(&consumer, reporting);
        progress.after_poll(&consumer, reporting);
    }
    leave_group(consumer, &supervisor, &parts.member, &config, flusher);
}

/// The input topic's partition count, once the broker answers and the topic
/// exists (0 if stopped before). A broker that is down at start-up is
/// waited for, with a clear message.
fn wait_for_input_topic<E: Entity>(
    consumer: &BaseConsumer<OrderlyContext>,
    parts: &Parts<E>,
    config: &Config,
    stop: &AtomicBool,
) -> usize {
    let topic = parts.input.topic.as_str();
    let bootstrap = &config.kafka.bootstrap_servers;
    let mut backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(10));
    let (mut missing_input, mut first_missing) = (Instant::now(), true);
    while !stop.load(Ordering::SeqCst) {
        match consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) {
            Ok(metadata) => {
                let partitions = metadata
                    .topics()
                    .first()
                    .map(|t| (t.partitions().len(), t.error()));
                match partitions {
                    Some((n, None)) if n > 0 => {
                        link::reachable();
                        info!(topic = %topic, partitions = n, bootstrap = %bootstrap, "connected to kafka");
                        parts.reporting.telemetry.set_input_partitions(n as u32);
                        return n;
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
    0
}

/// Checks the dead-letter, changelog and output topics, then subscribes to
/// the input topic; a failure of either is fatal.
fn check_topics_and_subscribe<E: Entity>(
    consumer: &BaseConsumer<OrderlyContext>,
    supervisor: &PartitionSupervisor<E>,
    parts: &Parts<E>,
    config: &Config,
    input_partitions: usize,
) {
    let Parts {
        input,
        outputs,
        reporting,
        ..
    } = parts;
    let topic = input.topic.as_str();
    // A missing dead-letter topic would stop the first poison record
    // anyway; say so before joining the group.
    let changelog = match &outputs.changelog {
        Some(writer) => {
            let ensure =
                crate::processor::changelog::topic::ensure(config, writer, input_partitions);
            supervisor
                .runtime()
                .block_on(ensure)
                .map(|state| info!(changelog = %writer, ?state, "changelog topic ready"))
        }
        None => {
            warn!(
                "the changelog is off (kafka.changelog_topic = \"\"): run a single instance only"
            );
            Ok(())
        }
    };
    let output = check_output_topic(
        outputs.outbox.as_ref(),
        config,
        &reporting.telemetry,
        consumer,
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
            if let Err(e) = consumer.subscribe(&[topic]) {
                reporting.fatal(ProcessError::Process {
                    stage: Stage::Start,
                    message: format!("cannot subscribe to {topic}: {e}"),
                });
            }
        }
    }
}

/// While the connection is lost, a short metadata request once a second
/// finds its return ("kafka reachable again"); its failure keeps the
/// reminders coming when librdkafka has gone quiet (a consumer whose
/// session timed out in the outage reports nothing more).
fn probe_while_down(
    consumer: &BaseConsumer<OrderlyContext>,
    topic: &str,
    last_probe: &mut Instant,
) {
    if last_probe.elapsed() >= Duration::from_secs(1) && link::is_down() {
        *last_probe = Instant::now();
        match consumer.fetch_metadata(Some(topic), Duration::from_millis(500)) {
            Ok(_) => link::reachable(),
            Err(e) => link::unreachable(&e.to_string()),
        }
    }
}

/// One poll of the consumer's main queue: it serves the rebalance callbacks
/// and the client's errors; a record on it is fatal.
fn poll_once(consumer: &BaseConsumer<OrderlyContext>, reporting: &Reporting) {
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
}

/// Shutdown: finish, flush and commit every partition, then leave.
fn leave_group<E: Entity>(
    consumer: Arc<BaseConsumer<OrderlyContext>>,
    supervisor: &PartitionSupervisor<E>,
    member: &Member,
    config: &Config,
    flusher: tokio::task::JoinHandle<()>,
) {
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
