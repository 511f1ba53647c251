//! The restoring phase: with a changelog, brings the partition's tree up to
//! it and seeks the partition to the restored checkpoint; without one,
//! refuses a partition whose state is elsewhere. No input record is
//! processed meanwhile.

use crate::engine::entity::Entity;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::Consumer;
use rdkafka::TopicPartitionList;
use tracing::{info, warn};

use super::mode::WriteOutMode;
use super::task::{Command, PartitionTask, Reply, Seeked};
use crate::engine::partition_state::PartitionState;
use crate::observe::errors::Stage;
use crate::observe::Phase;
use crate::processor::changelog::restore::{Restore, Restored as ChangelogRestored};
use crate::processor::error::ProcessError;
use crate::processor::transaction::TxnError;

/// A partition task before its first record.
pub(super) struct Restoring<E: Entity> {
    task: PartitionTask<E>,
}

/// How the restoring phase ended.
pub(super) enum Restored<E: Entity> {
    /// Restored (or nothing to restore): on to processing, with this
    /// owner's write-out mode.
    Ready {
        task: PartitionTask<E>,
        mode: WriteOutMode<E>,
    },
    /// A drain came first: the partition is released before processing.
    Released {
        task: PartitionTask<E>,
        reply: Reply,
    },
    /// Another producer of the partition's transactional id initialised
    /// while this one did.
    Fenced {
        task: PartitionTask<E>,
        cause: TxnError,
    },
}

impl<E: Entity> Restoring<E> {
    pub(super) fn enter(task: PartitionTask<E>) -> Self {
        task.enter(Phase::Restoring);
        Restoring { task }
    }

    /// Restores the tree when it is behind the changelog, after fencing the
    /// partition's earlier producers, or checks that a
    /// store without a changelog holds the partition's state.
    pub(super) async fn run(mut self) -> Result<Restored<E>, ProcessError> {
        // With a changelog, the mode's producer fences the partition's
        // earlier producers first (under either guarantee): after this, no
        // write of a previous owner can become visible behind the restore
        // (see processor::transaction).
        let strategy = self.task.settings.strategy.clone();
        let mode =
            match WriteOutMode::open(&strategy, &self.task.outputs, self.task.partition).await {
                Ok(mode) => mode,
                Err(cause @ (TxnError::Fenced { .. } | TxnError::Stalled { .. })) => {
                    return Ok(Restored::Fenced {
                        task: self.task,
                        cause,
                    })
                }
                Err(other) => return Err(other.into()),
            };
        let Some(changelog) = strategy.changelog() else {
            self.check_without_changelog().await?;
            return Ok(Restored::Ready {
                task: self.task,
                mode,
            });
        };
        // After a fence: where the partition is read from again unless the
        // restore finds a newer checkpoint.
        let rewind = self.task.rewind.take();
        let task = &mut self.task;
        let cancel = Arc::new(AtomicBool::new(false));
        let job = spawn_restore(task, changelog, cancel.clone());
        tokio::pin!(job);
        let released = tokio::select! {
            biased;
            command = task.rx.recv() => Err(command.map(|Command::Drain { reply, .. }| reply)),
            joined = &mut job => Ok(joined),
        };
        let joined = match released {
            Ok(joined) => joined,
            Err(reply) => {
                cancel.store(true, Ordering::Relaxed);
                // The restore stops at its next poll; the store keeps its
                // restoring mark and the next owner starts it again.
                let _ = (&mut job).await;
                return Ok(Restored::Released {
                    task: self.task,
                    reply,
                });
            }
        };
        let restored = joined.map_err(|join| ProcessError::Partition {
            partition: task.partition,
            stage: Stage::Restore,
            message: format!("restore thread failed: {join}"),
        })??;
        task.read_republished()?;
        if !restored.restored {
            if let Some(offset) = rewind {
                self.seek(offset).await;
            }
            return Ok(Restored::Ready {
                task: self.task,
                mode,
            });
        }
        self.adopt(restored, rewind).await;
        Ok(Restored::Ready {
            task: self.task,
            mode,
        })
    }

    /// Takes the restored checkpoint as the partition's, and seeks there
    /// (or back to `rewind` after a fence) when the fetch is elsewhere.
    async fn adopt(&mut self, restored: ChangelogRestored, rewind: Option<i64>) {
        let task = &mut self.task;
        task.reporting.counters.record_restore(restored.elapsed);
        task.reporting
            .telemetry
            .restored_records
            .fetch_add(restored.applied, Ordering::Relaxed);
        task.status.seed(restored.checkpoint.as_ref());
        task.state = PartitionState::starting_over(task.state.store().clone(), restored.checkpoint);
        match restored.checkpoint {
            Some(checkpoint) => {
                if task.assigned_at != Some(checkpoint.next_offset) || rewind.is_some() {
                    self.seek(checkpoint.next_offset).await;
                }
            }
            None => {
                if let Some(offset) = rewind {
                    self.seek(offset).await;
                }
            }
        }
    }

