//! `demo`: a built-in domain's generated workload processed on an
//! in-process mock cluster and checked against the generator's expectation
//! ([`crate::ops::demo`]).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;

use super::shared::{load_config, Chosen, Exit, UsageError};
use super::workload::WorkloadArgs;
use crate::config::EntityKind;
use crate::engine::entity::Entity;
use crate::ops::demo::{run_demo, DemoOptions, DemoWorkload};

/// The built-in domains `demo` can generate.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DemoEntity {
    Orders,
    Stock,
}

// `demo`'s flags (what the command does is `Command::Demo`'s doc: its help).
#[derive(Args)]
pub(super) struct DemoArgs {
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
}

/// `demo`: for the built-in domains only (not a user's own entity).
pub(super) async fn command<E: Entity>(
    args: DemoArgs,
    chosen: &Chosen<E>,
    file: Option<&Path>,
) -> Result<Exit> {
    let DemoArgs {
        entity,
        json,
        store_dir,
        partitions,
        workload,
    } = args;
    if let Chosen::Given(_) = chosen {
        return Err(UsageError(format!(
            "demo runs the built-in domains (orders, stock) on an in-process cluster, not {}'s own \
             entity: run `orderly demo`",
            crate::ops::program::name()
        ))
        .into());
    }
    if !(1..=256).contains(&partitions) {
        bail!("--partitions must be between 1 and 256");
    }
    let config = load_config(file)?;
    let entity = demo_entity(entity, config.entity.kind)?;
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

/// The domain to generate: like `run`, the entity `entity.kind` names,
/// unless `--entity` says.
fn demo_entity(given: Option<DemoEntity>, kind: EntityKind) -> Result<DemoEntity> {
    match (given, kind) {
        (Some(entity), _) => Ok(entity),
        (None, EntityKind::Orders) => Ok(DemoEntity::Orders),
        (None, EntityKind::Stock) => Ok(DemoEntity::Stock),
        (None, EntityKind::Latest) => Err(UsageError(
            "demo generates orders or stock; entity.kind = \"latest\" has no generator: give --entity \
             orders or --entity stock"
                .into(),
        )
        .into()),
    }
}
