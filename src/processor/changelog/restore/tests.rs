//! The restore's unit tests, on a mock cluster.

use std::sync::atomic::AtomicBool;

use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use super::*;
use crate::engine::store::Store;
use crate::kafka::headers::HEADER_COVERS;

const CHANGELOG: &str = "state-changelog";

/// A mock cluster whose one-partition changelog holds `records` state
/// records (each covered by the checkpoint) and then a checkpoint record
/// at input offset 5, and an empty tree to restore it into.
struct Fixture {
    cluster: MockCluster<'static, DefaultProducerContext>,
    reader: ReaderSettings,
    tree: PartitionStore,
    _store: Store,
    _dir: tempfile::TempDir,
}

impl Fixture {
    fn new(records: i64) -> Self {
        let cluster: MockCluster<'static, DefaultProducerContext> =
            MockCluster::new(1).expect("mock cluster");
        cluster.create_topic(CHANGELOG, 1, 1).expect("topic");
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        let value = vec![7u8; 50];
        let checkpoint = Checkpoint::starting_at(5)
            .encode()
            .expect("checkpoint encodes");
        for i in 0..=records {
            let (key, payload) = if i < records {
                (format!("order-{i}").into_bytes(), value.as_slice())
            } else {
                (changelog_checkpoint_key(), checkpoint.as_slice())
            };
            let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
                key: HEADER_COVERS,
                value: Some("5"),
            });
            let mut record = BaseRecord::to(CHANGELOG)
                .partition(0)
                .key(&key)
                .payload(payload)
                .headers(headers);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, returned)) => {
                        producer.poll(Duration::from_millis(10));
                        record = returned;
                    }
                }
            }
        }
        producer.flush(Duration::from_secs(30)).expect("flush");
        let mut config = crate::config::Config::defaults().expect("config");
        config.kafka.bootstrap_servers = cluster.bootstrap_servers();
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(&dir.path().join("store"), 16).expect("store");
        let tree = store.partition("orders", 0).expect("tree");
        Fixture {
            cluster,
            reader: ReaderSettings::of(&config),
            tree,
            _store: store,
            _dir: dir,
        }
    }

    /// The restore of the fixture's changelog into its tree.
    fn restore<'a>(&'a self, cancel: &'a AtomicBool, progress: &'a RestoreProgress) -> Restore<'a> {
        Restore {
            reader: &self.reader,
            topic: CHANGELOG,
            partition: 0,
            tree: &self.tree,
            cancel,
            progress,
        }
    }
}

/// A changelog partition whose leader stays unknown for longer than the
/// watermarks' own 10 s of tries: the restore is started again after a
/// wait instead of failing the partition's task (and the process).
#[test]
fn a_restore_that_finds_no_leader_for_longer_than_its_tries_starts_again() {
    let fixture = Fixture::new(0);
    let (cluster, tree) = (&fixture.cluster, &fixture.tree);
    let (cancel, progress) = (AtomicBool::new(false), RestoreProgress::default());
    let restore = fixture.restore(&cancel, &progress);
    // More "not leader" answers than one restore's watermark tries take
    // in their 10 s (two offset requests per try, nine tries at most).
    cluster.request_errors(
        RDKafkaApiKey::ListOffsets,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION; 30],
    );
    let restored = restore
        .run_with_retries()
        .expect("restored once the leader is known");
    assert!(restored.restored);
    assert_eq!(
        restored
            .checkpoint
            .map(|c| (c.next_offset, c.changelog_next)),
        Some((5, Some(1)))
    );
    assert_eq!(
        tree.checkpoint()
            .expect("checkpoint read")
            .map(|c| c.next_offset),
        Some(5)
    );
    assert!(
        !tree.restoring().expect("mark read"),
        "the restore finished"
    );
}

/// While a restore reads, its progress is seen from another thread
/// (as `/readyz`, the status page and the metrics see it): part-way
/// through, with an estimate once there is a rate; after it, nothing.
#[test]
fn a_restores_progress_is_seen_part_way_and_cleared_at_the_end() {
    // Kept under the mock partition's log size (5 MB), past which it drops
    // the oldest records.
    const RECORDS: i64 = 20_000;
    let fixture = Fixture::new(RECORDS);
    let (cancel, progress) = (AtomicBool::new(false), RestoreProgress::default());
    let done = AtomicBool::new(false);
    let seen = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut seen = Vec::new();
            while !done.load(Ordering::Relaxed) {
                if let Some(view) = progress.view() {
                    seen.push(view);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            seen
        });
        let restored = fixture.restore(&cancel, &progress).run();
        // As the partition task does after every restore.
        progress.end();
        done.store(true, Ordering::Relaxed);
        let restored = restored.expect("restored");
        assert_eq!((restored.applied, restored.skipped), (RECORDS as u64, 0));
        watcher.join().expect("watcher")
    });
    assert!(
        seen.iter().all(|v| v.total == RECORDS + 1),
        "the total is what the restore reads, the checkpoint record included"
    );
    assert!(
        seen.iter()
            .any(|v| v.remaining > 0 && v.remaining < v.total),
        "seen part-way through: {:?}",
        seen.first()
    );
    assert!(
        seen.windows(2).all(|w| w[1].remaining <= w[0].remaining),
        "what is left only shrinks"
    );
    assert_eq!(progress.view(), None, "cleared once the restore ended");
}

