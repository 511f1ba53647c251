//! Configuration: `config/default.toml` (compiled in), then `--config FILE`,
//! then `ORDERLY_<SECTION>__<KEY>` environment variables. Unknown keys and
//! unsafe combinations are errors that name the key and what is allowed.
//!
//! An environment value takes the type of the key it sets, as the compiled-in
//! defaults declare it: `ORDERLY_KAFKA__GROUP_ID=42` is the string "42", an
//! integer key must parse as an integer. `[kafka.librdkafka]` keys come from
//! `ORDERLY_KAFKA__LIBRDKAFKA__<NAME>`, the name lowercased with `_` read as
//! `.` (`..__SASL_PASSWORD` sets "sasl.password"); librdkafka's settable
//! properties have no underscores in their names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The defaults, documented key by key.
pub(crate) const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// librdkafka settings the guarantees depend on: a pass-through may not set them.
const FORCED_KEYS: &[(&str, &str)] = &[
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

/// What orderly promises about the records it writes to Kafka
/// (`processing.guarantee`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Guarantee {
    /// Dead letters are produced when found and input offsets committed
    /// after the store flush: after a crash a dead letter or a relayed
    /// status change can appear twice on its topic (state and counters are
    /// exact either way).
    AtLeastOnce,
    /// One Kafka transaction per partition write-out.
    ExactlyOnce,
}

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

/// Each message states its cause once: a variant that prints an underlying
/// error keeps it in a field that is not a `source`, so `{:#}` chains (anyhow)
/// do not print it a second time.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {cause}")]
    Read {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("invalid TOML in {origin}: {message}")]
    Syntax { origin: String, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("invalid value for `{key}`: {message}")]
    Value { key: String, message: String },
    /// An `ORDERLY_*` variable that names no key, or whose value does not
    /// parse as the type of its key.
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("cannot print the configuration as TOML: {0}")]
    Print(String),
}

/// What `config show` prints in place of a secret.
pub(crate) const REDACTED: &str = "<redacted>";

/// Parts of librdkafka setting names whose values are secrets (passwords,
/// private keys, JAAS and OAuth configurations, tokens).
const SECRET_MARKERS: &[&str] = &[
    "password",
    "secret",
    "sasl.jaas",
    "sasl.oauthbearer.config",
    "ssl.key.pem",
    "ssl_key",
    "token",
    "credential",
];

/// True when a librdkafka setting's value must not be printed.
pub(crate) fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_MARKERS.iter().any(|marker| key.contains(marker))
}

/// `url` with the password of its user info (`https://user:pw@host`) redacted.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:{REDACTED}@{host}{path}"),
        None => url.to_string(),
    }
}

/// True when `url` has user info (`https://user:pw@host`, `https://user@host`).
fn url_has_userinfo(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    rest[..authority_end].contains('@')
}

/// The whole configuration: `config/default.toml`, then `--config`'s file,
/// then `ORDERLY_<SECTION>__<KEY>` variables ([`Config::load`]), validated.
/// One field per section of the file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[kafka]`: the brokers, topics, group and client settings.
    pub kafka: KafkaConfig,
    /// `[registry]`: the schema registry, its credentials and CA.
    pub registry: RegistryConfig,
    /// `[store]`: where the sled store lives and its cache.
    pub store: StoreConfig,
    /// `[processing]`: the guarantee, batches, write-outs, the inbox, dead
    /// letters, standbys.
    pub processing: ProcessingConfig,
    /// `[outbox]`: the status changes' output topic and delivery.
    pub outbox: OutboxConfig,
    /// `[http]`: the HTTP endpoint.
    pub http: HttpConfig,
    /// `[entity]`: which entity the `orderly` binary processes.
    pub entity: EntityConfig,
}

/// `[entity]`: which entity the `orderly` binary processes.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EntityConfig {
    /// `entity.kind`: orders, stock or latest.
    pub kind: EntityKind,
    /// `latest`: the name of the field holding each event's key.
    pub key_field: String,
    /// `latest`: the field holding the per-key version (a `long` or `int`).
    pub version_field: String,
    /// `latest`: the field holding the event id (a `string`).
    pub event_id_field: String,
    /// `latest`: the field holding when the event occurred (milliseconds);
    /// `""`: none (0 is kept).
    pub occurred_at_field: String,
    /// `latest`: a field whose changes are published to the output topic;
    /// `""`: none.
    pub status_field: String,
}

/// `entity.kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntityKind {
    /// Orders, the built-in domain.
    Orders,
    /// Per-SKU stock levels (restocked, reserved, released).
    Stock,
    /// Any Avro topic, no code: the state of a key is its newest event.
    Latest,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// Where `orderly run` serves `/metrics`, `/healthz`, `/readyz`,
    /// `/state/{order_id}` and the status page; `""` is off.
    pub address: String,
    /// With a value, every route but the status page's HTML (and the
    /// probes and metrics, as configured below) requires
    /// `Authorization: Bearer <token>`; `""` is none.
    pub bearer_token: String,
    /// `/healthz` and `/readyz` answer without the token.
    pub open_probes: bool,
    /// `/metrics` answers without the token.
    pub open_metrics: bool,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct OutboxConfig {
    /// How status changes reach the output topic (at_least_once; exactly_once
    /// always sends them in the write-out's transaction).
    pub delivery: OutboxDelivery,
    /// Pending records per partition past which the backlog is a warning.
    pub(crate) backlog_warn: u64,
    /// Age of the oldest pending record past which it is a warning.
    pub(crate) backlog_warn_age: HumanDuration,
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

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    pub url: String,
    pub timeout_ms: u64,
    /// Basic authentication's user name (`""`: none); set with `password`.
    pub username: String,
    /// Basic authentication's password.
    pub password: Secret,
    /// A bearer token instead of basic authentication (`""`: none).
    pub bearer_token: Secret,
    /// A PEM file of the CA certificate(s) that verify an https registry,
    /// trusted instead of the system's CAs (`""`: the system's).
    pub ca_location: String,
    /// What `run` does when a registered writer schema of the input subject
    /// cannot be read ([`crate::engine::codec::guard`]).
    pub schema_guard: SchemaGuard,
}

