//! Each write-out of a partition with a changelog is one Kafka transaction
//! of that partition's own transactional producer, under either guarantee.
//!
//! Why under at_least_once too: a record handed to a producer stays in
//! librdkafka's queue while the process is paused or the broker is away,
//! and is delivered when both are back, whatever happened to the
//! assignment meanwhile. Without fencing, a write-out of a member that lost
//! its partition lands in the changelog after the new owner's, and a
//! restore (or compaction, which keeps the last record of a key) takes its
//! older states for the newer ones. With a transactional producer the new
//! owner's `init_transactions` aborts the old owner's open transaction and
//! fences its producer: nothing it still sends becomes visible to the
//! `read_committed` readers orderly restores with, and its commit fails, so
//! it writes no sled batch either. What the guarantees put in the
//! transaction (the write-out mode, `partition::mode`):
//!
//! * exactly_once: the held dead letters, the changelog records then the
//!   checkpoint record, the status changes, and the input offset
//!   (`send_offsets_to_transaction` with the consumer's group metadata, so
//!   the broker also rejects a commit from a stale group generation);
//! * at_least_once: the changelog records then the checkpoint record and,
//!   with write-out delivery, the status changes. Dead letters go out when
//!   found and the input offset is committed after the sled flush, as
//!   at_least_once does without a changelog.
//!
//! The layout: one transactional producer per input partition, with the
//! `transactional.id` `<group>-<input topic>-<partition>`. Each partition
//! task writes out on its own schedule (its commit interval, its cache
//! share), so one transaction per partition keeps that independence: an
//! instance-wide producer (KIP-447's layout) would make every partition's
//! write-out wait for one shared transaction round. The next owner of the
//! partition calls `init_transactions` with the same id before it
//! restores, so no write of a previous owner can become visible behind the
//! restore.
//!
//! Only after the commit is the sled batch written and flushed. A crash
//! before the commit leaves nothing visible to `read_committed` readers; a
//! crash after it leaves a store at or behind the changelog, which the
//! restore brings up to date.

use crate::engine::entity::Entity;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureRecord, Producer};
use tracing::{info, warn};

use super::dlq::{letter_record, HeldLetter};
use crate::config::Config;
use crate::engine::fault::{self, Point};
use crate::engine::store::{changelog_checkpoint_key, ChangeRecord};
use crate::kafka::headers::{HEADER_COVERS, HEADER_EPOCH, HEADER_WRITER};
use crate::processor::fence::{self, TxnProducer};
use crate::processor::outbox::{OutboxEncoder, OutboxRecord};

/// How long `init_transactions`, `send_offsets_to_transaction` and
/// `commit_transaction` may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long orderly waits for a transactional call past the timeout it
/// passes: librdkafka does not always honour that timeout
/// (`send_offsets_to_transaction` waits on a coordinator request whose
/// timeout is never checked, librdkafka issues 5456 and 5511). Past it the
/// partition starts over with a new producer, which fences the stuck one.
const CALL_DEADLINE: Duration = Duration::from_secs(45);

#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    /// Another producer with this partition's transactional id took over
    /// (the partition has a new owner), or the producer failed for good:
    /// nothing more may be written for the partition from here.
    #[error("partition {partition}: the transactional producer {transactional_id} was fenced or failed: {cause}")]
    Fenced {
        partition: i32,
        transactional_id: String,
        cause: KafkaError,
    },
    /// The producer could not be created or its transactions initialised
    /// for another reason than a newer owner (no ACL on the transactional
    /// id, a broker without transactions, a timeout): the partition cannot
    /// be written, and no other member takes it over, so the process stops.
    #[error(transparent)]
    Open(Box<OpenFailure>),
    /// The round was aborted (nothing of it is visible); it can be retried.
    #[error("partition {partition}: transaction aborted: {cause}")]
    Aborted { partition: i32, cause: KafkaError },
    /// A transactional call did not return within its bound, whatever the
    /// timeout passed to it: the producer is given up, and the partition
    /// starts over with a new one, which fences it (the round is never
    /// visible, or was committed and is in the changelog the restore reads).
    #[error(
        "partition {partition}: librdkafka's {call} did not return within {}s (its timeout is {}s; librdkafka \
         issues 5456, 5511): the producer {transactional_id} is given up and the partition starts over",
        waited.as_secs(),
        CALL_TIMEOUT.as_secs()
    )]
    Stalled {
        partition: i32,
        transactional_id: String,
        call: &'static str,
        waited: Duration,
    },
}

