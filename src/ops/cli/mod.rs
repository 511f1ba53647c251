//! The command line: `run`, `demo`, `produce`, `state`, `dlq`, `config`,
//! for the `orderly` binary ([`main`]: the entity `entity.kind` names) and
//! for a binary of a user's own entity ([`main_with`]).
//!
//! Each command's flags and handler are in its own module (`run`, `demo`,
//! `produce`, ...); this one parses the command line, sets up the logs,
//! hands the command to its handler and maps a failure to its exit code.

// The doc comments of the commands and flags are clap's `--help` text,
// where `<SEED>` is the usual placeholder, not an HTML tag.
#![allow(rustdoc::invalid_html_tags)]

mod config;
mod demo;
mod dlq;
mod explain;
mod produce;
mod repair;
mod replay;
mod run;
mod state;
mod workload;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::{Config, ConfigError, EntityKind, ENV_PREFIX};
use crate::domains::latest::Latest;
use crate::domains::orders::Orders;
use crate::domains::stock::Stock;
use crate::engine::entity::Entity;

/// The process's exit codes; each means one thing (`--help` lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
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
const EXIT_CODES_HELP: &str = "\
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
struct NoStore(PathBuf);

/// A command line that parses but does not make sense (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

#[derive(Parser)]
#[command(
    name = "orderly",
    version,
    about = "Ordered, idempotent Kafka event processor with an embedded sled store"
)]
struct Cli {
    /// TOML file overriding config/default.toml (ORDERLY_<SECTION>__<KEY> variables override both)
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log lines on stderr as text, or as one JSON object per line (for log shippers; with the span fields:
    /// topic, partition, group)
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "ORDERLY_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Join the consumer group and process until SIGTERM/SIGINT, then drain, flush, commit and leave
    ///
    /// Needs: the broker (kafka.bootstrap_servers); the input topic (kafka.input_topic) and the dead-letter topic
    /// (kafka.dlq_topic), both created beforehand; the output topic (kafka.output_topic) with the input topic's
    /// partition count while the outbox is on; a Confluent-compatible schema registry (registry.url) whose writer
    /// schemas of <input_topic>-value orderly can read (the schema guard, registry.schema_guard). The changelog
    /// topic is created when missing. `orderly config check` checks all of these first, with the command that
    /// fixes each.
    ///
    /// While it runs it serves HTTP on http.address (default 127.0.0.1:9898; "" is off): GET /metrics
    /// (Prometheus), /healthz, /readyz, /state/{key} (the entity key: an order id by default)
    /// and the status page at /.
    Run,
    /// Run the processor over a generated workload on an in-process mock Kafka cluster (no external service);
    /// uses the processing and store settings of --config, not its Kafka or registry settings
    ///
    /// The workload is orders, or with --entity stock (or entity.kind = "stock") per-SKU stock levels; either has
    /// duplicates, reordered events and poison records. The counters, every key's final state and the status
    /// changes published are checked against the generator's expectation (exit code 7 if anything disagrees).
    Demo(demo::DemoArgs),
    /// Generate a workload and produce it to the configured input topic and registry
    Produce(produce::ProduceArgs),
    /// Read the local store (while the processor is stopped); never creates one
    State {
        #[command(subcommand)]
        command: state::StateCommand,
    },
    /// Find changelog partitions that a lost transaction marker left open (Kafka 4.3 and 4.4 after a partition had
    /// no leader: restores wait at them, then stop), and with --apply repair them: abort the transaction, send the
    /// partition back to the last checkpoint before it and process the input again from there, publishing nothing
    /// twice; refused while the group has active members. Speaks PLAINTEXT to the brokers
    Repair(repair::RepairArgs),
    /// Move partitions of the input topic to a new offset on every instance (checkpoints and the group's
    /// committed offsets), like Kafka's offset reset tools; refused while the group has active members
    Replay(replay::ReplayArgs),
    /// Why each input record of one key was applied, dropped (a duplicate, or stale) or dead-lettered: the engine's
    /// rules replayed over the key's records in its input partition, checked against the stored state
    Explain(explain::ExplainArgs),
    /// Inspect the dead-letter topic (kafka.dlq_topic), and re-publish dead letters to the input topic after a fix
    Dlq {
        #[command(subcommand)]
        command: dlq::DlqCommand,
    },
    /// Show the effective configuration, or check it against the broker, topics and registry
    Config {
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
}

/// The `orderly` binary's `main`: the entity is the one `entity.kind` names.
pub fn main() -> std::process::ExitCode {
    start(Chosen::<Orders>::Configured)
}

/// The `main` of a binary of `entity`: the whole command line for it
/// (`run`, `replay`, `dlq`, `state`, `config`; `demo` and `produce` generate
/// orders and are for the built-in domains only) and the HTTP endpoint.
pub fn main_with<E: Entity + Clone>(entity: E) -> std::process::ExitCode {
    start(Chosen::Given(entity))
}

/// Which entity the commands process.
enum Chosen<E> {
    /// The one `entity.kind` names (the `orderly` binary).
    Configured,
    /// A user's own (their binary).
    Given(E),
}

impl<E: Entity> Chosen<E> {
    /// What the entity is called and the field its key is
    /// ([`Entity::NAME`], [`Entity::KEY_FIELD`]), for the messages.
    fn words(&self, config: &Config) -> (&'static str, &'static str) {
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

/// The command line as this binary presents it: its own name in usage and
/// hints, and for a user's own entity (`main_with`) the key as that entity
/// names it, with `demo` and `produce` (built-in domains only) hidden.
fn parse_cli<E: Entity>(chosen: &Chosen<E>) -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let program = crate::ops::program::name();
    let mut command = Cli::command()
        .name(program)
        .bin_name(program)
        .after_help(EXIT_CODES_HELP.replace("PROGRAM", program));
    if let Chosen::Given(_) = chosen {
        let (name, field) = (E::NAME, E::KEY_FIELD);
        command = command
            .about(format!(
                "Ordered, idempotent Kafka processor of {name} events (keyed by {field}) with an embedded sled store, \
                 built on orderly"
            ))
            .mut_subcommand("demo", |c| c.hide(true))
            .mut_subcommand("produce", |c| c.hide(true))
            .mut_subcommand("run", |c| {
                c.long_about(format!(
                    "Join the consumer group and process until SIGTERM/SIGINT, then drain, flush, commit and leave\n\n\
                     While it runs it serves HTTP on http.address (default 127.0.0.1:9898; \"\" is off): GET /metrics \
                     (Prometheus), /healthz, /readyz, /state/{{{field}}} (one {name}'s state) and the status page at /. \
                     `{program} config check` checks the broker, the topics and the registry first."
                ))
            })
            .mut_subcommand("state", |state| {
                state
                    .mut_subcommand("get", |get| {
                        get.about(format!(
                            "One {name}'s state, from the local store (with `run` stopped: the store opens in one \
                             process at a time; ask a running one at /state/{})",
                            field.to_uppercase()
                        ))
                        .mut_arg("order_id", |arg| {
                            arg.value_name(field.to_uppercase()).help(format!(
                                "The {name}'s {field} (the input records' key); `{program} state dump` lists every {name} \
                                 in the store"
                            ))
                        })
                    })
                    .mut_subcommand("dump", |dump| {
                        dump.about(format!("Every {name}'s state with its input partition, as JSON lines"))
                    })
            });
    }
    let matches = command.try_get_matches()?;
    Cli::from_arg_matches(&matches)
}

fn start<E: Entity + Clone>(chosen: Chosen<E>) -> std::process::ExitCode {
    crate::ops::program::set_from_args();
    let cli = match parse_cli(&chosen) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if prints_to_a_reader(&cli.command) {
        // Rust ignores SIGPIPE, so a write to a closed pipe fails (a panic in
        // println!). A command whose output is read, as in `orderly state dump
        // | head`, ends quietly on it instead, like any Unix tool.
        //
        // SAFETY: called first thing in main, before any thread exists;
        // setting a signal's disposition to its default is async-signal-safe.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    init_logging(cli.log_format, &cli.command);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return Exit::Runtime.into();
        }
    };
    let outcome = runtime.block_on(dispatch(cli, chosen));
    // A blocking call that never returned (a librdkafka transactional call
    // past its bound, given up by its partition) must not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(5));
    match outcome {
        Ok(exit) => exit.into(),
        Err(e) => {
            // Each cause once: a library error that prints its source is not
            // followed by that source again.
            eprintln!("error: {}", crate::error_chain::error_text(e.as_ref()));
            exit_for(&e).into()
        }
    }
}

/// Log lines on stderr, as text or JSON (`--log-format`), filtered by
/// RUST_LOG or else by the command's own default.
fn init_logging(format: LogFormat, command: &Command) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default_log_filter(command)));
    // librdkafka's repeats (every client's "brokers are down", per-broker
    // transport errors) fold into one line per change of the connection.
    let fold = crate::observe::kafka_link::KafkaLogFold;
    let registry = tracing_subscriber::registry().with(filter).with(fold);
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        // Each line carries the current span's fields (a partition task's
        // topic, partition and group) and the spans it is in.
        LogFormat::Json => registry
            .with(logs.json().with_current_span(true).with_span_list(true))
            .init(),
        LogFormat::Text => registry
            .with(logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())))
            .init(),
    }
}

