//! A network cut between one member and the broker: state never moves back
//! (guarantee 1) when what the cut member held is delivered after the group
//! moved its partitions, under either guarantee.
//!
//! The test runs a broker of its own with a proxy listener (`kafka/broker
//! start --proxy-listener`) and member a reaches it only through a
//! [`CutProxy`]: its consumer, its partitions' transactional producers and
//! its other clients all bootstrap at the proxy, and the broker advertises
//! the proxy's address to them (its schema registry, the test's double, it
//! reaches directly). Member b and the test's own clients use the broker's
//! normal listener.
//!
//! a holds its third write-out with the records handed to its producer and
//! not yet acknowledged (fault point `stop_queued`: the process stops
//! itself, so the cut finds the write-out queued and its transaction open);
//! the proxy is cut (a blackhole: nothing forwarded either way, every socket
//! left open, new connections held), the broker's session timeout moves
//! a's partitions to b, which restores them and processes past a's held
//! write-out. Then a resumes still cut off: its write-out's commit and its
//! heartbeats go nowhere, and only its own timeouts tell it (its consumer
//! declares the assignment lost). The cut heals: the proxy forwards what it
//! held and librdkafka sends what it kept, late, after b's write-outs; a
//! rejoins and the group processes the rest. A member with an empty store
//! then restores every partition from the changelog the broker compacted
//! meanwhile: exact state, durable counters, dead letters and output topic
//! ([`restore_fresh_and_verify`]).

use std::time::{Duration, Instant};

use orderly::testkit::orders::workload::WorkloadSpec;

use crate::kafka_native::create_compacting_topic;
use crate::late_writes::{restore_fresh_and_verify, EXACTLY_ONCE};
use crate::observe::http_get;
use crate::proxy::CutProxy;
use crate::support::{end_offsets, signal, wait_until, Reaper};
use crate::world::{stop, tail, Broker, World};
use crate::{PARTITIONS, SHORT_SESSION_TIMEOUT_MS};

#[test]
fn a_member_cut_off_the_broker_with_its_write_out_queued_moves_no_state_back() {
    network_cut("", 431);
}

#[test]
fn a_member_cut_off_the_broker_with_its_transaction_open_moves_no_state_back_under_exactly_once() {
    network_cut(EXACTLY_ONCE, 432);
}

/// How long a stays cut off after its consumer declared the assignment
/// lost: its partition tasks are dropped by then (the revoke's drain
/// deadline is half the session timeout), while its transactional
/// producers still hold the write-out's records and wait on their commit
/// (30 s), so what they kept goes out on the heal.
const CUT_AFTER_LOST: Duration = Duration::from_secs(4);

