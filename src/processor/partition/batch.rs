//! One batch of a partition's records, decided: decoded (a registry outage
//! retried, poison dead-lettered), checked by the dead-letter breaker, and
//! applied against the order cache. Used by processing and draining alike.

use crate::engine::entity::Entity;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::message::Message;
use tracing::{debug, info, warn};

use super::mode::WriteOutMode;
use super::source::RecordSource;
use super::task::PartitionTask;
use crate::engine::codec::DecodeError;
use crate::engine::entity::Event;
use crate::engine::fault::{self, Point};
use crate::engine::outcomes::Outcomes;
use crate::engine::partition_state::{BatchOutcome, Decoded, Sourced};
use crate::engine::store::next_offset_after;
use crate::kafka::headers::HEADER_REDRIVE_COUNT;
use crate::kafka::retry::Backoff;
use crate::observe::errors::{Kind, Stage};
use crate::processor::dlq::DeadLetter;
use crate::processor::error::ProcessError;

/// What deciding a batch takes of a live task (`Live::process`).
pub(super) struct BatchRun<'a, E: Entity> {
    pub task: &'a mut PartitionTask<E>,
    /// Where the batch's dead letters go.
    pub mode: &'a mut WriteOutMode<E>,
    /// Milliseconds spent waiting on an unreachable schema registry.
    pub registry_waited_ms: &'a AtomicU64,
}

/// A batch's records decoded: the events, the dead letters, and which
/// records were dead (for the breaker), in order.
struct DecodedBatch<'m, B> {
    events: Vec<Sourced<Event<B>>>,
    letters: Vec<DeadLetter<'m>>,
    dead: Vec<bool>,
}

impl<E: Entity> BatchRun<'_, E> {
    /// Processes one batch: everything in it ends applied, duplicate, stale
    /// or dead-lettered, decided against the order cache; the pending
    /// checkpoint moves past it (written at the next write-out).
    pub(super) async fn process<M: Message + Sync>(
        mut self,
        batch: &[M],
    ) -> Result<(), ProcessError> {
        let started = Instant::now();
        let fresh = self.fresh(batch);
        let (Some(first), Some(last)) = (fresh.first(), fresh.last()) else {
            return Ok(());
        };
        let first_offset = first.offset();
        let next_offset = next_offset_after(last.offset());
        let DecodedBatch {
            events,
            letters,
            dead,
        } = self.decode_all(&fresh).await;
        if let Some(trip) = self.task.breaker.observe(dead) {
            // Nothing of this batch is sent, decided or counted: the
            // partition's checkpoint stays before it.
            return Err(ProcessError::DeadLetterBreaker {
                partition: self.task.partition,
                offset: first_offset,
                trip,
                cause: dominant_cause(&letters),
            });
        }
        let dead = self.send_or_hold(letters).await?;
        fault::hit(Point::PanicBatch);
        let decoded = Decoded {
            events,
            dead_lettered: dead,
            first_offset,
            next_offset,
        };
        self.apply(decoded, started, fresh.len())
    }

    /// The batch's records the checkpoint does not cover yet (the others
    /// were processed before a crash or a rebalance, and counted); says so
    /// when they do not start at the checkpoint.
    fn fresh<'m, M: Message>(&mut self, batch: &'m [M]) -> Vec<&'m M> {
        let expected = self.task.state.pending().map(|c| c.next_offset);
        let fresh: Vec<&M> = batch
            .iter()
            .filter(|m| expected.is_none_or(|next| m.offset() >= next))
            .collect();
        let Some(first) = fresh.first() else {
            return fresh;
        };
        match expected {
            None => {
                self.task.first_offset.get_or_insert(first.offset());
                info!(partition = self.task.partition, offset = first.offset(), "first batch on this partition; starting the checkpoint here")
            }
            Some(next) if first.offset() != next => warn!(
                partition = self.task.partition,
                expected = next,
                got = first.offset(),
                "offset gap (retention, compaction or transaction markers); counters will not add up to the offset span"
            ),
            Some(_) => {}
        }
        fresh
    }

    /// Decodes every record: an event, or a dead letter for poison.
    async fn decode_all<'m, M: Message>(&self, fresh: &[&'m M]) -> DecodedBatch<'m, E::Body> {
        let mut decoded = DecodedBatch {
            events: Vec::with_capacity(fresh.len()),
            letters: Vec::new(),
            dead: Vec::with_capacity(fresh.len()),
        };
        for &message in fresh {
            let event = self.decode(message).await;
            decoded.dead.push(event.is_err());
            match event {
                Ok(event) => decoded.events.push(Sourced {
                    offset: message.offset(),
                    value: event,
                }),
                Err((kind, text)) => decoded.letters.push(DeadLetter {
                    key: message.key(),
                    payload: message.payload(),
                    partition: self.task.partition,
                    offset: message.offset(),
                    kind,
                    message: text,
                    redrive_count: redrive_count(message),
                }),
            }
        }
        decoded
    }

    /// The batch's dead letters, held by the write-out mode (exactly_once:
    /// they commit with the write-out that moves the checkpoint past their
    /// records) or sent now; returns how many there were.
    async fn send_or_hold(&mut self, letters: Vec<DeadLetter<'_>>) -> Result<u64, ProcessError> {
        let count = letters.len() as u64;
        // After a repair: letters published before it are not sent again
        // (they still count).
        let (_published, letters) = self.task.split_republished(letters);
        if !self.mode.hold_letters(&letters) && !letters.is_empty() {
            // A permanent failure stops the processor before this batch is
            // decided: nothing moves past a record whose letter is not durable.
            self.task.input.dead_letters.try_send_all(&letters).await?;
            fault::hit(Point::AfterDlq);
        }
        Ok(count)
    }

    /// Decides the batch against the order cache and records its outcomes.
    fn apply(
        self,
        decoded: Decoded<E::Body>,
        started: Instant,
        records: usize,
    ) -> Result<(), ProcessError> {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        let retention_ms = self.task.input.retention.as_millis() as i64;
        let dead = decoded.dead_lettered;
        let next_offset = decoded.next_offset;
        let outcome = self.task.state.apply(decoded, now_ms, retention_ms)?;
        let share = self.task.member.cache_share();
        self.task.state.shed(share);
        self.task.state.spill(share)?;
        let BatchOutcome {
            outcomes,
            version_gaps,
            ..
        } = outcome;
        let outcomes = Outcomes {
            dead_lettered: dead,
            ..outcomes
        };
        let elapsed = started.elapsed();
        let task = &*self.task;
        task.reporting
            .counters
            .record_batch(&outcomes, version_gaps, elapsed);
        task.status.record(&outcomes, version_gaps, next_offset);
        let telemetry = &task.reporting.telemetry;
        telemetry.batch_duration.observe(elapsed.as_secs_f64());
        telemetry.batch_records.observe(records as f64);
        debug!(
            partition = task.partition,
            records,
            ?outcomes,
            next_offset,
            "batch decided"
        );
        Ok(())
    }

    /// Decodes one record; a registry outage is retried here (the record is
    /// not poison, it must not be skipped).
    async fn decode(
        &self,
        message: &impl Message,
    ) -> Result<Event<E::Body>, (crate::engine::codec::PoisonKind, String)> {
        let decoder = &self.task.input.decoder;
        if let Some(result) = decoder.decode_cached(message.payload()) {
            return result.map_err(poison_parts);
        }
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(10));
        let mut waiting_since: Option<Instant> = None;
        loop {
            let answer = decoder.decode(message.payload()).await;
            if let Some(since) =
                waiting_since.filter(|_| !matches!(answer, Err(DecodeError::Transient(_))))
            {
                self.registry_waited_ms.fetch_add(
                    since.elapsed().as_millis() as u64,
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
            match answer {
                Err(DecodeError::Transient(error)) => {
                    waiting_since.get_or_insert_with(Instant::now);
                    self.task
                        .reporting
                        .telemetry
                        .errors
                        .record(Stage::Decode, Kind::Retryable);
                    // The decoder logs the outage once for every partition.
                    debug!(partition = self.task.partition, offset = message.offset(), %error, "schema registry unavailable; retrying");
                    backoff.sleep().await;
                }
                other => return other.map_err(poison_parts),
            }
        }
    }
}

