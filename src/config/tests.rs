//! The configuration's unit tests: the layers, the checks and their messages.

use std::collections::BTreeMap;

use super::duration::parse_duration;
use super::suggest::edit_distance;
use super::*;
use std::path::PathBuf;

#[test]
fn an_orderly_variable_that_sets_nothing_is_warned_with_a_suggestion() {
    let vars =
        |names: &[&str]| unused_env_vars(names.iter().map(|n| (n.to_string(), "x".to_string())));
    let warned = vars(&["ORDERLY_KAFKA_BOOTSTRAP_SERVERS"]);
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains("ORDERLY_KAFKA_BOOTSTRAP_SERVERS")
            && warned[0].contains("did you mean ORDERLY_KAFKA__BOOTSTRAP_SERVERS?"),
        "{}",
        warned[0]
    );
    assert!(vars(&["ORDERLY_PROCESSING_BATCH_MAX_RECORD"])[0]
        .contains("did you mean ORDERLY_PROCESSING__BATCH_MAX_RECORDS?"));
    assert!(vars(&["ORDERLY_GROUP_ID"])[0].contains("did you mean ORDERLY_KAFKA__GROUP_ID?"));
    let unknown = vars(&["ORDERLY_WHATEVER"]);
    assert!(unknown[0].contains("ORDERLY_WHATEVER") && !unknown[0].contains("did you mean"));
    assert!(
        vars(&[
            "ORDERLY_KAFKA__BOOTSTRAP_SERVERS",
            "ORDERLY_LOG_FORMAT",
            "ORDERLY_KAFKA_PORT",
            "ORDERLY_E2E_BOOTSTRAP",
            "PATH"
        ])
        .is_empty(),
        "settings, the binary's and the scripts' own variables are not warned"
    );
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn defaults_load_and_validate() {
    let c = Config::defaults().unwrap();
    assert_eq!(c.processing.batch_max_records, 1000);
    assert_eq!(c.inbox_retention(), Duration::from_secs(7 * 86_400));
}

#[test]
fn env_overrides_file_and_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[kafka]\ngroup_id = \"from-file\"\n[processing]\nbatch_max_records = 10\n",
    )
    .unwrap();
    let c = Config::from_layers(
        Some(&path),
        env(&[
            ("ORDERLY_PROCESSING__BATCH_MAX_RECORDS", "500"),
            ("ORDERLY_KAFKA__BOOTSTRAP_SERVERS", "h:1"),
        ]),
    )
    .unwrap();
    assert_eq!(c.kafka.group_id, "from-file");
    assert_eq!(c.processing.batch_max_records, 500);
    assert_eq!(c.kafka.bootstrap_servers, "h:1");
}

#[test]
fn a_misspelt_key_gets_a_suggestion() {
    let err = Config::from_layers(None, env(&[("ORDERLY_PROCESSING__BATCH_MAX_RECORD", "5")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("did you mean `batch_max_records`?"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[kafka]\nbootstrap_server = \"h:1\"\n").unwrap();
    let err = Config::from_layers(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown key `kafka.bootstrap_server` (did you mean `bootstrap_servers`?)"),
        "{err}"
    );
    std::fs::write(&path, "[procesing]\nguarantee = \"exactly_once\"\n").unwrap();
    let err = Config::from_layers(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("unknown section [procesing] (did you mean `processing`?)"),
        "{err}"
    );
    // Nothing close: no guess, the list of keys.
    std::fs::write(&path, "[store]\nzzz = 1\n").unwrap();
    let err = Config::from_layers(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(
        !err.contains("did you mean") && err.contains("`cache_capacity_mb`"),
        "{err}"
    );
    assert_eq!(edit_distance("kitten", "sitting"), 3);
}

#[test]
fn unknown_key_names_the_key() {
    let err =
        Config::from_layers(None, env(&[("ORDERLY_PROCESSING__BATCH_SIZE", "5")])).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("batch_size"), "{msg}");
    assert!(
        msg.contains("batch_max_records"),
        "lists what is allowed: {msg}"
    );
}

#[test]
fn auto_commit_passthrough_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[kafka.librdkafka]\n\"enable.auto.commit\" = \"true\"\n",
    )
    .unwrap();
    let msg = Config::from_layers(Some(&path), env(&[]))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("enable.auto.commit"), "{msg}");
}

