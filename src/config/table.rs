//! The TOML tables the layers are: parsed, merged, and a config file's
//! sections and keys checked against the defaults'.

use std::path::Path;

use super::error::ConfigError;
use super::suggest::{did_you_mean, names};

pub(super) fn parse_table(text: &str, origin: &str) -> Result<toml::Table, ConfigError> {
    text.parse::<toml::Table>()
        .map_err(|e| ConfigError::Syntax {
            origin: origin.into(),
            message: e.to_string(),
        })
}

/// Deep-merges `overlay` into `base`; tables merge, everything else replaces.
pub(super) fn merge(base: &mut toml::Table, overlay: toml::Table) {
    for (key, value) in overlay {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(over)) => merge(inner, over),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Refuses a section or key of a config file that the defaults do not
/// have, naming the closest one (the settings under [kafka.librdkafka] are
/// librdkafka's, checked when the clients are built).
pub(super) fn check_known(
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
