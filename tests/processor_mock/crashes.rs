//! The binary killed, stopped or stuck at each point of its work, and what
//! it commits and reports: nothing applied twice or lost.

use std::time::Duration;

use orderly::testkit::headers::{HEADER_OFFSET, HEADER_PARTITION};
use orderly::testkit::orders::workload::WorkloadSpec;
use orderly::Store;

use crate::support::{committed, read_all, signal, wait_exit, wait_until};
use crate::{assert_store_matches, loaded, Loaded, PARTITIONS};

/// The binary, killed at each chosen crash point (after the dead-letter
/// produce, after the sled batch before the flush, after the flush before
/// the offset commit) and restarted, ends with exact counters and states.
#[test]
fn crashes_at_each_point_resume_with_nothing_applied_twice_or_lost() {
    // Small batches and frequent write-outs, so the crash points land
    // mid-stream.
    let Loaded {
        c,
        _registry,
        group,
        ends,
        total,
        expected,
        instance,
    } = loaded(
        WorkloadSpec {
            orders: 3_000,
            poison_rate: 0.01,
            seed: 11,
            ..Default::default()
        },
        "batch_max_records = 50\nbatch_max_wait_ms = 5\ncommit_interval_ms = 10",
    );
    for fault in [
        "after_dlq:1",
        "after_batch:5",
        "after_flush:3",
        "after_batch:30",
        "after_flush:10",
    ] {
        let mut child = instance.spawn_run(Some(fault));
        let status = wait_exit(&mut child, Duration::from_secs(90))
            .unwrap_or_else(|| panic!("{fault}: never crashed\n{}", instance.log()));
        assert!(
            !status.success(),
            "{fault}: the fault aborts the process\n{}",
            instance.log()
        );
        let stats = instance.stats();
        let consumed = stats["totals"]["consumed"].as_u64().unwrap();
        assert!(
            consumed < total as u64,
            "{fault}: crashed before the end ({consumed} of {total})"
        );
    }
    let before = instance.connected_count();
    let mut child = instance.spawn_run(None);
    assert!(
        instance.wait_ready(before),
        "never connected\n{}",
        instance.log()
    );
    let caught_up = wait_until(Duration::from_secs(120), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        caught_up,
        "committed offsets reach the end offsets\n{}",
        instance.log()
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0: {status:?}\n{}",
        instance.log()
    );
    assert!(instance
        .log()
        .contains("fault injection: aborting at after_flush"));

    let stats = instance.stats();
    let totals = &stats["totals"];
    assert_eq!(
        totals["applied"].as_u64(),
        Some(expected.outcomes.applied),
        "{stats}"
    );
    assert_eq!(
        totals["duplicates"].as_u64(),
        Some(expected.outcomes.duplicates),
        "{stats}"
    );
    assert_eq!(
        totals["stale"].as_u64(),
        Some(expected.outcomes.stale),
        "{stats}"
    );
    assert_eq!(
        totals["dead_lettered"].as_u64(),
        Some(expected.outcomes.dead_lettered),
        "{stats}"
    );
    assert_eq!(totals["consumed"].as_u64(), Some(total as u64));
    let dump = instance.dump();
    assert_eq!(dump.len(), expected.states.len());
    for (order_id, want) in &expected.states {
        let got: orderly::testkit::orders::StateView =
            serde_json::from_value(dump[order_id].clone()).expect("state JSON");
        assert_eq!(&got, want, "order {order_id}");
    }
    // A crash after the dead-letter produce may re-send that letter; nothing
    // else is in the topic.
    let letters = read_all(&c.bootstrap, &c.dlq);
    let mut sources: Vec<(String, String)> = letters
        .iter()
        .map(|l| {
            (
                l.headers[HEADER_PARTITION].clone(),
                l.headers[HEADER_OFFSET].clone(),
            )
        })
        .collect();
    sources.sort();
    sources.dedup();
    assert_eq!(
        sources.len() as u64,
        expected.outcomes.dead_lettered,
        "every poison record dead-lettered at least once"
    );
    drop(c.mock);
}

