//! One instance under stress: the crash drill (SIGKILLs and aborts at
//! chosen points, the changelog on), SIGTERM during load, a broker restart.

use std::time::{Duration, Instant};

use rand::Rng;

use orderly::testkit::orders::workload::{PlannedRecord, WorkloadSpec};

use crate::support::{signal, wait_exit, wait_until, Instance};
use crate::world::{tail, Broker, Counts, World};
use crate::{required_env, SESSION_TIMEOUT_MS, SHORT_SESSION_TIMEOUT_MS};

/// 100,000+ events over 4 partitions; the processor is killed with SIGKILL
/// at random moments at least 20 times while it works, and aborted at each
/// chosen crash point; restarted each time. The end state is exact.
#[test]
fn crash_drill() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"))
        .with_session_timeout(SHORT_SESSION_TIMEOUT_MS);
    let spec = WorkloadSpec {
        orders: 33_000,
        poison_rate: 0.002,
        seed: 2026,
        ..Default::default()
    };
    let faults = [
        "after_dlq:1",
        "after_batch:2",
        "after_flush:2",
        "after_batch:5",
        "after_flush:4",
    ];
    let (records, expected) = world.plan(&spec);
    assert!(records.len() >= 100_000, "{} records", records.len());
    let _instance = drill(
        &world,
        &records,
        Counts::from(&expected),
        "",
        &faults,
        22,
        |instance| world.verify_state(instance, &expected),
    );
    world.verify_outbox(&expected, true);
}

/// The crash drill in `exactly_once`: each write-out one transaction; the
/// process dies inside open transactions (half their records sent), after
/// a commit before the store is written or flushed, and by SIGKILL at
/// random. State, counters and dead letters exact, and on the output topic,
/// read `read_committed`, every expected status change exactly once.
#[test]
fn crash_drill_exactly_once() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"))
        .with_session_timeout(SHORT_SESSION_TIMEOUT_MS);
    let spec = WorkloadSpec {
        orders: 20_000,
        poison_rate: 0.002,
        seed: 2027,
        ..Default::default()
    };
    // Counts a chunk reaches in every cycle (a transaction per write-out
    // makes write-outs fewer and larger than at_least_once's).
    let faults = [
        "torn_changelog:1",
        "after_batch:2",
        "after_flush:2",
        "torn_changelog:3",
        "after_batch:3",
    ];
    let (records, expected) = world.plan(&spec);
    assert!(records.len() >= 60_000, "{} records", records.len());
    let _instance = drill(
        &world,
        &records,
        Counts::from(&expected),
        "guarantee = \"exactly_once\"\n",
        &faults,
        15,
        |instance| world.verify_state(instance, &expected),
    );
    world.verify_exactly_once(&expected);
}

/// Produces `records` (of any entity the world's instances process) in
/// chunks while one instance (`settings` before the drill's own) runs,
/// aborting it at each of `faults` and SIGKILLing it `kills` times at random
/// moments, then runs it to the end and checks it with `verify` (which
/// asserts, and returns the state mismatches it found, for the summary).
/// `expected` is what the records imply, for the summary. Returns the
/// instance, for further checks.
pub fn drill(
    world: &World,
    records: &[PlannedRecord],
    expected: Counts,
    settings: &str,
    faults: &[&str],
    kills: usize,
    verify: impl FnOnce(&Instance) -> usize,
) -> Instance {
    // Frequent write-outs, so the crash points and kills land between many
    // of them.
    let instance = world.instance(&format!(
        "{settings}batch_max_records = 500\ncommit_interval_ms = 20"
    ));
    let drill_started = Instant::now();
    // One producer for the whole drill: a producer made and dropped per
    // piece costs about half a second each, which is most of a SIGKILL
    // cycle's length and none of what it tests.
    let producer = world.producer();

    // Chosen crash points first, then random SIGKILLs; records are produced
    // in chunks while the processor runs, so kills land mid-work.
    let cycles = faults.len() + kills;
    let chunk = records.len().div_ceil(cycles);
    let mut chunks = records.chunks(chunk);
    let mut rng = rand::thread_rng();
    let (mut sigkills, mut mid_work_kills, mut aborts, mut restarts) = (0, 0, 0, 0);
    let mut produced = 0i64;
    for cycle in 0..cycles {
        let before = world.committed_total();
        let fault = faults.get(cycle).copied();
        let mut child = instance.spawn_run(fault);
        restarts += 1;
        // A SIGKILL cycle gets half its chunk before the kill is armed and
        // half just before it, so the kill lands while records are in flight.
        let part = chunks.next().unwrap_or(&[]);
        let (now, later) = if fault.is_some() {
            (part, &part[..0])
        } else {
            part.split_at(part.len() / 2)
        };
        world.produce_with(&producer, now);
        produced += now.len() as i64;
        match fault {
            Some(fault) => {
                let status = wait_exit(&mut child, Duration::from_secs(120));
                assert!(
                    status.is_some_and(|s| !s.success()),
                    "{fault}: aborted\n{}",
                    tail(&instance.log())
                );
                aborts += 1;
            }
            None => {
                // Kill once it is demonstrably working, at a random moment.
                let progressed =
                    wait_until(Duration::from_secs(60), || world.committed_total() > before);
                assert!(
                    progressed,
                    "cycle {cycle}: no progress\n{}",
                    tail(&instance.log())
                );
                // The rest of the chunk streams in small pieces; the kill
                // lands at a random moment while it is still arriving, so it
                // interrupts a processor with work in flight.
                let delay = Duration::from_millis(rng.gen_range(0..250));
                let in_flight = std::thread::scope(|scope| {
                    let feeding = scope.spawn(|| {
                        for piece in later.chunks(later.len().div_ceil(10).max(1)) {
                            world.produce_with(&producer, piece);
                            std::thread::sleep(Duration::from_millis(30));
                        }
                    });
                    std::thread::sleep(delay);
                    let in_flight = !feeding.is_finished()
                        || world.committed_total() < produced + later.len() as i64;
                    signal(&child, "KILL");
                    feeding.join().expect("feeding thread");
                    in_flight
                });
                produced += later.len() as i64;
                let status = wait_exit(&mut child, Duration::from_secs(10));
                assert!(status.is_some(), "SIGKILL ends the process");
                sigkills += 1;
                if in_flight {
                    mid_work_kills += 1;
                }
            }
        }
        eprintln!(
            "cycle {cycle}: {} at {:.1} s, committed {}",
            fault.unwrap_or("SIGKILL"),
            drill_started.elapsed().as_secs_f64(),
            world.committed_total()
        );
    }
    for part in chunks {
        world.produce_with(&producer, part);
    }
    let finish = world.finish(&instance);
    restarts += 1;
    let mismatches = verify(&instance);
    let aborted_points = instance
        .log()
        .matches("fault injection: aborting at")
        .count();
    eprintln!(
        "crash drill: {} events ({} applied, {} duplicates, {} stale, {} dead-lettered), {sigkills} SIGKILLs ({mid_work_kills} with work left), \
         {aborts} aborts at chosen points ({aborted_points} logged), {restarts} starts, {mismatches} mismatches, \
         final catch-up {:.1} s, drill {:.1} s",
        records.len(),
        expected.applied,
        expected.duplicates,
        expected.stale,
        expected.dead_lettered,
        finish.as_secs_f64(),
        drill_started.elapsed().as_secs_f64()
    );
    assert!(
        mid_work_kills >= kills.saturating_sub(2),
        "only {mid_work_kills} of {sigkills} SIGKILLs landed while records were left to process"
    );
    assert_eq!(aborted_points, faults.len());
    instance
}

