//! The operator surface of the `orderly` binary (issue 12): environment
//! overrides typed by their key, `config show` and `config check`, read-only
//! commands that never create a store, errors that state their cause once,
//! distinct exit codes, and the demo's processing rate apart from the join.
//!
//! Every test runs the built binary as a child process with a clean
//! `ORDERLY_*` environment; Kafka is librdkafka's mock cluster in this process
//! (the child reaches it over TCP), the registry a few-line HTTP server.

mod support;

use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

/// The exit codes `--help` documents.
const EXIT_NOT_FOUND: i32 = 3;
const EXIT_CHECK_FAILED: i32 = 4;
const EXIT_CONFIG: i32 = 5;
const EXIT_NO_STORE: i32 = 6;

/// `orderly <args>` with no `ORDERLY_*` variable inherited from the caller.
fn orderly(args: &[&str]) -> Command {
    let mut cmd = Command::new(support::orderly_bin());
    cmd.args(args).stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ORDERLY_") {
            cmd.env_remove(name);
        }
    }
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {out:?}"))
}

/// A loopback port nothing listens on (bound, then released).
fn unused_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// An HTTP server answering `GET /subjects` with `status` and `body`, on its
/// own runtime; stops when dropped.
struct Http {
    url: String,
    _runtime: tokio::runtime::Runtime,
}

fn http_subjects(status: StatusCode, body: &'static str) -> Http {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let app = Router::new().route("/subjects", get(move || async move { (status, body) }));
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(SocketAddr::from((
            [127, 0, 0, 1],
            0,
        ))))
        .expect("bind http");
    let addr = listener.local_addr().expect("addr");
    runtime.spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Http {
        url: format!("http://{addr}"),
        _runtime: runtime,
    }
}

/// Item 1: a numeric value for a string key stays a string.
#[test]
fn numeric_group_id_from_the_environment_is_a_string() {
    let out = orderly(&["config", "show"])
        .env("ORDERLY_KAFKA__GROUP_ID", "42")
        .output()
        .expect("run");
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let shown: toml::Table = text(&out.stdout).parse().expect("config show prints TOML");
    assert_eq!(
        shown["kafka"]["group_id"].as_str(),
        Some("42"),
        "{}",
        text(&out.stdout)
    );
}

/// Item 1: an integer key given a non-integer names the key; exit 5.
#[test]
fn non_integer_for_an_integer_key_names_the_key() {
    let out = orderly(&["config", "show"])
        .env("ORDERLY_PROCESSING__BATCH_MAX_RECORDS", "lots")
        .output()
        .expect("run");
    assert_eq!(code(&out), EXIT_CONFIG, "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("processing.batch_max_records") && stderr.contains("not an integer"),
        "{stderr}"
    );
}

/// Items 1 and 4: librdkafka settings from the environment; secrets
/// redacted in `config show`, from the environment and from a file.
#[test]
fn config_show_redacts_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("orderly.toml");
    std::fs::write(
        &file,
        "[kafka.librdkafka]\n\"sasl.jaas.config\" = \"org.apache.kafka.common.security.plain.PlainLoginModule password=jaas-pw\"\n\
         \"sasl.username\" = \"alice\"\n",
    )
    .expect("write config");
    let out = orderly(&[
        "config",
        "show",
        "--config",
        file.to_str().expect("utf-8 path"),
    ])
    .env("ORDERLY_KAFKA__LIBRDKAFKA__SASL_PASSWORD", "hunter2")
    .env("ORDERLY_KAFKA__LIBRDKAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    .output()
    .expect("run");
    assert_eq!(code(&out), 0, "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        !stdout.contains("hunter2") && !stdout.contains("jaas-pw"),
        "a secret is shown:\n{stdout}"
    );
    let shown: toml::Table = stdout.parse().expect("TOML");
    let passthrough = &shown["kafka"]["librdkafka"];
    assert_eq!(
        passthrough["sasl.password"].as_str(),
        Some("<redacted>"),
        "{stdout}"
    );
    assert_eq!(
        passthrough["sasl.jaas.config"].as_str(),
        Some("<redacted>"),
        "{stdout}"
    );
    assert_eq!(
        passthrough["sasl.username"].as_str(),
        Some("alice"),
        "{stdout}"
    );
    assert_eq!(
        passthrough["security.protocol"].as_str(),
        Some("SASL_SSL"),
        "{stdout}"
    );
}

