//! librdkafka client settings: pass-through first, then the settings the
//! guarantees depend on, forced.

pub(crate) mod acl;
pub(crate) mod group_members;
pub(crate) mod hanging;
pub mod headers;
pub(crate) mod partition_reader;
pub(crate) mod retry;
pub(crate) mod wire;

use rdkafka::ClientConfig;

use crate::config::{Config, GroupProtocol};

/// Consumer defaults orderly sets before the pass-through (which may change
/// them). Each assigned partition has its own queue, and librdkafka applies
/// its prefetch limits per partition queue: its own defaults would prefetch
/// whole topics into memory. Small queues are enough: decisions do not wait
/// on sled, so a short queue does not starve the processor; a short fetch
/// back-off refills a drained partition queue quickly (docs/performance.md,
/// "Client settings: the measurements behind them").
pub(crate) const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    ("queued.min.messages", "1000"),
    ("queued.max.messages.kbytes", "1024"),
    ("fetch.queue.backoff.ms", "10"),
    // librdkafka keeps one fetch request in flight per broker, and leaves
    // out a partition whose queue is over the limits above. When the
    // request holds only partitions with nothing new, the broker keeps it
    // for fetch.wait.max.ms while the left-out partitions' tasks drain
    // their queues and wait: a partition that fell behind the others
    // crawls until the end. A short wait bounds that pause, for a few more
    // fetches a second per broker from an idle consumer (docs/performance.md,
    // "Client settings: the measurements behind them").
    ("fetch.wait.max.ms", "100"),
    // The members of a group learn of a rebalance from a heartbeat answer:
    // a partition moved by a cooperative rebalance waits up to a heartbeat
    // interval between its release and its new owner's assignment, and
    // after a member dies the group waits for the last survivor's next
    // heartbeat. A short interval keeps those pauses short (docs/performance.md,
    // "Failover" and "Client settings: the measurements behind them"), for
    // a few more heartbeats a second per member.
    ("heartbeat.interval.ms", "250"),
];

/// The consumer's settings. Offsets are never committed or stored by
/// librdkafka on its own: orderly commits after the flush.
pub fn consumer_config(config: &Config) -> ClientConfig {
    let classic = config.kafka.group_protocol == GroupProtocol::Classic;
    let mut client = ClientConfig::new();
    // Names this process in the group's metadata (kafka-consumer-groups
    // --describe, the owner in `/state`'s 421 answer); a pass-through
    // client.id replaces it.
    client.set("client.id", client_id());
    for (key, value) in CONSUMER_DEFAULTS {
        // Under KIP-848 the heartbeat interval is the broker's to set.
        if classic || *key != "heartbeat.interval.ms" {
            client.set(*key, *value);
        }
    }
    for (key, value) in config.librdkafka_passthrough() {
        client.set(key, value);
    }
    client
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", &config.kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", config.kafka.auto_offset_reset.as_str())
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "false");
    if classic {
        client
            .set("group.protocol", "classic")
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set(
                "session.timeout.ms",
                config.kafka.session_timeout_ms.to_string(),
            );
    } else {
        // KIP-848: the broker assigns (incrementally, like cooperative-sticky)
        // and owns the session timeout and heartbeat interval; librdkafka
        // refuses to create a consumer that sets them.
        client.set("group.protocol", "consumer");
    }
    client
}

/// `orderly-<host>-<pid>`: the default client id of the consumer, and the
/// writer every changelog record names (read once per process).
pub(crate) fn client_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| format!("orderly-{}-{}", hostname(), std::process::id()))
}

/// This machine's host name (`unknown-host` if it cannot be read).
pub(crate) fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".into())
}

/// The settings of producers (dead letters, load generator): idempotent,
/// acknowledged by all in-sync replicas.
pub(crate) fn producer_config(config: &Config) -> ClientConfig {
    producer_with_defaults(config, &[])
}

/// A producer's settings: `defaults` first, then the pass-through, then the
/// settings the guarantees depend on (idempotent, `acks=all`), forced.
fn producer_with_defaults(config: &Config, defaults: &[(&str, &str)]) -> ClientConfig {
    let mut client = ClientConfig::new();
    for (key, value) in defaults {
        client.set(*key, *value);
    }
    for (key, value) in config.librdkafka_passthrough() {
        client.set(key, value);
    }
    client
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("enable.idempotence", "true")
        .set("acks", "all");
    client
}