impl RegistryConfig {
    /// `ca_location` as a path, `None` when it is `""`.
    pub fn ca_location(&self) -> Option<&Path> {
        let text = self.ca_location.trim();
        (!text.is_empty()).then(|| Path::new(text))
    }
}

/// A setting whose value is a secret (a password, a token): its `Debug`
/// form never shows it, so a `{:?}` of the configuration cannot leak it.
/// `config show` prints [`Config::redacted`], where it is `REDACTED`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("\"\"")
        } else {
            f.write_str(REDACTED)
        }
    }
}

/// `outbox.delivery`: how an at_least_once processor publishes status
/// changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutboxDelivery {
    /// Produced with each write-out (with a changelog, in its
    /// transaction; without, acknowledged before the store is written):
    /// nothing is stored for them, and an output topic that cannot take
    /// them holds the partition's write-outs back (as the changelog does).
    WriteOut,
    /// Stored as outbox rows in the write-out's sled batch (and its
    /// changelog), published by a relay task per partition and deleted once
    /// acknowledged: the input goes on while the output topic is down, and
    /// the backlog grows.
    Relay,
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

/// A duration written as a number with a unit (`250ms`, `30s`, `15m`,
/// `12h`, `7d`): parsed when the configuration is loaded, printed back as
/// it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HumanDuration {
    text: String,
    duration: Duration,
}

impl HumanDuration {
    pub fn get(&self) -> Duration {
        self.duration
    }
}

impl std::str::FromStr for HumanDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Ok(HumanDuration {
            text: text.trim().to_string(),
            duration: parse_duration(text)?,
        })
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// `registry.schema_guard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaGuard {
    /// Refuse to start, naming the version.
    Refuse,
    /// Log a warning naming it, and start.
    Warn,
    /// Do not check.
    Off,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    pub path: PathBuf,
    pub inbox_retention: HumanDuration,
    pub cache_capacity_mb: u64,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessingConfig {
    /// "at_least_once" or "exactly_once" (Kafka transactions).
    pub guarantee: Guarantee,
    pub batch_max_records: usize,
    pub batch_max_wait_ms: u64,
    /// How often a partition writes its dirty orders and checkpoint to the
    /// store (one atomic batch) and reports them for the group flush.
    pub commit_interval_ms: u64,
    /// How soon a partition that has read everything its input holds writes
    /// out, instead of waiting for the commit interval (0: off; at most the
    /// commit interval takes effect).
    pub caught_up_write_ms: u64,
    /// Dirty bytes held in memory across all partitions' order caches before
    /// a partition writes early; also bounds the clean entries kept cached.
    pub cache_max_bytes: u64,
    /// Partitions' write-outs in flight at once in this process, each from
    /// encoding its changes to its store batch (0: no limit; see
    /// [`ProcessingConfig::write_out_turns`]).
    pub concurrent_write_outs: usize,
    pub shutdown_timeout_ms: u64,
    /// The dead-letter breaker (`crate::engine::breaker`): dead letters in a row
    /// that stop a partition (0: off).
    pub dead_letter_max_consecutive: u64,
    /// ...or the share of dead letters in a window of records (0: off).
    pub dead_letter_max_ratio: f64,
    pub(crate) dead_letter_ratio_window: u64,
    /// Warm copies each partition has on other members, kept from the
    /// changelog (`crate::processor::standby`); 0: none.
    pub standby_replicas: u32,
}

impl ProcessingConfig {
    /// The write-out turns `concurrent_write_outs` gives this process
    /// (`None`: no limit, every partition's write-out at once).
    pub fn write_out_turns(&self) -> Option<usize> {
        (self.concurrent_write_outs > 0).then_some(self.concurrent_write_outs)
    }
}

impl Config {
    /// The compiled-in defaults, without file or environment.
    pub fn defaults() -> Result<Self, ConfigError> {
        Self::from_layers(None, std::iter::empty())
    }

    /// Defaults, then `file`, then the process's `ORDERLY_*__*` variables.
    pub fn load(file: Option<&Path>) -> Result<Self, ConfigError> {
        Self::from_layers(file, std::env::vars())
    }

