//! The other commands: read-only commands that never create a store, the
//! exit codes in `--help`, `run`'s store path, the demo, a closed pipe.

use std::process::{Output, Stdio};
use std::time::Duration;

use crate::{code, orderly, text, unused_port, EXIT_NOT_FOUND, EXIT_NO_STORE};

/// Item 2: every read-only store command refuses a path without a store,
/// names it absolutely, exits 6 and creates nothing.
#[test]
fn read_only_commands_on_a_missing_store_say_so_and_create_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let absolute = dir.path().join("nothing-here");
    for args in [
        &["state", "get", "o-1"][..],
        &["state", "dump"],
        &["state", "stats"],
        &["state", "stats", "--json"],
    ] {
        let out = orderly(args)
            .current_dir(dir.path())
            .env("ORDERLY_STORE__PATH", "nothing-here")
            .output()
            .expect("run");
        assert_eq!(code(&out), EXIT_NO_STORE, "{args:?}: {out:?}");
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(&format!("no store at {}", absolute.display())),
            "{args:?}: {stderr}"
        );
        assert!(
            !absolute.exists(),
            "{args:?} created {}",
            absolute.display()
        );
    }
}

/// Item 2 with a store present: `state get` of an unknown order keeps its
/// own exit code, distinct from "no store".
#[test]
fn unknown_order_in_an_existing_store_exits_3() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    drop(orderly::Store::open(&path, 8).expect("create a store"));
    // sled releases its lock file on drop; a reopen by the child may race it.
    let out = wait_for_unlocked(|| {
        orderly(&["state", "get", "o-1"])
            .env("ORDERLY_STORE__PATH", &path)
            .output()
            .expect("run")
    });
    assert_eq!(code(&out), EXIT_NOT_FOUND, "{out:?}");
    assert!(
        text(&out.stderr).contains("no state for order o-1"),
        "{}",
        text(&out.stderr)
    );
}

