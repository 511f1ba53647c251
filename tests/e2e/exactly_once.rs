//! `processing.guarantee = "exactly_once"` on Apache Kafka: a plain run,
//! and a zombie (a member paused past its session timeout while it holds
//! undecided-to-disk work) fenced by the new owner, in both guarantees.

use std::time::Duration;

use orderly::testkit::orders::workload::WorkloadSpec;

use crate::observe::{http_get, scrape};
use crate::support::{end_offsets, signal, wait_exit, wait_until, Reaper};
use crate::world::{tail, World};
use crate::{required_env, PARTITIONS, SHORT_SESSION_TIMEOUT_MS};

const EXACTLY_ONCE: &str = "guarantee = \"exactly_once\"\n";

/// One instance over a workload with duplicates, reorderings and poison
/// records: exact state and counters, each status change once on the
/// output topic and one letter per poison record, both read
/// `read_committed`.
#[test]
fn exactly_once_run_is_exact_and_writes_each_record_once() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 3_000,
        poison_rate: 0.005,
        seed: 190,
        ..Default::default()
    });
    world.produce(&records);
    let instance = world.instance(&format!("{EXACTLY_ONCE}commit_interval_ms = 200"));
    world.finish(&instance);
    world.verify_state(&instance, &expected);
    world.verify_exactly_once(&expected);
    assert!(
        instance.log().contains("transactional producer ready"),
        "{}",
        tail(&instance.log())
    );
}

fn decided(address: &str) -> f64 {
    crate::observe::total(&scrape(address), "orderly_records_total", "")
}

