package io.orderly.peer;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;

/**
 * What the `orders` store keeps per order: the newest applied event's fields plus the inbox, as orderly's
 * event::OrderState. The inbox is orderly's event::Inbox: fewer than {@link #INBOX_CHUNK} newest entries
 * (version, XXH3-64 of the event id, applied-at wall-clock ms) inside the value, older ones in chunks of
 * {@link #INBOX_CHUNK} under their own key in the `inbox-chunks` store, referenced by (first version,
 * newest applied-at) and dropped once past the retention horizon.
 *
 * <p>Value format (big-endian, written by hand: no schema per value, one allocation): version, status
 * (byte), amount, currency, event_id, occurred_at, recent entries, chunk refs.
 */
public final class OrderState {
    public static final int INBOX_CHUNK = 32;

    public long version;
    public int status;
    public long amount;
    public String currency;
    public String eventId;
    public long occurredAt;
    /** Recent inbox entries, flattened: [version, idHash, appliedAt] * recentLen. */
    public long[] recent = new long[3 * 4];
    public int recentLen;
    /** Chunk refs, flattened: [firstVersion, lastAppliedAt] * chunkLen. */
    public long[] chunks = new long[0];
    public int chunkLen;

    /** The entry [idHash, appliedAt] recorded for `v` among the recent entries, or null; -1 sentinel when in a chunk. */
    public int recentIndex(long v) {
        int lo = 0, hi = recentLen - 1;
        while (lo <= hi) {
            int mid = (lo + hi) >>> 1;
            long at = recent[3 * mid];
            if (at < v) lo = mid + 1;
            else if (at > v) hi = mid - 1;
            else return mid;
        }
        return -1;
    }

    /** True when `v` would sit among the recent entries (event::Inbox::slot's Recent case). */
    public boolean inRecent(long v) {
        return recentLen > 0 && v >= recent[0];
    }

    /** The first version of the chunk holding `v`, or Long.MIN_VALUE when none (Absent). */
    public long chunkFor(long v) {
        int i = 0;
        while (i < chunkLen && chunks[2 * i] <= v) i++; // partition_point
        return i == 0 ? Long.MIN_VALUE : chunks[2 * (i - 1)];
    }

    /**
     * event::Inbox::push: appends an entry; returns the full chunk's entries (to be written under their own key)
     * or null; expired chunk first-versions are written into `expiredOut` (returns their count via expiredCount).
     */
    public long[] push(long v, long idHash, long appliedAt, long horizon, long[] expiredOut, int[] expiredCount) {
        if (3 * (recentLen + 1) > recent.length) recent = Arrays.copyOf(recent, Math.max(12, recent.length * 2));
        recent[3 * recentLen] = v;
        recent[3 * recentLen + 1] = idHash;
        recent[3 * recentLen + 2] = appliedAt;
        recentLen++;
        long[] spilled = null;
        if (recentLen >= INBOX_CHUNK) {
            spilled = Arrays.copyOf(recent, 3 * recentLen);
            if (2 * (chunkLen + 1) > chunks.length) chunks = Arrays.copyOf(chunks, Math.max(4, chunks.length * 2));
            chunks[2 * chunkLen] = spilled[0];
            chunks[2 * chunkLen + 1] = spilled[3 * (recentLen - 1) + 2];
            chunkLen++;
            recentLen = 0;
        }
        int expired = 0;
        while (expired < chunkLen && chunks[2 * expired + 1] < horizon) {
            expiredOut[expired] = chunks[2 * expired];
            expired++;
        }
        if (expired > 0) {
            System.arraycopy(chunks, 2 * expired, chunks, 0, 2 * (chunkLen - expired));
            chunkLen -= expired;
        }
        expiredCount[0] = expired;
        return spilled;
    }

    public static final Serde<OrderState> SERDE = Serdes.serdeFrom(new Ser(), new De());

    static final class Ser implements Serializer<OrderState> {
        @Override
        public byte[] serialize(String topic, OrderState s) {
            if (s == null) return null;
            byte[] cur = s.currency.getBytes(StandardCharsets.UTF_8);
            byte[] eid = s.eventId.getBytes(StandardCharsets.UTF_8);
            ByteBuffer b = ByteBuffer.allocate(8 + 1 + 8 + 4 + cur.length + 4 + eid.length + 8 + 4 + 24 * s.recentLen + 4 + 16 * s.chunkLen);
            b.putLong(s.version).put((byte) s.status).putLong(s.amount);
            b.putInt(cur.length).put(cur).putInt(eid.length).put(eid).putLong(s.occurredAt);
            b.putInt(s.recentLen);
            for (int i = 0; i < 3 * s.recentLen; i++) b.putLong(s.recent[i]);
            b.putInt(s.chunkLen);
            for (int i = 0; i < 2 * s.chunkLen; i++) b.putLong(s.chunks[i]);
            return b.array();
        }
    }

    static final class De implements Deserializer<OrderState> {
        @Override
        public OrderState deserialize(String topic, byte[] bytes) {
            if (bytes == null) return null;
            ByteBuffer b = ByteBuffer.wrap(bytes);
            OrderState s = new OrderState();
            s.version = b.getLong();
            s.status = b.get();
            s.amount = b.getLong();
            s.currency = string(b);
            s.eventId = string(b);
            s.occurredAt = b.getLong();
            s.recentLen = b.getInt();
            s.recent = new long[Math.max(12, 3 * (s.recentLen + 1))];
            for (int i = 0; i < 3 * s.recentLen; i++) s.recent[i] = b.getLong();
            s.chunkLen = b.getInt();
            s.chunks = new long[2 * s.chunkLen];
            for (int i = 0; i < 2 * s.chunkLen; i++) s.chunks[i] = b.getLong();
            return s;
        }

        private static String string(ByteBuffer b) {
            int n = b.getInt();
            String s = new String(b.array(), b.arrayOffset() + b.position(), n, StandardCharsets.UTF_8);
            b.position(b.position() + n);
            return s;
        }
    }

    /** An inbox chunk value: flattened [version, idHash, appliedAt] entries. */
    public static byte[] encodeChunk(long[] entries) {
        ByteBuffer b = ByteBuffer.allocate(8 * entries.length);
        for (long e : entries) b.putLong(e);
        return b.array();
    }

    /** The [idHash, appliedAt] of `v` in a chunk value, or null. */
    public static long[] findInChunk(byte[] chunk, long v) {
        if (chunk == null) return null;
        ByteBuffer b = ByteBuffer.wrap(chunk);
        for (int i = 0; i + 24 <= chunk.length; i += 24) {
            if (b.getLong(i) == v) return new long[] {b.getLong(i + 8), b.getLong(i + 16)};
        }
        return null;
    }

    /** The chunk store's key: order id, a NUL, the chunk's first version (8 bytes big-endian). */
    public static byte[] chunkKey(String orderId, long firstVersion) {
        byte[] id = orderId.getBytes(StandardCharsets.UTF_8);
        return ByteBuffer.allocate(id.length + 9).put(id).put((byte) 0).putLong(firstVersion).array();
    }
}