    /// Defaults, then `file`, then the given environment variables.
    pub fn from_layers(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let defaults = parse_table(DEFAULT_TOML, "config/default.toml")?;
        let mut table = defaults.clone();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|cause| ConfigError::Read {
                path: path.to_path_buf(),
                cause,
            })?;
            let overlay = parse_table(&text, &path.display().to_string())?;
            check_known(&overlay, &defaults, path)?;
            merge(&mut table, overlay);
        }
        for (name, raw) in env {
            apply_env(&mut table, &defaults, &name, &raw)?;
        }
        let config: Config =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                let key = e.path().to_string();
                let message = e.into_inner().message().to_string();
                if key.is_empty() || key == "." {
                    ConfigError::Invalid(message)
                } else {
                    ConfigError::Value { key, message }
                }
            })?;
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let value_err = |key: &str, message: String| ConfigError::Value {
            key: key.into(),
            message,
        };
        if self.entity.kind == EntityKind::Latest {
            for (key, text) in [
                ("entity.key_field", &self.entity.key_field),
                ("entity.version_field", &self.entity.version_field),
                ("entity.event_id_field", &self.entity.event_id_field),
            ] {
                if text.trim().is_empty() {
                    return Err(value_err(
                        key,
                        "must name a field of the input topic's events with entity.kind = \"latest\"".into(),
                    ));
                }
            }
        }
        for (key, text) in [
            ("kafka.bootstrap_servers", &self.kafka.bootstrap_servers),
            ("kafka.group_id", &self.kafka.group_id),
            ("kafka.input_topic", &self.kafka.input_topic),
            ("kafka.dlq_topic", &self.kafka.dlq_topic),
            ("registry.url", &self.registry.url),
        ] {
            if text.trim().is_empty() {
                return Err(value_err(key, "must not be empty".into()));
            }
        }
        if self.kafka.input_topic == self.kafka.dlq_topic {
            return Err(value_err(
                "kafka.dlq_topic",
                "must differ from kafka.input_topic".into(),
            ));
        }
        let redrive = self.redrive_topic();
        if redrive.is_empty() {
            return Err(value_err(
                "kafka.redrive_topic",
                "must not be empty (default \"{dlq_topic}.redrive\")".into(),
            ));
        }
        if redrive == self.kafka.input_topic
            || redrive == self.kafka.dlq_topic
            || self.changelog_topic().is_some_and(|c| c == redrive)
            || self.output_topic().is_some_and(|o| o == redrive)
        {
            return Err(value_err(
                "kafka.redrive_topic",
                format!("`{redrive}` must differ from the input, dead-letter, changelog and output topics"),
            ));
        }
        if let Some(changelog) = self.changelog_topic() {
            if changelog == self.kafka.input_topic || changelog == self.kafka.dlq_topic {
                return Err(value_err(
                    "kafka.changelog_topic",
                    format!("`{changelog}` must differ from kafka.input_topic and kafka.dlq_topic"),
                ));
            }
        }
        let output = self.kafka.output_topic.trim();
        if !output.is_empty()
            && (output == self.kafka.input_topic
                || output == self.kafka.dlq_topic
                || self.changelog_topic().is_some_and(|c| c == output))
        {
            return Err(value_err(
                "kafka.output_topic",
                format!("`{output}` must differ from the input, dead-letter and changelog topics"),
            ));
        }
        let ratio = self.processing.dead_letter_max_ratio;
        if !(0.0..=1.0).contains(&ratio) {
            return Err(value_err(
                "processing.dead_letter_max_ratio",
                format!("{ratio} is not a share between 0 and 1 (0.5: more than half of a window; 0: off)"),
            ));
        }
        if ratio > 0.0 && self.processing.dead_letter_ratio_window == 0 {
            return Err(value_err(
                "processing.dead_letter_ratio_window",
                "must be at least 1 while processing.dead_letter_max_ratio is on (set the ratio to 0 to turn it off)".into(),
            ));
        }
        crate::partitioner::Partitioner::from_name(&self.kafka.input_partitioner)
            .map_err(|message| value_err("kafka.input_partitioner", message))?;
        self.http_address()?;
        if self.kafka.changelog_replication_factor == 0
            || self.kafka.changelog_replication_factor < -1
        {
            return Err(value_err(
                "kafka.changelog_replication_factor",
                "must be positive, or -1 for the broker's default".into(),
            ));
        }
        if !(self.registry.url.starts_with("http://") || self.registry.url.starts_with("https://"))
        {
            return Err(value_err(
                "registry.url",
                format!(
                    "`{}` must start with http:// or https://",
                    redact_url(&self.registry.url)
                ),
            ));
        }
        self.validate_registry_access()?;
        for (key, value) in &self.kafka.librdkafka {
            if let Some((_, why)) = FORCED_KEYS.iter().find(|(k, _)| k == key) {
                return Err(value_err(
                    &format!("kafka.librdkafka.\"{key}\""),
                    format!("the guarantees depend on this setting and it cannot be passed through: {why}"),
                ));
            }
            if !matches!(
                value,
                toml::Value::String(_) | toml::Value::Integer(_) | toml::Value::Boolean(_)
            ) {
                return Err(value_err(
                    &format!("kafka.librdkafka.\"{key}\""),
                    "must be a string, integer or boolean".into(),
                ));
            }
        }
        let p = &self.processing;
        if !(1..=100_000).contains(&p.batch_max_records) {
            return Err(value_err(
                "processing.batch_max_records",
                format!("{} is out of range 1..=100000", p.batch_max_records),
            ));
        }
        if p.batch_max_wait_ms > 60_000 {
            return Err(value_err(
                "processing.batch_max_wait_ms",
                "must be at most 60000".into(),
            ));
        }
        if !(1..=60_000).contains(&p.commit_interval_ms) {
            return Err(value_err(
                "processing.commit_interval_ms",
                format!("{} is out of range 1..=60000", p.commit_interval_ms),
            ));
        }
        if p.caught_up_write_ms > 60_000 {
            return Err(value_err(
                "processing.caught_up_write_ms",
                format!("{} is out of range 0..=60000", p.caught_up_write_ms),
            ));
        }
        if p.cache_max_bytes < 1024 * 1024 {
            return Err(value_err(
                "processing.cache_max_bytes",
                format!("{} must be at least 1048576 (1 MiB)", p.cache_max_bytes),
            ));
        }
        if p.concurrent_write_outs > 64 {
            return Err(value_err(
                "processing.concurrent_write_outs",
                format!(
                    "{} is out of range 0..=64 (0: no limit)",
                    p.concurrent_write_outs
                ),
            ));
        }
        if self.kafka.session_timeout_ms < 1000 {
            return Err(value_err(
                "kafka.session_timeout_ms",
                "must be at least 1000".into(),
            ));
        }
        if p.shutdown_timeout_ms == 0 || p.shutdown_timeout_ms >= self.kafka.session_timeout_ms {
            return Err(value_err(
                "processing.shutdown_timeout_ms",
                format!(
                    "{} must be positive and below kafka.session_timeout_ms ({}), so a revoke finishes before the group evicts this member",
                    p.shutdown_timeout_ms, self.kafka.session_timeout_ms
                ),
            ));
        }
        if p.guarantee == Guarantee::ExactlyOnce && self.changelog_topic().is_none() {
            return Err(value_err(
                "processing.guarantee",
                "\"exactly_once\" needs the changelog: a crash after a transaction commits and before the store is \
                 written is repaired from it. Set kafka.changelog_topic (default \"{group_id}-changelog\"), or use \
                 \"at_least_once\""
                    .into(),
            ));
        }
        if p.standby_replicas > 0 && self.changelog_topic().is_none() {
            return Err(value_err(
                "processing.standby_replicas",
                "standbys are kept from the changelog: set kafka.changelog_topic, or standby_replicas = 0".into(),
            ));
        }
        if p.standby_replicas > 16 {
            return Err(value_err(
                "processing.standby_replicas",
                format!("{} is out of range 0..=16", p.standby_replicas),
            ));
        }
        if self.store.cache_capacity_mb == 0 {
            return Err(value_err(
                "store.cache_capacity_mb",
                "must be positive".into(),
            ));
        }
        Ok(())
    }

    /// The registry's credentials and CA: one way to authenticate, both
    /// halves of basic authentication, a CA only for https, and no
    /// credentials inside the URL (it is printed in logs and errors).
    fn validate_registry_access(&self) -> Result<(), ConfigError> {
        let r = &self.registry;
        let value_err = |key: &str, message: &str| ConfigError::Value {
            key: key.into(),
            message: message.into(),
        };
        if url_has_userinfo(&r.url) {
            return Err(value_err(
                "registry.url",
                "carries credentials (user@ or user:password@): set registry.username and registry.password \
                 (ORDERLY_REGISTRY__PASSWORD keeps the password out of the file) and remove them from the URL",
            ));
        }
        let username = !r.username.trim().is_empty();
        match (username, !r.password.is_empty()) {
            (true, false) => {
                return Err(value_err(
                    "registry.password",
                    "is empty while registry.username is set: set the password too (ORDERLY_REGISTRY__PASSWORD keeps \
                     it out of the file), or clear registry.username for a registry without authentication",
                ))
            }
            (false, true) => {
                return Err(value_err(
                    "registry.username",
                    "is empty while registry.password is set: basic authentication needs both; set the user name \
                     (for Confluent Cloud, the API key), or clear registry.password",
                ))
            }
            _ => {}
        }
        if username && !r.bearer_token.expose().trim().is_empty() {
            return Err(value_err(
                "registry.bearer_token",
                "is set together with registry.username: the registry takes one of them; clear the token for \
                 basic authentication, or the username and password for the token",
            ));
        }
        if r.ca_location().is_some() && !r.url.starts_with("https://") {
            return Err(value_err(
                "registry.ca_location",
                "is set but registry.url is not https://: the CA verifies a TLS registry; use its https:// URL, \
                 or clear registry.ca_location",
            ));
        }
        Ok(())
    }

    /// The changelog topic (`{group_id}` replaced), or `None` when the
    /// changelog is off.
    pub fn changelog_topic(&self) -> Option<String> {
        let raw = self.kafka.changelog_topic.trim();
        if raw.is_empty() {
            None
        } else {
            Some(raw.replace("{group_id}", &self.kafka.group_id))
        }
    }

    /// The re-drive log topic (`{dlq_topic}` replaced).
    pub fn redrive_topic(&self) -> String {
        self.kafka
            .redrive_topic
            .trim()
            .replace("{dlq_topic}", &self.kafka.dlq_topic)
    }

    /// The output topic of the outbox, or `None` when it is off.
    pub fn output_topic(&self) -> Option<String> {
        let topic = self.kafka.output_topic.trim();
        (!topic.is_empty()).then(|| topic.to_string())
    }

    /// True when the status changes go out with the write-outs (in their
    /// transaction under exactly_once, or `outbox.delivery = "write_out"`),
    /// false when the outbox relay publishes them.
    pub fn status_in_write_outs(&self) -> bool {
        self.processing.guarantee == Guarantee::ExactlyOnce
            || self.outbox.delivery == OutboxDelivery::WriteOut
    }

    /// The HTTP endpoint's address (`None`: off).
    pub fn http_address(&self) -> Result<Option<std::net::SocketAddr>, ConfigError> {
        let text = self.http.address.trim();
        if text.is_empty() {
            return Ok(None);
        }
        text.parse().map(Some).map_err(|_| ConfigError::Value {
            key: "http.address".into(),
            message: format!("`{text}` is not an IP address and port (e.g. \"127.0.0.1:9898\", \"0.0.0.0:9898\"); \"\" turns the endpoint off"),
        })
    }

    /// `outbox.backlog_warn_age` as a duration (checked when loaded).
    pub(crate) fn outbox_warn_age(&self) -> Duration {
        self.outbox.backlog_warn_age.get()
    }

    /// `store.inbox_retention` as a duration.
    pub fn inbox_retention(&self) -> Duration {
        self.store.inbox_retention.get()
    }

    /// A copy safe to print: secret librdkafka settings, the registry's
    /// password and bearer token, the endpoint's token (and a password in
    /// the registry URL, which validation refuses) replaced by
    /// `REDACTED`.
    pub fn redacted(&self) -> Config {
        let mut config = self.clone();
        for (key, value) in config.kafka.librdkafka.iter_mut() {
            if is_secret_key(key) {
                *value = toml::Value::String(REDACTED.into());
            }
        }
        config.registry.url = redact_url(&config.registry.url);
        for secret in [
            &mut config.registry.password,
            &mut config.registry.bearer_token,
        ] {
            if !secret.is_empty() {
                *secret = Secret::new(REDACTED);
            }
        }
        if !config.http.bearer_token.is_empty() {
            config.http.bearer_token = REDACTED.into();
        }
        config
    }

    /// This configuration as TOML, in the layout of `config/default.toml`
    /// (loadable again with `--config`). Redact it first to print it.
    pub fn to_toml(&self) -> Result<String, ConfigError> {
        toml::to_string(self).map_err(|e| ConfigError::Print(e.to_string()))
    }

    /// The pass-through librdkafka settings as strings.
    pub(crate) fn librdkafka_passthrough(&self) -> impl Iterator<Item = (&str, String)> {
        self.kafka.librdkafka.iter().map(|(k, v)| {
            let text = match v {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.as_str(), text)
        })
    }
}

