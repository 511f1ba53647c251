//! Several `orderly` processes in one consumer group, each with its own
//! store, under continuous load: partitions move between them and are
//! restored from the changelog; the one left at the end holds every order's
//! exact state and exact durable counters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use orderly::testkit::orders::workload::WorkloadSpec;

use crate::pauses::{batches, median_max, pauses, BATCH_LOG};
use crate::required_env;
use crate::support::{signal, wait_exit, wait_until, Instance, Reaper};
use crate::world::{tail, World};

/// How many times an instance's log says `what`.
fn count(instance: &Instance, what: &str) -> usize {
    instance.log().matches(what).count()
}

/// Waits until the group's committed offsets move past `before` (the group
/// is processing), or fails with the logs of `instances`.
fn wait_progress(world: &World, step: &str, instances: &[&Instance]) {
    let before = world.committed_total();
    let moved = wait_until(Duration::from_secs(90), || world.committed_total() > before);
    if !moved {
        for (i, instance) in instances.iter().enumerate() {
            eprintln!("--- instance {i}\n{}", tail(&instance.log()));
        }
        panic!("{step}: no progress");
    }
}

/// Scale 1 -> 3 -> 2 -> 3 -> 1 under load with duplicates, reorderings and
/// poison records: a SIGKILL along the way, and one instance's store wiped
/// before it rejoins. The instance left owns every partition; its state and
/// durable counters are exact.
#[test]
fn consumer_group_scales_out_and_in_with_exact_state() {
    scale_out_and_in(World::new(required_env("ORDERLY_E2E_BOOTSTRAP")));
}

/// The same under KIP-848's consumer group protocol
/// (`kafka.group_protocol = "consumer"`): the broker assigns incrementally
/// and the same revoke and assign callbacks drain, restore and resume.
#[test]
fn consumer_group_scales_out_and_in_under_the_consumer_protocol() {
    scale_out_and_in(World::new(required_env("ORDERLY_E2E_BOOTSTRAP")).with_consumer_protocol());
}