/// The exit code of a failed command.
fn exit_for(error: &anyhow::Error) -> Exit {
    let replay = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<crate::ops::replay::ReplayError>())
        .or_else(|| {
            error.chain().find_map(|cause| match cause.downcast_ref() {
                Some(crate::ops::repair::RepairError::Replay(replay)) => Some(replay),
                _ => None,
            })
        });
    if let Some(replay) = replay {
        if matches!(
            replay,
            crate::ops::replay::ReplayError::ActiveMembers { .. }
        ) {
            return Exit::GroupActive;
        }
        if matches!(
            replay,
            crate::ops::replay::ReplayError::ExternalReset { .. }
        ) {
            return Exit::ExternalReset;
        }
        if replay.is_usage() {
            return Exit::Usage;
        }
    }
    let registry = error
        .chain()
        .find_map(|cause| cause.downcast_ref::<crate::registry::RegistryError>());
    match registry {
        Some(e) if e.is_access_failure() => return Exit::Security,
        Some(crate::registry::RegistryError::CaFile { .. }) => return Exit::Config,
        _ => {}
    }
    if error
        .chain()
        .any(|cause| cause.is::<crate::kafka::acl::AclError>())
    {
        Exit::Security
    } else if error.chain().any(|cause| cause.is::<ConfigError>()) {
        Exit::Config
    } else if error.chain().any(|cause| cause.is::<UsageError>()) {
        Exit::Usage
    } else if error.chain().any(|cause| cause.is::<NoStore>()) {
        Exit::NoStore
    } else {
        Exit::Runtime
    }
}

