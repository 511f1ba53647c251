//! `orderly replay` on a real broker: moving back keeps state and counts
//! every record again; a reset rebuilds exactly; a marker in the changelog
//! reaches every instance's store, ahead, behind or wiped; bad arguments,
//! active members and `--dry-run` change nothing.

use std::collections::BTreeMap;
use std::process::Output;
use std::time::Duration;

use orderly::testkit::orders::workload::WorkloadSpec;
use orderly::testkit::orders::StateView;

use crate::required_env;
use crate::support::{
    assert_succeeded, end_offsets, signal, text, wait_exit, wait_until, Instance, Reaper,
};
use crate::world::{tail, World};
use crate::PARTITIONS;

fn replay(instance: &Instance, args: &[&str]) -> Output {
    let mut all = vec!["replay"];
    all.extend_from_slice(args);
    instance.command(&all).output().expect("run orderly replay")
}

fn totals(instance: &Instance) -> serde_json::Value {
    instance.stats()["totals"].clone()
}

fn number(v: &serde_json::Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}"))
}

/// Per partition: `applied + duplicates + stale + dead_lettered ==
/// next_offset - start_offset + replayed - skipped`.
fn assert_identity(instance: &Instance) {
    for p in instance.stats()["partitions"]
        .as_array()
        .expect("partitions")
    {
        let outcomes = ["applied", "duplicates", "stale", "dead_lettered"]
            .iter()
            .map(|k| number(p, k))
            .sum::<u64>() as i64;
        let consumed = p["next_offset"].as_i64().unwrap() - p["start_offset"].as_i64().unwrap()
            + number(p, "replayed") as i64
            - number(p, "skipped") as i64;
        assert_eq!(outcomes, consumed, "counter identity: {p}");
    }
}

fn changelog_ends(world: &World) -> BTreeMap<i32, i64> {
    end_offsets(
        &world.bootstrap,
        &format!("{}-changelog", world.topic),
        PARTITIONS,
    )
}

/// Run to the end, stop, `replay --to-earliest` (state kept), run to the
/// end: state and `applied` unchanged, every record counted again as
/// duplicate, stale or dead-lettered, the identity holds.
#[test]
fn replay_to_earliest_keeps_state_and_counts_every_record_again() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 3_000,
        poison_rate: 0.003,
        seed: 8,
        ..Default::default()
    });
    world.produce(&records);
    let instance = world.instance("commit_interval_ms = 200");
    world.finish(&instance);
    world.verify(&instance, &expected);
    let (before, dump_before) = (totals(&instance), instance.dump());

    let dry = replay(&instance, &["--to-earliest", "--dry-run"]);
    assert_succeeded(&dry, "replay --dry-run");
    assert!(
        text(&dry.stdout).contains("dry run: nothing changed"),
        "{}",
        text(&dry.stdout)
    );
    eprintln!(
        "$ orderly replay --to-earliest --dry-run\n{}",
        text(&dry.stdout)
    );
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    assert_eq!(world.committed(), ends, "the dry run committed nothing");

    let out = replay(&instance, &["--to-earliest"]);
    assert_succeeded(&out, "replay");
    eprintln!("$ orderly replay --to-earliest\n{}", text(&out.stdout));
    assert!(
        world.committed().values().all(|o| *o == 0),
        "committed offsets moved to the start: {:?}",
        world.committed()
    );
    world.finish(&instance);

    let after = totals(&instance);
    assert_eq!(
        number(&after, "applied"),
        number(&before, "applied"),
        "nothing applied twice"
    );
    assert_eq!(
        number(&after, "replayed"),
        records.len() as u64,
        "every record read again"
    );
    let dropped = |t: &serde_json::Value| {
        number(t, "duplicates") + number(t, "stale") + number(t, "dead_lettered")
    };
    assert_eq!(
        dropped(&after) - dropped(&before),
        records.len() as u64,
        "every replayed record dropped: {before} -> {after}"
    );
    assert_eq!(instance.dump(), dump_before, "state unchanged");
    assert_identity(&instance);
}

