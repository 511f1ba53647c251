//! The workload generator: realistic order lifecycles with duplicates,
//! reorderings, v1 and v2 records and poison records, plus the expected
//! outcome computed here, independently of the processor, from the send
//! order alone.

use std::collections::{HashMap, HashSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::codec::{wire, EncodeError, Encoder, WriterVersion};
use crate::event::{EventType, OrderEvent, StateView, DEFAULT_CURRENCY};

/// The shape of a generated workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkloadSpec {
    pub orders: usize,
    pub seed: u64,
    /// Chance that an event is sent a second time (a producer retry).
    pub duplicate_rate: f64,
    /// Chance that an event is swapped with the next event of its order.
    pub reorder_rate: f64,
    /// Poison records per good record.
    pub poison_rate: f64,
    /// Share of events written with the v1 schema (no `currency`).
    pub v1_share: f64,
    /// When set, every order has exactly this many events (CREATED, PAID,
    /// repeated SHIPPED tracking updates, DELIVERED): long-lived orders for
    /// throughput runs. When unset, orders have realistic 1 to 4 event
    /// lifecycles, some cancelled.
    #[serde(default)]
    pub events_per_order: Option<u32>,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec { orders: 5_000, seed: 42, duplicate_rate: 0.05, reorder_rate: 0.02, poison_rate: 0.002, v1_share: 0.3, events_per_order: None }
    }
}

/// One record to produce, keyed by order id.
pub struct PlannedRecord {
    pub key: String,
    pub payload: Vec<u8>,
}

/// What the processor must end with after consuming every planned record.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Expectation {
    pub records: u64,
    pub applied: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub dead_lettered: u64,
    /// Final state per order id.
    pub states: HashMap<String, StateView>,
}

/// Generates the records in send order and their expected outcome.
pub fn plan(spec: &WorkloadSpec, encoder: &Encoder) -> Result<(Vec<PlannedRecord>, Expectation), EncodeError> {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    // (send time, order index, event, writer version)
    let mut sends: Vec<(f64, usize, OrderEvent, WriterVersion)> = Vec::new();
    let horizon = spec.orders as f64;
    for index in 0..spec.orders {
        let lifecycle = match spec.events_per_order {
            Some(n) => long_lifecycle(n),
            None => lifecycle(&mut rng),
        };
        let order_id = format!("order-{:08}", index);
        let currency = ["EUR", "USD", "GBP", "JPY"][rng.gen_range(0..4)].to_string();
        let amount = rng.gen_range(100..500_000i64);
        let start = rng.gen_range(0.0..horizon);
        let base_ms = 1_764_547_200_000 + (start * 1000.0) as i64;
        let mut events: Vec<(OrderEvent, WriterVersion)> = lifecycle
            .iter()
            .enumerate()
            .map(|(i, event_type)| {
                let writer = if rng.gen_bool(spec.v1_share) { WriterVersion::V1 } else { WriterVersion::V2 };
                let event = OrderEvent {
                    event_id: uuid::Uuid::from_u128(rng.gen()).to_string(),
                    order_id: order_id.clone(),
                    version: i as i64 + 1,
                    event_type: *event_type,
                    amount: if *event_type == EventType::Cancelled { 0 } else { amount },
                    currency: currency.clone(),
                    occurred_at: base_ms + i as i64 * 60_000,
                };
                (event, writer)
            })
            .collect();
        for i in 0..events.len().saturating_sub(1) {
            if rng.gen_bool(spec.reorder_rate) {
                events.swap(i, i + 1);
            }
        }
        // A duplicate (producer retry) lands right after its original or a
        // couple of events later.
        let mut keyed: Vec<(f64, (OrderEvent, WriterVersion))> = Vec::with_capacity(events.len() + 1);
        for (i, sent) in events.into_iter().enumerate() {
            if rng.gen_bool(spec.duplicate_rate) {
                keyed.push((i as f64 + rng.gen_range(0.1..2.5), sent.clone()));
            }
            keyed.push((i as f64, sent));
        }
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
        let sequence = keyed.into_iter().map(|(_, sent)| sent);
        let mut t = start;
        for (event, writer) in sequence {
            sends.push((t, index, event, writer));
            t += rng.gen_range(0.5..20.0);
        }
    }
    // Interleave orders by send time; an order's own sends keep their order.
    sends.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));

    let mut expectation = Expectation::default();
    let mut applied_ids: HashSet<String> = HashSet::new();
    let mut records = Vec::with_capacity(sends.len() + (sends.len() as f64 * spec.poison_rate) as usize + 1);
    for (_, _, event, writer) in sends {
        if rng.gen_bool(spec.poison_rate.min(1.0)) {
            records.push(poison(&mut rng, encoder, &event)?);
            expectation.dead_lettered += 1;
        }
        // The expected outcome, by the documented rules: an id applied before
        // is a duplicate; a version not above the newest applied is stale.
        let as_read = match writer {
            WriterVersion::V1 => OrderEvent { currency: DEFAULT_CURRENCY.to_string(), ..event.clone() },
            WriterVersion::V2 => event.clone(),
        };
        let newest = expectation.states.get(&event.order_id).map(|s| s.version).unwrap_or(0);
        if applied_ids.contains(&event.event_id) {
            expectation.duplicates += 1;
        } else if event.version <= newest {
            expectation.stale += 1;
        } else {
            expectation.applied += 1;
            applied_ids.insert(event.event_id.clone());
            expectation.states.insert(event.order_id.clone(), StateView::of_event(&as_read));
        }
        records.push(PlannedRecord { key: event.order_id.clone(), payload: encoder.encode(&event, writer)? });
    }
    expectation.records = records.len() as u64;
    Ok((records, expectation))
}

