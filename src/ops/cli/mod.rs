//! The command line: `run`, `demo`, `produce`, `state`, `dlq`, `config`,
//! for the `orderly` binary ([`main`]: the entity `entity.kind` names) and
//! for a binary of a user's own entity ([`main_with`]).

// The doc comments of the commands and flags are clap's `--help` text,
// where `<SEED>` is the usual placeholder, not an HTML tag.
#![allow(rustdoc::invalid_html_tags)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use rdkafka::producer::FutureProducer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use crate::config::EntityKind;
use crate::config::{Config, ConfigError, ENV_PREFIX};
use crate::domains::latest::Latest;
use crate::domains::orders::codec::Encoder;
use crate::domains::orders::workload::{plan, IdFormat, Shape, WorkloadSpec};
use crate::domains::orders::Orders;
use crate::domains::stock::Stock;
use crate::engine::entity::Entity;
use crate::engine::store::{Checkpoint, Store};
use crate::ops::demo::{run_demo, DemoOptions, DemoWorkload};
use crate::ops::load::produce_planned;
use crate::ops::preflight::{self, Check};
use crate::ops::redrive::{self, ReplayRequest, Selection, SourcePos, DEFAULT_MAX_REDRIVES};
use crate::processor::{producer_config, Processor};
use crate::registry::Registry;

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

