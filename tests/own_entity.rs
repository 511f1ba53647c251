//! A user's own binary (`examples/shipments.rs`, built by `cargo test`) on
//! the mock cluster and the registry double over HTTP: its `run` keeps the
//! newest scan per shipment through redeliveries, late (stale) scans and a
//! poison record, and its `state get` and `state dump` show them.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use apache_avro::types::Value;
use apache_avro::Schema;
use orderly::testkit::orders::workload::PlannedRecord;
use orderly::testkit::produce_planned;
use orderly::Registry;
use support::mock::{self, producer};
use support::registry_double::RegistryDouble;
use support::{committed, signal, unique, wait_exit, wait_until};

const PARTITIONS: i32 = 4;

const SCHEMA: &str = r#"{"type": "record", "name": "ShipmentScanned", "namespace": "example", "fields": [
  {"name": "scan_id", "type": "string"}, {"name": "shipment_id", "type": "string"},
  {"name": "seq", "type": "long"}, {"name": "status", "type": "string"},
  {"name": "location", "type": "string"}, {"name": "at", "type": "long"}]}"#;

/// The example binary, next to the test binaries' `orderly`.
fn shipments_bin() -> PathBuf {
    let orderly = PathBuf::from(env!("CARGO_BIN_EXE_orderly"));
    let bin = orderly
        .parent()
        .expect("target dir")
        .join("examples/shipments");
    assert!(
        bin.exists(),
        "{} is missing: `cargo test` builds the examples (or `cargo build --examples`)",
        bin.display()
    );
    bin
}

fn scan(schema: &Schema, id: u32, shipment: &str, seq: i64, status: &str, tag: &str) -> Vec<u8> {
    let record = Value::Record(vec![
        (
            "scan_id".into(),
            Value::String(format!("{tag}scan-{shipment}-{seq}")),
        ),
        ("shipment_id".into(), Value::String(shipment.into())),
        ("seq".into(), Value::Long(seq)),
        ("status".into(), Value::String(status.into())),
        ("location".into(), Value::String(format!("hub-{seq}"))),
        ("at".into(), Value::Long(1_764_547_200_000 + seq)),
    ]);
    #[allow(deprecated)]
    let body = apache_avro::to_avro_datum(schema, record).expect("encode");
    orderly::testkit::wire(id, &body)
}

#[test]
fn a_users_own_binary_keeps_the_newest_scan_of_each_shipment() {
    let bin = shipments_bin();
    let c = mock::cluster(PARTITIONS, true);
    let registry = RegistryDouble::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let http = Registry::http(&registry.url, Duration::from_secs(5)).expect("registry");
    let id = runtime
        .block_on(http.register(&format!("{}-value", c.topic), SCHEMA))
        .expect("register");
    let schema = Schema::parse_str(SCHEMA).expect("schema");
    let statuses = [
        "LABELLED",
        "PICKED_UP",
        "IN_TRANSIT",
        "OUT_FOR_DELIVERY",
        "DELIVERED",
    ];
    let mut records = Vec::new();
    let mut want = BTreeMap::new();
    for s in 0..20 {
        let shipment = format!("ship-{s:03}");
        for (i, status) in statuses.iter().enumerate() {
            let payload = scan(&schema, id, &shipment, i as i64 + 1, status, "");
            records.push(PlannedRecord {
                key: shipment.clone(),
                payload: payload.clone(),
            });
            if i % 2 == 0 {
                // A redelivery.
                records.push(PlannedRecord {
                    key: shipment.clone(),
                    payload,
                });
            }
        }
        // A late scan of an older step: stale.
        records.push(PlannedRecord {
            key: shipment.clone(),
            payload: scan(&schema, id, &shipment, 2, "PICKED_UP", "late-"),
        });
        want.insert(shipment, (5, "DELIVERED", "hub-5"));
    }
    records.push(PlannedRecord {
        key: "ship-poison".into(),
        payload: b"not avro".to_vec(),
    });
    let ends = runtime
        .block_on(produce_planned(&producer(&c.bootstrap), &c.topic, &records))
        .expect("produce");

    let group = unique("group");
    let instance = c.instance(&registry.url, &group, "");
    let shipments = |args: &[&str]| {
        let mut command = Command::new(&bin);
        command
            .args(args)
            .arg("--config")
            .arg(&instance.config_path)
            .env("RUST_LOG", "info,librdkafka=warn,rdkafka=warn");
        command
    };
    let log = std::fs::File::create(instance.log_path()).expect("log");
    let mut run = shipments(&["run"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .expect("spawn the example");
    let caught_up = wait_until(Duration::from_secs(90), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&run, "TERM");
    let status = wait_exit(&mut run, Duration::from_secs(30)).expect("exits on SIGTERM");
    let log = std::fs::read_to_string(instance.log_path()).unwrap_or_default();
    assert!(caught_up, "the example did not catch up; its log:\n{log}");
    assert!(status.success(), "{status:?}; log:\n{log}");

    let out = shipments(&["state", "dump"]).output().expect("state dump");
    assert!(out.status.success(), "{out:?}");
    let mut got = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        got.insert(
            v["shipment_id"].as_str().expect("shipment_id").to_string(),
            (
                v["version"].as_i64().expect("version"),
                v["status"].as_str().expect("status").to_string(),
                v["location"].as_str().expect("location").to_string(),
            ),
        );
    }
    let want: BTreeMap<String, (i64, String, String)> = want
        .into_iter()
        .map(|(k, (v, s, l))| (k, (v, s.to_string(), l.to_string())))
        .collect();
    assert_eq!(got, want);

    let out = shipments(&["state", "stats", "--json"])
        .output()
        .expect("state stats");
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stats JSON");
    let totals = &stats["totals"];
    assert_eq!(
        (
            totals["applied"].as_u64(),
            totals["duplicates"].as_u64(),
            totals["stale"].as_u64(),
            totals["dead_lettered"].as_u64()
        ),
        (Some(100), Some(60), Some(20), Some(1)),
        "{stats}"
    );
    let out = shipments(&["state", "get", "ship-007"])
        .output()
        .expect("state get");
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(
        line.starts_with("shipment ship-007: version 5,") && line.contains("DELIVERED"),
        "{line}"
    );
    drop(c.mock);
}
