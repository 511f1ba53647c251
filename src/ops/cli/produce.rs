//! `produce`: a generated workload (orders, or stock with `entity.kind =
//! "stock"`) produced to the configured input topic and registry, every
//! record acknowledged.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use rdkafka::producer::FutureProducer;

use super::shared::{load_config, Chosen, Exit, UsageError};
use super::workload::WorkloadArgs;
use crate::config::{Config, EntityKind};
use crate::domains::orders::codec::Encoder;
use crate::domains::orders::workload::{plan, IdFormat, Shape, WorkloadSpec};
use crate::engine::entity::Entity;
use crate::ops::load::produce_planned;
use crate::processor::producer_config;
use crate::registry::Registry;

// `produce`'s flags (what the command does is `Command::Produce`'s doc: its help).
#[derive(Args)]
pub(super) struct ProduceArgs {
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
}

/// `produce`: the built-in generators only (orders, stock).
pub(super) async fn command<E: Entity>(
    args: ProduceArgs,
    chosen: &Chosen<E>,
    file: Option<&Path>,
) -> Result<Exit> {
    let ProduceArgs {
        workload,
        events_per_order,
        shape,
        id_format,
        expect_out,
    } = args;
    let config = load_config(file)?;
    match (chosen, config.entity.kind) {
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
