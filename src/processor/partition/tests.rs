//! The processing and draining phases of a partition task, with orders as
//! the entity, fed by an in-memory record source: no broker. The clock is
//! tokio's paused one (each sleep below advances it at once).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::error::KafkaError;
use rdkafka::message::{OwnedMessage, Timestamp};

use crate::config::Config;
use crate::domains::orders::codec::{Encoder, WriterVersion};
use crate::domains::orders::event::{EventType, OrderEvent};
use crate::domains::orders::Orders;
use crate::engine::codec::{Decoder, PoisonKind};
use crate::engine::outcomes::Outcomes;
use crate::engine::store::Store;
use crate::processor::flusher::FlushMsg;
use crate::processor::{Harness, MemorySource};
use crate::registry::Registry;

const PARTITION: i32 = 3;

struct Setup {
    _dir: tempfile::TempDir,
    store: Store,
    registry: Registry,
    encoder: Encoder,
    config: Config,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 8).unwrap();
    let registry = Registry::memory();
    let config = Config::defaults().unwrap();
    let encoder = Encoder::register(&registry, &config.kafka.input_topic)
        .await
        .unwrap();
    Setup {
        _dir: dir,
        store,
        registry,
        encoder,
        config,
    }
}

impl Setup {
    fn start(&self, config: Config, source: &Arc<MemorySource>) -> Harness<Orders> {
        Harness::start(
            Decoder::new(self.registry.clone()),
            self.store.clone(),
            config,
            PARTITION,
            source.clone(),
        )
    }

    /// The record at `offset` carrying `order`'s `version`, as event `id`.
    fn record(&self, offset: i64, order: &str, version: i64, id: &str) -> OwnedMessage {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let event = OrderEvent {
            event_id: id.into(),
            order_id: order.into(),
            version,
            event_type: EventType::Shipped,
            amount: version * 100,
            currency: "EUR".into(),
            occurred_at: now.as_millis() as i64,
        };
        let payload = self.encoder.encode(&event, WriterVersion::V2).unwrap();
        raw(offset, order, payload)
    }
}

fn raw(offset: i64, key: &str, payload: Vec<u8>) -> OwnedMessage {
    OwnedMessage::new(
        Some(payload),
        Some(key.as_bytes().to_vec()),
        "orders".into(),
        Timestamp::NotAvailable,
        PARTITION,
        offset,
        None,
    )
}

/// The write-outs the task reported to the flusher: their next offsets.
fn covered(flushed: &[FlushMsg]) -> Vec<i64> {
    flushed
        .iter()
        .filter_map(|m| match m {
            FlushMsg::Covered {
                partition,
                next_offset,
                ..
            } if *partition == PARTITION => Some(*next_offset),
            _ => None,
        })
        .collect()
}

fn version(harness: &Harness<Orders>, order: &str) -> Option<i64> {
    harness
        .store
        .get::<Orders>(order)
        .unwrap()
        .map(|state| state.version)
}

