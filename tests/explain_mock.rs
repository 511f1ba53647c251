//! `orderly explain` and `GET /explain/{key}` on librdkafka's mock cluster:
//! orders whose events were redelivered, reordered and poisoned, processed
//! by the `orderly` binary (the registry double over HTTP, as both the run
//! and the command read it); then every key explained.
//!
//! What the run decided is read back from it: the store's counters (the
//! explanations of all keys add up to them, decision by decision), its
//! final states (each key's replay ends where the store is, so the command
//! exits 0), and the dead-letter topic (a key's dead-lettered records are
//! exactly its letters, each found there).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::time::Duration;

use serde_json::Value;

use orderly::testkit::orders::workload::{plan, WorkloadSpec};
use orderly::testkit::orders::Encoder;
use orderly::testkit::produce_planned;
use orderly::Registry;
use support::explain::decisions;
use support::registry_double::RegistryDouble;
use support::{committed, end_offsets, mock, wait_exit, wait_until, Reaper};

const PARTITIONS: i32 = 2;
const EXIT_CHECK_FAILED: i32 = 4;

/// `GET path` with an optional bearer token: (status, body).
fn http_get(address: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: {address}\r\n{auth}\r\n"
    )
    .expect("request");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("response");
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    (status, body)
}

#[test]
fn explain_gives_every_record_the_decision_the_run_made() {
    let c = cluster_with_redrive_log();
    let double = RegistryDouble::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let registry = Registry::http(&double.url, Duration::from_secs(5)).expect("registry");
    let encoder = runtime
        .block_on(Encoder::register(&registry, &c.topic))
        .expect("register");
    let spec = WorkloadSpec {
        orders: 16,
        seed: 54,
        duplicate_rate: 0.25,
        reorder_rate: 0.25,
        poison_rate: 0.08,
        events_per_order: Some(8),
        ..Default::default()
    };
    let (records, expected) = plan(&spec, &encoder).expect("plan");
    let producer = mock::producer(&c.bootstrap);
    runtime
        .block_on(produce_planned(&producer, &c.topic, &records))
        .expect("produce");
    let group = support::unique("group");
    let token = "explain-secret";
    let instance = c.instance(&double.url, &group, "commit_interval_ms = 200");
    let reaper = Reaper::default();
    let mut run = reaper.watch(instance.spawn_run_env(
        None,
        "info,librdkafka=warn,rdkafka=warn",
        &[("ORDERLY_HTTP__BEARER_TOKEN", token)],
    ));
    let ends = end_offsets(&c.bootstrap, &c.topic, PARTITIONS);
    let caught_up = wait_until(Duration::from_secs(60), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    assert!(caught_up, "the run caught up\n{}", instance.log());
    let keys: BTreeSet<&str> = records.iter().map(|r| r.key.as_str()).collect();

    // The endpoint, while the run owns every partition: behind the token.
    let address = instance.wait_http(0);
    let some = *keys.iter().next().expect("a key");
    let (status, _) = http_get(&address, &format!("/explain/{some}"), None);
    assert_eq!(status, 401, "the token guards /explain");
    let mut over_http = BTreeMap::new();
    for key in &keys {
        let (status, body) = http_get(&address, &format!("/explain/{key}"), Some(token));
        assert_eq!(status, 200, "{body}");
        let report: Value = serde_json::from_str(&body).expect("JSON");
        assert_eq!(report["disagreement"], Value::Null, "{key}: {body}");
        assert_eq!(report["stored"]["source"], "this member's store");
        over_http.insert(key.to_string(), decisions(&report));
    }
    let (status, body) = http_get(
        &address,
        &format!("/explain/{some}?from=yesterday"),
        Some(token),
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("RFC 3339"), "{body}");

    support::signal(&run, "TERM");
    assert!(
        wait_exit(&mut run, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "the run stopped cleanly\n{}",
        instance.log()
    );

    // The command, on the stopped member's store: every key, deciding as
    // the endpoint did.
    let reports = support::explain::explain_every_key(
        &instance,
        &c.bootstrap,
        &c.dlq,
        &keys,
        records.len() as u64,
        |key| expected.states.get(key).map(|s| s.version),
    );
    for (key, report) in &reports {
        assert_eq!(
            over_http.get(key),
            Some(&decisions(report)),
            "{key}: the endpoint and the command decide alike"
        );
    }

    // A key the topic does not hold; a start past every record.
    let out = instance
        .command(&["explain", "order-none", "--json"])
        .output()
        .expect("explain");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report["records"], Value::Array(vec![]));
    let out = instance
        .command(&["explain", some, "--from", "999999"])
        .output()
        .expect("explain");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(EXIT_CHECK_FAILED), "{text}");
    assert!(
        text.contains("DISAGREES") && text.contains("no record of the key"),
        "{text}"
    );
    drop(c.mock);
}