/// The settings of a [`crate::kafka::partition_reader::PartitionReader`] that
/// reads a partition up to a known end (the changelog's restore and
/// `orderly replay`, the outbox relay's read-back of the output topic): it
/// never joins a group (partitions are assigned by hand; librdkafka wants a
/// group id for that) and commits nothing.
pub(crate) fn reader_consumer_config(config: &Config) -> ClientConfig {
    let mut client = ClientConfig::new();
    // A reader reads one partition from a known start to a known end, so
    // larger fetches mean fewer round trips and a faster restore
    // (docs/performance.md, "Client settings: the measurements behind
    // them"). A default, before the pass-through: a user's setting wins.
    client.set("max.partition.fetch.bytes", (8 << 20).to_string());
    for (key, value) in config.librdkafka_passthrough() {
        // Group membership settings belong to the processor's consumer.
        if !key.starts_with("group.") {
            client.set(key, value);
        }
    }
    client
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", format!("{}-restore", config.kafka.group_id))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", "earliest")
        // Records of aborted transactions (a fenced owner's write-outs) are never read.
        .set("isolation.level", "read_committed")
        .set("queued.max.messages.kbytes", "16384")
        // A read up to a known end: a fetch that finds nothing new should
        // come back at once rather than wait for data.
        .set("fetch.wait.max.ms", "10");
    client
}

/// What a partition reader up to a known end is built from (the changelog's
/// restore, the outbox's read-back of the output topic), taken once from the
/// configuration so the partition tasks that read do not hold all of it.
#[derive(Debug, Clone)]
pub struct ReaderSettings {
    /// The reader's client settings (`reader_consumer_config`).
    pub client: ClientConfig,
    /// The brokers, for the command a hanging transaction's message names.
    pub bootstrap: String,
}

impl ReaderSettings {
    /// The settings `config` implies.
    pub fn of(config: &Config) -> Self {
        ReaderSettings {
            client: reader_consumer_config(config),
            bootstrap: config.kafka.bootstrap_servers.clone(),
        }
    }
}

/// The consumer of `orderly dlq list|replay`: reads dead-letter partitions
/// by assignment (it never joins `group`, it only commits re-drive progress
/// under it), never commits on its own, and reports each partition's end so
/// a scan stops there instead of waiting for more letters.
pub(crate) fn redrive_consumer_config(config: &Config, group: &str) -> ClientConfig {
    let mut client = passthrough(config);
    client
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        // At the end of a partition the broker answers at once instead of
        // holding the fetch for librdkafka's default 500 ms.
        .set("fetch.wait.max.ms", "10");
    client
}

/// The settings of admin clients (topic creation).
pub(crate) fn admin_config(config: &Config) -> ClientConfig {
    let mut client = passthrough(config);
    client.set("bootstrap.servers", &config.kafka.bootstrap_servers);
    client
}

/// The settings of a client that only asks the cluster (metadata, the
/// authorized operations, a group's committed offsets): the admin
/// settings, and no topic created by asking about it.
pub(crate) fn metadata_client_config(config: &Config) -> ClientConfig {
    let mut client = admin_config(config);
    client.set("allow.auto.create.topics", "false");
    client
}

/// The producer of `orderly replay`'s changelog markers: idempotent and
/// acknowledged by all in-sync replicas like the others, with a short
/// linger. (Write-outs go through each partition's transactional producer.)
pub(crate) fn changelog_producer_config(config: &Config) -> ClientConfig {
    producer_with_defaults(config, &[("linger.ms", "5")])
}

/// A partition's transactional producer (every write-out with a
/// changelog, under either guarantee): idempotent,
/// `acks=all`, a short linger like the changelog's, and a transaction
/// timeout that lets the broker abort a crashed owner's open transaction
/// within 30 s even if no new owner fences it sooner. Without its
/// `transactional.id`: each partition's producer sets its own.
pub(crate) fn transactional_producer_config(config: &Config) -> ClientConfig {
    producer_with_defaults(
        config,
        &[("linger.ms", "5"), ("transaction.timeout.ms", "30000")],
    )
}

/// The outbox relay's producer: idempotent, `acks=all`, lingering 25 ms
/// (nobody waits on it, and fuller requests cost the broker less), and a
/// missing output topic is not created by it. A publish fails after 60 s
/// (`message.timeout.ms`, librdkafka's default 300 s), long enough that a
/// broker restart does not time messages out: a message that times out
/// locally leaves a gap the idempotent producer then sends past, and the
/// relay's retry of it can land after a newer status of the same order
/// (seen with a shorter timeout across a broker restart: docs/performance.md,
/// "Client settings: the measurements behind them"). A longer outage can
/// still do that (see docs/concepts.md, the outbox).
pub(crate) fn outbox_producer_config(config: &Config) -> ClientConfig {
    producer_with_defaults(
        config,
        &[
            ("linger.ms", "25"),
            ("message.timeout.ms", "60000"),
            ("allow.auto.create.topics", "false"),
        ],
    )
}