fn wait_for_unlocked(mut run: impl FnMut() -> Output) -> Output {
    for _ in 0..50 {
        let out = run();
        if !text(&out.stderr).contains("lock") {
            return out;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    run()
}

/// Item 5: the exit codes are listed in `--help`, each once, and a usage
/// error exits 2 (which nothing else uses).
#[test]
fn help_lists_distinct_exit_codes() {
    let out = orderly(&["--help"]).output().expect("run");
    assert_eq!(code(&out), 0);
    let help = text(&out.stdout);
    let table: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Exit codes"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    let codes: Vec<u8> = table
        .iter()
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(codes, (0..=10).collect::<Vec<u8>>(), "{help}");
    assert!(table[2].contains("usage"), "{help}");
    let out = orderly(&["no-such-command"]).output().expect("run");
    assert_eq!(code(&out), 2);
}

/// Item 2: `run` logs the store's absolute path before it reaches for Kafka.
#[test]
fn run_logs_the_absolute_store_path() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("run.log");
    let log_file = std::fs::File::create(&log).expect("log file");
    let mut child = orderly(&["run"])
        .current_dir(dir.path())
        .env("ORDERLY_STORE__PATH", "rel-store")
        .env("ORDERLY_HTTP__ADDRESS", "127.0.0.1:0")
        .env(
            "ORDERLY_KAFKA__BOOTSTRAP_SERVERS",
            format!("127.0.0.1:{}", unused_port()),
        )
        .env("RUST_LOG", "info,librdkafka=off,rdkafka=off")
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .expect("spawn run");
    let want = dir.path().join("rel-store").display().to_string();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let seen = crate::support::wait_until(Duration::from_secs(15), || {
        read().contains("opening the store")
    });
    crate::support::signal(&child, "TERM");
    let status = crate::support::wait_exit(&mut child, Duration::from_secs(15));
    assert!(seen, "{}", read());
    let logged = read();
    let line = logged
        .lines()
        .find(|l| l.contains("opening the store"))
        .unwrap_or_default();
    assert!(line.contains(&want), "logs {want}: {logged}");
    assert!(status.is_some(), "exits on SIGTERM");
}

/// Item 6: the demo reports the join apart from the processing rate.
#[test]
fn demo_reports_the_processing_rate_apart_from_the_join() {
    let out = orderly(&["demo", "--json", "--orders", "300"])
        .output()
        .expect("run");
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let f = |k: &str| {
        summary[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} in {summary}"))
    };
    assert!(
        f("join_seconds") > 0.5,
        "the mock cluster's join takes seconds: {summary}"
    );
    assert!(
        f("processing_seconds") > 0.0 && f("processing_seconds") < f("elapsed_seconds"),
        "{summary}"
    );
    let tolerance = 1e-6 * f("elapsed_seconds");
    assert!(
        (f("join_seconds") + f("processing_seconds") - f("elapsed_seconds")).abs()
            <= tolerance.max(1e-9),
        "{summary}"
    );
    assert!(
        f("events_per_second") > f("events_per_second_including_join"),
        "{summary}"
    );
    let consumed = summary["consumed"].as_f64().expect("consumed");
    // The rate is over the time spent deciding, which excludes the wait for
    // the write-out interval that `processing_seconds` includes.
    assert!(
        f("decide_seconds") > 0.0 && f("decide_seconds") <= f("processing_seconds"),
        "{summary}"
    );
    assert!(
        (f("events_per_second") * f("decide_seconds") - consumed).abs() < 1.0,
        "{summary}"
    );
}

/// The count `key` of a demo's JSON summary.
fn count(summary: &serde_json::Value, key: &str) -> u64 {
    summary[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} in {summary}"))
}

/// Issue 29: `demo --entity stock` runs the second domain end to end: a
/// stock workload with redeliveries, reorderings and poison records, every
/// SKU's level, the four counters and the availability changes checked
/// against the generator, exact.
#[test]
fn demo_runs_the_stock_domain_and_checks_every_level() {
    let out = orderly(&["demo", "--entity", "stock", "--json", "--orders", "150"])
        .output()
        .expect("run");
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    let n = |k: &str| count(&summary, k);
    assert_eq!(summary["entity"], "stock", "{summary}");
    assert_eq!(n("keys"), 150, "{summary}");
    assert!(summary.get("orders").is_none(), "{summary}");
    assert_eq!(
        n("applied") + n("duplicates") + n("stale") + n("dead_lettered"),
        n("consumed"),
        "{summary}"
    );
    for k in ["applied", "duplicates", "stale", "dead_lettered"] {
        assert_eq!(
            n(k),
            summary["expected"][k].as_u64().unwrap(),
            "{k}: {summary}"
        );
    }
    assert_eq!(
        n("consumed"),
        summary["expected"]["records"].as_u64().unwrap()
    );
    assert!(
        n("duplicates") > 0 && n("stale") > 0 && n("dead_lettered") > 0,
        "redeliveries, reorderings and poison: {summary}"
    );
    for k in [
        "counts_match_expected",
        "outcomes_add_up",
        "state_matches_expected",
        "outbox_matches_expected",
    ] {
        assert_eq!(summary[k], true, "{k}: {summary}");
    }
    assert_eq!(n("state_mismatches"), 0, "{summary}");
    assert!(
        n("outbox_expected") >= 150,
        "each SKU's first availability: {summary}"
    );
    assert_eq!(n("outbox_distinct"), n("outbox_expected"), "{summary}");
}

/// Like `run`, `demo` processes the entity `entity.kind` names, and says so
/// in its summary.
#[test]
fn demo_follows_entity_kind_and_prints_the_stock_summary() {
    let out = orderly(&["demo", "--orders", "100", "--partitions", "2"])
        .env("ORDERLY_ENTITY__KIND", "stock")
        .output()
        .expect("run");
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{stdout}{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("generating 100 SKUs"),
        "{}",
        text(&out.stderr)
    );
    for line in [
        "orderly demo: 100 SKUs over 2 partitions",
        "outcomes add up to consumed: yes",
        "counters match the generator: yes",
        "every SKU's state matches the generator: yes (0 mismatches)",
        "every status change published, nothing else: yes",
    ] {
        assert!(stdout.contains(line), "{line:?} in\n{stdout}");
    }
    // entity.kind = "latest" has no generator: a usage error naming --entity.
    let out = orderly(&["demo", "--orders", "10"])
        .env("ORDERLY_ENTITY__KIND", "latest")
        .env("ORDERLY_ENTITY__KEY_FIELD", "id")
        .env("ORDERLY_ENTITY__VERSION_FIELD", "version")
        .env("ORDERLY_ENTITY__EVENT_ID_FIELD", "event_id")
        .output()
        .expect("run");
    assert_eq!(code(&out), 2, "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--entity stock"),
        "{}",
        text(&out.stderr)
    );
}

/// Issue 32, item 8: a read command whose stdout is a pipe closed before it
/// writes (`orderly config show | head -0`, `state stats | head`) ends
/// quietly like any Unix tool (SIGPIPE, or exit 0), not with a panic (exit
/// 101) or an I/O error (exit 1).
#[test]
fn read_commands_end_quietly_on_a_closed_pipe() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("store");
    drop(orderly::Store::open(&path, 8).expect("create a store"));
    for args in [
        &["config", "show"][..],
        &["config", "check", "--timeout-ms", "500"],
        &["state", "stats"],
        &["state", "stats", "--json"],
    ] {
        // A pipe whose read end is closed before the child starts: its
        // first write fails, every time.
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors pipe(2) writes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
        // SAFETY: both descriptors were just created and are owned here only.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        drop(read);
        let out = orderly(args)
            .env("ORDERLY_STORE__PATH", &path)
            .env(
                "ORDERLY_KAFKA__BOOTSTRAP_SERVERS",
                format!("127.0.0.1:{}", unused_port()),
            )
            .stdout(Stdio::from(write))
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        let stderr = text(&out.stderr);
        assert!(
            out.status.success() || out.status.signal() == Some(libc::SIGPIPE),
            "{args:?}: ends quietly on the closed pipe, got {:?}\n{stderr}",
            out.status
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
    }
}