fn parse_table(text: &str, origin: &str) -> Result<toml::Table, ConfigError> {
    text.parse::<toml::Table>()
        .map_err(|e| ConfigError::Syntax {
            origin: origin.into(),
            message: e.to_string(),
        })
}

/// Deep-merges `overlay` into `base`; tables merge, everything else replaces.
fn merge(base: &mut toml::Table, overlay: toml::Table) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(over)) => merge(inner, over),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Prefix of the environment variables that override settings.
pub(crate) const ENV_PREFIX: &str = "ORDERLY_";

/// `ORDERLY_` variables that are not settings: the binary's own
/// (`--log-format`, the fault-injection build's crash points) and those of
/// the project's scripts and test harness (`kafka/broker`,
/// `registry/apicurio`, the end-to-end suite, the docs and browser tests).
const NOT_SETTINGS: &[&str] = &[
    "LOG_FORMAT",
    "FAULT",
    "KAFKA_PORT",
    "KAFKA_HEAP",
    "KAFKA_CACHE",
    "KAFKA_START_TIMEOUT_S",
    "REGISTRY_PORT",
    "REGISTRY_HEAP",
    "REGISTRY_CACHE",
    "REGISTRY_START_TIMEOUT_S",
    "BLESS_DOCS",
    "CHROMIUM",
    "CHROMEDRIVER",
];