/// The built-in domains `demo` can generate.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DemoEntity {
    Orders,
    Stock,
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
    Demo {
        /// The domain to generate and process: orders or stock (default: entity.kind, orders unless configured)
        #[arg(long, value_enum, value_name = "ENTITY")]
        entity: Option<DemoEntity>,
        /// Print the summary as one JSON object
        #[arg(long)]
        json: bool,
        /// Keep the store in this directory instead of a temporary one
        #[arg(long, value_name = "DIR")]
        store_dir: Option<PathBuf>,
        /// Partitions of the input topic (the mock cluster keeps at most 5 MiB per partition)
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        #[command(flatten)]
        workload: WorkloadArgs,
    },
    /// Generate a workload and produce it to the configured input topic and registry
    Produce {
        #[command(flatten)]
        workload: WorkloadArgs,
        /// Give every order exactly N events (CREATED, PAID, SHIPPED updates, DELIVERED) instead of 1 to 4
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        events_per_order: Option<u32>,
        /// How each order's events spread over the topic: clustered (each order's events in a short window) or
        /// interleaved (every order's events spread over the whole topic)
        #[arg(long, value_enum, default_value_t = Shape::Clustered, hide_possible_values = true)]
        shape: Shape,
        /// How event ids are written: uuid (canonical lowercase UUID with hyphens, 36 characters) or hex32 (32
        /// lowercase hex characters, a UUID's simple form)
        #[arg(long, value_enum, default_value_t = IdFormat::Uuid, hide_possible_values = true)]
        id_format: IdFormat,
        /// Write the independently computed expected outcome (counts and final states) to this JSON file
        #[arg(long, value_name = "FILE")]
        expect_out: Option<PathBuf>,
    },
    /// Read the local store (while the processor is stopped); never creates one
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Find changelog partitions that a lost transaction marker left open (Kafka 4.3 and 4.4 after a partition had
    /// no leader: restores wait at them, then stop), and with --apply repair them: abort the transaction, send the
    /// partition back to the last checkpoint before it and process the input again from there, publishing nothing
    /// twice; refused while the group has active members. Speaks PLAINTEXT to the brokers
    Repair {
        /// Only these changelog partitions (the same numbers as the input's); repeatable, or comma-separated
        #[arg(long, value_name = "P", value_delimiter = ',')]
        partitions: Vec<i32>,
        /// Repair what is found (needs the right to write transaction markers: ClusterAction on the cluster)
        #[arg(long)]
        apply: bool,
        /// Finish a repair interrupted after it aborted the transaction that began at this changelog offset (its
        /// log names the command): one partition, with --partitions
        #[arg(long, value_name = "OFFSET", conflicts_with = "apply")]
        after_abort: Option<i64>,
        /// Print the findings as JSON instead of lines
        #[arg(long)]
        json: bool,
    },
    /// Move partitions of the input topic to a new offset on every instance (checkpoints and the group's
    /// committed offsets), like Kafka's offset reset tools; refused while the group has active members
    #[command(group(clap::ArgGroup::new("target").required(true).args(["to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by"])))]
    Replay {
        /// The start of each partition (its low watermark)
        #[arg(long)]
        to_earliest: bool,
        /// The end of each partition: what is there now is passed over (counted as skipped)
        #[arg(long)]
        to_latest: bool,
        /// This offset, in every chosen partition
        #[arg(long, value_name = "N")]
        to_offset: Option<i64>,
        /// The first record at or after this time (RFC 3339, UTC: 2026-12-01T10:00:00Z)
        #[arg(long, value_name = "RFC3339")]
        to_datetime: Option<String>,
        /// Move by N records from where each partition resumes today (negative: back), within the partition
        #[arg(long, value_name = "N", allow_hyphen_values = true)]
        shift_by: Option<i64>,
        /// Only this partition (repeatable); default every partition
        #[arg(long = "partition", value_name = "P")]
        partitions: Vec<i32>,
        /// Clear the chosen partitions' state, inbox and counters: rebuilt from the new offset
        #[arg(long)]
        reset_state: bool,
        /// Print the plan (checkpoint, committed, new and end offsets) and change nothing
        #[arg(long)]
        dry_run: bool,
        /// Print the plan as JSON
        #[arg(long)]
        json: bool,
    },
    /// Why each input record of one key was applied, dropped (a duplicate, or stale) or dead-lettered: the engine's
    /// rules replayed over the key's records in its input partition, checked against the stored state
    Explain {
        /// The entity's key (an order id, a SKU, ...)
        key: String,
        /// Where the read of the key's partition starts: `earliest` (its first retained record), an offset, or an
        /// RFC 3339 time (2026-12-01T10:00:00Z)
        #[arg(long, value_name = "WHERE", default_value = "earliest")]
        from: crate::ops::explain::Start,
        /// Keep at most this many records of the key (the read stops at the last)
        #[arg(long, value_name = "N", default_value_t = 10_000)]
        max_records: usize,
        /// Print the report as JSON instead of lines
        #[arg(long)]
        json: bool,
    },
    /// Inspect the dead-letter topic (kafka.dlq_topic), and re-publish dead letters to the input topic after a fix
    Dlq {
        #[command(subcommand)]
        command: DlqCommand,
    },
    /// Show the effective configuration, or check it against the broker, topics and registry
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
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

#[derive(Subcommand)]
enum DlqCommand {
    /// One row per dead letter (every partition, up to the end offsets at start), newest last: source topic,
    /// partition and offset, error kind and message, when it was dead-lettered, re-drive count, whether re-driven
    List {
        /// Show only the newest N letters
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Print a JSON array of letters (messages whole) instead of the table
        #[arg(long)]
        json: bool,
    },
    /// Re-publish dead letters' original key and payload to kafka.input_topic, into the partition each came from,
    /// each once: progress is committed under the group <group_id>-dlq-redrive and the re-drive log
    /// (kafka.redrive_topic, a compacted topic created when missing) names what was sent; the dead-letter topic
    /// holds dead letters only
    #[command(group = clap::ArgGroup::new("letters").required(true).args(["all", "source"]))]
    Replay {
        /// Every letter after the committed re-drive progress
        #[arg(long)]
        all: bool,
        /// The letter of this source position (input partition:offset), wherever it is; repeatable, or comma-separated
        #[arg(long, value_name = "P:O", value_delimiter = ',')]
        source: Vec<SourcePos>,
        /// Print what would be sent; send and commit nothing
        #[arg(long)]
        dry_run: bool,
        /// Skip letters whose record was re-driven this many times already
        #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_REDRIVES, value_parser = clap::value_parser!(u32).range(1..))]
        max_redrives: u32,
        /// Print the report as one JSON object instead of lines
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Clone)]
struct WorkloadArgs {
    /// Number of orders (each 1 to 4 events); with entity.kind = "stock" or demo --entity stock, of SKUs (each 5 to
    /// 39 events)
    #[arg(long, default_value_t = 5_000)]
    orders: usize,
    /// Chance an event is sent twice
    #[arg(long, default_value_t = 0.05)]
    duplicate_rate: f64,
    /// Chance an event is swapped with its order's (or SKU's) next event
    #[arg(long, default_value_t = 0.02)]
    reorder_rate: f64,
    /// Poison records per good record
    #[arg(long, default_value_t = 0.002)]
    poison_rate: f64,
    /// Share of events written with the v1 schema
    #[arg(long, default_value_t = 0.3)]
    v1_share: f64,
    /// Seed of the generator: the same seed gives the same records
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Prefix of the order ids (<PREFIX>-00000001 and on), default order-s<SEED>: runs with different seeds never
    /// share an order, so a second run against the same topic adds new orders instead of stale events; give the
    /// same prefix and seed to re-send the same orders
    #[arg(long, value_name = "PREFIX")]
    order_prefix: Option<String>,
}

impl WorkloadArgs {
    /// The stock generator's workload: `--orders` SKUs, `--duplicate-rate`,
    /// `--reorder-rate`, `--poison-rate`, `--seed`, `--order-prefix` as the
    /// SKU prefix (default sku-s<SEED>).
    fn stock_spec(&self) -> Result<crate::domains::stock::workload::StockSpec> {
        let checked = self.spec()?;
        Ok(crate::domains::stock::workload::StockSpec {
            skus: checked.orders,
            seed: checked.seed,
            duplicate_rate: checked.duplicate_rate,
            reorder_rate: checked.reorder_rate,
            poison_rate: checked.poison_rate,
            sku_prefix: self
                .order_prefix
                .clone()
                .unwrap_or_else(|| format!("sku-s{}", checked.seed)),
        })
    }

    fn spec(&self) -> Result<WorkloadSpec> {
        for (name, rate) in [
            ("--duplicate-rate", self.duplicate_rate),
            ("--reorder-rate", self.reorder_rate),
            ("--poison-rate", self.poison_rate),
            ("--v1-share", self.v1_share),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                bail!("{name} must be between 0 and 1, got {rate}");
            }
        }
        if self.orders == 0 {
            bail!("--orders must be at least 1");
        }
        Ok(WorkloadSpec {
            orders: self.orders,
            seed: self.seed,
            duplicate_rate: self.duplicate_rate,
            reorder_rate: self.reorder_rate,
            poison_rate: self.poison_rate,
            v1_share: self.v1_share,
            order_prefix: self
                .order_prefix
                .clone()
                .unwrap_or_else(|| format!("order-s{}", self.seed)),
            ..Default::default()
        })
    }
}

