//! The outbox on a real broker when the output topic is not there for a
//! while. Relay delivery: the input keeps flowing, the backlog grows and is
//! reported, then drains to zero with nothing lost. Write-out delivery (the
//! default): `run` refuses to start, naming the choices. (The crash drill,
//! the group test and the others check the outbox's promises, under the
//! default delivery, in `World::verify`.)

use std::time::Duration;

use orderly::testkit::orders::workload::WorkloadSpec;

use crate::observe::http_get;
use crate::required_env;
use crate::support::{end_offsets, signal, wait_exit, wait_until, Reaper};
use crate::world::{tail, World};
use crate::PARTITIONS;

#[test]
fn an_unavailable_output_topic_holds_the_backlog_not_the_input() {
    let world = World::without_output_topic(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 3_000,
        poison_rate: 0.003,
        seed: 12,
        ..Default::default()
    });
    world.produce(&records);
    let instance = world.instance("commit_interval_ms = 200\n[outbox]\ndelivery = \"relay\"");
    let reaper = Reaper::default();
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);

    let mut run = reaper.watch(instance.spawn_run(None));
    let address = instance.wait_http(0);
    let caught_up = wait_until(Duration::from_secs(120), || world.committed() == ends);
    assert!(
        caught_up,
        "the input is processed without the output topic\n{}",
        tail(&instance.log())
    );
    // Readiness (and the status page, from the same reason) tells of a
    // relay that cannot publish, instead of a green READY.
    let mut answer = (0, String::new());
    let unready = wait_until(Duration::from_secs(60), || {
        answer = http_get(&address, "/readyz").unwrap_or_default();
        answer.0 == 503 && answer.1.contains("outbox relay cannot publish")
    });
    assert!(
        unready,
        "/readyz while the output topic is missing: {answer:?}"
    );
    assert!(
        instance.log().contains("output topic does not exist"),
        "named at start-up\n{}",
        tail(&instance.log())
    );
    signal(&run, "TERM");
    assert!(
        wait_exit(&mut run, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "{}",
        tail(&instance.log())
    );
    let stats = instance.stats();
    let pending = stats["totals"]["outbox_pending"]
        .as_u64()
        .expect("outbox_pending");
    assert_eq!(
        pending,
        expected.status_changes.len() as u64,
        "every status change waits in the outbox: {stats}"
    );
    let log = instance.log();
    assert!(
        log.contains("outbox publish failing") || log.contains("cannot read the output topic back"),
        "the failing output is reported\n{}",
        tail(&log)
    );

    world.create_output_topic();
    let mut run = reaper.watch(instance.spawn_run(None));
    let drained = wait_until(Duration::from_secs(120), || {
        world.outbox_records().values().map(Vec::len).sum::<usize>()
            >= expected.status_changes.len()
    });
    assert!(
        drained,
        "the backlog is published once the topic exists\n{}",
        tail(&instance.log())
    );
    let address = instance.wait_http(1);
    let ready = wait_until(Duration::from_secs(60), || {
        http_get(&address, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(
        ready,
        "ready once the relay publishes\n{}",
        tail(&instance.log())
    );
    // No input comes any more: the published records still leave the
    // backlog (they used to wait for the next input's write-out, and the
    // backlog's age grew for ever).
    let mut pending = f64::NAN;
    let emptied = wait_until(Duration::from_secs(20), || {
        pending = crate::observe::total(
            &crate::observe::scrape(&address),
            "orderly_outbox_pending",
            "",
        );
        pending == 0.0
    });
    assert!(
        emptied,
        "the backlog drains without new input: {pending} pending\n{}",
        tail(&instance.log())
    );
    signal(&run, "TERM");
    assert!(
        wait_exit(&mut run, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "{}",
        tail(&instance.log())
    );
    assert_eq!(
        instance.stats()["totals"]["outbox_pending"].as_u64(),
        Some(0),
        "the backlog drained to zero"
    );
    world.verify(&instance, &expected);
}

#[test]
fn write_out_delivery_refuses_to_start_without_the_output_topic() {
    let world = World::without_output_topic(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let instance = world.instance("");
    let reaper = Reaper::default();
    let mut run = reaper.watch(instance.spawn_run(None));
    let status = wait_exit(&mut run, Duration::from_secs(60));
    let log = instance.log();
    assert!(
        status.is_some_and(|s| !s.success()),
        "run exits with an error: {status:?}\n{}",
        tail(&log)
    );
    assert!(
        log.contains("does not exist") && log.contains("outbox.delivery = \"relay\""),
        "the error names the topic and the choices\n{}",
        tail(&log)
    );
}
