//! Hanging transactions: a transaction left open on a partition whose
//! coordinator no longer tracks it (Kafka lost its marker: KAFKA-20734 on
//! 4.3 and 4.4 after a partition had no leader, or every replica of the
//! partition was lost). Nothing ends it by itself, and `read_committed`
//! readers stop at its first offset. What is found and aborted here is what
//! `kafka-transactions.sh find-hanging` and `abort` do (KIP-664), over
//! [`super::wire`].

use std::time::Duration;

use kafka_protocol::messages::{
    describe_producers_request::TopicRequest, write_txn_markers_request::WritableTxnMarker,
    write_txn_markers_request::WritableTxnMarkerTopic, ApiKey, DescribeProducersRequest,
    ListTransactionsRequest, ProducerId, TopicName, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;

use super::wire::{Connection, WireError};
use kafka_protocol::messages::{
    incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig},
    produce_request::{PartitionProduceData, TopicProduceData},
    IncrementalAlterConfigsRequest, InitProducerIdRequest, ProduceRequest, TransactionalId,
};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

/// How long one request to one broker may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// A transaction open on a partition, as its leader describes it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct OpenTransaction {
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    /// The coordinator epoch of the producer's last marker on the partition
    /// (-1: none yet); an abort marker must carry at least this.
    pub(crate) coordinator_epoch: i32,
    /// The transaction's first offset on the partition: where the last
    /// stable offset stands.
    pub(crate) start_offset: i64,
    /// When the producer last wrote to the partition (ms since the epoch).
    pub(crate) last_timestamp: i64,
}

/// A transaction as its coordinator lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Listed {
    pub(crate) transactional_id: String,
    pub(crate) producer_id: i64,
    /// `Ongoing`, `PrepareCommit`, `CompleteCommit`, `Empty`, ...
    pub(crate) state: String,
}

impl Listed {
    /// True while the coordinator itself still has the transaction open:
    /// it will end it (a marker is written, or it times out and aborts).
    pub(crate) fn in_flight(&self) -> bool {
        matches!(
            self.state.as_str(),
            "Ongoing" | "PrepareCommit" | "PrepareAbort" | "PrepareEpochFence"
        )
    }
}

/// The transactions open on `topic`'s `partition`, from its leader.
pub(crate) fn open_transactions(
    leader: &mut Connection,
    topic: &str,
    partition: i32,
) -> Result<Vec<OpenTransaction>, WireError> {
    let mut wanted = TopicRequest::default();
    wanted.name = TopicName(StrBytes::from_string(topic.to_string()));
    wanted.partition_indexes = vec![partition];
    let mut request = DescribeProducersRequest::default();
    request.topics = vec![wanted];
    let answer = leader.call(request)?;
    let mut open = Vec::new();
    for t in &answer.topics {
        for p in t
            .partitions
            .iter()
            .filter(|p| p.partition_index == partition)
        {
            leader.check(
                ApiKey::DescribeProducers,
                p.error_code,
                p.error_message.as_ref(),
            )?;
            open.extend(
                p.active_producers
                    .iter()
                    .filter(|s| s.current_txn_start_offset >= 0)
                    .map(|s| OpenTransaction {
                        producer_id: s.producer_id.0,
                        producer_epoch: s.producer_epoch as i16,
                        coordinator_epoch: s.coordinator_epoch,
                        start_offset: s.current_txn_start_offset,
                        last_timestamp: s.last_timestamp,
                    }),
            );
        }
    }
    open.sort_by_key(|t| t.start_offset);
    Ok(open)
}

/// The transactions of `producer_ids` that the coordinators on `brokers`
/// list (each broker answers for the coordinators it leads).
pub(crate) fn listed(
    brokers: &mut [Connection],
    producer_ids: &[i64],
) -> Result<Vec<Listed>, WireError> {
    let mut found = Vec::new();
    for broker in brokers.iter_mut() {
        let mut request = ListTransactionsRequest::default();
        request.producer_id_filters = producer_ids.iter().map(|id| ProducerId(*id)).collect();
        request.duration_filter = -1;
        let answer = broker.call(request)?;
        broker.check(ApiKey::ListTransactions, answer.error_code, None)?;
        found.extend(answer.transaction_states.iter().map(|s| Listed {
            transactional_id: s.transactional_id.0.to_string(),
            producer_id: s.producer_id.0,
            state: s.transaction_state.to_string(),
        }));
    }
    Ok(found)
}

