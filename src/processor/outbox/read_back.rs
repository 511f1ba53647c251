//! Reading an output partition back: what its input partition published
//! there before (by an earlier owner or run; the relay, or write-outs), and
//! after a relay's failed round what landed all the same, so no order's
//! versions go backwards on the output topic.

use std::collections::HashSet;

use crate::kafka::headers::{HEADER_EPOCH, HEADER_OFFSET, HEADER_PARTITION, HEADER_TOPIC};
use crate::kafka::partition_reader::{PartitionReader, ReadError};
use crate::kafka::ReaderSettings;

/// How far back from the output partition's end the relay looks for what
/// it published last, at most.
const LOOK_BACK: i64 = 100_000;

/// The highest (epoch, source offset) found and the set above `down_to`.
pub(crate) type ReadBack = (Option<(u32, i64)>, HashSet<(u32, i64)>);

/// Reads output partition `partition` of `topic` back from its end, in
/// growing windows, for records of input partition `partition` of `source`:
/// the highest (epoch, source offset) found, and every one above `down_to`.
/// Stops at the first window with one at or below `down_to` (without it:
/// with any), or [`LOOK_BACK`] records from the end.
pub(crate) fn read_back(
    reader: &ReaderSettings,
    topic: &str,
    source: &str,
    partition: i32,
    down_to: Option<(u32, i64)>,
) -> Result<ReadBack, ReadError> {
    let reader = PartitionReader::new(&reader.client, topic, partition)?;
    let (low, high) = reader.watermarks()?;
    let partition_text = partition.to_string();
    let (mut last, mut above) = (None, HashSet::new());
    let mut window = 1_000i64;
    let mut end = high;
    while end > low && high - end < LOOK_BACK {
        let start = (end - window).max(low);
        let mut reached = false;
        reader.scan(start, end, |message| {
            let text = |name: &str| crate::kafka::header_str(message, name);
            if text(HEADER_TOPIC) != Some(source)
                || text(HEADER_PARTITION) != Some(partition_text.as_str())
            {
                return Ok(());
            }
            let epoch = text(HEADER_EPOCH).and_then(|t| t.parse().ok()).unwrap_or(0);
            let Some(offset) = text(HEADER_OFFSET).and_then(|t| t.parse::<i64>().ok()) else {
                return Ok(());
            };
            let key = (epoch, offset);
            last = last.max(Some(key));
            match down_to {
                Some(floor) if key <= floor => reached = true,
                Some(_) => {
                    above.insert(key);
                }
                None => reached = true,
            }
            Ok::<_, ReadError>(())
        })?;
        if reached {
            break;
        }
        end = start;
        window = window.saturating_mul(4);
    }
    Ok((last, above))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};

    use super::*;

    fn publish(producer: &BaseProducer, source: &str, partition: &str, epoch: u32, offset: i64) {
        let (epoch, offset) = (epoch.to_string(), offset.to_string());
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: HEADER_TOPIC,
                value: Some(source),
            })
            .insert(Header {
                key: HEADER_PARTITION,
                value: Some(partition),
            })
            .insert(Header {
                key: HEADER_OFFSET,
                value: Some(offset.as_str()),
            })
            .insert(Header {
                key: HEADER_EPOCH,
                value: Some(epoch.as_str()),
            });
        let record = BaseRecord::<str, str>::to("out")
            .partition(0)
            .key("order")
            .payload("x")
            .headers(headers);
        if let Err((error, _)) = producer.send(record) {
            panic!("send: {error}");
        }
    }

    /// What a relay finds on its output partition after a failed round:
    /// only its own input partition's records, the ones past the floor
    /// (gaps included), and the highest.
    #[test]
    fn reads_back_what_landed_past_the_floor() {
        let cluster: MockCluster<'static, DefaultProducerContext> =
            MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("out", 1, 1).expect("topic");
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .create()
            .expect("producer");
        for offset in 0..10 {
            publish(&producer, "in", "0", 0, offset);
            publish(&producer, "in", "1", 0, 100 + offset); // another input partition
            publish(&producer, "other", "0", 0, 200 + offset); // another input topic
        }
        for offset in [10, 12] {
            publish(&producer, "in", "0", 0, offset); // 11 never landed
        }
        producer.flush(Duration::from_secs(10)).expect("flush");
        let mut config = crate::config::Config::defaults().expect("config");
        config.kafka.bootstrap_servers = cluster.bootstrap_servers();
        let reader = ReaderSettings::of(&config);
        let read = |down_to| read_back(&reader, "out", "in", 0, down_to).expect("read back");

        assert_eq!(
            read(None),
            (Some((0, 12)), HashSet::new()),
            "the highest, without a floor"
        );
        let (last, above) = read(Some((0, 4)));
        assert_eq!(last, Some((0, 12)));
        assert_eq!(
            above,
            [5, 6, 7, 8, 9, 10, 12]
                .into_iter()
                .map(|o| (0, o))
                .collect::<HashSet<_>>()
        );
        assert_eq!(
            read(Some((0, 12))).1,
            HashSet::new(),
            "nothing above the floor"
        );
        assert_eq!(
            read(Some((1, 0))).1,
            HashSet::new(),
            "a later epoch's floor is above every record of epoch 0"
        );
    }
}