#[derive(Subcommand)]
enum StateCommand {
    /// One order's state, from the local store (with `run` stopped: the store opens in one process at a time; ask a running one at /state/ORDER_ID)
    Get {
        /// The order's id (the input records' key), e.g. order-s42-00000001 as `orderly produce` names them
        /// (order-s<SEED>-<N>); `orderly state dump` lists every order in the store
        order_id: String,
        /// Print the state as one JSON object instead of a table
        #[arg(long)]
        json: bool,
    },
    /// Every order's state with its input partition, as JSON lines
    Dump,
    /// Per-partition next offset and counters, and totals
    Stats {
        /// Print one JSON object (per partition and totals) instead of a table
        #[arg(long)]
        json: bool,
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
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(default_log_filter(&cli.command)));
    // librdkafka's repeats (every client's "brokers are down", per-broker
    // transport errors) fold into one line per change of the connection.
    let fold = crate::observe::kafka_link::KafkaLogFold;
    let registry = tracing_subscriber::registry().with(filter).with(fold);
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match cli.log_format {
        // Each line carries the current span's fields (a partition task's
        // topic, partition and group) and the spans it is in.
        LogFormat::Json => registry
            .with(logs.json().with_current_span(true).with_span_list(true))
            .init(),
        LogFormat::Text => registry
            .with(logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())))
            .init(),
    }
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
            | Command::Explain { .. }
            | Command::Dlq {
                command: DlqCommand::List { .. }
            }
    )
}

fn default_log_filter(command: &Command) -> &'static str {
    match command {
        // The demo's own poison records include unknown schema ids, whose
        // warning reads like a misconfigured registry; its summary counts
        // them as dead letters instead.
        Command::Demo { .. } => "warn,orderly::engine::codec=error",
        Command::State { .. } => "warn",
        // Its progress is its own line on a terminal.
        Command::Explain { .. } => "warn,librdkafka=warn,rdkafka=warn",
        // The checks report broker errors on their own lines.
        Command::Config { .. } => "error,librdkafka=off,rdkafka=off",
        _ => "info,librdkafka=warn,rdkafka=warn",
    }
}

/// Refuses to run when the group's committed offsets were moved by another
/// tool away from orderly's checkpoints (the checkpoint would win and the
/// reset be ignored in silence). A check that cannot be made (broker not
/// reachable yet) is logged and passed over: the processor waits for the
/// broker on its own.
///
/// A coordinator that is not ready yet (a fresh broker loading its offsets
/// topic answers NotCoordinator or CoordinatorLoadInProgress for a few
/// seconds) is asked again quietly, for up to [`COORDINATOR_WAIT`].
async fn refuse_external_resets(config: &Config) -> Result<()> {
    use crate::ops::replay::ReplayError;
    let config = config.clone();
    let found = tokio::task::spawn_blocking(move || {
        crate::ops::replay::external_resets_waiting_for_the_coordinator(COORDINATOR_WAIT, || {
            crate::ops::replay::check_external_resets(config.clone())
        })
    })
    .await?;
    match found {
        Ok(()) => Ok(()),
        Err(e @ ReplayError::ExternalReset { .. }) => Err(e.into()),
        // No broker answers: the connection's own line says so, with the
        // bootstrap address and the hint (the processor then waits).
        Err(e) if crate::observe::kafka_link::is_connection_failure(&e.to_string()) => {
            crate::observe::kafka_link::unreachable(&e.to_string());
            Ok(())
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot check the group's committed offsets for a reset made outside orderly");
            Ok(())
        }
    }
}

/// Before anything is consumed: the cluster accepts the credentials and
/// the TLS certificate, and the principal holds every ACL `run` needs
/// (docs/operating.md, "A secured cluster"). A cluster that does not answer
/// is logged and passed over: the processor waits for it.
async fn refuse_what_security_refuses(config: &Config) -> Result<()> {
    let checked = config.clone();
    let found = tokio::task::spawn_blocking(move || {
        crate::kafka::acl::refuse_missing(&checked, Duration::from_secs(5))
    })
    .await?;
    match found {
        Ok(()) => {
            tracing::info!("acls: the principal may perform every operation orderly needs on the topics and the group");
            Ok(())
        }
        Err(e) if e.is_refusal() => Err(e.into()),
        Err(e @ crate::kafka::acl::AclError::Unsupported { .. }) => {
            tracing::info!("acls: {e}");
            Ok(())
        }
        Err(e) => {
            // The connection's own lines say the cluster is away (and
            // /readyz, from now on).
            if crate::observe::kafka_link::is_connection_failure(&e.to_string()) {
                crate::observe::kafka_link::unreachable(&e.to_string());
            }
            tracing::info!(error = %e, "acls: not checked now; starting, the processor waits for the cluster");
            Ok(())
        }
    }
}

