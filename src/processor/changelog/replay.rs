//! The changelog side of `orderly replay`: where each changelog partition
//! stands, and the replay marker: a checkpoint record that moves the
//! partition, after tombstones for every key when the state is reset.
//!
//! Every instance reaches the marker through the restore path: its store's
//! recorded changelog position is below the changelog's end, so it restores,
//! and the last checkpoint record is the marker (or a later one). A reset
//! starts a new epoch: a store of an older epoch is cleared and restored from
//! the start of the changelog, applying only records of the new epoch, so
//! nothing from before the reset comes back, compacted or not.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::reader::ChangelogReader;
use super::ChangelogError;
use crate::config::Config;
use crate::engine::store::{changelog_checkpoint_key, Checkpoint};
use crate::kafka::headers::{HEADER_COVERS, HEADER_EPOCH};
use crate::kafka::ReaderSettings;

/// One changelog partition's last checkpoint record: (its offset, the
/// checkpoint). `None` when it holds none.
pub(crate) fn last_checkpoint(
    config: &Config,
    topic: &str,
    partition: i32,
) -> Result<Option<(i64, Checkpoint)>, ChangelogError> {
    let cancel = AtomicBool::new(false);
    let reader = ChangelogReader::new(&ReaderSettings::of(config), topic, partition, &cancel)?;
    let (low, high) = reader.watermarks()?;
    reader.last_checkpoint(low, high)
}

/// Every key whose newest record in the changelog partition is a value (not
/// a tombstone), the checkpoint key excepted: what a reset must delete.
pub(crate) fn live_keys(
    config: &Config,
    topic: &str,
    partition: i32,
) -> Result<Vec<Vec<u8>>, ChangelogError> {
    let cancel = AtomicBool::new(false);
    let reader = ChangelogReader::new(&ReaderSettings::of(config), topic, partition, &cancel)?;
    let (low, high) = reader.watermarks()?;
    let checkpoint_key = changelog_checkpoint_key();
    let mut live: HashMap<Vec<u8>, bool> = HashMap::new();
    reader.scan(low, high, |message| {
        let Some(key) = message.key() else {
            return Ok(());
        };
        if key != checkpoint_key.as_slice() {
            live.insert(key.to_vec(), message.payload().is_some());
        }
        Ok(())
    })?;
    let mut keys: Vec<Vec<u8>> = live
        .into_iter()
        .filter(|(_, is_live)| *is_live)
        .map(|(k, _)| k)
        .collect();
    keys.sort();
    Ok(keys)
}

/// Produces `changes` (a reset's tombstones, a repair's values; `None`
/// deletes) then the marker `checkpoint` into the changelog partition, all
/// tagged with its next offset and epoch (and the marker with a repair's
/// `published_to`), and waits for every acknowledgement. Returns the
/// offset after the marker.
pub(crate) async fn write_marker(
    producer: &FutureProducer,
    topic: &str,
    partition: i32,
    changes: &[(Vec<u8>, Option<Vec<u8>>)],
    checkpoint: &Checkpoint,
    published_to: Option<i64>,
) -> Result<i64, ChangelogError> {
    let produce_error = |cause| ChangelogError::Produce {
        topic: topic.into(),
        partition,
        cause,
    };
    let value = checkpoint
        .encode()
        .map_err(|message| ChangelogError::Corrupt {
            topic: topic.into(),
            partition,
            offset: -1,
            message,
        })?;
    let covers = checkpoint.next_offset.to_string();
    let epoch = checkpoint.epoch.to_string();
    let headers = crate::kafka::headers::headers([
        (HEADER_COVERS, covers.as_bytes()),
        (HEADER_EPOCH, epoch.as_bytes()),
    ]);
    let timeout = std::time::Duration::from_secs(30);
    let mut acks = Vec::with_capacity(changes.len());
    for (key, value) in changes {
        let record = FutureRecord::<[u8], [u8]>::to(topic)
            .partition(partition)
            .key(key.as_slice())
            .headers(headers.clone());
        let record = match value {
            Some(value) => record.payload(value.as_slice()),
            None => record,
        };
        acks.push(producer.send(record, timeout));
    }
    for ack in futures::future::join_all(acks).await {
        ack.map_err(|(cause, _)| produce_error(cause))?;
    }
    let key = changelog_checkpoint_key();
    let headers = crate::kafka::headers::with_published_to(headers, published_to);
    let record = FutureRecord::<[u8], [u8]>::to(topic)
        .partition(partition)
        .key(key.as_slice())
        .payload(&value)
        .headers(headers);
    let delivery = producer
        .send(record, timeout)
        .await
        .map_err(|(cause, _)| produce_error(cause))?;
    Ok(delivery.offset + 1)
}
