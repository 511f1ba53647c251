//! `orderly replay`: move chosen partitions of the input topic to a new
//! offset on every instance at once, as Kafka's offset reset tools do, but
//! for the checkpoint that decides where a partition resumes.
//!
//! With the changelog on, a replay marker (a checkpoint record) goes into
//! each chosen changelog partition: every instance that later owns the
//! partition reaches it through the restore path, whatever its local store
//! holds. Without a changelog, the local store at `store.path` is edited.
//! Either way the group's committed offsets move too (for lag tools and an
//! instance without state). Refused while the group has active members.
//!
//! The counters keep adding up: moving back counts the records to be read
//! again as `replayed`, moving forward counts those passed over as
//! `skipped`, so `applied + duplicates + stale + dead_lettered ==
//! next_offset - start_offset + replayed - skipped` per partition. With
//! `--reset-state` the partition starts over at the new offset: state,
//! inbox and counters cleared (tombstones for every key, and a new epoch).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::FutureProducer;
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;
use tracing::info;

use crate::config::Config;
use crate::engine::store::{Checkpoint, Store, StoreError};
use crate::processor::changelog::{self, ChangelogError};

/// Where to move the chosen partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    Earliest,
    Latest,
    Offset(i64),
    /// Milliseconds since the epoch: the first offset at or after it.
    Datetime(i64),
    ShiftBy(i64),
}

#[derive(Debug, Clone)]
pub(crate) struct ReplayOptions {
    pub target: Target,
    /// Empty: every partition of the input topic.
    pub partitions: Vec<i32>,
    pub reset_state: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    #[error(
        "group {group} has active members ({members}); stop every orderly instance of the group first (a replay \
         moves the checkpoints they hold)"
    )]
    ActiveMembers { group: String, members: String },
    #[error("partition {partition} does not exist: {topic} has partitions 0..{count}")]
    UnknownPartition {
        topic: String,
        partition: i32,
        count: i32,
    },
    #[error("offset {offset} is outside partition {partition}'s range {low}..={high}")]
    OffsetOutOfRange {
        partition: i32,
        offset: i64,
        low: i64,
        high: i64,
    },
    #[error("{0} is in the future")]
    FutureDatetime(String),
    #[error(
        "the group's committed offsets of {topic} were moved outside orderly (kafka-consumer-groups --reset-offsets?): \
         {resets}. orderly resumes each partition from its checkpoint, so that reset would be ignored. To replay from \
         there, move the checkpoints too, with the group stopped: `orderly replay --to-offset N --partitions P` per \
         partition (or --to-earliest, --to-datetime, --shift-by, as kafka-consumer-groups does). To keep the \
         checkpoints and drop the reset: `orderly replay --shift-by 0`"
    )]
    ExternalReset { topic: String, resets: String },
    #[error("cannot describe group {group}: {cause}")]
    Describe {
        group: String,
        cause: crate::kafka::group_members::DescribeError,
    },
    #[error("{what}: {cause}")]
    Kafka {
        what: String,
        cause: rdkafka::error::KafkaError,
    },
    #[error(transparent)]
    Changelog(#[from] ChangelogError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl ReplayError {
    /// True while the group's coordinator is not ready to answer (a fresh
    /// broker loads `__consumer_offsets` after start-up, or the coordinator
    /// moved): the same request soon succeeds.
    pub(crate) fn is_coordinator_not_ready(&self) -> bool {
        matches!(self, ReplayError::Kafka { cause, .. } if crate::ops::preflight::coordinator_not_ready(cause))
    }

    /// True for a mistake in the command's arguments (nothing was changed).
    pub(crate) fn is_usage(&self) -> bool {
        matches!(
            self,
            ReplayError::UnknownPartition { .. }
                | ReplayError::OffsetOutOfRange { .. }
                | ReplayError::FutureDatetime(_)
        )
    }
}

fn kafka(what: impl Into<String>) -> impl FnOnce(rdkafka::error::KafkaError) -> ReplayError {
    let what = what.into();
    move |cause| ReplayError::Kafka { what, cause }
}

/// A committed offset of the group.
#[derive(Debug, Clone, Copy)]
struct Committed {
    offset: i64,
    /// Committed by orderly (the processor or a replay), not another tool.
    by_orderly: bool,
}

