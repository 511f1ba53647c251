//! Rebalance pauses, read from the processors' debug logs: every decided
//! batch is logged with its partition and a timestamp, so a partition's
//! pauses are the gaps between its consecutive batches across all
//! instances. A gap whose two batches ran on different instances is a
//! partition that moved (drain, revoke, assignment, restore); one on the
//! same instance is a partition that stayed.

use std::collections::BTreeMap;

/// `RUST_LOG` that logs every decided batch.
pub const BATCH_LOG: &str = "info,orderly::processor::partition=debug,librdkafka=warn,rdkafka=warn";

/// Seconds since the epoch of an RFC 3339 UTC timestamp as tracing prints
/// it (`2026-12-01T11:56:22.123456Z`).
fn seconds(stamp: &str) -> Option<f64> {
    let (date, time) = stamp.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>());
    let (y, m, day) = (d.next()?.ok()?, d.next()?.ok()?, d.next()?.ok()?);
    let mut t = time.split(':');
    let (h, min, s) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days as f64 * 86_400.0 + h * 3600.0 + min * 60.0 + s)
}

/// (time, instance) of every decided batch, per partition.
pub fn batches(logs: &[String]) -> BTreeMap<i32, Vec<(f64, usize)>> {
    let mut out: BTreeMap<i32, Vec<(f64, usize)>> = BTreeMap::new();
    for (instance, log) in logs.iter().enumerate() {
        for line in log.lines().filter(|l| l.contains("batch decided")) {
            let Some(at) = line.split_whitespace().next().and_then(seconds) else {
                continue;
            };
            let Some(partition) = line.split_whitespace().rev().find_map(|w| {
                w.strip_prefix("partition=")
                    .and_then(|p| p.parse::<i32>().ok())
            }) else {
                continue;
            };
            out.entry(partition).or_default().push((at, instance));
        }
    }
    for list in out.values_mut() {
        list.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// The pauses seen: gaps (seconds) where the partition moved, and the
/// longest gap of each partition while it stayed on one instance.
#[derive(Debug, Default)]
pub struct Pauses {
    pub moved: Vec<f64>,
    pub stayed_longest: Vec<f64>,
}

pub fn pauses(batches: &BTreeMap<i32, Vec<(f64, usize)>>) -> Pauses {
    let mut out = Pauses::default();
    for list in batches.values() {
        let mut longest_stay: f64 = 0.0;
        for pair in list.windows(2) {
            let ((t0, i0), (t1, i1)) = (pair[0], pair[1]);
            if i0 == i1 {
                longest_stay = longest_stay.max(t1 - t0);
            } else {
                out.moved.push(t1 - t0);
            }
        }
        out.stayed_longest.push(longest_stay);
    }
    out
}

/// (median, max) of `values`.
pub fn median_max(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    (sorted[sorted.len() / 2], sorted[sorted.len() - 1])
}

#[test]
fn timestamps_parse_across_days() {
    let a = seconds("2026-12-01T23:59:59.5Z").unwrap();
    let b = seconds("2026-12-02T00:00:00.25Z").unwrap();
    assert!((b - a - 0.75).abs() < 1e-6, "{a} {b}");
    assert_eq!(seconds("1970-01-01T00:00:01Z"), Some(1.0));
}