/// Moves every record already in the source into the batch, up to `max`.
pub(super) fn take_available<'q, S: RecordSource>(
    source: &'q S,
    batch: &mut Vec<S::Record<'q>>,
    max: usize,
    partition: i32,
) {
    while batch.len() < max {
        match source.poll() {
            Some(Ok(message)) => batch.push(message),
            Some(Err(error)) => {
                warn!(partition, %error, "partition queue error (librdkafka retries on its own)")
            }
            None => return,
        }
    }
}

/// The record's re-drive count header, as it is: a letter of a re-driven
/// record that fails again keeps the count `orderly dlq replay` gave it.
fn redrive_count(message: &impl Message) -> Option<&[u8]> {
    crate::kafka::header(message, HEADER_REDRIVE_COUNT)
}

/// The most frequent error kind among `letters`, with an example message
/// and, for a kind with a usual cause, that cause.
fn dominant_cause(letters: &[DeadLetter<'_>]) -> String {
    let mut counts: Vec<(crate::engine::codec::PoisonKind, usize, &str)> = Vec::new();
    for letter in letters {
        match counts.iter_mut().find(|(kind, ..)| *kind == letter.kind) {
            Some((_, n, _)) => *n += 1,
            None => counts.push((letter.kind, 1, &letter.message)),
        }
    }
    let Some((kind, n, example)) = counts.into_iter().max_by_key(|(_, n, _)| *n) else {
        return "no dead letter in the last batch".into();
    };
    let usual = match kind {
        crate::engine::codec::PoisonKind::UnknownSchema => {
            " (the records carry schema ids the registry does not know: was it restarted with in-memory storage, \
             or is registry.url another registry than the producers'?)"
        }
        crate::engine::codec::PoisonKind::BadMagicByte | crate::engine::codec::PoisonKind::EmptyPayload => {
            " (the records are not in the Confluent wire format: a producer that does not use the schema registry?)"
        }
        _ => "",
    };
    format!(
        "{n} of the last batch's {} dead letters were {}, e.g. {example}{usual}",
        letters.len(),
        kind.as_str()
    )
}

fn poison_parts(error: DecodeError) -> (crate::engine::codec::PoisonKind, String) {
    match error {
        DecodeError::Poison { kind, message } => (kind, message),
        // Unreachable by construction (transient errors are retried), but a
        // typed answer beats a panic.
        DecodeError::Transient(message) => (crate::engine::codec::PoisonKind::Undecodable, message),
    }
}