/// A crash after a flush and before its offset commit, with no more input
/// coming: the restarted processor commits its durable checkpoints within
/// seconds, without waiting for new records.
#[test]
fn durable_checkpoints_ahead_of_the_group_are_committed_without_new_input() {
    // The write-outs fall due together (no early write-out once caught up),
    // and the process aborts after its first flush, before any commit. The
    // drill needs a partition whose flushed checkpoint is its end and whose
    // committed offset is behind it: it has no input left, and only the
    // durable checkpoint can move its offset. Partitions the first flush
    // did not cover reprocess their records on the restart and are
    // committed as usual. Without the changelog: with it, each partition's
    // write-out waits for its own acknowledgements and they reach the
    // flusher in different rounds (and so with the outbox's write-out
    // delivery, which waits for the status changes' acknowledgements: the
    // outbox is off too). A first flush that covered no partition whole
    // (its write-out came before the partition's last record, on a loaded
    // machine) is tried again on a fresh topic, up to 8 times.
    let no_changelog = [
        ("ORDERLY_KAFKA__CHANGELOG_TOPIC", ""),
        ("ORDERLY_KAFKA__OUTPUT_TOPIC", ""),
    ];
    let attempt = || {
        let loaded = loaded(
            WorkloadSpec {
                orders: 500,
                seed: 8,
                ..Default::default()
            },
            // Every partition's write-out at once (no turns to wait for).
            "commit_interval_ms = 3000\ncaught_up_write_ms = 0\nconcurrent_write_outs = 0",
        );
        let instance = &loaded.instance;
        let mut child = instance.spawn_run_env(
            Some("after_flush:1"),
            "info,librdkafka=warn,rdkafka=warn",
            &no_changelog,
        );
        let status = wait_exit(&mut child, Duration::from_secs(60))
            .unwrap_or_else(|| panic!("never crashed\n{}", instance.log()));
        assert!(
            !status.success(),
            "aborted after the flush\n{}",
            instance.log()
        );
        let durable = instance.stats();
        let group_at = committed(
            &loaded.c.bootstrap,
            &loaded.group,
            &loaded.c.topic,
            PARTITIONS,
        );
        let ahead: Vec<i64> = durable["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .filter_map(|p| {
                let partition = i32::try_from(p["partition"].as_i64()?).ok()?;
                let end = *loaded.ends.get(&partition)?;
                let flushed_whole = p["next_offset"].as_i64() == Some(end);
                let uncommitted = group_at.get(&partition).is_none_or(|&at| at < end);
                (flushed_whole && uncommitted).then_some(i64::from(partition))
            })
            .collect();
        if !ahead.is_empty() {
            eprintln!("partitions durable at their end, not committed: {ahead:?}");
            return Some(loaded);
        }
        eprintln!("the first flush covered no partition whole; again");
        None
    };
    let Loaded {
        c,
        _registry,
        group,
        ends,
        instance,
        ..
    } = (0..8)
        .find_map(|_| attempt())
        .expect("a crash after a flush covering a partition whole, in 8 attempts");
    let behind = committed(&c.bootstrap, &group, &c.topic, PARTITIONS);
    assert_ne!(behind, ends, "the crash came before the commit");
    // No new input from here on.
    let before = instance.connected_count();
    let mut child =
        instance.spawn_run_env(None, "info,librdkafka=warn,rdkafka=warn", &no_changelog);
    assert!(
        instance.wait_ready(before),
        "never connected\n{}",
        instance.log()
    );
    let caught_up = wait_until(Duration::from_secs(20), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let _ = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        caught_up,
        "committed offsets reach the checkpoints with no new input\n{}",
        instance.log()
    );
    drop(c.mock);
}

