//! `[kafka]`: the brokers, topics, group and client settings, and the
//! librdkafka keys a pass-through may not set.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// librdkafka settings the guarantees depend on: a pass-through may not set them.
pub(super) const FORCED_KEYS: &[(&str, &str)] = &[
    (
        "enable.auto.commit",
        "offsets are committed by orderly after the flush",
    ),
    (
        "enable.auto.offset.store",
        "offsets are stored by orderly after the flush",
    ),
    ("group.id", "set kafka.group_id instead"),
    ("bootstrap.servers", "set kafka.bootstrap_servers instead"),
    (
        "partition.assignment.strategy",
        "orderly uses cooperative-sticky",
    ),
    (
        "enable.idempotence",
        "orderly's producers are always idempotent",
    ),
    ("session.timeout.ms", "set kafka.session_timeout_ms instead"),
    ("auto.offset.reset", "set kafka.auto_offset_reset instead"),
    ("group.protocol", "set kafka.group_protocol instead"),
    (
        "acks",
        "orderly's producers wait for all in-sync replicas (acks=all)",
    ),
    (
        "enable.partition.eof",
        "orderly's readers set it as each needs",
    ),
    ("isolation.level", "orderly reads read_committed everywhere"),
    (
        "transactional.id",
        "orderly derives one per partition from the group, topic and partition",
    ),
];

/// The consumer group protocol (`kafka.group_protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupProtocol {
    /// The classic rebalance protocol, with cooperative-sticky assignment.
    Classic,
    /// KIP-848's consumer protocol (Kafka 4.0 and later): the broker
    /// assigns and owns the session timeout.
    Consumer,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    pub bootstrap_servers: String,
    pub group_id: String,
    pub input_topic: String,
    pub dlq_topic: String,
    /// Where `dlq replay` remembers which letters it re-drove: a compacted
    /// topic of its own (one partition), so the dead-letter topic holds
    /// dead letters only; `{dlq_topic}` is replaced.
    pub redrive_topic: String,
    pub session_timeout_ms: u64,
    /// "classic" or "consumer" (KIP-848).
    pub group_protocol: GroupProtocol,
    pub auto_offset_reset: OffsetReset,
    /// The compacted topic every state change is produced to, from which a
    /// moved partition is restored; `{group_id}` is replaced, `""` is off.
    pub changelog_topic: String,
    /// Replication factor of a changelog topic orderly creates (-1: the
    /// broker's default).
    pub(crate) changelog_replication_factor: i32,
    /// Where `OrderStatusChanged` events go (the outbox); `""` is off.
    pub output_topic: String,
    /// How the producers of the input topic map an `order_id` to a
    /// partition (librdkafka's partitioner names), for `/state/{order_id}`.
    pub(crate) input_partitioner: String,
    /// Raw librdkafka settings, applied before the forced ones.
    #[serde(default)]
    pub librdkafka: BTreeMap<String, toml::Value>,
}

/// `kafka.auto_offset_reset`: where a partition with no checkpoint and no
/// committed offset starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OffsetReset {
    Earliest,
    Latest,
}

impl OffsetReset {
    /// librdkafka's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            OffsetReset::Earliest => "earliest",
            OffsetReset::Latest => "latest",
        }
    }
}
