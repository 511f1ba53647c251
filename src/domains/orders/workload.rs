//! The workload generator: realistic order lifecycles with duplicates,
//! reorderings, v1 and v2 records and poison records, plus the expected
//! outcome computed here, independently of the processor, from the send
//! order alone.

use std::collections::{HashMap, HashSet};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::domains::orders::codec::{Encoder, WriterVersion};
use crate::domains::orders::event::{EventType, OrderEvent, StateView, DEFAULT_CURRENCY};
use crate::engine::codec::{wire, EncodeError};
use crate::engine::outcomes::Outcomes;

mod streamed;
pub use streamed::{
    fingerprint, order_id, order_index, StreamedExpectation, StreamedPlan, StreamedPlanError,
    StreamedRecords, MAX_EVENTS_PER_ORDER,
};

/// The shape of a generated workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkloadSpec {
    /// How many orders (each a lifecycle of events).
    pub orders: usize,
    /// The random generator's seed: the same spec and seed plan the same
    /// records.
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
    /// How the orders' events are spread over the topic.
    #[serde(default)]
    pub shape: Shape,
    /// How event ids are written.
    #[serde(default)]
    pub id_format: IdFormat,
    /// Order ids are `<order_prefix>-<index, 8 digits>`.
    #[serde(default = "default_order_prefix")]
    pub order_prefix: String,
    /// When the generated times start, in ms since the Unix epoch (`produce`
    /// sets it to a moment ago). Unset: [`FIXED_START_MS`], so a spec and a
    /// seed plan the same bytes whenever they run.
    #[serde(default)]
    pub start_ms: Option<i64>,
}

/// The instant generated times start at when a spec names none
/// (2025-12-01T00:00:00Z).
pub const FIXED_START_MS: i64 = 1_764_547_200_000;

impl WorkloadSpec {
    /// A start that puts every generated time in the last moments before
    /// `now_ms`: orders start up to one second apart per order, and an
    /// order's events are a minute apart.
    pub fn ending_before(&self, now_ms: i64) -> i64 {
        let events = i64::from(self.events_per_order.unwrap_or(4));
        now_ms - self.orders as i64 * 1000 - events * 60_000
    }
}

fn default_order_prefix() -> String {
    "order".into()
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            orders: 5_000,
            seed: 42,
            duplicate_rate: 0.05,
            reorder_rate: 0.02,
            poison_rate: 0.002,
            v1_share: 0.3,
            events_per_order: None,
            shape: Shape::default(),
            id_format: IdFormat::default(),
            order_prefix: default_order_prefix(),
            start_ms: None,
        }
    }
}

/// How the orders' events are spread over the topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// Each order's events in a short window
    ///
    /// An order starts at a uniform time and each of its next sends follows
    /// 0.5 to 20 time units later (orders start over as many units as there
    /// are orders). A batch touches few distinct orders.
    #[default]
    Clustered,
    /// Every order's events spread over the whole topic
    ///
    /// Every order lives for the whole stream: its sends are at uniform times
    /// over the whole topic (sorted, so its own sequence keeps its order), so
    /// each order's events are spread among every other order's.
    Interleaved,
}

/// How event ids are written. The processor takes ids of any format; a
/// canonical UUID may be stored more compactly than other text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum IdFormat {
    /// Canonical lowercase UUID with hyphens (36 characters)
    #[default]
    Uuid,
    /// 32 lowercase hex characters, no hyphens (a UUID's "simple" form)
    #[value(alias = "hex")]
    Hex32,
}

impl Shape {
    /// The shape's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Shape::Clustered => "clustered",
            Shape::Interleaved => "interleaved",
        }
    }
}

impl IdFormat {
    /// The format's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            IdFormat::Uuid => "uuid",
            IdFormat::Hex32 => "hex32",
        }
    }

    /// The id of 128 random bits in this format.
    pub fn format(self, bits: u128) -> String {
        match self {
            IdFormat::Uuid => uuid::Uuid::from_u128(bits).hyphenated().to_string(),
            IdFormat::Hex32 => uuid::Uuid::from_u128(bits).simple().to_string(),
        }
    }
}

/// One record to produce, keyed by order id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedRecord {
    /// The record key (the order id).
    pub key: String,
    /// The record value, in the Confluent wire format (or poison).
    pub payload: Vec<u8>,
}

