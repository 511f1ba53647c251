//! The second domain end to end: the crash drill with stock
//! (`entity.kind = "stock"`), an accumulating state, where a reservation
//! applied twice or lost is a wrong level, not just a wrong counter. The
//! real `orderly` binary under SIGKILLs and aborts at chosen points
//! ([`drill`], the orders drill's own loop), in each guarantee; then every
//! SKU's (version, on hand, reserved) is checked against the levels the
//! generator computed from the plan alone, on the drilled store and on a
//! fresh store restored from the changelog; and the availability changes
//! on the output topic form, per SKU, one unbroken chain ending at its
//! availability now (under `exactly_once`, read `read_committed`, each once).

use std::collections::BTreeMap;
use std::time::Duration;

use orderly::testkit::stock::workload::{plan, StockExpectation, StockSpec};
use orderly::testkit::stock::{StockEncoder, STATUS_SCHEMA};
use orderly::{Entity, Stock};

use crate::drills::drill;
use crate::observe::http_get;
use crate::support::{wait_until, Instance};
use crate::world::{compare_states, Counts, Published, World};
use crate::{required_env, SHORT_SESSION_TIMEOUT_MS};

/// 1,600 SKUs (about 37,000 records: 5% of the events sent twice, a few
/// poison records) produced while the processor works; killed 8 times at
/// random and aborted at each chosen point, in `at_least_once`.
#[test]
fn stock_crash_drill() {
    stock_drill(
        "",
        StockSpec {
            skus: 1_600,
            seed: 2029,
            duplicate_rate: 0.05,
            reorder_rate: 0.0,
            poison_rate: 0.002,
            sku_prefix: "sku".into(),
        },
        &[
            "after_dlq:1",
            "after_batch:2",
            "after_flush:2",
            "after_batch:4",
            "after_flush:3",
        ],
        8,
    );
}

/// The same in `exactly_once`: aborts inside open transactions (half a
/// write-out's changelog records sent), after a commit before the store is
/// written or flushed, and SIGKILLs at random.
#[test]
fn stock_crash_drill_exactly_once() {
    stock_drill(
        "guarantee = \"exactly_once\"\n",
        StockSpec {
            skus: 1_200,
            seed: 2030,
            duplicate_rate: 0.05,
            reorder_rate: 0.0,
            poison_rate: 0.002,
            sku_prefix: "sku".into(),
        },
        &[
            "torn_changelog:1",
            "after_batch:2",
            "after_flush:2",
            "torn_changelog:2",
            "after_batch:3",
        ],
        6,
    );
}

/// The drill on a stock world: `spec` planned against the world's
/// registry, produced in chunks under `faults` and `kills`, checked on the
/// drilled store, on a fresh one restored from the changelog, and on the
/// output topic.
fn stock_drill(settings: &str, spec: StockSpec, faults: &[&str], kills: usize) {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"))
        .with_entity("stock")
        .with_session_timeout(SHORT_SESSION_TIMEOUT_MS);
    let encoder = world
        .runtime
        .block_on(StockEncoder::register(
            &world.registry_client(),
            &world.topic,
        ))
        .expect("register the stock schema");
    let (records, expected) = plan(&spec, &encoder).expect("plan");
    assert!(
        expected.outcomes.duplicates > 0 && expected.outcomes.dead_lettered > 0,
        "redeliveries and poison records: {} duplicates, {} dead-lettered",
        expected.outcomes.duplicates,
        expected.outcomes.dead_lettered
    );
    drill(
        &world,
        &records,
        Counts::from(&expected),
        settings,
        faults,
        kills,
        |instance| verify_levels(&world, instance, &expected),
    );
    let fresh = world.restore_fresh(settings, |fresh| ask_over_http(fresh, &expected));
    verify_levels(&world, &fresh, &expected);
    eprintln!(
        "fresh store: every partition restored from the changelog, {} SKUs exact",
        expected.levels.len()
    );
    let exactly_once = settings.contains("exactly_once");
    if exactly_once {
        world.verify_one_letter_each(expected.outcomes.dead_lettered);
    }
    verify_availability(&world, &expected, exactly_once);
}

