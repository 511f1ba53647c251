//! End-to-end throughput benchmark (issues 4 and 7).
//!
//! ```text
//! cargo bench --bench pipeline -- [--workload hot|lifecycle|lifecycle-10m|uniform|uniform-4m|distinct]
//!                                  [--events N] [--orders N] [--shape interleaved|clustered]
//!                                  [--id-format hex32|uuid] [--bootstrap HOST:PORT] [--json]
//!                                  [--http | --http-load]
//! cargo bench --bench pipeline -- --distinct-orders-rss [--events N] [--json]
//! kafka/broker run -- registry/apicurio run -- \
//!   cargo bench --bench pipeline -- --side-by-side [--rounds N] [--restore-rounds N] [--shape ...] [--phases a,oa,ka,ox,kx,or,kr]
//! kafka/broker run -- registry/apicurio run -- \
//!   cargo bench --bench pipeline -- --orders 1000000 --events 1000000 --phases fo [--failover-rounds N]
//!                                  [--failover-rate EV_PER_S] [--failover-session-timeout-ms MS]
//! ```
//!
//! Pre-loads a planned workload (default 1,000,000 events over 10,000 orders,
//! 5% duplicates, 2% reorderings, no poison) into a broker. Its shape is
//! `interleaved` by default (every order's events spread uniformly over the
//! whole topic, event ids of 32 hex characters: issue 7's workload) or, with
//! `--shape clustered`, each order's events in a short window with canonical
//! UUID ids (issue 4's workload); `--id-format` picks the ids of either. The
//! expected counters come from `orderly::testkit::orders::workload::StreamedPlan`, computed from the
//! sends of each order independently of the processor. The broker is librdkafka's mock
//! cluster by default, run in a child process (this same binary with
//! `--loader`) so that its in-memory log does not count towards this process's
//! RSS, or any broker given with `--bootstrap` (a random topic is created).
//! Then, on the same data, it measures events/s of:
//!
//! * (a)  a bare consumer (assign all partitions from the beginning, no group,
//!   no commits) reading and discarding every record: the broker+client limit;
//! * (b)  the bare consumer plus Avro decoding (warm schema cache);
//! * (d)  the store alone: the processor's sled writes per batch of the processor's configured size
//!   and partition (`orderly::batch::apply_batch`: read state, `step`, put
//!   changed states + checkpoint in one `commit_batch`), one `flush` per round
//!   of all partitions' batches, on pre-decoded events, no Kafka: the storage
//!   limit;
//! * (c)  the full `Processor` with durability on, from start (including
//!   joining the group) to the moment the store's checkpoints cover the end
//!   offsets, with a fresh group id and store, the changelog and the outbox
//!   on (defaults); (o) the same with the outbox off; (e) with the changelog
//!   and the outbox off (each with a changelog of its own);
//! * (x)  (c) with `processing.guarantee = "exactly_once"` (a Kafka
//!   transaction per partition write-out; needs a broker with transactions:
//!   `--bootstrap`, or the mock cluster); with `--rounds N`, (c) and (x)
//!   alternate N times each;
//! * (r)  restoring (c)'s changelog into a fresh store, a thread per
//!   partition;
//! * (oa) / (ox), (ka) / (kx), (or) / (kr): side by side (`--side-by-side`,
//!   issue 20), each contender in its own process on the same topic, broker
//!   and registry: `orderly run` as a child process (the `orderly` binary
//!   cargo built with this bench) at at_least_once / exactly_once, the Kafka
//!   Streams peer (`benches/kstreams/peer run`) at at_least_once /
//!   exactly_once_v2, alternating `--rounds` times (at each guarantee
//!   orderly first in rounds 1, 3, ..., the peer first in rounds 2, 4,
//!   ...); then each one's restore of the first at_least_once run's
//!   changelog. Rates, VmHWM and CPU of the contender's
//!   process and the broker's CPU, measured from the outside until the
//!   group's committed offsets cover the input; counts and every order's
//!   final state checked against the plan (no rate on a mismatch). Needs a
//!   real broker and registry (`--bootstrap`/ORDERLY_E2E_BOOTSTRAP,
//!   `--registry`/ORDERLY_E2E_REGISTRY; the broker's pid from
//!   `--broker-pid`/KAFKA_PID); see `phases/side_by_side.rs`.
//! * (fo) the failover drill (issue: standby replicas): three `orderly run`
//!   children in one group (changelog on, a 6 s session timeout), the input
//!   processed, then fed a steady `--failover-rate` (2,000 events/s), one
//!   SIGKILLed; the time from the kill until every moved partition's
//!   committed offset passes the topic's end offset at the kill, less the
//!   session timeout, with `processing.standby_replicas` 2 and 0
//!   (`--failover-rounds` each, alternating), and what a standby costs in
//!   RSS and store size per 1M orders. Needs a real broker and registry, as
//!   the side-by-side phases; see `phases/failover.rs`.
//!
//! Phases run in the order a, b, c, x, (side by side), fo, o, e, r, d
//! whatever `--phases` says.
//!
//! "steady ev/s" counts from a phase's first record (for (c): its first
//! batch), so it excludes connecting and joining the group. For (c) and (d)
//! the table gives keys and bytes written to sled per event ("bytes/ev":
//! keys + values handed to sled; for (c) once `RunReport` reports them) and
//! the store directory's growth per event ("disk B/ev"); for every phase,
//! the bytes this process passed to write(2) per event ("wrote B/ev", from
//! /proc/self/io: in (c) and (d) almost all sled's log writes, rewrites
//! included, which the directory's growth does not show). For (c) it also
//! gives the time after the first batch in which no checkpoint moved (a
//! stall), batch and flush figures and CPU per thread.
//!
//! The mock cluster keeps at most 5 MiB of record batches per partition and
//! silently drops older ones, so on the mock the topic gets as many
//! partitions as the workload needs (22 for the default one; the table says
//! so) unless `--partitions` is given, which then must fit. The loader checks
//! that no record was dropped. `--bootstrap` uses 4 partitions by default.
//!
//! Peak RSS per phase is VmHWM of this process, reset before each phase by
//! writing 5 to /proc/self/clear_refs. CPU per phase is read from /proc for
//! this process, per thread (grouped by thread name) for (c), and for the
//! broker's process (the mock's child, or `--broker-pid`).
//!
//! `--distinct-orders-rss` runs 1,000,000 distinct orders (one event each)
//! through (c) only (`--phases` to add others) and reports its peak RSS
//! against the 512 MiB target.
//!
//! `--http` serves the `run` HTTP endpoint (`Processor::with_http`, on
//! 127.0.0.1 and a free port) during (c), (o) and (e); `--http-load` also
//! drives an abuse load against it while they process (slow clients,
//! garbage, scrapes, bursts of 1,000 concurrent requests: `http_load.rs`)
//! and reports the answers, failures and burst latencies, to compare
//! events/s with the endpoint off, idle and abused.
//!
//! Knobs for experiments without editing the library: `--batch-max-records`,
//! `--batch-max-wait-ms`, `--cache-mb`, `--librdkafka KEY=VALUE` (consumers
//! of (a), (b) and (c)), `--phases`, `--timeline` (with `--json`).
//!
//! Layout: `main.rs` (arguments, orchestration), `loader.rs` (the loader
//! child: mock cluster or topic creation, plan and produce), `phases/`
//! (`bare.rs`: (a) and (b); `store_alone.rs`: (d); `full.rs`: (c), (o), (e);
//! `restore.rs`: (r); `side_by_side.rs`: (oa) ... (kr); `failover.rs`: (fo);
//! `http_load.rs`: `--http`/`--http-load`;
//! `mod.rs`: the consumer shared by (a), (b) and (d)'s untimed read),
//! `measure.rs` (/proc: RSS, CPU; directory sizes) and `report.rs` (the
//! results, as JSON or a table).

