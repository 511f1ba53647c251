//! The checks `orderly explain` is held to, on the mock cluster and on
//! Apache Kafka: every key explained with the stopped member's
//! configuration; each replay ends at the stored version (exit 0, no
//! disagreement); the dead-lettered records are exactly the dead-letter
//! topic's letters; per decision, the explanations add up to the store's
//! counters, and every record is explained once.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{read_all, Instance};

/// Each record's (offset, decision) in a report.
pub fn decisions(report: &Value) -> Vec<(i64, String)> {
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

/// Explains every key of `keys` with `instance` (its processor stopped),
/// checks what the module doc says against the run (`dlq` on `bootstrap`
/// holds its letters, `records` of them in the input) and `version_of` (a
/// key's expected stored version), and returns each key's report.
pub fn explain_every_key(
    instance: &Instance,
    bootstrap: &str,
    dlq: &str,
    keys: &BTreeSet<&str>,
    records: u64,
    version_of: impl Fn(&str) -> Option<i64>,
) -> BTreeMap<String, Value> {
    let letters: BTreeSet<(i64, i64)> = read_all(bootstrap, dlq)
        .iter()
        .filter_map(|l| {
            let header = |name: &str| l.headers.get(name).and_then(|v| v.parse::<i64>().ok());
            Some((
                header("orderly.source.partition")?,
                header("orderly.source.offset")?,
            ))
        })
        .collect();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    let mut lettered = BTreeSet::new();
    let mut reports = BTreeMap::new();
    let started = std::time::Instant::now();
    for key in keys {
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
        assert_eq!(report["truncated"], false);
        let partition = report["partition"].as_i64().expect("partition");
        for record in report["records"].as_array().expect("records") {
            let decision = record["decision"].as_str().expect("decision").to_string();
            if decision == "dead_lettered" {
                assert!(
                    record["letter"]["dlq_offset"].is_i64(),
                    "{key}: its letter is found: {record}"
                );
                lettered.insert((partition, record["offset"].as_i64().expect("offset")));
            }
            *totals.entry(decision).or_default() += 1;
        }
        reports.insert(key.to_string(), report);
    }
    eprintln!(
        "explain: {} keys of {records} records in {:.1} s: {totals:?}",
        keys.len(),
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
    assert_eq!(explained("other_key"), 0, "{totals:?}");
    assert_eq!(
        totals.values().sum::<u64>(),
        records,
        "every record explained once"
    );
    assert!(
        explained("duplicate") > 0 && explained("dead_lettered") > 0,
        "the workload has redeliveries and poison: {totals:?}"
    );
    reports
}