impl crate::observe::errors::Failure for TxnError {
    fn stage(&self) -> crate::observe::errors::Stage {
        crate::observe::errors::Stage::Transaction
    }

    fn kind(&self) -> crate::observe::errors::Kind {
        match self {
            TxnError::Aborted { .. } => crate::observe::errors::Kind::Retryable,
            TxnError::Fenced { .. } | TxnError::Open(_) | TxnError::Stalled { .. } => {
                crate::observe::errors::Kind::Permanent
            }
        }
    }
}

/// Why a partition's transactional producer could not start.
#[derive(Debug, thiserror::Error)]
#[error(
    "partition {partition}: cannot start the transactional producer {transactional_id}: {cause} (with ACLs \
     {principal} needs Write and Describe on this transactional id, granted prefixed to every partition's: \
     docs/operating.md, \"A secured cluster\")"
)]
pub struct OpenFailure {
    partition: i32,
    transactional_id: String,
    /// The principal orderly connects as, as ACLs name it.
    principal: String,
    cause: KafkaError,
}

/// What one write-out commits.
pub(super) struct Round<'a, S> {
    pub letters: &'a [HeldLetter],
    pub changes: &'a [ChangeRecord],
    pub checkpoint: &'a [u8],
    /// The input offset the round covers (the checkpoint's next offset).
    pub covers: i64,
    pub epoch: u32,
    pub status: &'a [OutboxRecord<S>],
    /// Carried by the checkpoint record while a repaired partition has not
    /// passed it ([`crate::kafka::headers::HEADER_PUBLISHED_TO`]).
    pub published_to: Option<i64>,
    /// The group metadata the input offset is committed with
    /// (exactly_once); `None` commits no offset.
    pub group: Option<ConsumerGroupMetadata>,
    /// Where the partition's status shows the call the round waits in.
    pub waiting: &'a crate::observe::Waiting,
}

/// The partition's transactional producer and where its records go.
pub(crate) struct TxnWriter<E: Entity> {
    producer: TxnProducer,
    transactional_id: String,
    partition: i32,
    source_topic: String,
    changelog_topic: String,
    dlq_topic: String,
    /// The output topic and the encoder of its records (outbox on).
    output: Option<(String, Arc<OutboxEncoder<E>>)>,
}

/// What every partition's transactional producer is built from, taken once
/// from the configuration (the partition tasks do not hold all of it).
#[derive(Debug, Clone)]
pub(crate) struct TxnSettings {
    /// The producer's client settings, without its transactional id.
    producer: rdkafka::ClientConfig,
    /// The group id: with the input topic, it names each partition's
    /// transactional id.
    group_id: String,
    /// The input topic, whose offsets an exactly-once round commits.
    source_topic: String,
    /// Where a round's held dead letters go (exactly_once).
    dlq_topic: String,
    /// Who orderly connects as, named when the broker refuses the producer.
    principal: String,
}

impl TxnSettings {
    pub(crate) fn of(config: &Config) -> Self {
        TxnSettings {
            producer: crate::kafka::transactional_producer_config(config),
            group_id: config.kafka.group_id.clone(),
            source_topic: config.kafka.input_topic.clone(),
            dlq_topic: config.kafka.dlq_topic.clone(),
            principal: crate::kafka::acl::principal(config),
        }
    }

    /// The transactional id of an input partition's producer.
    fn transactional_id(&self, partition: i32) -> String {
        format!("{}-{}-{}", self.group_id, self.source_topic, partition)
    }
}