/// `replay --to-earliest --reset-state`, run to the end: state and counters
/// equal a first run's exactly.
#[test]
fn replay_with_reset_state_rebuilds_exactly() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 3_000,
        poison_rate: 0.003,
        seed: 9,
        ..Default::default()
    });
    world.produce(&records);
    let instance = world.instance("commit_interval_ms = 200");
    world.finish(&instance);
    let out = replay(&instance, &["--to-earliest", "--reset-state"]);
    assert_succeeded(&out, "replay");
    world.finish(&instance);
    // Re-emitted status changes after a reset repeat earlier versions: the
    // outbox's order check does not apply across the replay.
    world.verify_state(&instance, &expected);
    world.verify_outbox(&expected, false);
    assert!(
        instance.log().contains("clearing it"),
        "the store of the old epoch was cleared\n{}",
        tail(&instance.log())
    );
    let t = totals(&instance);
    assert_eq!(
        (number(&t, "replayed"), number(&t, "skipped")),
        (0, 0),
        "a reset starts the counters over: {t}"
    );
    assert_identity(&instance);
}

/// Three instances' stores (one current, one behind, one wiped) and a
/// `replay --to-offset N --reset-state` per partition run from a fourth
/// store directory; the group restarted: every partition ends at the state
/// of the records after N alone, exactly, whoever owns it.
#[test]
fn a_replay_marker_reaches_every_store_ahead_behind_or_wiped() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (first, _) = world.plan(&WorkloadSpec {
        orders: 4_000,
        poison_rate: 0.003,
        seed: 21,
        ..Default::default()
    });
    let (second, expected) = world.plan(&WorkloadSpec {
        orders: 2_000,
        poison_rate: 0.003,
        seed: 22,
        ..Default::default()
    });
    let settings = "commit_interval_ms = 200";
    let (a, b, c, d) = (
        world.instance(settings),
        world.instance(settings),
        world.instance(settings),
        world.instance(settings),
    );
    let reaper = Reaper::default();
    world.produce(&first);
    let ends_first = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let mut runs: Vec<_> = [&a, &b, &c]
        .iter()
        .map(|i| reaper.watch(i.spawn_run(None)))
        .collect();
    let joined = wait_until(Duration::from_secs(60), || {
        [&a, &b, &c]
            .iter()
            .all(|i| i.log().contains("partition assigned"))
    });
    assert!(joined, "all three got partitions\n{}", tail(&a.log()));
    // b stops early: its store is behind.
    signal(&runs[1], "TERM");
    assert!(
        wait_exit(&mut runs[1], Duration::from_secs(30)).is_some_and(|s| s.success()),
        "{}",
        tail(&b.log())
    );
    let caught_up = wait_until(Duration::from_secs(120), || world.committed() == ends_first);
    assert!(
        caught_up,
        "caught up on the first workload\n{}",
        tail(&a.log())
    );
    for i in [0, 2] {
        signal(&runs[i], "TERM");
        assert!(wait_exit(&mut runs[i], Duration::from_secs(30)).is_some_and(|s| s.success()));
    }
    // c's store is lost.
    std::fs::remove_dir_all(&c.store_path).expect("wipe c");

    world.produce(&second);
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    for (partition, start) in &ends_first {
        let (p, n) = (partition.to_string(), start.to_string());
        let out = replay(&d, &["--partition", &p, "--to-offset", &n, "--reset-state"]);
        assert_succeeded(&out, "replay --to-offset --reset-state");
    }
    assert!(
        !orderly::testkit::store_present(&d.store_path),
        "the replay needs no store of its own"
    );

    let mut runs: Vec<_> = [&a, &b, &c]
        .iter()
        .map(|i| reaper.watch(i.spawn_run(None)))
        .collect();
    let caught_up = wait_until(Duration::from_secs(120), || world.committed() == ends);
    assert!(
        caught_up,
        "caught up after the replay: {:?} vs {ends:?}\n{}",
        world.committed(),
        tail(&a.log())
    );
    for run in &mut runs {
        signal(run, "TERM");
        assert!(wait_exit(run, Duration::from_secs(30)).is_some_and(|s| s.success()));
    }

    // Per partition, the store that holds it at the end; its orders of that
    // partition and its counters must be exactly the second workload's.
    let instances = [&a, &b, &c];
    let stats: Vec<serde_json::Value> = instances.iter().map(|i| i.stats()).collect();
    let dumps: Vec<Vec<serde_json::Value>> = instances
        .iter()
        .map(|i| {
            let out = i.command(&["state", "dump"]).output().expect("dump");
            text(&out.stdout)
                .lines()
                .map(|l| serde_json::from_str(l).expect("dump line"))
                .collect()
        })
        .collect();
    let mut counts = [0u64; 4];
    let mut states: BTreeMap<String, StateView> = BTreeMap::new();
    for (partition, end) in &ends {
        let owner = (0..3)
            .find(|i| {
                stats[*i]["partitions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|p| {
                        p["partition"].as_i64() == Some(i64::from(*partition))
                            && p["next_offset"].as_i64() == Some(*end)
                            && number(p, "epoch") >= 1
                    })
            })
            .unwrap_or_else(|| panic!("partition {partition}: no store at {end} in the new epoch"));
        let p = stats[owner]["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["partition"].as_i64() == Some(i64::from(*partition)))
            .unwrap();
        assert_eq!(
            p["start_offset"].as_i64(),
            Some(ends_first[partition]),
            "{p}"
        );
        for (i, key) in ["applied", "duplicates", "stale", "dead_lettered"]
            .iter()
            .enumerate()
        {
            counts[i] += number(p, key);
        }
        for line in dumps[owner]
            .iter()
            .filter(|l| l["partition"].as_i64() == Some(i64::from(*partition)))
        {
            let view: StateView = serde_json::from_value(line.clone()).expect("state");
            states.insert(view.order_id.clone(), view);
        }
    }
    assert_eq!(
        counts,
        [
            expected.outcomes.applied,
            expected.outcomes.duplicates,
            expected.outcomes.stale,
            expected.outcomes.dead_lettered
        ],
        "counters of the records after N"
    );
    assert_eq!(
        states.len(),
        expected.states.len(),
        "orders after the reset"
    );
    let mismatches = expected
        .states
        .iter()
        .filter(|(id, want)| states.get(*id) != Some(*want))
        .count();
    assert_eq!(mismatches, 0, "every order at the replayed state");
    let restores: usize = instances
        .iter()
        .map(|i| i.log().matches("clearing it").count())
        .sum();
    eprintln!(
        "replay marker: {} orders exact over 3 stores, {restores} old-epoch trees cleared",
        states.len()
    );
}