/// A partition whose committed offset was moved by another tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ExternalReset {
    pub partition: i32,
    /// The group's committed offset, set outside orderly.
    pub committed: i64,
    /// Where orderly's checkpoint resumes the partition.
    pub checkpoint: i64,
}

/// One partition's row of the plan (what `--dry-run` prints).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct PlanRow {
    pub partition: i32,
    /// The checkpoint's next offset (changelog, or local store without one).
    pub checkpoint: Option<i64>,
    /// The group's committed offset.
    pub committed: Option<i64>,
    /// Where the partition resumes today.
    pub current: i64,
    pub new_offset: i64,
    pub low: i64,
    pub end: i64,
    #[serde(skip)]
    state: Option<Checkpoint>,
}

/// The replay of one command line, planned against the cluster.
pub(crate) struct Replay {
    config: Config,
    options: ReplayOptions,
    consumer: BaseConsumer,
    changelog: Option<String>,
    timeout: Duration,
}

impl Replay {
    pub(crate) fn new(config: Config, options: ReplayOptions) -> Result<Self, ReplayError> {
        // The group's id, to read and commit its offsets; this consumer
        // never subscribes, so it never joins the group. It reads offsets
        // `read_uncommitted`: a read_committed OffsetFetch waits for
        // pending transactional offset commits (a crashed exactly_once
        // member leaves some until its transactions are aborted or time
        // out), up to the transaction timeout. It reads no records.
        let consumer: BaseConsumer = crate::kafka::consumer_config(&config)
            .set("isolation.level", "read_uncommitted")
            .create()
            .map_err(kafka("cannot create a consumer"))?;
        Ok(Self::with_consumer(config, options, consumer))
    }

    /// For `run`'s start-up check.
    fn probe(config: Config) -> Result<Self, ReplayError> {
        Self::new(
            config,
            ReplayOptions {
                target: Target::ShiftBy(0),
                partitions: Vec::new(),
                reset_state: false,
            },
        )
    }

    fn with_consumer(config: Config, options: ReplayOptions, consumer: BaseConsumer) -> Self {
        let changelog = config.changelog_topic();
        Replay {
            config,
            options,
            consumer,
            changelog,
            timeout: Duration::from_secs(10),
        }
    }