/// How long a coordinator that is not ready yet is waited for at start-up.
const COORDINATOR_WAIT: Duration = Duration::from_secs(20);

/// `registry.schema_guard`: every registered writer schema of the input
/// subject must be readable before anything is consumed.
async fn schema_guard(
    config: &Config,
    registry: &Registry,
    reader: Option<&apache_avro::Schema>,
) -> Result<()> {
    use crate::config::SchemaGuard;
    let mode = config.registry.schema_guard;
    if mode == SchemaGuard::Off {
        return Ok(());
    }
    match crate::engine::codec::guard::guard(registry, &config.kafka.input_topic, reader).await {
        Ok(report) if report.incompatible.is_empty() => tracing::info!("schema guard: {}", report.summary()),
        Ok(report) if mode == SchemaGuard::Refuse => bail!(
            "schema guard: {}. Remove or fix those versions in the registry, or set registry.schema_guard = \"warn\" to \
             start anyway (their records are then dead-lettered)",
            report.summary()
        ),
        Ok(report) => tracing::warn!("schema guard: {} (registry.schema_guard = \"warn\": starting anyway)", report.summary()),
        Err(e) => tracing::warn!(error = %e, "schema guard: cannot list the input subject's versions; each schema is checked as its first record arrives"),
    }
    Ok(())
}

/// Opens the store for a command that only reads it: a `store.path` without
/// a store is an error, not a new empty store.
fn open_existing_store(config: &Config, (name, field): (&str, &str)) -> Result<Store> {
    let path = preflight::absolute(&config.store.path);
    if !preflight::store_present(&path) {
        return Err(NoStore(path).into());
    }
    match Store::open(&path, config.store.cache_capacity_mb) {
        Err(locked @ crate::engine::store::StoreError::Locked { .. }) => {
            let ask = match config.http_address() {
                Ok(Some(address)) => format!(
                    "while it runs, ask it over HTTP: `curl http://{}/state/<{field}>` for one {name}, \
                     /api/status for the counters (http.address); or stop it, then run this command again",
                    connectable(address)
                ),
                _ => "its HTTP endpoint is off (http.address = \"\"): stop it, then run this command again".into(),
            };
            Err(anyhow::anyhow!("{locked}; {ask}"))
        }
        other => Ok(other?),
    }
}

