package io.orderly.peer;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Optional;
import java.util.Set;
import java.util.UUID;
import net.openhft.hashing.LongTupleHashFunction;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.kafka.common.serialization.Serializer;
import org.apache.kafka.streams.processor.StreamPartitioner;

/**
 * One OrderStatusChanged record (schemas/order_status_changed_v1.avsc) in the Confluent wire format with
 * the id registered under {@code <output>-value}, and the input partition it goes back to (orderly's
 * relay writes a status change to the input partition's number; the sink's partitioner does the same).
 */
public record StatusChange(int partition, byte[] bytes) {
    /** orderly's outbox::status_event_id: XXH3-128 (seeded) of the source event_id, written as a UUID. */
    private static final LongTupleHashFunction XXH3_128 = LongTupleHashFunction.xx128(0x6f72_6465_726c_7921L);

    public static String statusEventId(String sourceEventId) {
        long[] h = XXH3_128.hashBytes(sourceEventId.getBytes(StandardCharsets.UTF_8));
        return new UUID(h[1], h[0]).toString(); // Uuid::from_u128: the high 64 bits first
    }

    /** Writes OrderStatusChanged fields in schema order with Avro's binary encoder (one per task). */
    public static final class Encoder {
        private final int schemaId;
        private final String sourceTopic;
        private final ByteArrayOutputStream out = new ByteArrayOutputStream(160);
        private BinaryEncoder encoder;

        public Encoder(int schemaId, String sourceTopic) {
            this.schemaId = schemaId;
            this.sourceTopic = sourceTopic;
        }

        public byte[] encode(OrderEvent e, int fromStatus, int partition, long offset) {
            out.reset();
            out.write(0);
            out.write(schemaId >>> 24);
            out.write(schemaId >>> 16);
            out.write(schemaId >>> 8);
            out.write(schemaId);
            encoder = EncoderFactory.get().directBinaryEncoder(out, encoder);
            try {
                encoder.writeString(statusEventId(e.eventId()));
                encoder.writeString(e.orderId());
                encoder.writeLong(e.version());
                if (fromStatus < 0) {
                    encoder.writeIndex(0);
                } else {
                    encoder.writeIndex(1);
                    encoder.writeEnum(fromStatus);
                }
                encoder.writeEnum(e.eventType());
                encoder.writeLong(e.occurredAt());
                encoder.writeString(sourceTopic);
                encoder.writeInt(partition);
                encoder.writeLong(offset);
                encoder.flush();
            } catch (IOException ex) {
                throw new UncheckedIOException(ex);
            }
            return out.toByteArray();
        }
    }

    public static final class Ser implements Serializer<StatusChange> {
        @Override
        public byte[] serialize(String topic, StatusChange change) {
            return change == null ? null : change.bytes();
        }
    }

    public static final class SamePartition implements StreamPartitioner<String, StatusChange> {
        @Override
        public Optional<Set<Integer>> partitions(String topic, String key, StatusChange value, int numPartitions) {
            return Optional.of(Set.of(value.partition() % numPartitions));
        }
    }
}
