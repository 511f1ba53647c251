//! Reading one changelog partition: what the changelog adds to the shared
//! [`PartitionReader`], the search for the last checkpoint record and the
//! changelog's headers, with its errors in [`ChangelogError`]'s words. Used
//! by restore and by `orderly replay`.

use std::sync::atomic::AtomicBool;

use rdkafka::message::{BorrowedMessage, Message};

use super::ChangelogError;
use crate::config::Config;
use crate::partition_reader::PartitionReader;
use crate::store::{changelog_checkpoint_key, Checkpoint};

/// The first window searched backwards for the last checkpoint record.
const FIRST_WINDOW: i64 = 4_096;

/// A consumer of one changelog partition (assigned, never in a group).
pub(crate) struct ChangelogReader<'a> {
    reader: PartitionReader<'a>,
}

impl<'a> ChangelogReader<'a> {
    /// A reader that stops with [`ChangelogError::Cancelled`] once `cancel`
    /// is set (the partition was revoked).
    pub(crate) fn new(config: &Config, topic: &str, partition: i32, cancel: &'a AtomicBool) -> Result<Self, ChangelogError> {
        let reader = PartitionReader::new(&crate::kafka::reader_consumer_config(config), topic, partition)?;
        Ok(ChangelogReader { reader: reader.cancelled_by(cancel) })
    }

    /// (low, high) watermarks.
    pub(crate) fn watermarks(&self) -> Result<(i64, i64), ChangelogError> {
        Ok(self.reader.watermarks()?)
    }

    /// Reads `[start, end)` of the partition, calling `visit` for each record.
    pub(crate) fn scan(
        &self,
        start: i64,
        end: i64,
        visit: impl FnMut(&BorrowedMessage<'_>) -> Result<(), ChangelogError>,
    ) -> Result<(), ChangelogError> {
        self.reader.scan(start, end, visit)
    }

    /// The last checkpoint record in `[from, high)`: its offset and value.
    /// Searched backwards in growing windows: a write-out ends with its
    /// checkpoint record, so the last one is near the end.
    pub(crate) fn last_checkpoint(&self, from: i64, high: i64) -> Result<Option<(i64, Checkpoint)>, ChangelogError> {
        let key = changelog_checkpoint_key();
        let mut window = FIRST_WINDOW;
        let mut end = high;
        while end > from {
            let start = (end - window).max(from);
            let mut found = None;
            self.scan(start, end, |message| {
                if message.key() == Some(key.as_slice()) {
                    let bytes = message.payload().unwrap_or_default();
                    let checkpoint = Checkpoint::decode(bytes).map_err(|text| self.corrupt(message, text))?;
                    found = Some((message.offset(), checkpoint));
                }
                Ok(())
            })?;
            if found.is_some() {
                return Ok(found);
            }
            end = start;
            window = window.saturating_mul(4);
        }
        Ok(None)
    }

    /// A numeric header of a record (`None` when absent).
    pub(crate) fn header(&self, message: &BorrowedMessage<'_>, name: &str) -> Result<Option<i64>, ChangelogError> {
        let Some(value) = crate::kafka::header(message, name) else { return Ok(None) };
        std::str::from_utf8(value)
            .ok()
            .and_then(|text| text.parse().ok())
            .map(Some)
            .ok_or_else(|| self.corrupt(message, format!("{name} header is not a number")))
    }

    /// A changelog record that orderly cannot have written.
    pub(crate) fn corrupt(&self, message: &BorrowedMessage<'_>, text: String) -> ChangelogError {
        let (topic, partition) = (self.reader.topic().to_string(), self.reader.partition());
        ChangelogError::Corrupt { topic, partition, offset: message.offset(), message: text }
    }
}