/// `/state/{sku}` on a running instance: a SKU's level as expected, and an
/// unknown SKU's 404 in the entity's words.
fn ask_over_http(instance: &Instance, expected: &StockExpectation) {
    let address = instance.wait_http(0);
    let (sku, (version, level)) = expected.levels.iter().next().expect("a SKU");
    let mut answer = (0, String::new());
    let found = wait_until(Duration::from_secs(30), || {
        answer = http_get(&address, &format!("/state/{sku}")).unwrap_or_default();
        answer.0 == 200
    });
    assert!(found, "/state/{sku}: {answer:?}");
    let body: serde_json::Value = serde_json::from_str(&answer.1).expect("JSON");
    assert_eq!(
        (
            &body["sku"],
            &body["version"],
            &body["on_hand"],
            &body["reserved"]
        ),
        (
            &serde_json::json!(sku),
            &serde_json::json!(version),
            &serde_json::json!(level.on_hand),
            &serde_json::json!(level.reserved)
        ),
        "{body}"
    );
    let (status, body) = http_get(&address, "/state/no-such-sku").expect("answer");
    let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["sku"], "no-such-sku", "{body}");
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("no such SKU")),
        "{body}"
    );
}

/// Every SKU's version, on hand, reserved and available exactly as
/// expected (and no other SKU), then the counters and dead letters; returns
/// the mismatches (0: it asserts).
fn verify_levels(world: &World, instance: &Instance, expected: &StockExpectation) -> usize {
    let want: BTreeMap<String, [i64; 4]> = expected
        .levels
        .iter()
        .map(|(sku, (version, level))| {
            let row = [*version, level.on_hand, level.reserved, level.available()];
            (sku.clone(), row)
        })
        .collect();
    let mismatches = compare_states(&instance.dump_keyed("sku"), &want, |line| {
        ["version", "on_hand", "reserved", "available"]
            .map(|f| line[f].as_i64().unwrap_or_else(|| panic!("{f} in {line}")))
    });
    assert_eq!(
        mismatches,
        0,
        "{mismatches} of {} SKUs at a wrong (version, on_hand, reserved, available)",
        want.len()
    );
    world.verify_counts(instance, Counts::from(expected));
    world.verify_dead_letters(expected.outcomes.dead_lettered);
    mismatches
}

/// The availability changes on the output topic: per SKU, versions never
/// go back in offset order, a change sent again is the same change, and
/// the distinct changes in version order form one chain (from nothing,
/// each from the status the one before changed to) ending at the
/// availability of the SKU's expected level. `exactly_once`: each once.
fn verify_availability(world: &World, expected: &StockExpectation, exactly_once: bool) {
    let schema = apache_avro::Schema::parse_str(STATUS_SCHEMA).expect("the stock output schema");
    let published = world.output_records(&schema, Stock::KEY_FIELD);
    let total: usize = published.values().map(Vec::len).sum();
    let mut chains: BTreeMap<&str, BTreeMap<i64, &Published>> = BTreeMap::new();
    for (partition, list) in &published {
        let mut newest: BTreeMap<&str, i64> = BTreeMap::new();
        for record in list {
            let top = newest.entry(&record.key).or_insert(record.version);
            assert!(
                record.version >= *top,
                "partition {partition}: SKU {} went back from version {top} to {}",
                record.key,
                record.version
            );
            *top = record.version;
            let first = chains
                .entry(&record.key)
                .or_default()
                .entry(record.version)
                .or_insert(record);
            assert_eq!(*first, record, "a change sent again is the same change");
        }
    }
    let distinct: usize = chains.values().map(BTreeMap::len).sum();
    for (sku, (_, level)) in &expected.levels {
        let chain = chains
            .get(sku.as_str())
            .unwrap_or_else(|| panic!("no availability change for {sku}"));
        let mut status: Option<&str> = None;
        for change in chain.values() {
            assert_eq!(
                change.from_status.as_deref(),
                status,
                "{sku}: version {} changes from what the change before changed to",
                change.version
            );
            assert_ne!(Some(change.to_status.as_str()), status, "{sku}: a change");
            status = Some(&change.to_status);
        }
        let now = serde_json::to_value(Stock::status_of(level)).expect("availability");
        assert_eq!(
            status,
            now.as_str(),
            "{sku}: the last change is its availability now"
        );
    }
    assert_eq!(
        chains.len(),
        expected.levels.len(),
        "changes only for the expected SKUs"
    );
    if exactly_once {
        assert_eq!(total, distinct, "read_committed: each change exactly once");
    }
    eprintln!(
        "availability: {distinct} distinct changes for {} SKUs, {total} records ({} sent again)",
        chains.len(),
        total - distinct
    );
}
