//! The no-code entity end to end: the `orderly` binary with
//! `entity.kind = "latest"` and its field names configured, on shipment
//! events (neither orders nor stock: an `int` version, a nullable enum
//! status, a nested record, two writer schemas; the plan and schemas of
//! `tests/support/shipments.rs`, registered in the world's registry), with
//! redeliveries, older events under new ids arriving late (stale) and
//! poison records, through the crash drill ([`drill`]: SIGKILLs and aborts
//! at chosen points). Then `state dump` must show, per shipment, its newest
//! event (version, id, time and every field), the counters must be exact,
//! a fresh instance restoring every partition from the changelog must hold
//! the same, and the output topic's last status change per shipment must
//! name its last status.

use std::collections::BTreeMap;
use std::time::Duration;

use orderly::testkit::latest::STATUS_SCHEMA;
use orderly::{Entity, Latest};

use crate::drills::drill;
use crate::observe::http_get;
use crate::support::shipments::{entity_config, plan, Oracle, Schemas};
use crate::support::{wait_until, Instance};
use crate::world::{compare_states, Counts, World};
use crate::{required_env, SHORT_SESSION_TIMEOUT_MS};

/// 600 shipments (about 8,000 records: one event in six sent again, one
/// shipment in four followed by a late older event, six poison records)
/// produced while the processor works; aborted after a write-out's batch
/// and after its flush, and killed 4 times at random, in `at_least_once`.
#[test]
fn latest_crash_drill() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"))
        .with_entity_config(&entity_config())
        .with_session_timeout(SHORT_SESSION_TIMEOUT_MS);
    let schemas = world
        .runtime
        .block_on(Schemas::register(&world.registry_client(), &world.topic));
    let (records, oracle) = plan(&schemas, 600, 2031);
    assert!(
        oracle.duplicates > 0 && oracle.stale > 0 && oracle.dead_lettered > 0,
        "redeliveries, stale events and poison records: {} duplicates, {} stale, {} dead-lettered",
        oracle.duplicates,
        oracle.stale,
        oracle.dead_lettered
    );
    let counts = counts(&oracle);
    drill(
        &world,
        &records,
        counts,
        "",
        &["after_batch:2", "after_flush:2"],
        4,
        |instance| verify_newest(&world, instance, &oracle),
    );
    let fresh = world.restore_fresh("", |fresh| ask_over_http(fresh, &oracle));
    verify_newest(&world, &fresh, &oracle);
    eprintln!(
        "fresh store: every partition restored from the changelog, {} shipments exact",
        oracle.newest.len()
    );
    verify_last_statuses(&world, &oracle);
}

fn counts(oracle: &Oracle) -> Counts {
    Counts {
        applied: oracle.applied,
        duplicates: oracle.duplicates,
        stale: oracle.stale,
        dead_lettered: oracle.dead_lettered,
    }
}

/// The field the dump names each shipment's key by (as configured).
fn key_field() -> String {
    entity_config().key_field
}

/// `state dump`: every shipment (and nothing else) at its newest event's
/// version, id and time, its `event` every field of that event; then the
/// counters and dead letters. Returns the mismatches (0: it asserts).
fn verify_newest(world: &World, instance: &Instance, oracle: &Oracle) -> usize {
    type Row = (i64, String, i64, serde_json::Value);
    let want: BTreeMap<String, Row> = oracle
        .newest
        .iter()
        .map(|(key, (version, id, at, event, _))| {
            (key.clone(), (*version, id.clone(), *at, event.clone()))
        })
        .collect();
    let mismatches = compare_states(&instance.dump_keyed(&key_field()), &want, |line| {
        let number = |f: &str| line[f].as_i64().unwrap_or_else(|| panic!("{f} in {line}"));
        let id = line["event_id"].as_str().expect("event_id").to_string();
        (
            number("version"),
            id,
            number("occurred_at"),
            line["event"].clone(),
        )
    });
    assert_eq!(
        mismatches,
        0,
        "{mismatches} keys not at their newest event, missing or extra ({} shipments planned)",
        want.len()
    );
    world.verify_counts(instance, counts(oracle));
    world.verify_dead_letters(oracle.dead_lettered);
    mismatches
}

/// `/state/{key}` on the restored instance: a shipment's newest event in
/// its configured key's name; an unknown key 404.
fn ask_over_http(instance: &Instance, oracle: &Oracle) {
    let address = instance.wait_http(0);
    let (key, (version, id, _, event, _)) = oracle
        .newest
        .iter()
        .min_by_key(|(key, _)| *key)
        .expect("a shipment");
    let mut answer = (0, String::new());
    let found = wait_until(Duration::from_secs(30), || {
        answer = http_get(&address, &format!("/state/{key}")).unwrap_or_default();
        answer.0 == 200
    });
    assert!(found, "/state/{key}: {answer:?}");
    let body: serde_json::Value = serde_json::from_str(&answer.1).expect("JSON");
    assert_eq!(
        (
            &body[key_field()],
            &body["version"],
            &body["event_id"],
            &body["event"]
        ),
        (
            &serde_json::json!(key),
            &serde_json::json!(version),
            &serde_json::json!(id),
            event
        ),
        "{body}"
    );
    let (status, _) = http_get(&address, "/state/no-such-shipment").expect("answer");
    assert_eq!(status, 404);
}

/// The status changes on the output topic (`STATUS_SCHEMA`): per shipment,
/// versions never go back in offset order, and the last change names the
/// shipment's last status; no change for any other key.
fn verify_last_statuses(world: &World, oracle: &Oracle) {
    let schema = apache_avro::Schema::parse_str(STATUS_SCHEMA).expect("the latest output schema");
    let published = world.output_records(&schema, Latest::KEY_FIELD);
    let mut last: BTreeMap<&str, (i64, &str)> = BTreeMap::new();
    for (partition, list) in &published {
        for record in list {
            let now = (record.version, record.to_status.as_str());
            if let Some((version, _)) = last.insert(record.key.as_str(), now) {
                assert!(
                    record.version >= version,
                    "partition {partition}: shipment {} went back from version {version} to {}",
                    record.key,
                    record.version
                );
            }
        }
    }
    let wrong: Vec<_> = oracle
        .newest
        .iter()
        .filter(|(key, (.., status))| last.get(key.as_str()).map(|l| l.1) != Some(status))
        .map(|(key, (.., status))| (key, status, last.get(key.as_str())))
        .collect();
    assert!(
        wrong.is_empty(),
        "{} shipments' last status change is not their last status (key, want, got): {:?}",
        wrong.len(),
        &wrong[..wrong.len().min(5)]
    );
    assert_eq!(
        last.len(),
        oracle.newest.len(),
        "status changes only for the planned shipments"
    );
    eprintln!(
        "status changes: {} records, the last one per shipment its last status",
        published.values().map(Vec::len).sum::<usize>()
    );
}