fn passthrough(config: &Config) -> ClientConfig {
    let mut client = ClientConfig::new();
    for (key, value) in config.librdkafka_passthrough() {
        client.set(key, value);
    }
    client
}

/// The partition's high watermark as the consumer last fetched it (no
/// request to the broker): `None` before its first fetch response.
pub(crate) fn cached_high_watermark<C: rdkafka::consumer::ConsumerContext>(
    consumer: &rdkafka::consumer::BaseConsumer<C>,
    topic: &std::ffi::CStr,
    partition: i32,
) -> Option<i64> {
    use rdkafka::consumer::Consumer;
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client pointer is valid while `consumer` is borrowed; the
    // topic string outlives the call; librdkafka only writes the two
    // out-parameters, and the call is thread-safe (it locks the partition).
    let err = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0)
        .then_some(high)
}

/// The metadata orderly writes with every offset commit of the input topic
/// (the processor's and `orderly replay`'s), read back at start-up: a
/// committed offset without it was moved by another tool (such as
/// `kafka-consumer-groups --reset-offsets`, which commits empty metadata).
pub const COMMIT_METADATA: &str = "orderly";

/// A commit list of `topic`'s `(partition, next offset)` pairs, each tagged
/// with [`COMMIT_METADATA`].
pub(crate) fn commit_list(
    topic: &str,
    offsets: impl IntoIterator<Item = (i32, i64)>,
) -> rdkafka::error::KafkaResult<rdkafka::TopicPartitionList> {
    let mut tpl = rdkafka::TopicPartitionList::new();
    for (partition, next_offset) in offsets {
        let mut elem = tpl.add_partition(topic, partition);
        elem.set_offset(rdkafka::Offset::Offset(next_offset))?;
        elem.set_metadata(COMMIT_METADATA);
    }
    Ok(tpl)
}

/// A record handed to librdkafka (its delivery future), or given back
/// because the producer's queue is full.
type Queued<'r, K, P> =
    Result<rdkafka::producer::DeliveryFuture, rdkafka::producer::FutureRecord<'r, K, P>>;

/// One attempt to hand `record` to librdkafka: its delivery future, or the
/// record back when the producer's queue is full (any other error is
/// returned).
fn try_send<'r, K, P, C>(
    producer: &rdkafka::producer::FutureProducer<C>,
    record: rdkafka::producer::FutureRecord<'r, K, P>,
) -> Result<Queued<'r, K, P>, rdkafka::error::KafkaError>
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
    C: rdkafka::client::ClientContext + 'static,
{
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};
    match producer.send_result(record) {
        Ok(ack) => Ok(Ok(ack)),
        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => Ok(Err(back)),
        Err((cause, _)) => Err(cause),
    }
}

/// How long a full producer queue is waited for, 5 ms at a time.
const QUEUE_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// Hands `record` to librdkafka, waiting while its queue is full; any other
/// error is returned. The future resolves on delivery.
pub(crate) async fn send_when_queued<K, P, C>(
    producer: &rdkafka::producer::FutureProducer<C>,
    mut record: rdkafka::producer::FutureRecord<'_, K, P>,
) -> Result<rdkafka::producer::DeliveryFuture, rdkafka::error::KafkaError>
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
    C: rdkafka::client::ClientContext + 'static,
{
    loop {
        match try_send(producer, record)? {
            Ok(ack) => return Ok(ack),
            Err(back) => record = back,
        }
        tokio::time::sleep(QUEUE_POLL).await;
    }
}

/// [`send_when_queued`] for threads that may block: waits while the
/// producer's queue is full, for at most 30 s (then the queue-full error).
pub(crate) fn send_blocking<K, P, C>(
    producer: &rdkafka::producer::FutureProducer<C>,
    mut record: rdkafka::producer::FutureRecord<'_, K, P>,
) -> Result<rdkafka::producer::DeliveryFuture, rdkafka::error::KafkaError>
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
    C: rdkafka::client::ClientContext + 'static,
{
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match try_send(producer, record)? {
            Ok(ack) => return Ok(ack),
            Err(back) => record = back,
        }
        if std::time::Instant::now() >= deadline {
            return Err(rdkafka::error::KafkaError::MessageProduction(
                rdkafka::types::RDKafkaErrorCode::QueueFull,
            ));
        }
        std::thread::sleep(QUEUE_POLL);
    }
}

