//! librdkafka client settings: pass-through first, then the settings the
//! guarantees depend on, forced.

use rdkafka::ClientConfig;

use crate::config::Config;

/// Consumer defaults orderly sets before the pass-through (which may change
/// them). Each assigned partition has its own queue, and librdkafka applies
/// its prefetch limits per partition queue: its own defaults (100,000
/// messages or 64 MiB each) would prefetch whole topics into memory. A short
/// fetch back-off refills a drained partition queue quickly. Measured with
/// the pipeline bench: 1,000,000 new orders on 22 partitions peak at 559 MiB
/// with 100,000, 429 MiB with 30,000 and 283 MiB with 10,000; on a 4-partition
/// nisshi topic 10,000 starves the tasks (3.3 s of stalls, half the rate)
/// and 30,000 does not.
pub const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    ("queued.min.messages", "30000"),
    ("queued.max.messages.kbytes", "16384"),
    ("fetch.queue.backoff.ms", "10"),
];

/// The consumer's settings. Offsets are never committed or stored by
/// librdkafka on its own: orderly commits after the flush.
pub fn consumer_config(config: &Config) -> ClientConfig {
    let mut client = ClientConfig::new();
    for (key, value) in CONSUMER_DEFAULTS {
        client.set(*key, *value);
    }
    for (key, value) in config.librdkafka_passthrough() {
        client.set(key, value);
    }
    client
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("group.id", &config.kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("partition.assignment.strategy", "cooperative-sticky")
        .set("session.timeout.ms", config.kafka.session_timeout_ms.to_string())
        .set("auto.offset.reset", &config.kafka.auto_offset_reset)
        .set("enable.partition.eof", "false");
    client
}

/// The settings of producers (dead letters, load generator): idempotent,
/// acknowledged by all in-sync replicas.
pub fn producer_config(config: &Config) -> ClientConfig {
    let mut client = passthrough(config);
    client
        .set("bootstrap.servers", &config.kafka.bootstrap_servers)
        .set("enable.idempotence", "true")
        .set("acks", "all");
    client
}

fn passthrough(config: &Config) -> ClientConfig {
    let mut client = ClientConfig::new();
    for (key, value) in config.librdkafka_passthrough() {
        client.set(key, value);
    }
    client
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_settings_win_over_passthrough() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[kafka.librdkafka]\n\"fetch.min.bytes\" = 1024\n\"client.id\" = \"me\"\n").unwrap();
        let config = Config::from_layers(Some(&path), Vec::new()).unwrap();
        let client = consumer_config(&config);
        assert_eq!(client.get("enable.auto.commit"), Some("false"));
        assert_eq!(client.get("enable.auto.offset.store"), Some("false"));
        assert_eq!(client.get("fetch.min.bytes"), Some("1024"));
        assert_eq!(client.get("client.id"), Some("me"));
        assert_eq!(client.get("fetch.queue.backoff.ms"), Some("10"), "orderly's default");
        assert_eq!(producer_config(&config).get("enable.idempotence"), Some("true"));
    }
}
