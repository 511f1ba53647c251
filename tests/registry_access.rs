//! A schema registry that requires credentials and serves HTTPS (issue 28):
//! the registry double asks for basic authentication and presents a
//! certificate of a CA made for the test. Through the real binary, against
//! librdkafka's mock cluster: with the right user, password and CA,
//! `produce`, `config check` and `run` work end to end; a wrong password is
//! an authentication error naming the URL and the user, with its exit code
//! and one request, not a retry storm; a bearer token works, and a user
//! with read access only is named where orderly registers a schema (403);
//! without the CA (or with another) the
//! TLS verification failure names the setting; credentials revoked while
//! `run` works are waited out and logged once; `config show` redacts the
//! password and the token; and no output, log, `/metrics` or `/api/status`
//! carries the password.

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use support::mock::{cluster, Cluster};
use support::registry_double::{Access, RegistryDouble, TestCa};
use support::{committed, signal, unique, wait_exit, wait_until, Instance, Setup};

/// The exit codes `--help` documents.
const EXIT_CHECK_FAILED: i32 = 4;
const EXIT_CONFIG: i32 = 5;
const EXIT_ACCESS_REFUSED: i32 = 10;

const USER: &str = "orderly-app";
const PASSWORD: &str = "registry-pw-8c1f";
const WRONG_PASSWORD: &str = "wrong-pw-77d2";
const TOKEN: &str = "token-secret-4b9e";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn code(out: &Output) -> i32 {
    out.status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {out:?}"))
}

/// `orderly <args>` of `instance` with no `ORDERLY_*` variable inherited
/// from the caller and `env` set.
fn orderly(instance: &Instance, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd: Command = instance.command(args);
    cmd.stdin(Stdio::null());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ORDERLY_") {
            cmd.env_remove(name);
        }
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("run orderly")
}

fn instance(c: &Cluster, registry_url: &str) -> Instance {
    instance_of_group(c, registry_url, &unique("group"))
}

fn instance_of_group(c: &Cluster, registry_url: &str, group: &str) -> Instance {
    Instance::new(&Setup {
        bootstrap: &c.bootstrap,
        registry_url,
        group,
        topic: &c.topic,
        dlq_topic: &c.dlq,
        session_timeout_ms: 6000,
        kafka_extra: "",
        extra: "",
    })
}

/// The settings of a client that has the credentials and the CA.
fn credentials<'a>(ca: &'a str, password: &'a str) -> Vec<(&'static str, &'a str)> {
    vec![
        ("ORDERLY_REGISTRY__USERNAME", USER),
        ("ORDERLY_REGISTRY__PASSWORD", password),
        ("ORDERLY_REGISTRY__CA_LOCATION", ca),
    ]
}

/// The line of `config check`'s output for `name`.
fn check_line(stdout: &str, name: &str) -> String {
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
}

fn secured_double() -> (RegistryDouble, String) {
    let ca = TestCa::generate();
    let ca_pem = ca.ca_pem.display().to_string();
    let double = RegistryDouble::start_with(Access {
        basic_auth: Some((USER.into(), PASSWORD.into())),
        tls: Some(ca),
        ..Default::default()
    });
    assert!(double.url.starts_with("https://"), "{}", double.url);
    (double, ca_pem)
}