    /// Refuses while the group has members, under either group protocol
    /// (see [`crate::kafka::group_members`]).
    pub(crate) fn check_no_members(&self) -> Result<(), ReplayError> {
        let group = &self.config.kafka.group_id;
        let members = crate::kafka::group_members::describe_group(
            self.consumer.client(),
            group,
            self.timeout,
        )
        .map_err(|cause| ReplayError::Describe {
            group: group.clone(),
            cause,
        })?;
        if members.is_empty() {
            return Ok(());
        }
        let members = members
            .iter()
            .map(|m| {
                format!(
                    "{} (client {}, host {})",
                    m.member_id,
                    m.client_id,
                    m.host.trim_start_matches('/')
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        Err(ReplayError::ActiveMembers {
            group: group.clone(),
            members,
        })
    }

    /// Where each chosen partition stands and where it goes. Changes nothing.
    pub(crate) fn plan(&self) -> Result<Vec<PlanRow>, ReplayError> {
        let topic = &self.config.kafka.input_topic;
        let chosen = self.chosen_partitions()?;
        let committed = self.committed(&chosen)?;
        let local = match &self.changelog {
            None => self.local_checkpoints()?,
            Some(_) => BTreeMap::new(),
        };
        // A changelog topic that does not exist yet holds no checkpoint.
        let changelog = match &self.changelog {
            Some(name) if self.topic_exists(name)? => Some(name.as_str()),
            _ => None,
        };
        self.refuse_a_future_datetime()?;
        let mut rows = Vec::new();
        for partition in chosen {
            let (low, end) = self
                .consumer
                .fetch_watermarks(topic, partition, self.timeout)
                .map_err(kafka(format!("watermarks of {topic} {partition}")))?;
            let state = self.checkpoint_of(partition, &local, changelog)?;
            let group_offset = committed
                .get(&partition)
                .copied()
                .flatten()
                .map(|c| c.offset);
            let fallback =
                if self.config.kafka.auto_offset_reset == crate::config::OffsetReset::Latest {
                    end
                } else {
                    low
                };
            let current = state
                .map(|c| c.next_offset)
                .or(group_offset)
                .unwrap_or(fallback);
            let new_offset = self.new_offset(partition, current, low, end)?;
            rows.push(PlanRow {
                partition,
                checkpoint: state.map(|c| c.next_offset),
                committed: group_offset,
                current,
                new_offset,
                low,
                end,
                state,
            });
        }
        Ok(rows)
    }

    /// The input topic's partition count (0: it does not exist).
    fn input_partition_count(&self) -> Result<i32, ReplayError> {
        let topic = &self.config.kafka.input_topic;
        let metadata = self
            .consumer
            .fetch_metadata(Some(topic), self.timeout)
            .map_err(kafka(format!("cannot describe {topic}")))?;
        Ok(crate::kafka::partition_count(&metadata, topic).map_or(0, |count| count as i32))
    }

    /// The partitions `--partition` chose (default: every partition of the
    /// input topic), each checked to be one of the topic's.
    fn chosen_partitions(&self) -> Result<Vec<i32>, ReplayError> {
        let topic = &self.config.kafka.input_topic;
        let count = self.input_partition_count()?;
        if count == 0 {
            return Err(ReplayError::Kafka {
                what: format!("topic {topic}"),
                cause: rdkafka::error::KafkaError::MetadataFetch(
                    rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition,
                ),
            });
        }
        let chosen: Vec<i32> = if self.options.partitions.is_empty() {
            (0..count).collect()
        } else {
            self.options.partitions.clone()
        };
        for partition in &chosen {
            if !(0..count).contains(partition) {
                return Err(ReplayError::UnknownPartition {
                    topic: topic.clone(),
                    partition: *partition,
                    count,
                });
            }
        }
        Ok(chosen)
    }

    /// `--to-datetime` in the future has no record to go to.
    fn refuse_a_future_datetime(&self) -> Result<(), ReplayError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        if let Target::Datetime(ms) = self.options.target {
            if ms > now_ms {
                return Err(ReplayError::FutureDatetime(
                    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms as u64))
                        .to_string(),
                ));
            }
        }
        Ok(())
    }

    /// The partition's checkpoint: the last in the changelog topic
    /// (`changelog`, when it exists), or else the local store's (`local`).
    fn checkpoint_of(
        &self,
        partition: i32,
        local: &BTreeMap<i32, Checkpoint>,
        changelog: Option<&str>,
    ) -> Result<Option<Checkpoint>, ReplayError> {
        Ok(match (&self.changelog, changelog) {
            (Some(_), Some(name)) => {
                changelog::replay::last_checkpoint(&self.config, name, partition)?.map(|(_, c)| c)
            }
            (Some(_), None) => None,
            (None, _) => local.get(&partition).copied(),
        })
    }

    /// Where the target sends a partition that resumes at `current` and
    /// holds `low..end`.
    fn new_offset(
        &self,
        partition: i32,
        current: i64,
        low: i64,
        end: i64,
    ) -> Result<i64, ReplayError> {
        Ok(match self.options.target {
            Target::Earliest => low,
            Target::Latest => end,
            Target::Offset(offset) => {
                if !(low..=end).contains(&offset) {
                    return Err(ReplayError::OffsetOutOfRange {
                        partition,
                        offset,
                        low,
                        high: end,
                    });
                }
                offset
            }
            Target::ShiftBy(n) => current.saturating_add(n).clamp(low, end),
            Target::Datetime(ms) => self.offset_for_time(partition, ms, low, end)?,
        })
    }

