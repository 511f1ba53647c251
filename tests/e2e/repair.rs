//! `orderly repair` on Apache Kafka: a changelog partition left open by a
//! transaction no coordinator tracks (the signature of KAFKA-20734's lost
//! marker, forced here: see `orderly::testkit::leave_hanging_transaction`),
//! found, aborted and sent back to its last checkpoint before it; the
//! member whose store is ahead of that checkpoint and a fresh member that
//! restores everything from the changelog both end exact, and under
//! exactly_once no status change or dead letter is published twice.

use std::process::Output;
use std::time::Duration;

use orderly::testkit::orders::workload::WorkloadSpec;

use crate::required_env;
use crate::support::{assert_succeeded, signal, text, wait_exit, Instance};
use crate::world::{stop, tail, World};
use crate::PARTITIONS;

/// How long a member may take to process what was produced.
const WAIT: Duration = Duration::from_secs(120);

/// The changelog partition the lost marker leaves open.
const PARTITION: i32 = 1;

fn repair(instance: &Instance, args: &[&str]) -> Output {
    let mut all = vec!["repair"];
    all.extend_from_slice(args);
    instance.command(&all).output().expect("run orderly repair")
}

/// The verdict of each changelog partition, from `repair --json`.
fn verdicts(instance: &Instance) -> Vec<(String, i64)> {
    let out = repair(instance, &["--json"]);
    assert_succeeded(&out, "repair --json");
    let found: serde_json::Value = serde_json::from_slice(&out.stdout).expect("repair JSON");
    found["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .map(|p| {
            (
                p["verdict"].as_str().expect("verdict").to_string(),
                p["last_stable_offset"]
                    .as_i64()
                    .expect("last stable offset"),
            )
        })
        .collect()
}

