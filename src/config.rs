//! Configuration: `config/default.toml` (compiled in), then `--config FILE`,
//! then `ORDERLY_<SECTION>__<KEY>` environment variables. Unknown keys and
//! unsafe combinations are errors that name the key and what is allowed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The defaults, documented key by key.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// librdkafka settings the guarantees depend on: a pass-through may not set them.
const FORCED_KEYS: &[(&str, &str)] = &[
    ("enable.auto.commit", "offsets are committed by orderly after the flush"),
    ("enable.auto.offset.store", "offsets are stored by orderly after the flush"),
    ("group.id", "set kafka.group_id instead"),
    ("bootstrap.servers", "set kafka.bootstrap_servers instead"),
    ("partition.assignment.strategy", "orderly uses cooperative-sticky"),
    ("enable.idempotence", "orderly's producers are always idempotent"),
    ("session.timeout.ms", "set kafka.session_timeout_ms instead"),
    ("auto.offset.reset", "set kafka.auto_offset_reset instead"),
];

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid TOML in {origin}: {message}")]
    Syntax { origin: String, message: String },
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("invalid value for `{key}`: {message}")]
    Value { key: String, message: String },
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub registry: RegistryConfig,
    pub store: StoreConfig,
    pub processing: ProcessingConfig,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    pub bootstrap_servers: String,
    pub group_id: String,
    pub input_topic: String,
    pub dlq_topic: String,
    pub session_timeout_ms: u64,
    pub auto_offset_reset: String,
    /// Raw librdkafka settings, applied before the forced ones.
    #[serde(default)]
    pub librdkafka: BTreeMap<String, toml::Value>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    pub url: String,
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    pub path: PathBuf,
    pub inbox_retention: String,
    pub cache_capacity_mb: u64,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessingConfig {
    pub batch_max_records: usize,
    pub batch_max_wait_ms: u64,
    /// How often a partition writes its dirty orders and checkpoint to the
    /// store (one atomic batch) and reports them for the group flush.
    pub commit_interval_ms: u64,
    /// Dirty bytes held in memory across all partitions' order caches before
    /// a partition writes early; also bounds the clean entries kept cached.
    pub cache_max_bytes: u64,
    pub shutdown_timeout_ms: u64,
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
        let mut table = parse_table(DEFAULT_TOML, "config/default.toml")?;
        if let Some(path) = file {
            let text = std::fs::read_to_string(path)
                .map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
            let overlay = parse_table(&text, &path.display().to_string())?;
            merge(&mut table, overlay);
        }
        for (name, raw) in env {
            let Some(rest) = name.strip_prefix("ORDERLY_") else { continue };
            let Some((section, key)) = rest.split_once("__") else { continue };
            let (section, key) = (section.to_ascii_lowercase(), key.to_ascii_lowercase());
            let entry = table
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let toml::Value::Table(section_table) = entry else {
                return Err(ConfigError::Invalid(format!("{name}: `{section}` is not a section")));
            };
            section_table.insert(key, env_value(&raw));
        }
        let config: Config = serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
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
        let value_err = |key: &str, message: String| ConfigError::Value { key: key.into(), message };
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
            return Err(value_err("kafka.dlq_topic", "must differ from kafka.input_topic".into()));
        }
        if !matches!(self.kafka.auto_offset_reset.as_str(), "earliest" | "latest") {
            return Err(value_err(
                "kafka.auto_offset_reset",
                format!("`{}` is not allowed: use \"earliest\" or \"latest\"", self.kafka.auto_offset_reset),
            ));
        }
        if !(self.registry.url.starts_with("http://") || self.registry.url.starts_with("https://")) {
            return Err(value_err("registry.url", format!("`{}` must start with http:// or https://", self.registry.url)));
        }
        for (key, value) in &self.kafka.librdkafka {
            if let Some((_, why)) = FORCED_KEYS.iter().find(|(k, _)| k == key) {
                return Err(value_err(
                    &format!("kafka.librdkafka.\"{key}\""),
                    format!("the guarantees depend on this setting and it cannot be passed through: {why}"),
                ));
            }
            if !matches!(value, toml::Value::String(_) | toml::Value::Integer(_) | toml::Value::Boolean(_)) {
                return Err(value_err(&format!("kafka.librdkafka.\"{key}\""), "must be a string, integer or boolean".into()));
            }
        }
        self.inbox_retention()?;
        let p = &self.processing;
        if !(1..=100_000).contains(&p.batch_max_records) {
            return Err(value_err("processing.batch_max_records", format!("{} is out of range 1..=100000", p.batch_max_records)));
        }
        if p.batch_max_wait_ms > 60_000 {
            return Err(value_err("processing.batch_max_wait_ms", "must be at most 60000".into()));
        }
        if !(1..=60_000).contains(&p.commit_interval_ms) {
            return Err(value_err("processing.commit_interval_ms", format!("{} is out of range 1..=60000", p.commit_interval_ms)));
        }
        if p.cache_max_bytes < 1024 * 1024 {
            return Err(value_err("processing.cache_max_bytes", format!("{} must be at least 1048576 (1 MiB)", p.cache_max_bytes)));
        }
        if self.kafka.session_timeout_ms < 1000 {
            return Err(value_err("kafka.session_timeout_ms", "must be at least 1000".into()));
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
        if self.store.cache_capacity_mb == 0 {
            return Err(value_err("store.cache_capacity_mb", "must be positive".into()));
        }
        Ok(())
    }

    /// `store.inbox_retention` as a duration.
    pub fn inbox_retention(&self) -> Result<Duration, ConfigError> {
        parse_duration(&self.store.inbox_retention).map_err(|message| ConfigError::Value {
            key: "store.inbox_retention".into(),
            message,
        })
    }

    /// The pass-through librdkafka settings as strings.
    pub fn librdkafka_passthrough(&self) -> impl Iterator<Item = (&str, String)> {
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
        .map_err(|e| ConfigError::Syntax { origin: origin.into(), message: e.to_string() })
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

/// An environment value is read as a TOML scalar when it parses as one
/// (`500`, `true`), otherwise as a plain string.
fn env_value(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .filter(|v| !v.is_table())
        .unwrap_or_else(|| toml::Value::String(raw.to_string()))
}

/// Parses `250ms`, `30s`, `15m`, `12h`, `7d`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a duration: use a number and a unit (ms, s, m, h, d), e.g. \"7d\""))?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => return Err(format!("`{text}` has unknown unit `{unit}`: use ms, s, m, h or d")),
    };
    ms.map(Duration::from_millis).ok_or_else(|| format!("`{text}` is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_load_and_validate() {
        let c = Config::defaults().unwrap();
        assert_eq!(c.processing.batch_max_records, 1000);
        assert_eq!(c.inbox_retention().unwrap(), Duration::from_secs(7 * 86_400));
    }

    #[test]
    fn env_overrides_file_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[kafka]\ngroup_id = \"from-file\"\n[processing]\nbatch_max_records = 10\n").unwrap();
        let c = Config::from_layers(
            Some(&path),
            env(&[("ORDERLY_PROCESSING__BATCH_MAX_RECORDS", "500"), ("ORDERLY_KAFKA__BOOTSTRAP_SERVERS", "h:1")]),
        )
        .unwrap();
        assert_eq!(c.kafka.group_id, "from-file");
        assert_eq!(c.processing.batch_max_records, 500);
        assert_eq!(c.kafka.bootstrap_servers, "h:1");
    }

    #[test]
    fn unknown_key_names_the_key() {
        let err = Config::from_layers(None, env(&[("ORDERLY_PROCESSING__BATCH_SIZE", "5")])).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("batch_size"), "{msg}");
        assert!(msg.contains("batch_max_records"), "lists what is allowed: {msg}");
    }

    #[test]
    fn auto_commit_passthrough_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "[kafka.librdkafka]\n\"enable.auto.commit\" = \"true\"\n").unwrap();
        let msg = Config::from_layers(Some(&path), env(&[])).unwrap_err().to_string();
        assert!(msg.contains("enable.auto.commit"), "{msg}");
    }

    #[test]
    fn shutdown_deadline_must_fit_session_timeout() {
        let msg = Config::from_layers(None, env(&[("ORDERLY_PROCESSING__SHUTDOWN_TIMEOUT_MS", "20000")]))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("processing.shutdown_timeout_ms"), "{msg}");
    }

    #[test]
    fn bad_values_are_named() {
        for (var, val, key) in [
            ("ORDERLY_STORE__INBOX_RETENTION", "7 weeks", "store.inbox_retention"),
            ("ORDERLY_PROCESSING__BATCH_MAX_RECORDS", "0", "processing.batch_max_records"),
            ("ORDERLY_KAFKA__AUTO_OFFSET_RESET", "middle", "kafka.auto_offset_reset"),
        ] {
            let msg = Config::from_layers(None, env(&[(var, val)])).unwrap_err().to_string();
            assert!(msg.contains(key), "{var}={val}: {msg}");
        }
        let msg = Config::from_layers(None, env(&[("ORDERLY_PROCESSING__BATCH_MAX_RECORDS", "many")]))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("batch_max_records"), "{msg}");
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
        assert!(parse_duration("5").is_err());
    }
}