    /// The first offset whose timestamp is at or after `ms`. A broker that
    /// answers -1 (none: past the last record on Apache Kafka, before the
    /// first on nisshi) is resolved by the last record's time.
    fn offset_for_time(
        &self,
        partition: i32,
        ms: i64,
        low: i64,
        end: i64,
    ) -> Result<i64, ReplayError> {
        let topic = &self.config.kafka.input_topic;
        let mut tpl = TopicPartitionList::with_capacity(1);
        tpl.add_partition_offset(topic, partition, Offset::Offset(ms))
            .map_err(kafka("offset list"))?;
        let found = self
            .consumer
            .offsets_for_times(tpl, self.timeout)
            .map_err(kafka(format!("offsets for times of {topic} {partition}")))?;
        let offset = found
            .find_partition(topic, partition)
            .and_then(|e| crate::kafka::offset_of(&e))
            .unwrap_or(-1);
        if offset >= 0 {
            return Ok(offset.clamp(low, end));
        }
        if low == end {
            return Ok(end);
        }
        // -1: is `ms` after the last record, or before the first?
        let last = self.record_time(partition, end - 1)?;
        Ok(if last.is_some_and(|t| ms > t) {
            end
        } else {
            low
        })
    }

    /// The timestamp of one record of the input topic.
    fn record_time(&self, partition: i32, offset: i64) -> Result<Option<i64>, ReplayError> {
        use rdkafka::Message;
        let topic = &self.config.kafka.input_topic;
        let reader: BaseConsumer = crate::kafka::consumer_config(&self.config)
            .set(
                "group.id",
                format!("{}-replay-probe", self.config.kafka.group_id),
            )
            .create()
            .map_err(kafka("cannot create a consumer"))?;
        let mut tpl = TopicPartitionList::with_capacity(1);
        tpl.add_partition_offset(topic, partition, Offset::Offset(offset))
            .map_err(kafka("offset list"))?;
        reader.assign(&tpl).map_err(kafka("assign"))?;
        let deadline = std::time::Instant::now() + self.timeout;
        while std::time::Instant::now() < deadline {
            if let Some(Ok(message)) = reader.poll(Duration::from_millis(200)) {
                return Ok(message.timestamp().to_millis());
            }
        }
        Ok(None)
    }