/// A mock cluster with its re-drive log topic, which `dlq replay` creates
/// on a real broker (the mock has no CreateTopics).
fn cluster_with_redrive_log() -> mock::Cluster {
    let c = mock::cluster(PARTITIONS, true);
    c.mock
        .create_topic(&format!("{}.redrive", c.dlq), 1, 1)
        .expect("re-drive log topic");
    c
}

/// Runs `orderly run` on `c` (`extra`: the instance's settings) until its
/// group has committed every record, then stops it.
fn run_to_the_end(c: &mock::Cluster, registry_url: &str, extra: &str) -> support::Instance {
    let group = support::unique("group");
    let instance = c.instance(registry_url, &group, extra);
    let reaper = Reaper::default();
    let mut run = reaper.watch(instance.spawn_run(None));
    let ends = end_offsets(&c.bootstrap, &c.topic, PARTITIONS);
    let caught_up = wait_until(Duration::from_secs(60), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    assert!(caught_up, "the run caught up\n{}", instance.log());
    support::signal(&run, "TERM");
    assert!(
        wait_exit(&mut run, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "the run stopped cleanly\n{}",
        instance.log()
    );
    instance
}

/// The other two kinds: stock (an accumulating state) and the no-code
/// entity (shipments, configured by field names), each key explained and
/// checked against its run as the orders are above.
#[test]
fn explain_agrees_with_the_run_for_stock_and_the_no_code_entity() {
    use orderly::testkit::stock::workload::{plan as stock_plan, StockSpec};
    use orderly::testkit::stock::StockEncoder;
    use support::shipments::{entity_config, plan as shipments, Schemas};
    let double = RegistryDouble::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let registry = Registry::http(&double.url, Duration::from_secs(5)).expect("registry");

    let c = cluster_with_redrive_log();
    let encoder = runtime
        .block_on(StockEncoder::register(&registry, &c.topic))
        .expect("register the stock schema");
    let (records, expected) = stock_plan(
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
    runtime
        .block_on(produce_planned(
            &mock::producer(&c.bootstrap),
            &c.topic,
            &records,
        ))
        .expect("produce");
    let instance = run_to_the_end(
        &c,
        &double.url,
        "commit_interval_ms = 200\n[entity]\nkind = \"stock\"",
    );
    let keys: BTreeSet<&str> = records.iter().map(|r| r.key.as_str()).collect();
    support::explain::explain_every_key(
        &instance,
        &c.bootstrap,
        &c.dlq,
        &keys,
        records.len() as u64,
        |key| expected.levels.get(key).map(|(version, _)| *version),
    );
    drop(c.mock);

    let c = cluster_with_redrive_log();
    let schemas = runtime.block_on(Schemas::register(&registry, &c.topic));
    let (records, oracle) = shipments(&schemas, 14, 543);
    runtime
        .block_on(produce_planned(
            &mock::producer(&c.bootstrap),
            &c.topic,
            &records,
        ))
        .expect("produce");
    let section = toml::to_string(&entity_config()).expect("[entity] as TOML");
    let instance = run_to_the_end(
        &c,
        &double.url,
        &format!("commit_interval_ms = 200\n[entity]\n{section}"),
    );
    let keys: BTreeSet<&str> = records.iter().map(|r| r.key.as_str()).collect();
    support::explain::explain_every_key(
        &instance,
        &c.bootstrap,
        &c.dlq,
        &keys,
        records.len() as u64,
        |key| oracle.newest.get(key).map(|n| n.0),
    );
    drop(c.mock);
}
