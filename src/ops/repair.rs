//! `orderly repair`: finds a changelog partition that a lost transaction
//! marker left open (a transaction its coordinator no longer has in flight:
//! KAFKA-20734 on Kafka 4.3 and 4.4 after a partition had no leader), and,
//! with `--apply`, repairs it:
//!
//! 1. aborts the open transaction (`WriteTxnMarkers` to the partition's
//!    leader, as `kafka-transactions.sh abort` does), so the partition's
//!    last stable offset moves on;
//! 2. writes, after everything, each key changed since the last checkpoint
//!    before the transaction back to its value at that checkpoint, then that
//!    checkpoint again as the partition's marker: every restore, from
//!    nothing or from a store ahead of it, ends at that checkpoint's state,
//!    compacted or not;
//! 3. moves the group's committed offset to that checkpoint's input offset.
//!
//! The next owner restores to the checkpoint and processes the input again
//! from there, rebuilding exactly what the aborted write-out (and those
//! after it) carried; nothing moves back. The marker carries the group's
//! old position (`orderly.published-to`): status changes and dead letters
//! of records below it were published before and are not published again.
//! Refused while the group has members, and when the input partition no
//! longer holds the checkpoint's offset.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use serde::Serialize;

use crate::config::Config;
use crate::engine::store::{changelog_checkpoint_key, Checkpoint};
use crate::kafka::hanging::{self, Listed, OpenTransaction};
use crate::kafka::wire::{self, Connection, WireError};
use crate::kafka::ReaderSettings;
use crate::processor::changelog::reader::ChangelogReader;
use crate::processor::changelog::{self, ChangelogError};

/// How long `--apply` waits for the last stable offset to move on after
/// the abort marker.
const SETTLE: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub(crate) enum RepairError {
    #[error("changelog is off (kafka.changelog_topic is empty): there is no changelog to repair")]
    NoChangelog,
    #[error("{what}: {cause}")]
    Kafka {
        what: String,
        cause: rdkafka::error::KafkaError,
    },
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error(transparent)]
    Changelog(#[from] ChangelogError),
    #[error(transparent)]
    Replay(#[from] crate::ops::replay::ReplayError),
    #[error("partition {partition} does not exist: {topic} has partitions 0..{count}")]
    UnknownPartition {
        topic: String,
        partition: i32,
        count: i32,
    },
    #[error(
        "{topic} partition {partition} has no leader now; run the repair again once it has one"
    )]
    NoLeader { topic: String, partition: i32 },
    #[error(
        "changelog partition {partition}: no checkpoint record before the open transaction at offset {start}: \
         nothing to go back to. Rebuild the partition from the input instead (`orderly replay --reset-state \
         --to-earliest --partitions {partition}`, after aborting the transaction with kafka-transactions.sh)"
    )]
    NoCheckpoint { partition: i32, start: i64 },
    #[error(
        "input partition {partition} no longer holds offset {needed} (it starts at {low}): the state the open \
         transaction carried cannot be rebuilt from the input, so nothing was changed. Aborting it \
         (kafka-transactions.sh abort) would move those keys back; see docs/operating.md, \"Repairing a lost \
         transaction marker\""
    )]
    InputGone {
        partition: i32,
        needed: i64,
        low: i64,
    },
    #[error(
        "changelog partition {partition}: the last stable offset is still {stable} after the abort (high watermark \
         {high}); nothing else was changed. Run the repair again"
    )]
    NotSettled {
        partition: i32,
        stable: i64,
        high: i64,
    },
}

/// What the repair found on one changelog partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Verdict {
    /// No transaction open: the last stable offset is the high watermark.
    Clear,
    /// A transaction its coordinator still has in flight: it ends by itself.
    InFlight,
    /// A transaction no coordinator has in flight: the lost marker.
    Hanging,
}

/// The repair of one hanging partition.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Plan {
    /// The last checkpoint record before the open transaction.
    pub checkpoint_at: i64,
    /// Its input offset: where the partition is processed again from.
    pub next_offset: i64,
    /// The group's committed offset now: below it, outputs were published.
    pub published_to: Option<i64>,
    /// The input partition's first offset.
    pub input_low: i64,
    /// Keys written back to their value at the checkpoint.
    pub rewrites: usize,
    #[serde(skip)]
    changes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    #[serde(skip)]
    checkpoint: Checkpoint,
}