fn repaired_partition_ends_exact(guarantee: &str, by_hand: bool) {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 2_000,
        poison_rate: 0.003,
        seed: 31,
        ..Default::default()
    });
    let settings = format!("guarantee = \"{guarantee}\"\ncommit_interval_ms = 200");
    let member = world.instance(&settings);
    let half = records.len() / 2;
    let before = member.connected_count();
    let mut child = member.spawn_run(None);
    assert!(member.wait_ready(before), "{}", tail(&member.log()));
    world.produce(&records[..half]);
    assert!(world.caught_up(WAIT), "{}", tail(&member.log()));

    // The lost marker: a transaction left open on the changelog partition
    // while the member runs; it writes on past it, so its store is ahead of
    // what a read_committed reader of the changelog sees, and a restore of
    // the partition would wait at it for ever.
    let changelog = format!("{}-changelog", world.topic);
    // At exactly_once (but for the abort by hand, which is one partition's
    // tool), the write-out's other shares lost their markers too: its
    // status change on the output partition and its pending offset commit
    // on __consumer_offsets. Left open, the output partition stops its
    // read_committed readers and the group's offset of the input
    // partition stays unstable, so no member ever starts fetching it.
    let output = format!("{}-status", world.topic);
    let all_shares = guarantee == "exactly_once" && !by_hand;
    let (also, offsets) = if all_shares {
        (
            vec![(output.as_str(), PARTITION)],
            Some((world.group.as_str(), world.topic.as_str(), PARTITION, 0)),
        )
    } else {
        (Vec::new(), None)
    };
    let start = orderly::testkit::leave_hanging_transaction_with(
        &[&world.bootstrap],
        0,
        &changelog,
        PARTITION,
        &also,
        offsets,
    )
    .expect("leave a transaction hanging");
    world.produce(&records[half..]);
    assert!(world.caught_up(WAIT), "{}", tail(&member.log()));
    stop(&mut child, &member);

    let found = verdicts(&member);
    assert_eq!(found.len(), PARTITIONS as usize, "{found:?}");
    for (partition, (verdict, stable)) in found.iter().enumerate() {
        if partition as i32 == PARTITION {
            assert_eq!(
                (verdict.as_str(), *stable),
                ("hanging", start),
                "the open transaction is found"
            );
        } else {
            assert_eq!(verdict, "clear", "partition {partition}: {found:?}");
        }
    }

    let applied = if by_hand {
        // An operator who aborted it with Kafka's own tool first (or a
        // repair interrupted after its abort) finishes with --after-abort.
        let aborted = std::process::Command::new(crate::world::broker_script())
            .args([
                "tool",
                "transactions",
                "--bootstrap-server",
                &world.bootstrap,
            ])
            .args([
                "abort",
                "--topic",
                &changelog,
                "--partition",
                &PARTITION.to_string(),
            ])
            .args(["--start-offset", &start.to_string()])
            .output()
            .expect("kafka-transactions.sh abort");
        assert_succeeded(&aborted, "kafka-transactions.sh abort");
        assert!(
            verdicts(&member).iter().all(|(v, _)| v == "clear"),
            "nothing open after Kafka's abort"
        );
        repair(
            &member,
            &[
                "--after-abort",
                &start.to_string(),
                "--partitions",
                &PARTITION.to_string(),
            ],
        )
    } else {
        repair(
            &member,
            &["--apply", "--partitions", &PARTITION.to_string()],
        )
    };
    let said = format!("{}{}", text(&applied.stdout), text(&applied.stderr));
    assert!(applied.status.success(), "repair --apply: {said}");
    assert!(said.contains("REPAIRED"), "{said}");
    if all_shares {
        assert!(
            said.contains(&format!("{output}-{PARTITION}")) && said.contains("__consumer_offsets-"),
            "the output's and the offsets' shares are found and aborted: {said}"
        );
    }
    assert!(
        verdicts(&member).iter().all(|(v, _)| v == "clear"),
        "nothing open after the repair"
    );

    // The member whose store is ahead of the repair's checkpoint restores
    // to it and processes the partition again from there.
    world.finish(&member);
    assert!(
        member.log().contains("the partition was repaired"),
        "{}",
        tail(&member.log())
    );
    world.verify(&member, &expected);
    if guarantee == "exactly_once" {
        world.verify_exactly_once(&expected);
    }
    // A fresh member restores every partition from the changelog alone.
    let fresh = world.restore_fresh(&settings, |_| {});
    world.verify_state(&fresh, &expected);
}

#[test]
fn a_lost_marker_is_repaired_at_least_once() {
    repaired_partition_ends_exact("at_least_once", false);
}

#[test]
fn a_lost_marker_is_repaired_exactly_once() {
    repaired_partition_ends_exact("exactly_once", false);
}

#[test]
fn a_lost_marker_aborted_by_hand_is_repaired_after_the_abort() {
    repaired_partition_ends_exact("exactly_once", true);
}

/// Stops every member (those a hanging transaction stopped have exited),
/// runs `repair --apply` as `member` and checks that it repaired each of
/// `partitions`: what the one-node restart scenario does when Kafka lost a
/// marker.
pub(crate) fn stop_and_repair(
    runs: &mut [std::process::Child],
    member: &Instance,
    partitions: &[i32],
) {
    for run in runs.iter_mut() {
        signal(run, "TERM");
        if wait_exit(run, Duration::from_secs(30)).is_none() {
            signal(run, "KILL");
            let _ = wait_exit(run, Duration::from_secs(10));
        }
    }
    let repaired = repair(member, &["--apply"]);
    let said = format!("{}{}", text(&repaired.stdout), text(&repaired.stderr));
    eprintln!("scenario: orderly repair --apply:\n{said}");
    assert!(repaired.status.success(), "repair --apply: {said}");
    for partition in partitions {
        assert!(
            said.contains(&format!("partition {partition}: REPAIRED")),
            "partition {partition} repaired: {said}"
        );
    }
}