fn scale_out_and_in(world: World) {
    let spec = WorkloadSpec {
        orders: 12_000,
        poison_rate: 0.002,
        seed: 4242,
        ..Default::default()
    };
    let (records, expected) = world.plan(&spec);
    let settings = "batch_max_records = 500\ncommit_interval_ms = 200";
    let (a, b, c) = (
        world.instance(settings),
        world.instance(settings),
        world.instance(settings),
    );
    let started = Instant::now();
    let reaper = Reaper::default();
    let producing = AtomicBool::new(true);
    let scaled = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // Continuous load: records arrive in small pieces while the group
        // scales; the rest at once when the scaling is over.
        let feeder = scope.spawn(|| {
            let producer = world.producer();
            let size = records.len().div_ceil(150);
            let mut at = 0;
            while at < records.len() && !scaled.load(Ordering::SeqCst) {
                let end = (at + size).min(records.len());
                world.produce_with(&producer, &records[at..end]);
                at = end;
                std::thread::sleep(Duration::from_millis(150));
            }
            world.produce_with(&producer, &records[at..]);
            producing.store(false, Ordering::SeqCst);
        });

        let mut run_a = reaper.watch(a.spawn_run_logging(None, BATCH_LOG));
        wait_progress(&world, "1 instance", &[&a]);

        let mut run_b = reaper.watch(b.spawn_run_logging(None, BATCH_LOG));
        let mut run_c = reaper.watch(c.spawn_run_logging(None, BATCH_LOG));
        let joined = wait_until(Duration::from_secs(60), || {
            count(&b, "partition assigned") > 0 && count(&c, "partition assigned") > 0
        });
        assert!(
            joined,
            "3 instances: b and c got partitions\n{}\n---\n{}",
            tail(&b.log()),
            tail(&c.log())
        );
        wait_progress(&world, "3 instances", &[&a, &b, &c]);
        eprintln!(
            "group: 3 instances at {:.1} s",
            started.elapsed().as_secs_f64()
        );

        // 3 -> 2: c is killed; its partitions move after the session timeout.
        signal(&run_c, "KILL");
        assert!(
            wait_exit(&mut run_c, Duration::from_secs(10)).is_some(),
            "SIGKILL ends c"
        );
        let a_before = count(&a, "partition assigned") + count(&b, "partition assigned");
        let moved = wait_until(Duration::from_secs(60), || {
            count(&a, "partition assigned") + count(&b, "partition assigned") > a_before
        });
        assert!(moved, "c's partitions moved to a and b\n{}", tail(&a.log()));
        wait_progress(&world, "2 instances", &[&a, &b]);
        eprintln!(
            "group: 2 instances at {:.1} s",
            started.elapsed().as_secs_f64()
        );

        // 2 -> 3: c rejoins with its store wiped: restored from the start of
        // the changelog.
        std::fs::remove_dir_all(&c.store_path).expect("wipe c's store");
        let c_restores = count(&c, "restore finished");
        run_c = reaper.watch(c.spawn_run_logging(None, BATCH_LOG));
        let restored = wait_until(Duration::from_secs(90), || {
            count(&c, "restore finished") > c_restores
        });
        assert!(
            restored,
            "c restored its partitions from the changelog\n{}",
            tail(&c.log())
        );
        wait_progress(&world, "3 instances again", &[&a, &b, &c]);
        eprintln!(
            "group: 3 instances again at {:.1} s",
            started.elapsed().as_secs_f64()
        );

        // 3 -> 1: b and c leave cleanly (drain, flush, commit on revoke).
        for (name, child, instance) in [("b", &mut run_b, &b), ("c", &mut run_c, &c)] {
            signal(child, "TERM");
            let status = wait_exit(child, Duration::from_secs(30));
            assert!(
                status.is_some_and(|s| s.success()),
                "{name} exits 0 on SIGTERM: {status:?}\n{}",
                tail(&instance.log())
            );
        }
        eprintln!(
            "group: 1 instance at {:.1} s",
            started.elapsed().as_secs_f64()
        );
        scaled.store(true, Ordering::SeqCst);
        feeder.join().expect("feeder");
        assert!(!producing.load(Ordering::SeqCst));
        eprintln!(
            "group: load produced at {:.1} s",
            started.elapsed().as_secs_f64()
        );

        // a catches up alone, then stops cleanly.
        let ends = crate::support::end_offsets(&world.bootstrap, &world.topic, crate::PARTITIONS);
        let caught_up = wait_until(Duration::from_secs(180), || world.committed() == ends);
        eprintln!(
            "group: a caught up at {:.1} s",
            started.elapsed().as_secs_f64()
        );
        signal(&run_a, "TERM");
        let status = wait_exit(&mut run_a, Duration::from_secs(30));
        assert!(
            caught_up,
            "a caught up: committed {:?}, ends {ends:?}\n{}",
            world.committed(),
            tail(&a.log())
        );
        assert!(
            status.is_some_and(|s| s.success()),
            "a exits 0: {status:?}\n{}",
            tail(&a.log())
        );
    });
    let restores: usize = [&a, &b, &c]
        .iter()
        .map(|i| count(i, "restore finished"))
        .sum();
    let logs: Vec<String> = [&a, &b, &c].iter().map(|i| i.log()).collect();
    // ORDERLY_E2E_KEEP_LOGS=DIR keeps the three logs for reading afterwards.
    if let Ok(dir) = std::env::var("ORDERLY_E2E_KEEP_LOGS") {
        for (name, log) in ["a", "b", "c"].iter().zip(&logs) {
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(std::path::Path::new(&dir).join(format!("{name}.log")), log);
        }
    }
    let seen = pauses(&batches(&logs));
    let ((moved_median, moved_max), (_, stayed_max)) =
        (median_max(&seen.moved), median_max(&seen.stayed_longest));
    eprintln!(
        "group: pauses: {} partition moves, gap between the old owner's last batch and the new owner's first: median \
         {moved_median:.2} s, max {moved_max:.2} s (the SIGKILL's moves wait for the session timeout); longest gap of a \
         partition on one instance: {stayed_max:.2} s",
        seen.moved.len()
    );
    assert!(
        seen.moved.len() >= 4,
        "partitions moved between instances: {seen:?}"
    );
    let mismatches = world.verify(&a, &expected);
    eprintln!(
        "group: {} records ({} applied, {} duplicates, {} stale, {} dead-lettered), {restores} restores, {mismatches} \
         mismatches, {:.1} s",
        records.len(),
        expected.outcomes.applied,
        expected.outcomes.duplicates,
        expected.outcomes.stale,
        expected.outcomes.dead_lettered,
        started.elapsed().as_secs_f64()
    );
    assert!(
        count(&a, "restore finished") > 0,
        "a restored the partitions that came back to it\n{}",
        tail(&a.log())
    );
}

