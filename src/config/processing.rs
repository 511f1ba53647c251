//! `[processing]`: the guarantee, batches, write-outs, the dead-letter
//! breaker's limits, standbys.

use serde::{Deserialize, Serialize};

/// What orderly promises about the records it writes to Kafka
/// (`processing.guarantee`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Guarantee {
    /// Dead letters are produced when found and input offsets committed
    /// after the store flush: after a crash a dead letter or a relayed
    /// status change can appear twice on its topic (state and counters are
    /// exact either way).
    AtLeastOnce,
    /// One Kafka transaction per partition write-out.
    ExactlyOnce,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessingConfig {
    /// "at_least_once" or "exactly_once" (Kafka transactions).
    pub guarantee: Guarantee,
    pub batch_max_records: usize,
    pub batch_max_wait_ms: u64,
    /// How often a partition writes its dirty orders and checkpoint to the
    /// store (one atomic batch) and reports them for the group flush.
    pub commit_interval_ms: u64,
    /// How soon a partition that has read everything its input holds writes
    /// out, instead of waiting for the commit interval (0: off; at most the
    /// commit interval takes effect).
    pub caught_up_write_ms: u64,
    /// Dirty bytes held in memory across all partitions' order caches before
    /// a partition writes early; also bounds the clean entries kept cached.
    pub cache_max_bytes: u64,
    /// Partitions' write-outs in flight at once in this process, each from
    /// encoding its changes to its store batch (0: no limit; see
    /// [`ProcessingConfig::write_out_turns`]).
    pub concurrent_write_outs: usize,
    pub shutdown_timeout_ms: u64,
    /// The dead-letter breaker (`crate::engine::breaker`): dead letters in a row
    /// that stop a partition (0: off).
    pub dead_letter_max_consecutive: u64,
    /// ...or the share of dead letters in a window of records (0: off).
    pub dead_letter_max_ratio: f64,
    pub(crate) dead_letter_ratio_window: u64,
    /// Warm copies each partition has on other members, kept from the
    /// changelog (`crate::processor::standby`); 0: none.
    pub standby_replicas: u32,
}

impl ProcessingConfig {
    /// The write-out turns `concurrent_write_outs` gives this process
    /// (`None`: no limit, every partition's write-out at once).
    pub fn write_out_turns(&self) -> Option<usize> {
        (self.concurrent_write_outs > 0).then_some(self.concurrent_write_outs)
    }
}
