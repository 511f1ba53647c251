//! Reading one changelog partition: what the changelog adds to the shared
//! `PartitionReader`, the search for the last checkpoint record and the
//! changelog's headers, with its errors in [`ChangelogError`]'s words. Used
//! by restore and by `orderly replay`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::message::{BorrowedMessage, Message};
use tracing::{info, warn};

use super::ChangelogError;
use crate::engine::store::{changelog_checkpoint_key, Checkpoint};
use crate::kafka::headers::{HEADER_COVERS, HEADER_EPOCH, HEADER_PUBLISHED_TO};
use crate::kafka::partition_reader::PartitionReader;
use crate::kafka::ReaderSettings;

/// The first window searched backwards for the last checkpoint record.
const FIRST_WINDOW: i64 = 4_096;

/// How long a restore waits for a transaction still open on the changelog
/// partition to end (the broker aborts one whose producer is gone after
/// its `transaction.timeout.ms`, 30 s, and its abort check, every 10 s).
const OPEN_TRANSACTION_WAIT: Duration = Duration::from_secs(60);
/// How often the last stable offset is asked again meanwhile.
const OPEN_TRANSACTION_POLL: Duration = Duration::from_millis(250);

/// A checkpoint record found in the changelog.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FoundCheckpoint {
    pub offset: i64,
    pub checkpoint: Checkpoint,
    /// Its [`HEADER_PUBLISHED_TO`]: written by `orderly repair` and the
    /// write-outs that follow it until the partition passes that offset.
    pub published_to: Option<i64>,
}

/// A consumer of one changelog partition (assigned, never in a group).
pub(crate) struct ChangelogReader<'a> {
    reader: PartitionReader<'a>,
    /// The same partition read `read_uncommitted` (its high watermark),
    /// created when [`Self::settled_watermarks`] first needs it.
    uncommitted: std::cell::OnceCell<PartitionReader<'a>>,
    /// The settings, topic and partition it is created with.
    uncommitted_config: rdkafka::ClientConfig,
    topic: String,
    partition: i32,
    cancel: &'a AtomicBool,
    /// For the command a hanging transaction's message names.
    bootstrap: String,
}

impl<'a> ChangelogReader<'a> {
    /// A reader that stops with [`ChangelogError::Cancelled`] once `cancel`
    /// is set (the partition was revoked).
    pub(crate) fn new(
        settings: &ReaderSettings,
        topic: &str,
        partition: i32,
        cancel: &'a AtomicBool,
    ) -> Result<Self, ChangelogError> {
        let committed = &settings.client;
        let reader = PartitionReader::new(committed, topic, partition)?;
        let mut uncommitted_config = committed.clone();
        uncommitted_config.set("isolation.level", "read_uncommitted");
        let bootstrap = settings.bootstrap.clone();
        Ok(ChangelogReader {
            reader: reader.cancelled_by(cancel),
            uncommitted: std::cell::OnceCell::new(),
            uncommitted_config,
            topic: topic.to_string(),
            partition,
            cancel,
            bootstrap,
        })
    }