/// A crash after half of a write-out's changelog records were acknowledged
/// and before its checkpoint record was sent; then a fresh store in the same
/// group restores from the changelog and finishes: state and counters exact.
#[test]
fn torn_changelog_tail_is_not_restored() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 6_000,
        poison_rate: 0.002,
        seed: 77,
        ..Default::default()
    });
    let settings = "batch_max_records = 500\ncommit_interval_ms = 100";
    let first = world.instance(settings);
    let (now, later) = records.split_at(records.len() / 2);
    let (early, rest) = now.split_at(now.len() / 2);
    world.produce(early);
    // The 5th write-out tears. Every partition writes out (and commits) the
    // early records first, so by the time the rest arrives each one has a
    // complete write-out in the changelog, and the 5th write-out is some
    // partition's second: the changelog holds complete write-outs to
    // restore besides the torn tail. (The 4th could be every partition's
    // first: each write-out is a transaction that commits only after all
    // four had started.)
    let mut child = first.spawn_run(Some("torn_changelog:5"));
    let wrote_out = wait_until(Duration::from_secs(60), || {
        world.committed().values().all(|&offset| offset > 0)
            || child.try_wait().ok().flatten().is_some()
    });
    assert!(
        wrote_out,
        "every partition wrote out the early records\n{}",
        tail(&first.log())
    );
    world.produce(rest);
    let status = wait_exit(&mut child, Duration::from_secs(120));
    assert!(
        status.is_some_and(|s| !s.success()),
        "aborted at the torn write-out\n{}",
        tail(&first.log())
    );
    assert!(
        first
            .log()
            .contains("fault injection: aborting at torn_changelog"),
        "{}",
        tail(&first.log())
    );
    world.produce(later);

    let fresh = world.instance(settings);
    world.finish(&fresh);
    let log = fresh.log();
    assert!(
        log.contains("restore finished"),
        "the fresh store was restored\n{}",
        tail(&log)
    );
    world.verify(&fresh, &expected);
}

