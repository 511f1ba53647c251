//! Crash points for the crash drill, compiled in with the `fault-injection`
//! feature only (the `e2e` feature turns it on). Tests set `ORDERLY_FAULT=<point>:<n>` to
//! abort the process (SIGABRT, no cleanup, like a power cut for the
//! process) the n-th time it reaches `<point>`. Without the feature, every
//! point is a no-op.
//!
//! Points: `after_dlq` (dead letters acknowledged, batch not yet written),
//! `after_batch` (sled batch written, not flushed), `after_flush` (flushed,
//! offsets not committed to Kafka), `torn_changelog` (half of a write-out's
//! changelog records acknowledged, its checkpoint record never sent);
//! `panic_batch` panics (rather than
//! aborts) inside a partition task, to prove that a panicking task stops the
//! process.
//!
//! Stop points hold a write-out where a pause or a broker outage can land
//! (the process stops itself with SIGSTOP; the test resumes it with
//! SIGCONT): `stop_queued` (the write-out's changelog records handed to
//! the producer, not yet acknowledged or committed), `stop_acked` (every
//! record acknowledged or the transaction committed, the sled batch not yet
//! written), `stop_batched` (the sled batch written, not flushed);
//! `stop_init` holds a partition's start, before its transactional
//! producer's `init_transactions` (which, sent late, fences whichever
//! member owns the partition by then).
//!
//! `hang_send_offsets` holds the blocking thread of one exactly_once
//! write-out's `send_offsets_to_transaction` forever, as librdkafka did on
//! three brokers (its issue 5456): the call's bound must start the
//! partition over.
//!
//! `hang_batched` holds one partition task forever after its sled batch,
//! before it reports the batch to the flusher, while the rest of the process
//! goes on: a task that misses a drain's deadline after its write-out.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

pub(crate) const ENV: &str = "ORDERLY_FAULT";

/// The crash points there are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    AfterDlq,
    AfterBatch,
    AfterFlush,
    PanicBatch,
    TornChangelog,
    StopQueued,
    StopAcked,
    StopBatched,
    StopInit,
    HangBatched,
    HangSendOffsets,
}

const ALL: [Point; 11] = [
    Point::AfterDlq,
    Point::AfterBatch,
    Point::AfterFlush,
    Point::PanicBatch,
    Point::TornChangelog,
    Point::StopQueued,
    Point::StopAcked,
    Point::StopBatched,
    Point::StopInit,
    Point::HangBatched,
    Point::HangSendOffsets,
];

impl Point {
    fn name(self) -> &'static str {
        match self {
            Point::AfterDlq => "after_dlq",
            Point::AfterBatch => "after_batch",
            Point::AfterFlush => "after_flush",
            Point::PanicBatch => "panic_batch",
            Point::TornChangelog => "torn_changelog",
            Point::StopQueued => "stop_queued",
            Point::StopAcked => "stop_acked",
            Point::StopBatched => "stop_batched",
            Point::StopInit => "stop_init",
            Point::HangBatched => "hang_batched",
            Point::HangSendOffsets => "hang_send_offsets",
        }
    }
}

struct Armed {
    point: &'static str,
    at: u64,
    hits: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    if !cfg!(feature = "fault-injection") {
        // A build without the feature has no crash switch: ORDERLY_FAULT is
        // not even read.
        return None;
    }
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let raw = std::env::var(ENV).ok()?;
            let (point, at) = raw.split_once(':').unwrap_or((raw.as_str(), "1"));
            let point = ALL.into_iter().map(Point::name).find(|name| *name == point);
            match (point, at.parse::<u64>()) {
                (Some(point), Ok(at)) if at > 0 => Some(Armed { point, at, hits: AtomicU64::new(0) }),
                _ => {
                    eprintln!("orderly: ignoring {ENV}={raw}: expected after_dlq|after_batch|after_flush|panic_batch|torn_changelog|stop_queued|stop_acked|stop_batched|stop_init|hang_batched|hang_send_offsets[:N]");
                    None
                }
            }
        })
        .as_ref()
}

/// Marks that `point` was reached; aborts the process when armed for it.
pub(crate) fn hit(point: Point) {
    let Some(armed) = armed() else { return };
    if armed.point != point.name() {
        return;
    }
    if armed.hits.fetch_add(1, Ordering::Relaxed) + 1 == armed.at {
        if point == Point::PanicBatch {
            panic!("fault injection: panic at {}", armed.point);
        }
        if point == Point::HangSendOffsets {
            // librdkafka's call that does not return (issue 5456): this
            // blocking thread never comes back; the process goes on.
            eprintln!("orderly: fault injection: hanging in send_offsets_to_transaction");
            loop {
                std::thread::park();
            }
        }
        if matches!(
            point,
            Point::StopQueued | Point::StopAcked | Point::StopBatched | Point::StopInit
        ) {
            stop_self(armed.point);
            return;
        }
        eprintln!("orderly: fault injection: aborting at {}", armed.point);
        std::process::abort();
    }
}

/// Counts a hit of `point` and tells whether it is the armed one, for a
/// fault that must do something before it aborts ([`abort`]).
pub(crate) fn due(point: Point) -> bool {
    let Some(armed) = armed() else { return false };
    armed.point == point.name() && armed.hits.fetch_add(1, Ordering::Relaxed) + 1 == armed.at
}

/// Holds the calling task forever the n-th time it reaches `point` (the
/// rest of the process goes on; a drain's deadline stops the task).
pub(crate) async fn hang(point: Point) {
    if due(point) {
        eprintln!("orderly: fault injection: hanging at {}", point.name());
        std::future::pending::<()>().await;
    }
}

/// Aborts the process at `point` (after [`due`] said it is time).
pub(crate) fn abort(point: Point) -> ! {
    eprintln!("orderly: fault injection: aborting at {}", point.name());
    std::process::abort();
}

/// Stops the whole process (every thread, librdkafka's included) with
/// SIGSTOP, as a pause of the machine or the container would; returns once
/// something sends SIGCONT.
fn stop_self(point: &str) {
    eprintln!("orderly: fault injection: stopping at {point} (SIGSTOP; resume with SIGCONT)");
    let pid = std::process::id().to_string();
    match std::process::Command::new("kill")
        .args(["-STOP", pid.as_str()])
        .status()
    {
        Ok(status) if status.success() => eprintln!("orderly: fault injection: resumed at {point}"),
        other => eprintln!("orderly: fault injection: cannot stop at {point}: {other:?}"),
    }
}
