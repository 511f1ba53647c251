//! `orderly dlq replay`: chosen letters' original key and payload
//! re-published to the input partition they came from, with a re-drive
//! count, every record acknowledged before its progress is recorded (see
//! the module above for how a run remembers).
//!
//! The re-drive log ([`super::log`]) is read first, whole: which source
//! positions were re-driven before. Then each dead-letter partition is read
//! twice: first its letters (headers only are kept, and any re-drive
//! records an older orderly wrote there), to decide every letter; then again
//! from the first chosen letter, sending the chosen ones in chunks of
//! [`CHUNK`], each chunk recorded in the log once acknowledged. Memory holds
//! the letters' headers, never their payloads.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Instant;

use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use serde::Serialize;

use super::letter::{self, DlqRecord, Letter, RedrivenSet, SourcePos};
use super::log::RedriveLog;
use super::scan::Dlq;
use super::{Progress, RedriveError, CHUNK};
use crate::config::Config;
use crate::kafka::headers::{HEADER_REDRIVE_COUNT, HEADER_REDRIVE_SOURCE};
use crate::kafka::producer_config;

/// Which letters to re-drive.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Every letter after the re-drive group's committed progress.
    All,
    /// The letters of these source positions, wherever they are.
    Sources(Vec<SourcePos>),
}

/// What `dlq replay` is asked to do.
#[derive(Debug, Clone)]
pub struct ReplayRequest {
    /// Which letters.
    pub selection: Selection,
    /// Decide and report only: nothing produced, nothing committed.
    pub dry_run: bool,
    /// Letters whose re-drive count reached this are skipped.
    pub max_redrives: u32,
}

/// A letter re-published (or, in a dry run, to be).
#[derive(Debug, Clone, Serialize)]
pub struct Redriven {
    pub(crate) dlq_partition: i32,
    pub(crate) dlq_offset: i64,
    pub source_partition: i32,
    pub source_offset: i64,
    pub error_kind: Option<String>,
    /// The count the re-published record carries.
    pub redrive_count: u32,
}

/// Why a chosen letter is not re-published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SkipReason {
    /// A re-drive record names its source position (or an earlier letter
    /// of this run had the same one).
    AlreadyRedriven,
    LimitReached {
        count: u32,
        max: u32,
    },
    ForeignTopic {
        topic: String,
        input_topic: String,
    },
    NoSuchPartition {
        partition: i32,
        partitions: i32,
    },
    Defective(String),
}

impl SkipReason {
    /// A short fixed label, for JSON and the summary's counts.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            SkipReason::AlreadyRedriven => "already_redriven",
            SkipReason::LimitReached { .. } => "limit_reached",
            SkipReason::ForeignTopic { .. } => "foreign_topic",
            SkipReason::NoSuchPartition { .. } => "no_such_partition",
            SkipReason::Defective(_) => "defective",
        }
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::AlreadyRedriven => write!(f, "already re-driven"),
            SkipReason::LimitReached { count, max } => {
                write!(
                    f,
                    "re-drive limit reached: re-driven {count} times, --max-redrives is {max}"
                )
            }
            SkipReason::ForeignTopic { topic, input_topic } => {
                write!(
                    f,
                    "its source topic {topic} is not kafka.input_topic ({input_topic}); refused"
                )
            }
            SkipReason::NoSuchPartition {
                partition,
                partitions,
            } => {
                write!(
                    f,
                    "the input topic has no partition {partition} (it has {partitions})"
                )
            }
            SkipReason::Defective(defect) => write!(f, "{defect}"),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Skipped {
    pub(crate) dlq_partition: i32,
    pub(crate) dlq_offset: i64,
    pub source_topic: Option<String>,
    pub source_partition: Option<i32>,
    pub source_offset: Option<i64>,
    pub redrive_count: u32,
    pub kind: &'static str,
    pub reason: String,
}

