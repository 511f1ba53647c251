//! Why a relay round failed. Every failure is waited out and the round
//! tried again (the input goes on; the backlog grows), so each is counted
//! as a retryable failure of the relay stage.

use rdkafka::error::KafkaError;

use crate::engine::codec::EncodeError;
use crate::kafka::partition_reader::ReadError;
use crate::observe::errors::{Failure, Kind, Stage};

/// Each message names the output partition (or the record) and states its
/// cause once, in a field named `cause`.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RelayError {
    #[error("cannot encode the status change of source offset {source_offset} (input partition {partition}): {cause}")]
    Encode {
        partition: i32,
        source_offset: i64,
        cause: EncodeError,
    },
    #[error("cannot hand the status change of source offset {source_offset} to the producer for {topic} partition {partition}: {cause}")]
    Send {
        topic: String,
        partition: i32,
        source_offset: i64,
        cause: KafkaError,
    },
    #[error("{topic} partition {partition} did not take the status change of source offset {source_offset}: {cause}")]
    Delivery {
        topic: String,
        partition: i32,
        source_offset: i64,
        cause: KafkaError,
    },
    #[error("the producer dropped the delivery of source offset {source_offset} to {topic} partition {partition}")]
    DeliveryDropped {
        topic: String,
        partition: i32,
        source_offset: i64,
    },
    /// Reading the output partition back (what was published before).
    #[error(transparent)]
    ReadBack(#[from] ReadError),
    #[error("the read-back of {topic} partition {partition} failed on its thread: {cause}")]
    ReadBackTask {
        topic: String,
        partition: i32,
        cause: tokio::task::JoinError,
    },
}

impl Failure for RelayError {
    fn stage(&self) -> Stage {
        Stage::Relay
    }

    fn kind(&self) -> Kind {
        Kind::Retryable
    }
}
