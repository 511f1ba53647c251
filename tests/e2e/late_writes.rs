//! Late write-outs: state never moves back (guarantee 1), under either
//! guarantee, whatever point of a write-out a pause lands on.
//!
//! A member stops itself at a chosen point of one of its write-outs (a
//! fault point that raises SIGSTOP: with the write-out's changelog records
//! handed to the producer and not yet acknowledged, or acknowledged and not
//! yet written to sled, or written and not yet flushed). The group moves
//! its partitions to a second member, which restores and processes on; then
//! the first is resumed (SIGCONT), when whatever librdkafka still holds for
//! it is sent. The changelog is compacted by the broker meanwhile. After
//! the run, a third member with an empty store restores every partition
//! from the compacted changelog: its state, its durable counters and the
//! dead letters are exactly what the input implies, and the output topic
//! holds no status change behind a newer one of its order except a
//! redelivery of one already published.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use orderly::workload::WorkloadSpec;

use crate::kafka_native::{create_compacting_topic, readable_and_offsets};
use crate::observe::{http_get, scrape};
use crate::support::{end_offsets, signal, wait_exit, wait_until, Instance, Reaper};
use crate::world::{tail, World};
use crate::{required_env, PARTITIONS};

const EXACTLY_ONCE: &str = "guarantee = \"exactly_once\"\n";

#[test]
fn a_member_paused_with_its_write_out_queued_moves_no_state_back() {
    late_write("", "stop_queued", 411);
}

#[test]
fn a_member_paused_after_its_write_out_was_acknowledged_moves_no_state_back() {
    late_write("", "stop_acked", 412);
}

#[test]
fn a_member_paused_before_its_flush_moves_no_state_back() {
    late_write("", "stop_batched", 413);
}

#[test]
fn a_member_paused_with_its_transaction_open_moves_no_state_back_under_exactly_once() {
    late_write(EXACTLY_ONCE, "stop_queued", 414);
}

#[test]
fn a_member_paused_after_its_commit_moves_no_state_back_under_exactly_once() {
    late_write(EXACTLY_ONCE, "stop_acked", 415);
}

/// See the module doc. `point` is the fault point the first member stops
/// at, on its third write-out.
fn late_write(guarantee: &str, point: &str, seed: u64) {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let changelog = format!("{}-changelog", world.topic);
    create_compacting_topic(&world.bootstrap, &changelog);
    let (records, expected) = world.plan(&WorkloadSpec { orders: 3_000, poison_rate: 0.003, seed, ..Default::default() });
    let (first, rest) = records.split_at(records.len() / 3);
    let (second, third) = rest.split_at(rest.len() / 2);
    let reaper = Reaper::default();
    let settings = format!("{guarantee}commit_interval_ms = 100\nbatch_max_records = 100\nbatch_max_wait_ms = 5");

    // a stops itself inside its third write-out.
    let a = world.instance(&settings);
    world.produce(first);
    let mut run_a = reaper.watch(a.spawn_run(Some(&format!("{point}:3"))));
    let stopped = wait_until(Duration::from_secs(90), || a.log().contains(&format!("stopping at {point}")));
    assert!(stopped, "a stopped itself at {point}\n{}", tail(&a.log()));

    // b takes every partition once a's session times out, restores what
    // reached the changelog, and processes the second third.
    let b = world.instance(&settings);
    let mut run_b = reaper.watch(b.spawn_run(None));
    world.produce(second);
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let caught_up = wait_until(Duration::from_secs(120), || world.committed() == ends);
    assert!(caught_up, "b caught up while a was stopped\n{}", tail(&b.log()));

    // a resumes: what librdkafka held for it is sent now, after b's
    // write-outs. Then the last third, processed by the group.
    signal(&run_a, "CONT");
    let resumed = wait_until(Duration::from_secs(30), || a.log().contains(&format!("resumed at {point}")));
    assert!(resumed, "a resumed\n{}", tail(&a.log()));
    std::thread::sleep(Duration::from_secs(3));
    world.produce(third);
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let settled = wait_until(Duration::from_secs(120), || world.committed() == ends);
    assert!(settled, "the group caught up after a resumed\n{}\n---\n{}", tail(&a.log()), tail(&b.log()));
    std::thread::sleep(Duration::from_secs(1));
    stop(&mut run_a, &a);
    stop(&mut run_b, &b);

    // The broker compacts the changelog before the fresh restore.
    let mut counts = (0, 0);
    let compacted = wait_until(Duration::from_secs(90), || {
        counts = readable_and_offsets(&world.bootstrap, &changelog);
        counts.0 < counts.1
    });
    assert!(compacted, "the broker compacted the changelog: {} readable records over {} offsets", counts.0, counts.1);
    eprintln!("late write ({point}): compaction left {} readable records over {} offsets", counts.0, counts.1);

    // c, with an empty store, restores every partition from the changelog.
    let c = world.instance(&settings);
    let mut run_c = reaper.watch(c.spawn_run(None));
    let address = c.wait_http(0);
    let owns_all = wait_until(Duration::from_secs(90), || {
        scrape(&address).get("orderly_assigned_partitions").copied() == Some(PARTITIONS as f64)
            && http_get(&address, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(owns_all, "c restored and owns every partition\n{}", tail(&c.log()));
    stop(&mut run_c, &c);
    eprintln!(
        "late write ({point}): a logged {} fenced partitions, {} lost revokes",
        a.log().matches("partition fenced").count(),
        a.log().matches("partition lost").count()
    );
    world.verify_state(&c, &expected);
    if guarantee == EXACTLY_ONCE {
        world.verify_exactly_once(&expected);
    } else {
        world.verify_outbox(&expected, false);
        no_status_change_behind_a_newer_one(&world);
    }
}

/// at_least_once's promise on the output topic: per order, in offset
/// order, a version below the newest published so far is only ever a
/// redelivery of a change published before (same version, same event).
fn no_status_change_behind_a_newer_one(world: &World) {
    let mut redelivered = 0usize;
    for (partition, list) in world.outbox_records() {
        let mut newest: HashMap<&str, i64> = HashMap::new();
        let mut published: HashSet<(&str, i64, &str)> = HashSet::new();
        for (order, version, id) in &list {
            let top = newest.entry(order.as_str()).or_insert(*version);
            if *version < *top {
                assert!(
                    published.contains(&(order.as_str(), *version, id.as_str())),
                    "partition {partition}: order {order} version {version} follows version {top} and was not published before"
                );
                redelivered += 1;
            }
            *top = (*top).max(*version);
            published.insert((order.as_str(), *version, id.as_str()));
        }
    }
    eprintln!("output topic: {redelivered} redeliveries behind a newer version, none new");
}

fn stop(child: &mut std::process::Child, instance: &Instance) {
    signal(child, "TERM");
    let status = wait_exit(child, Duration::from_secs(30));
    assert!(status.is_some_and(|s| s.success()), "SIGTERM exits 0: {status:?}\n{}", tail(&instance.log()));
}