/// Another partition a hanging transaction is still open on (the output
/// topic, the dead-letter topic, the group's offsets): Kafka lost its
/// marker there too, and the repair aborts it there as well.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Share {
    pub topic: String,
    pub partition: i32,
    pub start_offset: i64,
    #[serde(skip)]
    open: OpenTransaction,
}

/// One changelog partition, as found.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Finding {
    pub partition: i32,
    pub verdict: Verdict,
    pub last_stable_offset: i64,
    pub high_watermark: i64,
    pub open: Vec<OpenTransaction>,
    pub listed: Vec<Listed>,
    /// The hanging transaction's shares on other topics (hanging only).
    pub shares: Vec<Share>,
    pub plan: Option<Plan>,
    /// After `--apply`: true once repaired.
    pub repaired: bool,
}

pub(crate) struct Repair {
    config: Config,
    changelog: String,
    consumer: BaseConsumer,
    timeout: Duration,
}

/// Kafka's topic of the groups' committed offsets.
const OFFSETS_TOPIC: &str = "__consumer_offsets";

fn kafka(what: impl Into<String>) -> impl FnOnce(rdkafka::error::KafkaError) -> RepairError {
    let what = what.into();
    move |cause| RepairError::Kafka { what, cause }
}

impl Repair {
    pub(crate) fn new(config: Config) -> Result<Self, RepairError> {
        let changelog = config.changelog_topic().ok_or(RepairError::NoChangelog)?;
        let consumer: BaseConsumer = crate::kafka::consumer_config(&config)
            .set("isolation.level", "read_uncommitted")
            .create()
            .map_err(kafka("cannot create a consumer"))?;
        Ok(Repair {
            config,
            changelog,
            consumer,
            timeout: Duration::from_secs(10),
        })
    }

