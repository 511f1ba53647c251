package io.orderly.peer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

/**
 * The tuning harness (benches/kstreams/README.md, "Tuning, measured"): runs one peer process and measures it from
 * outside the way the pipeline bench's side by side does (benches/pipeline/phases/side_by_side.rs), so a setting's
 * A/B needs no cargo build.
 *
 * <pre>
 * java -cp orderly-kstreams-peer.jar io.orderly.peer.Watch --bootstrap H:P --group APP_ID --topic T
 *      [--expect FILE] [--dir D] -- benches/kstreams/peer run ... --until-signal
 * </pre>
 *
 * Polls the group's committed offsets every 50 ms; notes the first polls that see 25% and 75% of the input's
 * offsets committed and the one that sees them cover the end offsets, sampling the process's CPU (utime + stime)
 * at each and its VmHWM at the cover; then sends SIGTERM and reads the peer's JSON line. Prints one JSON line:
 * the rates over the whole run (spawn to cover), from the peer's first record, and in the middle (25% to 75%),
 * CPU seconds at the cover and in the middle, peak RSS, and whether the counts equal --expect's (orderly produce
 * --expect-out).
 */
public final class Watch {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        Map<String, String> opt = new HashMap<>();
        List<String> command = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--")) {
                for (int j = i + 1; j < args.length; j++) command.add(args[j]);
                break;
            }
            opt.put(args[i].substring(2), args[++i]);
        }
        String group = opt.get("group");
        String topic = opt.get("topic");
        Path dir = Path.of(opt.getOrDefault("dir", Files.createTempDirectory("peer-watch").toString()));
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, opt.get("bootstrap"));
        try (Admin admin = Admin.create(ap)) {
            int partitions = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic).partitions().size();
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            for (int i = 0; i < partitions; i++) latest.put(new TopicPartition(topic, i), OffsetSpec.latest());
            Map<TopicPartition, Long> ends = new HashMap<>();
            admin.listOffsets(latest).all().get().forEach((tp, info) -> ends.put(tp, info.offset()));
            long total = ends.values().stream().mapToLong(Long::longValue).sum();
            String load = Files.readString(Path.of("/proc/loadavg")).split(" ")[0];

            long[] cpuAtSpawn = machineCpu();
            long spawnMs = System.currentTimeMillis();
            Process peer = new ProcessBuilder(command)
                    .redirectOutput(dir.resolve("peer.out").toFile())
                    .redirectError(dir.resolve("peer.err").toFile())
                    .start();
            long pid = peer.pid();
            long t25 = 0, t75 = 0, tCover = 0, c25 = 0, c75 = 0;
            double cpu25 = 0, cpu75 = 0, cpuCover = 0;
            long hwmKib = 0;
            while (peer.isAlive()) {
                Map<TopicPartition, OffsetAndMetadata> committed = admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata().get();
                long now = System.currentTimeMillis();
                long sum = 0;
                boolean covered = true;
                for (Map.Entry<TopicPartition, Long> end : ends.entrySet()) {
                    OffsetAndMetadata at = committed.get(end.getKey());
                    long offset = at == null ? 0 : Math.min(at.offset(), end.getValue());
                    sum += offset;
                    if (offset < end.getValue()) covered = false;
                }
                if (t25 == 0 && sum * 4 >= total) { t25 = now; c25 = sum; cpu25 = cpuSeconds(pid); }
                if (t75 == 0 && sum * 4 >= 3 * total) { t75 = now; c75 = sum; cpu75 = cpuSeconds(pid); }
                if (covered) {
                    tCover = now;
                    cpuCover = cpuSeconds(pid);
                    hwmKib = hwmKib(pid);
                    break;
                }
                Thread.sleep(50);
            }
            long[] cpuAtCover = machineCpu();
            long termMs = System.currentTimeMillis();
            peer.destroy(); // SIGTERM
            int status = peer.waitFor();
            long exitMs = System.currentTimeMillis();
            JsonNode report = null;
            for (String line : Files.readAllLines(dir.resolve("peer.out"))) if (line.startsWith("{")) report = JSON.readTree(line);
            Map<String, Object> out = new LinkedHashMap<>();
            out.put("group", group);
            out.put("status", status);
            out.put("load1", Double.parseDouble(load));
            boolean ok = report != null && tCover > 0;
            if (ok && opt.containsKey("expect")) {
                JsonNode want = JSON.readTree(new File(opt.get("expect")));
                for (String k : List.of("applied", "duplicates", "stale", "dead_lettered")) {
                    if (want.get(k).asLong() != report.get(k).asLong()) ok = false;
                }
            }
            out.put("counts_ok", ok);
            if (report != null) out.put("records", report.get("records").asLong());
            double wholeS = (tCover - spawnMs) / 1000.0;
            out.put("whole_s", wholeS);
            out.put("events_per_s", Math.round(total / wholeS));
            if (report != null && report.get("first_record_ms").asLong() > 0) {
                long first = report.get("first_record_ms").asLong();
                out.put("first_record_s", (first - spawnMs) / 1000.0);
                out.put("from_first_events_per_s", Math.round((total - 1) / ((tCover - first) / 1000.0)));
            }
            out.put("middle_events_per_s", t75 > t25 ? Math.round((c75 - c25) / ((t75 - t25) / 1000.0)) : null);
            out.put("cpu_s", cpuCover);
            out.put("middle_cpu_us_per_event", c75 > c25 ? Math.round((cpu75 - cpu25) * 1e6 / (c75 - c25) * 100) / 100.0 : null);
            out.put("peak_rss_mib", Math.round(hwmKib / 1024.0 * 10) / 10.0);
            out.put("shutdown_s", (exitMs - termMs) / 1000.0);
            // The machine over the run: CPU-seconds busy (all processes) and stolen by the hypervisor.
            out.put("machine_busy_s", (cpuAtCover[0] - cpuAtSpawn[0]) / 100.0);
            out.put("steal_s", (cpuAtCover[1] - cpuAtSpawn[1]) / 100.0);
            if (report != null && report.has("idle_commits")) out.put("idle_commits", report.get("idle_commits").asLong());
            System.out.println(JSON.writeValueAsString(out));
        }
    }

    /** utime + stime of a process, in seconds (clock ticks of 1/100 s). */
    static double cpuSeconds(long pid) {
        try {
            String stat = Files.readString(Path.of("/proc/" + pid + "/stat"));
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            return (Long.parseLong(f[11]) + Long.parseLong(f[12])) / 100.0;
        } catch (Exception e) {
            return 0;
        }
    }

    /** The machine's busy (user, nice, system, irq, softirq) and steal ticks, from /proc/stat's cpu line. */
    static long[] machineCpu() {
        try {
            String[] f = Files.readAllLines(Path.of("/proc/stat")).get(0).trim().split("\\s+");
            long busy = Long.parseLong(f[1]) + Long.parseLong(f[2]) + Long.parseLong(f[3]) + Long.parseLong(f[6]) + Long.parseLong(f[7]);
            return new long[] {busy, Long.parseLong(f[8])};
        } catch (Exception e) {
            return new long[] {0, 0};
        }
    }

    static long hwmKib(long pid) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc/" + pid + "/status"))) {
                if (line.startsWith("VmHWM:")) return Long.parseLong(line.replaceAll("[^0-9]", ""));
            }
        } catch (Exception e) {
            // gone
        }
        return 0;
    }
}