impl<E: Entity> TxnWriter<E> {
    /// Creates the producer and initialises its transactions, which fences
    /// every earlier producer of the partition (a zombie's open transaction
    /// is aborted). Call it before restoring, so nothing the previous owner
    /// writes can land after the restore read the changelog.
    pub(super) async fn open(
        settings: &TxnSettings,
        partition: i32,
        changelog_topic: String,
        output: Option<(String, Arc<OutboxEncoder<E>>)>,
    ) -> Result<Self, TxnError> {
        let transactional_id = settings.transactional_id(partition);
        let mut client = settings.producer.clone();
        client.set("transactional.id", &transactional_id);
        crate::engine::fault::hit(crate::engine::fault::Point::StopInit);
        let result = tokio::task::spawn_blocking(move || fence::init(&client, CALL_TIMEOUT))
            .await
            .unwrap_or(Err(KafkaError::Canceled));
        let (producer, tries) = match result {
            Ok(ready) => (ready.producer, ready.tries),
            Err(cause) => {
                // Fenced here means a newer owner initialised meanwhile: the
                // group reassigns the partition. Anything else would leave the
                // partition unprocessed with no rebalance to move it: fatal.
                let fenced = matches!(
                    cause.rdkafka_error_code(),
                    Some(
                        RDKafkaErrorCode::ProducerFenced
                            | RDKafkaErrorCode::InvalidProducerEpoch
                            | RDKafkaErrorCode::Fenced
                    )
                );
                return Err(if fenced {
                    TxnError::Fenced {
                        partition,
                        transactional_id,
                        cause,
                    }
                } else {
                    TxnError::Open(Box::new(OpenFailure {
                        partition,
                        transactional_id,
                        principal: settings.principal.clone(),
                        cause,
                    }))
                });
            }
        };
        info!(
            partition,
            transactional_id = %transactional_id,
            producers = tries,
            "transactional producer ready (earlier producers of the partition fenced)"
        );
        Ok(TxnWriter {
            producer,
            transactional_id,
            partition,
            source_topic: settings.source_topic.clone(),
            changelog_topic,
            dlq_topic: settings.dlq_topic.clone(),
            output,
        })
    }

    /// Commits one round; returns the changelog offset after its checkpoint
    /// record. On [`TxnError::Aborted`] nothing of the round is visible and
    /// the same round may be committed again.
    pub(super) async fn commit(&self, round: Round<'_, E::Status>) -> Result<i64, TxnError> {
        if let Err(cause) = self.producer.begin_transaction() {
            return Err(self.classify(cause));
        }
        let (acks, checkpoint_ack) = match self.enqueue(&round).await {
            Ok(acks) => acks,
            Err(error) => return Err(self.fail(error, round.waiting).await),
        };
        fault::hit(Point::StopQueued);
        let offsets = match round.group {
            Some(group) => match crate::kafka::commit_list(
                &self.source_topic,
                [(self.partition, round.covers)],
            ) {
                Ok(tpl) => Some((tpl, group)),
                Err(cause) => return Err(self.fail(cause, round.waiting).await),
            },
            None => None,
        };
        if let Some((offsets, group)) = offsets {
            let producer = self.producer.clone();
            let sent = self
                .bounded(round.waiting, "send_offsets_to_transaction", move || {
                    fault::hit(Point::HangSendOffsets);
                    producer.send_offsets_to_transaction(&offsets, &group, CALL_TIMEOUT)
                })
                .await?;
            if let Err(cause) = sent {
                return Err(self.fail(cause, round.waiting).await);
            }
        }
        if let Err(cause) = self.commit_retrying(round.waiting).await? {
            return Err(self.fail(cause, round.waiting).await);
        }
        // Committed: every record was delivered.
        drop(acks);
        match checkpoint_ack.await {
            Ok(Ok(delivery)) => Ok(delivery.offset + 1),
            Ok(Err((cause, _))) => Err(TxnError::Fenced {
                partition: self.partition,
                transactional_id: self.transactional_id.clone(),
                cause,
            }),
            Err(_) => Err(TxnError::Fenced {
                partition: self.partition,
                transactional_id: self.transactional_id.clone(),
                cause: KafkaError::Canceled,
            }),
        }
    }

