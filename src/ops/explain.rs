//! `orderly explain KEY`: why each input record of one key was applied,
//! dropped as a duplicate or as stale, or dead-lettered.
//!
//! It finds the key's partition (the configured partitioner over the input
//! topic's partition count) and the group member that owns it, reads the
//! key's state from the store when this process can open it, then reads
//! the input partition from `--from` to its end when the command started,
//! keeps the key's records (at most `--max-records`), decodes each as the
//! processor does (through the schema registry) and replays the engine's
//! decide rules over them ([`crate::engine::explain`]). A dead-lettered
//! record is matched with its letter in the dead-letter topic, and the
//! re-drive log says whether it was re-driven. Where the replay ends on
//! another version than the stored state, it says so: a bug, or a history
//! that starts before `--from` or before the input's retention.

use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::config::Config;
use crate::engine::codec::{DecodeError, Decoder};
use crate::engine::entity::{Entity, State};
use crate::engine::explain::{Explained, Explainer, Record};
use crate::kafka::partition_reader::{PartitionReader, ReadError};
use crate::partitioner::Partitioner;
use crate::registry::Registry;

/// How long a broker request of the command may take.
const TIMEOUT: Duration = Duration::from_secs(15);

/// Where the read of the input partition starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// The partition's first retained record.
    Earliest,
    /// This offset (or the first retained one, if later).
    Offset(i64),
    /// The first record at or after this time (milliseconds since the epoch).
    Time(i64),
}

impl std::str::FromStr for Start {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if text == "earliest" {
            return Ok(Start::Earliest);
        }
        if let Ok(offset) = text.parse::<i64>() {
            return if offset >= 0 {
                Ok(Start::Offset(offset))
            } else {
                Err(format!("--from {text}: an offset is 0 or more"))
            };
        }
        humantime::parse_rfc3339(text)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .map(Start::Time)
            .ok_or_else(|| {
                format!(
                    "--from {text}: not `earliest`, an offset or an RFC 3339 time (2026-12-01T10:00:00Z)"
                )
            })
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ExplainError {
    #[error("the input topic {topic} does not exist or has no partitions")]
    NoTopic { topic: String },
    #[error("reading {topic}: {cause}")]
    Kafka {
        topic: String,
        cause: rdkafka::error::KafkaError,
    },
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("the schema registry does not answer: {0}")]
    Registry(String),
    #[error("the configured partitioner: {0}")]
    Partitioner(String),
}

/// Who owns the key's partition, from the group's metadata.
#[derive(Debug, Serialize)]
pub(crate) struct Owner {
    pub member_id: String,
    pub client_id: String,
    pub host: String,
}

/// The key's stored state, when it could be read.
#[derive(Debug, Serialize)]
pub(crate) struct Stored {
    /// Where it was read from, or why it was not.
    pub source: String,
    /// The entity's view of it (`None`: no state, or not read).
    pub state: Option<serde_json::Value>,
    pub version: Option<i64>,
    pub event_id: Option<String>,
}

/// One record explained, with its dead letter when it has one.
#[derive(Debug, Serialize)]
pub(crate) struct Row {
    #[serde(flatten)]
    pub explained: Explained,
    /// Where its letter is in the dead-letter topic (dead letters only;
    /// `None`: not found there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub letter: Option<LetterAt>,
}

#[derive(Debug, Serialize)]
pub(crate) struct LetterAt {
    pub dlq_partition: i32,
    pub dlq_offset: i64,
    pub redriven: bool,
}

/// What `explain` found.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub key: String,
    pub entity: &'static str,
    pub topic: String,
    pub partition: i32,
    /// `None`: no member of the group owns it now (or the metadata says
    /// nothing).
    pub owner: Option<Owner>,
    pub stored: Stored,
    /// The first offset read and the end (exclusive) the read stopped at.
    pub from_offset: i64,
    pub end_offset: i64,
    /// True when the partition holds records before `from_offset` (earlier
    /// records of the key, if any, were not replayed).
    pub history_before: bool,
    /// Records of the partition read, and how many were the key's.
    pub scanned: u64,
    /// True when `--max-records` stopped the read before the end.
    pub truncated: bool,
    pub records: Vec<Row>,
    /// Records per decision.
    pub counts: BTreeMap<&'static str, u64>,
    /// Where the replay and the stored state differ (`None`: they agree,
    /// or the state was not read).
    pub disagreement: Option<String>,
    pub seconds: f64,
}

/// A record of the key, as read.
struct Raw {
    offset: i64,
    timestamp_ms: i64,
    payload: Option<Vec<u8>>,
}