/// True for the commands that only read and print (`config`, `state`, `dlq
/// list`), whose output may go to `head`. Not the ones that write to Kafka or
/// run (`run`, `demo`, `produce`, `replay`, `dlq replay`): a closed pipe
/// must not stop them half-way.
fn prints_to_a_reader(command: &Command) -> bool {
    matches!(
        command,
        Command::Config { .. }
            | Command::State { .. }
            | Command::Explain(_)
            | Command::Dlq {
                command: dlq::DlqCommand::List { .. }
            }
    )
}

fn default_log_filter(command: &Command) -> &'static str {
    match command {
        // The demo's own poison records include unknown schema ids, whose
        // warning reads like a misconfigured registry; its summary counts
        // them as dead letters instead.
        Command::Demo(_) => "warn,orderly::engine::codec=error",
        Command::State { .. } => "warn",
        // Its progress is its own line on a terminal.
        Command::Explain(_) => "warn,librdkafka=warn,rdkafka=warn",
        // The checks report broker errors on their own lines.
        Command::Config { .. } => "error,librdkafka=off,rdkafka=off",
        _ => "info,librdkafka=warn,rdkafka=warn",
    }
}

/// The configuration of `--config` (`file`), the environment and the
/// defaults; an environment variable that sets no key is warned about.
fn load_config(file: Option<&Path>) -> Result<Config> {
    let config = Config::load(file).context("configuration")?;
    for warning in crate::config::unused_env_vars(std::env::vars()) {
        tracing::warn!("{warning}");
    }
    crate::observe::kafka_link::set_bootstrap(&config.kafka.bootstrap_servers);
    Ok(config)
}

/// Runs the command: each has its handler in its own module.
async fn dispatch<E: Entity + Clone>(cli: Cli, chosen: Chosen<E>) -> Result<Exit> {
    let file = cli.config.as_deref();
    match cli.command {
        Command::Run => run::command(chosen, file).await,
        Command::Replay(args) => replay::command(args, file).await,
        Command::Repair(args) => repair::command(args, file).await,
        Command::Demo(args) => demo::command(args, &chosen, file).await,
        Command::Produce(args) => produce::command(args, &chosen, file).await,
        Command::State { command } => state::command(command, chosen, file),
        Command::Explain(args) => explain::command(args, chosen, file).await,
        Command::Dlq { command } => dlq::command(command, file).await,
        Command::Config { command } => config::command(command, &chosen, file).await,
    }
}