// The same allocator as the `orderly` binary, with the same compiled
// options, so the phases run in this process ((c), (d), (r)) allocate
// as `orderly run` does.
orderly::allocator!();

mod figures;
mod http_load;
mod loader;
mod measure;
mod phases;
mod report;
mod workloads;

use std::time::Duration;

use anyhow::bail;
use clap::Parser;

use orderly::testkit::orders::workload::{IdFormat, Shape, WorkloadSpec};
use orderly::testkit::orders::Encoder;
use orderly::testkit::Decoder;
use orderly::Registry;

use measure::trim_heap;
use report::{Machine, Results, WorkloadOut};

#[derive(Parser, Debug, Clone)]
#[command(about = "orderly end-to-end throughput benchmark")]
pub struct Args {
    /// A named workload (issue 52; `benches/pipeline/workloads.rs` says
    /// what each stands for): sets --orders, --events and --shape, so it
    /// is refused beside them.
    #[arg(long, value_enum, conflicts_with_all = ["events", "orders", "shape"])]
    pub workload: Option<workloads::Workload>,
    /// Events to plan (before duplicates and poison are added).
    #[arg(long, default_value_t = 1_000_000)]
    pub events: usize,
    /// Distinct orders (default 10,000; with --distinct-orders-rss, = events).
    #[arg(long)]
    pub orders: Option<usize>,
    /// How orders' events spread over the topic: interleaved (every order over
    /// the whole topic, issue 7) or clustered (each order in a short window).
    #[arg(long, value_enum, default_value_t = Shape::Interleaved)]
    pub shape: Shape,
    /// Event id format (default: hex32 with --shape interleaved, uuid with
    /// --shape clustered, as in the issues' workloads).
    #[arg(long, value_enum)]
    pub id_format: Option<IdFormat>,
    /// Use this broker instead of the mock cluster (a random topic is created).
    #[arg(long)]
    pub bootstrap: Option<String>,
    /// With --bootstrap: the broker's process id on this machine, to report
    /// its CPU per phase (the mock cluster's is reported on its own);
    /// `kafka/broker run` exports it as KAFKA_PID.
    #[arg(long, env = "KAFKA_PID")]
    pub broker_pid: Option<u32>,
    /// A Confluent-compatible schema registry (e.g. Apicurio's
    /// `.../apis/ccompat/v7`; `registry/apicurio run` exports it as
    /// ORDERLY_E2E_REGISTRY): the loader registers the schemas there and the
    /// records carry its ids. Without it, an in-memory registry (fixed ids;
    /// no side-by-side phases).
    #[arg(long, env = "ORDERLY_E2E_REGISTRY")]
    pub registry: Option<String>,
    /// The side-by-side phases (issue 20), each contender in its own process
    /// on the same topic and broker: `orderly run` (oa, ox) and the Kafka
    /// Streams peer (ka, kx) at at_least_once / exactly_once, alternating
    /// --rounds times, then restores (or, kr), after the bare consumer (a).
    /// Same as `--phases a,oa,ka,ox,kx,or,kr` (`--phases` picks a subset). Needs a
    /// broker (--bootstrap or ORDERLY_E2E_BOOTSTRAP) and --registry.
    #[arg(long)]
    pub side_by_side: bool,
    /// The `orderly` binary the side-by-side phases run (default: the one
    /// cargo built with this bench, CARGO_BIN_EXE_orderly).
    #[arg(long)]
    pub orderly_bin: Option<std::path::PathBuf>,
    /// The Kafka Streams peer's launcher (default benches/kstreams/peer).
    #[arg(long)]
    pub peer: Option<std::path::PathBuf>,
    /// One more argument for every `peer run` (repeatable, e.g.
    /// `--peer-arg=--threads --peer-arg=4`): the peer's settings A/B'd in
    /// one bench run. Its JVM options come from the environment
    /// (benches/kstreams/README.md).
    #[arg(long = "peer-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub peer_arg: Vec<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// 1,000,000 distinct orders (one event each) through the full pipeline,
    /// reporting peak RSS against the 512 MiB target. Runs phase c only unless
    /// --phases says otherwise.
    #[arg(long, alias = "distinct-orders")]
    pub distinct_orders_rss: bool,
    /// Which phases to run, comma-separated, of a,b,c,x,o,e,r,d (r needs c;
    /// x is c in exactly_once, not run unless named), the side-by-side ones
    /// and fo (the failover drill); they run in that order whatever the
    /// order given.
    #[arg(long)]
    pub phases: Option<String>,
    /// Run (c) and (x) alternately this many times each (c, x, c, x, ...):
    /// the guarantees compared in one run; repeats report as c2, x2, ...
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Side by side: restore each contender's changelog (or, kr) this many
    /// times, alternating, each into a fresh store; the rows report the
    /// median. A restore of the 10k-order state takes a fraction of a
    /// second, so one sample is at the mercy of the machine's load.
    #[arg(long, default_value_t = 1)]
    pub restore_rounds: usize,
    /// The failover drill (fo): this many rounds, each running standbys 0
    /// and standbys 2 (the order alternating), each with a fresh group and
    /// stores.
    #[arg(long, default_value_t = 1)]
    pub failover_rounds: usize,
    /// The failover drill's steady feed during the kill, in events/s.
    #[arg(long, default_value_t = 2000.0)]
    pub failover_rate: f64,
    /// The failover drill's kafka.session_timeout_ms (subtracted from its
    /// times; processing.shutdown_timeout_ms is half of it).
    #[arg(long, default_value_t = 6000)]
    pub failover_session_timeout_ms: u64,
    /// Partitions of the input topic (default 4; on the mock cluster raised
    /// to what the workload needs, as it keeps only 5 MiB per partition).
    #[arg(long)]
    pub partitions: Option<i32>,
    #[arg(long, default_value_t = 0.05)]
    pub duplicate_rate: f64,
    #[arg(long, default_value_t = 0.02)]
    pub reorder_rate: f64,
    #[arg(long, default_value_t = 0.0)]
    pub poison_rate: f64,
    #[arg(long, default_value_t = 0.3)]
    pub v1_share: f64,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Override processing.commit_interval_ms for (c) and (d).
    #[arg(long)]
    pub commit_interval_ms: Option<u64>,
    /// Override processing.cache_max_bytes for (c) and (d).
    #[arg(long)]
    pub cache_max_bytes: Option<u64>,
    /// Override processing.batch_max_records for (c) (and (d)'s batch size).
    #[arg(long)]
    pub batch_max_records: Option<usize>,
    /// Override processing.batch_max_wait_ms for (c).
    #[arg(long)]
    pub batch_max_wait_ms: Option<u64>,
    /// Override store.cache_capacity_mb for (c) and (d).
    #[arg(long)]
    pub cache_mb: Option<u64>,
    /// A librdkafka setting for every consumer of (a), (b) and (c), as
    /// KEY=VALUE (through `kafka.librdkafka`); repeatable.
    #[arg(long = "librdkafka", value_name = "KEY=VALUE")]
    pub librdkafka: Vec<String>,
    /// Serve the `run` HTTP endpoint (on 127.0.0.1, a free port) during
    /// (c), (o) and (e), without load.
    #[arg(long)]
    pub http: bool,
    /// Serve the endpoint during (c), (o) and (e) and drive an abuse load
    /// against it while they process: slow clients, garbage, scrapes and
    /// bursts of 1,000 concurrent requests (see `http_load.rs`).
    #[arg(long)]
    pub http_load: bool,
    /// With --http-load: this many bursts of 1,000 requests, the first 3 s
    /// into the phase (0: one every 2 s until the phase ends).
    #[arg(long, default_value_t = 0)]
    pub http_bursts: usize,
    /// Include (c)'s progress every 20 ms in the JSON output.
    #[arg(long)]
    pub timeline: bool,
    /// Give up on a phase after this many seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
    /// Internal: run as the loader child (mock cluster + produce).
    #[arg(long, hide = true)]
    pub loader: bool,
    #[arg(long, hide = true)]
    pub topic: Option<String>,
    #[arg(long, hide = true)]
    pub spec: Option<String>,
    /// Internal: where the loader writes the expected final states.
    #[arg(long, hide = true)]
    pub expect_file: Option<std::path::PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    pub bench: bool,
}