/// The value of a record's header `name` (the first one), if any.
pub(crate) fn header<'m>(
    message: &'m impl rdkafka::message::Message,
    name: &str,
) -> Option<&'m [u8]> {
    use rdkafka::message::Headers;
    message
        .headers()?
        .iter()
        .find(|h| h.key == name)
        .and_then(|h| h.value)
}

/// [`header`] as text (`None` when absent or not UTF-8).
pub(crate) fn header_str<'m>(
    message: &'m rdkafka::message::BorrowedMessage<'_>,
    name: &str,
) -> Option<&'m str> {
    header(message, name).and_then(|v| std::str::from_utf8(v).ok())
}

/// The element's offset when it is a concrete one (`None` for the
/// logical offsets: beginning, end, stored, invalid, ...).
pub(crate) fn offset_of(
    element: &rdkafka::topic_partition_list::TopicPartitionListElem<'_>,
) -> Option<i64> {
    match element.offset() {
        rdkafka::Offset::Offset(offset) => Some(offset),
        _ => None,
    }
}

/// How many partitions `topic` has in fetched `metadata`: `None` when the
/// metadata does not hold it, holds it with an error (such as an unknown
/// topic), or without partitions (a topic that exists has at least one).
pub(crate) fn partition_count(
    metadata: &rdkafka::metadata::Metadata,
    topic: &str,
) -> Option<usize> {
    metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
        .map(|t| t.partitions().len())
}

