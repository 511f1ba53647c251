//! The processor: a consumer-group member driven from a dedicated poll
//! thread, one ordered task per assigned partition, and a flusher that makes
//! many partitions' batches durable with one sync before committing offsets.
//!
//! ```text
//! poll thread (BaseConsumer::poll: rebalance callbacks, errors)
//! partition queue (split off the consumer per assigned partition)
//!   -> partition task (batch, decode, dead-letter, decide, one atomic
//!      sled batch)
//!   -> flusher (one flush for many batches, then one offset commit)
//! ```
//!
//! Here: the modules and what the crate names through this one. The
//! wiring is in `run.rs` ([`Processor`]) and `poll.rs` (the poll thread);
//! what the parts share is in files of their own (`error.rs`,
//! `counters.rs`, `parts.rs`), which the parts import directly.

pub(crate) mod changelog;
pub(crate) mod outbox;

mod context;
mod counters;
pub(crate) mod dlq;
mod error;
mod fence;
mod flush_msg;
pub(crate) mod flusher;
mod output;
mod owners;
mod partition;
mod parts;
mod poll;
mod progress;
mod report;
mod run;
mod standby;
mod supervisor;
mod transaction;

/// A partition task without a broker, for the tests that need an entity
/// (`src/processor/partition/tests.rs`).
#[cfg(test)]
pub(crate) use partition::{source::MemorySource, testing::Harness};

pub(crate) use error::ProcessError;
pub(crate) use partition::strategy::Strategy;
pub use report::RunReport;
pub use run::Processor;

pub(crate) use crate::kafka::producer_config;
