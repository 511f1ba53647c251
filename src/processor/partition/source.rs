//! Where a partition task reads its records from: a [`RecordSource`]. In
//! production the partition's own librdkafka queue ([`PartitionInput`]),
//! whose records the batch code decides in place (generic over
//! [`rdkafka::Message`], so no copy); in tests an in-memory source of
//! `OwnedMessage`s ([`MemorySource`]), so the processing and draining phases
//! run without a broker.

use std::ffi::CString;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use tokio::sync::Notify;

use crate::processor::context::OrderlyContext;

/// A partition's records, as the task takes them.
pub(crate) trait RecordSource: Send + Sync {
    /// One record, borrowed from the source for as long as the batch holds it.
    type Record<'s>: Message + Send + Sync
    where
        Self: 's;

    /// The next record already fetched, without waiting: `None` when there
    /// is nothing yet; an error is the client's (logged, the task goes on).
    fn poll(&self) -> Option<Result<Self::Record<'_>, KafkaError>>;

    /// Signalled when the source becomes non-empty (a wake-up, not a count).
    fn ready(&self) -> &Notify;

    /// The partition's end as last fetched (the offset after its last
    /// record), without asking the broker: `None` when not known.
    fn fetched_end(&self) -> Option<i64>;
}

/// The consumer side of one partition: its own librdkafka queue (split off
/// the consumer's main queue, so records reach the task without a copy or a
/// hand-off through the poll thread), the signal that it became non-empty,
/// and what it takes to read the partition's cached high watermark.
pub(crate) struct PartitionInput {
    queue: PartitionQueue<OrderlyContext>,
    ready: Arc<Notify>,
    consumer: Weak<BaseConsumer<OrderlyContext>>,
    /// The input topic, for librdkafka (`None`: a name it cannot take, so
    /// the end is never known: write-outs keep to the commit interval).
    topic: Option<CString>,
    partition: i32,
}

impl PartitionInput {
    pub(crate) fn new(
        queue: PartitionQueue<OrderlyContext>,
        ready: Arc<Notify>,
        consumer: Weak<BaseConsumer<OrderlyContext>>,
        topic: &str,
        partition: i32,
    ) -> Self {
        PartitionInput {
            queue,
            ready,
            consumer,
            topic: CString::new(topic).ok(),
            partition,
        }
    }
}

impl RecordSource for PartitionInput {
    type Record<'s> = BorrowedMessage<'s>;

    fn poll(&self) -> Option<Result<BorrowedMessage<'_>, KafkaError>> {
        self.queue.poll(Duration::ZERO)
    }

    fn ready(&self) -> &Notify {
        &self.ready
    }

    fn fetched_end(&self) -> Option<i64> {
        let (Some(topic), Some(consumer)) = (&self.topic, self.consumer.upgrade()) else {
            return None;
        };
        crate::kafka::cached_high_watermark(&consumer, topic, self.partition)
    }
}

#[cfg(test)]
pub(crate) use memory::MemorySource;

#[cfg(test)]
mod memory {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicI64, Ordering};
    use std::sync::Mutex;

    use rdkafka::error::KafkaError;
    use rdkafka::message::OwnedMessage;
    use tokio::sync::Notify;

    use super::RecordSource;

    /// Records a test pushes, taken in order; empty is "nothing yet".
    #[derive(Default)]
    pub(crate) struct MemorySource {
        records: Mutex<VecDeque<Result<OwnedMessage, KafkaError>>>,
        ready: Notify,
        /// The end as last fetched; negative: not known.
        end: AtomicI64,
    }

    impl MemorySource {
        pub(crate) fn new() -> Self {
            MemorySource {
                end: AtomicI64::new(-1),
                ..Default::default()
            }
        }

        /// Appends a record (or a client error) and wakes the task.
        pub(crate) fn push(&self, record: Result<OwnedMessage, KafkaError>) {
            if let Ok(mut records) = self.records.lock() {
                records.push_back(record);
            }
            self.ready.notify_one();
        }

        /// Sets the partition's end as last fetched.
        pub(crate) fn set_end(&self, end: i64) {
            self.end.store(end, Ordering::Relaxed);
        }

        /// Records not taken yet.
        pub(crate) fn left(&self) -> usize {
            self.records.lock().map(|r| r.len()).unwrap_or(0)
        }
    }

    impl RecordSource for MemorySource {
        type Record<'s> = OwnedMessage;

        fn poll(&self) -> Option<Result<OwnedMessage, KafkaError>> {
            self.records.lock().ok()?.pop_front()
        }

        fn ready(&self) -> &Notify {
            &self.ready
        }

        fn fetched_end(&self) -> Option<i64> {
            Some(self.end.load(Ordering::Relaxed)).filter(|end| *end >= 0)
        }
    }
}