impl Skipped {
    fn new(letter: &Letter, reason: &SkipReason) -> Self {
        Skipped {
            dlq_partition: letter.dlq_partition,
            dlq_offset: letter.dlq_offset,
            source_topic: letter.source_topic.clone(),
            source_partition: letter.source_partition,
            source_offset: letter.source_offset,
            redrive_count: letter.redrive_count,
            kind: reason.kind(),
            reason: reason.to_string(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ReplayReport {
    pub dlq_topic: String,
    pub input_topic: String,
    pub dry_run: bool,
    pub max_redrives: u32,
    /// Letters read: with `--all` those after the committed progress, with
    /// `--source` every letter of the topic.
    pub letters_read: u64,
    /// Letters the selection chose (with `--all`, every letter read).
    pub chosen: u64,
    pub redriven: Vec<Redriven>,
    pub skipped: Vec<Skipped>,
    /// `--source` positions no letter has.
    pub not_found: Vec<SourcePos>,
    /// The re-drive progress this run committed, per dead-letter partition.
    pub committed: BTreeMap<i32, i64>,
    pub(crate) elapsed_ms: u64,
}

/// Re-drives the letters `request` chooses. Blocking: call it from a
/// thread that may block.
pub fn replay(config: &Config, request: &ReplayRequest) -> Result<ReplayReport, RedriveError> {
    let started = Instant::now();
    let dlq = Dlq::open(config)?;
    let input_topic = config.kafka.input_topic.clone();
    let (partitions, input_partitions) = dlq.partition_counts(&input_topic)?;
    let input_partitions = input_partitions.ok_or_else(|| RedriveError::InputTopicMissing {
        topic: input_topic.clone(),
        bootstrap: config.kafka.bootstrap_servers.clone(),
    })?;
    let mut chooser = Chooser::new(request, &input_topic, input_partitions);
    let ranges = ranges(&dlq, partitions, chooser.all())?;
    let log = RedriveLog::of(config);
    let sender = match request.dry_run {
        true => None,
        false => {
            log.ensure(config, &dlq)?;
            Some(Sender::new(config, &dlq, &log, chooser.all())?)
        }
    };
    let mut report = ReplayReport::new(&dlq, &input_topic, request);
    let total: i64 = ranges
        .iter()
        .map(|(_, from, end)| (end - from).max(0))
        .sum();
    let mut progress = Progress::new("dlq replay", total as u64);
    // One set for the run: duplicate letters of a record normally share a
    // dead-letter partition (same key), but not after the topic was given
    // more partitions.
    let mut done = RedrivenSet::default();
    log.read_into(&dlq, &input_topic, &mut done)?;
    for (partition, from, end) in ranges {
        if from >= end {
            continue;
        }
        let letters = read_letters(
            &dlq,
            (partition, from, end),
            &input_topic,
            &mut done,
            &mut progress,
        )?;
        let plan = chooser.plan(letters, &mut report, &mut done);
        match &sender {
            None => report.redriven.extend(plan.into_values()),
            Some(sender) => {
                sender.send_planned(partition, &plan, end, &mut report, &mut progress)?
            }
        }
    }
    report.not_found = chooser.not_found();
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

impl ReplayReport {
    /// The report of a run that has read nothing yet.
    fn new(dlq: &Dlq, input_topic: &str, request: &ReplayRequest) -> Self {
        ReplayReport {
            dlq_topic: dlq.topic.clone(),
            input_topic: input_topic.to_string(),
            dry_run: request.dry_run,
            max_redrives: request.max_redrives,
            letters_read: 0,
            chosen: 0,
            redriven: Vec::new(),
            skipped: Vec::new(),
            not_found: Vec::new(),
            committed: BTreeMap::new(),
            elapsed_ms: 0,
        }
    }
}

/// What each dead-letter partition is read over: (partition, from, end),
/// from the committed re-drive progress when `all` (`--all`), else from
/// its first retained letter, up to its end offset now.
fn ranges(dlq: &Dlq, partitions: i32, all: bool) -> Result<Vec<(i32, i64, i64)>, RedriveError> {
    let committed = if all {
        dlq.committed(partitions)?
    } else {
        BTreeMap::new()
    };
    let mut ranges = Vec::with_capacity(partitions as usize);
    for partition in 0..partitions {
        let (low, end) = dlq.watermarks(partition)?;
        let from = committed
            .get(&partition)
            .copied()
            .flatten()
            .map_or(low, |c| c.max(low));
        ranges.push((partition, from, end));
    }
    Ok(ranges)
}

/// The first pass over one dead-letter partition's `(partition, from,
/// end)`: its letters (headers only), and into `done` the re-drive records
/// an older orderly wrote there.
fn read_letters(
    dlq: &Dlq,
    (partition, from, end): (i32, i64, i64),
    input_topic: &str,
    done: &mut RedrivenSet,
    progress: &mut Progress,
) -> Result<Vec<Letter>, RedriveError> {
    let mut letters = Vec::new();
    dlq.scan(partition, from, end, |message| {
        match letter::parse(message) {
            DlqRecord::Letter(letter) => letters.push(letter),
            DlqRecord::Redriven {
                input_topic: topic,
                sources,
            } => done.add(input_topic, &topic, sources),
        }
        progress.read_one();
        Ok(())
    })?;
    Ok(letters)
}

/// Which letters a run chooses, and the `--source` positions it has found
/// a letter of so far.
struct Chooser<'a> {
    request: &'a ReplayRequest,
    input_topic: &'a str,
    input_partitions: i32,
    /// The `--source` positions asked for (none with `--all`).
    wanted: BTreeSet<SourcePos>,
    /// Those of `wanted` a letter has.
    found: BTreeSet<SourcePos>,
}

impl<'a> Chooser<'a> {
    fn new(request: &'a ReplayRequest, input_topic: &'a str, input_partitions: i32) -> Self {
        let wanted = match &request.selection {
            Selection::All => BTreeSet::new(),
            Selection::Sources(sources) => sources.iter().copied().collect(),
        };
        Chooser {
            request,
            input_topic,
            input_partitions,
            wanted,
            found: BTreeSet::new(),
        }
    }

    /// `--all`: every letter after the committed progress.
    fn all(&self) -> bool {
        matches!(self.request.selection, Selection::All)
    }

    /// Decides one partition's `letters`: those to re-drive, by dead-letter
    /// offset; the skipped ones (and the counts) go into `report`.
    fn plan(
        &mut self,
        letters: Vec<Letter>,
        report: &mut ReplayReport,
        done: &mut RedrivenSet,
    ) -> BTreeMap<i64, Redriven> {
        let all = self.all();
        let mut plan = BTreeMap::new();
        for letter in letters {
            report.letters_read += 1;
            if !all {
                match letter.source() {
                    Some(source) if self.wanted.contains(&source) => self.found.insert(source),
                    _ => continue,
                };
            }
            report.chosen += 1;
            match decide(
                &letter,
                self.input_topic,
                self.input_partitions,
                self.request.max_redrives,
                done,
            ) {
                Ok(redriven) => {
                    plan.insert(letter.dlq_offset, redriven);
                }
                Err(reason) => report.skipped.push(Skipped::new(&letter, &reason)),
            }
        }
        plan
    }

    /// The `--source` positions no letter has.
    fn not_found(&self) -> Vec<SourcePos> {
        self.wanted.difference(&self.found).copied().collect()
    }
}

/// What to do with one chosen letter. `done` holds the source positions
/// re-driven so far; a letter to re-drive is added to it, so a duplicate
/// letter later in the run is skipped.
fn decide(
    letter: &Letter,
    input_topic: &str,
    input_partitions: i32,
    max_redrives: u32,
    done: &mut RedrivenSet,
) -> Result<Redriven, SkipReason> {
    if let Some(defect) = &letter.defect {
        return Err(SkipReason::Defective(defect.clone()));
    }
    let (Some(topic), Some(source)) = (&letter.source_topic, letter.source()) else {
        return Err(SkipReason::Defective(
            "not an orderly dead letter: no source headers".into(),
        ));
    };
    if topic != input_topic {
        return Err(SkipReason::ForeignTopic {
            topic: topic.clone(),
            input_topic: input_topic.to_string(),
        });
    }
    if done.contains(&source) {
        return Err(SkipReason::AlreadyRedriven);
    }
    if letter.redrive_count >= max_redrives {
        return Err(SkipReason::LimitReached {
            count: letter.redrive_count,
            max: max_redrives,
        });
    }
    if source.partition >= input_partitions {
        return Err(SkipReason::NoSuchPartition {
            partition: source.partition,
            partitions: input_partitions,
        });
    }
    done.insert(source);
    Ok(Redriven {
        dlq_partition: letter.dlq_partition,
        dlq_offset: letter.dlq_offset,
        source_partition: source.partition,
        source_offset: source.offset,
        error_kind: letter.error_kind.clone(),
        redrive_count: letter.redrive_count.saturating_add(1),
    })
}

/// Re-publishes planned letters, then records and (with `--all`) commits
/// each acknowledged chunk.
struct Sender<'a> {
    producer: FutureProducer,
    dlq: &'a Dlq,
    log: &'a RedriveLog,
    input_topic: String,
    /// `--all` commits progress; `--source` only writes the log.
    commit: bool,
}

impl<'a> Sender<'a> {
    fn new(
        config: &Config,
        dlq: &'a Dlq,
        log: &'a RedriveLog,
        commit: bool,
    ) -> Result<Self, RedriveError> {
        let producer = producer_config(config)
            .set("linger.ms", "5")
            .create()
            .map_err(|cause| RedriveError::Client { cause })?;
        Ok(Sender {
            producer,
            dlq,
            log,
            input_topic: config.kafka.input_topic.clone(),
            commit,
        })
    }

    /// Reads the partition again from the first planned letter to the last
    /// and sends each planned one; progress is recorded every [`CHUNK`]
    /// letters and at the end, where `--all` commits `end` (the letters
    /// after the last planned one were all skipped: handled).
    fn send_planned(
        &self,
        partition: i32,
        plan: &BTreeMap<i64, Redriven>,
        end: i64,
        report: &mut ReplayReport,
        progress: &mut Progress,
    ) -> Result<(), RedriveError> {
        let mut pending: Vec<(Redriven, DeliveryFuture)> = Vec::new();
        if let (Some(&first), Some(&last)) = (plan.keys().next(), plan.keys().next_back()) {
            self.dlq.scan(
                partition,
                first,
                crate::engine::store::next_offset_after(last),
                |message| {
                    let Some(planned) = plan.get(&message.offset()) else {
                        return Ok(());
                    };
                    if pending.len() >= CHUNK {
                        // Every record before this one is handled.
                        let sent =
                            self.settle(partition, &mut pending, message.offset(), report)?;
                        progress.redriven(sent);
                    }
                    pending.push((planned.clone(), self.send(message, planned)?));
                    Ok(())
                },
            )?;
        }
        let sent = self.settle(partition, &mut pending, end, report)?;
        progress.redriven(sent);
        Ok(())
    }

    fn send(
        &self,
        message: &BorrowedMessage<'_>,
        planned: &Redriven,
    ) -> Result<DeliveryFuture, RedriveError> {
        let count = planned.redrive_count.to_string();
        let source = SourcePos {
            partition: planned.source_partition,
            offset: planned.source_offset,
        }
        .to_string();
        let headers = crate::kafka::headers::headers([
            (HEADER_REDRIVE_COUNT, count.as_bytes()),
            (HEADER_REDRIVE_SOURCE, source.as_bytes()),
        ]);
        let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&self.input_topic)
            .partition(planned.source_partition)
            .headers(headers);
        if let Some(key) = message.key() {
            record = record.key(key);
        }
        if let Some(payload) = message.payload() {
            record = record.payload(payload);
        }
        crate::kafka::send_blocking(&self.producer, record).map_err(|cause| RedriveError::Produce {
            input_topic: self.input_topic.clone(),
            partition: planned.source_partition,
            offset: planned.source_offset,
            cause,
        })
    }

    /// Waits for every pending acknowledgement, writes the re-drive record
    /// of those acknowledged, then (with `--all`) commits `next_offset`.
    /// A failed send is returned after the others are recorded; nothing is
    /// committed then. Returns how many were acknowledged.
    fn settle(
        &self,
        partition: i32,
        pending: &mut Vec<(Redriven, DeliveryFuture)>,
        next_offset: i64,
        report: &mut ReplayReport,
    ) -> Result<usize, RedriveError> {
        let (planned, deliveries): (Vec<Redriven>, Vec<DeliveryFuture>) = pending.drain(..).unzip();
        let results = futures::executor::block_on(futures::future::join_all(deliveries));
        let mut acknowledged = Vec::with_capacity(planned.len());
        let mut failure = None;
        for (planned, result) in planned.into_iter().zip(results) {
            let cause = match result {
                Ok(Ok(_)) => {
                    acknowledged.push(planned);
                    continue;
                }
                Ok(Err((cause, _))) => cause,
                Err(_) => KafkaError::Canceled,
            };
            failure.get_or_insert(RedriveError::Produce {
                input_topic: self.input_topic.clone(),
                partition: planned.source_partition,
                offset: planned.source_offset,
                cause,
            });
        }
        self.record(&acknowledged)?;
        let sent = acknowledged.len();
        report.redriven.extend(acknowledged);
        if let Some(error) = failure {
            return Err(error);
        }
        if self.commit {
            self.dlq.commit(partition, next_offset)?;
            report.committed.insert(partition, next_offset);
        }
        Ok(sent)
    }

    /// Appends the log records naming `redriven` (the re-drive log, not
    /// the dead-letter topic) and waits for the acknowledgements.
    fn record(&self, redriven: &[Redriven]) -> Result<(), RedriveError> {
        self.log.record(&self.producer, &self.input_topic, redriven)
    }
}

impl ReplayReport {
    /// One line per letter handled: re-driven (or, in a dry run, to be),
    /// skipped with the reason, or a `--source` not found.
    pub fn lines(&self) -> Vec<String> {
        let verb = if self.dry_run {
            "would re-drive"
        } else {
            "re-drove"
        };
        let mut lines =
            Vec::with_capacity(self.redriven.len() + self.skipped.len() + self.not_found.len());
        for r in &self.redriven {
            lines.push(format!(
                "{verb} {} {}:{} (dlq partition {} offset {}, {}) with re-drive count {}",
                self.input_topic,
                r.source_partition,
                r.source_offset,
                r.dlq_partition,
                r.dlq_offset,
                r.error_kind.as_deref().unwrap_or("-"),
                r.redrive_count
            ));
        }
        for s in &self.skipped {
            let position = match (s.source_partition, s.source_offset) {
                (Some(p), Some(o)) => format!("{p}:{o}"),
                _ => "?:?".into(),
            };
            lines.push(format!(
                "skipped {} {position} (dlq partition {} offset {}): {}",
                s.source_topic.as_deref().unwrap_or("-"),
                s.dlq_partition,
                s.dlq_offset,
                s.reason
            ));
        }
        for source in &self.not_found {
            lines.push(format!(
                "not found: no dead letter in {} has source {} {source}",
                self.dlq_topic, self.input_topic
            ));
        }
        lines
    }

    /// The closing line: letters read, re-driven, skipped and why.
    pub fn summary(&self) -> String {
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &self.skipped {
            *reasons.entry(s.kind).or_default() += 1;
        }
        let why = if reasons.is_empty() {
            String::new()
        } else {
            let parts: Vec<String> = reasons
                .iter()
                .map(|(kind, n)| format!("{n} {}", kind.replace('_', " ")))
                .collect();
            format!(" ({})", parts.join(", "))
        };
        let chosen = if self.chosen == self.letters_read {
            String::new()
        } else {
            format!(", {} chosen by --source", self.chosen)
        };
        let not_found = if self.not_found.is_empty() {
            String::new()
        } else {
            format!("; {} --source not found", self.not_found.len())
        };
        let (verb, tail) = if self.dry_run {
            (
                "would re-drive",
                "; dry run: nothing sent, nothing committed",
            )
        } else {
            ("re-drove", "")
        };
        format!(
            "dlq replay: read {} letters from {}{chosen}; {verb} {} to {}; skipped {}{why}{not_found}; {:.1} s{tail}",
            self.letters_read,
            self.dlq_topic,
            self.redriven.len(),
            self.input_topic,
            self.skipped.len(),
            self.elapsed_ms as f64 / 1000.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(partition: i32, offset: i64, count: u32) -> Letter {
        Letter {
            dlq_partition: 0,
            dlq_offset: offset,
            source_topic: Some("orders".into()),
            source_partition: Some(partition),
            source_offset: Some(offset),
            error_kind: Some("unknown_schema".into()),
            error_message: Some("schema id 3 is not registered".into()),
            dead_lettered_at: None,
            timestamp_ms: None,
            redrive_count: count,
            redriven: false,
            defect: None,
        }
    }

    #[test]
    fn letters_are_decided_in_order_of_the_reasons() {
        let mut done = RedrivenSet::default();
        done.add(
            "orders",
            "orders",
            vec![SourcePos {
                partition: 0,
                offset: 1,
            }],
        );
        let decide = |l: &Letter, done: &mut RedrivenSet| decide(l, "orders", 2, 3, done);

        let fresh = decide(&letter(0, 0, 0), &mut done).expect("re-driven");
        assert_eq!(
            (
                fresh.source_partition,
                fresh.source_offset,
                fresh.redrive_count
            ),
            (0, 0, 1)
        );
        assert_eq!(
            decide(&letter(0, 0, 0), &mut done).unwrap_err(),
            SkipReason::AlreadyRedriven,
            "a duplicate letter"
        );
        assert_eq!(
            decide(&letter(0, 1, 0), &mut done).unwrap_err(),
            SkipReason::AlreadyRedriven,
            "named by a re-drive record"
        );
        assert_eq!(
            decide(&letter(1, 5, 2), &mut done)
                .expect("under the limit")
                .redrive_count,
            3
        );
        assert_eq!(
            decide(&letter(1, 6, 3), &mut done).unwrap_err(),
            SkipReason::LimitReached { count: 3, max: 3 }
        );
        assert_eq!(
            decide(&letter(2, 7, 0), &mut done).unwrap_err(),
            SkipReason::NoSuchPartition {
                partition: 2,
                partitions: 2
            }
        );
        let mut foreign = letter(0, 8, 0);
        foreign.source_topic = Some("payments".into());
        let reason = decide(&foreign, &mut done).unwrap_err();
        assert_eq!(reason.kind(), "foreign_topic");
        assert!(
            reason.to_string().contains("payments") && reason.to_string().contains("refused"),
            "{reason}"
        );
        let mut defective = letter(0, 9, 0);
        defective.defect =
            Some("not an orderly dead letter: no orderly.source.offset header".into());
        assert_eq!(
            decide(&defective, &mut done).unwrap_err().kind(),
            "defective"
        );
    }

    #[test]
    fn re_drive_records_of_another_input_topic_do_not_count() {
        let mut done = RedrivenSet::default();
        done.add(
            "orders",
            "old-orders",
            vec![SourcePos {
                partition: 0,
                offset: 0,
            }],
        );
        assert!(decide(&letter(0, 0, 0), "orders", 1, 3, &mut done).is_ok());
    }
}