#[test]
fn produce_check_and_run_work_with_the_registrys_credentials_and_ca() {
    let (double, ca) = secured_double();
    let c = cluster(2, true);
    let group = unique("group");
    let instance = instance_of_group(&c, &double.url, &group);
    let env = credentials(&ca, PASSWORD);
    let mut outputs = Vec::new();

    let out = orderly(&instance, &["produce", "--orders", "200"], &env);
    assert!(out.status.success(), "produce: {}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("produce JSON");
    let applied = report["expected"]["applied"].as_u64().expect("applied");
    outputs.push(text(&out));

    let out = orderly(&instance, &["config", "check"], &env);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(code(&out), 0, "config check: {}", text(&out));
    assert!(
        check_line(&stdout, "registry").starts_with("ok")
            && check_line(&stdout, "registry").contains(&format!("{}-value registered", c.topic)),
        "{stdout}"
    );
    assert!(check_line(&stdout, "schemas").starts_with("ok"), "{stdout}");
    outputs.push(text(&out));

    // run: every schema comes from the secured registry.
    let ends: BTreeMap<i32, i64> = report["end_offsets"]
        .as_object()
        .expect("end_offsets")
        .iter()
        .map(|(p, o)| (p.parse().expect("partition"), o.as_i64().expect("offset")))
        .collect();
    let before = instance.connected_count();
    let mut child = instance.spawn_run_env(None, "info,librdkafka=warn,rdkafka=warn", &env);
    assert!(
        instance.wait_ready(before),
        "never connected\n{}",
        instance.log()
    );
    let caught_up = wait_until(Duration::from_secs(90), || {
        committed(&c.bootstrap, &group, &c.topic, 2) == ends
    });
    // The metrics and the status page's data, while it runs.
    let address = instance.http_address().expect("http address");
    for path in ["/metrics", "/api/status"] {
        let body = http_get(&address, path);
        assert!(body.contains("200 OK"), "{path}: {body}");
        outputs.push(body);
    }
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
    assert_eq!(
        instance.stats()["totals"]["applied"].as_u64(),
        Some(applied)
    );
    assert!(double.requests("by_id") > 0, "run looked schemas up");
    assert_eq!(double.requests("unauthorized"), 0);
    outputs.push(instance.log());

    for output in outputs {
        assert!(!output.contains(PASSWORD), "the password shown:\n{output}");
    }
}

/// `GET path` of the endpoint at `address`, the whole answer as text.
fn http_get(address: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .expect("request");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("answer");
    answer
}

#[test]
fn a_wrong_password_is_an_authentication_error_without_a_retry_storm() {
    let (double, ca) = secured_double();
    let c = cluster(1, true);
    let instance = instance(&c, &double.url);
    let wrong = credentials(&ca, WRONG_PASSWORD);
    let mut outputs = Vec::new();
    let names_the_refusal = |output: &str| {
        output.contains(&double.url)
            && output.contains(&format!("`{USER}`"))
            && output.contains("401")
            && output.contains("registry.password")
    };

    let out = orderly(&instance, &["produce", "--orders", "10"], &wrong);
    assert_eq!(code(&out), EXIT_ACCESS_REFUSED, "produce: {}", text(&out));
    assert!(names_the_refusal(&text(&out)), "{}", text(&out));
    assert_eq!(
        double.requests("unauthorized"),
        1,
        "one request, no retries"
    );
    outputs.push(text(&out));

    // run refuses at start-up, before consuming: one request, exit 10.
    let out = orderly(&instance, &["run"], &wrong);
    assert_eq!(code(&out), EXIT_ACCESS_REFUSED, "run: {}", text(&out));
    assert!(names_the_refusal(&text(&out)), "{}", text(&out));
    assert_eq!(
        double.requests("unauthorized"),
        2,
        "one request, no retries"
    );
    outputs.push(text(&out));

    let out = orderly(&instance, &["config", "check"], &wrong);
    assert_eq!(
        code(&out),
        EXIT_CHECK_FAILED,
        "config check: {}",
        text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = check_line(&stdout, "registry");
    assert!(
        line.starts_with("FAIL") && names_the_refusal(&line),
        "{stdout}"
    );
    outputs.push(text(&out));

    // No credentials at all: the registry wants some.
    let out = orderly(
        &instance,
        &["run"],
        &[("ORDERLY_REGISTRY__CA_LOCATION", ca.as_str())],
    );
    assert_eq!(code(&out), EXIT_ACCESS_REFUSED, "run: {}", text(&out));
    assert!(
        text(&out).contains("requires credentials") && text(&out).contains("registry.username"),
        "{}",
        text(&out)
    );

    for output in outputs {
        assert!(
            !output.contains(WRONG_PASSWORD) && !output.contains(PASSWORD),
            "a password shown:\n{output}"
        );
    }
}

#[test]
fn a_registry_certificate_that_does_not_verify_names_the_ca_setting() {
    let (double, _ca) = secured_double();
    let other_ca = TestCa::generate();
    let other = other_ca.ca_pem.display().to_string();
    let c = cluster(1, true);
    let instance = instance(&c, &double.url);
    let user = [
        ("ORDERLY_REGISTRY__USERNAME", USER),
        ("ORDERLY_REGISTRY__PASSWORD", PASSWORD),
    ];

    // The system's CAs do not know the test CA.
    let out = orderly(&instance, &["produce", "--orders", "10"], &user);
    assert_eq!(code(&out), EXIT_ACCESS_REFUSED, "produce: {}", text(&out));
    assert!(
        text(&out).contains("TLS verification")
            && text(&out).contains(&double.url)
            && text(&out).contains("set registry.ca_location"),
        "{}",
        text(&out)
    );
    let out = orderly(&instance, &["config", "check"], &user);
    assert_eq!(
        code(&out),
        EXIT_CHECK_FAILED,
        "config check: {}",
        text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = check_line(&stdout, "registry");
    assert!(
        line.starts_with("FAIL") && line.contains("TLS verification"),
        "{stdout}"
    );

    // Another CA: the message names the file that does not verify it.
    let out = orderly(&instance, &["run"], &credentials(&other, PASSWORD));
    assert_eq!(code(&out), EXIT_ACCESS_REFUSED, "run: {}", text(&out));
    assert!(
        text(&out).contains("TLS verification")
            && text(&out).contains(&format!("registry.ca_location ({other})")),
        "{}",
        text(&out)
    );
    assert_eq!(double.requests("unauthorized"), 0, "no request got through");

    // A CA file that is not there: a configuration error naming it.
    let absent = instance.dir.path().join("absent-ca.pem");
    let absent = absent.display().to_string();
    let out = orderly(&instance, &["run"], &credentials(&absent, PASSWORD));
    assert_eq!(code(&out), EXIT_CONFIG, "run: {}", text(&out));
    assert!(
        text(&out).contains("registry.ca_location") && text(&out).contains(&absent),
        "{}",
        text(&out)
    );
    let out = orderly(
        &instance,
        &["config", "check"],
        &credentials(&absent, PASSWORD),
    );
    assert_eq!(
        code(&out),
        EXIT_CHECK_FAILED,
        "config check: {}",
        text(&out)
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = check_line(&stdout, "registry");
    assert!(
        line.starts_with("FAIL") && line.contains("registry.ca_location") && line.contains(&absent),
        "{stdout}"
    );
}

#[test]
fn config_show_redacts_the_registry_password_and_token_and_http_credentials_warn() {
    let double = RegistryDouble::start_with(Access {
        basic_auth: Some((USER.into(), PASSWORD.into())),
        ..Default::default()
    });
    let c = cluster(1, true);
    let instance = instance(&c, &double.url);
    let basic = [
        ("ORDERLY_REGISTRY__USERNAME", USER),
        ("ORDERLY_REGISTRY__PASSWORD", PASSWORD),
    ];
    let out = orderly(&instance, &["config", "show"], &basic);
    assert!(out.status.success(), "{}", text(&out));
    let shown = text(&out);
    assert!(
        !shown.contains(PASSWORD)
            && shown.contains(&format!("username = \"{USER}\""))
            && shown.contains("password = \"<redacted>\""),
        "{shown}"
    );
    let out = orderly(
        &instance,
        &["config", "show"],
        &[("ORDERLY_REGISTRY__BEARER_TOKEN", TOKEN)],
    );
    let shown = text(&out);
    assert!(
        out.status.success()
            && !shown.contains(TOKEN)
            && shown.contains("bearer_token = \"<redacted>\""),
        "{shown}"
    );

    // Over http://, the credentials work and start-up warns they travel in
    // clear text.
    let out = orderly(&instance, &["produce", "--orders", "10"], &basic);
    assert!(out.status.success(), "produce: {}", text(&out));
    assert!(text(&out).contains("clear text"), "{}", text(&out));
    assert!(!text(&out).contains(PASSWORD), "{}", text(&out));
    let out = orderly(&instance, &["config", "check"], &basic);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        check_line(&stdout, "registry").starts_with("ok")
            && check_line(&stdout, "registry").contains("clear text"),
        "{stdout}"
    );
    assert!(!text(&out).contains(PASSWORD), "{}", text(&out));
}

/// Credentials revoked while `run` works (a rotated or expired password):
/// records whose writer schema is not cached wait, as for an outage, and
/// nothing is dead-lettered; the refusal is logged once at error level (the
/// partition's retry loop still warns at each retry); the requests follow
/// the backoff; once the password is right again, every record is applied.
#[test]
fn credentials_revoked_while_running_wait_logged_once_then_resume() {
    let (double, ca) = secured_double();
    let c = cluster(1, true);
    let group = unique("group");
    let instance = instance_of_group(&c, &double.url, &group);
    let env = credentials(&ca, PASSWORD);
    let before = instance.connected_count();
    let mut child = instance.spawn_run_env(None, "info,librdkafka=warn,rdkafka=warn", &env);
    assert!(
        instance.wait_ready(before),
        "never connected\n{}",
        instance.log()
    );

    // The registry now wants another password; the producer has it.
    const ROTATED: &str = "rotated-pw-5e0a";
    double.set_password(ROTATED);
    let out = orderly(
        &instance,
        &["produce", "--orders", "50", "--poison-rate", "0"],
        &credentials(&ca, ROTATED),
    );
    assert!(out.status.success(), "produce: {}", text(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("produce JSON");
    let end = report["end_offsets"]["0"].as_i64().expect("end offset");
    let applied = report["expected"]["applied"].as_u64().expect("applied");

    let refused = "schema registry access failed";
    assert!(
        wait_until(Duration::from_secs(30), || instance.log().contains(refused)),
        "the refusal is logged\n{}",
        instance.log()
    );
    std::thread::sleep(Duration::from_secs(6));
    let log = instance.log();
    assert_eq!(log.matches(refused).count(), 1, "logged once\n{log}");
    assert!(
        log.contains(&format!("`{USER}`")) && !log.contains(PASSWORD) && !log.contains(ROTATED),
        "{log}"
    );
    let refusals = double.requests("unauthorized");
    assert!(
        (1..=30).contains(&refusals),
        "retries follow the backoff, not a storm: {refusals} requests"
    );
    assert_ne!(
        committed(&c.bootstrap, &group, &c.topic, 1).get(&0),
        Some(&end),
        "nothing moves past the waiting records"
    );

    double.set_password(PASSWORD);
    let caught_up = wait_until(Duration::from_secs(60), || {
        committed(&c.bootstrap, &group, &c.topic, 1).get(&0) == Some(&end)
    });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    assert!(
        caught_up,
        "resumes once the password is right\n{}",
        instance.log()
    );
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let totals = &instance.stats()["totals"];
    assert_eq!(totals["applied"].as_u64(), Some(applied), "{totals}");
    assert_eq!(totals["dead_lettered"].as_u64(), Some(0), "{totals}");
}

/// A bearer token instead of basic authentication; a user with read access
/// only is refused (403) where orderly writes a schema, naming the user.
#[test]
fn a_bearer_token_works_and_a_read_only_user_is_named_where_it_writes() {
    const READER: &str = "reader";
    let ca = TestCa::generate();
    let ca_pem = ca.ca_pem.display().to_string();
    let double = RegistryDouble::start_with(Access {
        basic_auth: Some((USER.into(), PASSWORD.into())),
        read_only_user: Some(READER.into()),
        bearer_token: Some(TOKEN.into()),
        tls: Some(ca),
    });
    let c = cluster(1, true);
    let instance = instance(&c, &double.url);
    let token = |token: &'static str| {
        vec![
            ("ORDERLY_REGISTRY__BEARER_TOKEN", token),
            ("ORDERLY_REGISTRY__CA_LOCATION", ca_pem.as_str()),
        ]
    };
    let mut outputs = Vec::new();

    let out = orderly(&instance, &["produce", "--orders", "10"], &token(TOKEN));
    assert!(out.status.success(), "produce: {}", text(&out));
    outputs.push(text(&out));
    let out = orderly(
        &instance,
        &["produce", "--orders", "10"],
        &token("not-the-token"),
    );
    assert_eq!(code(&out), EXIT_ACCESS_REFUSED, "produce: {}", text(&out));
    assert!(
        text(&out).contains("refused the bearer token")
            && text(&out).contains("registry.bearer_token"),
        "{}",
        text(&out)
    );
    assert!(!text(&out).contains("not-the-token"), "{}", text(&out));
    outputs.push(text(&out));

    // The reader may read (config check passes) but not register.
    let reader = [
        ("ORDERLY_REGISTRY__USERNAME", READER),
        ("ORDERLY_REGISTRY__PASSWORD", PASSWORD),
        ("ORDERLY_REGISTRY__CA_LOCATION", ca_pem.as_str()),
    ];
    let out = orderly(&instance, &["config", "check"], &reader);
    assert_eq!(code(&out), 0, "config check: {}", text(&out));
    let out = orderly(&instance, &["produce", "--orders", "10"], &reader);
    assert_eq!(code(&out), EXIT_ACCESS_REFUSED, "produce: {}", text(&out));
    assert!(
        text(&out).contains(&format!("denied user `{READER}`")) && text(&out).contains("403"),
        "{}",
        text(&out)
    );
    outputs.push(text(&out));
    assert_eq!(double.requests("forbidden"), 1, "one request, no retries");
    for output in outputs {
        assert!(
            !output.contains(TOKEN) && !output.contains(PASSWORD),
            "a secret shown:\n{output}"
        );
    }
}
