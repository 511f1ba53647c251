//! `repair`: changelog partitions a lost transaction marker left open,
//! found and with `--apply` repaired ([`crate::ops::repair`]).

use std::path::Path;

use anyhow::Result;
use clap::Args;

use super::shared::{load_config, Exit, UsageError};

// `repair`'s flags (what the command does is `Command::Repair`'s doc: its help).
#[derive(Args)]
pub(super) struct RepairArgs {
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
}

pub(super) async fn command(args: RepairArgs, file: Option<&Path>) -> Result<Exit> {
    let RepairArgs {
        partitions,
        apply,
        after_abort,
        json,
    } = args;
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
    let config = load_config(file)?;
    crate::ops::repair::command(config, partitions, apply, after_abort, json).await?;
    Ok(Exit::Success)
}
