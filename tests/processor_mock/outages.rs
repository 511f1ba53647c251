//! The binary through a broker or registry that is down or away, a missing
//! output topic and bad configuration: clear messages, no floods; and the
//! demo's JSON.

use std::time::Duration;

use orderly::testkit::orders::workload::{plan, WorkloadSpec};
use orderly::testkit::orders::Encoder;
use orderly::testkit::produce_planned;
use orderly::Registry;

use crate::support::mock::producer;
use crate::support::registry_double::RegistryDouble;
use crate::support::{committed, signal, unique, wait_exit, wait_until, Instance, Setup};
use crate::{cluster, loaded, Loaded, PARTITIONS};

#[test]
fn broker_down_at_startup_is_retried_with_a_clear_message() {
    let registry = RegistryDouble::start();
    let group = unique("group");
    // Nothing listens on port 1.
    let instance = Instance::new(&Setup {
        kafka_extra: "",
        bootstrap: "127.0.0.1:1",
        registry_url: &registry.url,
        group: &group,
        topic: "orders",
        dlq_topic: "orders.dlq",
        session_timeout_ms: 6000,
        extra: "",
    });
    // Killed if an assertion fails first.
    let reaper = crate::support::Reaper::default();
    let mut child = reaper.watch(instance.spawn_run(None));
    let retried = wait_until(Duration::from_secs(30), || {
        instance.log().contains("kafka unreachable")
    });
    assert!(retried, "logs the outage\n{}", instance.log());
    assert!(
        child.try_wait().unwrap().is_none(),
        "keeps running while the broker is down"
    );
    let log = instance.log();
    let lost = log
        .lines()
        .find(|l| l.contains("kafka unreachable"))
        .unwrap_or_default();
    assert!(
        lost.contains("bootstrap=127.0.0.1:1") && lost.contains("orderly config check"),
        "the line names what was tried and the check to run: {lost}"
    );

    // While it runs it holds the store: a second process gets a clear error
    // that points to the running instance's endpoint.
    for command in [["state", "stats"], ["state", "dump"]] {
        let out = instance.command(&command).output().unwrap();
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&instance.store_path.display().to_string()),
            "names the store path: {stderr}"
        );
        assert!(
            stderr.contains("in use by another process")
                && stderr.contains("curl http://127.0.0.1:")
                && stderr.contains("/state/<order_id>")
                && !stderr.contains("WouldBlock"),
            "points to the running instance: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }

    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0: {status:?}\n{}",
        instance.log()
    );
}

/// The body of `GET path` on `address` (HOST:PORT), HTTP/1.1 without
/// keep-alive.
fn http_get(address: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        // One chunk is enough for a small JSON answer: size line, data.
        let (_, rest) = body.split_once("\r\n").expect("chunk size");
        return rest.split("\r\n").next().unwrap_or_default().to_string();
    }
    body.to_string()
}