/// What the processor must end with after consuming every planned record.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Expectation {
    /// Every planned record, poison included.
    pub records: u64,
    /// The four outcomes the records imply (flattened: the `--expect-out`
    /// file keeps its four top-level counts).
    #[serde(flatten)]
    pub outcomes: Outcomes,
    /// Final state per order id.
    pub states: HashMap<String, StateView>,
    /// The `event_id`s of applied events that changed their order's status
    /// (an order's first event included): what the outbox must publish.
    pub status_changes: HashSet<String>,
}

/// One planned send: (send time, order index, event, writer version).
type PlannedSend = (f64, usize, OrderEvent, WriterVersion);

/// An event and the schema it is written with.
type Sent = (OrderEvent, WriterVersion);

/// Generates the records in send order and their expected outcome.
///
/// Per order, the event sequence is built first (lifecycle, reorderings,
/// duplicates), then given send times by the spec's [`Shape`]; all sends are
/// then interleaved by time, each order's own sends keeping their order. The
/// expectation is computed from that send order alone, by the documented
/// rules, independently of the processor. With the same seed, the id format
/// changes only the ids' text, and the shape only the send times (both
/// shapes draw one number per send), so the two shapes have the same
/// expected counts and final states (poison records may sit next to other
/// events).
pub fn plan(
    spec: &WorkloadSpec,
    encoder: &Encoder,
) -> Result<(Vec<PlannedRecord>, Expectation), EncodeError> {
    let mut rng = StdRng::seed_from_u64(spec.seed);
    let mut sends: Vec<PlannedSend> = Vec::new();
    for index in 0..spec.orders {
        order_sends(spec, &mut rng, index, &mut sends);
    }
    // Interleave orders by send time; an order's own sends keep their order
    // (their times are non-decreasing and the sort is stable).
    sends.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    records_and_expectation(spec, encoder, &mut rng, sends)
}

/// The sends of the order `index`: its event sequence (lifecycle,
/// reorderings, duplicates), given send times by the spec's [`Shape`].
fn order_sends(spec: &WorkloadSpec, rng: &mut StdRng, index: usize, sends: &mut Vec<PlannedSend>) {
    let horizon = spec.orders as f64;
    let (start, events) = order_events(spec, rng, index, horizon);
    let sequence = with_duplicates(spec, rng, events);
    match spec.shape {
        Shape::Clustered => {
            let mut t = start;
            for (event, writer) in sequence {
                sends.push((t, index, event, writer));
                t += rng.gen_range(0.5..20.0);
            }
        }
        Shape::Interleaved => {
            // One draw per send, as above, so both shapes plan the same
            // sequences and differ only in their interleaving.
            let mut times: Vec<f64> = (0..sequence.len())
                .map(|_| rng.gen_range(0.0..horizon))
                .collect();
            times.sort_by(f64::total_cmp);
            for (t, (event, writer)) in times.into_iter().zip(sequence) {
                sends.push((t, index, event, writer));
            }
        }
    }
}