/// A member holds decided, unwritten work (a long commit interval) when it
/// is stopped with SIGSTOP past its session timeout. The group gives its
/// partitions to a second member, which processes on. Then the first is
/// resumed with SIGCONT. Returns what the final checks need.
fn zombie(guarantee: &str) -> Zombie {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"))
        .with_session_timeout(SHORT_SESSION_TIMEOUT_MS);
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 4_000,
        poison_rate: 0.003,
        seed: 191,
        ..Default::default()
    });
    let (first, rest) = records.split_at(records.len() / 3);
    let (second, third) = rest.split_at(rest.len() / 2);
    let reaper = Reaper::default();
    // A commit interval far beyond the pause's start, and no early
    // write-out once caught up: what the zombie decides before it is
    // stopped is still in its cache.
    let a = world.instance(&format!(
        "{guarantee}commit_interval_ms = 30000\ncaught_up_write_ms = 0\nbatch_max_wait_ms = 5"
    ));
    let b = world.instance(&format!("{guarantee}commit_interval_ms = 200"));
    world.produce(first);
    let mut run_a = reaper.watch(a.spawn_run(None));
    let address_a = a.wait_http(0);
    let ready = wait_until(Duration::from_secs(60), || {
        http_get(&address_a, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(ready, "a ready\n{}", tail(&a.log()));
    // a decides the first third (and writes it out only in 30 s, or on a
    // revoke); b is not there yet.
    let all_decided = wait_until(Duration::from_secs(60), || {
        decided(&address_a) >= first.len() as f64
    });
    assert!(all_decided, "a decided the first third\n{}", tail(&a.log()));
    let committed_before = world.committed_total();
    signal(&run_a, "STOP");
    eprintln!(
        "zombie: a stopped with {} records decided, {committed_before} committed",
        first.len()
    );

    // b joins; a's session times out; b gets every partition, restores
    // (a wrote nothing of the first third) and processes everything.
    let mut run_b = reaper.watch(b.spawn_run(None));
    let address_b = b.wait_http(0);
    world.produce(second);
    let caught_up = world.caught_up(Duration::from_secs(120));
    assert!(
        caught_up,
        "b caught up while a was stopped\n{}",
        tail(&b.log())
    );

    // a resumes: its tasks find their write-out due and try to write. b is
    // idle (caught up, nothing unwritten), so whatever reaches the
    // changelog until a has rejoined and is ready again is a's.
    let changelog = format!("{}-changelog", world.topic);
    let before = end_offsets(&world.bootstrap, &changelog, PARTITIONS);
    let assigned_before = a.log().matches("partition assigned").count();
    signal(&run_a, "CONT");
    let rejoined = wait_until(Duration::from_secs(60), || {
        a.log().matches("partition assigned").count() > assigned_before
            && http_get(&address_a, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(
        rejoined,
        "a rejoined the group and is ready again
{}",
        tail(&a.log())
    );
    std::thread::sleep(Duration::from_secs(2));
    let after = end_offsets(&world.bootstrap, &changelog, PARTITIONS);
    // The records of a's process (header orderly.writer, its client id);
    // b's own write-outs in the window (outbox deletions, a revoke's drain)
    // are not the zombie's.
    let a_writer = crate::support::client_id_of(&run_a);
    let window: Vec<_> = (0..PARTITIONS)
        .flat_map(|p| {
            crate::support::read_range(&world.bootstrap, &changelog, p, before[&p], after[&p])
        })
        .collect();
    let visible = window
        .iter()
        .filter(|r| r.headers.get("orderly.writer") == Some(&a_writer))
        .count();
    let spanned: i64 = (0..PARTITIONS).map(|p| after[&p] - before[&p]).sum();
    eprintln!(
        "zombie: after SIGCONT the changelog grew by {spanned} offsets, {} records visible read_committed, {visible} of them written by the zombie",
        window.len()
    );
    world.produce(third);
    let settled = world.caught_up(Duration::from_secs(120));
    assert!(
        settled,
        "the group caught up after a resumed\n{}\n---\n{}",
        tail(&a.log()),
        tail(&b.log())
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        run_a.try_wait().expect("try_wait").is_none(),
        "a carries on after it was fenced\n{}",
        tail(&a.log())
    );
    // a leaves; b takes every partition and holds the whole state.
    signal(&run_a, "TERM");
    let status = wait_exit(&mut run_a, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "a exits 0: {status:?}\n{}",
        tail(&a.log())
    );
    let b_owns_all = wait_until(Duration::from_secs(60), || {
        scrape(&address_b)
            .get("orderly_assigned_partitions")
            .copied()
            == Some(PARTITIONS as f64)
            && http_get(&address_b, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(b_owns_all, "b owns every partition\n{}", tail(&b.log()));
    signal(&run_b, "TERM");
    let status = wait_exit(&mut run_b, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "b exits 0: {status:?}\n{}",
        tail(&b.log())
    );
    Zombie {
        a_log: a.log(),
        world,
        expected,
        b,
        visible,
    }
}

struct Zombie {
    world: World,
    expected: orderly::testkit::orders::workload::Expectation,
    a_log: String,
    /// The new owner, holding every partition at the end.
    b: crate::support::Instance,
    /// Changelog records visible (`read_committed`) that the resumed zombie
    /// wrote.
    visible: usize,
}

/// exactly_once: the resumed zombie's write-out is fenced (its producer's
/// epoch was bumped by the new owner's `init_transactions`), nothing it
/// writes becomes visible, it drops the partitions' work and rejoins, and
/// the process carries on. State, counters, dead letters and the output
/// topic are exact.
#[test]
fn a_zombie_is_fenced_under_exactly_once() {
    let Zombie {
        world,
        expected,
        a_log,
        b,
        visible,
    } = zombie(EXACTLY_ONCE);
    assert!(
        a_log.contains("partition fenced"),
        "a's late write-out was fenced\n{}",
        tail(&a_log)
    );
    assert_eq!(
        visible, 0,
        "nothing the zombie wrote after it resumed is visible to read_committed readers"
    );
    world.verify_state(&b, &expected);
    world.verify_exactly_once(&expected);
}

/// at_least_once, the same pause: the changelog's write-outs are
/// transactions of the partition's producer under this guarantee too, so
/// the new owner's `init_transactions` fenced the zombie: nothing it writes
/// after it resumed reaches the changelog (read `read_committed`). State
/// and counters are exact, and every status change is on the output topic
/// at least once; repeats are counted, not forbidden.
#[test]
fn a_zombie_under_at_least_once_corrupts_nothing() {
    let Zombie {
        world,
        expected,
        a_log,
        b,
        visible,
    } = zombie("");
    assert_eq!(
        visible, 0,
        "nothing the paused member wrote after it resumed reached the changelog"
    );
    // Which of the two stops it is a race on resume: the task's write-out
    // is fenced, or librdkafka's session timer fires first and the lost
    // revoke drops the work before the task writes.
    let fenced = a_log.contains("partition fenced");
    let dropped_on_lost = a_log.contains("partition lost (this member was presumed dead)");
    assert!(
        fenced || dropped_on_lost,
        "the write-out was fenced, or the lost revoke dropped the work\n{}",
        tail(&a_log)
    );
    eprintln!(
        "zombie at_least_once: {visible} changelog records written by the zombie after it resumed, {} revokes logged, \
         fenced={fenced} dropped_on_lost={dropped_on_lost}",
        a_log.matches("partitions revoked").count()
    );
    world.verify_state(&b, &expected);
    world.verify_outbox(&expected, false);
}
