//! Which input partition a key belongs to, computed the way the producers'
//! client does it (`kafka.input_partitioner`), so `/state/{order_id}` can tell
//! "not here" from "no such order".

/// A key partitioner, as librdkafka (and the Java client) hash keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioner {
    /// librdkafka's `consistent` / `consistent_random` (its default): CRC-32
    /// of the key, modulo the partition count.
    Crc32,
    /// librdkafka's `murmur2` / `murmur2_random`, the Java client's default:
    /// murmur2 of the key, made positive, modulo the partition count.
    Murmur2,
}

/// A `kafka.input_partitioner` orderly cannot compute.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{name}` is not supported: use \"consistent_random\" (librdkafka's default) or \"murmur2_random\" \
     (the Java client's default)"
)]
pub struct UnknownPartitioner {
    pub name: String,
}

impl Partitioner {
    /// The partitioner librdkafka calls `name`.
    pub fn named(name: &str) -> Result<Self, UnknownPartitioner> {
        match name {
            "consistent" | "consistent_random" => Ok(Partitioner::Crc32),
            "murmur2" | "murmur2_random" => Ok(Partitioner::Murmur2),
            other => Err(UnknownPartitioner { name: other.into() }),
        }
    }

    /// [`Partitioner::named`] with the reason as text, for the
    /// configuration's validation messages.
    pub(crate) fn from_name(name: &str) -> Result<Self, String> {
        Self::named(name).map_err(|unknown| unknown.to_string())
    }

    /// The partition of a non-empty `key` among `partitions` (> 0).
    pub fn partition(self, key: &[u8], partitions: u32) -> i32 {
        debug_assert!(partitions > 0);
        let partitions = partitions.max(1);
        let hash = match self {
            Partitioner::Crc32 => crc32(key),
            Partitioner::Murmur2 => murmur2(key) & 0x7fff_ffff,
        };
        (hash % partitions) as i32
    }
}

/// CRC-32 (IEEE 802.3, reflected, as zlib's and librdkafka's `rd_crc32`).
fn crc32(data: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut table = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            table[i] = c;
            i += 1;
        }
        table
    };
    let mut crc = !0u32;
    for &byte in data {
        crc = TABLE[((crc ^ byte as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// Murmur2 as the Java client (`Utils.murmur2`) and librdkafka compute it.
fn murmur2(data: &[u8]) -> u32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h = SEED ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= (tail[2] as u32) << 16;
    }
    if tail.len() >= 2 {
        h ^= (tail[1] as u32) << 8;
    }
    if !tail.is_empty() {
        h ^= tail[0] as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::ClientConfig;

    use super::*;

    #[test]
    fn known_hashes() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        // Values from the Java client's UtilsTest.
        assert_eq!(murmur2(b"21") as i32, -973_932_308);
        assert_eq!(murmur2(b"foobar") as i32, -790_332_482);
        assert_eq!(murmur2(b"a-little-bit-long-string") as i32, -985_981_536);
        assert_eq!(
            murmur2(b"a-little-bit-longer-string") as i32,
            -1_486_304_829
        );
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") as i32,
            -58_897_971
        );
    }

    #[test]
    fn unknown_names_are_refused() {
        assert!(Partitioner::from_name("fnv1a").is_err());
        assert_eq!(
            Partitioner::from_name("murmur2_random"),
            Ok(Partitioner::Murmur2)
        );
    }

    /// librdkafka itself places keys where this module says.
    #[test]
    fn agrees_with_librdkafka() {
        let cluster = match MockCluster::new(1) {
            Ok(cluster) => cluster,
            Err(e) => panic!("mock cluster: {e}"),
        };
        let partitions = 7;
        cluster.create_topic("keys", partitions, 1).expect("topic");
        for (name, ours) in [
            ("consistent_random", Partitioner::Crc32),
            ("murmur2_random", Partitioner::Murmur2),
        ] {
            let producer: BaseProducer<PartitionRecorder> = ClientConfig::new()
                .set("bootstrap.servers", cluster.bootstrap_servers())
                .set("partitioner", name)
                .create_with_context(PartitionRecorder::default())
                .expect("producer");
            let keys: Vec<String> = (0..200).map(|i| format!("order-{i:08}")).collect();
            for key in &keys {
                let record = BaseRecord::<str, str, Box<String>>::with_opaque_to(
                    "keys",
                    Box::new(key.clone()),
                )
                .key(key.as_str())
                .payload("x");
                if let Err((error, _)) = producer.send(record) {
                    panic!("send: {error}");
                }
            }
            producer.flush(Duration::from_secs(10)).expect("flush");
            let placed = producer.context().placed.lock().expect("lock").clone();
            assert_eq!(placed.len(), keys.len());
            for (key, partition) in placed {
                assert_eq!(
                    ours.partition(key.as_bytes(), partitions as u32),
                    partition,
                    "{name}: key {key}"
                );
            }
        }
    }

    #[derive(Default)]
    struct PartitionRecorder {
        placed: std::sync::Mutex<Vec<(String, i32)>>,
    }

    impl rdkafka::ClientContext for PartitionRecorder {}

    impl rdkafka::producer::ProducerContext for PartitionRecorder {
        type DeliveryOpaque = Box<String>;
        fn delivery(
            &self,
            result: &rdkafka::message::DeliveryResult<'_>,
            key: Self::DeliveryOpaque,
        ) {
            if let Ok(message) = result {
                if let Ok(mut placed) = self.placed.lock() {
                    placed.push((*key, rdkafka::Message::partition(message)));
                }
            }
        }
    }
}
