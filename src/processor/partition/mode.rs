//! How a partition's write-outs reach Kafka, decided once: the
//! [`Strategy`] is taken from the configuration (guarantee × changelog ×
//! status delivery) when the task starts, pure; the [`WriteOutMode`] it
//! opens before each restore (the partition's transactional producer, which
//! fences the previous owner's) owns what differs between them: where a
//! batch's dead letters go, where status changes go, and what a write-out
//! commits. The phases ask the mode; they do not branch on the guarantee.

use std::time::Duration;

use rdkafka::consumer::Consumer;
use tracing::warn;

use crate::engine::entity::Entity;
use crate::engine::partition_state::PreparedWrite;
use crate::kafka::retry::Backoff;
use crate::observe::errors::{Kind, Stage};
use crate::processor::dlq::{DeadLetter, HeldLetter};
use crate::processor::error::ProcessError;
use crate::processor::parts::Outputs;
use crate::processor::transaction::{Round, TxnError, TxnWriter};

use super::task::PartitionTask;

use super::strategy::{StatusRoute, Strategy};

/// A partition's write-out mode, opened from its [`Strategy`] by the
/// restore: one owner's way to commit.
pub(crate) enum WriteOutMode<E: Entity> {
    /// No changelog: the store batch alone. With `publish_status`, the
    /// write-out's status changes are published and acknowledged first.
    StoreOnly { publish_status: bool },
    /// at_least_once with a changelog: one transaction per write-out, of
    /// the changelog records and, with write-out delivery, the status
    /// changes.
    Changelog(TxnWriter<E>),
    /// exactly_once: one transaction per write-out, of the held dead
    /// letters, the changelog records, the status changes and the input
    /// offset.
    Everything {
        txn: TxnWriter<E>,
        held_letters: Vec<HeldLetter>,
    },
}

impl<E: Entity> WriteOutMode<E> {
    /// Opens `strategy`'s mode for one owner of the partition: with a
    /// changelog, the partition's transactional producer, which fences the
    /// producers of its earlier owners.
    pub(crate) async fn open(
        strategy: &Strategy,
        outputs: &Outputs<E>,
        partition: i32,
    ) -> Result<Self, TxnError> {
        let (topic, status) = match strategy {
            Strategy::StoreOnly { status } => {
                return Ok(WriteOutMode::StoreOnly {
                    publish_status: *status == StatusRoute::WithWriteOut,
                })
            }
            Strategy::Changelog { topic, status } | Strategy::Everything { topic, status } => {
                (topic, status)
            }
        };
        // Status changes in the transaction: the producer writes the output
        // topic too.
        let output = outputs
            .outbox
            .as_ref()
            .filter(|_| {
                matches!(
                    status,
                    StatusRoute::WithWriteOut | StatusRoute::InTransaction
                )
            })
            .map(|o| (o.topic.clone(), o.encoder.clone()));
        let txn = TxnWriter::open(&outputs.txn, partition, topic.clone(), output).await?;
        Ok(match strategy {
            Strategy::Everything { .. } => WriteOutMode::Everything {
                txn,
                held_letters: Vec::new(),
            },
            _ => WriteOutMode::Changelog(txn),
        })
    }

    /// Nothing fences a late write-out of this member: a pause is held off
    /// by the schedule instead (see `WriteSchedule`).
    pub(crate) fn unfenced(&self) -> bool {
        matches!(self, WriteOutMode::StoreOnly { .. })
    }

    /// True when a write-out produces changelog records.
    pub(crate) fn writes_changelog(&self) -> bool {
        !self.unfenced()
    }

    /// True when a write-out publishes its status changes itself, before
    /// the store batch (no changelog, write-out delivery).
    pub(crate) fn publishes_status(&self) -> bool {
        matches!(
            self,
            WriteOutMode::StoreOnly {
                publish_status: true
            }
        )
    }

    /// exactly_once holds a batch's dead letters for the write-out that
    /// moves the checkpoint past their records (`true`); the other modes
    /// leave them to be produced now (`false`).
    pub(crate) fn hold_letters(&mut self, letters: &[DeadLetter<'_>]) -> bool {
        match self {
            WriteOutMode::Everything { held_letters, .. } => {
                held_letters.extend(letters.iter().map(HeldLetter::hold));
                true
            }
            WriteOutMode::StoreOnly { .. } | WriteOutMode::Changelog(_) => false,
        }
    }

    /// Commits the write-out's transaction, retrying an aborted round with
    /// backoff: the changelog position after its checkpoint record; `None`
    /// for the store-only mode, which has nothing to commit in Kafka.
    pub(crate) async fn commit(
        &mut self,
        task: &PartitionTask<E>,
        prepared: &mut PreparedWrite<E::Status>,
    ) -> Result<Option<i64>, ProcessError> {
        // exactly_once's round also carries the held letters and the input
        // offset (with the group's metadata, taken afresh for each try).
        let (txn, mut held) = match self {
            WriteOutMode::StoreOnly { .. } => return Ok(None),
            WriteOutMode::Changelog(txn) => (&*txn, None),
            WriteOutMode::Everything { txn, held_letters } => (&*txn, Some(held_letters)),
        };
        let changes = prepared.write.changes.take().unwrap_or_default();
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        loop {
            let round = Round {
                letters: held.as_deref().map_or(&[][..], Vec::as_slice),
                changes: &changes,
                checkpoint: &prepared.checkpoint_bytes,
                covers: prepared.checkpoint.next_offset,
                epoch: prepared.checkpoint.epoch,
                status: &prepared.status,
                published_to: task
                    .republished_below
                    .filter(|below| *below > prepared.checkpoint.next_offset),
                group: match held {
                    Some(_) => Some(group_metadata(task)?),
                    None => None,
                },
                waiting: &task.status.waiting,
            };
            match txn.commit(round).await {
                Ok(position) => {
                    if let Some(held) = held.as_mut() {
                        held.clear();
                    }
                    return Ok(Some(position));
                }
                Err(TxnError::Aborted { cause, .. }) => {
                    task.reporting
                        .telemetry
                        .errors
                        .record(Stage::Transaction, Kind::Retryable);
                    warn!(partition = task.partition, error = %cause, "transaction aborted (nothing of it is visible); retrying the write-out");
                    backoff.sleep().await;
                }
                Err(fenced) => return Err(fenced.into()),
            }
        }
    }
}

/// The consumer's group metadata, which an exactly-once round commits the
/// input offset with (the broker rejects a stale generation's).
fn group_metadata<E: Entity>(
    task: &PartitionTask<E>,
) -> Result<rdkafka::consumer::ConsumerGroupMetadata, ProcessError> {
    task.consumer
        .upgrade()
        .and_then(|c| c.group_metadata())
        .ok_or_else(|| ProcessError::Partition {
            partition: task.partition,
            stage: Stage::Transaction,
            message: "the consumer is closed".into(),
        })
}
