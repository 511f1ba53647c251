//! What an operator sees on the happy path (issue 32), against a broker
//! that has just started: the quick start's `produce` and `run` print no
//! warning (a coordinator still loading its internal topics is retried
//! quietly, not reported as a failure).

use std::process::Stdio;
use std::time::Duration;

use crate::support::{
    committed, create_topics, end_offsets, signal, unique, wait_exit, wait_until, Instance, Setup,
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
    let produce_log = String::from_utf8_lossy(&produce.stderr).into_owned();
    assert!(
        produce.status.success(),
        "produce: {produce:?}\n{produce_log}"
    );
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