    /// The group's committed offsets, each with whether orderly committed it
    /// (its metadata is [`crate::kafka::COMMIT_METADATA`]).
    fn committed(
        &self,
        partitions: &[i32],
    ) -> Result<BTreeMap<i32, Option<Committed>>, ReplayError> {
        let topic = &self.config.kafka.input_topic;
        let mut tpl = TopicPartitionList::with_capacity(partitions.len());
        for partition in partitions {
            tpl.add_partition(topic, *partition);
        }
        // A coordinator still loading (a fresh broker, the offsets topic's
        // first use) answers "not coordinator" for a moment: asked again
        // within the timeout rather than warned about on a first start.
        let deadline = std::time::Instant::now() + self.timeout;
        let list = loop {
            match self.consumer.committed_offsets(tpl.clone(), self.timeout) {
                Err(e)
                    if crate::ops::preflight::coordinator_not_ready(&e)
                        && std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(200))
                }
                result => {
                    break result.map_err(kafka("cannot read the group's committed offsets"))?
                }
            }
        };
        let out = list
            .elements()
            .iter()
            .map(|e| {
                let committed = crate::kafka::offset_of(e).map(|offset| Committed {
                    offset,
                    by_orderly: e.metadata() == crate::kafka::COMMIT_METADATA,
                });
                (e.partition(), committed)
            })
            .collect();
        Ok(out)
    }

    /// The partitions whose committed offset another tool moved away from
    /// orderly's checkpoint (`kafka-consumer-groups --reset-offsets`):
    /// orderly resumes from its checkpoint, so such a reset would be ignored.
    pub(crate) fn external_resets(&self) -> Result<Vec<ExternalReset>, ReplayError> {
        let count = self.input_partition_count()?;
        if count == 0 {
            // No input topic yet: nothing was committed for it.
            return Ok(Vec::new());
        }
        let partitions: Vec<i32> = (0..count).collect();
        let committed = self.committed(&partitions)?;
        let foreign: Vec<(i32, i64)> = committed
            .iter()
            .filter_map(|(p, c)| c.filter(|c| !c.by_orderly).map(|c| (*p, c.offset)))
            .collect();
        if foreign.is_empty() {
            return Ok(Vec::new());
        }
        let checkpoints = self.checkpoints(&foreign.iter().map(|(p, _)| *p).collect::<Vec<_>>())?;
        Ok(foreign
            .into_iter()
            .filter_map(|(partition, committed)| {
                let checkpoint = checkpoints.get(&partition).copied()?;
                (checkpoint != committed).then_some(ExternalReset {
                    partition,
                    committed,
                    checkpoint,
                })
            })
            .collect())
    }

    /// The next offset of each partition's checkpoint: the changelog's last
    /// (with the changelog on), else the local store's.
    fn checkpoints(&self, partitions: &[i32]) -> Result<BTreeMap<i32, i64>, ReplayError> {
        let mut out = BTreeMap::new();
        match &self.changelog {
            Some(name) => {
                if !self.topic_exists(name)? {
                    return Ok(out);
                }
                for partition in partitions {
                    if let Some((_, checkpoint)) =
                        changelog::replay::last_checkpoint(&self.config, name, *partition)?
                    {
                        out.insert(*partition, checkpoint.next_offset);
                    }
                }
            }
            None => {
                for (partition, checkpoint) in self.local_checkpoints()? {
                    if partitions.contains(&partition) {
                        out.insert(partition, checkpoint.next_offset);
                    }
                }
            }
        }
        Ok(out)
    }

    fn topic_exists(&self, topic: &str) -> Result<bool, ReplayError> {
        let metadata = self
            .consumer
            .fetch_metadata(None, self.timeout)
            .map_err(kafka("cannot read cluster metadata"))?;
        Ok(metadata
            .topics()
            .iter()
            .any(|t| t.name() == topic && !t.partitions().is_empty()))
    }

    fn local_checkpoints(&self) -> Result<BTreeMap<i32, Checkpoint>, ReplayError> {
        let path = crate::ops::preflight::absolute(&self.config.store.path);
        if !crate::ops::preflight::store_present(&path) {
            return Ok(BTreeMap::new());
        }
        let store = Store::open(&path, self.config.store.cache_capacity_mb)?;
        let topic = &self.config.kafka.input_topic;
        let mut out = BTreeMap::new();
        for (t, partition, checkpoint) in store.checkpoints()? {
            if &t == topic {
                out.insert(partition, checkpoint);
            }
        }
        Ok(out)
    }

    /// The checkpoint a row moves its partition to.
    fn moved(&self, row: &PlanRow) -> Checkpoint {
        let old = row
            .state
            .unwrap_or_else(|| Checkpoint::starting_at(row.current));
        if self.options.reset_state {
            return Checkpoint {
                epoch: old.epoch + 1,
                ..Checkpoint::starting_at(row.new_offset)
            };
        }
        let mut moved = Checkpoint {
            next_offset: row.new_offset,
            changelog_next: None,
            ..old
        };
        if row.state.is_none() {
            // No state anywhere: the new offset is simply where it starts.
            moved.start_offset = row.new_offset;
        } else if row.new_offset < row.current {
            moved.replayed += (row.current - row.new_offset) as u64;
        } else {
            moved.skipped += (row.new_offset - row.current) as u64;
        }
        moved
    }

    /// Moves every planned partition: the changelog marker (or the local
    /// store), then the group's committed offsets.
    pub(crate) async fn apply(&self, rows: &[PlanRow]) -> Result<(), ReplayError> {
        match &self.changelog {
            Some(changelog) => {
                let producer: FutureProducer =
                    crate::kafka::changelog_producer_config(&self.config)
                        .create()
                        .map_err(kafka("cannot create a producer"))?;
                for row in rows {
                    let checkpoint = self.moved(row);
                    let tombstones: Vec<(Vec<u8>, Option<Vec<u8>>)> = if self.options.reset_state {
                        changelog::replay::live_keys(&self.config, changelog, row.partition)?
                            .into_iter()
                            .map(|key| (key, None))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    let at = changelog::replay::write_marker(
                        &producer,
                        changelog,
                        row.partition,
                        &tombstones,
                        &checkpoint,
                        None,
                    )
                    .await?;
                    info!(
                        partition = row.partition,
                        next_offset = checkpoint.next_offset,
                        epoch = checkpoint.epoch,
                        tombstones = tombstones.len(),
                        changelog_end = at,
                        "replay marker written"
                    );
                }
            }
            None => {
                let path = crate::ops::preflight::absolute(&self.config.store.path);
                let store = Store::open(&path, self.config.store.cache_capacity_mb)?;
                for row in rows {
                    let checkpoint = self.moved(row);
                    let tree = store.partition(&self.config.kafka.input_topic, row.partition)?;
                    if self.options.reset_state {
                        tree.clear()?;
                    }
                    tree.commit_batch(crate::engine::store::BatchWrite::default(), &checkpoint)?;
                }
                store.flush()?;
            }
        }
        let topic = &self.config.kafka.input_topic;
        let tpl = crate::kafka::commit_list(
            topic,
            rows.iter().map(|row| (row.partition, row.new_offset)),
        )
        .map_err(kafka("offset list"))?;
        self.consumer
            .commit(&tpl, CommitMode::Sync)
            .map_err(kafka("cannot commit the group's new offsets"))?;
        Ok(())
    }
}

