//! `orderly explain` on Apache Kafka, for orders, stock and the no-code
//! entity: a workload with redeliveries, late (stale) events and poison
//! records processed to the end, then every key explained. What the run
//! decided is read back from it: the explanations of all keys add up, per
//! decision, to the store's counters; each key's replay ends where the
//! store is (exit 0, the stored version the expected one); a key's
//! dead-lettered records are exactly its letters in the dead-letter topic.

use std::collections::BTreeSet;

use orderly::testkit::orders::workload::{PlannedRecord, WorkloadSpec};

use crate::required_env;
use crate::support::Instance;
use crate::world::World;

/// Every key of `records` explained and checked against the run
/// ([`crate::support::explain`]).
fn explain_every_key(
    world: &World,
    instance: &Instance,
    records: &[PlannedRecord],
    version_of: impl Fn(&str) -> Option<i64>,
) {
    let keys: BTreeSet<&str> = records.iter().map(|r| r.key.as_str()).collect();
    crate::support::explain::explain_every_key(
        instance,
        &world.bootstrap,
        &world.dlq,
        &keys,
        records.len() as u64,
        version_of,
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
