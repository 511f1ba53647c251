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
use support::registry_double::RegistryDouble;
use support::{committed, end_offsets, mock, read_all, wait_exit, wait_until, Reaper};

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

/// Each record's (offset, decision) in a report.
fn decisions(report: &Value) -> Vec<(i64, String)> {
    report["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            (
                r["offset"].as_i64().expect("offset"),
                r["decision"].as_str().expect("decision").to_string(),
            )
        })
        .collect()
}

#[test]
fn explain_gives_every_record_the_decision_the_run_made() {
    let c = mock::cluster(PARTITIONS, true);
    // The re-drive log, which `dlq replay` creates on a real broker.
    c.mock
        .create_topic(&format!("{}.redrive", c.dlq), 1, 1)
        .expect("re-drive log topic");
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

    // The command, on the stopped member's store: every key.
    let letters: BTreeSet<(i32, i64)> = read_all(&c.bootstrap, &c.dlq)
        .iter()
        .map(|l| {
            let header = |name: &str| l.headers.get(name).and_then(|v| v.parse::<i64>().ok());
            (
                header("orderly.source.partition").expect("source partition") as i32,
                header("orderly.source.offset").expect("source offset"),
            )
        })
        .collect();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut lettered = BTreeSet::new();
    for key in &keys {
        let out = instance
            .command(&["explain", key, "--json"])
            .output()
            .expect("explain");
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{key}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let report: Value = serde_json::from_str(&text).expect("JSON");
        let partition = report["partition"].as_i64().expect("partition") as i32;
        assert_eq!(
            report["stored"]["version"],
            expected
                .states
                .get(*key)
                .map_or(Value::Null, |s| s.version.into()),
            "{key}"
        );
        assert_eq!(report["truncated"], false);
        let mine = decisions(&report);
        assert_eq!(
            over_http.get(*key),
            Some(&mine),
            "{key}: the endpoint and the command decide alike"
        );
        for record in report["records"].as_array().expect("records") {
            let decision = record["decision"].as_str().expect("decision");
            *totals.entry(decision.to_string()).or_default() += 1;
            if decision == "dead_lettered" {
                let offset = record["offset"].as_i64().expect("offset");
                assert!(
                    record["letter"]["dlq_offset"].is_i64(),
                    "{key}: the letter of offset {offset} is found: {record}"
                );
                lettered.insert((partition, offset));
            }
        }
    }
    assert_eq!(
        lettered, letters,
        "the dead-lettered records are the letters"
    );
    let stats = instance.stats();
    eprintln!(
        "explained {} keys, {} records: {totals:?}; the run's counters: {}",
        keys.len(),
        records.len(),
        stats["totals"]
    );
    let run_made = |name: &str| stats["totals"][name].as_u64().unwrap_or(0);
    let explained = |name: &str| totals.get(name).copied().unwrap_or(0);
    assert_eq!(
        explained("applied"),
        run_made("applied"),
        "{totals:?} {stats}"
    );
    assert_eq!(
        explained("duplicate"),
        run_made("duplicates"),
        "{totals:?} {stats}"
    );
    assert_eq!(explained("stale"), run_made("stale"), "{totals:?} {stats}");
    assert_eq!(
        explained("dead_lettered"),
        run_made("dead_lettered"),
        "{totals:?} {stats}"
    );
    assert_eq!(explained("other_key"), 0);
    assert!(
        explained("duplicate") > 0 && explained("stale") > 0 && explained("dead_lettered") > 0,
        "the workload has every decision: {totals:?}"
    );
    assert_eq!(
        totals.values().sum::<u64>(),
        records.len() as u64,
        "every record explained once"
    );

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
