//! `replay`: partitions of the input topic moved to a new offset on every
//! instance ([`crate::ops::replay`]).

use std::path::Path;

use anyhow::Result;
use clap::Args;

use super::shared::{load_config, Exit, UsageError};
use crate::ops::replay::{table, Replay, ReplayError, ReplayOptions, Target};

// `replay`'s flags (what the command does is `Command::Replay`'s doc: its
// help); exactly one target.
#[derive(Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by"])))]
pub(super) struct ReplayArgs {
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
}

pub(super) async fn command(args: ReplayArgs, file: Option<&Path>) -> Result<Exit> {
    let target = target(&args)?;
    let ReplayArgs {
        partitions,
        reset_state,
        dry_run,
        json,
        ..
    } = args;
    let config = load_config(file)?;
    let options = ReplayOptions {
        target,
        partitions,
        reset_state,
    };
    let replay = tokio::task::spawn_blocking(move || Replay::new(config, options)).await??;
    let replay = std::sync::Arc::new(replay);
    let planner = replay.clone();
    let rows = tokio::task::spawn_blocking(move || -> Result<_, ReplayError> {
        planner.check_no_members()?;
        planner.plan()
    })
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

/// Where the chosen partitions go: the one target flag given.
fn target(args: &ReplayArgs) -> Result<Target> {
    Ok(
        match (
            args.to_earliest,
            args.to_latest,
            args.to_offset,
            &args.to_datetime,
            args.shift_by,
        ) {
            (true, ..) => Target::Earliest,
            (_, true, ..) => Target::Latest,
            (_, _, Some(offset), ..) => Target::Offset(offset),
            (_, _, _, Some(text), _) => {
                let at = humantime::parse_rfc3339_weak(text).map_err(|e| {
                anyhow::Error::new(UsageError(format!("--to-datetime {text}: {e} (use RFC 3339 in UTC, e.g. 2026-12-01T10:00:00Z)")))
            })?;
                let ms = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as i64)
                    .unwrap_or(0);
                Target::Datetime(ms)
            }
            (_, _, _, _, Some(n)) => Target::ShiftBy(n),
            _ => return Err(UsageError(
                "choose one of --to-earliest, --to-latest, --to-offset, --to-datetime, --shift-by"
                    .into(),
            )
            .into()),
        },
    )
}