    /// A reader of one changelog partition.
    fn reader<'a>(
        &self,
        partition: i32,
        cancel: &'a AtomicBool,
    ) -> Result<ChangelogReader<'a>, RepairError> {
        let settings = ReaderSettings::of(&self.config);
        Ok(ChangelogReader::new(
            &settings,
            &self.changelog,
            partition,
            cancel,
        )?)
    }

    /// Refused while the group has members, as `replay` is.
    fn check_no_members(&self) -> Result<(), RepairError> {
        let options = crate::ops::replay::ReplayOptions {
            target: crate::ops::replay::Target::ShiftBy(0),
            partitions: Vec::new(),
            reset_state: false,
        };
        crate::ops::replay::Replay::new(self.config.clone(), options)?.check_no_members()?;
        Ok(())
    }

    /// The producer the marker is written with.
    fn producer(&self) -> Result<rdkafka::producer::FutureProducer, RepairError> {
        crate::kafka::changelog_producer_config(&self.config)
            .create()
            .map_err(kafka("cannot create a producer"))
    }

    /// Connections to every broker, and which one leads each partition of
    /// the changelog.
    fn brokers(&self) -> Result<Brokers, RepairError> {
        let settings = ReaderSettings::of(&self.config);
        wire::require_plaintext(settings.client.get("security.protocol"))?;
        let metadata = self
            .consumer
            .fetch_metadata(Some(&self.changelog), self.timeout)
            .map_err(kafka(format!("cannot describe {}", self.changelog)))?;
        let mut connections = Vec::new();
        let mut index = BTreeMap::new();
        for broker in metadata.brokers() {
            let address = format!("{}:{}", broker.host(), broker.port());
            index.insert(broker.id(), connections.len());
            connections.push(Connection::open(&address, hanging::CALL_TIMEOUT)?);
        }
        let partitions = || metadata.topics().iter().flat_map(|t| t.partitions());
        let count = partitions().count() as i32;
        let leaders = partitions()
            .filter_map(|p| index.get(&p.leader()).map(|i| (p.id(), *i)))
            .collect();
        Ok(Brokers {
            connections,
            index,
            leaders,
            count,
        })
    }

    /// Where else the hanging transaction `open` (the same producer and
    /// epoch) is still open: a write-out's transaction also holds the
    /// partition's status changes (the output topic), its dead letters at
    /// exactly_once, and at exactly_once the group's offsets (a partition
    /// of `__consumer_offsets`), and Kafka can lose the marker on any of
    /// them. Left open there, an output partition stops its
    /// `read_committed` readers, and a pending offset commit keeps the
    /// group's committed offset of the input partition unstable, so a
    /// member assigned it never starts fetching it.
    fn other_shares(
        &self,
        connections: &mut [Connection],
        index: &BTreeMap<i32, usize>,
        open: &OpenTransaction,
    ) -> Result<Vec<Share>, RepairError> {
        let mut topics = vec![
            OFFSETS_TOPIC.to_string(),
            self.config.kafka.dlq_topic.clone(),
        ];
        topics.extend(self.config.output_topic());
        let mut shares = Vec::new();
        for topic in topics {
            // A topic that does not exist (no dead-letter topic yet) holds nothing.
            let Ok(metadata) = self.consumer.fetch_metadata(Some(&topic), self.timeout) else {
                continue;
            };
            for p in metadata.topics().iter().flat_map(|t| t.partitions()) {
                let Some(&leader) = index.get(&p.leader()) else {
                    continue;
                };
                let here = hanging::open_transactions(&mut connections[leader], &topic, p.id())?;
                if let Some(t) = here.into_iter().find(|t| {
                    t.producer_id == open.producer_id && t.producer_epoch == open.producer_epoch
                }) {
                    shares.push(Share {
                        topic: topic.clone(),
                        partition: p.id(),
                        start_offset: t.start_offset,
                        open: t,
                    });
                }
            }
        }
        Ok(shares)
    }

    /// Looks at each chosen changelog partition (every one when empty);
    /// changes nothing.
    pub(crate) fn find(&self, chosen: &[i32]) -> Result<(Vec<Finding>, Brokers), RepairError> {
        let Brokers {
            mut connections,
            index,
            leaders,
            count,
        } = self.brokers()?;
        let partitions: Vec<i32> = if chosen.is_empty() {
            (0..count).collect()
        } else {
            chosen.to_vec()
        };
        let mut findings = Vec::new();
        for partition in partitions {
            if !(0..count).contains(&partition) {
                return Err(RepairError::UnknownPartition {
                    topic: self.changelog.clone(),
                    partition,
                    count,
                });
            }
            let Some(&leader) = leaders.get(&partition) else {
                return Err(RepairError::NoLeader {
                    topic: self.changelog.clone(),
                    partition,
                });
            };
            let cancel = AtomicBool::new(false);
            let reader = self.reader(partition, &cancel)?;
            let (low, stable) = reader.watermarks()?;
            let high = reader.high_watermark()?;
            let mut finding = Finding {
                partition,
                verdict: Verdict::Clear,
                last_stable_offset: stable,
                high_watermark: high,
                open: Vec::new(),
                listed: Vec::new(),
                shares: Vec::new(),
                plan: None,
                repaired: false,
            };
            if stable < high {
                finding.open = hanging::open_transactions(
                    &mut connections[leader],
                    &self.changelog,
                    partition,
                )?;
                let ids: Vec<i64> = finding.open.iter().map(|t| t.producer_id).collect();
                finding.listed = if ids.is_empty() {
                    Vec::new()
                } else {
                    hanging::listed(&mut connections, &ids)?
                };
                let blocking = finding.open.iter().find(|t| t.start_offset == stable);
                finding.verdict = match blocking {
                    // Ended between the two questions.
                    None => Verdict::Clear,
                    Some(open)
                        if finding
                            .listed
                            .iter()
                            .any(|l| l.producer_id == open.producer_id && l.in_flight()) =>
                    {
                        Verdict::InFlight
                    }
                    Some(_) => Verdict::Hanging,
                };
                if finding.verdict == Verdict::Hanging {
                    finding.plan = Some(self.plan(&reader, partition, low, stable, high)?);
                    if let Some(open) = blocking {
                        finding.shares = self.other_shares(&mut connections, &index, open)?;
                    }
                }
            }
            findings.push(finding);
        }
        Ok((
            findings,
            Brokers {
                connections,
                index,
                leaders,
                count,
            },
        ))
    }

    /// The checkpoint a hanging partition goes back to, and the keys to
    /// write back to their value there.
    fn plan(
        &self,
        reader: &ChangelogReader<'_>,
        partition: i32,
        low: i64,
        start: i64,
        high: i64,
    ) -> Result<Plan, RepairError> {
        let (at, checkpoint) = reader
            .last_checkpoint(low, start)?
            .ok_or(RepairError::NoCheckpoint { partition, start })?;
        let input = &self.config.kafka.input_topic;
        let (input_low, _) = self
            .consumer
            .fetch_watermarks(input, partition, self.timeout)
            .map_err(kafka(format!("watermarks of {input} {partition}")))?;
        if input_low > checkpoint.next_offset {
            return Err(RepairError::InputGone {
                partition,
                needed: checkpoint.next_offset,
                low: input_low,
            });
        }
        // Every key written after the checkpoint, the open transaction's
        // included (the store of the member that wrote it holds them).
        let checkpoint_key = changelog_checkpoint_key();
        let mut changed = BTreeSet::new();
        reader.scan_uncommitted(at + 1, high, |message| {
            if let Some(key) = message.key().filter(|k| *k != checkpoint_key.as_slice()) {
                changed.insert(key.to_vec());
            }
            Ok(())
        })?;
        // Their values at the checkpoint, by the restore's rule.
        let mut values: BTreeMap<Vec<u8>, Option<Vec<u8>>> =
            changed.iter().map(|k| (k.clone(), None)).collect();
        reader.scan(low, at, |message| {
            let Some(slot) = message.key().and_then(|k| values.get_mut(k)) else {
                return Ok(());
            };
            if reader.covered_by(message, &checkpoint)? {
                *slot = message.payload().map(<[u8]>::to_vec);
            }
            Ok(())
        })?;
        // The group's position: a floor for where outputs were published
        // to; after the abort, the last committed checkpoint says exactly.
        let published_to = self
            .committed(partition)?
            .filter(|offset| *offset > checkpoint.next_offset);
        Ok(Plan {
            checkpoint_at: at,
            next_offset: checkpoint.next_offset,
            published_to,
            input_low,
            rewrites: values.len(),
            changes: values.into_iter().collect(),
            checkpoint: Checkpoint {
                changelog_next: None,
                ..checkpoint
            },
        })
    }

    fn committed(&self, partition: i32) -> Result<Option<i64>, RepairError> {
        let mut tpl = rdkafka::TopicPartitionList::with_capacity(1);
        tpl.add_partition(&self.config.kafka.input_topic, partition);
        let list = self
            .consumer
            .committed_offsets(tpl, self.timeout)
            .map_err(kafka("cannot read the group's committed offsets"))?;
        Ok(list.elements().first().and_then(crate::kafka::offset_of))
    }

    /// Repairs every hanging partition of `findings` (see the module doc).
    pub(crate) async fn apply(
        &self,
        findings: &mut [Finding],
        brokers: &mut Brokers,
    ) -> Result<(), RepairError> {
        self.check_no_members()?;
        let producer = self.producer()?;
        for finding in findings.iter_mut() {
            let (Some(plan), Verdict::Hanging) = (&finding.plan, finding.verdict) else {
                continue;
            };
            let partition = finding.partition;
            let leader = brokers.leaders[&partition];
            for open in finding
                .open
                .iter()
                .filter(|t| t.start_offset == finding.last_stable_offset)
            {
                tracing::info!(
                    partition,
                    producer_id = open.producer_id,
                    start_offset = open.start_offset,
                    "aborting the hanging transaction; if this repair is interrupted before it says \
                     \"repair marker written\", finish it with `{} repair --partitions {partition} --after-abort {}`",
                    crate::ops::program::name(),
                    open.start_offset
                );
                hanging::abort(
                    &mut brokers.connections[leader],
                    &self.changelog,
                    partition,
                    open,
                )?;
            }
            for share in &finding.shares {
                let Some(&leader) = self
                    .consumer
                    .fetch_metadata(Some(&share.topic), self.timeout)
                    .ok()
                    .and_then(|m| {
                        m.topics()
                            .iter()
                            .flat_map(|t| t.partitions())
                            .find(|p| p.id() == share.partition)
                            .map(|p| p.leader())
                    })
                    .and_then(|id| brokers.index.get(&id))
                else {
                    return Err(RepairError::NoLeader {
                        topic: share.topic.clone(),
                        partition: share.partition,
                    });
                };
                tracing::info!(
                    partition,
                    topic = share.topic,
                    share_partition = share.partition,
                    start_offset = share.start_offset,
                    "the same transaction is open there too (its marker lost as well): aborting it there"
                );
                hanging::abort(
                    &mut brokers.connections[leader],
                    &share.topic,
                    share.partition,
                    &share.open,
                )?;
            }
            self.settle(partition)?;
            let plan = plan.clone();
            self.finish(partition, plan, &producer).await?;
            finding.repaired = true;
        }
        Ok(())
    }

    /// The repair's steps after the abort: where outputs were published to
    /// (the last committed checkpoint, now readable), the keys written back
    /// and the marker, the group's offset.
    async fn finish(
        &self,
        partition: i32,
        mut plan: Plan,
        producer: &rdkafka::producer::FutureProducer,
    ) -> Result<(), RepairError> {
        let last = changelog::replay::last_checkpoint(&self.config, &self.changelog, partition)?
            .map(|(_, c)| c.next_offset);
        plan.published_to = plan
            .published_to
            .max(last)
            .filter(|offset| *offset > plan.next_offset);
        let end = changelog::replay::write_marker(
            producer,
            &self.changelog,
            partition,
            &plan.changes,
            &plan.checkpoint,
            plan.published_to,
        )
        .await?;
        tracing::info!(
            partition,
            rewrites = plan.rewrites,
            next_offset = plan.next_offset,
            published_to = plan.published_to,
            changelog_end = end,
            "repair marker written"
        );
        let topic = &self.config.kafka.input_topic;
        let tpl = crate::kafka::commit_list(topic, [(partition, plan.next_offset)])
            .map_err(kafka("offset list"))?;
        self.consumer
            .commit(&tpl, CommitMode::Sync)
            .map_err(kafka("cannot commit the group's new offset"))?;
        Ok(())
    }

    /// Finishes a repair interrupted after its abort (`--after-abort`):
    /// the transaction that started at `start` on `partition` is aborted
    /// already, so nothing shows it any more; the steps after the abort are
    /// done from there.
    pub(crate) async fn after_abort(
        &self,
        partition: i32,
        start: i64,
    ) -> Result<Finding, RepairError> {
        self.check_no_members()?;
        let cancel = AtomicBool::new(false);
        let reader = self.reader(partition, &cancel)?;
        let (low, stable) = reader.watermarks()?;
        let high = reader.high_watermark()?;
        let plan = self.plan(&reader, partition, low, start, high)?;
        let producer = self.producer()?;
        self.finish(partition, plan.clone(), &producer).await?;
        Ok(Finding {
            partition,
            verdict: Verdict::Hanging,
            last_stable_offset: stable,
            high_watermark: high,
            open: Vec::new(),
            listed: Vec::new(),
            shares: Vec::new(),
            plan: Some(plan),
            repaired: true,
        })
    }

    /// Waits until the partition's last stable offset reaches its high
    /// watermark (the abort marker is written and read).
    fn settle(&self, partition: i32) -> Result<(), RepairError> {
        let cancel = AtomicBool::new(false);
        let reader = self.reader(partition, &cancel)?;
        let started = Instant::now();
        loop {
            let (_, stable) = reader.watermarks()?;
            let high = reader.high_watermark()?;
            if stable >= high {
                return Ok(());
            }
            if started.elapsed() >= SETTLE {
                return Err(RepairError::NotSettled {
                    partition,
                    stable,
                    high,
                });
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The connections a repair found its partitions with, kept for `--apply`.
pub(crate) struct Brokers {
    connections: Vec<Connection>,
    /// Each broker's index into `connections`, by broker id.
    index: BTreeMap<i32, usize>,
    /// Each partition's leader, an index into `connections` (none: no leader now).
    leaders: BTreeMap<i32, usize>,
    /// The changelog's partitions.
    count: i32,
}

/// `orderly repair`: finds, and with `apply` repairs; `after_abort`
/// (partition, start) finishes a repair after its abort instead. Prints
/// the findings as lines or JSON.
pub(crate) async fn command(
    config: Config,
    partitions: Vec<i32>,
    apply: bool,
    after_abort: Option<(i32, i64)>,
    json: bool,
) -> anyhow::Result<()> {
    let (findings, applied) = match after_abort {
        Some((partition, start)) => {
            let repair = tokio::task::spawn_blocking(move || Repair::new(config)).await??;
            (vec![repair.after_abort(partition, start).await?], true)
        }
        None => {
            let (repair, mut findings, mut brokers) =
                tokio::task::spawn_blocking(move || -> Result<_, RepairError> {
                    let repair = Repair::new(config)?;
                    let (findings, brokers) = repair.find(&partitions)?;
                    Ok((repair, findings, brokers))
                })
                .await??;
            let hanging = findings.iter().any(|f| f.verdict == Verdict::Hanging);
            if apply && hanging {
                repair.apply(&mut findings, &mut brokers).await?;
            }
            (findings, apply && hanging)
        }
    };
    if json {
        let applied = applied || apply;
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "applied": applied, "partitions": findings })
            )?
        );
    } else {
        print!("{}", report(&findings, applied || apply));
        if applied {
            println!("repaired; start the group to process from the checkpoints");
        }
    }
    Ok(())
}