impl Args {
    /// `--id-format`, or the one of the shape's workload in the issues.
    pub fn event_id_format(&self) -> IdFormat {
        self.id_format.unwrap_or(match self.shape {
            Shape::Interleaved => IdFormat::Hex32,
            Shape::Clustered => IdFormat::Uuid,
        })
    }
}

/// The registry of `--registry`, or an in-memory one.
pub fn registry_of(args: &Args) -> anyhow::Result<Registry> {
    Ok(match &args.registry {
        Some(url) => Registry::http(url, Duration::from_secs(10))?,
        None => Registry::memory(),
    })
}

fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    if let Some(workload) = args.workload {
        let (orders, events, shape) = workload.size();
        (args.orders, args.events, args.shape) = (Some(orders), events, shape);
    }
    let side_phases = args.phases.as_deref().is_some_and(|p| {
        let named: Vec<String> = p.split(',').map(|s| s.trim().to_string()).collect();
        phases::side_by_side::wanted(&named) || named.iter().any(|n| n == phases::failover::KEY)
    });
    if (args.side_by_side || side_phases) && args.bootstrap.is_none() && !args.loader {
        args.bootstrap = std::env::var("ORDERLY_E2E_BOOTSTRAP")
            .ok()
            .filter(|b| !b.is_empty());
    }
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    if args.loader {
        return runtime.block_on(loader::loader(args));
    }
    let results = bench(&args, &runtime)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", results.table());
    }
    Ok(())
}