#[test]
fn shutdown_deadline_must_fit_session_timeout() {
    let msg = Config::from_layers(
        None,
        env(&[("ORDERLY_PROCESSING__SHUTDOWN_TIMEOUT_MS", "20000")]),
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("processing.shutdown_timeout_ms"), "{msg}");
}

#[test]
fn bad_values_are_named() {
    for (var, val, key) in [
        (
            "ORDERLY_STORE__INBOX_RETENTION",
            "7 weeks",
            "store.inbox_retention",
        ),
        (
            "ORDERLY_PROCESSING__BATCH_MAX_RECORDS",
            "0",
            "processing.batch_max_records",
        ),
        (
            "ORDERLY_KAFKA__AUTO_OFFSET_RESET",
            "middle",
            "kafka.auto_offset_reset",
        ),
    ] {
        let msg = Config::from_layers(None, env(&[(var, val)]))
            .unwrap_err()
            .to_string();
        assert!(msg.contains(key), "{var}={val}: {msg}");
    }
    let msg = Config::from_layers(
        None,
        env(&[("ORDERLY_PROCESSING__BATCH_MAX_RECORDS", "many")]),
    )
    .unwrap_err()
    .to_string();
    assert!(msg.contains("batch_max_records"), "{msg}");
}

#[test]
fn write_out_turns_are_unlimited_by_default_and_bounded() {
    let mut config = Config::defaults().unwrap();
    assert_eq!(config.processing.concurrent_write_outs, 0);
    assert_eq!(config.processing.write_out_turns(), None);
    config.processing.concurrent_write_outs = 1;
    assert_eq!(config.processing.write_out_turns(), Some(1));
    config.processing.concurrent_write_outs = 65;
    let err = config.validate().unwrap_err().to_string();
    assert!(err.contains("processing.concurrent_write_outs"), "{err}");
}

#[test]
fn numeric_group_id_from_env_stays_a_string() {
    let c = Config::from_layers(
        None,
        env(&[
            ("ORDERLY_KAFKA__GROUP_ID", "42"),
            ("ORDERLY_STORE__PATH", "7"),
        ]),
    )
    .unwrap();
    assert_eq!(c.kafka.group_id, "42");
    assert_eq!(c.store.path, PathBuf::from("7"));
}

#[test]
fn integer_from_env_must_parse_and_names_key_and_variable() {
    let err = Config::from_layers(None, env(&[("ORDERLY_KAFKA__SESSION_TIMEOUT_MS", "10s")]))
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("kafka.session_timeout_ms")
            && msg.contains("ORDERLY_KAFKA__SESSION_TIMEOUT_MS"),
        "{msg}"
    );
    assert!(msg.contains("not an integer"), "{msg}");
    let c =
        Config::from_layers(None, env(&[("ORDERLY_KAFKA__SESSION_TIMEOUT_MS", "12000")])).unwrap();
    assert_eq!(c.kafka.session_timeout_ms, 12000);
}

#[test]
fn librdkafka_settings_from_env() {
    let c = Config::from_layers(
        None,
        env(&[
            ("ORDERLY_KAFKA__LIBRDKAFKA__SASL_PASSWORD", "s3cret"),
            ("ORDERLY_KAFKA__LIBRDKAFKA__SECURITY_PROTOCOL", "SASL_SSL"),
            ("ORDERLY_KAFKA__LIBRDKAFKA__FETCH_MIN_BYTES", "1024"),
        ]),
    )
    .unwrap();
    let pass: BTreeMap<&str, String> = c.librdkafka_passthrough().collect();
    assert_eq!(
        pass.get("sasl.password").map(String::as_str),
        Some("s3cret")
    );
    assert_eq!(
        pass.get("security.protocol").map(String::as_str),
        Some("SASL_SSL")
    );
    assert_eq!(
        pass.get("fetch.min.bytes").map(String::as_str),
        Some("1024")
    );
}

