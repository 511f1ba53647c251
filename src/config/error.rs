//! The configuration's errors, and the defaults every layer starts from.

use std::path::PathBuf;

/// The defaults, documented key by key.
pub(crate) const DEFAULT_TOML: &str = include_str!("../../config/default.toml");

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