/// See the module doc.
fn network_cut(guarantee: &str, seed: u64) {
    let started = Instant::now();
    let data = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start_with_proxy_listener(data.path().join("kafka"));
    let proxy = CutProxy::start(broker.proxy_advertised(), broker.proxy_listener());
    let world = World::new(broker.bootstrap.clone()).with_session_timeout(SHORT_SESSION_TIMEOUT_MS);
    let changelog = format!("{}-changelog", world.topic);
    create_compacting_topic(&world.bootstrap, &changelog);
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 3_000,
        poison_rate: 0.003,
        seed,
        ..Default::default()
    });
    let (first, rest) = records.split_at(records.len() / 3);
    let (second, third) = rest.split_at(rest.len() / 2);
    let reaper = Reaper::default();
    let settings = format!(
        "{guarantee}commit_interval_ms = 100\nbatch_max_records = 100\nbatch_max_wait_ms = 5"
    );
    let label = if guarantee.is_empty() {
        "network cut"
    } else {
        "network cut, exactly_once"
    };

    // a, through the proxy, is ready (every partition's producer
    // initialised and restored) before the input comes, and stops itself
    // inside its third write-out.
    let a = world.instance_at(&proxy.address, &settings);
    let mut run_a = reaper.watch(a.spawn_run(Some("stop_queued:3")));
    let address_a = a.wait_http(0);
    let ready = wait_until(Duration::from_secs(90), || {
        http_get(&address_a, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(ready, "a ready\n{}", tail(&a.log()));
    world.produce(first);
    let stopped = wait_until(Duration::from_secs(90), || {
        a.log().contains("stopping at stop_queued")
    });
    assert!(
        stopped,
        "a stopped itself at stop_queued\n{}",
        tail(&a.log())
    );
    let through_proxy = proxy.connections();
    assert!(through_proxy > 0, "a's clients connect through the proxy");
    proxy.cut();
    let cut_at = Instant::now();

    // b takes every partition once a's session times out at the broker,
    // restores what reached the changelog (fencing a's producers) and
    // processes the second third: past a's held write-out.
    let b = world.instance(&settings);
    let mut run_b = reaper.watch(b.spawn_run(None));
    world.produce(second);
    let caught_up = world.caught_up(Duration::from_secs(120));
    assert!(
        caught_up,
        "b caught up while a was cut off\n{}",
        tail(&b.log())
    );

    // a resumes, still cut off: nothing answers it and nothing closes its
    // connections. Its consumer finds out by its own session timeout.
    signal(&run_a, "CONT");
    let resumed = wait_until(Duration::from_secs(30), || {
        a.log().contains("resumed at stop_queued")
    });
    assert!(resumed, "a resumed\n{}", tail(&a.log()));
    let noticed = wait_until(Duration::from_secs(30), || {
        a.log()
            .lines()
            .any(|l| l.contains("partitions revoked") && l.contains("lost=true"))
    });
    assert!(
        noticed,
        "a's consumer declared its assignment lost while cut off\n{}",
        tail(&a.log())
    );
    std::thread::sleep(CUT_AFTER_LOST);

    // The heal: what the proxy held goes out, then what librdkafka kept.
    // b is idle (caught up), so what reaches the changelog until a has
    // rejoined and is ready again is a's late write-out, if anything.
    let before = end_offsets(&world.bootstrap, &changelog, PARTITIONS);
    let assigned_before = a.log().matches("partition assigned").count();
    let held = proxy.held_upstream();
    let cut_for = cut_at.elapsed();
    proxy.heal();
    let rejoined = wait_until(Duration::from_secs(90), || {
        a.log().matches("partition assigned").count() > assigned_before
            && http_get(&address_a, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(
        rejoined,
        "a rejoined the group and is ready again after the heal\n{}",
        tail(&a.log())
    );
    // What the test is about happened: a's held transactional work reached
    // the broker after the heal and was refused (the epoch b's
    // `init_transactions` bumped), as librdkafka logs it, before a's new
    // producers (after it rejoined) fenced its old ones in turn.
    let refused = a
        .log()
        .split("resumed at stop_queued")
        .nth(1)
        .and_then(|after| after.split("transactional producer ready").next())
        .map_or(0, |window| {
            window.matches("fenced by a newer instance").count()
        });
    assert!(
        refused > 0,
        "a's held write-out reached the broker after the heal and was refused\n{}",
        tail(&a.log())
    );
    std::thread::sleep(Duration::from_secs(2));
    let after = end_offsets(&world.bootstrap, &changelog, PARTITIONS);
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
        "{label}: cut for {:.0} s, holding {held} bytes from a; after the heal the changelog grew by {spanned} offsets, \
         {} records visible read_committed, {visible} of them a's",
        cut_for.as_secs_f64(),
        window.len()
    );
    assert!(
        held > 0,
        "the cut held a's requests (heartbeats, its write-out) until the heal: its clients reach the broker through \
         the proxy"
    );
    assert_eq!(
        visible, 0,
        "nothing a held through the cut became visible in the changelog"
    );

    // The last third, processed by the group; a carried on throughout.
    world.produce(third);
    let settled = world.caught_up(Duration::from_secs(120));
    assert!(
        settled,
        "the group caught up after the heal\n{}\n---\n{}",
        tail(&a.log()),
        tail(&b.log())
    );
    assert!(
        run_a.try_wait().expect("try_wait").is_none(),
        "a carries on after the cut\n{}",
        tail(&a.log())
    );
    std::thread::sleep(Duration::from_secs(1));
    stop(&mut run_a, &a);
    stop(&mut run_b, &b);
    let a_log = a.log();
    eprintln!(
        "{label}: a logged {refused} fenced errors after the heal ({} requests refused for an old epoch in all), {} lost revokes; \
         {through_proxy} connections through the proxy before the cut, {} in all; {:.0} s to here",
        a_log.matches("old epoch").count(),
        a_log.matches("lost=true").count(),
        proxy.connections(),
        started.elapsed().as_secs_f64()
    );
    restore_fresh_and_verify(&world, &changelog, &settings, guarantee, &expected, label);
    eprintln!("{label}: {:.0} s in all", started.elapsed().as_secs_f64());
}