/// Warnings for `ORDERLY_` variables that set nothing: a name without the
/// `__` between section and key (`ORDERLY_KAFKA_BOOTSTRAP_SERVERS`) is
/// otherwise ignored in silence. Each names the variable and, when one is
/// close, the setting it likely meant.
///
/// A warning, not an error like an unknown key in a file or an unknown
/// `ORDERLY_<SECTION>__<KEY>`: the `ORDERLY_` namespace is shared with the
/// scripts and with whatever an operator's wrapper exports, and a variable
/// left over in a shell should not stop a processor from starting.
pub(crate) fn unused_env_vars(env: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    let Ok(defaults) = parse_table(DEFAULT_TOML, "config/default.toml") else {
        return Vec::new();
    };
    let mut warnings = Vec::new();
    for (var, _) in env {
        let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        if rest.contains("__") || NOT_SETTINGS.contains(&rest) || rest.starts_with("E2E_") {
            continue;
        }
        let hint = env_suggestion(&rest.to_ascii_lowercase(), &defaults)
            .map(|name| format!("did you mean {name}? "))
            .unwrap_or_default();
        warnings.push(format!(
            "environment variable {var} sets no setting and is ignored: {hint}settings are \
             {ENV_PREFIX}<SECTION>__<KEY>, two underscores between section and key (`orderly config show` prints \
             the result)"
        ));
    }
    warnings
}

/// The `ORDERLY_<SECTION>__<KEY>` a name without `__` likely meant:
/// `kafka_bootstrap_servers` (a section, one underscore, a key or a typo of
/// one) or `bootstrap_servers` (a key of one section).
fn env_suggestion(name: &str, defaults: &toml::Table) -> Option<String> {
    let var = |section: &str, key: &str| {
        format!(
            "{ENV_PREFIX}{}__{}",
            section.to_ascii_uppercase(),
            key.to_ascii_uppercase()
        )
    };
    for (section, value) in defaults {
        let toml::Value::Table(keys) = value else {
            continue;
        };
        if let Some(key) = name
            .strip_prefix(section.as_str())
            .and_then(|k| k.strip_prefix('_'))
        {
            if keys.contains_key(key) {
                return Some(var(section, key));
            }
            let limit = (key.chars().count() / 3).max(1);
            if let Some((_, close)) = keys
                .keys()
                .map(|k| (edit_distance(key, k), k))
                .filter(|(d, _)| *d <= limit)
                .min()
            {
                return Some(var(section, close));
            }
        }
    }
    defaults.iter().find_map(|(section, value)| match value {
        toml::Value::Table(keys) if keys.contains_key(name) => Some(var(section, name)),
        _ => None,
    })
}

/// Sets the key an `ORDERLY_<SECTION>__<KEY>` (or
/// `ORDERLY_KAFKA__LIBRDKAFKA__<NAME>`) variable names, parsed as the type
/// that key has in `defaults`. Variables without `__` are not settings and
/// are ignored.
fn apply_env(
    table: &mut toml::Table,
    defaults: &toml::Table,
    var: &str,
    raw: &str,
) -> Result<(), ConfigError> {
    let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
        return Ok(());
    };
    if !rest.contains("__") {
        return Ok(());
    }
    let env_err = |message: String| ConfigError::Env {
        var: var.to_string(),
        message,
    };
    let parts: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(env_err(
            "empty name part: use ORDERLY_<SECTION>__<KEY>".into(),
        ));
    }
    let section = &parts[0];
    let Some(toml::Value::Table(section_defaults)) = defaults.get(section) else {
        return Err(env_err(format!(
            "unknown section `{section}`{}: sections are {}",
            did_you_mean(section, defaults),
            names(defaults)
        )));
    };
    let key = &parts[1];
    let Some(default) = section_defaults.get(key) else {
        return Err(env_err(format!(
            "unknown key `{section}.{key}`{}: keys of [{section}] are {}",
            did_you_mean(key, section_defaults),
            names(section_defaults)
        )));
    };
    let section_table = table
        .entry(section.clone())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let toml::Value::Table(section_table) = section_table else {
        return Err(env_err(format!("`{section}` is not a section")));
    };
    if section == "kafka" && key == "librdkafka" {
        let [_, _, name] = parts.as_slice() else {
            return Err(env_err("name the librdkafka setting: ORDERLY_KAFKA__LIBRDKAFKA__<NAME>, e.g. ORDERLY_KAFKA__LIBRDKAFKA__SASL_PASSWORD".into()));
        };
        let entry = section_table
            .entry(key.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let toml::Value::Table(passthrough) = entry else {
            return Err(env_err("`kafka.librdkafka` is not a table".into()));
        };
        passthrough.insert(librdkafka_name(name), toml::Value::String(raw.to_string()));
        return Ok(());
    }
    if parts.len() > 2 {
        return Err(env_err(format!(
            "`{section}.{key}` has no keys below it: use ORDERLY_<SECTION>__<KEY>"
        )));
    }
    let value = typed_like(default, raw).map_err(|message| ConfigError::Value {
        key: format!("{section}.{key}"),
        message: format!("{message} (from {var})"),
    })?;
    section_table.insert(key.clone(), value);
    Ok(())
}

/// The librdkafka property an environment name part sets: `sasl_password`
/// is "sasl.password".
pub(crate) fn librdkafka_name(part: &str) -> String {
    part.to_ascii_lowercase().replace('_', ".")
}

/// `raw` parsed as the type of `default`: a string key takes the text as it
/// is, an integer, float or boolean key must parse as one.
fn typed_like(default: &toml::Value, raw: &str) -> Result<toml::Value, String> {
    let text = raw.trim();
    match default {
        toml::Value::String(_) => Ok(toml::Value::String(raw.to_string())),
        toml::Value::Integer(_) => text
            .replace('_', "")
            .parse::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| format!("`{raw}` is not an integer")),
        toml::Value::Float(_) => text
            .parse::<f64>()
            .map(toml::Value::Float)
            .map_err(|_| format!("`{raw}` is not a number")),
        toml::Value::Boolean(_) => match text.to_ascii_lowercase().as_str() {
            "true" => Ok(toml::Value::Boolean(true)),
            "false" => Ok(toml::Value::Boolean(false)),
            _ => Err(format!("`{raw}` is not a boolean: use true or false")),
        },
        toml::Value::Table(_) => Err("is a section: set its keys, one variable each".into()),
        toml::Value::Array(_) | toml::Value::Datetime(_) => {
            Err("cannot be set from the environment".into())
        }
    }
}

