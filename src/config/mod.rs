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
//!
//! This file holds the [`Config`] type and its layers; each section of the
//! file has its own module (`kafka`, `registry`, `store`, `processing`,
//! `outbox`, `http`, `entity`), the layers their helpers (`table` for the
//! TOML tables, `env` for the variables, `suggest` for the closest name to
//! a typo), and `validate` the checks a loaded configuration must pass.

mod duration;
mod entity;
mod env;
mod error;
mod http;
mod kafka;
mod outbox;
mod processing;
mod registry;
mod secret;
mod store;
mod suggest;
mod table;
#[cfg(test)]
mod tests;
mod validate;

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use entity::{EntityConfig, EntityKind};
pub(crate) use env::{unused_env_vars, ENV_PREFIX};
pub(crate) use http::HttpConfig;
pub(crate) use kafka::{GroupProtocol, KafkaConfig, OffsetReset};
pub(crate) use outbox::{OutboxConfig, OutboxDelivery};
pub use processing::Guarantee;
pub(crate) use processing::ProcessingConfig;
pub(crate) use registry::{RegistryConfig, SchemaGuard};
pub(crate) use secret::Secret;
pub(crate) use secret::{is_secret_key, REDACTED};
pub(crate) use store::StoreConfig;

pub(crate) use error::ConfigError;
pub(crate) use error::DEFAULT_TOML;

use env::apply_env;
use registry::redact_url;
use table::{check_known, merge, parse_table};

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