/// The producer in `slot`, created from `config` when there is none yet or
/// the one there hit a fatal error (the outbox relays and write-outs share
/// one).
pub(crate) fn shared_producer(
    slot: &std::sync::Mutex<Option<rdkafka::producer::FutureProducer>>,
    config: &ClientConfig,
) -> Result<rdkafka::producer::FutureProducer, rdkafka::error::KafkaError> {
    use rdkafka::producer::Producer;
    let mut slot = slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(p) = slot.as_ref().filter(|p| p.client().fatal_error().is_none()) {
        return Ok(p.clone());
    }
    let created: rdkafka::producer::FutureProducer = config.create()?;
    *slot = Some(created.clone());
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_settings_win_over_passthrough() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[kafka.librdkafka]\n\"fetch.min.bytes\" = 1024\n\"client.id\" = \"me\"\n",
        )
        .unwrap();
        let mut config = Config::from_layers(Some(&path), Vec::new()).unwrap();
        // Config validation rejects these keys in the pass-through; inserting
        // them directly proves the client builders force them regardless.
        let hostile = [
            ("enable.auto.commit", "true"),
            ("enable.auto.offset.store", "true"),
            ("partition.assignment.strategy", "range"),
            ("group.id", "someone-else"),
            ("bootstrap.servers", "elsewhere:9092"),
            ("session.timeout.ms", "999999"),
            ("auto.offset.reset", "error"),
            ("enable.partition.eof", "true"),
            ("enable.idempotence", "false"),
            ("acks", "1"),
        ];
        for (key, value) in hostile {
            config
                .kafka
                .librdkafka
                .insert(key.to_string(), toml::Value::String(value.to_string()));
        }
        let session = config.kafka.session_timeout_ms.to_string();
        let consumer = consumer_config(&config);
        for (key, want) in [
            ("enable.auto.commit", "false"),
            ("enable.auto.offset.store", "false"),
            ("partition.assignment.strategy", "cooperative-sticky"),
            ("group.id", config.kafka.group_id.as_str()),
            ("bootstrap.servers", config.kafka.bootstrap_servers.as_str()),
            ("session.timeout.ms", session.as_str()),
            ("auto.offset.reset", config.kafka.auto_offset_reset.as_str()),
            ("enable.partition.eof", "false"),
        ] {
            assert_eq!(consumer.get(key), Some(want), "consumer {key} is forced");
        }
        assert_eq!(
            consumer.get("fetch.min.bytes"),
            Some("1024"),
            "other keys pass through"
        );
        assert_eq!(consumer.get("client.id"), Some("me"));
        assert_eq!(
            consumer.get("fetch.queue.backoff.ms"),
            Some("10"),
            "orderly's default"
        );

        let producer = producer_config(&config);
        for (key, want) in [
            ("enable.idempotence", "true"),
            ("acks", "all"),
            ("bootstrap.servers", config.kafka.bootstrap_servers.as_str()),
        ] {
            assert_eq!(producer.get(key), Some(want), "producer {key} is forced");
        }
        assert_eq!(producer.get("client.id"), Some("me"));
    }

    #[test]
    fn the_consumer_protocol_leaves_the_broker_its_settings() {
        let mut config = Config::defaults().unwrap();
        config.kafka.group_protocol = GroupProtocol::Consumer;
        let consumer = consumer_config(&config);
        assert_eq!(consumer.get("group.protocol"), Some("consumer"));
        for key in [
            "partition.assignment.strategy",
            "session.timeout.ms",
            "heartbeat.interval.ms",
        ] {
            assert_eq!(
                consumer.get(key),
                None,
                "{key} is the broker's under KIP-848 (librdkafka refuses it)"
            );
        }
        assert_eq!(consumer.get("enable.auto.commit"), Some("false"));
        // librdkafka accepts the result: creating the client checks the combination.
        let created: Result<rdkafka::consumer::BaseConsumer, _> = consumer.create();
        assert!(created.is_ok(), "{:?}", created.err());
        let classic = consumer_config(&Config::defaults().unwrap());
        assert_eq!(classic.get("group.protocol"), Some("classic"));
        assert_eq!(
            classic.get("partition.assignment.strategy"),
            Some("cooperative-sticky")
        );
    }

    #[test]
    fn passthrough_can_change_orderly_defaults() {
        let mut config = Config::defaults().unwrap();
        config
            .kafka
            .librdkafka
            .insert("queued.min.messages".into(), toml::Value::Integer(5000));
        assert_eq!(
            consumer_config(&config).get("queued.min.messages"),
            Some("5000")
        );
    }

    #[test]
    fn a_readers_fetch_size_is_a_default_the_passthrough_changes() {
        let mut config = Config::defaults().unwrap();
        assert_eq!(
            reader_consumer_config(&config).get("max.partition.fetch.bytes"),
            Some("8388608")
        );
        config.kafka.librdkafka.insert(
            "max.partition.fetch.bytes".into(),
            toml::Value::Integer(1 << 20),
        );
        assert_eq!(
            reader_consumer_config(&config).get("max.partition.fetch.bytes"),
            Some("1048576")
        );
    }

    #[test]
    fn offset_of_gives_only_concrete_offsets() {
        let mut list = rdkafka::TopicPartitionList::new();
        for (partition, offset) in [
            (0, rdkafka::Offset::Offset(42)),
            (1, rdkafka::Offset::Offset(0)),
            (2, rdkafka::Offset::End),
            (3, rdkafka::Offset::Beginning),
            (4, rdkafka::Offset::Stored),
            (5, rdkafka::Offset::Invalid),
        ] {
            list.add_partition_offset("t", partition, offset)
                .expect("offset set");
        }
        let read: Vec<(i32, Option<i64>)> = list
            .elements()
            .iter()
            .map(|e| (e.partition(), offset_of(e)))
            .collect();
        assert_eq!(
            read,
            [
                (0, Some(42)),
                (1, Some(0)),
                (2, None),
                (3, None),
                (4, None),
                (5, None)
            ]
        );
    }

    #[test]
    fn partition_count_reads_fetched_metadata() {
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use std::time::Duration;
        let cluster: rdkafka::mocking::MockCluster<
            'static,
            rdkafka::producer::DefaultProducerContext,
        > = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("three", 3, 1).expect("topic");
        cluster.create_topic("one", 1, 1).expect("topic");
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("allow.auto.create.topics", "false")
            .create()
            .expect("consumer");
        let all = consumer
            .fetch_metadata(None, Duration::from_secs(10))
            .expect("metadata");
        assert_eq!(partition_count(&all, "three"), Some(3));
        assert_eq!(partition_count(&all, "one"), Some(1));
        assert_eq!(partition_count(&all, "absent"), None, "not in the metadata");
        let one = consumer
            .fetch_metadata(Some("three"), Duration::from_secs(10))
            .expect("metadata");
        assert_eq!(partition_count(&one, "three"), Some(3));
        assert_eq!(partition_count(&one, "one"), None, "not asked for");
        // Asked for by name, an unknown topic comes back with an error.
        let unknown = consumer
            .fetch_metadata(Some("absent"), Duration::from_secs(10))
            .expect("metadata");
        assert_eq!(partition_count(&unknown, "absent"), None);
    }
}