/// The findings as a table, with what to do about each.
pub(crate) fn report(findings: &[Finding], applied: bool) -> String {
    let mut out = String::new();
    for f in findings {
        let line = match f.verdict {
            Verdict::Clear => format!("partition {}: no transaction open", f.partition),
            Verdict::InFlight => format!(
                "partition {}: a transaction is open at offset {} and its coordinator has it in flight ({}); it ends by \
                 itself (commit, or abort at its timeout)",
                f.partition,
                f.last_stable_offset,
                f.listed
                    .iter()
                    .map(|l| format!("{} {}", l.transactional_id, l.state))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Verdict::Hanging => {
                let who = f
                    .open
                    .iter()
                    .filter(|t| t.start_offset == f.last_stable_offset)
                    .map(|t| {
                        let listed = f
                            .listed
                            .iter()
                            .filter(|l| l.producer_id == t.producer_id)
                            .map(|l| format!("{} {}", l.transactional_id, l.state))
                            .collect::<Vec<_>>();
                        format!(
                            "producer {} epoch {} ({})",
                            t.producer_id,
                            t.producer_epoch,
                            if listed.is_empty() {
                                "no coordinator lists it".to_string()
                            } else {
                                format!("its coordinator lists {}", listed.join(", "))
                            }
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ");
                let plan = f.plan.as_ref().map_or(String::new(), |p| {
                    format!(
                        "; repair: abort it, write {} key(s) back to the checkpoint at changelog offset {}, process \
                         input from offset {} again{}",
                        p.rewrites,
                        p.checkpoint_at,
                        p.next_offset,
                        p.published_to.map_or(String::new(), |m| format!(
                            " (publishing nothing for records below {m})"
                        ))
                    )
                });
                let state = if f.repaired { "REPAIRED" } else { "HANGING" };
                let shares = if f.shares.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; the same transaction is open on {} too (aborted with it)",
                        f.shares
                            .iter()
                            .map(|s| format!("{}-{} since offset {}", s.topic, s.partition, s.start_offset))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                format!(
                    "partition {}: {state}: a transaction open since offset {} (high watermark {}), {who}{plan}{shares}",
                    f.partition, f.last_stable_offset, f.high_watermark
                )
            }
        };
        out.push_str(&line);
        out.push('\n');
    }
    let hanging = findings
        .iter()
        .filter(|f| f.verdict == Verdict::Hanging)
        .count();
    if hanging > 0 && !applied {
        out.push_str(&format!(
            "{hanging} hanging partition(s); stop every instance of the group, then run again with --apply\n"
        ));
    }
    out
}
