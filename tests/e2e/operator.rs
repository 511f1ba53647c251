//! What an operator sees (issue 32), against a broker of each test's own:
//! on the happy path, a broker that has just started, the quick start's
//! `produce` and `run` print no warning (a coordinator still loading its
//! internal topics is retried quietly); through a broker outage, a line
//! when the connection is lost, a reminder, a line when it is back, and
//! not librdkafka's flood.

use std::process::Stdio;
use std::time::Duration;

use crate::support::{
    assert_succeeded, committed, create_topics, end_offsets, signal, unique, wait_exit, wait_until,
    Instance, Setup,
};
use crate::world::{tail, Broker};
use crate::{required_env, PARTITIONS, SESSION_TIMEOUT_MS};

/// The lines of a log at WARN or ERROR level (text format).
fn alarms(log: &str) -> Vec<&str> {
    log.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR ") || l.starts_with("error"))
        .collect()
}

#[test]
fn a_first_start_on_a_fresh_broker_prints_no_warning() {
    let registry = required_env("ORDERLY_E2E_REGISTRY");
    let dir = tempfile::tempdir().expect("tempdir");
    // A broker of its own, just started: its group and transaction
    // coordinators load their topics on the first requests.
    let broker = Broker::start(dir.path().join("kafka"));
    let topic = unique("orders");
    let dlq = unique("orders-dlq");
    let output = format!("{topic}-status");
    create_topics(
        &broker.bootstrap,
        &[(&topic, PARTITIONS), (&dlq, 1), (&output, PARTITIONS)],
    );
    let group = unique("group");
    let instance = Instance::new(&Setup {
        bootstrap: &broker.bootstrap,
        registry_url: &registry,
        group: &group,
        topic: &topic,
        dlq_topic: &dlq,
        session_timeout_ms: SESSION_TIMEOUT_MS,
        kafka_extra: "",
        extra: "",
    });
    // The operator's default log filter (no RUST_LOG).
    let produce = instance
        .command(&["produce", "--orders", "300"])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run produce");
    assert_succeeded(&produce, "produce");
    let produce_log = String::from_utf8_lossy(&produce.stderr).into_owned();
    assert_eq!(
        alarms(&produce_log),
        Vec::<&str>::new(),
        "produce on a fresh broker warns of nothing\n{produce_log}"
    );

    let ends = end_offsets(&broker.bootstrap, &topic, PARTITIONS);
    let mut child = instance.spawn_run(None);
    let caught_up = wait_until(Duration::from_secs(50), || {
        committed(&broker.bootstrap, &group, &topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    assert!(caught_up, "caught up\n{}", tail(&log));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        tail(&log)
    );
    assert_eq!(
        alarms(&log),
        Vec::<&str>::new(),
        "run on a fresh broker warns of nothing\n{}",
        tail(&log)
    );
}

/// The broker stopped for 20 s under a running processor: at most a line a
/// second over the outage (about 8 a second before, librdkafka's
/// AllBrokersDown and transport errors of every client), the "kafka
/// unreachable" line with the bootstrap address and the `config check`
/// hint, and "kafka reachable again" once it is back.
#[test]
fn a_broker_outage_is_a_line_when_lost_and_one_when_back() {
    const OUTAGE: Duration = Duration::from_secs(20);
    let registry = required_env("ORDERLY_E2E_REGISTRY");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = Broker::start(dir.path().join("kafka"));
    let topic = unique("orders");
    let dlq = unique("orders-dlq");
    create_topics(
        &broker.bootstrap,
        &[
            (&topic, PARTITIONS),
            (&dlq, 1),
            (&format!("{topic}-status"), PARTITIONS),
        ],
    );
    let group = unique("group");
    let instance = Instance::new(&Setup {
        bootstrap: &broker.bootstrap,
        registry_url: &registry,
        group: &group,
        topic: &topic,
        dlq_topic: &dlq,
        session_timeout_ms: SESSION_TIMEOUT_MS,
        kafka_extra: "",
        extra: "",
    });
    let produce = instance
        .command(&["produce", "--orders", "100"])
        .stdin(Stdio::null())
        .output()
        .expect("run produce");
    assert_succeeded(&produce, "produce");
    let ends = end_offsets(&broker.bootstrap, &topic, PARTITIONS);
    let mut child = instance.spawn_run(None);
    let caught_up = wait_until(Duration::from_secs(50), || {
        committed(&broker.bootstrap, &group, &topic, PARTITIONS) == ends
    });
    assert!(caught_up, "caught up\n{}", tail(&instance.log()));

    let before = instance.log().lines().count();
    broker.stop();
    std::thread::sleep(OUTAGE);
    let during: Vec<String> = instance
        .log()
        .lines()
        .skip(before)
        .map(str::to_string)
        .collect();
    broker.restart();
    let back = wait_until(Duration::from_secs(60), || {
        instance.log().contains("kafka reachable again")
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    let per_second = during.len() as f64 / OUTAGE.as_secs_f64();
    eprintln!(
        "{} lines in the {}s outage ({per_second:.2}/s), {} lines from the restart to the exit",
        during.len(),
        OUTAGE.as_secs(),
        log.lines().count() - before - during.len()
    );
    let shown = during.join("\n");
    assert!(per_second <= 1.0, "{per_second:.2} lines/s:\n{shown}");
    assert!(
        during.iter().any(|l| l.contains("kafka unreachable")
            && l.contains(&format!("bootstrap={}", broker.bootstrap))
            && l.contains("orderly config check")),
        "the lost line\n{shown}"
    );
    assert!(back, "the recovery line\n{}", tail(&log));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}\n{}",
        tail(&log)
    );
}
