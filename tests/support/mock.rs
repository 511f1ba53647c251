//! librdkafka's mock cluster as the mock-cluster suites set it up: an input
//! topic, its dead-letter topic, the changelog and the output topic (the
//! mock cluster has no CreateTopics, so the processor cannot create them),
//! an idempotent producer, and the product's defaults pointed at them.

use std::path::Path;

use rdkafka::mocking::MockCluster;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;

use orderly::Config;

use super::{unique, Instance, Setup};

pub struct Cluster {
    pub mock: MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    pub bootstrap: String,
    pub topic: String,
    pub dlq: String,
    pub changelog: String,
}

impl Cluster {
    /// An `orderly` instance on this cluster's topics (session timeout 6 s),
    /// in `group`, with the registry at `registry_url` and `extra` settings.
    pub fn instance(&self, registry_url: &str, group: &str, extra: &str) -> Instance {
        Instance::new(&Setup {
            kafka_extra: "",
            bootstrap: &self.bootstrap,
            registry_url,
            group,
            topic: &self.topic,
            dlq_topic: &self.dlq,
            session_timeout_ms: 6000,
            extra,
        })
    }
}

/// An input topic of `partitions` partitions, with its changelog and output
/// topic of as many, and (when `with_dlq`) a one-partition dead-letter topic.
pub fn cluster(partitions: i32, with_dlq: bool) -> Cluster {
    let mock = MockCluster::new(1).expect("mock cluster");
    let topic = unique("orders");
    let dlq = unique("orders-dlq");
    mock.create_topic(&topic, partitions, 1).expect("topic");
    if with_dlq {
        mock.create_topic(&dlq, 1, 1).expect("dlq topic");
    }
    let changelog = format!("{topic}-changelog");
    mock.create_topic(&changelog, partitions, 1)
        .expect("changelog topic");
    mock.create_topic(&format!("{topic}-status"), partitions, 1)
        .expect("output topic");
    let bootstrap = mock.bootstrap_servers();
    Cluster {
        mock,
        bootstrap,
        topic,
        dlq,
        changelog,
    }
}

pub fn producer(bootstrap: &str) -> FutureProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer")
}

/// The product's defaults on the cluster's topics, with a fresh group and
/// the store at `store`.
pub fn config(c: &Cluster, store: &Path) -> Config {
    let mut config = Config::defaults().expect("defaults");
    config.kafka.bootstrap_servers = c.bootstrap.clone();
    config.kafka.group_id = unique("group");
    config.kafka.input_topic = c.topic.clone();
    config.kafka.dlq_topic = c.dlq.clone();
    config.kafka.changelog_topic = c.changelog.clone();
    config.kafka.output_topic = format!("{}-status", c.topic);
    config.store.path = store.to_path_buf();
    config
}

/// Runs `entity`'s processor in process until the store covers `ends`
/// (within two minutes), then stops it.
pub async fn process_until_caught_up<E: orderly::Entity>(
    entity: E,
    config: Config,
    store: orderly::Store,
    registry: orderly::Registry,
    ends: std::collections::BTreeMap<i32, i64>,
) {
    let watcher = store.clone();
    let caught_up = async move {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(120);
        while !orderly::testkit::covers(&watcher, &ends) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "processor did not catch up"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    };
    orderly::Processor::for_entity(entity, config, store, registry)
        .run(caught_up)
        .await
        .expect("processor run");
}

/// The store's durable counters, summed over its partitions, are these;
/// each partition's add up to the records it consumed.
pub fn assert_counters(
    store: &orderly::Store,
    applied: u64,
    duplicates: u64,
    stale: u64,
    dead_lettered: u64,
) {
    let stats = store.stats().expect("stats");
    let total = |f: fn(&orderly::testkit::Checkpoint) -> u64| {
        stats.iter().map(|s| f(&s.checkpoint)).sum::<u64>()
    };
    assert_eq!(total(|c| c.applied), applied, "applied");
    assert_eq!(total(|c| c.duplicates), duplicates, "duplicates");
    assert_eq!(total(|c| c.stale), stale, "stale");
    assert_eq!(total(|c| c.dead_lettered), dead_lettered, "dead-lettered");
    for s in &stats {
        assert_eq!(
            s.checkpoint.outcomes() as i64,
            s.checkpoint.consumed(),
            "partition {}",
            s.partition
        );
    }
}

/// The newest status change per key (by version) on every partition of
/// `topic`, decoded with `schema`: key -> (version, to_status).
pub fn last_status_changes(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    schema: &apache_avro::Schema,
    key_field: &str,
) -> std::collections::HashMap<String, (i64, String)> {
    use apache_avro::types::Value;
    use rdkafka::consumer::Consumer;
    let watermarks: rdkafka::consumer::BaseConsumer =
        super::client(bootstrap).create().expect("consumer");
    let mut last = std::collections::HashMap::new();
    for partition in 0..partitions {
        let (low, high) = watermarks
            .fetch_watermarks(topic, partition, std::time::Duration::from_secs(10))
            .expect("watermarks");
        for message in super::read_range(bootstrap, topic, partition, low, high) {
            let payload = message.payload.expect("payload");
            #[allow(deprecated)]
            let value = apache_avro::from_avro_datum(schema, &mut &payload[5..], None)
                .expect("a status change");
            let Value::Record(fields) = value else {
                panic!("a record")
            };
            let field = |name: &str| fields.iter().find(|(n, _)| n == name).map(|(_, v)| v);
            let (Some(Value::String(key)), Some(Value::Long(version)), Some(to)) =
                (field(key_field), field("version"), field("to_status"))
            else {
                panic!("fields of {fields:?}")
            };
            let to = match to {
                Value::String(s) | Value::Enum(_, s) => s.clone(),
                other => panic!("to_status {other:?}"),
            };
            let entry = last.entry(key.clone()).or_insert((0, String::new()));
            if *version >= entry.0 {
                *entry = (*version, to);
            }
        }
    }
    last
}