/// Refuses a section or key of a config file that the defaults do not
/// have, naming the closest one (the settings under [kafka.librdkafka] are
/// librdkafka's, checked when the clients are built).
fn check_known(
    overlay: &toml::Table,
    defaults: &toml::Table,
    path: &Path,
) -> Result<(), ConfigError> {
    let unknown = |message: String| ConfigError::Invalid(format!("{}: {message}", path.display()));
    for (section, value) in overlay {
        let Some(toml::Value::Table(section_defaults)) = defaults.get(section) else {
            return Err(unknown(format!(
                "unknown section [{section}]{}; sections are {}",
                did_you_mean(section, defaults),
                names(defaults)
            )));
        };
        let toml::Value::Table(keys) = value else {
            return Err(unknown(format!(
                "`{section}` must be a section ([{section}]), not a value"
            )));
        };
        for key in keys.keys() {
            if !section_defaults.contains_key(key) {
                return Err(unknown(format!(
                    "unknown key `{section}.{key}`{}; keys of [{section}] are {}",
                    did_you_mean(key, section_defaults),
                    names(section_defaults)
                )));
            }
        }
    }
    Ok(())
}

/// `" (did you mean `x`?)"` for the name in `table` closest to `word`,
/// when one is close enough to be a typo; `""` otherwise.
fn did_you_mean(word: &str, table: &toml::Table) -> String {
    let limit = (word.chars().count() / 3).max(1);
    table
        .keys()
        .map(|k| (edit_distance(word, k), k))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default()
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

fn names(table: &toml::Table) -> String {
    table
        .keys()
        .map(|k| format!("`{k}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parses `250ms`, `30s`, `15m`, `12h`, `7d`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| {
        format!("`{text}` is not a duration: use a number and a unit (ms, s, m, h, d), e.g. \"7d\"")
    })?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => {
            return Err(format!(
                "`{text}` has unknown unit `{unit}`: use ms, s, m, h or d"
            ))
        }
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_orderly_variable_that_sets_nothing_is_warned_with_a_suggestion() {
        let vars = |names: &[&str]| {
            unused_env_vars(names.iter().map(|n| (n.to_string(), "x".to_string())))
        };
        let warned = vars(&["ORDERLY_KAFKA_BOOTSTRAP_SERVERS"]);
        assert_eq!(warned.len(), 1, "{warned:?}");
        assert!(
            warned[0].contains("ORDERLY_KAFKA_BOOTSTRAP_SERVERS")
                && warned[0].contains("did you mean ORDERLY_KAFKA__BOOTSTRAP_SERVERS?"),
            "{}",
            warned[0]
        );
        assert!(vars(&["ORDERLY_PROCESSING_BATCH_MAX_RECORD"])[0]
            .contains("did you mean ORDERLY_PROCESSING__BATCH_MAX_RECORDS?"));
        assert!(vars(&["ORDERLY_GROUP_ID"])[0].contains("did you mean ORDERLY_KAFKA__GROUP_ID?"));
        let unknown = vars(&["ORDERLY_WHATEVER"]);
        assert!(unknown[0].contains("ORDERLY_WHATEVER") && !unknown[0].contains("did you mean"));
        assert!(
            vars(&[
                "ORDERLY_KAFKA__BOOTSTRAP_SERVERS",
                "ORDERLY_LOG_FORMAT",
                "ORDERLY_KAFKA_PORT",
                "ORDERLY_E2E_BOOTSTRAP",
                "PATH"
            ])
            .is_empty(),
            "settings, the binary's and the scripts' own variables are not warned"
        );
    }

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_load_and_validate() {
        let c = Config::defaults().unwrap();
        assert_eq!(c.processing.batch_max_records, 1000);
        assert_eq!(c.inbox_retention(), Duration::from_secs(7 * 86_400));
    }

    #[test]
    fn env_overrides_file_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[kafka]\ngroup_id = \"from-file\"\n[processing]\nbatch_max_records = 10\n",
        )
        .unwrap();
        let c = Config::from_layers(
            Some(&path),
            env(&[
                ("ORDERLY_PROCESSING__BATCH_MAX_RECORDS", "500"),
                ("ORDERLY_KAFKA__BOOTSTRAP_SERVERS", "h:1"),
            ]),
        )
        .unwrap();
        assert_eq!(c.kafka.group_id, "from-file");
        assert_eq!(c.processing.batch_max_records, 500);
        assert_eq!(c.kafka.bootstrap_servers, "h:1");
    }

    #[test]
    fn a_misspelt_key_gets_a_suggestion() {
        let err = Config::from_layers(None, env(&[("ORDERLY_PROCESSING__BATCH_MAX_RECORD", "5")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("did you mean `batch_max_records`?"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[kafka]\nbootstrap_server = \"h:1\"\n").unwrap();
        let err = Config::from_layers(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "unknown key `kafka.bootstrap_server` (did you mean `bootstrap_servers`?)"
            ),
            "{err}"
        );
        std::fs::write(&path, "[procesing]\nguarantee = \"exactly_once\"\n").unwrap();
        let err = Config::from_layers(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("unknown section [procesing] (did you mean `processing`?)"),
            "{err}"
        );
        // Nothing close: no guess, the list of keys.
        std::fs::write(&path, "[store]\nzzz = 1\n").unwrap();
        let err = Config::from_layers(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            !err.contains("did you mean") && err.contains("`cache_capacity_mb`"),
            "{err}"
        );
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn unknown_key_names_the_key() {
        let err =
            Config::from_layers(None, env(&[("ORDERLY_PROCESSING__BATCH_SIZE", "5")])).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("batch_size"), "{msg}");
        assert!(
            msg.contains("batch_max_records"),
            "lists what is allowed: {msg}"
        );
    }

    #[test]
    fn auto_commit_passthrough_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(
            &path,
            "[kafka.librdkafka]\n\"enable.auto.commit\" = \"true\"\n",
        )
        .unwrap();
        let msg = Config::from_layers(Some(&path), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("enable.auto.commit"), "{msg}");
    }

    #[test]
    fn shutdown_deadline_must_fit_session_timeout() {
        let msg = Config::from_layers(
            None,
            env(&[("ORDERLY_PROCESSING__SHUTDOWN_TIMEOUT_MS", "20000")]),
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("processing.shutdown_timeout_ms"), "{msg}");
    }

    #[test]
    fn bad_values_are_named() {
        for (var, val, key) in [
            (
                "ORDERLY_STORE__INBOX_RETENTION",
                "7 weeks",
                "store.inbox_retention",
            ),
            (
                "ORDERLY_PROCESSING__BATCH_MAX_RECORDS",
                "0",
                "processing.batch_max_records",
            ),
            (
                "ORDERLY_KAFKA__AUTO_OFFSET_RESET",
                "middle",
                "kafka.auto_offset_reset",
            ),
        ] {
            let msg = Config::from_layers(None, env(&[(var, val)]))
                .unwrap_err()
                .to_string();
            assert!(msg.contains(key), "{var}={val}: {msg}");
        }
        let msg = Config::from_layers(
            None,
            env(&[("ORDERLY_PROCESSING__BATCH_MAX_RECORDS", "many")]),
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("batch_max_records"), "{msg}");
    }

    #[test]
    fn write_out_turns_are_unlimited_by_default_and_bounded() {
        let mut config = Config::defaults().unwrap();
        assert_eq!(config.processing.concurrent_write_outs, 0);
        assert_eq!(config.processing.write_out_turns(), None);
        config.processing.concurrent_write_outs = 1;
        assert_eq!(config.processing.write_out_turns(), Some(1));
        config.processing.concurrent_write_outs = 65;
        let err = config.validate().unwrap_err().to_string();
        assert!(err.contains("processing.concurrent_write_outs"), "{err}");
    }

    #[test]
    fn numeric_group_id_from_env_stays_a_string() {
        let c = Config::from_layers(
            None,
            env(&[
                ("ORDERLY_KAFKA__GROUP_ID", "42"),
                ("ORDERLY_STORE__PATH", "7"),
            ]),
        )
        .unwrap();
        assert_eq!(c.kafka.group_id, "42");
        assert_eq!(c.store.path, PathBuf::from("7"));
    }

    #[test]
    fn integer_from_env_must_parse_and_names_key_and_variable() {
        let err = Config::from_layers(None, env(&[("ORDERLY_KAFKA__SESSION_TIMEOUT_MS", "10s")]))
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("kafka.session_timeout_ms")
                && msg.contains("ORDERLY_KAFKA__SESSION_TIMEOUT_MS"),
            "{msg}"
        );
        assert!(msg.contains("not an integer"), "{msg}");
        let c = Config::from_layers(None, env(&[("ORDERLY_KAFKA__SESSION_TIMEOUT_MS", "12000")]))
            .unwrap();
        assert_eq!(c.kafka.session_timeout_ms, 12000);
    }

    #[test]
    fn librdkafka_settings_from_env() {
        let c = Config::from_layers(
            None,
            env(&[
                ("ORDERLY_KAFKA__LIBRDKAFKA__SASL_PASSWORD", "s3cret"),
                ("ORDERLY_KAFKA__LIBRDKAFKA__SECURITY_PROTOCOL", "SASL_SSL"),
                ("ORDERLY_KAFKA__LIBRDKAFKA__FETCH_MIN_BYTES", "1024"),
            ]),
        )
        .unwrap();
        let pass: BTreeMap<&str, String> = c.librdkafka_passthrough().collect();
        assert_eq!(
            pass.get("sasl.password").map(String::as_str),
            Some("s3cret")
        );
        assert_eq!(
            pass.get("security.protocol").map(String::as_str),
            Some("SASL_SSL")
        );
        assert_eq!(
            pass.get("fetch.min.bytes").map(String::as_str),
            Some("1024")
        );
    }

    #[test]
    fn forced_key_from_env_is_refused() {
        let msg = Config::from_layers(
            None,
            env(&[("ORDERLY_KAFKA__LIBRDKAFKA__ENABLE_AUTO_COMMIT", "true")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("enable.auto.commit") && msg.contains("cannot be passed through"),
            "{msg}"
        );
    }

    #[test]
    fn every_key_the_client_builders_force_is_refused() {
        // acks and enable.partition.eof were forced by the builders but once
        // accepted here, shown by `config show`, and silently overridden.
        for key in [
            "acks",
            "enable.partition.eof",
            "group.protocol",
            "partition.assignment.strategy",
        ] {
            let var = format!(
                "ORDERLY_KAFKA__LIBRDKAFKA__{}",
                key.replace('.', "_").to_uppercase()
            );
            let msg = Config::from_layers(None, env(&[(&var, "1")]))
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains(key) && msg.contains("cannot be passed through"),
                "{key}: {msg}"
            );
        }
    }

    #[test]
    fn exactly_once_needs_the_changelog() {
        assert_eq!(
            Config::defaults().unwrap().processing.guarantee,
            Guarantee::AtLeastOnce
        );
        let c = Config::from_layers(
            None,
            env(&[("ORDERLY_PROCESSING__GUARANTEE", "exactly_once")]),
        )
        .unwrap();
        assert_eq!(c.processing.guarantee, Guarantee::ExactlyOnce);
        let msg = Config::from_layers(
            None,
            env(&[
                ("ORDERLY_PROCESSING__GUARANTEE", "exactly_once"),
                ("ORDERLY_KAFKA__CHANGELOG_TOPIC", ""),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("processing.guarantee") && msg.contains("kafka.changelog_topic"),
            "{msg}"
        );
        let msg = Config::from_layers(
            None,
            env(&[("ORDERLY_PROCESSING__GUARANTEE", "exactly_twice")]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("at_least_once") && msg.contains("exactly_once"),
            "{msg}"
        );
    }

    #[test]
    fn group_protocol_is_classic_or_consumer() {
        assert_eq!(
            Config::defaults().unwrap().kafka.group_protocol,
            GroupProtocol::Classic
        );
        let c = Config::from_layers(None, env(&[("ORDERLY_KAFKA__GROUP_PROTOCOL", "consumer")]))
            .unwrap();
        assert_eq!(c.kafka.group_protocol, GroupProtocol::Consumer);
        let msg = Config::from_layers(None, env(&[("ORDERLY_KAFKA__GROUP_PROTOCOL", "kip848")]))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("kafka.group_protocol")
                && msg.contains("classic")
                && msg.contains("consumer"),
            "{msg}"
        );
    }

    #[test]
    fn env_names_outside_the_schema_are_errors_naming_the_variable() {
        for (var, want) in [
            ("ORDERLY_NOPE__X", "unknown section `nope`"),
            ("ORDERLY_KAFKA__LIBRDKAFKA", "name the librdkafka setting"),
            ("ORDERLY_KAFKA__GROUP_ID__X", "no keys below it"),
            ("ORDERLY_KAFKA__", "empty name part"),
        ] {
            let msg = Config::from_layers(None, env(&[(var, "v")]))
                .unwrap_err()
                .to_string();
            assert!(msg.contains(var) && msg.contains(want), "{var}: {msg}");
        }
        // Variables without `__` are not settings.
        assert!(Config::from_layers(None, env(&[("ORDERLY_E2E_BOOTSTRAP", "x")])).is_ok());
    }

    #[test]
    fn missing_file_states_its_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let err = Config::from_layers(Some(&dir.path().join("absent.toml")), env(&[])).unwrap_err();
        let text = format!("{:#}", anyhow::Error::new(err).context("configuration"));
        assert_eq!(text.matches("os error 2").count(), 1, "{text}");
        assert!(text.contains("absent.toml"), "{text}");
    }

    #[test]
    fn redacted_toml_hides_secrets_and_loads_again() {
        let c = Config::from_layers(
            None,
            env(&[
                ("ORDERLY_KAFKA__LIBRDKAFKA__SASL_PASSWORD", "hunter2"),
                ("ORDERLY_KAFKA__LIBRDKAFKA__SASL_JAAS_CONFIG", "jaas-secret"),
                ("ORDERLY_KAFKA__LIBRDKAFKA__SSL_KEY_PEM", "pem-secret"),
                ("ORDERLY_KAFKA__LIBRDKAFKA__SASL_USERNAME", "alice"),
                ("ORDERLY_REGISTRY__URL", "https://registry:8081/base"),
                ("ORDERLY_REGISTRY__USERNAME", "bob"),
                ("ORDERLY_REGISTRY__PASSWORD", "pw-secret"),
            ]),
        )
        .unwrap();
        let text = c.redacted().to_toml().unwrap();
        for secret in ["hunter2", "jaas-secret", "pem-secret", "pw-secret"] {
            assert!(!text.contains(secret), "{secret} shown:\n{text}");
        }
        assert!(text.contains("alice") && text.contains("\"bob\""), "{text}");
        assert_eq!(text.matches(REDACTED).count(), 4, "{text}");
        // Nor does the Debug form.
        let debug = format!("{c:?}");
        assert!(!debug.contains("pw-secret"), "{debug}");
        // The token, like the password.
        let c = Config::from_layers(
            None,
            env(&[("ORDERLY_REGISTRY__BEARER_TOKEN", "token-secret")]),
        )
        .unwrap();
        let text = c.redacted().to_toml().unwrap();
        assert!(
            !text.contains("token-secret") && text.contains(REDACTED),
            "{text}"
        );
        assert!(!format!("{c:?}").contains("token-secret"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shown.toml");
        std::fs::write(&path, &text).unwrap();
        let again = Config::from_layers(Some(&path), env(&[])).unwrap();
        assert_eq!(again.kafka.group_id, c.kafka.group_id);
        assert_eq!(
            again.processing.batch_max_records,
            c.processing.batch_max_records
        );
    }

    #[test]
    fn registry_credentials_are_checked_and_say_what_to_do() {
        let fails = |vars: &[(&str, &str)], key: &str, want: &str| {
            let msg = Config::from_layers(None, env(vars))
                .unwrap_err()
                .to_string();
            assert!(msg.contains(key) && msg.contains(want), "{vars:?}: {msg}");
            msg
        };
        fails(
            &[("ORDERLY_REGISTRY__USERNAME", "bob")],
            "registry.password",
            "ORDERLY_REGISTRY__PASSWORD",
        );
        fails(
            &[("ORDERLY_REGISTRY__PASSWORD", "pw-secret")],
            "registry.username",
            "needs both",
        );
        fails(
            &[
                ("ORDERLY_REGISTRY__USERNAME", "bob"),
                ("ORDERLY_REGISTRY__PASSWORD", "pw-secret"),
                ("ORDERLY_REGISTRY__BEARER_TOKEN", "t"),
            ],
            "registry.bearer_token",
            "one of them",
        );
        fails(
            &[("ORDERLY_REGISTRY__CA_LOCATION", "/etc/ca.pem")],
            "registry.ca_location",
            "https://",
        );
        for url in [
            "https://bob:pw-secret@registry:8081",
            "https://bob@registry:8081",
            "ftp://bob:pw-secret@registry:8081",
        ] {
            let msg = Config::from_layers(None, env(&[("ORDERLY_REGISTRY__URL", url)]))
                .unwrap_err()
                .to_string();
            assert!(
                msg.contains("registry.url") && !msg.contains("pw-secret"),
                "{url}: {msg}"
            );
        }
        let c = Config::from_layers(
            None,
            env(&[
                ("ORDERLY_REGISTRY__URL", "https://registry:8081/a@b"),
                ("ORDERLY_REGISTRY__USERNAME", "bob"),
                ("ORDERLY_REGISTRY__PASSWORD", "pw-secret"),
                ("ORDERLY_REGISTRY__CA_LOCATION", "/etc/ca.pem"),
            ]),
        )
        .unwrap();
        assert_eq!(c.registry.password.expose(), "pw-secret");
        assert_eq!(c.registry.ca_location(), Some(Path::new("/etc/ca.pem")));
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert!(parse_duration("5").is_err());
    }
}
