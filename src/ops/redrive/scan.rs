//! Reading the dead-letter topic by assignment: metadata, watermarks, the
//! re-drive group's committed progress, a partition range read record by
//! record (by the shared [`PartitionReader`]), and commits of progress.

use std::collections::BTreeMap;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use tracing::debug;

use super::{redrive_group, RedriveError};
use crate::config::Config;
use crate::kafka::partition_reader::{PartitionReader, Stall};
use crate::kafka::redrive_consumer_config;

/// How long one broker request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A range read that gets no record for this long while records remain
/// before its end stops with an error instead of waiting forever.
const STALL_LIMIT: Duration = Duration::from_secs(30);

/// The dead-letter topic of a configuration, and the client settings to
/// read it and commit re-drive progress.
pub(crate) struct Dlq {
    client: ClientConfig,
    /// For metadata, watermarks, committed offsets and commits; ranges are
    /// read by a consumer of their own, so no event of an earlier read (a
    /// late end-of-partition) can end a later one early.
    consumer: BaseConsumer,
    pub topic: String,
    pub group: String,
    bootstrap: String,
}

impl Dlq {
    pub(crate) fn open(config: &Config) -> Result<Self, RedriveError> {
        let group = redrive_group(config);
        let client = redrive_consumer_config(config, &group);
        let consumer = client
            .create()
            .map_err(|cause| RedriveError::Client { cause })?;
        Ok(Dlq {
            client,
            consumer,
            topic: config.kafka.dlq_topic.clone(),
            group,
            bootstrap: config.kafka.bootstrap_servers.clone(),
        })
    }

    /// The partition count of the dead-letter topic and of `input_topic`
    /// (`None` when it does not exist). A metadata request for every topic
    /// never asks the broker to create one.
    pub(crate) fn partition_counts(
        &self,
        input_topic: &str,
    ) -> Result<(i32, Option<i32>), RedriveError> {
        let [dlq, input] = self.partitions_of([self.topic.as_str(), input_topic])?;
        let dlq = dlq.ok_or_else(|| RedriveError::DlqTopicMissing {
            topic: self.topic.clone(),
            bootstrap: self.bootstrap.clone(),
        })?;
        Ok((dlq, input))
    }

    /// The partition count of each of `topics` (`None`: it does not exist),
    /// from one metadata request for every topic.
    pub(crate) fn partitions_of<const N: usize>(
        &self,
        topics: [&str; N],
    ) -> Result<[Option<i32>; N], RedriveError> {
        let metadata = self
            .consumer
            .fetch_metadata(None, REQUEST_TIMEOUT)
            .map_err(|cause| RedriveError::Metadata {
                bootstrap: self.bootstrap.clone(),
                cause,
            })?;
        Ok(topics
            .map(|name| crate::kafka::partition_count(&metadata, name).map(|count| count as i32)))
    }

    /// The first and the end (next to be written) offsets of a partition.
    pub(crate) fn watermarks(&self, partition: i32) -> Result<(i64, i64), RedriveError> {
        self.watermarks_in(&self.topic, partition)
    }

    /// [`Dlq::watermarks`] of a partition of another topic.
    pub(crate) fn watermarks_in(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(i64, i64), RedriveError> {
        self.consumer
            .fetch_watermarks(topic, partition, REQUEST_TIMEOUT)
            .map_err(|cause| RedriveError::Watermarks {
                topic: topic.to_string(),
                partition,
                cause,
            })
    }

    /// The re-drive group's committed offset per partition (`None`: none).
    pub(crate) fn committed(
        &self,
        partitions: i32,
    ) -> Result<BTreeMap<i32, Option<i64>>, RedriveError> {
        let mut wanted = TopicPartitionList::with_capacity(partitions as usize);
        for partition in 0..partitions {
            wanted.add_partition(&self.topic, partition);
        }
        // The returned list is dropped here, before the consumer: a list
        // alive at a consumer's drop can hang it (rust-rdkafka issue 453).
        let list = self
            .consumer
            .committed_offsets(wanted, REQUEST_TIMEOUT)
            .map_err(|cause| RedriveError::Committed {
                group: self.group.clone(),
                cause,
            })?;
        Ok(list
            .elements()
            .iter()
            .map(|e| (e.partition(), crate::kafka::offset_of(e)))
            .collect())
    }

    /// Stores `next_offset` as the group's progress on `partition`.
    pub(crate) fn commit(&self, partition: i32, next_offset: i64) -> Result<(), RedriveError> {
        let commit_error = |cause| RedriveError::Commit {
            group: self.group.clone(),
            partition,
            offset: next_offset,
            cause,
        };
        let mut list = TopicPartitionList::with_capacity(1);
        list.add_partition_offset(&self.topic, partition, Offset::Offset(next_offset))
            .map_err(commit_error)?;
        self.consumer
            .commit(&list, CommitMode::Sync)
            .map_err(commit_error)?;
        debug!(group = %self.group, partition, next_offset, "re-drive progress committed");
        Ok(())
    }

    /// Hands every record of `partition` in `[from, end)` to `each`, in
    /// offset order, and stops at `end` (an offset captured by the caller:
    /// letters written meanwhile are left for the next run). Offsets below
    /// the partition's start (retention) are skipped by the broker.
    pub(crate) fn scan(
        &self,
        partition: i32,
        from: i64,
        end: i64,
        each: impl FnMut(&BorrowedMessage<'_>) -> Result<(), RedriveError>,
    ) -> Result<(), RedriveError> {
        self.scan_in(&self.topic, partition, from, end, each)
    }

    /// [`Dlq::scan`] of a partition of another topic (the re-drive log).
    pub(crate) fn scan_in(
        &self,
        topic: &str,
        partition: i32,
        from: i64,
        end: i64,
        each: impl FnMut(&BorrowedMessage<'_>) -> Result<(), RedriveError>,
    ) -> Result<(), RedriveError> {
        if from >= end {
            return Ok(());
        }
        // A reader of its own for each range (the settings report the end
        // of a partition), failing rather than waiting forever on a broker
        // that sends nothing.
        let reader = PartitionReader::new(&self.client, topic, partition)?
            .on_stall(Stall::Fail(STALL_LIMIT));
        reader.scan(from, end, each)
    }
}
