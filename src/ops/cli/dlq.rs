//! `dlq list|replay`: the dead-letter topic read, and its letters
//! re-published to the input topic ([`crate::ops::redrive`]).

use std::path::Path;

use anyhow::Result;
use clap::Subcommand;

use super::shared::{load_config, Exit};
use crate::ops::redrive::{self, ReplayRequest, Selection, SourcePos, DEFAULT_MAX_REDRIVES};

#[derive(Subcommand)]
pub(super) enum DlqCommand {
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

/// `dlq list|replay`: the library reads and produces with blocking calls, so
/// it runs on a blocking thread.
pub(super) async fn command(command: DlqCommand, file: Option<&Path>) -> Result<Exit> {
    let config = load_config(file)?;
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
