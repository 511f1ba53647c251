package io.orderly.peer;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import net.openhft.hashing.LongHashFunction;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueStore;

/**
 * orderly's decide + apply (src/engine/decide.rs, src/engine/partition_state.rs::apply_sourced) per record, against the
 * task's `orders` and `inbox-chunks` stores:
 * <ul>
 *   <li>no state, or version greater than the stored one: Apply (the event's carried state, its id appended
 *       to the inbox with applied-at = now);</li>
 *   <li>otherwise Duplicate when the inbox entry of the event's version records this event id and was
 *       applied at or after the horizon (now - store.inbox_retention, wall clock, as orderly); else Stale.</li>
 * </ul>
 * An applied event whose type differs from the order's previous status (the first event included) forwards
 * an OrderStatusChanged to the output sink.
 *
 * <p>Commit when idle (--commit-when-idle-ms, orderly's caught-up write-out): a wall-clock punctuator every
 * {@code idleCommitMs} requests a commit ({@link ProcessorContext#commit()}) once the task has processed records
 * since its last request, none in the last {@code idleCommitMs}, and its consumer's {@code records-lag} for its
 * partition (the high watermark less the position of the last records handed to Streams) is 0: a task that has
 * read its input commits then, instead of at the next commit.interval.ms. Without the lag condition a task that
 * waits 100 ms for a fetch mid-run would commit too (60 extra commits in a 1M-event run at 2 threads).
 */
public final class DecideProcessor implements Processor<byte[], OrderEvent, String, StatusChange> {
    private static final LongHashFunction XXH3_64 = LongHashFunction.xx3();

    private final long retentionMs;
    private final int statusSchemaId;
    private final Counters counters = Counters.INSTANCE;
    private ProcessorContext<String, StatusChange> context;
    private KeyValueStore<String, OrderState> orders;
    private KeyValueStore<Bytes, byte[]> chunks;
    private StatusChange.Encoder encoder;
    private final int[] expiredCount = new int[1];
    private final long idleCommitMs;
    /** Wall clock of the last record processed; whether one was processed since the last commit request. */
    private long lastRecordMs;
    private boolean uncommitted;
    /** This task's partition's records-lag metric of its thread's consumer, once found. */
    private Metric lag;

    public DecideProcessor(long retentionMs, int statusSchemaId, long idleCommitMs) {
        this.retentionMs = retentionMs;
        this.statusSchemaId = statusSchemaId;
        this.idleCommitMs = idleCommitMs;
    }

    @Override
    public void init(ProcessorContext<String, StatusChange> context) {
        this.context = context;
        this.orders = context.getStateStore(Main.ORDERS_STORE);
        this.chunks = context.getStateStore(Main.CHUNKS_STORE);
        if (idleCommitMs > 0) context.schedule(Duration.ofMillis(idleCommitMs), PunctuationType.WALL_CLOCK_TIME, this::commitWhenIdle);
    }

    private void commitWhenIdle(long now) {
        if (uncommitted && now - lastRecordMs >= idleCommitMs && caughtUp()) {
            context.commit();
            uncommitted = false;
            counters.idleCommits.increment();
        }
    }

    /** Whether the last records the consumer handed over for this task's partition reached its high watermark. */
    private boolean caughtUp() {
        if (lag == null) {
            var streams = Main.STREAMS;
            if (streams == null) return true;
            String client = Thread.currentThread().getName() + "-consumer";
            String partition = Integer.toString(context.taskId().partition());
            for (Metric m : streams.metrics().values()) {
                MetricName n = m.metricName();
                if (n.name().equals("records-lag") && n.group().equals("consumer-fetch-manager-metrics")
                        && client.equals(n.tags().get("client-id")) && partition.equals(n.tags().get("partition"))) {
                    lag = m;
                    break;
                }
            }
            if (lag == null) return true; // not recorded yet: the time alone decides
        }
        Object v = lag.metricValue();
        return !(v instanceof Double d) || d.isNaN() || d <= 0;
    }

    @Override
    public void process(Record<byte[], OrderEvent> record) {
        counters.seen();
        OrderEvent e = record.value();
        long now = System.currentTimeMillis();
        lastRecordMs = now;
        uncommitted = true;
        long horizon = now - retentionMs;
        long idHash = XXH3_64.hashBytes(e.eventId().getBytes(StandardCharsets.UTF_8));
        OrderState s = orders.get(e.orderId());
        if (s != null && e.version() <= s.version) {
            long entryHash = 0, entryAt = Long.MIN_VALUE;
            boolean found = false;
            if (s.inRecent(e.version())) {
                int i = s.recentIndex(e.version());
                if (i >= 0) {
                    found = true;
                    entryHash = s.recent[3 * i + 1];
                    entryAt = s.recent[3 * i + 2];
                }
            } else {
                long first = s.chunkFor(e.version());
                if (first != Long.MIN_VALUE) {
                    long[] entry = OrderState.findInChunk(chunks.get(Bytes.wrap(OrderState.chunkKey(e.orderId(), first))), e.version());
                    if (entry != null) {
                        found = true;
                        entryHash = entry[0];
                        entryAt = entry[1];
                    }
                }
            }
            if (found && entryHash == idHash && entryAt >= horizon) counters.duplicates.increment();
            else counters.stale.increment();
            return;
        }
        int from = -1;
        if (s == null) {
            s = new OrderState();
        } else {
            from = s.status;
        }
        long[] expired = new long[s.chunkLen + 1];
        long[] spilled = s.push(e.version(), idHash, now, horizon, expired, expiredCount);
        s.version = e.version();
        s.status = e.eventType();
        s.amount = e.amount();
        s.currency = e.currency();
        s.eventId = e.eventId();
        s.occurredAt = e.occurredAt();
        orders.put(e.orderId(), s);
        if (spilled != null) chunks.put(Bytes.wrap(OrderState.chunkKey(e.orderId(), spilled[0])), OrderState.encodeChunk(spilled));
        for (int i = 0; i < expiredCount[0]; i++) chunks.delete(Bytes.wrap(OrderState.chunkKey(e.orderId(), expired[i])));
        counters.applied.increment();
        if (from != e.eventType()) {
            RecordMetadata meta = context.recordMetadata().orElseThrow();
            if (encoder == null) encoder = new StatusChange.Encoder(statusSchemaId, meta.topic());
            byte[] bytes = encoder.encode(e, from, meta.partition(), meta.offset());
            RecordHeaders headers = new RecordHeaders();
            headers.add("orderly.source.topic", meta.topic().getBytes(StandardCharsets.UTF_8));
            headers.add("orderly.source.partition", Integer.toString(meta.partition()).getBytes(StandardCharsets.UTF_8));
            headers.add("orderly.source.offset", Long.toString(meta.offset()).getBytes(StandardCharsets.UTF_8));
            headers.add("orderly.epoch", "0".getBytes(StandardCharsets.UTF_8));
            context.forward(new Record<>(e.orderId(), new StatusChange(meta.partition(), bytes), record.timestamp(), headers));
            counters.statusChanges.increment();
        }
    }
}
