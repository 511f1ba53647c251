//! `explain KEY`: why each input record of one key was applied, dropped
//! or dead-lettered ([`crate::ops::explain`]), checked against the stored
//! state when this process can open the store.

use std::path::Path;

use anyhow::Result;
use clap::Args;

use super::shared::{load_config, Chosen, Exit, UsageError};
use crate::config::{Config, EntityKind};
use crate::domains::latest::Latest;
use crate::domains::orders::Orders;
use crate::domains::stock::Stock;
use crate::engine::entity::Entity;
use crate::engine::store::Store;
use crate::ops::preflight;

// What `orderly explain` was asked (what the command does is
// `Command::Explain`'s doc: its help).
#[derive(Args)]
pub(super) struct ExplainArgs {
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
}

/// `explain` for the chosen entity (`entity.kind`'s, or a user's own).
pub(super) async fn command<E: Entity + Clone>(
    args: ExplainArgs,
    chosen: Chosen<E>,
    file: Option<&Path>,
) -> Result<Exit> {
    if args.max_records == 0 {
        return Err(UsageError("--max-records is 1 or more".into()).into());
    }
    let config = load_config(file)?;
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
