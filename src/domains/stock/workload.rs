//! The stock load generator and its independently computed outcome: per
//! SKU a restock, then reservations, releases and restocks that never take
//! availability below zero; some events sent twice (a producer retry, a
//! replay), some sent after the SKU's next event (a reordering: the later
//! one applies, the earlier one is stale and its delta lost), a few poison
//! records. What the records imply (each SKU's final level and version, the
//! four counters, the availability changes the outbox publishes) is
//! computed from the send order alone, by the engine's documented rules,
//! for `orderly produce --expect-out`, `orderly demo` and the tests.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::{Stock, StockChange, StockEncoder, StockEventKind, StockLevel};
use crate::domains::orders::workload::PlannedRecord;
use crate::engine::codec::EncodeError;
use crate::engine::entity::Event;
use crate::engine::outcomes::Outcomes;

/// What a stock workload is.
#[derive(Debug, Clone)]
pub struct StockSpec {
    /// How many SKUs (each a run of events).
    pub skus: usize,
    /// The random generator's seed: the same spec and seed plan the same
    /// records.
    pub seed: u64,
    /// Chance an event is sent twice (the copy later in the stream).
    pub duplicate_rate: f64,
    /// Chance an event is sent after the SKU's next one instead of before it
    /// (0: every SKU's events in version order).
    pub reorder_rate: f64,
    /// Poison records per good record.
    pub poison_rate: f64,
    /// Prefix of the SKUs (`<PREFIX>-00001` and on).
    pub sku_prefix: String,
}

/// What the planned records imply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StockExpectation {
    /// Every planned record, poison included.
    pub records: u64,
    /// The four outcomes the records imply (flattened: the `--expect-out`
    /// file keeps its four top-level counts).
    #[serde(flatten)]
    pub outcomes: Outcomes,
    /// Per SKU: its last applied version and its level after every applied
    /// event.
    pub levels: BTreeMap<String, (i64, StockLevel)>,
    /// The `event_id`s of applied events that changed their SKU's
    /// availability (a SKU's first applied event included): what the outbox
    /// must publish.
    #[serde(default)]
    pub status_changes: BTreeSet<String>,
}

/// One good record as the generator wrote it: what deciding it needs.
#[derive(Debug, Clone)]
struct Sent {
    event_id: String,
    version: i64,
    change: StockChange,
}

/// The records of `spec`, in the order to produce them, and what they imply.
pub fn plan(
    spec: &StockSpec,
    encoder: &StockEncoder,
) -> Result<(Vec<PlannedRecord>, StockExpectation), EncodeError> {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    // (send time, record, the event it carries; None: poison)
    let mut timed: Vec<(f64, PlannedRecord, Option<Sent>)> = Vec::new();
    let mut generated = 0u64;
    for s in 1..=spec.skus {
        let sku = format!("{}-{s:05}", spec.sku_prefix);
        let mut level = StockLevel::default();
        let events = rng.gen_range(5..40);
        let mut at = rng.gen_range(0.0..1.0);
        // Where each version's first send is in `timed`.
        let mut originals = Vec::with_capacity(events as usize);
        for version in 1..=events {
            generated += 1;
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
            let sent = Sent {
                event_id: event.event_id,
                version,
                change,
            };
            if rng.gen_bool(spec.duplicate_rate) {
                let copy = PlannedRecord {
                    key: sku.clone(),
                    payload: payload.clone(),
                };
                timed.push((at + rng.gen_range(0.0..0.2), copy, Some(sent.clone())));
            }
            originals.push(timed.len());
            timed.push((
                at,
                PlannedRecord {
                    key: sku.clone(),
                    payload,
                },
                Some(sent),
            ));
        }
        // A reordering swaps the send times of two consecutive versions (no
        // draw at all without one, so such plans stay as they were).
        if spec.reorder_rate > 0.0 {
            for pair in originals.windows(2) {
                if rng.gen_bool(spec.reorder_rate) {
                    let earlier = timed[pair[0]].0;
                    timed[pair[0]].0 = timed[pair[1]].0;
                    timed[pair[1]].0 = earlier;
                }
            }
        }
    }
    let poison = (generated as f64 * spec.poison_rate).round() as u64;
    for i in 0..poison {
        // A schema id no registry has: dead-lettered as unknown_schema.
        timed.push((
            rng.gen_range(0.0..1.0),
            PlannedRecord {
                key: format!("{}-poison-{i}", spec.sku_prefix),
                payload: vec![0, 0x7f, 0xff, 0xff, 0xff, 1, 2, 3],
            },
            None,
        ));
    }
    // A stable sort keeps each SKU's sends in time order: version order but
    // for the reorderings, a copy after the send it copies was first timed.
    timed.sort_by(|a, b| a.0.total_cmp(&b.0));
    let expected = expect(&timed);
    Ok((timed.into_iter().map(|(_, r, _)| r).collect(), expected))
}

