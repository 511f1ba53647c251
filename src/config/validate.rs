//! The checks a loaded configuration must pass: values in range, topics
//! that differ, settings that need each other. The first that fails is the
//! error, naming the key and what is allowed; the order of the steps is the
//! order they are reported in.

use super::kafka::FORCED_KEYS;
use super::registry::{redact_url, url_has_userinfo};
use super::{Config, ConfigError, EntityKind, Guarantee};

/// The error for `key`'s value.
fn value_err(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Value {
        key: key.into(),
        message: message.into(),
    }
}

impl Config {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        self.validate_entity_fields()?;
        self.validate_required()?;
        self.validate_topics()?;
        self.validate_dead_letter_limits()?;
        crate::partitioner::Partitioner::from_name(&self.kafka.input_partitioner)
            .map_err(|message| value_err("kafka.input_partitioner", message))?;
        self.http_address()?;
        if self.kafka.changelog_replication_factor == 0
            || self.kafka.changelog_replication_factor < -1
        {
            return Err(value_err(
                "kafka.changelog_replication_factor",
                "must be positive, or -1 for the broker's default",
            ));
        }
        self.validate_registry_url()?;
        self.validate_registry_access()?;
        self.validate_passthrough()?;
        self.validate_processing_bounds()?;
        self.validate_timeouts()?;
        self.validate_changelog_needs()?;
        if self.processing.standby_replicas > 16 {
            return Err(value_err(
                "processing.standby_replicas",
                format!(
                    "{} is out of range 0..=16",
                    self.processing.standby_replicas
                ),
            ));
        }
        if self.store.cache_capacity_mb == 0 {
            return Err(value_err("store.cache_capacity_mb", "must be positive"));
        }
        Ok(())
    }

    /// `entity.kind = "latest"` names the fields it reads.
    fn validate_entity_fields(&self) -> Result<(), ConfigError> {
        if self.entity.kind == EntityKind::Latest {
            for (key, text) in [
                ("entity.key_field", &self.entity.key_field),
                ("entity.version_field", &self.entity.version_field),
                ("entity.event_id_field", &self.entity.event_id_field),
            ] {
                if text.trim().is_empty() {
                    return Err(value_err(
                        key,
                        "must name a field of the input topic's events with entity.kind = \"latest\"",
                    ));
                }
            }
        }
        Ok(())
    }

    /// The settings without which nothing can be read.
    fn validate_required(&self) -> Result<(), ConfigError> {
        for (key, text) in [
            ("kafka.bootstrap_servers", &self.kafka.bootstrap_servers),
            ("kafka.group_id", &self.kafka.group_id),
            ("kafka.input_topic", &self.kafka.input_topic),
            ("kafka.dlq_topic", &self.kafka.dlq_topic),
            ("registry.url", &self.registry.url),
        ] {
            if text.trim().is_empty() {
                return Err(value_err(key, "must not be empty"));
            }
        }
        Ok(())
    }

    /// The input, dead-letter, re-drive, changelog and output topics are
    /// distinct: one written as another would mix their records.
    fn validate_topics(&self) -> Result<(), ConfigError> {
        if self.kafka.input_topic == self.kafka.dlq_topic {
            return Err(value_err(
                "kafka.dlq_topic",
                "must differ from kafka.input_topic",
            ));
        }
        let redrive = self.redrive_topic();
        if redrive.is_empty() {
            return Err(value_err(
                "kafka.redrive_topic",
                "must not be empty (default \"{dlq_topic}.redrive\")",
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
        Ok(())
    }

    /// The dead-letter breaker's ratio is a share, over a window of at
    /// least one record.
    fn validate_dead_letter_limits(&self) -> Result<(), ConfigError> {
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
                "must be at least 1 while processing.dead_letter_max_ratio is on (set the ratio to 0 to turn it off)",
            ));
        }
        Ok(())
    }

    /// The registry is reached over http or https.
    fn validate_registry_url(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// The registry's credentials and CA: one way to authenticate, both
    /// halves of basic authentication, a CA only for https, and no
    /// credentials inside the URL (it is printed in logs and errors).
    fn validate_registry_access(&self) -> Result<(), ConfigError> {
        let r = &self.registry;
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

    /// `[kafka.librdkafka]` sets none of the keys the guarantees depend on,
    /// and only strings, integers and booleans.
    fn validate_passthrough(&self) -> Result<(), ConfigError> {
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
                    "must be a string, integer or boolean",
                ));
            }
        }
        Ok(())
    }

    /// `[processing]`'s batches, write-outs and cache within their ranges.
    fn validate_processing_bounds(&self) -> Result<(), ConfigError> {
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
                "must be at most 60000",
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
        Ok(())
    }

    /// The session timeout, and a drain that finishes within it.
    fn validate_timeouts(&self) -> Result<(), ConfigError> {
        let p = &self.processing;
        if self.kafka.session_timeout_ms < 1000 {
            return Err(value_err(
                "kafka.session_timeout_ms",
                "must be at least 1000",
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
        Ok(())
    }

    /// exactly_once and standbys need the changelog.
    fn validate_changelog_needs(&self) -> Result<(), ConfigError> {
        let p = &self.processing;
        if p.guarantee == Guarantee::ExactlyOnce && self.changelog_topic().is_none() {
            return Err(value_err(
                "processing.guarantee",
                "\"exactly_once\" needs the changelog: a crash after a transaction commits and before the store is \
                 written is repaired from it. Set kafka.changelog_topic (default \"{group_id}-changelog\"), or use \
                 \"at_least_once\"",
            ));
        }
        if p.standby_replicas > 0 && self.changelog_topic().is_none() {
            return Err(value_err(
                "processing.standby_replicas",
                "standbys are kept from the changelog: set kafka.changelog_topic, or standby_replicas = 0",
            ));
        }
        Ok(())
    }
}
