//! The consumer context: rebalance callbacks, run on the poll thread, handed
//! to whoever owns the partitions (the partition supervisor) through
//! [`Rebalance`].

use std::sync::Arc;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, TopicPartitionList};
use tracing::{info, warn};

/// What the rebalance callbacks ask of the owner of the partitions.
pub(crate) trait Rebalance: Send + Sync {
    /// Prepares newly assigned partitions (start offsets are set in `tpl`
    /// before they are assigned).
    fn on_assign(&self, tpl: &mut TopicPartitionList);
    /// Finishes, writes out, flushes and commits revoked partitions (not
    /// committed when `lost`), within the revoke deadline.
    fn on_revoke(&self, partitions: &[i32], lost: bool);
    /// An unrecoverable error: the processor stops.
    fn fatal(&self, error: crate::processor::error::ProcessError);
}

/// The rdkafka context of the processor's consumer.
pub(crate) struct OrderlyContext {
    pub owner: Arc<dyn Rebalance>,
}

impl ClientContext for OrderlyContext {
    /// Connection failures fold into the connection's lines (lost, still
    /// lost, back); other errors are logged once a minute at most.
    fn error(&self, error: KafkaError, reason: &str) {
        crate::observe::kafka_link::client_error(&error, reason);
    }
}

impl ConsumerContext for OrderlyContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                self.owner.on_assign(tpl);
                let result = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = result {
                    self.owner
                        .fatal(crate::processor::error::ProcessError::Process {
                            stage: crate::observe::errors::Stage::Poll,
                            message: format!("assign failed: {e}"),
                        });
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let lost = consumer.assignment_lost();
                let partitions: Vec<i32> = tpl.elements().iter().map(|e| e.partition()).collect();
                info!(?partitions, lost, "partitions revoked");
                self.owner.on_revoke(&partitions, lost);
                let result = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = result {
                    warn!(error = %e, "unassign failed");
                }
            }
            other => {
                warn!(error = ?other, "rebalance error");
                if !cooperative {
                    let _ = consumer.unassign();
                }
            }
        }
    }
}
