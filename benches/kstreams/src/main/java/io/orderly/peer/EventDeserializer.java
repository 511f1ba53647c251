package io.orderly.peer;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.AvroRuntimeException;
import org.apache.avro.Schema;
import org.apache.avro.SchemaParseException;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.common.serialization.Deserializer;

/**
 * The source node's value deserializer: Confluent wire format (magic byte 0, 4-byte big-endian schema id,
 * Avro binary), writer schema fetched from the registry by id and cached, resolved against the v2 reader
 * schema. The same rules and poison kinds as orderly's src/domains/orders/codec.rs (split_wire, decode_body, validate).
 *
 * <p>One instance serves every task of every stream thread (the topology shares the serde), so the writer
 * cache is concurrent and the Avro readers and decoders are per thread.
 *
 * <p>A poison record throws {@link PoisonException}, which {@link DeadLetterHandler} dead-letters (KIP-1034).
 * An unreachable registry is transient: retried here with backoff (the record is never skipped), and after
 * {@link #TRANSIENT_GIVE_UP_MS} a plain exception fails the stream thread.
 */
public final class EventDeserializer implements Deserializer<OrderEvent> {
    static final long TRANSIENT_GIVE_UP_MS = 120_000;

    private final Registry registry;
    private final Schema reader;
    /** Writer schemas by id (unknown ids are not cached, as in orderly). */
    private final Map<Integer, Schema> writers = new ConcurrentHashMap<>();
    private final ThreadLocal<Map<Integer, GenericDatumReader<GenericRecord>>> readers = ThreadLocal.withInitial(HashMap::new);
    private final ThreadLocal<BinaryDecoder> decoders = new ThreadLocal<>();
    private final ThreadLocal<GenericRecord> reuse = new ThreadLocal<>();

    public EventDeserializer(Registry registry) {
        this.registry = registry;
        this.reader = readerSchema();
    }

    public static Schema readerSchema() {
        return new Schema.Parser().parse(resource("/schemas/order_event_v2.avsc"));
    }

    static String resource(String path) {
        try (InputStream in = EventDeserializer.class.getResourceAsStream(path)) {
            if (in == null) throw new IllegalStateException(path + " is not in the jar");
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    @Override
    public OrderEvent deserialize(String topic, byte[] bytes) {
        if (bytes == null || bytes.length == 0) throw new PoisonException("empty_payload", "record has no value");
        if (bytes[0] != 0) {
            throw new PoisonException("bad_magic_byte", "magic byte is " + (bytes[0] & 0xff) + " (expected 0, the Confluent wire format)");
        }
        if (bytes.length < 5) throw new PoisonException("undecodable", bytes.length + " bytes is shorter than the 5-byte header");
        int id = ((bytes[1] & 0xff) << 24) | ((bytes[2] & 0xff) << 16) | ((bytes[3] & 0xff) << 8) | (bytes[4] & 0xff);
        GenericDatumReader<GenericRecord> datumReader = datumReader(id);
        BinaryDecoder decoder = DecoderFactory.get().binaryDecoder(bytes, 5, bytes.length - 5, decoders.get());
        decoders.set(decoder);
        GenericRecord record;
        try {
            record = datumReader.read(reuse.get(), decoder);
            if (!decoder.isEnd()) throw new PoisonException("undecodable", "trailing bytes after the record");
        } catch (IOException | AvroRuntimeException | IndexOutOfBoundsException | NegativeArraySizeException e) {
            throw new PoisonException("undecodable", String.valueOf(e.getMessage()));
        }
        reuse.set(record);
        return validate(record);
    }

    private GenericDatumReader<GenericRecord> datumReader(int id) {
        Map<Integer, GenericDatumReader<GenericRecord>> mine = readers.get();
        GenericDatumReader<GenericRecord> datumReader = mine.get(id);
        if (datumReader != null) return datumReader;
        Schema writer = writers.get(id);
        if (writer == null) {
            writer = fetch(id);
            writers.putIfAbsent(id, writer);
        }
        try {
            datumReader = new GenericDatumReader<>(writer, reader);
        } catch (AvroRuntimeException e) {
            throw new PoisonException("bad_schema", "schema id " + Integer.toUnsignedString(id) + " cannot be resolved: " + e.getMessage());
        }
        mine.put(id, datumReader);
        return datumReader;
    }

    private Schema fetch(int id) {
        long deadline = System.currentTimeMillis() + TRANSIENT_GIVE_UP_MS;
        long backoff = 100;
        while (true) {
            String text;
            try {
                text = registry.schemaById(id);
            } catch (Registry.UnknownId e) {
                throw new PoisonException("unknown_schema", e.getMessage());
            } catch (IOException e) {
                if (System.currentTimeMillis() > deadline) throw new IllegalStateException("schema registry unreachable: " + e.getMessage(), e);
                sleep(backoff);
                backoff = Math.min(backoff * 2, 5_000);
                continue;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted while fetching schema " + id, e);
            }
            try {
                return new Schema.Parser().parse(text);
            } catch (SchemaParseException e) {
                throw new PoisonException("bad_schema", "schema id " + Integer.toUnsignedString(id) + " does not parse: " + e.getMessage());
            }
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    /** orderly's codec::validate: non-empty ids, positive version. */
    private static OrderEvent validate(GenericRecord r) {
        String eventId = r.get(0).toString();
        String orderId = r.get(1).toString();
        long version = (Long) r.get(2);
        int type = ((GenericData.EnumSymbol) r.get(3)).getSchema().getEnumOrdinal(r.get(3).toString());
        long amount = (Long) r.get(4);
        long occurredAt = (Long) r.get(5);
        String currency = r.get(6).toString();
        if (orderId.isEmpty()) throw new PoisonException("invalid", "order_id is empty");
        if (eventId.isEmpty()) throw new PoisonException("invalid", "event_id is empty");
        if (version <= 0) throw new PoisonException("invalid", "version " + version + " is not positive");
        return new OrderEvent(eventId, orderId, version, type, amount, currency, occurredAt);
    }
}