/// Writes an abort marker for `open` to `topic`'s `partition` on its
/// leader, as `kafka-transactions.sh abort` does: the transaction's
/// records on that partition are dropped for `read_committed` readers and
/// its last stable offset moves on. Needs `ClusterAction` on the cluster
/// where ACLs are on.
pub(crate) fn abort(
    leader: &mut Connection,
    topic: &str,
    partition: i32,
    open: &OpenTransaction,
) -> Result<(), WireError> {
    let mut target = WritableTxnMarkerTopic::default();
    target.name = TopicName(StrBytes::from_string(topic.to_string()));
    target.partition_indexes = vec![partition];
    let mut marker = WritableTxnMarker::default();
    marker.producer_id = ProducerId(open.producer_id);
    marker.producer_epoch = open.producer_epoch;
    marker.transaction_result = false;
    marker.topics = vec![target];
    marker.coordinator_epoch = open.coordinator_epoch.max(0);
    let mut request = WriteTxnMarkersRequest::default();
    request.markers = vec![marker];
    let answer = leader.call(request)?;
    for m in &answer.markers {
        for t in &m.topics {
            for p in &t.partitions {
                leader.check(ApiKey::WriteTxnMarkers, p.error_code, None)?;
            }
        }
    }
    Ok(())
}

/// For tests: leaves a transaction open on `topic`'s `partition` that no
/// coordinator tracks, the signature of a lost marker, and returns its
/// first offset. Kafka verifies a transactional write with the coordinator
/// (`transaction.partition.verification.enable`); that check is turned off
/// on every broker for the one write and turned on again after, so the
/// coordinator never learns that the partition is in the transaction and
/// never writes its marker.
///
/// `also`: more partitions (on the same leader) the same transaction
/// writes to; `offsets`: (group, topic, partition, offset), a pending
/// offset commit of the same transaction for the group, as an
/// exactly_once write-out makes, left open on `__consumer_offsets` too.
#[doc(hidden)]
pub(crate) fn leave_hanging(
    brokers: &mut [Connection],
    leader: usize,
    targets: &[(&str, i32)],
    offsets: Option<(&str, &str, i32, i64)>,
) -> Result<i64, WireError> {
    // The check is cluster-wide: tests of one process take turns.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    verification(&mut brokers[0], false)?;
    // A dynamic default reaches the brokers through the metadata log: a
    // write refused meanwhile is tried again under a new transactional id.
    std::thread::sleep(Duration::from_secs(1));
    let mut written = write_unverified(
        brokers,
        leader,
        targets,
        offsets,
        &format!("orderly-test-hanging-{}", uuid::Uuid::new_v4()),
    );
    for _ in 0..20 {
        if written.is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
        written = write_unverified(
            brokers,
            leader,
            targets,
            offsets,
            &format!("orderly-test-hanging-{}", uuid::Uuid::new_v4()),
        );
    }
    let restored = verification(&mut brokers[0], true);
    let offset = written?;
    restored?;
    Ok(offset)
}

/// Turns the brokers' transaction verification off, or back to its default.
fn verification(broker: &mut Connection, on: bool) -> Result<(), WireError> {
    let mut config = AlterableConfig::default();
    config.name = StrBytes::from_static_str("transaction.partition.verification.enable");
    // 0: SET, 1: DELETE (back to the static default, on).
    config.config_operation = if on { 1 } else { 0 };
    config.value = (!on).then(|| StrBytes::from_static_str("false"));
    let mut resource = AlterConfigsResource::default();
    resource.resource_type = 4; // BROKER; the empty name: every broker
    resource.resource_name = StrBytes::from_static_str("");
    resource.configs = vec![config];
    let mut request = IncrementalAlterConfigsRequest::default();
    request.resources = vec![resource];
    let answer = broker.call(request)?;
    for r in &answer.responses {
        broker.check(
            ApiKey::IncrementalAlterConfigs,
            r.error_code,
            r.error_message.as_ref(),
        )?;
    }
    Ok(())
}

/// A producer the transactional id's coordinator initialised: the hanging
/// write and the pending offset commit are made under it.
struct TxnProducer {
    /// The transactional id.
    id: String,
    producer_id: i64,
    producer_epoch: i16,
}

/// One transactional write under a new transactional id `id`, which the
/// brokers do not verify while the check is off.
fn write_unverified(
    brokers: &mut [Connection],
    leader: usize,
    targets: &[(&str, i32)],
    offsets: Option<(&str, &str, i32, i64)>,
    id: &str,
) -> Result<i64, WireError> {
    let producer = init_producer(brokers, id)?;
    let broker = &mut brokers[leader];
    let producer = producer.ok_or_else(|| WireError::Protocol {
        broker: broker.broker().to_string(),
        message: format!("no broker initialised a producer for {id}"),
    })?;
    let batch = hanging_batch(broker, &producer)?;
    let mut request = ProduceRequest::default();
    request.transactional_id = Some(TransactionalId(StrBytes::from_string(producer.id.clone())));
    request.acks = -1;
    request.timeout_ms = 10_000;
    request.topic_data = produce_data(targets, &batch);
    // Version 11: before a produce adds its partition to the
    // transaction by itself (KIP-890's second part), and names topics.
    let answer = broker.call_at_most(request, 11)?;
    let mut offset = -1;
    let (first_topic, first_partition) = targets.first().copied().unwrap_or(("", -1));
    for t in &answer.responses {
        for p in &t.partition_responses {
            broker.check(ApiKey::Produce, p.error_code, p.error_message.as_ref())?;
            if t.name.0.as_str() == first_topic && p.index == first_partition {
                offset = p.base_offset;
            }
        }
    }
    if let Some(pending) = offsets {
        pending_offset_commit(brokers, &producer, pending)?;
    }
    Ok(offset)
}