/// A broker outage while running (issue 32): one line when the connection
/// is lost (naming the bootstrap address and `orderly config check`), a
/// reminder every 15 s, one when it is back; librdkafka's own repeats
/// (AllBrokersDown and transport errors of every client, about 10 lines a
/// second before) are folded into them, and stopping afterwards does not
/// flood either.
#[test]
fn a_broker_outage_logs_a_line_per_change_not_a_flood() {
    const OUTAGE: Duration = Duration::from_secs(25);
    let loaded = loaded(
        WorkloadSpec {
            orders: 200,
            seed: 32,
            ..Default::default()
        },
        "",
    );
    let Loaded {
        c,
        _registry,
        group,
        ends,
        instance,
        ..
    } = loaded;
    let mut child = instance.spawn_run(None);
    let caught_up = wait_until(Duration::from_secs(60), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    assert!(caught_up, "caught up before the outage\n{}", instance.log());
    // Item 6: status changes delivered in the write-outs are counted as
    // such, not as a relay's "published 0".
    let status: serde_json::Value =
        serde_json::from_str(&http_get(&instance.wait_http(0), "/api/status"))
            .expect("status JSON");
    assert_eq!(status["outbox"]["delivery"], "write_out", "{status}");
    assert!(
        status["outbox"]["in_write_outs"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{status}"
    );
    let before = instance.log().lines().count();
    c.mock.broker_down(1).expect("broker down");
    std::thread::sleep(OUTAGE);
    let during: Vec<String> = instance
        .log()
        .lines()
        .skip(before)
        .map(str::to_string)
        .collect();
    c.mock.broker_up(1).expect("broker up");
    let back = wait_until(Duration::from_secs(20), || {
        instance.log().contains("kafka reachable again")
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    assert!(back, "the recovery is logged\n{log}");
    let per_second = during.len() as f64 / OUTAGE.as_secs_f64();
    eprintln!(
        "{} lines in the {}s outage ({per_second:.2}/s)",
        during.len(),
        OUTAGE.as_secs()
    );
    assert!(
        per_second <= 1.0,
        "at most a line a second over the outage, got {per_second:.2}/s:\n{}",
        during.join("\n")
    );
    assert!(
        during.iter().any(|l| l.contains("kafka unreachable")
            && l.contains(&format!("bootstrap={}", c.bootstrap))
            && l.contains("orderly config check")),
        "the lost line names the bootstrap address and the check:\n{}",
        during.join("\n")
    );
    assert!(
        during.iter().any(|l| l.contains("kafka still unreachable")),
        "a reminder within the outage:\n{}",
        during.join("\n")
    );
    assert!(
        !during
            .iter()
            .any(|l| l.contains("rdkafka::client:") || l.contains("kafka client error")),
        "librdkafka's repeats are folded:\n{}",
        during.join("\n")
    );
    let after_stop = log.lines().skip(before + during.len()).count();
    assert!(
        after_stop < 60,
        "recovery and a clean stop in a few lines, got {after_stop}\n{log}"
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0: {status:?}\n{log}"
    );
    drop(c.mock);
}

/// A registry outage longer than the session timeout (issue 32, item 7):
/// the partition tasks wait on the registry, which is not a paused process
/// (the poll thread keeps the membership), so no "was the process paused?"
/// warning; one line says the registry is reachable again, and every
/// record is then decided, none dead-lettered.
#[test]
fn a_registry_outage_is_not_taken_for_a_paused_process() {
    use crate::support::registry_double::ByIdMode;
    let c = cluster();
    let registry = RegistryDouble::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let http = Registry::http(&registry.url, Duration::from_secs(5)).unwrap();
    let encoder = runtime
        .block_on(Encoder::register(&http, &c.topic))
        .expect("register over HTTP");
    let (records, _) = plan(
        &WorkloadSpec {
            orders: 50,
            seed: 7,
            poison_rate: 0.0,
            ..Default::default()
        },
        &encoder,
    )
    .expect("plan");
    let group = unique("group");
    let instance = c.instance(&registry.url, &group, "");
    // Without a changelog: the pause check holds write-outs only there.
    let no_changelog = [
        ("ORDERLY_KAFKA__CHANGELOG_TOPIC", ""),
        ("ORDERLY_KAFKA__OUTPUT_TOPIC", ""),
    ];
    let mut child =
        instance.spawn_run_env(None, "info,librdkafka=warn,rdkafka=warn", &no_changelog);
    assert!(instance.wait_ready(0), "connects\n{}", instance.log());
    // Schema look-ups fail (an ingress's HTML 404: not a registry answer,
    // retried) for longer than the 6 s session timeout.
    registry.set_by_id_mode(ByIdMode::HtmlNotFound);
    let ends = runtime
        .block_on(produce_planned(&producer(&c.bootstrap), &c.topic, &records))
        .expect("produce");
    let waiting = wait_until(Duration::from_secs(30), || {
        instance
            .log()
            .contains("schema registry unavailable; retrying")
    });
    assert!(
        waiting,
        "the tasks wait on the registry\n{}",
        instance.log()
    );
    std::thread::sleep(Duration::from_secs(9));
    registry.set_by_id_mode(ByIdMode::Normal);
    let caught_up = wait_until(Duration::from_secs(60), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    assert!(caught_up, "every record decided after the outage\n{log}");
    assert!(status.is_some_and(|s| s.success()), "{status:?}\n{log}");
    assert!(
        !log.contains("was the process paused"),
        "a wait on the registry is not a pause\n{log}"
    );
    assert_eq!(
        log.matches("schema registry reachable again").count(),
        1,
        "one line when the registry is back\n{log}"
    );
    assert_eq!(
        log.matches("schema registry unavailable").count(),
        1,
        "one line when it stops answering, not one per partition and retry\n{log}"
    );
    assert_eq!(
        instance.stats()["totals"]["dead_lettered"].as_i64(),
        Some(0),
        "nothing dead-lettered"
    );
    drop(c.mock);
}

/// A missing output topic with write-out delivery stops start-up with one
/// message (issue 32, item 8): it names the quick start's `kafka/broker tool
/// topics` beside `kafka-topics.sh`, and the input topic's real partition
/// count.
#[test]
fn a_missing_output_topic_is_reported_once_with_the_partition_count() {
    let c = cluster();
    let registry = RegistryDouble::start();
    let group = unique("group");
    let instance = c.instance(&registry.url, &group, "");
    let missing = unique("missing-status");
    let mut child = instance.spawn_run_env(
        None,
        "info,librdkafka=warn,rdkafka=warn",
        &[("ORDERLY_KAFKA__OUTPUT_TOPIC", &missing)],
    );
    let status = wait_exit(&mut child, Duration::from_secs(60));
    let log = instance.log();
    assert!(
        status.is_some_and(|s| s.code() == Some(1)),
        "{status:?}\n{log}"
    );
    assert_eq!(
        log.matches(&format!("output topic {missing} does not exist"))
            .count(),
        1,
        "said once\n{log}"
    );
    assert!(
        log.contains(&format!(
            "`kafka/broker tool topics --bootstrap-server {} --create --topic {missing} --partitions {PARTITIONS}`",
            c.bootstrap
        )) && log.contains("kafka-topics.sh")
            && !log.contains("<the input topic's>"),
        "{log}"
    );
    drop(c.mock);
}

#[test]
fn bad_configuration_stops_start_up_naming_the_key() {
    let out = std::process::Command::new(crate::support::orderly_bin())
        .arg("run")
        .env("ORDERLY_PROCESSING__BATCH_SIZE", "5")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("batch_size") && stderr.contains("batch_max_records"),
        "{stderr}"
    );

    let out = std::process::Command::new(crate::support::orderly_bin())
        .args(["state", "stats"])
        .env("ORDERLY_PROCESSING__SHUTDOWN_TIMEOUT_MS", "60000")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("processing.shutdown_timeout_ms"));
}

#[test]
fn demo_json_proves_the_guarantees() {
    let out = std::process::Command::new(crate::support::orderly_bin())
        .args(["demo", "--json", "--orders", "400"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let n = |k: &str| {
        summary[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{k} in {summary}"))
    };
    assert_eq!(
        n("applied") + n("duplicates") + n("stale") + n("dead_lettered"),
        n("consumed")
    );
    assert_eq!(
        n("consumed"),
        summary["expected"]["records"].as_u64().unwrap()
    );
    assert!(n("duplicates") > 0 && n("stale") > 0 && n("dead_lettered") > 0);
    assert_eq!(summary["state_matches_expected"], true);
    assert_eq!(summary["counts_match_expected"], true);
}

/// With the outbox on, a schema registry that cannot be reached at start-up
/// is waited for (as records wait for it) instead of stopping the process:
/// a line says so, the process keeps running, and a shutdown meanwhile is
/// clean.
#[test]
fn an_unreachable_registry_at_start_up_is_waited_for_with_the_outbox_on() {
    let c = cluster();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let registry_url = format!("http://127.0.0.1:{port}");
    let group = unique("group");
    let instance = c.instance(&registry_url, &group, "");
    let reaper = crate::support::Reaper::default();
    let mut child = reaper.watch(instance.spawn_run(None));
    let waiting = wait_until(Duration::from_secs(45), || {
        instance
            .log()
            .contains("waiting for it to register the OrderStatusChanged schema")
    });
    assert!(
        waiting,
        "says it waits for the registry\n{}",
        instance.log()
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "keeps running while the registry is away\n{}",
        instance.log()
    );
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(20));
    assert!(
        status.is_some_and(|s| s.success()),
        "a clean stop while waiting: {status:?}\n{}",
        instance.log()
    );
    drop(c.mock);
}