/// A partition task that misses a drain's deadline after its store batch
/// and before it reports the batch (held there by `hang_batched`): on
/// SIGTERM the release commits the partition's durable checkpoint, so the
/// group's offsets end equal to the store's checkpoints, not one write-out
/// behind them.
#[test]
fn a_task_stopped_at_the_drain_deadline_after_its_batch_has_its_checkpoint_committed() {
    let Loaded {
        c,
        _registry,
        group,
        instance,
        ..
    } = loaded(
        WorkloadSpec {
            orders: 2_000,
            seed: 21,
            ..Default::default()
        },
        "batch_max_records = 50\nbatch_max_wait_ms = 5\ncommit_interval_ms = 10",
    );
    let mut child = instance.spawn_run(Some("hang_batched:24"));
    let hung = wait_until(Duration::from_secs(60), || {
        instance
            .log()
            .contains("fault injection: hanging at hang_batched")
    });
    assert!(hung, "a task hung after its batch\n{}", instance.log());
    // The other partitions' write-outs go on meanwhile.
    std::thread::sleep(Duration::from_millis(500));
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0: {status:?}\n{}",
        instance.log()
    );
    let log = instance.log();
    assert!(
        log.contains("partition task did not drain before the deadline"),
        "the hung task missed the drain's deadline\n{log}"
    );
    let stats = instance.stats();
    let committed = committed(&c.bootstrap, &group, &c.topic, PARTITIONS);
    for p in stats["partitions"].as_array().expect("partitions") {
        let partition = p["partition"].as_i64().unwrap() as i32;
        let next = p["next_offset"].as_i64().unwrap();
        assert_eq!(
            committed.get(&partition).copied(),
            Some(next),
            "partition {partition}: the group's offset is the durable checkpoint\n{log}"
        );
    }
    drop(c.mock);
}

/// librdkafka's `send_offsets_to_transaction` that never returns (its
/// issues 5456 and 5511, seen on three brokers; held here by
/// `hang_send_offsets`, which parks the call's thread for good): the
/// write-out's wait is logged naming the call, the call is given up at its
/// bound, the partition starts over with a new producer (fencing the stuck
/// one), and the run ends with exact counters and states. Without the bound
/// the partition stops silently and the committed offsets never reach the
/// ends.
#[test]
fn a_transactional_call_that_never_returns_is_reported_and_its_partition_starts_over() {
    let Loaded {
        c,
        _registry,
        group,
        ends,
        expected,
        instance,
        ..
    } = loaded(
        WorkloadSpec {
            orders: 1_500,
            poison_rate: 0.01,
            seed: 23,
            ..Default::default()
        },
        "guarantee = \"exactly_once\"\nbatch_max_records = 50\nbatch_max_wait_ms = 5\ncommit_interval_ms = 10",
    );
    let mut child = instance.spawn_run(Some("hang_send_offsets:6"));
    // While the call waits (reported after 10 s, given up at 45 s): /readyz
    // says the partition is stalled and names the call, /metrics has the
    // wait, /api/status the phase.
    let reported = wait_until(Duration::from_secs(90), || {
        instance
            .log()
            .contains("a write-out is waiting in librdkafka's send_offsets_to_transaction")
    });
    assert!(reported, "the wait is reported\n{}", instance.log());
    let address = instance.http_address().expect("http address");
    let raw = |path: &str| {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&address).expect("connect");
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .expect("request");
        let mut answer = String::new();
        stream.read_to_string(&mut answer).expect("answer");
        answer
    };
    let ready = raw("/readyz");
    assert!(
        ready.starts_with("HTTP/1.1 503")
            && ready.contains("is stalled")
            && ready.contains("send_offsets_to_transaction"),
        "/readyz while a write-out is stalled:\n{ready}"
    );
    assert!(
        raw("/metrics").contains("orderly_write_out_call_wait_seconds{"),
        "the wait's metric"
    );
    assert!(
        raw("/api/status").contains("\"stalled_in\":\"send_offsets_to_transaction"),
        "the status page's row"
    );
    let caught_up = wait_until(Duration::from_secs(150), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    assert!(caught_up, "committed offsets reach the end offsets\n{log}");
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0 (the parked thread does not hold the exit): {status:?}\n{log}"
    );
    for said in [
        "fault injection: hanging in send_offsets_to_transaction",
        "a write-out is waiting in librdkafka's send_offsets_to_transaction",
        "send_offsets_to_transaction did not return within",
    ] {
        assert!(log.contains(said), "the log says {said:?}\n{log}");
    }
    let store = Store::open(&instance.store_path, 64).expect("store");
    assert_store_matches(&store, &expected);
    drop(c.mock);
}