/// Item 1: the settings the guarantees depend on are refused from the
/// environment too.
#[test]
fn forced_librdkafka_key_from_the_environment_is_refused() {
    let out = orderly(&["config", "show"])
        .env("ORDERLY_KAFKA__LIBRDKAFKA__ENABLE_AUTO_COMMIT", "true")
        .output()
        .expect("run");
    assert_eq!(code(&out), EXIT_CONFIG, "{out:?}");
    assert!(
        text(&out.stderr).contains("enable.auto.commit"),
        "{}",
        text(&out.stderr)
    );
}

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

/// Item 3: a missing config file states its cause once; exit 5.
#[test]
fn missing_config_file_states_its_cause_once() {
    let out = orderly(&["state", "stats", "--config", "/nonexistent/orderly.toml"])
        .output()
        .expect("run");
    assert_eq!(code(&out), EXIT_CONFIG, "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("cannot read config file /nonexistent/orderly.toml"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("No such file or directory").count(),
        1,
        "{stderr}"
    );
}

/// Item 4: a stopped broker fails the broker line, nothing is probed after
/// it, exit 4.
#[test]
fn config_check_against_a_stopped_broker_fails_on_the_broker_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bootstrap = format!("127.0.0.1:{}", unused_port());
    let out = orderly(&["config", "check", "--timeout-ms", "1500"])
        .env("ORDERLY_KAFKA__BOOTSTRAP_SERVERS", &bootstrap)
        .env("ORDERLY_STORE__PATH", dir.path().join("store"))
        .output()
        .expect("run");
    assert_eq!(code(&out), EXIT_CHECK_FAILED, "{out:?}");
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("ok") && l.contains("config")),
        "{stdout}"
    );
    let last = lines.last().copied().unwrap_or_default();
    assert!(
        last.starts_with("FAIL") && last.contains("broker") && last.contains(&bootstrap),
        "{stdout}"
    );
    assert!(
        !stdout.contains("registry"),
        "stops at the first failure: {stdout}"
    );
}

/// A taken HTTP port fails `config check` on its own line, before the broker.
#[test]
fn config_check_fails_on_a_taken_http_port() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = taken.local_addr().expect("address").to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = orderly(&["config", "check", "--timeout-ms", "1500"])
        .env("ORDERLY_HTTP__ADDRESS", &address)
        .env("ORDERLY_STORE__PATH", dir.path().join("store"))
        .output()
        .expect("run");
    assert_eq!(code(&out), EXIT_CHECK_FAILED, "{out:?}");
    let stdout = text(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("FAIL")
            && last.contains("http")
            && last.contains(&address)
            && last.contains("http.address"),
        "{stdout}"
    );
    let bad = orderly(&["config", "check"])
        .env("ORDERLY_HTTP__ADDRESS", "localhost")
        .output()
        .expect("run");
    assert_eq!(
        code(&bad),
        5,
        "an address that is not IP:port is a configuration error: {bad:?}"
    );
    assert!(text(&bad.stdout).contains("http.address"), "{bad:?}");
}

