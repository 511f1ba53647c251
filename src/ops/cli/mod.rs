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
mod shared;
mod state;
mod workload;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::ConfigError;
use crate::domains::orders::Orders;
use crate::engine::entity::Entity;
use shared::{Chosen, Exit, NoStore, UsageError, EXIT_CODES_HELP};

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