/// Runs `orderly explain`: see the module doc. `stored` is the key's state
/// as the caller read it and where from, or why it could not.
pub(crate) async fn explain<E: Entity + Clone>(
    config: &Config,
    entity: &E,
    key: &str,
    start: Start,
    max_records: usize,
    stored: Result<(Option<State<E>>, String), String>,
) -> Result<Report, anyhow::Error> {
    let started = Instant::now();
    let topic = config.kafka.input_topic.clone();
    let partitioner = Partitioner::named(&config.kafka.input_partitioner)
        .map_err(|e| ExplainError::Partitioner(e.to_string()))?;
    let cfg = config.clone();
    let (topic2, key2) = (topic.clone(), key.to_string());
    let read = tokio::task::spawn_blocking(move || {
        read_key(&cfg, &topic2, &key2, partitioner, start, max_records)
    })
    .await??;
    let registry = Registry::from_config(&config.registry)?;
    let decoder = Decoder::for_entity(entity.clone(), registry);
    let retention_ms = i64::try_from(config.inbox_retention().as_millis()).unwrap_or(i64::MAX);
    let read_store = stored.is_ok();
    let (stored_state, source) = stored.unwrap_or_else(|why| (None, why));
    // The replay starts from nothing: a key's history starts with its
    // first record, and what was before `--from` shows as a disagreement.
    let mut explainer = Explainer::<E>::new(key, None, retention_ms);
    let letters = if read.raw.is_empty() {
        HashMap::new()
    } else {
        letters_of(config, read.partition).await?
    };
    let mut records = Vec::with_capacity(read.raw.len());
    let mut counts = BTreeMap::new();
    for record in read.raw {
        let read = match decoder.decode(record.payload.as_deref()).await {
            Ok(event) => Ok(event),
            Err(DecodeError::Poison { kind, message }) => Err((kind, message)),
            Err(DecodeError::Transient(message)) => {
                return Err(ExplainError::Registry(message).into())
            }
        };
        let explained = explainer.next(Record {
            offset: record.offset,
            timestamp_ms: record.timestamp_ms,
            read,
        });
        *counts.entry(explained.verdict.label()).or_default() += 1;
        let letter = matches!(
            explained.verdict,
            crate::engine::explain::Verdict::DeadLettered { .. }
        )
        .then(|| letters.get(&record.offset))
        .flatten()
        .map(|l| LetterAt {
            dlq_partition: l.0,
            dlq_offset: l.1,
            redriven: l.2,
        });
        records.push(Row { explained, letter });
    }
    let disagreement = read_store
        .then(|| explainer.disagreement(stored_state.as_ref()))
        .flatten();
    Ok(Report {
        key: key.to_string(),
        entity: E::NAME,
        topic,
        partition: read.partition,
        owner: read.owner,
        stored: Stored {
            source,
            version: stored_state.as_ref().map(|s| s.version),
            event_id: stored_state.as_ref().map(|s| s.event_id.clone()),
            state: stored_state
                .as_ref()
                .and_then(|s| serde_json::to_value(entity.view(s)).ok()),
        },
        from_offset: read.from,
        end_offset: read.end,
        history_before: read.low < read.from || read.low > 0,
        scanned: read.scanned,
        truncated: read.truncated,
        records,
        counts,
        disagreement,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// What the read of the input partition found.
struct Read {
    partition: i32,
    owner: Option<Owner>,
    /// The first offset read, the end (exclusive), the partition's start.
    from: i64,
    end: i64,
    low: i64,
    raw: Vec<Raw>,
    scanned: u64,
    truncated: bool,
}

/// The key's partition, its owner, and its records in `[from, end)`.
fn read_key(
    config: &Config,
    topic: &str,
    key: &str,
    partitioner: Partitioner,
    start: Start,
    max_records: usize,
) -> Result<Read, ExplainError> {
    let kafka = kafka_error(topic);
    let client = crate::kafka::reader_consumer_config(config);
    let consumer: BaseConsumer = client.create().map_err(kafka)?;
    let count = partition_count(&consumer, topic)?;
    let partition = partitioner.partition(key.as_bytes(), count);
    let owner = owner_of(&consumer, &config.kafka.group_id, topic, partition);
    let reader = PartitionReader::new(&client, topic, partition)?;
    let (low, end) = reader.watermarks()?;
    let from = match start {
        Start::Earliest => low,
        Start::Offset(offset) => offset.max(low),
        Start::Time(ms) => first_at_or_after(&consumer, topic, partition, ms, (low, end))?,
    };
    let (raw, scanned, truncated) =
        scan_key(&reader, (topic, partition), key, (from, end), max_records)?;
    Ok(Read {
        partition,
        owner,
        from,
        end,
        low,
        raw,
        scanned,
        truncated,
    })
}

/// A Kafka error of a request about `topic`.
fn kafka_error(topic: &str) -> impl Fn(rdkafka::error::KafkaError) -> ExplainError + Copy + '_ {
    move |cause| ExplainError::Kafka {
        topic: topic.to_string(),
        cause,
    }
}

/// The input topic's partition count (the partitioner's modulus); a topic
/// without partitions is one that does not exist.
fn partition_count(consumer: &BaseConsumer, topic: &str) -> Result<u32, ExplainError> {
    let metadata = consumer
        .fetch_metadata(Some(topic), TIMEOUT)
        .map_err(kafka_error(topic))?;
    let partitions = crate::kafka::partition_count(&metadata, topic).unwrap_or(0);
    u32::try_from(partitions)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| ExplainError::NoTopic {
            topic: topic.to_string(),
        })
}

/// The member of `group` the partition is assigned to, if the group
/// answers and has one.
fn owner_of(consumer: &BaseConsumer, group: &str, topic: &str, partition: i32) -> Option<Owner> {
    crate::kafka::group_members::describe_group(consumer.client(), group, TIMEOUT)
        .ok()
        .and_then(|members| {
            members.into_iter().find(|m| {
                m.assignment
                    .iter()
                    .any(|(t, p)| t == topic && *p == partition)
            })
        })
        .map(|m| Owner {
            member_id: m.member_id,
            client_id: m.client_id,
            host: m.host,
        })
}

/// The first offset of the partition whose record is at or after `ms`
/// (not before `low`); `end` when there is none.
fn first_at_or_after(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
    ms: i64,
    (low, end): (i64, i64),
) -> Result<i64, ExplainError> {
    let kafka = kafka_error(topic);
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(ms))
        .map_err(kafka)?;
    let found = consumer.offsets_for_times(list, TIMEOUT).map_err(kafka)?;
    Ok(match found.elements().first().map(|e| e.offset()) {
        Some(Offset::Offset(offset)) => offset.max(low),
        // No record at or after the time.
        _ => end,
    })
}