/// Item 4: an invalid configuration is the first (failed) line; exit 5.
#[test]
fn config_check_reports_an_invalid_configuration_first() {
    let out = orderly(&["config", "check"])
        .env("ORDERLY_KAFKA__AUTO_OFFSET_RESET", "middle")
        .output()
        .expect("run");
    assert_eq!(code(&out), EXIT_CONFIG, "{out:?}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("FAIL") && stdout.contains("kafka.auto_offset_reset"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
}

/// Item 4 against a live (mock) cluster: the input topic's partitions, a
/// missing DLQ topic with how to create it, then a registry that is not one,
/// then everything passing.
#[test]
fn config_check_probes_topics_and_registry() {
    let cluster: MockCluster<'static, DefaultProducerContext> =
        MockCluster::new(1).expect("mock cluster");
    let bootstrap = cluster.bootstrap_servers();
    let topic = support::unique("orders");
    let dlq = format!("{topic}.dlq");
    cluster
        .create_topic(&topic, 3, 1)
        .expect("create input topic");
    let registry = http_subjects(StatusCode::OK, r#"["other-value"]"#);
    let dir = tempfile::tempdir().expect("tempdir");
    let check = |registry_url: &str| {
        orderly(&["config", "check", "--timeout-ms", "5000"])
            .env("ORDERLY_KAFKA__BOOTSTRAP_SERVERS", &bootstrap)
            .env("ORDERLY_KAFKA__INPUT_TOPIC", &topic)
            .env("ORDERLY_KAFKA__DLQ_TOPIC", &dlq)
            .env("ORDERLY_REGISTRY__URL", registry_url)
            .env("ORDERLY_STORE__PATH", dir.path().join("store"))
            .env("ORDERLY_HTTP__ADDRESS", "127.0.0.1:0")
            .output()
            .expect("run")
    };
    let line = |stdout: &str, name: &str| -> String {
        stdout
            .lines()
            .find(|l| {
                l.split_whitespace()
                    .skip(1)
                    .collect::<Vec<_>>()
                    .join(" ")
                    .starts_with(name)
            })
            .unwrap_or_default()
            .to_string()
    };

    let out = check(&registry.url);
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), EXIT_CHECK_FAILED, "missing DLQ topic: {stdout}");
    assert!(
        line(&stdout, "input topic").starts_with("ok")
            && line(&stdout, "input topic").contains("3 partition"),
        "{stdout}"
    );
    let dlq_line = line(&stdout, "dlq topic");
    assert!(
        dlq_line.starts_with("FAIL") && dlq_line.contains(&dlq) && dlq_line.contains("create"),
        "{stdout}"
    );

    cluster.create_topic(&dlq, 1, 1).expect("create dlq topic");
    // The output topic (default orders.status) is missing: a hidden
    // prerequisite until config check named it.
    let out = check(&registry.url);
    let stdout = text(&out.stdout);
    assert_eq!(
        code(&out),
        EXIT_CHECK_FAILED,
        "missing output topic: {stdout}"
    );
    let output_line = line(&stdout, "output topic");
    assert!(
        output_line.starts_with("FAIL")
            && output_line.contains("orders.status")
            && output_line.contains("--create"),
        "{stdout}"
    );
    cluster
        .create_topic("orders.status", 3, 1)
        .expect("create output topic");
    let not_registry = http_subjects(StatusCode::NOT_FOUND, "<html>no such page</html>");
    let out = check(&not_registry.url);
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), EXIT_CHECK_FAILED, "{stdout}");
    let registry_line = line(&stdout, "registry");
    assert!(
        registry_line.starts_with("FAIL")
            && registry_line.contains(&format!("{}/subjects", not_registry.url))
            && registry_line.contains("404"),
        "{stdout}"
    );

    let html_ok = http_subjects(StatusCode::OK, "<html>welcome</html>");
    let out = check(&html_ok.url);
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), EXIT_CHECK_FAILED, "{stdout}");
    let registry_line = line(&stdout, "registry");
    assert!(
        registry_line.starts_with("FAIL") && registry_line.contains("not a JSON array"),
        "{stdout}"
    );

    // A registry that answers /subjects but not the versions of a subject
    // is not one the schema guard can use.
    let out = check(&registry.url);
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), EXIT_CHECK_FAILED, "{stdout}");
    assert!(line(&stdout, "schemas").starts_with("FAIL"), "{stdout}");

    let double = support::registry_double::RegistryDouble::start();
    let out = check(&double.url);
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "all pass: {stdout}\n{}", text(&out.stderr));
    assert!(
        line(&stdout, "schemas").contains("no writer schema registered yet"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok")).count(), 13, "config, store, http, security, broker, input topic, group, dlq topic, changelog, output, acls, registry, schemas: {stdout}");
    assert!(
        line(&stdout, "acls").contains("not checked"),
        "the mock cluster cannot say: {stdout}"
    );
    assert!(
        line(&stdout, "output topic").contains("orders.status: 3 partition(s)"),
        "{stdout}"
    );
    let changelog_line = line(&stdout, "changelog");
    assert!(
        changelog_line.contains("does not exist yet") && changelog_line.contains("3 partitions"),
        "{stdout}"
    );

    // The schema guard (issue 21): a registry holding the input subject's
    // versions, then a breaking one among them.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let client =
        orderly::Registry::http(&double.url, std::time::Duration::from_secs(5)).expect("client");
    runtime
        .block_on(orderly::testkit::orders::Encoder::register(&client, &topic))
        .expect("register v1 and v2");
    let out = check(&double.url);
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), 0, "{stdout}\n{}", text(&out.stderr));
    assert!(
        line(&stdout, "schemas").contains("all 2 version(s) readable"),
        "{stdout}"
    );
    let breaking = orderly::testkit::orders::SCHEMA_V2.replace(
        r#""name": "version", "type": "long""#,
        r#""name": "version", "type": "string""#,
    );
    let id = runtime
        .block_on(client.register(&format!("{topic}-value"), &breaking))
        .expect("register a breaking version");
    let out = check(&double.url);
    let stdout = text(&out.stdout);
    assert_eq!(code(&out), EXIT_CHECK_FAILED, "{stdout}");
    let schemas_line = line(&stdout, "schemas");
    assert!(
        schemas_line.starts_with("FAIL")
            && schemas_line.contains(&format!("version 3 (schema id {id})"))
            && schemas_line.contains("refuses"),
        "{stdout}"
    );
    // `run` refuses before it consumes anything (and before it needs the broker).
    let run = |guard: &str| {
        orderly(&["run"])
            .env("ORDERLY_KAFKA__BOOTSTRAP_SERVERS", &bootstrap)
            .env("ORDERLY_KAFKA__INPUT_TOPIC", &topic)
            .env("ORDERLY_KAFKA__DLQ_TOPIC", &dlq)
            .env("ORDERLY_REGISTRY__URL", &double.url)
            .env("ORDERLY_REGISTRY__SCHEMA_GUARD", guard)
            .env("ORDERLY_STORE__PATH", dir.path().join("store"))
            .env("ORDERLY_HTTP__ADDRESS", "")
            .output()
            .expect("run")
    };
    let out = run("refuse");
    let stderr = text(&out.stderr);
    assert_eq!(code(&out), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("version 3 (schema id {id})")) && stderr.contains("schema_guard"),
        "{stderr}"
    );
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
    let seen = support::wait_until(Duration::from_secs(15), || {
        read().contains("opening the store")
    });
    support::signal(&child, "TERM");
    let status = support::wait_exit(&mut child, Duration::from_secs(15));
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

