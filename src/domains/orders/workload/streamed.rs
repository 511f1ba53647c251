//! A workload planned in 16 bytes per send and encoded as it is produced:
//! what lets the bench load tens of millions of events.
//!
//! [`plan`](super::plan) holds every encoded record, every order's expected
//! state and every applied event id at once: about 400 bytes per event,
//! which put a 60M-event plan past this machine's 24 GiB. Here, the plan
//! keeps per send only its time, order, version, type and schema, and per
//! order its amount, currency and start; an event's id is derived from its
//! order and version (a duplicate is the same event, so it gets the same
//! id). Each order's expected outcome depends on its own sends alone (ids
//! are unique per event, versions per order), so it is computed when the
//! order is planned, and its final state is kept as a 64-bit
//! [`fingerprint`]. Records are encoded one at a time as [`StreamedPlan::records`]
//! yields them, with poison records drawn among them as `plan` draws them.
//!
//! The records differ from `plan`'s for the same seed (the ids and draws
//! differ), but follow the same rules: the same lifecycles, duplicate,
//! reorder, poison and v1 rates, and the same two shapes.

use std::collections::HashSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{
    lifecycle, long_lifecycle, poison, with_duplicates, PlannedRecord, Shape, WorkloadSpec,
    FIXED_START_MS,
};
use crate::domains::orders::codec::{Encoder, WriterVersion};
use crate::domains::orders::event::{EventType, OrderEvent, StateView, DEFAULT_CURRENCY};
use crate::engine::codec::EncodeError;
use crate::engine::outcomes::Outcomes;

const TYPES: [EventType; 5] = [
    EventType::Created,
    EventType::Paid,
    EventType::Shipped,
    EventType::Delivered,
    EventType::Cancelled,
];
const CURRENCIES: [&str; 4] = ["EUR", "USD", "GBP", "JPY"];

/// The most events an order may have here (its version is kept in 16 bits).
pub const MAX_EVENTS_PER_ORDER: u32 = u16::MAX as u32;

/// One send: 16 bytes.
#[derive(Debug, Clone, Copy)]
struct Send {
    t: f64,
    order: u32,
    version: u16,
    event_type: u8,
    v1: bool,
}

/// What an order carries on every event.
#[derive(Debug, Clone, Copy)]
struct OrderMeta {
    amount: i64,
    base_ms: i64,
    currency: u8,
}

/// The outcome the records imply, known once they are all yielded (the
/// poison records are drawn as they are).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamedExpectation {
    /// Every record, poison included (known after the last record).
    pub records: u64,
    /// The four outcomes (`dead_lettered` known after the last record).
    pub outcomes: Outcomes,
    /// Applied events that changed their order's status (first ones included).
    pub status_changes: u64,
}

/// A planned workload, encoded as it is read.
#[derive(Debug)]
pub struct StreamedPlan {
    spec: WorkloadSpec,
    orders: Vec<OrderMeta>,
    sends: Vec<Send>,
    fingerprints: Vec<u64>,
    expected: StreamedExpectation,
}

/// Errors planning a workload.
#[derive(Debug, thiserror::Error)]
pub enum StreamedPlanError {
    /// Too many orders or events per order for the compact form.
    #[error("{0}")]
    TooLarge(String),
}

impl StreamedPlan {
    /// Plans `spec`: every order's sends and expected final state.
    pub fn new(spec: &WorkloadSpec) -> Result<Self, StreamedPlanError> {
        if spec.orders > u32::MAX as usize {
            return Err(StreamedPlanError::TooLarge(format!(
                "{} orders: at most {} can be planned",
                spec.orders,
                u32::MAX
            )));
        }
        if spec
            .events_per_order
            .is_some_and(|n| n > MAX_EVENTS_PER_ORDER)
        {
            return Err(StreamedPlanError::TooLarge(format!(
                "{} events per order: at most {MAX_EVENTS_PER_ORDER} can be planned",
                spec.events_per_order.unwrap_or(0)
            )));
        }
        let mut rng = StdRng::seed_from_u64(spec.seed);
        let per_order = spec.events_per_order.unwrap_or(3) as usize;
        let mut plan = StreamedPlan {
            spec: spec.clone(),
            orders: Vec::with_capacity(spec.orders),
            sends: Vec::with_capacity(spec.orders * (per_order + per_order / 10 + 1)),
            fingerprints: Vec::with_capacity(spec.orders),
            expected: StreamedExpectation::default(),
        };
        let mut sequence = Vec::new();
        for index in 0..spec.orders {
            plan.plan_order(&mut rng, index as u32, &mut sequence);
        }
        // Interleave orders by send time; an order's own sends keep their
        // order (their times are non-decreasing and the sort is stable).
        plan.sends
            .sort_by(|a, b| a.t.total_cmp(&b.t).then(a.order.cmp(&b.order)));
        plan.expected.records = plan.sends.len() as u64;
        Ok(plan)
    }