/// The records of `key` in `[from, end)` of the partition, at most
/// `max_records`: the records, how many were scanned, and whether the
/// read stopped before the end.
fn scan_key(
    reader: &PartitionReader<'_>,
    (topic, partition): (&str, i32),
    key: &str,
    (from, end): (i64, i64),
    max_records: usize,
) -> Result<(Vec<Raw>, u64, bool), ExplainError> {
    let mut progress = Progress::new(end.saturating_sub(from));
    let mut raw = Vec::new();
    let mut scanned = 0u64;
    let mut truncated = false;
    let wanted = key.as_bytes();
    let mut full = false;
    let result = reader.scan(from, end, |message| {
        scanned += 1;
        if message.key() == Some(wanted) {
            raw.push(Raw {
                offset: message.offset(),
                timestamp_ms: message.timestamp().to_millis().unwrap_or(0),
                payload: message.payload().map(<[u8]>::to_vec),
            });
            if raw.len() >= max_records {
                // Stops the read here (told apart from a real cancel below).
                full = true;
                truncated = message.offset() + 1 < end;
                return Err(ExplainError::Read(ReadError::Cancelled {
                    topic: topic.to_string(),
                    partition,
                }));
            }
        }
        progress.show(scanned, raw.len());
        Ok(())
    });
    progress.done();
    match result {
        Ok(()) => {}
        Err(ExplainError::Read(ReadError::Cancelled { .. })) if full => {}
        Err(other) => return Err(other),
    }
    Ok((raw, scanned, truncated))
}

/// The letters of the input partition's records: source offset to (DLQ
/// partition, DLQ offset, re-driven).
async fn letters_of(
    config: &Config,
    partition: i32,
) -> Result<HashMap<i64, (i32, i64, bool)>, anyhow::Error> {
    let cfg = config.clone();
    let listing =
        tokio::task::spawn_blocking(move || crate::ops::redrive::list(&cfg, None)).await??;
    Ok(listing
        .letters
        .iter()
        .filter(|l| {
            l.source_topic.as_deref() == Some(config.kafka.input_topic.as_str())
                && l.source_partition == Some(partition)
        })
        .filter_map(|l| {
            Some((
                l.source_offset?,
                (l.dlq_partition, l.dlq_offset, l.redriven),
            ))
        })
        .collect())
}

/// The read's progress: a line redrawn on a terminal, a log line every 5 s
/// otherwise.
struct Progress {
    total: i64,
    terminal: bool,
    started: Instant,
    next: Duration,
}