/// Issue 32, item 4: an `ORDERLY_` variable that sets nothing (one
/// underscore where two are needed) is named in a warning with the
/// setting it likely meant, by `config show` (stderr), `config check` (its
/// config line) and the other commands' log.
#[test]
fn an_orderly_variable_that_sets_nothing_is_warned_about() {
    let dir = tempfile::tempdir().expect("tempdir");
    let meant = "did you mean ORDERLY_KAFKA__BOOTSTRAP_SERVERS?";
    let show = orderly(&["config", "show"])
        .env("ORDERLY_KAFKA_BOOTSTRAP_SERVERS", "elsewhere:9092")
        .output()
        .expect("run");
    assert!(show.status.success(), "{show:?}");
    let stderr = text(&show.stderr);
    assert!(
        stderr.contains("ORDERLY_KAFKA_BOOTSTRAP_SERVERS") && stderr.contains(meant),
        "{stderr}"
    );
    let check = orderly(&["config", "check", "--timeout-ms", "500"])
        .env("ORDERLY_KAFKA_BOOTSTRAP_SERVERS", "elsewhere:9092")
        .env(
            "ORDERLY_KAFKA__BOOTSTRAP_SERVERS",
            format!("127.0.0.1:{}", unused_port()),
        )
        .env("ORDERLY_STORE__PATH", dir.path().join("store"))
        .output()
        .expect("run");
    let stdout = text(&check.stdout);
    let config_line = stdout
        .lines()
        .find(|l| l.contains("config"))
        .unwrap_or_default();
    assert!(config_line.contains(meant), "{stdout}");
    let stats = orderly(&["state", "stats"])
        .env("ORDERLY_KAFKA_BOOTSTRAP_SERVERS", "elsewhere:9092")
        .env("ORDERLY_STORE__PATH", dir.path().join("nothing"))
        .output()
        .expect("run");
    assert!(
        text(&stats.stderr).contains(meant),
        "{}",
        text(&stats.stderr)
    );
    let clean = orderly(&["config", "show"])
        .env("ORDERLY_KAFKA__BOOTSTRAP_SERVERS", "elsewhere:9092")
        .env("ORDERLY_LOG_FORMAT", "text")
        .output()
        .expect("run");
    assert!(
        !text(&clean.stderr).contains("warning"),
        "{}",
        text(&clean.stderr)
    );
}