/// A restore from nothing that was cut short (its mark and some packed
/// runs left, no checkpoint) is started again on a cleared tree: what
/// the interrupted one wrote cannot outlive it.
#[test]
fn an_interrupted_restore_from_nothing_leaves_nothing_behind() {
    const RECORDS: i64 = 5;
    let fixture = Fixture::new(RECORDS);
    let tree = &fixture.tree;
    tree.begin_restore().expect("mark");
    let mut left = RestoreWrite::default();
    left.restore(b"ghost", Some(&[1u8; 20]));
    tree.restore_batch(left, true)
        .expect("a generation written");
    assert!(tree.has_runs() && tree.restoring().expect("mark read"));
    let (cancel, progress) = (AtomicBool::new(false), RestoreProgress::default());
    let restored = fixture.restore(&cancel, &progress).run().expect("restored");
    assert_eq!(restored.applied, RECORDS as u64);
    assert!(!tree.restoring().expect("mark read"));
    assert_eq!(
        tree.state_count().expect("states"),
        RECORDS as usize,
        "the changelog's states only, not the interrupted restore's"
    );
}

#[test]
fn only_the_brokers_passing_failures_are_transient() {
    let corrupt = ChangelogError::Corrupt {
        topic: "t".into(),
        partition: 0,
        offset: 1,
        message: "bad".into(),
    };
    assert!(!corrupt.is_transient());
    let ahead = ChangelogError::StoreAhead {
        topic: "t".into(),
        partition: 0,
        local: 5,
        end: 1,
    };
    assert!(!ahead.is_transient());
    let watermarks = |code| ChangelogError::Read {
        cause: crate::kafka::partition_reader::ReadError::Watermarks {
            topic: "t".into(),
            partition: 0,
            cause: rdkafka::error::KafkaError::MetadataFetch(code),
        },
    };
    assert!(watermarks(rdkafka::types::RDKafkaErrorCode::LeaderNotAvailable).is_transient());
    assert!(watermarks(rdkafka::types::RDKafkaErrorCode::OperationTimedOut).is_transient());
    assert!(watermarks(rdkafka::types::RDKafkaErrorCode::UnknownPartition).is_transient());
    assert!(!watermarks(rdkafka::types::RDKafkaErrorCode::TopicAuthorizationFailed).is_transient());
}

/// What `orderly repair` writes: keys changed after the checkpoint it
/// goes back to, written back (here: deleted, as a key that did not
/// exist there), then that checkpoint with the `published-to` header.
/// A store ahead of it (restored to a later write-out) comes back to
/// the checkpoint's state, and keeps where outputs were published to.
#[test]
fn a_repair_marker_brings_a_store_ahead_back_and_keeps_what_was_published() {
    let fixture = Fixture::new(3);
    let tree = &fixture.tree;
    let (cancel, progress) = (AtomicBool::new(false), RestoreProgress::default());
    let restore = fixture.restore(&cancel, &progress);
    let producer: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", fixture.cluster.bootstrap_servers())
        .create()
        .expect("producer");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let later = Checkpoint {
        next_offset: 9,
        ..Checkpoint::starting_at(0)
    };
    // A later write-out: order-3, covered by a checkpoint at 9.
    runtime
        .block_on(crate::processor::changelog::replay::write_marker(
            &producer,
            CHANGELOG,
            0,
            &[(b"order-3".to_vec(), Some(vec![8u8; 20]))],
            &later,
            None,
        ))
        .expect("write-out");
    let ahead = restore.run().expect("restored");
    assert_eq!(ahead.checkpoint.map(|c| c.next_offset), Some(9));
    assert_eq!(tree.state_count().expect("states"), 4);
    assert_eq!(tree.republished_below().expect("read"), None);

    let repaired = Checkpoint::starting_at(5);
    runtime
        .block_on(crate::processor::changelog::replay::write_marker(
            &producer,
            CHANGELOG,
            0,
            &[(b"order-3".to_vec(), None)],
            &repaired,
            Some(9),
        ))
        .expect("repair marker");
    let back = restore.run().expect("restored");
    assert_eq!(back.checkpoint.map(|c| c.next_offset), Some(5));
    assert_eq!(
        tree.state_count().expect("states"),
        3,
        "order-3, written after the checkpoint, is gone again"
    );
    assert_eq!(
        tree.republished_below().expect("read"),
        Some(9),
        "outputs below 9 were published before the repair"
    );

    // A fresh store restores the same from the changelog alone.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(&dir.path().join("store"), 16).expect("store");
    let fresh = store.partition("orders", 0).expect("tree");
    let fresh_restore = Restore {
        tree: &fresh,
        ..restore
    };
    let restored = fresh_restore.run().expect("restored");
    assert_eq!(restored.checkpoint.map(|c| c.next_offset), Some(5));
    assert_eq!(fresh.state_count().expect("states"), 3);
    assert_eq!(fresh.republished_below().expect("read"), Some(9));
}