    /// The `read_uncommitted` reader, created on first use.
    fn uncommitted(&self) -> Result<&PartitionReader<'a>, ChangelogError> {
        if let Some(reader) = self.uncommitted.get() {
            return Ok(reader);
        }
        let reader = PartitionReader::new(&self.uncommitted_config, &self.topic, self.partition)?
            .cancelled_by(self.cancel);
        Ok(self.uncommitted.get_or_init(|| reader))
    }

    /// (low, high) watermarks as a `read_committed` reader sees them: high
    /// is the last stable offset, before any transaction still open.
    pub(crate) fn watermarks(&self) -> Result<(i64, i64), ChangelogError> {
        Ok(self.reader.watermarks()?)
    }

    /// The high watermark, as a `read_uncommitted` reader sees it: past
    /// any transaction still open.
    pub(crate) fn high_watermark(&self) -> Result<i64, ChangelogError> {
        Ok(self.uncommitted()?.watermarks()?.1)
    }

    /// Reads `[start, end)` `read_uncommitted`: the records of transactions
    /// still open (or aborted) too.
    pub(crate) fn scan_uncommitted(
        &self,
        start: i64,
        end: i64,
        visit: impl FnMut(&BorrowedMessage<'_>) -> Result<(), ChangelogError>,
    ) -> Result<(), ChangelogError> {
        self.uncommitted()?.scan(start, end, visit)
    }

    /// [`Self::watermarks`] once no transaction is open on the partition:
    /// the last stable offset has reached the high watermark. A restore
    /// that stopped at an open transaction would miss the transactions
    /// committed after it (seen on Apache Kafka 4.4 after a member paused
    /// and a broker restart: the partition was processed again from an
    /// older checkpoint). Waits up to [`OPEN_TRANSACTION_WAIT`], then fails
    /// naming the open transaction.
    pub(crate) fn settled_watermarks(&self) -> Result<(i64, i64), ChangelogError> {
        let started = Instant::now();
        let mut said = false;
        loop {
            let (low, stable) = self.watermarks()?;
            let (_, high) = self.uncommitted()?.watermarks()?;
            if stable >= high {
                if said {
                    info!(
                        partition = self.reader.partition(),
                        waited_s = started.elapsed().as_secs_f64(),
                        stable,
                        "the open transaction ended; restoring"
                    );
                }
                return Ok((low, stable));
            }
            if !said {
                warn!(
                    partition = self.reader.partition(),
                    last_stable_offset = stable,
                    high_watermark = high,
                    "a transaction is open on the changelog partition; waiting up to {} s for it to end before \
                     restoring (`{} repair --partitions {}` shows it; brokers {})",
                    OPEN_TRANSACTION_WAIT.as_secs(),
                    crate::program::name(),
                    self.reader.partition(),
                    self.bootstrap,
                );
                said = true;
            }
            if started.elapsed() >= OPEN_TRANSACTION_WAIT {
                let (topic, partition) = (self.reader.topic().to_string(), self.reader.partition());
                let bootstrap = self.bootstrap.clone();
                return Err(ChangelogError::OpenTransaction {
                    bootstrap,
                    topic,
                    partition,
                    stable,
                    high,
                    waited: started.elapsed(),
                });
            }
            if self.cancel.load(Ordering::Relaxed) {
                return Err(ChangelogError::Cancelled {
                    partition: self.reader.partition(),
                });
            }
            std::thread::sleep(OPEN_TRANSACTION_POLL);
        }
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
    pub(crate) fn last_checkpoint(
        &self,
        from: i64,
        high: i64,
    ) -> Result<Option<(i64, Checkpoint)>, ChangelogError> {
        Ok(self
            .last_marked_checkpoint(from, high)?
            .map(|found| (found.offset, found.checkpoint)))
    }

    /// [`Self::last_checkpoint`], with the repair's header it carries.
    pub(crate) fn last_marked_checkpoint(
        &self,
        from: i64,
        high: i64,
    ) -> Result<Option<FoundCheckpoint>, ChangelogError> {
        let key = changelog_checkpoint_key();
        let mut window = FIRST_WINDOW;
        let mut end = high;
        while end > from {
            let start = (end - window).max(from);
            let mut found = None;
            self.scan(start, end, |message| {
                if message.key() == Some(key.as_slice()) {
                    let bytes = message.payload().unwrap_or_default();
                    let checkpoint =
                        Checkpoint::decode(bytes).map_err(|text| self.corrupt(message, text))?;
                    found = Some(FoundCheckpoint {
                        offset: message.offset(),
                        checkpoint,
                        published_to: self.header(message, HEADER_PUBLISHED_TO)?,
                    });
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

    /// True when `checkpoint` covers a changelog record: one of its epoch,
    /// of a write-out it covers (`covers <= next_offset`). What a restore
    /// applies; the rest is a torn or obsolete write-out, or an older epoch.
    pub(crate) fn covered_by(
        &self,
        message: &BorrowedMessage<'_>,
        checkpoint: &Checkpoint,
    ) -> Result<bool, ChangelogError> {
        let epoch = self.header(message, HEADER_EPOCH)?.unwrap_or(0);
        let covers = self
            .header(message, HEADER_COVERS)?
            .ok_or_else(|| self.corrupt(message, format!("no {HEADER_COVERS} header")))?;
        Ok(epoch == i64::from(checkpoint.epoch) && covers <= checkpoint.next_offset)
    }

    /// A numeric header of a record (`None` when absent).
    pub(crate) fn header(
        &self,
        message: &BorrowedMessage<'_>,
        name: &str,
    ) -> Result<Option<i64>, ChangelogError> {
        let Some(value) = crate::kafka::header(message, name) else {
            return Ok(None);
        };
        std::str::from_utf8(value)
            .ok()
            .and_then(|text| text.parse().ok())
            .map(Some)
            .ok_or_else(|| self.corrupt(message, format!("{name} header is not a number")))
    }

    /// A changelog record that orderly cannot have written.
    pub(crate) fn corrupt(&self, message: &BorrowedMessage<'_>, text: String) -> ChangelogError {
        let (topic, partition) = (self.reader.topic().to_string(), self.reader.partition());
        ChangelogError::Corrupt {
            topic,
            partition,
            offset: message.offset(),
            message: text,
        }
    }
}