    /// Plans the order `index`: its sends, and its outcome by the
    /// documented rules (an id applied before is a duplicate; a version not
    /// above the newest applied is stale).
    fn plan_order(&mut self, rng: &mut StdRng, index: u32, sequence: &mut Vec<(u16, u8, bool)>) {
        let spec = &self.spec;
        let horizon = spec.orders as f64;
        let types = match spec.events_per_order {
            Some(n) => long_lifecycle(n),
            None => lifecycle(rng),
        };
        let meta = OrderMeta {
            currency: rng.gen_range(0..CURRENCIES.len()) as u8,
            amount: rng.gen_range(100..500_000i64),
            base_ms: 0,
        };
        let start = rng.gen_range(0.0..horizon);
        let meta = OrderMeta {
            base_ms: spec.start_ms.unwrap_or(FIXED_START_MS) + (start * 1000.0) as i64,
            ..meta
        };
        let mut events: Vec<(u16, u8, bool)> = types
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u16 + 1, t.index() as u8, rng.gen_bool(spec.v1_share)))
            .collect();
        for i in 0..events.len().saturating_sub(1) {
            if rng.gen_bool(spec.reorder_rate) {
                events.swap(i, i + 1);
            }
        }
        sequence.clear();
        sequence.extend(with_duplicates(spec, rng, events));
        let times: Vec<f64> = match spec.shape {
            Shape::Clustered => {
                let mut t = start;
                sequence
                    .iter()
                    .map(|_| {
                        let now = t;
                        t += rng.gen_range(0.5..20.0);
                        now
                    })
                    .collect()
            }
            Shape::Interleaved => {
                let mut times: Vec<f64> = (0..sequence.len())
                    .map(|_| rng.gen_range(0.0..horizon))
                    .collect();
                times.sort_by(f64::total_cmp);
                times
            }
        };
        for (t, &(version, event_type, v1)) in times.into_iter().zip(sequence.iter()) {
            self.sends.push(Send {
                t,
                order: index,
                version,
                event_type,
                v1,
            });
        }
        self.orders.push(meta);
        let final_state = self.expect_order(index, sequence);
        self.fingerprints
            .push(final_state.as_ref().map(fingerprint).unwrap_or(0));
    }

    /// Adds the order's outcomes; returns its final state.
    fn expect_order(&mut self, index: u32, sequence: &[(u16, u8, bool)]) -> Option<StateView> {
        let mut applied: HashSet<u16> = HashSet::new();
        let mut newest = 0u16;
        let mut status: Option<u8> = None;
        let mut last = None;
        let outcomes = &mut self.expected.outcomes;
        for &(version, event_type, v1) in sequence {
            if applied.contains(&version) {
                outcomes.duplicates += 1;
            } else if version <= newest {
                outcomes.stale += 1;
            } else {
                outcomes.applied += 1;
                applied.insert(version);
                if status != Some(event_type) {
                    self.expected.status_changes += 1;
                }
                status = Some(event_type);
                newest = version;
                last = Some((version, event_type, v1));
            }
        }
        let (version, event_type, v1) = last?;
        let mut event = self.event(index, version, event_type);
        if v1 {
            event.currency = DEFAULT_CURRENCY.to_string();
        }
        Some(StateView::of_event(&event))
    }

    /// The event `version` of the order `index`.
    fn event(&self, index: u32, version: u16, event_type: u8) -> OrderEvent {
        let meta = self.orders[index as usize];
        let event_type = TYPES[usize::from(event_type) % TYPES.len()];
        OrderEvent {
            event_id: self
                .spec
                .id_format
                .format(event_id_bits(self.spec.seed, index, version)),
            order_id: order_id(&self.spec.order_prefix, index),
            version: i64::from(version),
            event_type,
            amount: if event_type == EventType::Cancelled {
                0
            } else {
                meta.amount
            },
            currency: CURRENCIES[usize::from(meta.currency)].to_string(),
            occurred_at: meta.base_ms + (i64::from(version) - 1) * 60_000,
        }
    }

    /// The planned sends (poison records not counted: they are drawn as the
    /// records are read).
    pub fn sends(&self) -> usize {
        self.sends.len()
    }

    /// The expectation so far: complete after [`Self::records`] was read to
    /// its end (see [`StreamedRecords::expectation`]).
    pub fn expectation(&self) -> &StreamedExpectation {
        &self.expected
    }

    /// The expected final states' fingerprints, by order index (0 for an
    /// order none of whose events applies, which the generator never plans).
    pub fn fingerprints(&self) -> &[u64] {
        &self.fingerprints
    }

    /// The order ids' prefix.
    pub fn order_prefix(&self) -> &str {
        &self.spec.order_prefix
    }

    /// The records in send order, encoded as they are read, poison records
    /// drawn among them at the spec's rate.
    pub fn records<'a>(&'a self, encoder: &'a Encoder) -> StreamedRecords<'a> {
        StreamedRecords {
            plan: self,
            encoder,
            rng: StdRng::seed_from_u64(self.spec.seed ^ 0x9e37_79b9_7f4a_7c15),
            next: 0,
            held: None,
            poison: 0,
        }
    }
}