/// A marker lost on `__consumer_offsets` alone: a transaction's offset
/// commit for the group stays pending, so Kafka keeps the group's offset
/// of that input partition unstable and librdkafka never starts fetching
/// it. A member that restores the partition must not sit there saying it
/// is idle: the partition shows as stalled on the status API and
/// `/readyz` within seconds, naming the cause; once the pending commit is
/// aborted (Kafka's own tool: the changelog holds nothing of it for
/// `orderly repair` to find), the partition is fetched from its restored
/// checkpoint and ends exact.
#[test]
fn a_partition_librdkafka_never_starts_fetching_is_reported_not_idle() {
    use crate::observe::http_get;
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 800,
        poison_rate: 0.003,
        seed: 37,
        ..Default::default()
    });
    let settings = "guarantee = \"exactly_once\"\ncommit_interval_ms = 200";
    let half = records.len() / 2;
    world.produce(&records[..half]);
    let first = world.instance(settings);
    world.finish(&first);

    // The pending offset commit, with a write to a topic of its own.
    let scratch = crate::support::unique("scratch");
    crate::support::create_topics(&world.bootstrap, &[(&scratch, 1)]);
    orderly::testkit::leave_hanging_transaction_with(
        &[&world.bootstrap],
        0,
        &scratch,
        0,
        &[],
        Some((world.group.as_str(), world.topic.as_str(), PARTITION, 0)),
    )
    .expect("leave an offset commit pending");
    world.produce(&records[half..]);

    // A member with an empty store restores every partition; partition
    // PARTITION is never fetched, and says so.
    let second = world.instance(settings);
    let mut child = second.spawn_run(None);
    let address = second.wait_http(0);
    let mut seen = String::new();
    let reported = crate::support::wait_until(Duration::from_secs(60), || {
        let ready = http_get(&address, "/readyz").unwrap_or_default();
        let status = http_get(&address, "/api/status").unwrap_or_default();
        seen = format!("{}: {}\n{}", ready.0, ready.1, status.1);
        ready.0 == 503 && ready.1.contains("not fetched") && status.1.contains("fetch start")
    });
    assert!(
        reported,
        "the partition is reported stalled, not idle: {seen}\n{}",
        tail(&second.log())
    );

    // Kafka's abort of the pending commit: its partition of
    // __consumer_offsets is found with describe-producers.
    let tool = |args: &[&str]| {
        std::process::Command::new(crate::world::broker_script())
            .args([
                "tool",
                "transactions",
                "--bootstrap-server",
                &world.bootstrap,
            ])
            .args(args)
            .output()
            .expect("kafka-transactions.sh")
    };
    let mut aborted = false;
    for p in 0..8 {
        let described = tool(&[
            "describe-producers",
            "--topic",
            "__consumer_offsets",
            "--partition",
            &p.to_string(),
        ]);
        let open = text(&described.stdout)
            .lines()
            .skip(1)
            .filter_map(|l| {
                l.split_whitespace()
                    .nth(5)
                    .and_then(|s| s.parse::<i64>().ok())
            })
            .next();
        if let Some(start) = open {
            let out = tool(&[
                "abort",
                "--topic",
                "__consumer_offsets",
                "--partition",
                &p.to_string(),
                "--start-offset",
                &start.to_string(),
            ]);
            assert_succeeded(&out, "abort");
            aborted = true;
        }
    }
    assert!(
        aborted,
        "the pending offset commit was found on __consumer_offsets"
    );
    assert!(
        world.caught_up(WAIT),
        "the partition is fetched once the commit is aborted\n{}",
        tail(&second.log())
    );
    let log = second.log();
    assert!(
        log.contains("the partition is not being fetched")
            && log.contains("fetching started; seeked to the restored checkpoint"),
        "the log says it waits, then that it fetches\n{}",
        tail(&log)
    );
    stop(&mut child, &second);
    world.verify(&second, &expected);
}