/// A partition that has read everything its input holds writes out
/// `caught_up_write_ms` after its last write-out instead of a commit
/// interval later: with a 60 s interval (and a few hundred orders, far
/// below the cache share that writes early), the only way the group's
/// offsets reach the ends within 20 s is that write-out. (With
/// `caught_up_write_ms = 0` this test fails.)
#[test]
fn a_caught_up_partition_commits_without_waiting_for_the_commit_interval() {
    let loaded = loaded(
        WorkloadSpec {
            orders: 300,
            seed: 12,
            ..Default::default()
        },
        "commit_interval_ms = 60000",
    );
    let Loaded {
        c,
        _registry,
        group,
        ends,
        total,
        instance,
        ..
    } = loaded;
    let mut child = instance.spawn_run_env(None, "info,librdkafka=warn,rdkafka=warn", &[]);
    let caught_up = wait_until(Duration::from_secs(20), || {
        committed(&c.bootstrap, &group, &c.topic, PARTITIONS) == ends
    });
    signal(&child, "TERM");
    let _ = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        caught_up,
        "committed offsets reach the ends long before the 60 s commit interval\n{}",
        instance.log()
    );
    assert_eq!(
        instance.stats()["totals"]["consumed"].as_i64(),
        Some(total),
        "every record decided and written"
    );
    drop(c.mock);
}

/// A partition task that panics stops the process with a non-zero exit
/// naming the partition, and nothing beyond durable state is committed: the
/// group's committed offsets never pass the store's checkpoints.
#[test]
fn a_panicking_partition_task_stops_the_process_naming_the_partition() {
    let Loaded {
        c,
        _registry,
        group,
        total,
        instance,
        ..
    } = loaded(
        WorkloadSpec {
            orders: 2_000,
            poison_rate: 0.0,
            seed: 3,
            ..Default::default()
        },
        "batch_max_records = 50\nbatch_max_wait_ms = 5\ncommit_interval_ms = 10",
    );
    let mut child = instance.spawn_run(Some("panic_batch:20"));
    let status = wait_exit(&mut child, Duration::from_secs(60))
        .unwrap_or_else(|| panic!("never stopped\n{}", instance.log()));
    assert!(
        !status.success(),
        "a panic is a failure exit: {status:?}\n{}",
        instance.log()
    );
    let log = instance.log();
    assert!(
        log.contains("fault injection: panic at panic_batch"),
        "{log}"
    );
    let named = regex_lite_partition(&log);
    assert!(named, "the error names the panicking partition\n{log}");
    let stats = instance.stats();
    let consumed = stats["totals"]["consumed"].as_u64().unwrap();
    assert!(
        consumed < total as u64,
        "stopped before the end ({consumed} of {total})"
    );
    let committed = committed(&c.bootstrap, &group, &c.topic, PARTITIONS);
    for p in stats["partitions"].as_array().expect("partitions") {
        let partition = p["partition"].as_i64().unwrap() as i32;
        let next = p["next_offset"].as_i64().unwrap();
        let group_offset = committed.get(&partition).copied().unwrap_or(-1);
        assert!(
            group_offset <= next,
            "partition {partition}: committed {group_offset} beyond the durable checkpoint {next}"
        );
    }
    drop(c.mock);
}

/// True when the log says "partition N: task panicked".
fn regex_lite_partition(log: &str) -> bool {
    log.match_indices(": task panicked").any(|(at, _)| {
        let before = &log[..at];
        let digits = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_digit())
            .count();
        digits > 0 && before[..before.len() - digits].ends_with("partition ")
    })
}