/// The records of a [`StreamedPlan`], encoded as they are read.
pub struct StreamedRecords<'a> {
    plan: &'a StreamedPlan,
    encoder: &'a Encoder,
    rng: StdRng,
    next: usize,
    /// The good record after a poison record just yielded.
    held: Option<PlannedRecord>,
    poison: u64,
}

impl StreamedRecords<'_> {
    /// The plan's expectation with the poison records drawn so far: the
    /// whole one once every record was read.
    pub fn expectation(&self) -> StreamedExpectation {
        let mut expected = self.plan.expected.clone();
        expected.records += self.poison;
        expected.outcomes.dead_lettered += self.poison;
        expected
    }

    fn next_record(&mut self) -> Option<Result<PlannedRecord, EncodeError>> {
        if let Some(record) = self.held.take() {
            return Some(Ok(record));
        }
        let send = *self.plan.sends.get(self.next)?;
        self.next += 1;
        let event = self.plan.event(send.order, send.version, send.event_type);
        let writer = if send.v1 {
            WriterVersion::V1
        } else {
            WriterVersion::V2
        };
        let good = match self.encoder.encode(&event, writer) {
            Ok(payload) => PlannedRecord {
                key: event.order_id.clone(),
                payload,
            },
            Err(e) => return Some(Err(e)),
        };
        if self.rng.gen_bool(self.plan.spec.poison_rate.min(1.0)) {
            self.poison += 1;
            self.held = Some(good);
            return Some(poison(&mut self.rng, self.encoder, &event));
        }
        Some(Ok(good))
    }
}

impl Iterator for StreamedRecords<'_> {
    type Item = Result<PlannedRecord, EncodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record()
    }
}

/// The order id of the order `index`.
pub fn order_id(prefix: &str, index: u32) -> String {
    format!("{prefix}-{index:08}")
}