/// Fails with [`ReplayError::ExternalReset`] when another tool moved the
/// group's committed offsets away from orderly's checkpoints.
pub(crate) fn check_external_resets(config: Config) -> Result<(), ReplayError> {
    let topic = config.kafka.input_topic.clone();
    let replay = Replay::probe(config)?;
    let resets = replay.external_resets()?;
    if resets.is_empty() {
        return Ok(());
    }
    let resets = resets
        .iter()
        .map(|r| {
            format!(
                "partition {} committed at {}, checkpoint at {}",
                r.partition, r.committed, r.checkpoint
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    Err(ReplayError::ExternalReset { topic, resets })
}

/// [`check_external_resets`], asked again quietly while the group's
/// coordinator is not ready (a broker that just started loads its offsets
/// topic first), for up to `wait`; `check` is the check itself.
pub(crate) fn external_resets_waiting_for_the_coordinator(
    wait: Duration,
    mut check: impl FnMut() -> Result<(), ReplayError>,
) -> Result<(), ReplayError> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match check() {
            Err(e) if e.is_coordinator_not_ready() && std::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "the group's coordinator is not ready yet; asking again");
                std::thread::sleep(Duration::from_millis(500));
            }
            result => return result,
        }
    }
}

/// The plan as a table.
pub(crate) fn table(rows: &[PlanRow]) -> String {
    let show = |o: Option<i64>| o.map(|o| o.to_string()).unwrap_or_else(|| "-".into());
    let mut out = format!(
        "{:>9} {:>12} {:>12} {:>12} {:>12}\n",
        "partition", "checkpoint", "committed", "new offset", "end offset"
    );
    for row in rows {
        out.push_str(&format!(
            "{:>9} {:>12} {:>12} {:>12} {:>12}\n",
            row.partition,
            show(row.checkpoint),
            show(row.committed),
            row.new_offset,
            row.end
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::KafkaError;
    use rdkafka::types::RDKafkaErrorCode;

    fn kafka_error(code: RDKafkaErrorCode) -> ReplayError {
        ReplayError::Kafka {
            what: "cannot read the group's committed offsets".into(),
            cause: KafkaError::OffsetFetch(code),
        }
    }

    /// A fresh broker answers NotCoordinator, then CoordinatorLoadInProgress,
    /// then the offsets (issue 32): asked again, no error; any other error,
    /// or one that outlasts the wait, is returned.
    #[test]
    fn a_loading_coordinator_is_asked_again() {
        let mut answers = vec![
            Err(kafka_error(RDKafkaErrorCode::NotCoordinator)),
            Err(kafka_error(RDKafkaErrorCode::CoordinatorLoadInProgress)),
            Ok(()),
        ]
        .into_iter();
        let result = external_resets_waiting_for_the_coordinator(Duration::from_secs(10), || {
            answers.next().expect("asked once too often")
        });
        assert!(result.is_ok(), "{result:?}");

        let mut asked = 0;
        let other = external_resets_waiting_for_the_coordinator(Duration::from_secs(10), || {
            asked += 1;
            Err(kafka_error(RDKafkaErrorCode::GroupAuthorizationFailed))
        });
        assert!(other.is_err() && asked == 1, "other errors are not retried");

        let persisting = external_resets_waiting_for_the_coordinator(Duration::ZERO, || {
            Err(kafka_error(RDKafkaErrorCode::NotCoordinator))
        });
        assert!(
            persisting.is_err_and(|e| e.is_coordinator_not_ready()),
            "past the wait it is returned (and warned about)"
        );
    }
}