    /// Moves the partition's fetch position (after a restore). Records
    /// before the checkpoint that still arrive are skipped by the batch.
    /// When librdkafka has not started fetching the partition yet, the
    /// seek is left to the processing phase to try again
    /// ([`super::task::PartitionTask::pending_seek`]).
    async fn seek(&mut self, offset: i64) {
        match super::task::seek_to(&self.task, offset).await {
            Seeked::Done => info!(
                partition = self.task.partition,
                offset, "seeked to the restored checkpoint"
            ),
            Seeked::NotFetching => {
                info!(
                    partition = self.task.partition,
                    offset,
                    "librdkafka has not started fetching the partition yet (it waits for the group's committed \
                     offset); seeking to the restored checkpoint once it has"
                );
                self.task.pending_seek = Some(offset);
                self.task.status.waiting.set(super::task::FETCH_START);
            }
            Seeked::Failed(error) => {
                warn!(partition = self.task.partition, offset, %error, "cannot seek to the restored checkpoint; records before it are skipped as they arrive")
            }
        }
    }

    /// Without a changelog, a partition whose committed offset is ahead of
    /// this store's checkpoint (or that has a committed offset and no local
    /// state) was processed elsewhere: its state is not here. Refused.
    async fn check_without_changelog(&self) -> Result<(), ProcessError> {
        let partition = self.task.partition;
        if self.task.state.store().restoring()? {
            return Err(ProcessError::Partition {
                partition,
                stage: Stage::Assign,
                message: "the store holds an interrupted restore from a changelog, and the changelog is off; turn it \
                          back on (kafka.changelog_topic) or rebuild the store"
                    .into(),
            });
        }
        let Some(consumer) = self.task.consumer.upgrade() else {
            return Ok(());
        };
        let topic = self.task.input.topic.clone();
        let committed = tokio::task::spawn_blocking(move || {
            let mut tpl = TopicPartitionList::with_capacity(1);
            tpl.add_partition(&topic, partition);
            consumer
                .committed_offsets(tpl, Duration::from_secs(10))
                .map(|list| list.elements().first().and_then(crate::kafka::offset_of))
        })
        .await
        .map_err(|join| ProcessError::Partition {
            partition,
            stage: Stage::Assign,
            message: format!("committed-offset task failed: {join}"),
        })?
        .map_err(ProcessError::Kafka)?;
        let local = self.task.state.written().map(|c| c.next_offset);
        match committed {
            Some(group) if local.is_none_or(|l| group > l) => Err(ProcessError::Partition {
                partition,
                stage: Stage::Assign,
                message: format!(
                "the group's committed offset {group} is ahead of this store's checkpoint \
                 ({}); the state of the records in between is not in this store (another instance processed them, \
                 or the store was lost), and processing on would apply stale events and let duplicates through. \
                 Turn the changelog on (kafka.changelog_topic) so the state is restored, or rebuild the store from \
                 the start of the topic (see docs/replay-and-restore.md, \"Rebuilding the store\")",
                local.map(|l| l.to_string()).unwrap_or_else(|| "none".into())
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// Restores the partition's tree from the changelog on a blocking thread
/// (flushed when anything was restored); `cancel` stops it at its next
/// poll.
fn spawn_restore<E: Entity>(
    task: &PartitionTask<E>,
    changelog: &str,
    cancel: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Result<ChangelogRestored, crate::processor::changelog::ChangelogError>>
{
    let (outputs, member) = (task.outputs.clone(), task.member.clone());
    let tree = task.state.store().clone();
    let (topic, partition) = (changelog.to_string(), task.partition);
    let status = task.status.clone();
    // The partition's span, so the restore's log lines name it.
    let span = tracing::Span::current();
    tokio::task::spawn_blocking(move || {
        let _entered = span.enter();
        let progress = &status.restore;
        let restored = Restore {
            reader: &outputs.reader,
            topic: &topic,
            partition,
            tree: &tree,
            cancel: &cancel,
            progress,
        }
        .run_with_retries();
        progress.end();
        let restored = restored?;
        if restored.restored {
            member.store.flush()?;
        }
        Ok(restored)
    })
}
