//! librdkafka's mock cluster as the mock-cluster suites set it up: an input
//! topic, its dead-letter topic, the changelog and the output topic (the
//! mock cluster has no CreateTopics, so the processor cannot create them),
//! an idempotent producer, and the product's defaults pointed at them.

use std::path::Path;

use rdkafka::mocking::MockCluster;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;

use orderly::config::Config;

use super::unique;

pub struct Cluster {
    pub mock: MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    pub bootstrap: String,
    pub topic: String,
    pub dlq: String,
    pub changelog: String,
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