/// The order index in `order_id`, if it has `prefix`.
pub fn order_index(prefix: &str, order_id: &str) -> Option<u32> {
    order_id
        .strip_prefix(prefix)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// A 64-bit fingerprint of a state (FNV-1a over its fields): the same in
/// every build, so a loader and a checker in different processes agree.
pub fn fingerprint(state: &StateView) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes.iter().chain(std::iter::once(&0xff)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(state.order_id.as_bytes());
    eat(&state.version.to_le_bytes());
    eat(state.status.as_str().as_bytes());
    eat(&state.amount.to_le_bytes());
    eat(state.currency.as_bytes());
    eat(state.event_id.as_bytes());
    eat(&state.occurred_at.to_le_bytes());
    h
}

/// The 128 bits of the id of the order `index`'s event `version`.
fn event_id_bits(seed: u64, index: u32, version: u16) -> u128 {
    let a = splitmix64(seed ^ ((u64::from(index) << 16) | u64::from(version)));
    let b = splitmix64(a ^ 0x6a09_e667_f3bc_c909);
    (u128::from(a) << 64) | u128::from(b)
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::{expect, Expectation, IdFormat};
    use super::*;

    /// Decodes every streamed record and computes the outcome from them by
    /// `plan`'s own rules (`expect`), independently of the streamed plan's
    /// per-order computation: both must agree, state by state.
    async fn check(spec: WorkloadSpec) -> (StreamedExpectation, Expectation) {
        let registry = crate::registry::Registry::memory();
        let encoder = Encoder::register(&registry, "t").await.unwrap();
        let decoder = crate::engine::codec::Decoder::new(registry);
        let plan = StreamedPlan::new(&spec).unwrap();
        let mut records = plan.records(&encoder);
        let mut from_records = Expectation::default();
        let mut applied_ids = HashSet::new();
        let mut all = Vec::new();
        for record in records.by_ref() {
            all.push(record.unwrap());
        }
        for record in &all {
            match decoder.decode(Some(&record.payload)).await {
                Ok(decoded) => {
                    let event = OrderEvent::from(decoded);
                    assert_eq!(event.order_id, record.key);
                    // Decoded as read: a v1 record already carries
                    // DEFAULT_CURRENCY, so it is expected as a v2 one.
                    expect(
                        &mut from_records,
                        &mut applied_ids,
                        &event,
                        WriterVersion::V2,
                    );
                }
                Err(_) => from_records.outcomes.dead_lettered += 1,
            }
            from_records.records += 1;
        }
        let streamed = records.expectation();
        assert_eq!(streamed.records, from_records.records);
        assert_eq!(streamed.outcomes, from_records.outcomes);
        assert_eq!(
            streamed.status_changes,
            from_records.status_changes.len() as u64
        );
        assert_eq!(from_records.states.len(), spec.orders);
        for (order_id, state) in &from_records.states {
            let index = order_index(&spec.order_prefix, order_id).unwrap();
            assert_eq!(
                plan.fingerprints()[index as usize],
                fingerprint(state),
                "{order_id}: {state:?}"
            );
        }
        (streamed, from_records)
    }

    #[tokio::test]
    async fn the_streamed_expectation_is_what_the_records_imply() {
        for shape in [Shape::Clustered, Shape::Interleaved] {
            for events_per_order in [None, Some(6)] {
                let (streamed, _) = check(WorkloadSpec {
                    orders: 2_000,
                    shape,
                    events_per_order,
                    poison_rate: 0.01,
                    duplicate_rate: 0.1,
                    reorder_rate: 0.1,
                    id_format: IdFormat::Hex32,
                    ..Default::default()
                })
                .await;
                let o = streamed.outcomes;
                assert!(
                    o.duplicates > 0 && o.stale > 0 && o.dead_lettered > 0 && o.applied > 0,
                    "{shape:?} {events_per_order:?}: {o:?}"
                );
            }
        }
    }

    #[test]
    fn the_plan_is_deterministic_and_shaped_like_plans() {
        let spec = WorkloadSpec {
            orders: 3_000,
            events_per_order: Some(6),
            ..Default::default()
        };
        let encoder = Encoder::with_ids(1, 2);
        let a = StreamedPlan::new(&spec).unwrap();
        let b = StreamedPlan::new(&spec).unwrap();
        let ra: Vec<_> = a.records(&encoder).map(Result::unwrap).collect();
        let rb: Vec<_> = b.records(&encoder).map(Result::unwrap).collect();
        assert_eq!(ra, rb, "the same seed plans the same records");
        // The same rates as `plan`: duplicates ~5% of events, poison ~0.2%.
        let (_, planned) = super::super::plan(&spec, &encoder).unwrap();
        let streamed = {
            let mut records = a.records(&encoder);
            records.by_ref().for_each(drop);
            records.expectation()
        };
        let near = |x: u64, y: u64| (x as f64 - y as f64).abs() <= 0.1 * y as f64 + 20.0;
        assert!(near(streamed.outcomes.applied, planned.outcomes.applied));
        assert!(near(
            streamed.outcomes.duplicates,
            planned.outcomes.duplicates
        ));
        assert!(near(streamed.outcomes.stale, planned.outcomes.stale));
        assert!(near(
            streamed.outcomes.dead_lettered,
            planned.outcomes.dead_lettered
        ));
        // Clustered: each order's records stay in a short window.
        let mut span: HashMap<&str, (usize, usize)> = HashMap::new();
        for (i, r) in ra.iter().enumerate() {
            let e = span.entry(r.key.as_str()).or_insert((i, i));
            e.1 = i;
        }
        let mut spans: Vec<usize> = span.values().map(|(a, b)| b - a).collect();
        spans.sort_unstable();
        assert!(
            spans[spans.len() / 2] < ra.len() / 10,
            "median span {}",
            spans[spans.len() / 2]
        );
    }

    #[test]
    fn ids_and_fingerprints_are_stable() {
        assert_eq!(order_index("order", &order_id("order", 1234)), Some(1234));
        assert_eq!(order_index("order", "orders-00001234"), None);
        assert_ne!(event_id_bits(1, 2, 3), event_id_bits(1, 3, 2));
        assert_ne!(event_id_bits(1, 2, 3), event_id_bits(2, 2, 3));
        let state = StateView {
            order_id: "order-00000001".into(),
            version: 2,
            status: EventType::Paid,
            amount: 100,
            currency: "EUR".into(),
            event_id: "x".into(),
            occurred_at: 5,
        };
        let moved = StateView {
            version: 3,
            ..state.clone()
        };
        assert_ne!(fingerprint(&state), fingerprint(&moved));
    }

    #[test]
    fn too_many_events_per_order_is_refused() {
        let err = StreamedPlan::new(&WorkloadSpec {
            orders: 1,
            events_per_order: Some(MAX_EVENTS_PER_ORDER + 1),
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("events per order"), "{err}");
    }
}
