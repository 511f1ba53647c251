//! The `ORDERLY_<SECTION>__<KEY>` layer: each variable set as the type its
//! key has in the defaults, and warnings for `ORDERLY_` variables that set
//! nothing.

use super::error::{ConfigError, DEFAULT_TOML};
use super::suggest::{did_you_mean, edit_distance, names};
use super::table::parse_table;

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
pub(super) fn apply_env(
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
