//! The configuration: environment overrides typed by their key, `config
//! show` and `config check`, a missing config file, a variable that sets
//! nothing.

use axum::http::StatusCode;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;

use crate::{code, http_subjects, orderly, text, unused_port, EXIT_CHECK_FAILED, EXIT_CONFIG};

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
    let topic = crate::support::unique("orders");
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

    let double = crate::support::registry_double::RegistryDouble::start();
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