/// CREATED, then PAID, SHIPPED, DELIVERED, with a cancellation possible
/// before shipping.
fn lifecycle(rng: &mut StdRng) -> Vec<EventType> {
    use EventType::*;
    match rng.gen_range(0..10) {
        0 => vec![Created, Cancelled],
        1 => vec![Created, Paid, Cancelled],
        2 => vec![Created],
        3 => vec![Created, Paid],
        4 | 5 => vec![Created, Paid, Shipped],
        _ => vec![Created, Paid, Shipped, Delivered],
    }
}

/// CREATED, PAID, SHIPPED updates, DELIVERED: exactly `n` events (n >= 1).
fn long_lifecycle(n: u32) -> Vec<EventType> {
    use EventType::*;
    (0..n.max(1))
        .map(|i| match i {
            0 => Created,
            1 => Paid,
            i if i + 1 == n => Delivered,
            _ => Shipped,
        })
        .collect()
}

/// A record that must be dead-lettered: each of the poison kinds in turn.
fn poison(rng: &mut StdRng, encoder: &Encoder, near: &OrderEvent) -> Result<PlannedRecord, EncodeError> {
    let good = encoder.encode(near, WriterVersion::V2)?;
    let payload = match rng.gen_range(0..4) {
        0 => {
            let mut bytes = good;
            bytes[0] = 0x7b; // a JSON `{` where the magic byte goes
            bytes
        }
        1 => wire(999_999, &good[5..]), // unknown schema id
        2 => good[..good.len() / 2].to_vec(), // truncated body
        _ => {
            let mut bad = near.clone();
            bad.version = -1; // decodes, but fails validation
            encoder.encode(&bad, WriterVersion::V2)?
        }
    };
    Ok(PlannedRecord { key: near.order_id.clone(), payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_is_deterministic_and_counts_add_up() {
        let encoder = Encoder::with_ids(1, 2);
        let spec = WorkloadSpec { orders: 500, ..Default::default() };
        let (records, expected) = plan(&spec, &encoder).unwrap();
        let (again, expected_again) = plan(&spec, &encoder).unwrap();
        assert_eq!(expected, expected_again);
        assert_eq!(records.len(), again.len());
        assert_eq!(expected.applied + expected.duplicates + expected.stale + expected.dead_lettered, expected.records);
        assert_eq!(expected.states.len(), 500);
        assert!(expected.duplicates > 0 && expected.stale > 0, "{expected:?}");
    }
}