/// Active members are named and refused; bad arguments give clear errors;
/// none of them, nor `--dry-run`, changes anything.
#[test]
fn replay_refusals_and_dry_runs_change_nothing() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, _) = world.plan(&WorkloadSpec {
        orders: 1_000,
        seed: 10,
        ..Default::default()
    });
    world.produce(&records);
    let instance = world.instance("commit_interval_ms = 200");
    let reaper = Reaper::default();
    let mut run = reaper.watch(instance.spawn_run(None));
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    assert!(
        wait_until(Duration::from_secs(60), || world.committed() == ends),
        "{}",
        tail(&instance.log())
    );
    // While the member runs, its outbox deletions still reach the
    // changelog: the refusal is checked on the committed offsets (a replay
    // would move them first thing), the rest once the member has stopped.
    let committed_before = world.committed();
    let out = replay(&instance, &["--to-earliest"]);
    assert_eq!(
        out.status.code(),
        Some(8),
        "active members: {}",
        text(&out.stderr)
    );
    assert!(
        text(&out.stderr).contains("active members"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(world.committed(), committed_before);
    signal(&run, "TERM");
    assert!(wait_exit(&mut run, Duration::from_secs(30)).is_some_and(|s| s.success()));
    // The group empties once its member has left.
    assert!(wait_until(Duration::from_secs(30), || replay(
        &instance,
        &["--to-earliest", "--dry-run"]
    )
    .status
    .success()));
    let snapshot = || (world.committed(), changelog_ends(&world));
    let before = snapshot();

    for (args, code, says) in [
        (
            vec!["--to-earliest", "--partition", "99"],
            2,
            "does not exist",
        ),
        (vec!["--to-offset", "99999999"], 2, "outside"),
        (
            vec!["--to-datetime", "2999-01-01T00:00:00Z"],
            2,
            "in the future",
        ),
        (vec!["--to-datetime", "yesterday"], 2, "RFC 3339"),
        (vec!["--partition", "0"], 2, "required"),
    ] {
        let out = replay(&instance, &args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).contains(says),
            "{args:?}: {}",
            text(&out.stderr)
        );
        assert_eq!(snapshot(), before, "{args:?} changed nothing");
    }
    let dry = replay(&instance, &["--shift-by", "-10", "--dry-run", "--json"]);
    assert_succeeded(&dry, "replay --dry-run");
    let plan: serde_json::Value = serde_json::from_slice(&dry.stdout).expect("plan JSON");
    for row in plan["partitions"].as_array().expect("rows") {
        let p = row["partition"].as_i64().unwrap() as i32;
        assert_eq!(
            row["new_offset"].as_i64(),
            Some((ends[&p] - 10).max(0)),
            "{row}"
        );
        assert_eq!(row["end"].as_i64(), Some(ends[&p]));
    }
    assert_eq!(snapshot(), before, "the dry run changed nothing");
}
