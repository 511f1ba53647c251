//! The stock load generator and its independently computed outcome: per
//! SKU a restock, then reservations, releases and restocks that never take
//! availability below zero; some events sent twice (a producer retry, a
//! replay), a few poison records. What the records imply (each SKU's final
//! level and version, the four counters) is computed from the plan alone,
//! for `orderly produce --expect-out` and the tests.

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::{StockChange, StockEncoder, StockEventKind, StockLevel};
use crate::domains::orders::workload::PlannedRecord;
use crate::engine::codec::EncodeError;
use crate::engine::entity::Event;

/// What a stock workload is.
#[derive(Debug, Clone)]
pub struct StockSpec {
    pub skus: usize,
    pub seed: u64,
    /// Chance an event is sent twice (the copy later in the stream).
    pub duplicate_rate: f64,
    /// Poison records per good record.
    pub poison_rate: f64,
    /// Prefix of the SKUs (`<PREFIX>-00001` and on).
    pub sku_prefix: String,
}

/// What the planned records imply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StockExpectation {
    pub records: u64,
    pub applied: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub dead_lettered: u64,
    /// Per SKU: its last version and its level after every event.
    pub levels: BTreeMap<String, (i64, StockLevel)>,
}

impl StockExpectation {
    /// The four outcomes the records imply.
    pub fn outcomes(&self) -> crate::engine::outcomes::Outcomes {
        crate::engine::outcomes::Outcomes {
            applied: self.applied,
            duplicates: self.duplicates,
            stale: self.stale,
            dead_lettered: self.dead_lettered,
        }
    }
}

/// The records of `spec`, in the order to produce them, and what they imply.
pub fn plan(
    spec: &StockSpec,
    encoder: &StockEncoder,
) -> Result<(Vec<PlannedRecord>, StockExpectation), EncodeError> {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let mut timed: Vec<(f64, PlannedRecord)> = Vec::new();
    let mut expected = StockExpectation::default();
    for s in 1..=spec.skus {
        let sku = format!("{}-{s:05}", spec.sku_prefix);
        let mut level = StockLevel::default();
        let events = rng.gen_range(5..40);
        let mut at = rng.gen_range(0.0..1.0);
        for version in 1..=events {
            let change = next_change(&mut rng, version, level);
            level = level.after(change);
            let event = Event {
                event_id: format!("{sku}-{version}-{:08x}", rng.gen::<u32>()),
                key: sku.clone(),
                version,
                occurred_at: 1_764_547_200_000 + version,
                body: change,
            };
            let payload = encoder.encode(&event)?;
            at += rng.gen_range(0.0..0.01);
            expected.applied += 1;
            if rng.gen_bool(spec.duplicate_rate) {
                let copy = PlannedRecord {
                    key: sku.clone(),
                    payload: payload.clone(),
                };
                timed.push((at + rng.gen_range(0.0..0.2), copy));
                expected.duplicates += 1;
            }
            timed.push((
                at,
                PlannedRecord {
                    key: sku.clone(),
                    payload,
                },
            ));
        }
        expected.levels.insert(sku, (events, level));
    }
    let poison = (expected.applied as f64 * spec.poison_rate).round() as u64;
    for i in 0..poison {
        // A schema id no registry has: dead-lettered as unknown_schema.
        timed.push((
            rng.gen_range(0.0..1.0),
            PlannedRecord {
                key: format!("{}-poison-{i}", spec.sku_prefix),
                payload: vec![0, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3],
            },
        ));
        expected.dead_lettered += 1;
    }
    // A stable sort keeps each SKU's events in version order (their times
    // increase); a copy lands after its original.
    timed.sort_by(|a, b| a.0.total_cmp(&b.0));
    expected.records = timed.len() as u64;
    Ok((timed.into_iter().map(|(_, r)| r).collect(), expected))
}

fn next_change(rng: &mut StdRng, version: i64, level: StockLevel) -> StockChange {
    let restock = |rng: &mut StdRng| StockChange {
        kind: StockEventKind::Restocked,
        quantity: rng.gen_range(5..50),
    };
    if version == 1 || rng.gen_bool(0.15) {
        restock(rng)
    } else if level.reserved > 0 && rng.gen_bool(0.3) {
        StockChange {
            kind: StockEventKind::Released,
            quantity: rng.gen_range(1..=level.reserved),
        }
    } else if level.available() > 0 {
        StockChange {
            kind: StockEventKind::Reserved,
            quantity: rng.gen_range(1..=level.available()),
        }
    } else {
        restock(rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    #[tokio::test]
    async fn plans_are_deterministic_and_never_oversell() {
        let registry = Registry::memory();
        let encoder = StockEncoder::register(&registry, "stock").await.unwrap();
        let spec = StockSpec {
            skus: 50,
            seed: 3,
            duplicate_rate: 0.2,
            poison_rate: 0.01,
            sku_prefix: "sku".into(),
        };
        let (a, expected) = plan(&spec, &encoder).unwrap();
        let (b, again) = plan(&spec, &encoder).unwrap();
        assert_eq!(a, b);
        assert_eq!(expected, again);
        assert_eq!(
            expected.records,
            expected.applied + expected.duplicates + expected.dead_lettered
        );
        assert!(expected.duplicates > 0 && expected.dead_lettered > 0);
        assert!(expected.levels.values().all(|(_, l)| l.available() >= 0));
    }
}