/// An address a client can connect to: a wildcard listen address (0.0.0.0,
/// ::) is reached on loopback.
fn connectable(address: std::net::SocketAddr) -> std::net::SocketAddr {
    let mut address = address;
    if address.ip().is_unspecified() {
        address.set_ip(match address {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    address
}

async fn dispatch<E: Entity + Clone>(cli: Cli, chosen: Chosen<E>) -> Result<Exit> {
    let load_config = || {
        let config = Config::load(cli.config.as_deref()).context("configuration")?;
        for warning in crate::config::unused_env_vars(std::env::vars()) {
            tracing::warn!("{warning}");
        }
        crate::observe::kafka_link::set_bootstrap(&config.kafka.bootstrap_servers);
        anyhow::Ok(config)
    };
    match cli.command {
        Command::Run => {
            // Listen before anything else, so a signal during start-up is a
            // clean stop, not the default kill.
            let shutdown = shutdown_signal()?;
            let config = load_config()?;
            match chosen {
                Chosen::Given(entity) => run(entity, config, shutdown).await,
                Chosen::Configured => match config.entity.kind {
                    EntityKind::Orders => run(Orders, config, shutdown).await,
                    EntityKind::Stock => run(Stock, config, shutdown).await,
                    EntityKind::Latest => {
                        run(Latest::from_config(&config.entity)?, config, shutdown).await
                    }
                },
            }
        }
        Command::Replay {
            to_earliest,
            to_latest,
            to_offset,
            to_datetime,
            shift_by,
            partitions,
            reset_state,
            dry_run,
            json,
        } => {
            use crate::ops::replay::{table, Replay, ReplayOptions, Target};
            let target = match (to_earliest, to_latest, to_offset, to_datetime, shift_by) {
                (true, ..) => Target::Earliest,
                (_, true, ..) => Target::Latest,
                (_, _, Some(offset), ..) => Target::Offset(offset),
                (_, _, _, Some(text), _) => {
                    let at = humantime::parse_rfc3339_weak(&text).map_err(|e| {
                        anyhow::Error::new(UsageError(format!("--to-datetime {text}: {e} (use RFC 3339 in UTC, e.g. 2026-12-01T10:00:00Z)")))
                    })?;
                    let ms = at.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
                    Target::Datetime(ms)
                }
                (_, _, _, _, Some(n)) => Target::ShiftBy(n),
                _ => return Err(UsageError("choose one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by".into()).into()),
            };
            let config = load_config()?;
            let options = ReplayOptions {
                target,
                partitions,
                reset_state,
            };
            let replay =
                tokio::task::spawn_blocking(move || Replay::new(config, options)).await??;
            let replay = std::sync::Arc::new(replay);
            let planner = replay.clone();
            let rows = tokio::task::spawn_blocking(
                move || -> Result<_, crate::ops::replay::ReplayError> {
                    planner.check_no_members()?;
                    planner.plan()
                },
            )
            .await??;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(
                        &serde_json::json!({ "dry_run": dry_run, "reset_state": reset_state, "partitions": rows })
                    )?
                );
            } else {
                print!("{}", table(&rows));
            }
            if dry_run {
                if !json {
                    println!("dry run: nothing changed");
                }
                return Ok(Exit::Success);
            }
            replay.apply(&rows).await?;
            if !json {
                let what = if reset_state { "state reset, " } else { "" };
                println!("replayed {} partition(s): {what}checkpoints and committed offsets moved; start the group to process from there", rows.len());
            }
            Ok(Exit::Success)
        }
        Command::Repair {
            partitions,
            apply,
            after_abort,
            json,
        } => {
            let after_abort = match (after_abort, &partitions[..]) {
                (None, _) => None,
                (Some(start), [partition]) => Some((*partition, start)),
                (Some(_), _) => {
                    return Err(UsageError(
                        "--after-abort needs exactly one partition: --partitions P".into(),
                    )
                    .into())
                }
            };
            let config = load_config()?;
            crate::ops::repair::command(config, partitions, apply, after_abort, json).await?;
            Ok(Exit::Success)
        }
        Command::Demo {
            entity,
            json,
            store_dir,
            partitions,
            workload,
        } => {
            if let Chosen::Given(_) = chosen {
                return Err(UsageError(
                    format!(
                        "demo runs the built-in domains (orders, stock) on an in-process cluster, not {}'s own \
                         entity: run `orderly demo`",
                        crate::ops::program::name()
                    ),
                )
                .into());
            }
            if !(1..=256).contains(&partitions) {
                bail!("--partitions must be between 1 and 256");
            }
            let config = load_config()?;
            // Like `run`: the entity entity.kind names, unless --entity says.
            let entity = match (entity, config.entity.kind) {
                (Some(entity), _) => entity,
                (None, EntityKind::Orders) => DemoEntity::Orders,
                (None, EntityKind::Stock) => DemoEntity::Stock,
                (None, EntityKind::Latest) => {
                    return Err(UsageError(
                        "demo generates orders or stock; entity.kind = \"latest\" has no generator: give --entity \
                         orders or --entity stock"
                            .into(),
                    )
                    .into())
                }
            };
            if !json {
                let what = match entity {
                    DemoEntity::Orders => "orders",
                    DemoEntity::Stock => "SKUs",
                };
                eprintln!(
                    "orderly demo: generating {} {what} and starting an in-process Kafka cluster...",
                    workload.orders
                );
            }
            let workload = match entity {
                DemoEntity::Orders => DemoWorkload::Orders(workload.spec()?),
                DemoEntity::Stock => DemoWorkload::Stock(workload.stock_spec()?),
            };
            let options = DemoOptions {
                workload,
                partitions,
                store_dir,
                base_config: Some(config),
                ..Default::default()
            };
            let summary = run_demo(options).await.context("demo")?;
            if json {
                println!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                print!("{}", summary.table());
            }
            Ok(if summary.passed() {
                Exit::Success
            } else {
                Exit::DemoMismatch
            })
        }
        Command::Produce {
            workload,
            events_per_order,
            shape,
            id_format,
            expect_out,
        } => {
            let config = load_config()?;
            match (&chosen, config.entity.kind) {
                (Chosen::Given(_), _) | (Chosen::Configured, EntityKind::Latest) => {
                    return Err(UsageError(
                        "produce generates orders (entity.kind = \"orders\") or stock (\"stock\"); it has no \
                         generator for this entity"
                            .into(),
                    )
                    .into())
                }
                (Chosen::Configured, EntityKind::Stock) => {
                    return produce_stock(&config, &workload, expect_out.as_deref()).await
                }
                (Chosen::Configured, EntityKind::Orders) => {}
            }
            let mut spec = WorkloadSpec {
                events_per_order,
                shape,
                id_format,
                ..workload.spec()?
            };
            // Times of a moment ago, as a live producer's would be (the
            // status page's completion times read them).
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            spec.start_ms = Some(spec.ending_before(now_ms));
            let registry = Registry::from_config(&config.registry)?;
            let encoder = Encoder::register(&registry, &config.kafka.input_topic)
                .await
                .with_context(|| format!("registering schemas at {}", config.registry.url))?;
            let (records, expected) = plan(&spec, &encoder)?;
            let counts = expected.outcomes;
            let expectation = serde_json::to_vec(&expected)?;
            produce_records(
                &config,
                &records,
                counts,
                expect_out.as_deref(),
                &expectation,
            )
            .await
        }
        Command::State { command } => {
            let config = load_config()?;
            let store = open_existing_store(&config, chosen.words(&config))?;
            match chosen {
                Chosen::Given(entity) => state_command(&entity, &store, command),
                Chosen::Configured => match config.entity.kind {
                    EntityKind::Orders => state_command(&Orders, &store, command),
                    EntityKind::Stock => state_command(&Stock, &store, command),
                    EntityKind::Latest => {
                        state_command(&Latest::from_config(&config.entity)?, &store, command)
                    }
                },
            }
        }
        Command::Explain {
            key,
            from,
            max_records,
            json,
        } => {
            if max_records == 0 {
                return Err(UsageError("--max-records is 1 or more".into()).into());
            }
            let config = load_config()?;
            let args = ExplainArgs {
                key,
                from,
                max_records,
                json,
            };
            match chosen {
                Chosen::Given(entity) => explain_command(&config, &entity, args).await,
                Chosen::Configured => match config.entity.kind {
                    EntityKind::Orders => explain_command(&config, &Orders, args).await,
                    EntityKind::Stock => explain_command(&config, &Stock, args).await,
                    EntityKind::Latest => {
                        let entity = Latest::from_config(&config.entity)?;
                        explain_command(&config, &entity, args).await
                    }
                },
            }
        }
        Command::Dlq { command } => {
            let config = load_config()?;
            dlq_command(config, command).await
        }
        Command::Config {
            command: ConfigCommand::Show,
        } => {
            // Its log filter shows errors only: the warnings go to stderr here.
            let config = Config::load(cli.config.as_deref()).context("configuration")?;
            for warning in crate::config::unused_env_vars(std::env::vars()) {
                eprintln!("warning: {warning}");
            }
            print!("{}", show_config(&config, cli.config.as_deref())?);
            Ok(Exit::Success)
        }
        Command::Config {
            command: ConfigCommand::Check { timeout_ms },
        } => {
            let config = match Config::load(cli.config.as_deref()) {
                Ok(config) => config,
                Err(e) => {
                    println!(
                        "{}",
                        Check::fail("config", format!("{e}: fix it, then check again"))
                    );
                    return Ok(Exit::Config);
                }
            };
            let mut detail = config_sources(cli.config.as_deref());
            for warning in crate::config::unused_env_vars(std::env::vars()) {
                detail.push_str("; warning: ");
                detail.push_str(&warning);
            }
            println!("{}", Check::ok("config", detail));
            // The entity's own reader schema: a user's binary checks its
            // writer schemas against its entity, not against orders.
            let reader = match &chosen {
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
    }
}

/// `produce` with `entity.kind = "stock"`: the stock generator's records
/// ([`WorkloadArgs::stock_spec`]).
async fn produce_stock(
    config: &Config,
    workload: &WorkloadArgs,
    expect_out: Option<&Path>,
) -> Result<Exit> {
    use crate::domains::stock::workload::plan;
    use crate::domains::stock::StockEncoder;
    let spec = workload.stock_spec()?;
    let registry = Registry::from_config(&config.registry)?;
    let encoder = StockEncoder::register(&registry, &config.kafka.input_topic)
        .await
        .with_context(|| format!("registering the stock schema at {}", config.registry.url))?;
    let (records, expected) = plan(&spec, &encoder)?;
    let counts = expected.outcomes;
    let expectation = serde_json::to_vec(&expected)?;
    produce_records(config, &records, counts, expect_out, &expectation).await
}

/// Produces `records` to the input topic, each acknowledged, after writing
/// `expectation` to `expect_out` (when given); prints what was sent and
/// the outcomes it implies.
async fn produce_records(
    config: &Config,
    records: &[crate::domains::orders::workload::PlannedRecord],
    expected: crate::engine::outcomes::Outcomes,
    expect_out: Option<&Path>,
    expectation: &[u8],
) -> Result<Exit> {
    if let Some(path) = expect_out {
        std::fs::write(path, expectation).with_context(|| format!("writing {}", path.display()))?;
    }
    let producer: FutureProducer = producer_config(config).set("linger.ms", "5").create()?;
    let ends = produce_planned(&producer, &config.kafka.input_topic, records).await?;
    println!(
        "{}",
        serde_json::json!({ "records": records.len(), "end_offsets": ends, "expected": {
            "applied": expected.applied, "duplicates": expected.duplicates,
            "stale": expected.stale, "dead_lettered": expected.dead_lettered } })
    );
    Ok(Exit::Success)
}

/// `run` for `entity`: the start-up checks, the processor and its HTTP
/// endpoint, until `shutdown`.
async fn run<E: Entity>(
    entity: E,
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<Exit> {
    let store_path = preflight::absolute(&config.store.path);
    tracing::info!(store = %store_path.display(), existing = preflight::store_present(&store_path), "opening the store");
    let store = Store::open(&store_path, config.store.cache_capacity_mb)?;
    let registry = Registry::from_config(&config.registry)?;
    let http = config.http_address()?;
    let input_topic = config.kafka.input_topic.clone();
    let kept = store.clone();
    let start_config = config.clone();
    let reader_schema = entity.reader_schema().cloned();
    let processor = Processor::for_entity(entity, config, store, registry.clone());
    // The endpoint answers from start-up on, before the checks below (which
    // wait on the cluster): /healthz, and /readyz saying what the
    // processor waits for. It stops once the processor has.
    let server = match http {
        Some(address) => Some(crate::ops::http::serve(
            crate::ops::http::bind(address)?,
            &processor,
        )?),
        None => None,
    };
    // A signal during the checks (which may wait on a cluster that does
    // not answer) stops the process there, as it would later.
    tokio::pin!(shutdown);
    let checked = tokio::select! {
        biased;
        () = &mut shutdown => None,
        checked = start_checks(&start_config, &registry, reader_schema.as_ref()) => Some(checked),
    };
    let result = match checked {
        None => {
            tracing::info!("stopped during start-up, before joining the group");
            if let Some(server) = server {
                server.stop().await;
            }
            return Ok(Exit::Success);
        }
        Some(Ok(())) => processor.run(shutdown).await.map_err(anyhow::Error::from),
        Some(Err(e)) => Err(e),
    };
    if let Some(server) = server {
        server.stop().await;
    }
    let report = result?;
    // This run's decisions, and what the store holds over every run
    // (the durable counters of this instance's checkpoints).
    let held: crate::engine::outcomes::Outcomes = kept
        .checkpoints()
        .unwrap_or_default()
        .into_iter()
        .filter(|(t, _, _)| *t == input_topic)
        .map(|(_, _, c)| c.counts())
        .sum();
    let report = report.outcomes;
    tracing::info!(
        "exiting: this run decided applied={} duplicates={} stale={} dead_lettered={}; this store holds, over all runs, \
         applied={} duplicates={} stale={} dead_lettered={}",
        report.applied,
        report.duplicates,
        report.stale,
        report.dead_lettered,
        held.applied,
        held.duplicates,
        held.stale,
        held.dead_lettered
    );
    Ok(Exit::Success)
}

/// What `run` checks before it joins the group, while its endpoint already
/// answers: the security the cluster enforces, the registry, the schema
/// guard, offsets moved outside orderly.
async fn start_checks(
    config: &Config,
    registry: &Registry,
    reader: Option<&apache_avro::Schema>,
) -> Result<()> {
    refuse_what_security_refuses(config).await?;
    // Something that answers, but not like a schema registry, is a
    // wrong URL, and a refusal of the credentials or a certificate
    // that does not verify is a setting to fix: stop now rather
    // than retry every record. An unreachable registry is waited
    // for record by record.
    match registry.probe().await {
        Err(e @ crate::registry::RegistryError::NotARegistry { .. }) => return Err(e.into()),
        Err(e) if e.is_access_failure() => return Err(e.into()),
        Err(e) => {
            tracing::warn!(error = %e, "schema registry not reachable at start-up; records wait for it")
        }
        Ok(()) => {}
    }
    schema_guard(config, registry, reader).await?;
    refuse_external_resets(config).await
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

/// What `orderly explain` was asked.
struct ExplainArgs {
    key: String,
    from: crate::ops::explain::Start,
    max_records: usize,
    json: bool,
}

async fn explain_command<E: Entity + Clone>(
    config: &Config,
    entity: &E,
    args: ExplainArgs,
) -> Result<Exit> {
    let stored = stored_for_explain::<E>(config, &args.key);
    let report = crate::ops::explain::explain(
        config,
        entity,
        &args.key,
        args.from,
        args.max_records,
        stored,
    )
    .await?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        crate::ops::explain::print(&report);
    }
    Ok(if report.disagreement.is_some() {
        Exit::CheckFailed
    } else {
        Exit::Success
    })
}

/// The key's stored state for `explain`, from this configuration's store
/// when no running processor holds it, or why it was not read.
fn stored_for_explain<E: Entity>(
    config: &Config,
    key: &str,
) -> Result<(Option<crate::engine::entity::State<E>>, String), String> {
    let path = preflight::absolute(&config.store.path);
    if !preflight::store_present(&path) {
        return Err(format!(
            "not read: no store at {} (explain where the owner runs, or GET /explain/<key> on its endpoint)",
            path.display()
        ));
    }
    match Store::open(&path, config.store.cache_capacity_mb) {
        Ok(store) => match store.find::<E>(key) {
            Ok(state) => Ok((state, format!("the store at {}", path.display()))),
            Err(error) => Err(format!("not read: {error}")),
        },
        Err(crate::engine::store::StoreError::Locked { .. }) => Err(format!(
            "not read: the store at {} is in use by a running processor; GET /explain/<key> on the endpoint of \
             the member that owns the key's partition compares with its store",
            path.display()
        )),
        Err(error) => Err(format!("not read: {error}")),
    }
}

fn state_command<E: Entity>(entity: &E, store: &Store, command: StateCommand) -> Result<Exit> {
    match command {
        StateCommand::Get { order_id, json } => match store.find::<E>(&order_id)? {
            None => {
                eprintln!("no state for {} {order_id}", E::NAME);
                Ok(Exit::NotFound)
            }
            Some(state) if json => {
                let mut body = serde_json::to_value(entity.view(&state))?;
                body["inbox"] = serde_json::to_value(&state.inbox)?;
                println!("{body}");
                Ok(Exit::Success)
            }
            Some(state) => {
                println!("{}", entity.describe(&state));
                Ok(Exit::Success)
            }
        },
        StateCommand::Dump => {
            use std::io::Write;
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            let mut failure = None;
            store.for_each_in_partition::<E>(|partition, state| {
                if failure.is_none() {
                    let line = serde_json::to_value(entity.view(&state)).map(|mut v| {
                        v["partition"] = serde_json::json!(partition);
                        v
                    });
                    if let Err(e) = line
                        .and_then(|v| serde_json::to_writer(&mut out, &v))
                        .map_err(anyhow::Error::from)
                        .and_then(|_| writeln!(out).map_err(Into::into))
                    {
                        failure = Some(e);
                    }
                }
            })?;
            if let Some(e) = failure {
                return Err(e);
            }
            out.flush()?;
            Ok(Exit::Success)
        }
        StateCommand::Stats { json } => {
            let stats = store.stats()?;
            let mut total = Checkpoint::default();
            let mut orders = 0;
            let mut outbox_pending = 0;
            for s in &stats {
                outbox_pending += s.outbox_pending;
                total.applied += s.checkpoint.applied;
                total.duplicates += s.checkpoint.duplicates;
                total.stale += s.checkpoint.stale;
                total.dead_lettered += s.checkpoint.dead_lettered;
                total.replayed += s.checkpoint.replayed;
                total.skipped += s.checkpoint.skipped;
                orders += s.orders;
            }
            // The keys' column is named for the entity ("orders", "skus", a
            // user's own); the per-partition objects keep their field.
            let keys_column = format!("{}s", E::NAME.to_lowercase());
            if json {
                let mut totals = serde_json::json!({
                    "applied": total.applied, "duplicates": total.duplicates, "stale": total.stale,
                    "dead_lettered": total.dead_lettered, "consumed": total.outcomes(), "orders": orders,
                    "replayed": total.replayed, "skipped": total.skipped, "outbox_pending": outbox_pending
                });
                totals[&keys_column] = serde_json::json!(orders);
                let value = serde_json::json!({ "partitions": stats, "totals": totals });
                println!("{}", serde_json::to_string_pretty(&value)?);
            } else {
                println!(
                    "{:<20} {:>9} {:>12} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7}",
                    "topic",
                    "partition",
                    "next_offset",
                    keys_column,
                    "applied",
                    "dups",
                    "stale",
                    "dead",
                    "replayed",
                    "skipped",
                    "outbox"
                );
                for s in &stats {
                    let c = &s.checkpoint;
                    println!(
                        "{:<20} {:>9} {:>12} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7}",
                        s.topic,
                        s.partition,
                        c.next_offset,
                        s.orders,
                        c.applied,
                        c.duplicates,
                        c.stale,
                        c.dead_lettered,
                        c.replayed,
                        c.skipped,
                        s.outbox_pending
                    );
                }
                println!(
                    "{:<20} {:>9} {:>12} {:>10} {:>10} {:>8} {:>8} {:>9} {:>9} {:>9} {:>7}",
                    "total",
                    "",
                    "",
                    orders,
                    total.applied,
                    total.duplicates,
                    total.stale,
                    total.dead_lettered,
                    total.replayed,
                    total.skipped,
                    outbox_pending
                );
            }
            Ok(Exit::Success)
        }
    }
}

/// `dlq list|replay`: the library reads and produces with blocking calls, so
/// it runs on a blocking thread.
async fn dlq_command(config: Config, command: DlqCommand) -> Result<Exit> {
    match command {
        DlqCommand::List { limit, json } => {
            let listing =
                tokio::task::spawn_blocking(move || redrive::list(&config, limit)).await??;
            if json {
                println!("{}", serde_json::to_string_pretty(&listing.letters)?);
            } else {
                print!("{}", listing.table());
            }
            Ok(Exit::Success)
        }
        DlqCommand::Replay {
            all,
            source,
            dry_run,
            max_redrives,
            json,
        } => {
            let selection = if all {
                Selection::All
            } else {
                Selection::Sources(source)
            };
            let request = ReplayRequest {
                selection,
                dry_run,
                max_redrives,
            };
            let report =
                tokio::task::spawn_blocking(move || redrive::replay(&config, &request)).await??;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                for line in report.lines() {
                    println!("{line}");
                }
                println!("{}", report.summary());
            }
            Ok(if report.not_found.is_empty() {
                Exit::Success
            } else {
                Exit::NotFound
            })
        }
    }
}

/// Starts listening for SIGTERM and SIGINT now; the future completes on
/// the first of them.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM received"),
                _ = int.recv() => tracing::info!("SIGINT received"),
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("Ctrl-C received");
        })
    }
}
