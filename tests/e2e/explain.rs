//! `orderly explain` on Apache Kafka, for orders, stock and the no-code
//! entity: a workload with redeliveries, late (stale) events and poison
//! records processed to the end, then every key explained. What the run
//! decided is read back from it: the explanations of all keys add up, per
//! decision, to the store's counters; each key's replay ends where the
//! store is (exit 0, the stored version the expected one); a key's
//! dead-lettered records are exactly its letters in the dead-letter topic.

use std::collections::{BTreeMap, BTreeSet};

use orderly::testkit::orders::workload::{PlannedRecord, WorkloadSpec};
use serde_json::Value;

use crate::required_env;
use crate::support::{read_all, Instance};
use crate::world::World;

/// Explains every key of `records` with `instance`'s configuration (its
/// processor stopped) and checks the explanations against the run;
/// `version_of` gives a key's expected stored version.
fn explain_every_key(
    world: &World,
    instance: &Instance,
    records: &[PlannedRecord],
    version_of: impl Fn(&str) -> Option<i64>,
) {
    let letters: BTreeSet<(i64, i64)> = read_all(&world.bootstrap, &world.dlq)
        .iter()
        .filter_map(|l| {
            let header = |name: &str| l.headers.get(name).and_then(|v| v.parse::<i64>().ok());
            Some((
                header("orderly.source.partition")?,
                header("orderly.source.offset")?,
            ))
        })
        .collect();
    let keys: BTreeSet<&str> = records.iter().map(|r| r.key.as_str()).collect();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut lettered = BTreeSet::new();
    let started = std::time::Instant::now();
    for key in &keys {
        let out = instance
            .command(&["explain", key, "--json"])
            .output()
            .expect("explain");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "explain {key}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(
            report["stored"]["version"].as_i64(),
            version_of(key),
            "{key}: {text}"
        );
        let partition = report["partition"].as_i64().expect("partition");
        for record in report["records"].as_array().expect("records") {
            let decision = record["decision"].as_str().expect("decision").to_string();
            if decision == "dead_lettered" {
                assert!(record["letter"]["dlq_offset"].is_i64(), "{key}: {record}");
                lettered.insert((partition, record["offset"].as_i64().expect("offset")));
            }
            *totals.entry(decision).or_default() += 1;
        }
    }
    eprintln!(
        "explain: {} keys of {} records in {:.1} s: {totals:?}",
        keys.len(),
        records.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        lettered, letters,
        "the dead-lettered records are the letters"
    );
    let stats = instance.stats();
    let run_made = |name: &str| stats["totals"][name].as_u64().unwrap_or(0);
    let explained = |name: &str| totals.get(name).copied().unwrap_or(0);
    for (mine, theirs) in [
        ("applied", "applied"),
        ("duplicate", "duplicates"),
        ("stale", "stale"),
        ("dead_lettered", "dead_lettered"),
    ] {
        assert_eq!(
            explained(mine),
            run_made(theirs),
            "{mine}: {totals:?} {stats}"
        );
    }
    assert_eq!(totals.values().sum::<u64>(), records.len() as u64);
    assert!(
        explained("duplicate") > 0 && explained("dead_lettered") > 0,
        "the workload has redeliveries and poison: {totals:?}"
    );
}

#[test]
fn explain_agrees_with_the_run_for_orders_stock_and_the_no_code_entity() {
    let bootstrap = required_env("ORDERLY_E2E_BOOTSTRAP");

    // Orders: redelivered, reordered and poisoned.
    let world = World::new(bootstrap.clone());
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 16,
        seed: 541,
        duplicate_rate: 0.25,
        reorder_rate: 0.25,
        poison_rate: 0.06,
        events_per_order: Some(8),
        ..Default::default()
    });
    world.produce(&records);
    let instance = world.instance("commit_interval_ms = 200");
    world.finish(&instance);
    explain_every_key(&world, &instance, &records, |key| {
        expected.states.get(key).map(|s| s.version)
    });

    // Stock: an accumulating state.
    use orderly::testkit::stock::workload::{plan, StockSpec};
    use orderly::testkit::stock::StockEncoder;
    let world = World::new(bootstrap.clone()).with_entity("stock");
    let encoder = world
        .runtime
        .block_on(StockEncoder::register(
            &world.registry_client(),
            &world.topic,
        ))
        .expect("register the stock schema");
    let (records, expected) = plan(
        &StockSpec {
            skus: 12,
            seed: 542,
            duplicate_rate: 0.2,
            reorder_rate: 0.0,
            poison_rate: 0.05,
            sku_prefix: "sku".into(),
        },
        &encoder,
    )
    .expect("plan");
    world.produce(&records);
    let instance = world.instance("commit_interval_ms = 200");
    world.finish(&instance);
    explain_every_key(&world, &instance, &records, |key| {
        expected.levels.get(key).map(|(version, _)| *version)
    });

    // The no-code entity (shipments), configured by field names.
    use crate::support::shipments::{entity_config, plan as shipments, Schemas};
    let world = World::new(bootstrap).with_entity_config(&entity_config());
    let schemas = world
        .runtime
        .block_on(Schemas::register(&world.registry_client(), &world.topic));
    let (records, oracle) = shipments(&schemas, 14, 543);
    world.produce(&records);
    let instance = world.instance("commit_interval_ms = 200");
    world.finish(&instance);
    explain_every_key(&world, &instance, &records, |key| {
        oracle.newest.get(key).map(|n| n.0)
    });
}