#[tokio::test(start_paused = true)]
async fn a_batch_with_a_duplicate_a_stale_version_and_poison_is_decided_and_written_out() {
    let setup = setup().await;
    let source = Arc::new(MemorySource::new());
    let mut harness = setup.start(setup.config.clone(), &source);

    // Nothing yet: the task waits, writes nothing, reports nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(harness.flushed().is_empty());
    assert_eq!(harness.store.checkpoint().unwrap(), None);

    source.push(Ok(setup.record(100, "A", 1, "a1")));
    source.push(Ok(setup.record(101, "A", 2, "a2")));
    source.push(Ok(setup.record(102, "A", 2, "a2"))); // a duplicate
    source.push(Ok(setup.record(103, "A", 1, "a1-late"))); // stale
    source.push(Ok(raw(104, "A", b"not avro".to_vec()))); // poison
    source.push(Err(KafkaError::NoMessageReceived)); // logged, skipped
    source.push(Ok(setup.record(105, "B", 1, "b1")));

    // One commit interval later the batch is written out and reported.
    tokio::time::sleep(Duration::from_millis(
        setup.config.processing.commit_interval_ms + 100,
    ))
    .await;
    assert_eq!(source.left(), 0);
    let expected = Outcomes {
        applied: 3,
        duplicates: 1,
        stale: 1,
        dead_lettered: 1,
    };
    assert_eq!(harness.reporting.counters.outcomes.load(), expected);
    assert_eq!(harness.status.outcomes.load(), expected);
    assert_eq!(
        harness.input.dead_letters.sent(),
        vec![(104, PoisonKind::BadMagicByte)]
    );
    assert_eq!(covered(&harness.flushed()), vec![106]);
    assert_eq!(
        harness.store.checkpoint().unwrap().map(|c| c.next_offset),
        Some(106)
    );
    assert_eq!(version(&harness, "A"), Some(2));
    assert_eq!(version(&harness, "B"), Some(1));

    // A revoke: nothing new, so nothing more to write; the reply is the checkpoint.
    let (checkpoint, ended) = harness.drain().await;
    ended.unwrap();
    assert_eq!(checkpoint.map(|c| c.next_offset), Some(106));
    assert!(covered(&harness.flushed()).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_drain_skips_what_the_checkpoint_covers_and_writes_out_the_rest() {
    let setup = setup().await;
    let source = Arc::new(MemorySource::new());
    let mut first = setup.start(setup.config.clone(), &source);
    source.push(Ok(setup.record(10, "A", 1, "a1")));
    source.push(Ok(raw(11, "A", Vec::new()))); // poison: empty
    let (checkpoint, ended) = first.drain().await;
    ended.unwrap();
    assert_eq!(checkpoint.map(|c| c.next_offset), Some(12));
    assert_eq!(covered(&first.flushed()), vec![12]);

    // The next owner is handed records from before its checkpoint again
    // (the group's commit lagged): they are neither decided nor lettered.
    let source = Arc::new(MemorySource::new());
    let mut second = setup.start(setup.config.clone(), &source);
    source.push(Ok(setup.record(10, "A", 1, "a1")));
    source.push(Ok(raw(11, "A", Vec::new())));
    source.push(Ok(setup.record(12, "A", 2, "a2")));
    source.push(Ok(setup.record(13, "C", 1, "c1")));
    let (checkpoint, ended) = second.drain().await;
    ended.unwrap();
    assert_eq!(checkpoint.map(|c| c.next_offset), Some(14));
    let flushed = second.flushed();
    assert!(matches!(
        flushed.first(),
        Some(FlushMsg::Resume {
            partition: PARTITION,
            next_offset: 12
        })
    ));
    assert_eq!(covered(&flushed), vec![14]);
    let expected = Outcomes {
        applied: 2,
        ..Outcomes::default()
    };
    assert_eq!(second.reporting.counters.outcomes.load(), expected);
    assert!(second.input.dead_letters.sent().is_empty());
    assert_eq!(version(&second, "A"), Some(2));
    assert_eq!(version(&second, "C"), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_task_at_the_end_of_its_input_writes_out_before_the_commit_interval() {
    let setup = setup().await;
    let mut config = setup.config.clone();
    config.processing.commit_interval_ms = 60_000;
    config.processing.caught_up_write_ms = 100;
    let source = Arc::new(MemorySource::new());
    let mut harness = setup.start(config, &source);
    source.push(Ok(setup.record(0, "A", 1, "a1")));
    source.push(Ok(setup.record(1, "A", 2, "a2")));

    // The end unknown: the write-out waits for the commit interval.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(harness.flushed().is_empty());

    // The end known and reached: written out soon after.
    source.set_end(2);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(covered(&harness.flushed()), vec![2]);
    let (_, ended) = harness.drain().await;
    ended.unwrap();
}

/// A write-out that falls due while another partition's write-out holds the
/// process's only turn (`processing.concurrent_write_outs = 1`) waits for it
/// when the task has nothing more to decide, and goes ahead once it is
/// given back; its wait shows in `orderly_write_out_wait_seconds`.
#[tokio::test(start_paused = true)]
async fn a_due_write_out_waits_for_the_turn_another_write_out_holds() {
    let setup = setup().await;
    let mut config = setup.config.clone();
    config.processing.commit_interval_ms = 1_000;
    config.processing.concurrent_write_outs = 1;
    let source = Arc::new(MemorySource::new());
    let mut harness = setup.start(config, &source);
    let member = harness.member.clone();
    let turn = member.write_turn().await;
    assert!(!member.write_turn_free());
    source.push(Ok(setup.record(0, "A", 1, "a1")));
    source.push(Ok(setup.record(1, "A", 2, "a2")));
    source.set_end(2);

    // Due after 1 s (and sooner, caught up), but the turn is taken.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(harness.flushed().is_empty());

    drop(turn);
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(covered(&harness.flushed()), vec![2]);
    let waits = harness.reporting.telemetry.write_out_wait.snapshot();
    assert!(waits.sum >= 4.0, "waited {} s", waits.sum);
    let (_, ended) = harness.drain().await;
    ended.unwrap();
}
