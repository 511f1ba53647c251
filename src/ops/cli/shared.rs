//! What the commands share: the exit codes and the errors that choose
//! them, which entity the commands process, and loading the configuration.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::config::{Config, EntityKind, ENV_PREFIX};
use crate::domains::latest::Latest;
use crate::domains::orders::Orders;
use crate::domains::stock::Stock;
use crate::engine::entity::Entity;

/// The process's exit codes; each means one thing (`--help` lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exit {
    Success = 0,
    /// Broker, registry, store or I/O failure at run time.
    Runtime = 1,
    /// Invalid command line (clap exits with 2 itself).
    Usage = 2,
    /// `state get`: no state for the order; `dlq replay --source`: no dead
    /// letter has that source.
    NotFound = 3,
    /// `config check`: a check failed; `explain`: the replay disagrees
    /// with the stored state.
    CheckFailed = 4,
    /// The configuration (file, environment, values) is invalid.
    Config = 5,
    /// A command that only reads the store found none at `store.path`.
    NoStore = 6,
    /// `demo`: the results disagree with the generator's expectation.
    DemoMismatch = 7,
    /// `replay`: the group has active members.
    GroupActive = 8,
    /// `run`: the group's offsets were moved outside orderly (see
    /// `orderly replay`).
    ExternalReset = 9,
    /// Refused by security: `run` by the cluster before consuming
    /// (credentials, TLS, a missing ACL); `run`, `produce` by the schema
    /// registry (401, 403, a TLS certificate that does not verify).
    Security = 10,
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit as u8)
    }
}

/// The exit codes and configuration sources, as `--help` ends (`PROGRAM`:
/// the binary's name).
pub(super) const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  success
  1  runtime error (broker, registry, store or I/O; the message says which)
  2  usage error: invalid command line (or replay arguments that do not fit the topic)
  3  not found: state get (no state for the key), dlq replay --source (no dead letter has that source)
  4  config check: a check failed (its line says what to do); explain: the replay disagrees with the stored state
  5  invalid configuration (file, environment or value; the message names the key)
  6  no store at store.path (state get, dump, stats only read a store; they never create one)
  7  demo: the results disagree with the generator's expectation
  8  replay, repair --apply: refused, the group has active members (stop every instance first)
  9  run: refused, the group's offsets were moved outside orderly (kafka-consumer-groups
     --reset-offsets); move them with PROGRAM replay instead (the message says how)
 10  refused by security: run, by the cluster before consuming (the credentials, the TLS certificate,
     or an ACL orderly needs: the message names which, and the kafka-acls.sh command for an ACL); run,
     produce, by the schema registry (401/403, or its TLS certificate does not verify: the message names
     the URL, the user and the setting to check)

Configuration: config/default.toml (compiled in), then --config FILE, then ORDERLY_<SECTION>__<KEY>
variables (ORDERLY_KAFKA__LIBRDKAFKA__<NAME> for librdkafka settings, `_` read as `.`).
`PROGRAM config show` prints the result, `PROGRAM config check` probes it.";

/// A command that only reads the store was pointed at a directory without one.
#[derive(Debug, thiserror::Error)]
#[error(
    "no store at {0} (store.path): check --config and {ENV_PREFIX}STORE__PATH; this command only reads a store, \
     `{program} run` creates one",
    program = crate::ops::program::name()
)]
pub(super) struct NoStore(pub(super) PathBuf);

/// A command line that parses but does not make sense (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct UsageError(pub(super) String);

/// Which entity the commands process.
pub(super) enum Chosen<E> {
    /// The one `entity.kind` names (the `orderly` binary).
    Configured,
    /// A user's own (their binary).
    Given(E),
}

impl<E: Entity> Chosen<E> {
    /// What the entity is called and the field its key is
    /// ([`Entity::NAME`], [`Entity::KEY_FIELD`]), for the messages.
    pub(super) fn words(&self, config: &Config) -> (&'static str, &'static str) {
        match self {
            Chosen::Given(_) => (E::NAME, E::KEY_FIELD),
            Chosen::Configured => match config.entity.kind {
                EntityKind::Orders => (Orders::NAME, Orders::KEY_FIELD),
                EntityKind::Stock => (Stock::NAME, Stock::KEY_FIELD),
                EntityKind::Latest => (Latest::NAME, Latest::KEY_FIELD),
            },
        }
    }
}

/// The configuration of `--config` (`file`), the environment and the
/// defaults; an environment variable that sets no key is warned about.
pub(super) fn load_config(file: Option<&Path>) -> Result<Config> {
    let config = Config::load(file).context("configuration")?;
    for warning in crate::config::unused_env_vars(std::env::vars()) {
        tracing::warn!("{warning}");
    }
    crate::observe::kafka_link::set_bootstrap(&config.kafka.bootstrap_servers);
    Ok(config)
}
