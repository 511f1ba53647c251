//! Standby replicas (`processing.standby_replicas`) on Apache Kafka: two
//! members, each keeping the other's partitions warm from their changelog.
//! A standby serves nothing (`/state` answers 421 for its partitions); when
//! its member is SIGKILLed under load, the survivor restores only the
//! changelog's tail, and its state and counters then equal the input's.

use std::time::{Duration, Instant};

use orderly::testkit::orders::workload::WorkloadSpec;

use crate::observe::http_get;
use crate::required_env;
use crate::support::{signal, wait_exit, wait_until, Instance, Reaper};
use crate::world::{tail, World};

/// `/api/status` of a running instance, as JSON.
fn status(instance: &Instance) -> Option<serde_json::Value> {
    let address = instance.http_address()?;
    let (code, body) = http_get(&address, "/api/status").ok()?;
    (code == 200).then(|| serde_json::from_str(&body).ok())?
}

fn numbers(value: &serde_json::Value, list: &str, field: &str) -> Vec<i64> {
    value[list]
        .as_array()
        .map(|rows| rows.iter().filter_map(|r| r[field].as_i64()).collect())
        .unwrap_or_default()
}

/// The value of `field=N` on a log line.
fn field(line: &str, field: &str) -> Option<i64> {
    let at = line.find(&format!(" {field}="))? + field.len() + 2;
    line[at..]
        .split(|c: char| !c.is_ascii_digit() && c != '-')
        .next()?
        .parse()
        .ok()
}

#[test]
fn a_standby_takes_over_a_killed_members_partitions_restoring_only_the_tail() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP")).with_session_timeout(3000);
    let spec = WorkloadSpec {
        orders: 20_000,
        poison_rate: 0.001,
        seed: 3131,
        ..Default::default()
    };
    let (records, expected) = world.plan(&spec);
    let settings = "batch_max_records = 500\ncommit_interval_ms = 200\nstandby_replicas = 1";
    let (a, b) = (world.instance(settings), world.instance(settings));
    let half = records.len() / 2;
    let producer = world.producer();
    world.produce_with(&producer, &records[..half]);

    let reaper = Reaper::default();
    let mut run_a = reaper.watch(a.spawn_run(None));
    let mut run_b = reaper.watch(b.spawn_run(None));
    assert!(
        world.caught_up(Duration::from_secs(120)),
        "the first half processed\n{}\n---\n{}",
        tail(&a.log()),
        tail(&b.log())
    );

    // Each keeps the other's partitions warm, and none of its own.
    let mut seen = serde_json::Value::Null;
    let warm = wait_until(Duration::from_secs(60), || {
        let Some(s) = status(&b) else { return false };
        seen = s;
        let owned = numbers(&seen, "partitions", "partition");
        let mut standbys = numbers(&seen, "standbys", "partition");
        let lags = numbers(&seen, "standbys", "lag");
        standbys.sort();
        let others: Vec<i64> = (0..4).filter(|p| !owned.contains(p)).collect();
        !owned.is_empty() && standbys == others && lags.iter().all(|lag| *lag == 0)
    });
    assert!(
        warm,
        "b keeps every partition it does not own, caught up: {seen}\n{}",
        tail(&b.log())
    );
    let metrics = http_get(&b.http_address().expect("b's address"), "/metrics")
        .expect("b's metrics")
        .1;
    assert!(
        metrics.contains("orderly_standby_lag_records{partition="),
        "the standby lag is a metric\n{metrics}"
    );

    // A standby serves nothing: b answers 421 for keys of a's partitions.
    let address = b.http_address().expect("b's address");
    let (mut misdirected, mut served) = (0, 0);
    for order in expected.states.keys().take(40) {
        match http_get(&address, &format!("/state/{order}")) {
            Ok((421, _)) => misdirected += 1,
            // Its own partition: found, or not (yet) in the first half.
            Ok((200 | 404, _)) => served += 1,
            other => panic!("/state/{order}: {other:?}"),
        }
    }
    assert!(
        misdirected > 0 && served > 0,
        "b serves its own partitions only: {served} served, {misdirected} misdirected"
    );

    // The second half flows while a is killed: b takes a's partitions over.
    let b_log_before = b.log().len();
    let killed = std::thread::scope(|scope| {
        scope.spawn(|| {
            let rest = &records[half..];
            for chunk in rest.chunks(rest.len().div_ceil(40)) {
                world.produce_with(&producer, chunk);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        std::thread::sleep(Duration::from_millis(800));
        let killed = Instant::now();
        signal(&run_a, "KILL");
        assert!(
            wait_exit(&mut run_a, Duration::from_secs(10)).is_some(),
            "SIGKILL ends a"
        );
        killed
    });
    assert!(
        world.caught_up(Duration::from_secs(120)),
        "b processes everything after the take-over\n{}",
        tail(&b.log())
    );
    eprintln!(
        "standby: b caught up {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    );
    // What b read of a's partitions' changelogs when they moved: only the
    // tail its standbys had not read (a line per partition that had one; a
    // standby already at the end restores nothing and says nothing).
    let log = b.log();
    let moved: Vec<(i64, i64)> = log[b_log_before..]
        .lines()
        .filter(|l| {
            l.contains("restoring from the changelog") || l.contains("no complete write-out")
        })
        .filter_map(|l| Some((field(l, "from")?, field(l, "to").or(field(l, "end"))?)))
        .collect();
    eprintln!("standby: the take-over read (from, to) {moved:?}");
    for (from, to) in &moved {
        assert!(
            *from > 0 && (to - from) * 5 < *to,
            "a warm take-over reads only the tail (under a fifth of the changelog): {from}..{to}"
        );
    }
    signal(&run_b, "TERM");
    assert!(
        wait_exit(&mut run_b, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "SIGTERM exits 0\n{}",
        tail(&b.log())
    );
    drop(reaper);

    // b's store, and a fresh one from the changelog, equal the input's.
    assert_eq!(world.verify_state(&b, &expected), 0, "b's state is exact");
    let fresh = world.restore_fresh("", |_| {});
    assert_eq!(world.verify(&fresh, &expected), 0, "the changelog is exact");
}