/// Static membership (`group.instance.id`) for rolling restarts: a member
/// that restarts within the session timeout gets its own partitions back,
/// the other member's assignment does not change, and nothing is restored
/// (its store is current).
#[test]
fn a_static_member_restarts_without_a_rebalance_or_a_restore() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 4_000,
        poison_rate: 0.002,
        seed: 31,
        ..Default::default()
    });
    let member = |id: &str| {
        world.instance(&format!(
            "commit_interval_ms = 200\n[kafka.librdkafka]\n\"group.instance.id\" = \"{id}\""
        ))
    };
    let (x, y) = (member("x"), member("y"));
    let reaper = Reaper::default();
    let (first, second) = records.split_at(records.len() / 2);
    world.produce(first);
    let mut run_x = reaper.watch(x.spawn_run(None));
    let mut run_y = reaper.watch(y.spawn_run(None));
    let both = wait_until(Duration::from_secs(60), || {
        count(&x, "partition assigned") > 0 && count(&y, "partition assigned") > 0
    });
    assert!(
        both,
        "both members got partitions\n{}\n---\n{}",
        tail(&x.log()),
        tail(&y.log())
    );
    // Caught up on the first half (on Apache Kafka the two members can finish
    // it before a wait for "progress" even starts).
    let first_ends = crate::support::end_offsets(&world.bootstrap, &world.topic, crate::PARTITIONS);
    let first_done = wait_until(Duration::from_secs(90), || world.committed() == first_ends);
    assert!(
        first_done,
        "two static members caught up\n{}\n---\n{}",
        tail(&x.log()),
        tail(&y.log())
    );
    // Caught up can come from y alone (it committed a partition before the
    // group gave it to x): x's store is current only once x has restored
    // and is consuming every partition it holds, which /readyz says.
    let x_address = x.wait_http(0);
    let x_ready = wait_until(Duration::from_secs(60), || {
        crate::observe::http_get(&x_address, "/readyz").is_ok_and(|(status, _)| status == 200)
    });
    assert!(
        x_ready,
        "x restored and consuming its partitions\n{}",
        tail(&x.log())
    );
    let assigned = |i: &Instance| -> Vec<String> {
        i.log()
            .lines()
            .filter(|l| l.contains("partition assigned"))
            .filter_map(|l| l.split("partition=").nth(1))
            .map(|p| p.split_whitespace().next().unwrap_or("").to_string())
            .collect()
    };
    let x_before = assigned(&x);
    // What x holds now: its first assignment can have been every partition
    // (when it joined before y), some of which moved to y since.
    let x_holds = held(&x_address);
    assert!(
        !x_holds.is_empty(),
        "x holds partitions\n{}",
        tail(&x.log())
    );
    let (y_assigned, y_revoked) = (
        count(&y, "partition assigned"),
        count(&y, "partitions revoked"),
    );

    signal(&run_x, "TERM");
    let status = wait_exit(&mut run_x, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "x exits 0: {status:?}\n{}",
        tail(&x.log())
    );
    let x_restores = count(&x, "restore finished");
    run_x = reaper.watch(x.spawn_run(None));
    world.produce(second);
    let back = wait_until(Duration::from_secs(30), || {
        assigned(&x).len() >= x_before.len() + x_holds.len()
    });
    assert!(back, "x got partitions back\n{}", tail(&x.log()));
    let ends = crate::support::end_offsets(&world.bootstrap, &world.topic, crate::PARTITIONS);
    let caught_up = wait_until(Duration::from_secs(120), || world.committed() == ends);
    assert!(
        caught_up,
        "caught up\n{}\n---\n{}",
        tail(&x.log()),
        tail(&y.log())
    );
    let x_after = assigned(&x);
    eprintln!("static: x {x_before:?} -> {x_after:?}; y assigned {y_assigned} -> {}, revoked {y_revoked} -> {}", count(&y, "partition assigned"), count(&y, "partitions revoked"));
    let mut x_back = x_after[x_before.len()..].to_vec();
    x_back.sort();
    assert_eq!(x_back, x_holds, "x got the same partitions back");
    assert_eq!(
        count(&y, "partitions revoked"),
        y_revoked,
        "y lost nothing\n{}",
        tail(&y.log())
    );
    assert_eq!(
        count(&y, "partition assigned"),
        y_assigned,
        "y got nothing new\n{}",
        tail(&y.log())
    );
    assert_eq!(
        count(&x, "restore finished"),
        x_restores,
        "x's store was current\n{}",
        tail(&x.log())
    );
    for (name, child, instance) in [("x", &mut run_x, &x), ("y", &mut run_y, &y)] {
        signal(child, "TERM");
        let status = wait_exit(child, Duration::from_secs(30));
        assert!(
            status.is_some_and(|s| s.success()),
            "{name} exits 0: {status:?}\n{}",
            tail(&instance.log())
        );
    }
    // Each partition's exact counters are in the store of its last owner
    // (the one whose checkpoint reached the end; an earlier owner's tree of
    // a partition that moved at the first join is behind).
    let (sx, sy) = (x.stats(), y.stats());
    let mut sums = [0u64; 4];
    for (partition, end) in &ends {
        let current = [&sx, &sy]
            .iter()
            .flat_map(|s| s["partitions"].as_array().cloned().unwrap_or_default())
            .find(|p| {
                p["partition"].as_i64() == Some(i64::from(*partition))
                    && p["next_offset"].as_i64() == Some(*end)
            });
        let Some(current) = current else {
            panic!("partition {partition}: no store reached {end}\n{sx}\n{sy}")
        };
        for (i, key) in ["applied", "duplicates", "stale", "dead_lettered"]
            .iter()
            .enumerate()
        {
            sums[i] += current[*key].as_u64().unwrap_or(0);
        }
    }
    assert_eq!(
        sums,
        [
            expected.outcomes.applied,
            expected.outcomes.duplicates,
            expected.outcomes.stale,
            expected.outcomes.dead_lettered
        ]
    );
}

/// The partitions an instance holds, from its `/api/status`, sorted.
fn held(address: &str) -> Vec<String> {
    let (status, body) = crate::observe::http_get(address, "/api/status")
        .unwrap_or_else(|e| panic!("GET /api/status: {e}"));
    assert_eq!(status, 200, "GET /api/status: {body}");
    let json: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("status JSON: {e}: {body}"));
    let mut partitions: Vec<String> = json["partitions"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|row| row["partition"].as_i64())
                .map(|p| p.to_string())
                .collect()
        })
        .unwrap_or_default();
    partitions.sort();
    partitions
}
