//! `orderly dlq list` and `orderly dlq replay`: the dead-letter topic read
//! back, and chosen letters re-published to the input topic after a fix (a
//! missing schema registered, a producer bug fixed).
//!
//! * [`letter`]: one record of the dead-letter topic, parsed: a letter (the
//!   processor's headers) or a re-drive record.
//! * [`list`](list()): one row per letter, newest last.
//! * [`replay`](replay()): re-publishes letters' original key and payload to
//!   the input partition they came from, with the idempotent producer,
//!   every record acknowledged.
//!
//! ## How a replay remembers what it re-drove
//!
//! Kafka holds all of it; nothing is kept on the machine that ran the
//! command, and nothing rides in offset-commit metadata (nisshi drops it).
//!
//! * **Progress, for `--all`.** A consumer group of its own,
//!   `<kafka.group_id>-dlq-redrive`, commits per dead-letter partition the
//!   offset after the last letter a run handled (re-driven or passed over),
//!   only after the re-published records and the re-drive record below were
//!   acknowledged. The next `--all` starts there, so running it twice sends
//!   nothing twice. The group never joins (partitions are assigned, not
//!   subscribed), it only stores offsets.
//! * **Which records were re-driven, for `--source` and for letters past
//!   the committed offset.** After each acknowledged chunk, one record per
//!   re-driven letter goes to the *re-drive log* ([`log`]), a compacted
//!   topic of its own (`kafka.redrive_topic`), keyed by the letter's source
//!   position. Every run reads the whole log first and skips a letter whose
//!   source position it names as already re-driven. The dead-letter topic
//!   itself holds dead letters only: a Kafka UI, an alert on its growth or
//!   another team's tool sees nothing but letters. (Before the log, re-drive
//!   records were appended to the dead-letter partition, header
//!   `crate::kafka::headers::HEADER_REDRIVE_DONE`; those are still read, never written.) The
//!   commit stays the fast path; the log makes `--source` and `--all` agree.
//! * **Duplicate letters** (a crash of the processor after a letter was
//!   produced and before its batch was written re-sends the letter) share a
//!   source position: one run re-drives the first and skips the others.
//!
//! A crash between the acknowledgements and the re-drive record re-sends
//! that chunk (at most `CHUNK` records) on the next run; the processor's
//! inbox drops a re-sent event as a duplicate, so it is still applied once.
//! Run one replay at a time: two concurrent runs can both send a letter.

pub(crate) mod browse;
pub(crate) mod letter;
pub(crate) mod list;
pub(crate) mod log;
pub(crate) mod replay;
mod scan;
mod time;

use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use tracing::info;

use crate::config::Config;

pub(crate) use letter::SourcePos;
pub(crate) use list::list;
pub(crate) use replay::{replay, Redriven, ReplayRequest, Selection};

/// `dlq replay --max-redrives` default: a record is re-published at most
/// this many times.
pub(crate) const DEFAULT_MAX_REDRIVES: u32 = 3;
/// Records re-published between two re-drive records (and commits): what a
/// crash can re-send.
pub(crate) const CHUNK: usize = 5_000;

/// The consumer group that stores re-drive progress.
pub fn redrive_group(config: &Config) -> String {
    format!("{}-dlq-redrive", config.kafka.group_id)
}

/// Each message states its cause once: an underlying error is kept in a
/// field named `cause`, not `source`, so error chains do not repeat it.
#[derive(Debug, thiserror::Error)]
pub enum RedriveError {
    #[error(
        "dead-letter topic {topic} does not exist at {bootstrap} (kafka.dlq_topic): check the configuration; \
         `{program} run` needs it too and `{program} config check` says how to create it",
        program = crate::ops::program::name()
    )]
    DlqTopicMissing { topic: String, bootstrap: String },
    #[error("input topic {topic} does not exist at {bootstrap} (kafka.input_topic): re-driven records would have nowhere to go")]
    InputTopicMissing { topic: String, bootstrap: String },
    #[error("kafka client setup failed: {cause}")]
    Client { cause: KafkaError },
    #[error("cannot read cluster metadata from {bootstrap}: {cause}")]
    Metadata {
        bootstrap: String,
        cause: KafkaError,
    },
    #[error("cannot read the offsets of {topic} partition {partition}: {cause}")]
    Watermarks {
        topic: String,
        partition: i32,
        cause: KafkaError,
    },
    #[error("cannot read the committed re-drive progress of group {group}: {cause}")]
    Committed { group: String, cause: KafkaError },
    /// A range of the dead-letter topic or the re-drive log could not be
    /// read (the reader's message names the partition; a stalled read too).
    /// Boxed: it would make every `Result` of this module the larger.
    #[error(transparent)]
    Read(Box<crate::kafka::partition_reader::ReadError>),
    #[error(
        "re-publishing the letter of {input_topic} partition {partition} offset {offset} failed: {cause}; the letters \
         acknowledged before it are recorded, run the replay again"
    )]
    Produce {
        input_topic: String,
        partition: i32,
        offset: i64,
        cause: KafkaError,
    },
    #[error("re-drive log topic {topic} (kafka.redrive_topic): {message}")]
    RedriveLog { topic: String, message: String },
    #[error("writing the re-drive record to {topic} partition {partition} failed: {cause}; run the replay again")]
    RedriveRecord {
        topic: String,
        partition: i32,
        cause: KafkaError,
    },
    #[error("committing re-drive progress of group {group} (dead-letter partition {partition} at {offset}) failed: {cause}")]
    Commit {
        group: String,
        partition: i32,
        offset: i64,
        cause: KafkaError,
    },
}

impl From<crate::kafka::partition_reader::ReadError> for RedriveError {
    fn from(error: crate::kafka::partition_reader::ReadError) -> Self {
        RedriveError::Read(Box::new(error))
    }
}

/// A progress line for long runs: after the first second, then every 5 s.
pub(crate) struct Progress {
    what: &'static str,
    started: Instant,
    next: Duration,
    /// Records to read (both passes of a replay count them once).
    total: u64,
    read: u64,
    redriven: u64,
}

impl Progress {
    const FIRST: Duration = Duration::from_secs(1);
    const EVERY: Duration = Duration::from_secs(5);

    pub(crate) fn new(what: &'static str, total: u64) -> Self {
        Progress {
            what,
            started: Instant::now(),
            next: Self::FIRST,
            total,
            read: 0,
            redriven: 0,
        }
    }

    /// One more record read.
    pub(crate) fn read_one(&mut self) {
        self.read += 1;
        self.log_when_due();
    }

    /// `n` more records re-published and acknowledged.
    pub(crate) fn redriven(&mut self, n: usize) {
        self.redriven += n as u64;
        self.log_when_due();
    }

    fn log_when_due(&mut self) {
        let elapsed = self.started.elapsed();
        if elapsed < self.next {
            return;
        }
        info!(
            command = self.what,
            read = self.read,
            of = self.total,
            redriven = self.redriven,
            elapsed_s = elapsed.as_secs(),
            "progress"
        );
        self.next = elapsed + Self::EVERY;
    }
}
