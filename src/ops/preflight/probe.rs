//! The pre-flight checks' questions to the cluster: a metadata-only
//! client that keeps the last error librdkafka reported, and what its
//! metadata says of a topic.

use std::sync::Mutex;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use rdkafka::types::RDKafkaRespErr;

use crate::config::Config;
use crate::error_chain::error_text;

/// Keeps the last error librdkafka reported (e.g. "Connect to ... failed:
/// Connection refused"), which says more than a metadata timeout does.
#[derive(Default)]
pub(super) struct ProbeContext {
    last_error: Mutex<Option<String>>,
}

impl ProbeContext {
    fn record(&self, reason: &str) {
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(reason.to_string());
        }
    }
}

impl ClientContext for ProbeContext {
    fn log(&self, level: RDKafkaLogLevel, _fac: &str, log_message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            self.record(log_message);
        }
    }

    fn error(&self, _error: KafkaError, reason: &str) {
        self.record(reason);
    }
}

impl ConsumerContext for ProbeContext {}

/// `error`'s text, and the last client error when there is one. Client
/// errors are delivered as events: serve them (no subscription, so no
/// records) to learn the last one.
pub(super) fn with_last_error(consumer: &BaseConsumer<ProbeContext>, error: &KafkaError) -> String {
    let _ = consumer.poll(Duration::from_millis(50));
    let last = consumer
        .context()
        .last_error
        .lock()
        .ok()
        .and_then(|l| l.clone());
    match last {
        Some(reason) => format!("{}; last client error: {reason}", error_text(error)),
        None => error_text(error),
    }
}

/// A client for metadata only: the pass-through settings (security) and the
/// bootstrap servers, no group.
fn metadata_client(config: &Config) -> Result<BaseConsumer<ProbeContext>, KafkaError> {
    crate::kafka::metadata_client_config(config).create_with_context(ProbeContext::default())
}

/// Cluster metadata (of one topic, or of every topic), off the async workers.
pub(super) async fn metadata(
    config: &Config,
    topic: Option<&str>,
    timeout: Duration,
) -> Result<Metadata, String> {
    let consumer = metadata_client(config).map_err(|e| error_text(&e))?;
    let topic = topic.map(str::to_string);
    tokio::task::spawn_blocking(move || {
        consumer
            .fetch_metadata(topic.as_deref(), timeout)
            .map_err(|e| with_last_error(&consumer, &e))
    })
    .await
    .map_err(|e| format!("metadata request task failed: {e}"))?
}

/// The partition count of `topic`, or `None` when it does not exist.
/// A topic as the cluster's metadata shows it.
pub(super) struct TopicShape {
    /// Its partition count (`None`: it does not exist).
    pub(super) partitions: Option<usize>,
    /// The fewest replicas any of its partitions has.
    pub(super) min_replicas: usize,
    /// The brokers the cluster has.
    pub(super) brokers: usize,
}

pub(super) async fn topic_shape(
    config: &Config,
    topic: &str,
    timeout: Duration,
) -> Result<TopicShape, String> {
    let meta = metadata(config, Some(topic), timeout).await?;
    let brokers = meta.brokers().len();
    let found = meta.topics().iter().find(|t| t.name() == topic);
    let partitions = match found.map(|t| (t.error(), t.partitions())) {
        None | Some((Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART), _)) => None,
        Some((Some(code), _)) => return Err(RDKafkaErrorCode::from(code).to_string()),
        Some((None, [])) => None,
        Some((None, partitions)) => Some(partitions),
    };
    Ok(TopicShape {
        partitions: partitions.map(<[_]>::len),
        min_replicas: partitions
            .and_then(|p| p.iter().map(|p| p.replicas().len()).min())
            .unwrap_or(0),
        brokers,
    })
}

/// A topic's partition count (`None`: it does not exist).
pub(super) async fn topic_partitions(
    config: &Config,
    topic: &str,
    timeout: Duration,
) -> Result<Option<usize>, String> {
    Ok(topic_shape(config, topic, timeout).await?.partitions)
}