    /// Hands every record of the round to librdkafka (the commit waits for
    /// their delivery). Returns the acknowledgements, the checkpoint
    /// record's apart.
    async fn enqueue(
        &self,
        round: &Round<'_, E::Status>,
    ) -> Result<(Vec<DeliveryFuture>, DeliveryFuture), KafkaError> {
        let mut acks =
            Vec::with_capacity(round.letters.len() + round.changes.len() + round.status.len());
        for held in round.letters {
            let letter = held.letter();
            acks.push(
                self.send(letter_record(&self.dlq_topic, &self.source_topic, &letter))
                    .await?,
            );
        }
        let (covers, epoch) = (round.covers.to_string(), round.epoch.to_string());
        let headers = crate::kafka::headers::headers([
            (HEADER_COVERS, covers.as_bytes()),
            (HEADER_EPOCH, epoch.as_bytes()),
            (HEADER_WRITER, crate::kafka::client_id().as_bytes()),
        ]);
        let torn_at = fault::due(Point::TornChangelog).then_some(round.changes.len() / 2);
        for (i, change) in round.changes.iter().enumerate() {
            if torn_at == Some(i) {
                // The crash drill: the process dies inside an open
                // transaction, half its records sent.
                self.producer.flush(Duration::from_secs(5)).ok();
                fault::abort(Point::TornChangelog);
            }
            let record = FutureRecord::<[u8], [u8]>::to(&self.changelog_topic)
                .partition(self.partition)
                .key(change.key.as_slice())
                .headers(headers.clone());
            let record = match &change.value {
                Some(value) => record.payload(value.as_ref()),
                None => record,
            };
            acks.push(self.send(record).await?);
        }
        let key = changelog_checkpoint_key();
        let headers = crate::kafka::headers::with_published_to(headers, round.published_to);
        let record = FutureRecord::<[u8], [u8]>::to(&self.changelog_topic)
            .partition(self.partition)
            .key(key.as_slice())
            .payload(round.checkpoint)
            .headers(headers);
        let checkpoint_ack = self.send(record).await?;
        if let Some((topic, encoder)) = &self.output {
            for status in round.status {
                let payload = encoder.encode(status).map_err(|e| {
                    warn!(partition = self.partition, error = %e, "cannot encode a status change");
                    KafkaError::MessageProduction(RDKafkaErrorCode::InvalidMessage)
                })?;
                let record = FutureRecord::<str, Vec<u8>>::to(topic)
                    .partition(self.partition)
                    .key(status.key.as_str())
                    .payload(&payload)
                    .headers(crate::processor::outbox::status_headers(
                        &self.source_topic,
                        self.partition,
                        status,
                    ));
                acks.push(self.send(record).await?);
            }
        }
        Ok((acks, checkpoint_ack))
    }

    async fn send<K, P>(&self, record: FutureRecord<'_, K, P>) -> Result<DeliveryFuture, KafkaError>
    where
        K: rdkafka::message::ToBytes + ?Sized,
        P: rdkafka::message::ToBytes + ?Sized,
    {
        crate::kafka::send_when_queued(&self.producer, record).await
    }

    /// After a failure inside an open transaction: abort it (when the
    /// producer can) and say whether the round may be retried.
    async fn fail(&self, cause: KafkaError, waiting: &crate::observe::Waiting) -> TxnError {
        if self.is_fatal(&cause) {
            return self.fenced(cause);
        }
        let producer = self.producer.clone();
        let aborted = match self
            .bounded(waiting, "abort_transaction", move || {
                producer.abort_transaction(CALL_TIMEOUT)
            })
            .await
        {
            Ok(aborted) => aborted,
            Err(stalled) => return stalled,
        };
        match aborted {
            Ok(()) => TxnError::Aborted {
                partition: self.partition,
                cause,
            },
            Err(abort) => {
                warn!(partition = self.partition, error = %abort, "cannot abort the transaction");
                self.fenced(cause)
            }
        }
    }

    fn classify(&self, cause: KafkaError) -> TxnError {
        if self.is_fatal(&cause) {
            self.fenced(cause)
        } else {
            TxnError::Aborted {
                partition: self.partition,
                cause,
            }
        }
    }

    fn is_fatal(&self, cause: &KafkaError) -> bool {
        match cause {
            KafkaError::Transaction(error) => error.is_fatal(),
            other => matches!(
                other.rdkafka_error_code(),
                Some(
                    RDKafkaErrorCode::Fatal
                        | RDKafkaErrorCode::ProducerFenced
                        | RDKafkaErrorCode::InvalidProducerEpoch
                        | RDKafkaErrorCode::Fenced
                )
            ),
        }
    }

    fn fenced(&self, cause: KafkaError) -> TxnError {
        TxnError::Fenced {
            partition: self.partition,
            transactional_id: self.transactional_id.clone(),
            cause,
        }
    }
}

/// Waits for a blocking librdkafka call on a blocking thread, for at most
/// `deadline` whatever librdkafka does with the call's own timeout. The
/// outer error is the call that did not return (the thread is left to it);
/// the inner result is the call's. A wait past [`STALL_REPORT`] is logged
/// at once, naming the call.
///
/// [`STALL_REPORT`]: crate::observe::STALL_REPORT
pub(crate) async fn bounded_call<T: Send + 'static>(
    waiting: &crate::observe::Waiting,
    call: &'static str,
    deadline: Duration,
    work: impl FnOnce() -> Result<T, KafkaError> + Send + 'static,
) -> Result<Result<T, KafkaError>, Duration> {
    let _waiting = waiting.enter(call);
    let started = tokio::time::Instant::now();
    let handle = tokio::task::spawn_blocking(work);
    tokio::pin!(handle);
    let report = crate::observe::STALL_REPORT.min(deadline);
    let joined = match tokio::time::timeout(report, &mut handle).await {
        Ok(joined) => joined,
        Err(_) => {
            warn!(
                call,
                waited_s = report.as_secs(),
                deadline_s = deadline.as_secs(),
                "a write-out is waiting in librdkafka's {call}; the partition starts over if it does not return \
                 within the deadline"
            );
            match tokio::time::timeout(deadline.saturating_sub(report), &mut handle).await {
                Ok(joined) => joined,
                Err(_) => return Err(started.elapsed()),
            }
        }
    };
    Ok(joined.unwrap_or(Err(KafkaError::Canceled)))
}