/// What the records, in send order, imply: each decided as the engine
/// decides (newer than the SKU's version: applied; an id the SKU applied:
/// duplicate; otherwise stale), each undecodable one dead-lettered.
fn expect(sends: &[(f64, PlannedRecord, Option<Sent>)]) -> StockExpectation {
    // Per SKU: version, level, applied event ids.
    let mut skus: HashMap<&str, (i64, StockLevel, HashSet<&str>)> = HashMap::new();
    let mut expected = StockExpectation {
        records: sends.len() as u64,
        ..StockExpectation::default()
    };
    for (_, record, sent) in sends {
        let Some(sent) = sent else {
            expected.outcomes.dead_lettered += 1;
            continue;
        };
        // Version 0: no event applied yet (versions start at 1).
        let (version, level, applied) = skus.entry(record.key.as_str()).or_default();
        if sent.version > *version {
            let before = (*version > 0).then(|| Stock::status_of(level));
            *level = level.after(sent.change);
            if before != Some(Stock::status_of(level)) {
                expected.status_changes.insert(sent.event_id.clone());
            }
            *version = sent.version;
            applied.insert(sent.event_id.as_str());
            expected.outcomes.applied += 1;
        } else if applied.contains(sent.event_id.as_str()) {
            expected.outcomes.duplicates += 1;
        } else {
            expected.outcomes.stale += 1;
        }
    }
    expected.levels = skus
        .into_iter()
        .map(|(sku, (version, level, _))| (sku.to_string(), (version, level)))
        .collect();
    expected
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

    async fn encoder() -> StockEncoder {
        StockEncoder::register(&Registry::memory(), "stock")
            .await
            .unwrap()
    }

    fn spec(skus: usize, seed: u64, reorder_rate: f64) -> StockSpec {
        StockSpec {
            skus,
            seed,
            duplicate_rate: 0.2,
            reorder_rate,
            poison_rate: 0.01,
            sku_prefix: "sku".into(),
        }
    }

    #[tokio::test]
    async fn plans_are_deterministic_and_never_oversell() {
        let encoder = encoder().await;
        let spec = spec(50, 3, 0.0);
        let (a, expected) = plan(&spec, &encoder).unwrap();
        let (b, again) = plan(&spec, &encoder).unwrap();
        assert_eq!(a, b);
        assert_eq!(expected, again);
        assert_eq!(
            expected.records,
            expected.outcomes.applied
                + expected.outcomes.duplicates
                + expected.outcomes.dead_lettered
        );
        assert!(expected.outcomes.duplicates > 0 && expected.outcomes.dead_lettered > 0);
        assert!(expected.levels.values().all(|(_, l)| l.available() >= 0));
    }

    /// With reorderings, an event sent after its SKU's next one is stale and
    /// its delta is not in the level; the expectation replays the engine's
    /// rules over the send order, so the four outcomes still add up.
    #[tokio::test]
    async fn reordered_events_are_expected_stale_and_their_deltas_lost() {
        let encoder = encoder().await;
        let reordered = spec(200, 11, 0.1);
        let (records, expected) = plan(&reordered, &encoder).unwrap();
        assert_eq!(records.len() as u64, expected.records);
        assert_eq!(expected.records, expected.outcomes.total());
        assert!(
            expected.outcomes.stale > 0
                && expected.outcomes.duplicates > 0
                && expected.outcomes.dead_lettered > 0
        );
        assert_eq!(expected.levels.len(), reordered.skus);
        // Every SKU's first applied event publishes its availability.
        assert!(expected.status_changes.len() >= reordered.skus);
        let in_order = plan(&spec(200, 11, 0.0), &encoder).unwrap().1;
        assert_eq!(in_order.outcomes.stale, 0);
    }
}
