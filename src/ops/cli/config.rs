//! `config show|check`: the effective configuration printed, or checked
//! against the store directory, the broker, the topics and the registry.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Subcommand;

use super::shared::{Chosen, Exit};
use crate::config::{Config, ENV_PREFIX};
use crate::engine::entity::Entity;
use crate::ops::preflight::{self, Check};

#[derive(Subcommand)]
pub(super) enum ConfigCommand {
    /// Print the effective configuration (defaults, then --config, then ORDERLY_* variables) as TOML, secrets redacted
    Show,
    /// Validate the configuration, then check the store directory, the HTTP address, that this build has the
    /// security protocol and SASL mechanism configured, the broker, the input topic, the group (a missing ACL is named
    /// with the kafka-acls command that grants it), the dead-letter, changelog and output topics, the schema
    /// registry and that every writer schema
    /// registered for the input topic is readable (the schema guard of `run`), one line each; exits 4 at the first
    /// failure
    Check {
        /// How long to wait for the broker's metadata, per check
        #[arg(long, value_name = "MS", default_value_t = 5000)]
        timeout_ms: u64,
    },
}

pub(super) async fn command<E: Entity>(
    command: ConfigCommand,
    chosen: &Chosen<E>,
    file: Option<&Path>,
) -> Result<Exit> {
    match command {
        ConfigCommand::Show => show(file),
        ConfigCommand::Check { timeout_ms } => check(chosen, file, timeout_ms).await,
    }
}

/// `config show`, printed.
fn show(file: Option<&Path>) -> Result<Exit> {
    // Its log filter shows errors only: the warnings go to stderr here.
    let config = Config::load(file).context("configuration")?;
    for warning in crate::config::unused_env_vars(std::env::vars()) {
        eprintln!("warning: {warning}");
    }
    print!("{}", show_config(&config, file)?);
    Ok(Exit::Success)
}

/// `config check`: one line per check, as each ends.
async fn check<E: Entity>(
    chosen: &Chosen<E>,
    file: Option<&Path>,
    timeout_ms: u64,
) -> Result<Exit> {
    let config = match Config::load(file) {
        Ok(config) => config,
        Err(e) => {
            println!(
                "{}",
                Check::fail("config", format!("{e}: fix it, then check again"))
            );
            return Ok(Exit::Config);
        }
    };
    let mut detail = config_sources(file);
    for warning in crate::config::unused_env_vars(std::env::vars()) {
        detail.push_str("; warning: ");
        detail.push_str(&warning);
    }
    println!("{}", Check::ok("config", detail));
    // The entity's own reader schema: a user's binary checks its
    // writer schemas against its entity, not against orders.
    let reader = match chosen {
        Chosen::Given(entity) => entity.reader_schema(),
        Chosen::Configured => crate::domains::reader_schema_for(&config.entity),
    };
    let checked = preflight::Checked {
        key_field: chosen.words(&config).1,
        reader,
    };
    let checks = preflight::check_all(
        &config,
        &checked,
        Duration::from_millis(timeout_ms),
        |check| println!("{check}"),
    )
    .await;
    Ok(if checks.iter().all(|c| c.ok) {
        Exit::Success
    } else {
        Exit::CheckFailed
    })
}

/// The names (not the values) of the environment variables that set keys.
fn env_setting_names() -> Vec<String> {
    let mut names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .filter(|k| k.starts_with(ENV_PREFIX) && k.contains("__"))
        .collect();
    names.sort();
    names
}

/// Where the effective configuration came from, on one line.
fn config_sources(file: Option<&Path>) -> String {
    let file = match file {
        Some(path) => format!("{} over the defaults", preflight::absolute(path).display()),
        None => "the defaults (no --config)".into(),
    };
    let vars = env_setting_names();
    match vars.len() {
        0 => format!("{file}, no {ENV_PREFIX}* variables"),
        n => format!("{file}, {n} {ENV_PREFIX}* variable(s): {}", vars.join(", ")),
    }
}

/// `config show`: the effective configuration as TOML, secrets redacted.
fn show_config(config: &Config, file: Option<&Path>) -> Result<String> {
    let body = config.redacted().to_toml()?;
    Ok(format!(
        "# effective orderly configuration: {}\n# secrets redacted; the rest loads again with --config\n\n{body}",
        config_sources(file)
    ))
}
