package io.orderly.peer;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.ThreadMetadata;
import org.apache.kafka.streams.TaskMetadata;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The Kafka Streams peer of orderly (issue 20). See benches/kstreams/README.md.
 *
 * <pre>
 * java -jar orderly-kstreams-peer.jar --bootstrap H:P --registry URL --input T --output T --dlq T
 *      --application-id ID --guarantee at_least_once|exactly_once_v2 --state-dir D --expect-records N
 *      [--dump-state FILE] [--restore-only | --until-signal] [--threads 2] [--commit-interval-ms 1000]
 *      [--commit-when-idle-ms 100] [--cache-max-bytes 16777216] [--inbox-retention-ms 604800000]
 *      [--timeout-s 900] [--set STREAMS_PROPERTY=VALUE]...
 * </pre>
 *
 * Settings (the defaults below; each stated against orderly's config/default.toml):
 * <ul>
 *   <li>processing.guarantee: from --guarantee; at_least_once is orderly's default, exactly_once_v2 is
 *       orderly's "exactly_once" (one transaction per task per commit, input offsets included).</li>
 *   <li>commit.interval.ms = 1000 for both guarantees: orderly's [processing] commit_interval_ms (its
 *       write-out: state, checkpoint, offset commit; one transaction per write-out under exactly_once).
 *       Streams' defaults (30000 ALO, 100 EOS) would compare a different trade-off.</li>
 *   <li>statestore.cache.max.bytes = 16 MiB: orderly's cache_max_bytes; like orderly's dirty-order cache it
 *       folds an order's many changes within a commit interval into one RocksDB put and one changelog
 *       record.</li>
 *   <li>num.stream.threads = 2: the machine has 2 cores; the 4 input partitions give 4 tasks (orderly: one
 *       task per partition), 2 per thread.</li>
 *   <li>RocksDB: {@link BoundedRocksDb} (64 MiB shared block cache, memtables charged to it, 32 MiB).</li>
 *   <li>consumer max.poll.records = 1000: Streams' default, and orderly's batch_max_records;
 *       fetch.max.wait.ms = 100: orderly's fetch.wait.max.ms.</li>
 *   <li>commit when idle (--commit-when-idle-ms 100): orderly's caught-up write-out (DecideProcessor).</li>
 *   <li>producer linger.ms = 5 (orderly's changelog and transactional producers linger 5 ms; Streams' own
 *       default is 100), batch.size = 256 KiB (16 KiB default: small for 4 busy changelog partitions).</li>
 *   <li>changelog: on (Streams default), compacted topics Streams creates; replication.factor = -1 (the
 *       broker's default: 1 on the one-node bench broker).</li>
 * </ul>
 */
public final class Main {
    static final String ORDERS_STORE = "orders";
    static final String CHUNKS_STORE = "inbox-chunks";
    private static final ObjectMapper JSON = new ObjectMapper();
    /** --commit-when-idle-ms: a task that read everything commits this long after its last record. */
    static final long DEFAULT_IDLE_COMMIT_MS = 100;
    /** How long close() may take (the last commit, the producers' flush, leaving the group). */
    static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(30);
    /** The instance, for DecideProcessor's idle commit to read its consumer's records-lag metric. */
    static volatile KafkaStreams STREAMS;

    public static void main(String[] args) throws Exception {
        long startedMs = System.currentTimeMillis();
        Map<String, String> opt = parse(args);
        String bootstrap = need(opt, "bootstrap");
        String registryUrl = need(opt, "registry");
        String input = need(opt, "input");
        String output = need(opt, "output");
        String dlq = need(opt, "dlq");
        String appId = need(opt, "application-id");
        String guarantee = opt.getOrDefault("guarantee", "at_least_once");
        if (!guarantee.equals(StreamsConfig.AT_LEAST_ONCE) && !guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2)) {
            die("--guarantee must be at_least_once or exactly_once_v2, got " + guarantee);
        }
        String stateDir = need(opt, "state-dir");
        long expect = Long.parseLong(opt.getOrDefault("expect-records", "0"));
        int threads = Integer.parseInt(opt.getOrDefault("threads", "2"));
        long commitMs = Long.parseLong(opt.getOrDefault("commit-interval-ms", "1000"));
        long cacheBytes = Long.parseLong(opt.getOrDefault("cache-max-bytes", Long.toString(16L << 20)));
        long retentionMs = Long.parseLong(opt.getOrDefault("inbox-retention-ms", Long.toString(7L * 86_400_000)));
        long timeoutS = Long.parseLong(opt.getOrDefault("timeout-s", "900"));
        boolean restoreOnly = opt.containsKey("restore-only");
        boolean untilSignal = opt.containsKey("until-signal");
        long idleCommitMs = Long.parseLong(opt.getOrDefault("commit-when-idle-ms", Long.toString(DEFAULT_IDLE_COMMIT_MS)));
        String dump = opt.get("dump-state");

        Registry registry = new Registry(registryUrl);
        int statusSchemaId = registry.register(output + "-value", EventDeserializer.resource("/schemas/order_status_changed_v1.avsc"));

        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, cacheBytes);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, threads);
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        p.put(StreamsConfig.ROCKSDB_CONFIG_SETTER_CLASS_CONFIG, BoundedRocksDb.class);
        p.put(StreamsConfig.DESERIALIZATION_EXCEPTION_HANDLER_CLASS_CONFIG, DeadLetterHandler.class);
        p.put(StreamsConfig.ERRORS_DEAD_LETTER_QUEUE_TOPIC_NAME_CONFIG, dlq);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, -1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.MAX_POLL_RECORDS_CONFIG), 1000);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // orderly's fetch.wait.max.ms; the Java default of 500 leaves a task with an empty buffer waiting for
        // a fetch that has less than fetch.min.bytes to return (README.md, "Tuning, measured").
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG), 100);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 5);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.BATCH_SIZE_CONFIG), 256 * 1024);

        for (Map.Entry<String, String> kv : sets(args).entrySet()) p.put(kv.getKey(), kv.getValue());

        Topology topology = topology(registry, input, output, retentionMs, statusSchemaId, idleCommitMs);
        KafkaStreams streams = new KafkaStreams(topology, p);
        STREAMS = streams;
        AtomicReference<Throwable> failure = new AtomicReference<>();
        streams.setUncaughtExceptionHandler(e -> {
            failure.compareAndSet(null, e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Restores restores = new Restores();
        streams.setGlobalStateRestoreListener(restores);
        AtomicReference<KafkaStreams.State> state = new AtomicReference<>(KafkaStreams.State.CREATED);
        streams.setStateListener((now, before) -> state.set(now));
        long deadline = System.currentTimeMillis() + timeoutS * 1000;
        if (untilSignal && !restoreOnly) {
            System.exit(untilSignal(streams, guarantee, startedMs, dump, state, failure, restores, deadline));
        }
        Runtime.getRuntime().addShutdownHook(new Thread(() -> close(streams)));

        long streamsStartMs = System.currentTimeMillis();
        streams.start();
        try {
            if (restoreOnly) {
                while (state.get() != KafkaStreams.State.RUNNING || restores.active.get() > 0) {
                    checkAlive(state.get(), failure.get(), deadline);
                    Thread.sleep(20);
                }
                long runningMs = System.currentTimeMillis();
                Map<String, Object> out = new LinkedHashMap<>();
                out.put("mode", "restore");
                out.put("guarantee", guarantee);
                out.put("records_restored", restores.records.get());
                out.put("store_partitions", restores.partitions.size());
                out.put("restore_s", restores.lastEndMs.get() > 0 ? (restores.lastEndMs.get() - restores.firstStartMs.get()) / 1000.0 : 0.0);
                out.put("until_running_s", (runningMs - streamsStartMs) / 1000.0);
                double restoreS = Math.max(1e-9, (restores.lastEndMs.get() - restores.firstStartMs.get()) / 1000.0);
                out.put("records_per_s", restores.records.get() / restoreS);
                if (dump != null) dumpState(streams, dump);
                System.out.println(JSON.writeValueAsString(out));
            } else {
                long lastCommitMs = waitCovered(bootstrap, appId, input, expect, state, failure, deadline);
                if (dump != null) dumpState(streams, dump);
                Counters c = Counters.INSTANCE;
                long records = c.records();
                double elapsed = (lastCommitMs - startedMs) / 1000.0;
                double afterFirst = (lastCommitMs - c.firstRecordMs()) / 1000.0;
                Map<String, Object> out = counts(guarantee, startedMs, restores);
                out.put("last_commit_ms", lastCommitMs);
                out.put("elapsed_s", elapsed);
                out.put("events_per_s", records / Math.max(1e-9, elapsed));
                out.put("steady_events_per_s", records > 1 && afterFirst > 0 ? (records - 1) / afterFirst : records / Math.max(1e-9, elapsed));
                System.out.println(JSON.writeValueAsString(out));
            }
        } catch (Exception e) {
            System.err.println("orderly-kstreams-peer: " + e.getMessage());
            close(streams);
            System.exit(1);
        }
        close(streams);
        System.exit(0);
    }

    /**
     * --until-signal: process until SIGTERM (or SIGINT), polling nothing of its own; the bench watches the group's
     * committed offsets from outside. The signal is handled (sun.misc.Signal) rather than left to the JVM's
     * shutdown: a JVM ended by a signal exits 143 whatever its hooks do, and skips its delete-on-exit files
     * (RocksDB's extracted library). On the signal: dump the states (interactive queries need a running instance,
     * so before close), close Streams (leaving the group), print the counts; returns the exit status.
     */
    static int untilSignal(KafkaStreams streams, String guarantee, long startedMs, String dump, AtomicReference<KafkaStreams.State> state,
                           AtomicReference<Throwable> failure, Restores restores, long deadline) throws Exception {
        CountDownLatch signalled = new CountDownLatch(1);
        for (String name : List.of("TERM", "INT")) sun.misc.Signal.handle(new sun.misc.Signal(name), s -> signalled.countDown());
        streams.start();
        try {
            while (!signalled.await(100, TimeUnit.MILLISECONDS)) checkAlive(state.get(), failure.get(), deadline);
            long signalMs = System.currentTimeMillis();
            if (failure.get() != null) throw new IllegalStateException("stream thread failed: " + failure.get(), failure.get());
            if (dump != null) dumpState(streams, dump);
            boolean closed = close(streams);
            Map<String, Object> out = counts(guarantee, startedMs, restores);
            out.put("signal_ms", signalMs);
            out.put("closed_ms", System.currentTimeMillis());
            out.put("closed_cleanly", closed);
            System.out.println(JSON.writeValueAsString(out));
            return 0;
        } catch (Exception e) {
            System.err.println("orderly-kstreams-peer: " + e.getMessage());
            close(streams);
            return 1;
        }
    }

    /** Closes Streams, leaving the group (KIP-1153), so a new member does not wait for this one's session timeout. */
    static boolean close(KafkaStreams streams) {
        return streams.close(CloseOptions.groupMembershipOperation(CloseOptions.GroupMembershipOperation.LEAVE_GROUP).withTimeout(CLOSE_TIMEOUT));
    }

    /** The counts every processing report carries. */
    static Map<String, Object> counts(String guarantee, long startedMs, Restores restores) {
        Counters c = Counters.INSTANCE;
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("guarantee", guarantee);
        out.put("applied", c.applied.sum());
        out.put("duplicates", c.duplicates.sum());
        out.put("stale", c.stale.sum());
        out.put("dead_lettered", c.deadLettered.sum());
        out.put("records", c.records());
        out.put("status_changes", c.statusChanges.sum());
        out.put("restored_records", restores.records.get());
        out.put("idle_commits", c.idleCommits.sum());
        out.put("started_ms", startedMs);
        out.put("first_record_ms", c.firstRecordMs());
        return out;
    }

    static Topology topology(Registry registry, String input, String output, long retentionMs, int statusSchemaId, long idleCommitMs) {
        Topology t = new Topology();
        t.addSource("input", Serdes.ByteArray().deserializer(), new EventDeserializer(registry), input);
        t.addProcessor("decide", () -> new DecideProcessor(retentionMs, statusSchemaId, idleCommitMs), "input");
        t.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(ORDERS_STORE), Serdes.String(), OrderState.SERDE)
                .withCachingEnabled(), "decide");
        // Chunks are written once and read only for an old redelivery: no cache.
        t.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(CHUNKS_STORE), Serdes.Bytes(), Serdes.ByteArray()), "decide");
        t.addSink("output", output, Serdes.String().serializer(), new StatusChange.Ser(), new StatusChange.SamePartition(), "decide");
        return t;
    }

    /**
     * Waits until the group's committed offsets reach the input's end offsets on every partition (and, with
     * --expect-records, that many records were counted); returns when that was first seen (polled every 50 ms).
     */
    static long waitCovered(String bootstrap, String group, String input, long expect, AtomicReference<KafkaStreams.State> state,
                            AtomicReference<Throwable> failure, long deadline) throws Exception {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(ap)) {
            int partitions = admin.describeTopics(List.of(input)).allTopicNames().get().get(input).partitions().size();
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int i = 0; i < partitions; i++) latest.put(new TopicPartition(input, i), OffsetSpec.latest());
            while (true) {
                checkAlive(state.get(), failure.get(), deadline);
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> ends = admin.listOffsets(latest).all().get();
                Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                long now = System.currentTimeMillis();
                boolean covered = Counters.INSTANCE.records() >= expect;
                for (Map.Entry<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> end : ends.entrySet()) {
                    OffsetAndMetadata at = committed.get(end.getKey());
                    long endOffset = end.getValue().offset();
                    if (endOffset > 0 && (at == null || at.offset() < endOffset)) covered = false;
                }
                if (covered) return now;
                Thread.sleep(50);
            }
        }
    }

    /** The input partitions this instance's active tasks own (all of them: the bench runs one instance). */
    static List<Integer> localPartitions(KafkaStreams streams) {
        TreeMap<Integer, Boolean> partitions = new TreeMap<>();
        for (ThreadMetadata thread : streams.metadataForLocalThreads()) {
            for (TaskMetadata task : thread.activeTasks()) {
                for (TopicPartition tp : task.topicPartitions()) partitions.put(tp.partition(), true);
            }
        }
        return new ArrayList<>(partitions.keySet());
    }

    static void checkAlive(KafkaStreams.State state, Throwable failure, long deadline) {
        if (failure != null) throw new IllegalStateException("stream thread failed: " + failure, failure);
        if (state == KafkaStreams.State.ERROR || state == KafkaStreams.State.NOT_RUNNING || state == KafkaStreams.State.PENDING_ERROR) {
            throw new IllegalStateException("Kafka Streams is " + state);
        }
        if (System.currentTimeMillis() > deadline) throw new IllegalStateException("timed out (--timeout-s)");
    }

    /**
     * orderly `state dump`'s JSON lines (order_id, version, status, amount, currency, event_id, occurred_at,
     * partition), partition by partition, each in the store's key order. Written as they are read: 10M orders
     * held in a map to sort them did not fit the 512 MiB heap (GC overhead limit exceeded).
     */
    static void dumpState(KafkaStreams streams, String file) throws IOException {
        try (BufferedWriter w = Files.newBufferedWriter(Path.of(file), StandardCharsets.UTF_8)) {
            for (int partition : localPartitions(streams)) {
                ReadOnlyKeyValueStore<String, OrderState> store =
                        streams.store(StoreQueryParameters.fromNameAndType(ORDERS_STORE, QueryableStoreTypes.<String, OrderState>keyValueStore())
                                .withPartition(partition));
                try (KeyValueIterator<String, OrderState> it = store.all()) {
                    while (it.hasNext()) {
                        KeyValue<String, OrderState> kv = it.next();
                        OrderState s = kv.value;
                        Map<String, Object> line = new TreeMap<>();
                        line.put("order_id", kv.key);
                        line.put("version", s.version);
                        line.put("status", OrderEvent.SYMBOLS[s.status]);
                        line.put("amount", s.amount);
                        line.put("currency", s.currency);
                        line.put("event_id", s.eventId);
                        line.put("occurred_at", s.occurredAt);
                        line.put("partition", partition);
                        w.write(JSON.writeValueAsString(line));
                        w.newLine();
                    }
                }
            }
        }
    }

    /** Restore progress over every store partition. */
    static final class Restores implements StateRestoreListener {
        final AtomicLong records = new AtomicLong();
        final AtomicLong active = new AtomicLong();
        final AtomicLong firstStartMs = new AtomicLong();
        final AtomicLong lastEndMs = new AtomicLong();
        final Map<String, Boolean> partitions = new ConcurrentHashMap<>();

        @Override
        public void onRestoreStart(TopicPartition tp, String store, long startOffset, long endOffset) {
            active.incrementAndGet();
            firstStartMs.compareAndSet(0, System.currentTimeMillis());
            partitions.put(tp.toString(), true);
        }

        @Override
        public void onBatchRestored(TopicPartition tp, String store, long batchEndOffset, long numRestored) {
            records.addAndGet(numRestored);
        }

        @Override
        public void onRestoreEnd(TopicPartition tp, String store, long totalRestored) {
            lastEndMs.set(System.currentTimeMillis());
            active.decrementAndGet();
        }

        @Override
        public void onRestoreSuspended(TopicPartition tp, String store, long totalRestored) {
            active.decrementAndGet();
        }
    }

    static Map<String, String> parse(String[] args) {
        Map<String, String> opt = new HashMap<>();
        List<String> flags = List.of("restore-only", "until-signal");
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--")) die("unexpected argument " + args[i]);
            String name = args[i].substring(2);
            if (flags.contains(name)) {
                opt.put(name, "true");
            } else {
                if (i + 1 >= args.length) die("--" + name + " needs a value");
                opt.put(name, args[++i]);
            }
        }
        return opt;
    }

    /** Every --set KEY=VALUE: a StreamsConfig property (prefixed ones included), set last, so it overrides the defaults. */
    static Map<String, String> sets(String[] args) {
        Map<String, String> sets = new LinkedHashMap<>();
        for (int i = 0; i + 1 < args.length; i++) {
            if (!args[i].equals("--set")) continue;
            String kv = args[++i];
            int eq = kv.indexOf('=');
            if (eq <= 0) die("--set needs KEY=VALUE, got " + kv);
            sets.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        return sets;
    }

    static String need(Map<String, String> opt, String name) {
        String v = opt.get(name);
        if (v == null) die("--" + name + " is required");
        return v;
    }

    static void die(String message) {
        System.err.println("orderly-kstreams-peer: " + message);
        System.exit(2);
    }
}
