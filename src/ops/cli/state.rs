//! `state get|dump|stats`: the local store read (with `run` stopped; it
//! never creates one).

use std::path::Path;

use anyhow::Result;
use clap::Subcommand;

use super::shared::{load_config, Chosen, Exit, NoStore};
use crate::config::{Config, EntityKind};
use crate::domains::latest::Latest;
use crate::domains::orders::Orders;
use crate::domains::stock::Stock;
use crate::engine::entity::Entity;
use crate::engine::store::{Checkpoint, Store};
use crate::ops::preflight;

#[derive(Subcommand)]
pub(super) enum StateCommand {
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
    /// Per-partition next offset and counters, and totals, with the store's bytes on disk and its live states'
    Stats {
        /// Print one JSON object (per partition and totals) instead of a table
        #[arg(long)]
        json: bool,
    },
}

/// `state` for the chosen entity (`entity.kind`'s, or a user's own).
pub(super) fn command<E: Entity>(
    command: StateCommand,
    chosen: Chosen<E>,
    file: Option<&Path>,
) -> Result<Exit> {
    let config = load_config(file)?;
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

fn state_command<E: Entity>(entity: &E, store: &Store, command: StateCommand) -> Result<Exit> {
    match command {
        StateCommand::Get { order_id, json } => get(entity, store, &order_id, json),
        StateCommand::Dump => dump(entity, store),
        StateCommand::Stats { json } => stats::<E>(store, json),
    }
}

/// `state get`: one key's state, as a table or one JSON object.
fn get<E: Entity>(entity: &E, store: &Store, order_id: &str, json: bool) -> Result<Exit> {
    match store.find::<E>(order_id)? {
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
    }
}

/// `state dump`: every key's state with its input partition, as JSON lines.
fn dump<E: Entity>(entity: &E, store: &Store) -> Result<Exit> {
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

/// `state stats`: per-partition next offset and counters, and totals.
fn stats<E: Entity>(store: &Store, json: bool) -> Result<Exit> {
    let stats = store.stats()?;
    let mut total = Checkpoint::default();
    let mut orders = 0;
    let mut outbox_pending = 0;
    let (mut state_bytes, mut inbox_bytes) = (0, 0);
    let disk_bytes = store.disk_bytes()?;
    for s in &stats {
        outbox_pending += s.outbox_pending;
        state_bytes += s.state_bytes;
        inbox_bytes += s.inbox_bytes;
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
            "replayed": total.replayed, "skipped": total.skipped, "outbox_pending": outbox_pending,
            "state_bytes": state_bytes, "inbox_bytes": inbox_bytes, "disk_bytes": disk_bytes
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
        println!(
            "store: {:.1} MiB on disk for {:.1} MiB of live states and {:.1} MiB of inbox chunks (keys and stored values)",
            disk_bytes as f64 / (1 << 20) as f64,
            state_bytes as f64 / (1 << 20) as f64,
            inbox_bytes as f64 / (1 << 20) as f64
        );
    }
    Ok(Exit::Success)
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