#[test]
fn forced_key_from_env_is_refused() {
    let msg = Config::from_layers(
        None,
        env(&[("ORDERLY_KAFKA__LIBRDKAFKA__ENABLE_AUTO_COMMIT", "true")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("enable.auto.commit") && msg.contains("cannot be passed through"),
        "{msg}"
    );
}

#[test]
fn every_key_the_client_builders_force_is_refused() {
    // acks and enable.partition.eof were forced by the builders but once
    // accepted here, shown by `config show`, and silently overridden.
    for key in [
        "acks",
        "enable.partition.eof",
        "group.protocol",
        "partition.assignment.strategy",
    ] {
        let var = format!(
            "ORDERLY_KAFKA__LIBRDKAFKA__{}",
            key.replace('.', "_").to_uppercase()
        );
        let msg = Config::from_layers(None, env(&[(&var, "1")]))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains(key) && msg.contains("cannot be passed through"),
            "{key}: {msg}"
        );
    }
}

#[test]
fn exactly_once_needs_the_changelog() {
    assert_eq!(
        Config::defaults().unwrap().processing.guarantee,
        Guarantee::AtLeastOnce
    );
    let c = Config::from_layers(
        None,
        env(&[("ORDERLY_PROCESSING__GUARANTEE", "exactly_once")]),
    )
    .unwrap();
    assert_eq!(c.processing.guarantee, Guarantee::ExactlyOnce);
    let msg = Config::from_layers(
        None,
        env(&[
            ("ORDERLY_PROCESSING__GUARANTEE", "exactly_once"),
            ("ORDERLY_KAFKA__CHANGELOG_TOPIC", ""),
        ]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("processing.guarantee") && msg.contains("kafka.changelog_topic"),
        "{msg}"
    );
    let msg = Config::from_layers(
        None,
        env(&[("ORDERLY_PROCESSING__GUARANTEE", "exactly_twice")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        msg.contains("at_least_once") && msg.contains("exactly_once"),
        "{msg}"
    );
}

#[test]
fn group_protocol_is_classic_or_consumer() {
    assert_eq!(
        Config::defaults().unwrap().kafka.group_protocol,
        GroupProtocol::Classic
    );
    let c =
        Config::from_layers(None, env(&[("ORDERLY_KAFKA__GROUP_PROTOCOL", "consumer")])).unwrap();
    assert_eq!(c.kafka.group_protocol, GroupProtocol::Consumer);
    let msg = Config::from_layers(None, env(&[("ORDERLY_KAFKA__GROUP_PROTOCOL", "kip848")]))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("kafka.group_protocol") && msg.contains("classic") && msg.contains("consumer"),
        "{msg}"
    );
}

#[test]
fn env_names_outside_the_schema_are_errors_naming_the_variable() {
    for (var, want) in [
        ("ORDERLY_NOPE__X", "unknown section `nope`"),
        ("ORDERLY_KAFKA__LIBRDKAFKA", "name the librdkafka setting"),
        ("ORDERLY_KAFKA__GROUP_ID__X", "no keys below it"),
        ("ORDERLY_KAFKA__", "empty name part"),
    ] {
        let msg = Config::from_layers(None, env(&[(var, "v")]))
            .unwrap_err()
            .to_string();
        assert!(msg.contains(var) && msg.contains(want), "{var}: {msg}");
    }
    // Variables without `__` are not settings.
    assert!(Config::from_layers(None, env(&[("ORDERLY_E2E_BOOTSTRAP", "x")])).is_ok());
}

#[test]
fn missing_file_states_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let err = Config::from_layers(Some(&dir.path().join("absent.toml")), env(&[])).unwrap_err();
    let text = format!("{:#}", anyhow::Error::new(err).context("configuration"));
    assert_eq!(text.matches("os error 2").count(), 1, "{text}");
    assert!(text.contains("absent.toml"), "{text}");
}

#[test]
fn redacted_toml_hides_secrets_and_loads_again() {
    let c = Config::from_layers(
        None,
        env(&[
            ("ORDERLY_KAFKA__LIBRDKAFKA__SASL_PASSWORD", "hunter2"),
            ("ORDERLY_KAFKA__LIBRDKAFKA__SASL_JAAS_CONFIG", "jaas-secret"),
            ("ORDERLY_KAFKA__LIBRDKAFKA__SSL_KEY_PEM", "pem-secret"),
            ("ORDERLY_KAFKA__LIBRDKAFKA__SASL_USERNAME", "alice"),
            ("ORDERLY_REGISTRY__URL", "https://registry:8081/base"),
            ("ORDERLY_REGISTRY__USERNAME", "bob"),
            ("ORDERLY_REGISTRY__PASSWORD", "pw-secret"),
        ]),
    )
    .unwrap();
    let text = c.redacted().to_toml().unwrap();
    for secret in ["hunter2", "jaas-secret", "pem-secret", "pw-secret"] {
        assert!(!text.contains(secret), "{secret} shown:\n{text}");
    }
    assert!(text.contains("alice") && text.contains("\"bob\""), "{text}");
    assert_eq!(text.matches(REDACTED).count(), 4, "{text}");
    // Nor does the Debug form.
    let debug = format!("{c:?}");
    assert!(!debug.contains("pw-secret"), "{debug}");
    // The token, like the password.
    let c = Config::from_layers(
        None,
        env(&[("ORDERLY_REGISTRY__BEARER_TOKEN", "token-secret")]),
    )
    .unwrap();
    let text = c.redacted().to_toml().unwrap();
    assert!(
        !text.contains("token-secret") && text.contains(REDACTED),
        "{text}"
    );
    assert!(!format!("{c:?}").contains("token-secret"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shown.toml");
    std::fs::write(&path, &text).unwrap();
    let again = Config::from_layers(Some(&path), env(&[])).unwrap();
    assert_eq!(again.kafka.group_id, c.kafka.group_id);
    assert_eq!(
        again.processing.batch_max_records,
        c.processing.batch_max_records
    );
}

#[test]
fn registry_credentials_are_checked_and_say_what_to_do() {
    let fails = |vars: &[(&str, &str)], key: &str, want: &str| {
        let msg = Config::from_layers(None, env(vars))
            .unwrap_err()
            .to_string();
        assert!(msg.contains(key) && msg.contains(want), "{vars:?}: {msg}");
        msg
    };
    fails(
        &[("ORDERLY_REGISTRY__USERNAME", "bob")],
        "registry.password",
        "ORDERLY_REGISTRY__PASSWORD",
    );
    fails(
        &[("ORDERLY_REGISTRY__PASSWORD", "pw-secret")],
        "registry.username",
        "needs both",
    );
    fails(
        &[
            ("ORDERLY_REGISTRY__USERNAME", "bob"),
            ("ORDERLY_REGISTRY__PASSWORD", "pw-secret"),
            ("ORDERLY_REGISTRY__BEARER_TOKEN", "t"),
        ],
        "registry.bearer_token",
        "one of them",
    );
    fails(
        &[("ORDERLY_REGISTRY__CA_LOCATION", "/etc/ca.pem")],
        "registry.ca_location",
        "https://",
    );
    for url in [
        "https://bob:pw-secret@registry:8081",
        "https://bob@registry:8081",
        "ftp://bob:pw-secret@registry:8081",
    ] {
        let msg = Config::from_layers(None, env(&[("ORDERLY_REGISTRY__URL", url)]))
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("registry.url") && !msg.contains("pw-secret"),
            "{url}: {msg}"
        );
    }
    let c = Config::from_layers(
        None,
        env(&[
            ("ORDERLY_REGISTRY__URL", "https://registry:8081/a@b"),
            ("ORDERLY_REGISTRY__USERNAME", "bob"),
            ("ORDERLY_REGISTRY__PASSWORD", "pw-secret"),
            ("ORDERLY_REGISTRY__CA_LOCATION", "/etc/ca.pem"),
        ]),
    )
    .unwrap();
    assert_eq!(c.registry.password.expose(), "pw-secret");
    assert_eq!(c.registry.ca_location(), Some(Path::new("/etc/ca.pem")));
}

#[test]
fn durations_parse() {
    assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
    assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7200));
    assert!(parse_duration("5").is_err());
}
