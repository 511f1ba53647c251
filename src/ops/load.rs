//! Producing a planned workload to a topic, in order, with every record
//! acknowledged. Used by `produce`, `demo`, the tests and the bench.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use tracing::info;

use std::borrow::Borrow;

use crate::domains::orders::workload::PlannedRecord;
use crate::engine::codec::EncodeError;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("encoding record {index} failed: {source}")]
    Encode { index: usize, source: EncodeError },
    #[error("producing record {index} failed: {source}")]
    Produce { index: usize, source: KafkaError },
    #[error("delivery of record {index} was cancelled (producer closed)")]
    Cancelled { index: usize },
}

/// Produces every record to `topic` (partitioned by key) and waits for all
/// acknowledgements. Returns each partition's end offset (next offset after
/// the last record produced there).
pub async fn produce_planned(
    producer: &FutureProducer,
    topic: &str,
    records: &[PlannedRecord],
) -> Result<BTreeMap<i32, i64>, LoadError> {
    produce_streamed(producer, topic, records.iter().map(Ok), records.len()).await
}

/// [`produce_planned`] for records encoded as they are read (a
/// `StreamedPlan`'s): `total` is for the progress lines only.
pub async fn produce_streamed<R: Borrow<PlannedRecord>>(
    producer: &FutureProducer,
    topic: &str,
    records: impl Iterator<Item = Result<R, EncodeError>>,
    total: usize,
) -> Result<BTreeMap<i32, i64>, LoadError> {
    let started = Instant::now();
    let mut last_log = Instant::now();
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    let mut in_flight: Vec<(usize, DeliveryFuture)> = Vec::with_capacity(10_000);
    let mut produced = 0usize;
    for (index, record) in records.enumerate() {
        let record = record.map_err(|source| LoadError::Encode { index, source })?;
        let record = record.borrow();
        produced = index + 1;
        loop {
            let future_record = FutureRecord::to(topic)
                .key(record.key.as_str())
                .payload(record.payload.as_slice());
            match producer.send_result(future_record) {
                Ok(delivery) => {
                    in_flight.push((index, delivery));
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    settle(&mut in_flight, &mut ends).await?;
                    producer.poll(Duration::from_millis(10));
                }
                Err((source, _)) => return Err(LoadError::Produce { index, source }),
            }
        }
        if in_flight.len() >= 10_000 {
            settle(&mut in_flight, &mut ends).await?;
        }
        if last_log.elapsed() >= Duration::from_secs(5) {
            info!(produced = index + 1, total, "producing");
            last_log = Instant::now();
        }
    }
    settle(&mut in_flight, &mut ends).await?;
    info!(
        records = produced,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "produced"
    );
    Ok(ends)
}

async fn settle(
    in_flight: &mut Vec<(usize, DeliveryFuture)>,
    ends: &mut BTreeMap<i32, i64>,
) -> Result<(), LoadError> {
    for (index, delivery) in in_flight.drain(..) {
        match delivery.await {
            Ok(Ok(done)) => {
                let end = ends.entry(done.partition).or_insert(0);
                *end = (*end).max(crate::engine::store::next_offset_after(done.offset));
            }
            Ok(Err((source, _))) => return Err(LoadError::Produce { index, source }),
            Err(_) => return Err(LoadError::Cancelled { index }),
        }
    }
    Ok(())
}