/// SIGTERM during load: exits 0 within the configured deadline, and what it
/// processed is flushed and committed (the store's checkpoints equal the
/// group's committed offsets).
#[test]
fn sigterm_during_load_drains_flushes_and_commits() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, _) = world.plan(&WorkloadSpec {
        orders: 30_000,
        seed: 5,
        ..Default::default()
    });
    let instance = world.instance("batch_max_records = 200");
    let mut child = instance.spawn_run(None);
    // The load arrives over several seconds while the processor runs, so the
    // signal lands mid-load.
    let (took, status) = std::thread::scope(|scope| {
        let producing = scope.spawn(|| {
            for chunk in records.chunks(2_000) {
                world.produce(chunk);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let progressed = wait_until(Duration::from_secs(60), || world.committed_total() > 0);
        assert!(progressed, "no progress\n{}", tail(&instance.log()));
        let signalled = Instant::now();
        signal(&child, "TERM");
        let status = wait_exit(&mut child, Duration::from_secs(30));
        let took = signalled.elapsed();
        producing.join().expect("producer thread");
        (took, status)
    });
    assert!(
        status.is_some_and(|s| s.success()),
        "exit 0: {status:?}\n{}",
        tail(&instance.log())
    );
    let deadline = Duration::from_millis(SESSION_TIMEOUT_MS / 2);
    assert!(
        took < deadline + Duration::from_secs(2),
        "stopped in {took:?}, deadline {deadline:?}"
    );
    let stats = instance.stats();
    let committed = world.committed();
    let mut processed = 0;
    for p in stats["partitions"].as_array().expect("partitions") {
        let partition = p["partition"].as_i64().unwrap() as i32;
        let next = p["next_offset"].as_i64().unwrap();
        // A partition that processed nothing yet has no committed offset.
        let committed = committed
            .get(&partition)
            .copied()
            .filter(|o| *o >= 0)
            .unwrap_or(0);
        assert_eq!(
            committed, next,
            "partition {partition}: committed equals the durable checkpoint"
        );
        processed += next;
    }
    eprintln!(
        "sigterm: stopped in {took:?} after processing {processed} of {} records",
        records.len()
    );
    assert!(
        (processed as usize) < records.len(),
        "the signal landed during the load"
    );
}

/// A broker (sqlite storage) stopped for several seconds mid-load and
/// started again: the processor logs the outage, keeps its state, resumes,
/// and the final checks hold.
#[test]
fn broker_restart_mid_load() {
    let data = tempfile::tempdir().expect("tempdir");
    let mut broker = Broker::start(data.path().join("kafka"));
    let world = World::new(broker.bootstrap.clone());
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 12_000,
        poison_rate: 0.002,
        seed: 99,
        ..Default::default()
    });
    let half = records.len() / 2;
    world.produce(&records[..half]);
    let instance = world.instance("batch_max_records = 200");
    let mut child = instance.spawn_run(None);
    let progressed = wait_until(Duration::from_secs(60), || world.committed_total() > 0);
    assert!(progressed, "no progress\n{}", tail(&instance.log()));

    broker.stop();
    std::thread::sleep(Duration::from_secs(6));
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "processor survives the outage\n{}",
        tail(&instance.log())
    );
    broker.restart();
    world.produce(&records[half..]);
    let caught_up = world.caught_up(Duration::from_secs(240));
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    assert!(caught_up, "caught up after the restart\n{}", tail(&log));
    assert!(
        status.is_some_and(|s| s.success()),
        "exit 0: {status:?}\n{}",
        tail(&log)
    );
    assert!(
        log.contains("kafka unreachable")
            || log.contains("a kafka broker connection failed")
            || log.contains("offset commit failed"),
        "the outage is logged\n{}",
        tail(&log)
    );
    world.verify(&instance, &expected);
}