/// The order `index`'s start (in time units, below `horizon`) and its
/// events in lifecycle order, each swapped with the next at the spec's
/// reorder rate.
fn order_events(
    spec: &WorkloadSpec,
    rng: &mut StdRng,
    index: usize,
    horizon: f64,
) -> (f64, Vec<Sent>) {
    let lifecycle = match spec.events_per_order {
        Some(n) => long_lifecycle(n),
        None => lifecycle(rng),
    };
    let order_id = format!("{}-{:08}", spec.order_prefix, index);
    let currency = ["EUR", "USD", "GBP", "JPY"][rng.gen_range(0..4)].to_string();
    let amount = rng.gen_range(100..500_000i64);
    let start = rng.gen_range(0.0..horizon);
    let base_ms = spec.start_ms.unwrap_or(FIXED_START_MS) + (start * 1000.0) as i64;
    let mut events: Vec<Sent> = lifecycle
        .iter()
        .enumerate()
        .map(|(i, event_type)| {
            let writer = if rng.gen_bool(spec.v1_share) {
                WriterVersion::V1
            } else {
                WriterVersion::V2
            };
            let event = OrderEvent {
                event_id: spec.id_format.format(rng.gen()),
                order_id: order_id.clone(),
                version: i as i64 + 1,
                event_type: *event_type,
                amount: if *event_type == EventType::Cancelled {
                    0
                } else {
                    amount
                },
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
    (start, events)
}

/// `events` with duplicates (producer retries) at the spec's rate: a
/// duplicate lands right after its original or a couple of events later.
fn with_duplicates<T: Clone>(spec: &WorkloadSpec, rng: &mut StdRng, events: Vec<T>) -> Vec<T> {
    let mut keyed: Vec<(f64, T)> = Vec::with_capacity(events.len() + 1);
    for (i, sent) in events.into_iter().enumerate() {
        if rng.gen_bool(spec.duplicate_rate) {
            keyed.push((i as f64 + rng.gen_range(0.1..2.5), sent.clone()));
        }
        keyed.push((i as f64, sent));
    }
    keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
    keyed.into_iter().map(|(_, sent)| sent).collect()
}

/// The records of `sends`, in send order with poison records among them,
/// and the outcome they imply.
fn records_and_expectation(
    spec: &WorkloadSpec,
    encoder: &Encoder,
    rng: &mut StdRng,
    sends: Vec<PlannedSend>,
) -> Result<(Vec<PlannedRecord>, Expectation), EncodeError> {
    let mut expectation = Expectation::default();
    let mut applied_ids: HashSet<String> = HashSet::new();
    let mut records =
        Vec::with_capacity(sends.len() + (sends.len() as f64 * spec.poison_rate) as usize + 1);
    for (_, _, event, writer) in sends {
        if rng.gen_bool(spec.poison_rate.min(1.0)) {
            records.push(poison(rng, encoder, &event)?);
            expectation.outcomes.dead_lettered += 1;
        }
        expect(&mut expectation, &mut applied_ids, &event, writer);
        records.push(PlannedRecord {
            key: event.order_id.clone(),
            payload: encoder.encode(&event, writer)?,
        });
    }
    expectation.records = records.len() as u64;
    Ok((records, expectation))
}

/// Adds `event`'s expected outcome to `expectation` (`applied_ids`: the
/// event ids applied so far).
fn expect(
    expectation: &mut Expectation,
    applied_ids: &mut HashSet<String>,
    event: &OrderEvent,
    writer: WriterVersion,
) {
    // The expected outcome, by the documented rules: an id applied before
    // is a duplicate; a version not above the newest applied is stale.
    let as_read = match writer {
        WriterVersion::V1 => OrderEvent {
            currency: DEFAULT_CURRENCY.to_string(),
            ..event.clone()
        },
        WriterVersion::V2 => event.clone(),
    };
    let newest = expectation
        .states
        .get(&event.order_id)
        .map(|s| s.version)
        .unwrap_or(0);
    if applied_ids.contains(&event.event_id) {
        expectation.outcomes.duplicates += 1;
    } else if event.version <= newest {
        expectation.outcomes.stale += 1;
    } else {
        expectation.outcomes.applied += 1;
        applied_ids.insert(event.event_id.clone());
        if expectation.states.get(&event.order_id).map(|s| s.status) != Some(event.event_type) {
            expectation.status_changes.insert(event.event_id.clone());
        }
        expectation
            .states
            .insert(event.order_id.clone(), StateView::of_event(&as_read));
    }
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
fn poison(
    rng: &mut StdRng,
    encoder: &Encoder,
    near: &OrderEvent,
) -> Result<PlannedRecord, EncodeError> {
    let good = encoder.encode(near, WriterVersion::V2)?;
    let payload = match rng.gen_range(0..4) {
        0 => {
            let mut bytes = good;
            bytes[0] = 0x7b; // a JSON `{` where the magic byte goes
            bytes
        }
        1 => wire(999_999, &good[5..]),       // unknown schema id
        2 => good[..good.len() / 2].to_vec(), // truncated body
        _ => {
            let mut bad = near.clone();
            bad.version = -1; // decodes, but fails validation
            encoder.encode(&bad, WriterVersion::V2)?
        }
    };
    Ok(PlannedRecord {
        key: near.order_id.clone(),
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_is_deterministic_and_counts_add_up() {
        let encoder = Encoder::with_ids(1, 2);
        let spec = WorkloadSpec {
            orders: 500,
            ..Default::default()
        };
        let (records, expected) = plan(&spec, &encoder).unwrap();
        let (again, expected_again) = plan(&spec, &encoder).unwrap();
        assert_eq!(expected, expected_again);
        assert_eq!(records.len(), again.len());
        assert_eq!(expected.outcomes.total(), expected.records);
        assert_eq!(expected.states.len(), 500);
        assert!(
            expected.outcomes.duplicates > 0 && expected.outcomes.stale > 0,
            "{expected:?}"
        );
    }

    /// Decodes every planned record: (position, event), poison records left out.
    async fn decoded(spec: &WorkloadSpec) -> (Vec<(usize, OrderEvent)>, Expectation) {
        let registry = crate::registry::Registry::memory();
        let encoder = Encoder::register(&registry, "t").await.unwrap();
        let decoder = crate::engine::codec::Decoder::new(registry);
        let (records, expected) = plan(spec, &encoder).unwrap();
        let mut out = Vec::with_capacity(records.len());
        for (i, record) in records.iter().enumerate() {
            if let Ok(event) = decoder.decode(Some(&record.payload)).await {
                let event = OrderEvent::from(event);
                assert_eq!(event.order_id, record.key);
                out.push((i, event));
            }
        }
        assert_eq!(
            out.len() as u64,
            expected.records - expected.outcomes.dead_lettered,
            "every good record decodes, no poison does"
        );
        (out, expected)
    }

    /// Each order's first-to-last distance over the records, as a share of the stream.
    fn spans(events: &[(usize, OrderEvent)], records: u64) -> Vec<f64> {
        let mut span: HashMap<&str, (usize, usize)> = HashMap::new();
        for (i, event) in events {
            let e = span.entry(event.order_id.as_str()).or_insert((*i, *i));
            e.0 = e.0.min(*i);
            e.1 = e.1.max(*i);
        }
        span.values()
            .map(|(first, last)| (last - first) as f64 / records as f64)
            .collect()
    }

    fn median(mut xs: Vec<f64>) -> f64 {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    }

    fn interleaved(orders: usize, events: u32) -> WorkloadSpec {
        WorkloadSpec {
            orders,
            events_per_order: Some(events),
            shape: Shape::Interleaved,
            id_format: IdFormat::Hex32,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn interleaved_orders_span_the_stream_and_counts_add_up() {
        let spec = interleaved(200, 50);
        let (events, expected) = decoded(&spec).await;
        assert_eq!(expected.outcomes.total(), expected.records);
        assert_eq!(expected.states.len(), 200);
        assert!(
            expected.outcomes.duplicates > 0
                && expected.outcomes.stale > 0
                && expected.outcomes.dead_lettered > 0,
            "{expected:?}"
        );
        // Every order ends delivered at version 50, its last event (a
        // reordering of the last two leaves version 50 applied first and 49
        // stale).
        assert!(expected
            .states
            .values()
            .all(|s| s.version == 50 && s.status == EventType::Delivered));
        // 50 uniform sends over the stream: first and last are expected ~96%
        // of the stream apart; every order spans most of it.
        let spans = spans(&events, expected.records);
        let least = spans.iter().copied().fold(f64::INFINITY, f64::min);
        let mid = median(spans);
        assert!(mid > 0.9 && least > 0.6, "median {mid}, least {least}");
        // Ids are 32 lowercase hex characters, no hyphens.
        assert!(events.iter().all(|(_, e)| e.event_id.len() == 32
            && e.event_id
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))));
        let (again, expected_again) = decoded(&spec).await;
        assert_eq!(expected, expected_again);
        assert_eq!(events, again, "the same seed plans the same records");
    }

    #[tokio::test]
    async fn interleaved_keeps_each_orders_own_sequence() {
        // Without duplicates and reorderings every order's versions rise
        // 1, 2, 3, ... in send order, and everything applies.
        let spec = WorkloadSpec {
            duplicate_rate: 0.0,
            reorder_rate: 0.0,
            poison_rate: 0.0,
            ..interleaved(100, 30)
        };
        let (events, expected) = decoded(&spec).await;
        let mut next: HashMap<String, i64> = HashMap::new();
        for (_, event) in &events {
            let want = next.entry(event.order_id.clone()).or_insert(1);
            assert_eq!(event.version, *want, "order {}", event.order_id);
            *want += 1;
        }
        assert_eq!(
            (
                expected.outcomes.applied,
                expected.outcomes.duplicates,
                expected.outcomes.stale,
                expected.records
            ),
            (3_000, 0, 0, 3_000)
        );
    }

    #[tokio::test]
    async fn clustered_orders_stay_in_a_short_window() {
        // An order's window is ~10 time units per event over a stream of
        // ~`orders` units: 10 events over 1,000 orders span ~9% of it.
        let spec = WorkloadSpec {
            orders: 1_000,
            events_per_order: Some(10),
            ..Default::default()
        };
        let (events, expected) = decoded(&spec).await;
        assert_eq!(expected.outcomes.total(), expected.records);
        let mid = median(spans(&events, expected.records));
        assert!(mid < 0.2, "median span {mid}");
        assert!(events
            .iter()
            .all(|(_, e)| e.event_id.len() == 36 && uuid::Uuid::try_parse(&e.event_id).is_ok()));
    }

    #[test]
    fn the_order_prefix_names_every_order() {
        let encoder = Encoder::with_ids(1, 2);
        let (_, a) = plan(
            &WorkloadSpec {
                orders: 50,
                order_prefix: "order-s1".into(),
                ..Default::default()
            },
            &encoder,
        )
        .unwrap();
        let (_, b) = plan(
            &WorkloadSpec {
                orders: 50,
                order_prefix: "order-s2".into(),
                ..Default::default()
            },
            &encoder,
        )
        .unwrap();
        assert!(
            a.states.keys().all(|k| k.starts_with("order-s1-")),
            "{:?}",
            a.states.keys().next()
        );
        assert!(
            a.states.keys().all(|k| !b.states.contains_key(k)),
            "two prefixes share no order"
        );
    }

    #[test]
    fn id_format_changes_only_the_ids() {
        let encoder = Encoder::with_ids(1, 2);
        let base = WorkloadSpec {
            orders: 300,
            events_per_order: Some(20),
            ..Default::default()
        };
        let (_, uuid) = plan(&base, &encoder).unwrap();
        let (_, hex) = plan(
            &WorkloadSpec {
                id_format: IdFormat::Hex32,
                ..base.clone()
            },
            &encoder,
        )
        .unwrap();
        assert_eq!(
            (
                uuid.records,
                uuid.outcomes.applied,
                uuid.outcomes.duplicates,
                uuid.outcomes.stale
            ),
            (
                hex.records,
                hex.outcomes.applied,
                hex.outcomes.duplicates,
                hex.outcomes.stale
            )
        );
        for (order, state) in &uuid.states {
            let other = &hex.states[order];
            assert_eq!(other.event_id, state.event_id.replace('-', ""));
            assert_eq!(
                StateView {
                    event_id: state.event_id.clone(),
                    ..other.clone()
                },
                *state
            );
        }
    }

    #[test]
    fn shape_changes_only_the_interleaving() {
        let encoder = Encoder::with_ids(1, 2);
        // (Poison records go next to whichever event is sent at their draw,
        // so only their count is the same: leave them out here.)
        let clustered = WorkloadSpec {
            orders: 300,
            events_per_order: Some(20),
            poison_rate: 0.0,
            ..Default::default()
        };
        let interleaved = WorkloadSpec {
            shape: Shape::Interleaved,
            ..clustered.clone()
        };
        let (a, expected_a) = plan(&clustered, &encoder).unwrap();
        let (b, expected_b) = plan(&interleaved, &encoder).unwrap();
        assert_eq!(expected_a, expected_b);
        // Same records per order, in the same order within each order.
        fn per_order(records: &[PlannedRecord]) -> HashMap<&str, Vec<&[u8]>> {
            let mut m: HashMap<&str, Vec<&[u8]>> = HashMap::new();
            for r in records {
                m.entry(r.key.as_str()).or_default().push(&r.payload);
            }
            m
        }
        assert_eq!(per_order(&a), per_order(&b));
        assert!(
            a.iter().zip(&b).any(|(x, y)| x.key != y.key),
            "the interleaving differs"
        );
    }

    #[test]
    fn old_spec_json_still_parses() {
        let old = r#"{"orders":10,"seed":1,"duplicate_rate":0.05,"reorder_rate":0.02,"poison_rate":0.0,"v1_share":0.3}"#;
        let spec: WorkloadSpec = serde_json::from_str(old).unwrap();
        assert_eq!(
            (spec.shape, spec.id_format, spec.events_per_order),
            (Shape::Clustered, IdFormat::Uuid, None)
        );
        let new: WorkloadSpec = serde_json::from_str(
            &serde_json::to_string(&WorkloadSpec {
                shape: Shape::Interleaved,
                id_format: IdFormat::Hex32,
                ..spec
            })
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (new.shape, new.id_format),
            (Shape::Interleaved, IdFormat::Hex32)
        );
    }
}
