//! The final checks: a fresh restore from the compacted changelog, exact
//! against the input, and no status change behind a newer one on the
//! output topic.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::kafka_native::compaction_removed;
use crate::observe::{http_get, scrape};
use crate::support::{end_offsets, wait_until, Reaper};
use crate::world::{stop, tail, World};
use crate::PARTITIONS;

use super::scenarios::open_transactions;
use super::EXACTLY_ONCE;

/// Waits until the broker compacted the changelog, then restores every
/// partition into a member with an empty store and checks it against the
/// input: state, counters, dead letters, the output topic.
pub(crate) fn restore_fresh_and_verify(
    world: &World,
    changelog: &str,
    settings: &str,
    guarantee: &str,
    expected: &orderly::testkit::orders::workload::Expectation,
    label: &str,
) {
    let point = label;
    let mut counts = (0, 0);
    let waited = std::time::Instant::now();
    let compacted = wait_until(Duration::from_secs(90), || {
        counts = compaction_removed(&world.bootstrap, changelog);
        counts.0 > 0
    });
    if !compacted {
        // What holds the cleaner back, for the failure's record: an open
        // transaction pins the partition's last stable offset, and only
        // records below it and outside the active segment are compacted.
        for open in open_transactions(&world.bootstrap, changelog) {
            eprintln!(
                "open on {changelog}-{}: producer {} since offset {} ({})",
                open.partition, open.producer_id, open.start, open.coordinator_state
            );
        }
    }
    assert!(
        compacted,
        "the broker compacted the changelog: {} records removed over {} offsets",
        counts.0, counts.1
    );
    eprintln!(
        "late write ({point}): compaction removed {} records over {} offsets (waited {:.1} s)",
        counts.0,
        counts.1,
        waited.elapsed().as_secs_f64()
    );
    let restoring = std::time::Instant::now();

    // c, with an empty store, restores every partition from the changelog.
    let reaper = Reaper::default();
    let c = world.instance(settings);
    let mut run_c = reaper.watch(c.spawn_run(None));
    let address = c.wait_http(0);
    let owns_all = wait_until(Duration::from_secs(90), || {
        scrape(&address).get("orderly_assigned_partitions").copied() == Some(PARTITIONS as f64)
            && http_get(&address, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(
        owns_all,
        "c restored and owns every partition\n{}",
        tail(&c.log())
    );
    stop(&mut run_c, &c);
    eprintln!(
        "late write ({point}): c restored every partition and stopped in {:.1} s",
        restoring.elapsed().as_secs_f64()
    );
    world.verify_state(&c, expected);
    if guarantee == EXACTLY_ONCE {
        world.verify_exactly_once(expected);
    } else {
        world.verify_outbox(expected, false);
        no_status_change_behind_a_newer_one(world);
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

/// Prints each output record that follows a record of the same order with
/// a later source offset, with the records of that order around it (what a
/// failing check needs to be read).
pub(super) fn show_output_regressions(world: &World) -> bool {
    let mut found = false;
    let topic = format!("{}-status", world.topic);
    let ends = end_offsets(&world.bootstrap, &topic, PARTITIONS);
    for partition in 0..PARTITIONS {
        let records =
            crate::support::read_range(&world.bootstrap, &topic, partition, 0, ends[&partition]);
        let mut by_order: HashMap<Vec<u8>, Vec<&crate::support::Letter>> = HashMap::new();
        for record in &records {
            by_order
                .entry(record.key.clone().unwrap_or_default())
                .or_default()
                .push(record);
        }
        for (order, list) in by_order {
            let source = |l: &crate::support::Letter| {
                l.headers
                    .get("orderly.source.offset")
                    .and_then(|v| v.parse::<i64>().ok())
                    .unwrap_or(-1)
            };
            if list.windows(2).any(|w| source(w[1]) < source(w[0])) {
                found = true;
                let shown: Vec<String> = list
                    .iter()
                    .map(|l| format!("@{} source {} headers {:?}", l.offset, source(l), l.headers))
                    .collect();
                eprintln!(
                    "output partition {partition}: order {} goes back:\n  {}",
                    String::from_utf8_lossy(&order),
                    shown.join("\n  ")
                );
            }
        }
    }
    found
}