impl Progress {
    fn new(total: i64) -> Self {
        Progress {
            total,
            terminal: std::io::stderr().is_terminal(),
            started: Instant::now(),
            next: Duration::from_millis(500),
        }
    }

    fn show(&mut self, read: u64, found: usize) {
        let elapsed = self.started.elapsed();
        if elapsed < self.next {
            return;
        }
        let share = if self.total > 0 {
            read as f64 * 100.0 / self.total as f64
        } else {
            100.0
        };
        if self.terminal {
            eprint!(
                "\rexplain: {read} of {} records read ({share:.0}%), {found} of the key",
                self.total
            );
            let _ = std::io::stderr().flush();
            self.next = elapsed + Duration::from_millis(200);
        } else {
            tracing::info!(
                read,
                of = self.total,
                found,
                "explain: reading the input partition"
            );
            self.next = elapsed + Duration::from_secs(5);
        }
    }

    fn done(&self) {
        if self.terminal && self.started.elapsed() >= Duration::from_millis(500) {
            eprintln!();
        }
    }
}

/// The report as lines for a person.
pub(crate) fn print(report: &Report) {
    println!(
        "{} {}: partition {} of {}, {}",
        report.entity,
        report.key,
        report.partition,
        report.topic,
        match &report.owner {
            Some(o) => format!(
                "owned by member {} ({} on {})",
                o.member_id, o.client_id, o.host
            ),
            None => "owned by no member now".to_string(),
        }
    );
    match (&report.stored.version, &report.stored.event_id) {
        (Some(version), Some(event_id)) => println!(
            "stored ({}): version {version}, event {event_id}",
            report.stored.source
        ),
        _ => println!("stored: {}", report.stored.source),
    }
    println!(
        "read offsets {}..{} ({} records, {} of the key){}{}",
        report.from_offset,
        report.end_offset,
        report.scanned,
        report.records.len(),
        if report.history_before {
            "; the partition holds earlier records, not read (the replay starts with no state)"
        } else {
            ""
        },
        if report.truncated {
            "; stopped at --max-records"
        } else {
            ""
        }
    );
    for row in &report.records {
        let e = &row.explained;
        let event = match (&e.event_id, e.version) {
            (Some(id), Some(version)) => format!("v{version} {id}"),
            _ => "(not decoded)".to_string(),
        };
        use crate::engine::explain::Verdict;
        let why = match &e.verdict {
            Verdict::Applied {
                from_version,
                to_version,
            } => match from_version {
                Some(from) => format!("applied: version {from} -> {to_version}"),
                None => format!("applied: first state, version {to_version}"),
            },
            Verdict::Duplicate { of_offset } => match of_offset {
                Some(offset) => format!("duplicate of the record at offset {offset}"),
                None => "duplicate of an event applied before the records read".to_string(),
            },
            Verdict::Stale { stored_version } => {
                format!("stale: not newer than version {stored_version}")
            }
            Verdict::DeadLettered { kind, message } => {
                let at = match &row.letter {
                    Some(l) => format!(
                        "; letter at {}:{}{}",
                        l.dlq_partition,
                        l.dlq_offset,
                        if l.redriven { ", re-driven" } else { "" }
                    ),
                    None => "; no letter found in the dead-letter topic".to_string(),
                };
                format!("dead-lettered ({kind}): {message}{at}")
            }
            Verdict::OtherKey { event_key } => {
                format!("decided for key {event_key} (its event names it)")
            }
        };
        println!("  @{:<10} {event:<40} {why}", e.offset);
    }
    let counts: Vec<String> = report
        .counts
        .iter()
        .map(|(label, n)| format!("{n} {label}"))
        .collect();
    println!(
        "{} in {:.1} s",
        if counts.is_empty() {
            "no record of the key".to_string()
        } else {
            counts.join(", ")
        },
        report.seconds
    );
    if let Some(disagreement) = &report.disagreement {
        println!("DISAGREES: {disagreement}");
    }
}

#[cfg(test)]
mod tests {
    use super::Start;

    #[test]
    fn from_takes_earliest_an_offset_or_a_time_and_says_what_else_it_wants() {
        assert_eq!("earliest".parse::<Start>(), Ok(Start::Earliest));
        assert_eq!("42".parse::<Start>(), Ok(Start::Offset(42)));
        assert_eq!(
            "2026-12-01T10:00:00Z".parse::<Start>(),
            Ok(Start::Time(1_796_119_200_000))
        );
        let said = "-3".parse::<Start>().unwrap_err();
        assert!(said.contains("0 or more"), "{said}");
        let said = "yesterday".parse::<Start>().unwrap_err();
        assert!(said.contains("RFC 3339"), "{said}");
    }
}