/// Loads the workload, runs the chosen phases on it and gathers the results.
fn bench(args: &Args, runtime: &tokio::runtime::Runtime) -> anyhow::Result<Results> {
    let orders = args
        .orders
        .unwrap_or(if args.distinct_orders_rss {
            args.events
        } else {
            10_000
        })
        .max(1);
    let events_per_order = if args.distinct_orders_rss {
        1
    } else {
        args.events.div_ceil(orders).max(1) as u32
    };
    let phases: Vec<String> = args
        .phases
        .clone()
        .unwrap_or_else(|| {
            if args.side_by_side {
                phases::side_by_side::PHASES.into()
            } else if args.distinct_orders_rss {
                "c".into()
            } else {
                "a,b,c,o,e,r,d".into()
            }
        })
        .split(',')
        .map(|s| s.trim().to_string())
        .collect();
    let spec = WorkloadSpec {
        orders,
        seed: args.seed,
        duplicate_rate: args.duplicate_rate,
        reorder_rate: args.reorder_rate,
        poison_rate: args.poison_rate,
        v1_share: args.v1_share,
        events_per_order: Some(events_per_order),
        shape: args.shape,
        id_format: args.event_id_format(),
        order_prefix: "order".into(),
        start_ms: None,
    };
    let topic = format!(
        "orderly-bench-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    eprintln!(
        "pipeline: planning and producing {} orders x {events_per_order} events ({}, {} ids) to {} ...",
        orders,
        spec.shape.as_str(),
        spec.id_format.as_str(),
        args.bootstrap.as_deref().unwrap_or("the mock cluster (child process)")
    );
    let side = phases::side_by_side::wanted(&phases);
    let failover = phases.iter().any(|p| p == phases::failover::KEY);
    if failover && (args.bootstrap.is_none() || args.registry.is_none()) {
        bail!("the failover drill (fo) needs a broker (--bootstrap or ORDERLY_E2E_BOOTSTRAP) and a registry (--registry or ORDERLY_E2E_REGISTRY): kafka/broker run -- registry/apicurio run -- cargo bench ...");
    }
    let expect_dir = tempfile::Builder::new()
        .prefix("orderly-bench-expect-")
        .tempdir()?;
    let mut loader_args = args.clone();
    if side {
        if args.bootstrap.is_none() || args.registry.is_none() {
            bail!("the side-by-side phases need a broker (--bootstrap or ORDERLY_E2E_BOOTSTRAP) and a registry (--registry or ORDERLY_E2E_REGISTRY): kafka/broker run -- registry/apicurio run -- cargo bench ...");
        }
        loader_args.expect_file = Some(expect_dir.path().join("states.json"));
    }
    let (mut child, load) = loader::start_loader(&loader_args, &spec, &topic)?;
    let broker_pid = if args.bootstrap.is_none() {
        Some(child.id())
    } else {
        args.broker_pid
    };
    eprintln!(
        "pipeline: {} records loaded (plan {:.1} s, produce {:.1} s); ends {:?}",
        load.records, load.plan_seconds, load.produce_seconds, load.ends
    );

    let registry = registry_of(args)?;
    let encoder = runtime.block_on(Encoder::register(&registry, &load.topic))?;
    if (encoder.v1_id, encoder.v2_id) != (load.v1_id, load.v2_id) {
        bail!("schema ids differ between the loader and this process");
    }
    let total: u64 = load.ends.values().map(|e| *e as u64).sum();
    let timeout = Duration::from_secs(args.timeout_secs);
    let mut out_phases = Vec::new();
    let mut storage = None;
    let mut full = None;

    let run = |key: &str| phases.iter().any(|p| p == key);
    if run("a") {
        out_phases.push(phases::bare::read_discard(
            args, &load, broker_pid, timeout,
        )?);
    }
    let decoder = Decoder::new(registry.clone());
    phases::warm(runtime, &decoder, &encoder)?;
    if run("b") {
        out_phases.push(phases::bare::read_decode(
            args, &load, &decoder, runtime, broker_pid, timeout,
        )?);
    }
    // (c) before (d): (d) holds every decoded event in memory, and an
    // allocator keeps some of what is freed, which would count towards (c)'s
    // peak RSS if (c) ran after it.
    // (c) and (x) alternate, --rounds times: the two guarantees measured in
    // one run, on the same topic and broker.
    for round in 0..args.rounds.max(1) {
        if run("c") {
            trim_heap();
            let (phase, f) = runtime.block_on(phases::full::run(
                args,
                &load,
                registry.clone(),
                broker_pid,
                timeout,
                true,
                true,
                false,
                round,
            ))?;
            if round > 0 && !f.counters_match_expected {
                bail!(
                    "({}) counters {:?} differ from the expected ones: no rate reported",
                    phase.key,
                    f.counters
                );
            }
            out_phases.push(phase);
            full.get_or_insert(f);
        }
        if run("x") {
            trim_heap();
            let (phase, f) = runtime.block_on(phases::full::run(
                args,
                &load,
                registry.clone(),
                broker_pid,
                timeout,
                true,
                true,
                true,
                round,
            ))?;
            if !f.counters_match_expected {
                bail!(
                    "({}) counters {:?} differ from the expected ones: no rate reported",
                    phase.key,
                    f.counters
                );
            }
            out_phases.push(phase);
        }
    }
    let side_by_side = if side {
        let expected_states = loader_args
            .expect_file
            .as_deref()
            .map(phases::side_by_side::read_expected)
            .transpose()?;
        let out = phases::side_by_side::run(
            args,
            &load,
            &phases,
            expected_states,
            broker_pid,
            runtime,
            timeout,
        )?;
        out_phases.extend(out.phases());
        Some(out)
    } else {
        None
    };
    drop(expect_dir);
    let failover = if failover {
        trim_heap();
        Some(phases::failover::run(
            args, &load, orders, runtime, timeout,
        )?)
    } else {
        None
    };
    if run("o") {
        trim_heap();
        let (phase, _) = runtime.block_on(phases::full::run(
            args,
            &load,
            registry.clone(),
            broker_pid,
            timeout,
            true,
            false,
            false,
            0,
        ))?;
        out_phases.push(phase);
    }
    if run("e") {
        trim_heap();
        let (phase, _) = runtime.block_on(phases::full::run(
            args,
            &load,
            registry.clone(),
            broker_pid,
            timeout,
            false,
            false,
            false,
            0,
        ))?;
        out_phases.push(phase);
    }
    if run("r") {
        if !run("c") {
            bail!("phase r restores what phase c wrote to its changelog: run c too");
        }
        trim_heap();
        out_phases.push(phases::restore::run(args, &load, broker_pid)?);
    }
    if run("d") {
        trim_heap();
        let (phase, s) =
            phases::store_alone::run(args, &load, &decoder, runtime, broker_pid, timeout)?;
        out_phases.push(phase);
        storage = Some(s);
    }

    for p in &mut out_phases {
        p.written_bytes_per_event = p.written_bytes.map(|b| b as f64 / p.events.max(1) as f64);
    }

    // The loader (mock cluster) stops when its stdin closes.
    drop(child.stdin.take());
    let _ = child.wait();

    let ratio = |steady: bool| {
        let eps = |key: &str| {
            out_phases.iter().find(|p| p.key == key).map(|p| {
                if steady {
                    p.steady_events_per_s
                } else {
                    p.events_per_s
                }
            })
        };
        match (eps("c"), eps("a"), eps("d")) {
            (Some(c), Some(a), Some(d)) => Some(c / a.min(d)),
            (Some(c), Some(a), None) => Some(c / a),
            (Some(c), None, Some(d)) => Some(c / d),
            _ => None,
        }
    };
    let (ratio_total, ratio_steady) = (ratio(false), ratio(true));
    let rate = |key: &str| {
        out_phases
            .iter()
            .find(|p| p.key == key)
            .map(|p| p.events_per_s)
    };
    let ratio_changelog_on_to_off = rate("o").zip(rate("e")).map(|(o, e)| o / e);
    let ratio_outbox_on_to_off = rate("c").zip(rate("o")).map(|(c, o)| c / o);
    Ok(Results {
        machine: Machine {
            cores: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0),
            broker: match &args.bootstrap {
                None => "librdkafka mock cluster (1 broker, child process)".into(),
                Some(b) => b.clone(),
            },
        },
        workload: WorkloadOut {
            topic: load.topic.clone(),
            partitions: load.partitions,
            requested_partitions: load.requested_partitions,
            broker_log_mib: load.log_mib,
            shape: spec.shape,
            id_format: spec.id_format,
            orders,
            events_per_order,
            records: total,
            duplicate_rate: args.duplicate_rate,
            reorder_rate: args.reorder_rate,
            poison_rate: args.poison_rate,
            v1_share: args.v1_share,
            expected: load.expected,
            plan_seconds: load.plan_seconds,
            produce_seconds: load.produce_seconds,
            produce_events_per_s: total as f64 / load.produce_seconds.max(1e-9),
        },
        phases: out_phases,
        ratio_c_to_slower_of_a_d: ratio_total,
        ratio_c_to_slower_of_a_d_steady: ratio_steady,
        ratio_changelog_on_to_off,
        ratio_outbox_on_to_off,
        full_pipeline: full,
        storage,
        side_by_side,
        failover,
    })
}