/// A producer for the transactional id `id` (`None` when no broker made
/// one). Only the id's coordinator answers: each broker is asked until one
/// does (a coordinator still loading is asked again).
fn init_producer(brokers: &mut [Connection], id: &str) -> Result<Option<TxnProducer>, WireError> {
    for _ in 0..50 {
        for broker in brokers.iter_mut() {
            let mut init = InitProducerIdRequest::default();
            init.transactional_id = Some(TransactionalId(StrBytes::from_string(id.to_string())));
            init.transaction_timeout_ms = 60_000;
            init.producer_id = ProducerId(-1);
            init.producer_epoch = -1;
            let answer = broker.call(init)?;
            if answer.error_code == 0 {
                return Ok(Some(TxnProducer {
                    id: id.to_string(),
                    producer_id: answer.producer_id.0,
                    producer_epoch: answer.producer_epoch,
                }));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(None)
}

/// The one-record transactional batch of `producer` that is left hanging.
fn hanging_batch(broker: &Connection, producer: &TxnProducer) -> Result<bytes::Bytes, WireError> {
    let record = Record {
        transactional: true,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: producer.producer_id,
        producer_epoch: producer.producer_epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: 0,
        timestamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0),
        key: Some(bytes::Bytes::from_static(b"orderly-test-hanging")),
        value: Some(bytes::Bytes::from_static(b"a write whose marker was lost")),
        headers: Default::default(),
    };
    let mut batch = bytes::BytesMut::new();
    RecordBatchEncoder::encode(
        &mut batch,
        [&record],
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| WireError::Protocol {
        broker: broker.broker().to_string(),
        message: format!("encoding a record batch: {e}"),
    })?;
    Ok(batch.freeze())
}

/// The produce request's data: `batch` for each of `targets`, grouped by
/// topic.
fn produce_data(targets: &[(&str, i32)], batch: &bytes::Bytes) -> Vec<TopicProduceData> {
    let mut topic_data: Vec<TopicProduceData> = Vec::new();
    for (topic, partition) in targets {
        let mut data = PartitionProduceData::default();
        data.index = *partition;
        data.records = Some(batch.clone());
        match topic_data.iter_mut().find(|t| t.name.0.as_str() == *topic) {
            Some(t) => t.partition_data.push(data),
            None => {
                let mut target = TopicProduceData::default();
                target.name = TopicName(StrBytes::from_string(topic.to_string()));
                target.partition_data = vec![data];
                topic_data.push(target);
            }
        }
    }
    topic_data
}

/// A transactional offset commit of `producer` for (group, topic,
/// partition, offset), sent to the group's coordinator without
/// `AddOffsetsToTxn` (which the brokers do not ask for while verification
/// is off): pending on `__consumer_offsets` until a marker that never comes.
fn pending_offset_commit(
    brokers: &mut [Connection],
    producer: &TxnProducer,
    (group, topic, partition, committed): (&str, &str, i32, i64),
) -> Result<(), WireError> {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{GroupId, TxnOffsetCommitRequest};
    let mut said = String::new();
    for _ in 0..50 {
        for broker in brokers.iter_mut() {
            let mut p = TxnOffsetCommitRequestPartition::default();
            p.partition_index = partition;
            p.committed_offset = committed;
            p.committed_leader_epoch = -1;
            let mut t = TxnOffsetCommitRequestTopic::default();
            t.name = TopicName(StrBytes::from_string(topic.to_string()));
            t.partitions = vec![p];
            let mut request = TxnOffsetCommitRequest::default();
            request.transactional_id = TransactionalId(StrBytes::from_string(producer.id.clone()));
            request.group_id = GroupId(StrBytes::from_string(group.to_string()));
            request.producer_id = ProducerId(producer.producer_id);
            request.producer_epoch = producer.producer_epoch;
            request.generation_id = -1;
            request.member_id = StrBytes::from_static_str("");
            request.topics = vec![t];
            // Version 4: before the coordinator adds the offsets to the
            // transaction by itself (KIP-890's second part).
            let answer = broker.call_at_most(request, 4)?;
            let codes: Vec<i16> = answer
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
                .collect();
            if codes.iter().all(|c| *c == 0) {
                return Ok(());
            }
            said = format!("{}: error codes {codes:?}", broker.broker());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(WireError::Protocol {
        broker: said.clone(),
        message: format!("no broker took the pending offset commit for {group}: {said}"),
    })
}