impl<E: Entity> TxnWriter<E> {
    /// [`bounded_call`] with [`CALL_DEADLINE`]; a call past it is
    /// [`TxnError::Stalled`].
    async fn bounded<T: Send + 'static>(
        &self,
        waiting: &crate::observe::Waiting,
        call: &'static str,
        work: impl FnOnce() -> Result<T, KafkaError> + Send + 'static,
    ) -> Result<Result<T, KafkaError>, TxnError> {
        bounded_call(waiting, call, CALL_DEADLINE, work)
            .await
            .map_err(|waited| TxnError::Stalled {
                partition: self.partition,
                transactional_id: self.transactional_id.clone(),
                call,
                waited,
            })
    }

    /// `commit_transaction`, called again while librdkafka says the error
    /// is retriable (a commit that timed out may still complete); each call
    /// bounded.
    async fn commit_retrying(
        &self,
        waiting: &crate::observe::Waiting,
    ) -> Result<Result<(), KafkaError>, TxnError> {
        let mut tries = 0;
        loop {
            let producer = self.producer.clone();
            match self
                .bounded(waiting, "commit_transaction", move || {
                    producer.commit_transaction(CALL_TIMEOUT)
                })
                .await?
            {
                Ok(()) => return Ok(Ok(())),
                Err(KafkaError::Transaction(error)) if error.is_retriable() && tries < 3 => {
                    tries += 1;
                    warn!(%error, "transaction commit failed; retrying the commit");
                }
                Err(error) => return Ok(Err(error)),
            }
        }
    }
}

#[cfg(test)]
mod bounded_tests {
    use super::*;
    use crate::observe::Waiting;
    use std::time::Instant;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_that_does_not_return_is_given_up_at_its_deadline_and_shown_while_it_waits() {
        let waiting = Arc::new(Waiting::default());
        let (release, blocked) = std::sync::mpsc::channel::<()>();
        let seen = waiting.clone();
        let watcher = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            seen.get(Instant::now()).map(|(_, call)| call)
        });
        let started = Instant::now();
        let result = bounded_call(
            &waiting,
            "send_offsets_to_transaction",
            Duration::from_millis(400),
            move || {
                let _ = blocked.recv();
                Ok(())
            },
        )
        .await;
        let waited = result.expect_err("the call never returns: given up");
        assert!(waited >= Duration::from_millis(400), "{waited:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the bound did not hold"
        );
        assert_eq!(
            watcher.await.expect("watcher"),
            Some("send_offsets_to_transaction")
        );
        assert!(
            waiting.get(Instant::now()).is_none(),
            "the wait is cleared when given up"
        );
        drop(release);
    }

    #[tokio::test]
    async fn a_call_that_returns_gives_its_own_result() {
        let waiting = Waiting::default();
        let ok = bounded_call(
            &waiting,
            "commit_transaction",
            Duration::from_secs(5),
            || Ok(7),
        )
        .await;
        assert!(matches!(ok, Ok(Ok(7))));
        let failed: Result<Result<(), KafkaError>, Duration> = bounded_call(
            &waiting,
            "commit_transaction",
            Duration::from_secs(5),
            || Err(KafkaError::Canceled),
        )
        .await;
        assert!(matches!(failed, Ok(Err(KafkaError::Canceled))));
        assert!(waiting.get(Instant::now()).is_none());
    }
}
