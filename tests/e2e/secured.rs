//! A secured Apache Kafka 4.4 (`kafka/broker start --secure`): a SASL_SSL
//! listener with SCRAM-SHA-512 and a CA made for the run, KRaft's
//! StandardAuthorizer with `allow.everyone.if.no.acl.found=false`. orderly
//! connects as the user `orderly` with exactly the ACLs docs/operating.md
//! lists ("A secured cluster"), and every command a user runs works: `config
//! check`, `run` (the group consumer, the transactional changelog producer,
//! the restore readers, the outbox and dead letters) crashed at a fault point
//! and restarted, `replay`, `dlq list`, a second member under exactly_once
//! that restores every partition and processes on, `dlq replay`. No
//! output, log, metric or status page shows the password. Without the
//! group's ACL, `config check` fails naming it; without each documented ACL
//! in turn, `run` refuses naming it. A wrong password and a CA that does not
//! verify the brokers are named at once.

use std::time::Duration;

use orderly::testkit::orders::workload::WorkloadSpec;

use crate::observe::{http_get, scrape};
use crate::support::{end_offsets_total, run_ok, text, wait_until, Reaper};
use crate::world::{broker_script, stop, tail, Broker, World};
use crate::PARTITIONS;

const PASSWORD_OF_ORDERLY: &str = "orderly-secret";

/// Grants `User:orderly` what docs/operating.md lists for the world's
/// topics, group and transactional ids (at_least_once and exactly_once
/// need the same: both write the changelog in transactions).
fn grant(broker: &Broker, world: &World, changelog: &str) {
    let output = format!("{}-status", world.topic);
    let group = world.group.as_str();
    let txn_prefix = format!("{}-{}-", world.group, world.topic);
    let grants: Vec<Vec<&str>> = vec![
        vec![
            "--operation",
            "Read",
            "--operation",
            "Describe",
            "--topic",
            &world.topic,
        ],
        vec![
            "--operation",
            "Read",
            "--operation",
            "Describe",
            "--resource-pattern-type",
            "prefixed",
            "--group",
            group,
        ],
        vec![
            "--operation",
            "Read",
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--topic",
            &world.dlq,
            "--topic",
            &output,
            "--topic",
            changelog,
        ],
        vec![
            "--operation",
            "Create",
            "--operation",
            "DescribeConfigs",
            "--topic",
            changelog,
        ],
        vec![
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--resource-pattern-type",
            "prefixed",
            "--transactional-id",
            &txn_prefix,
        ],
    ];
    for grant in grants {
        acls(broker, "--add", &grant);
    }
}

fn acls(broker: &Broker, action: &str, args: &[&str]) {
    run_ok(
        std::process::Command::new(broker_script())
            .args([
                "tool",
                "acls",
                "--bootstrap-server",
                &broker.bootstrap,
                "--command-config",
                &broker.printed["KAFKA_ADMIN_CONFIG"],
            ])
            .args([action, "--force", "--allow-principal", "User:orderly"])
            .args(args),
        &format!("kafka-acls {action} {args:?}"),
    );
}

#[test]
fn every_command_works_on_a_secured_cluster_with_the_documented_acls() {
    let data = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start_secure(data.path().join("kafka"));
    let mut world = World::new(broker.bootstrap.clone());
    let settings = broker.client_settings("KAFKA_USER", "KAFKA_PASSWORD");
    assert!(
        settings.iter().any(|(_, v)| v == PASSWORD_OF_ORDERLY),
        "the script's user is the one this test greps for"
    );
    world.kafka_extra = format!(
        "[kafka.librdkafka]\n{}",
        settings
            .iter()
            .map(|(k, v)| format!("\"{k}\" = \"{v}\"\n"))
            .collect::<String>()
    );
    let changelog = format!("{}-changelog", world.topic);
    grant(&broker, &world, &changelog);
    let reaper = Reaper::default();
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 1_500,
        poison_rate: 0.004,
        seed: 281,
        ..Default::default()
    });
    let (first, second) = records.split_at(records.len() / 2);
    world.produce(first);

    // config check: every line ok, the password nowhere.
    let a = world.instance("commit_interval_ms = 200");
    let check = run_ok(
        &mut a.command(&["config", "check"]),
        "config check on the secured cluster",
    );
    let check_text = format!("{}{}", text(&check.stdout), text(&check.stderr));
    assert!(
        check_text.contains("ok   acls")
            && check_text.contains("User:orderly may perform every operation"),
        "config check reads the principal's operations\n{check_text}"
    );
    let shown = run_ok(
        &mut a.command(&["config", "show"]),
        "config show on the secured cluster",
    );
    let shown_text = format!("{}{}", text(&shown.stdout), text(&shown.stderr));
    assert!(shown_text.contains("<redacted>"), "{shown_text}");

    // run, crashed: aborted between a sled batch and its flush, restarted,
    // and caught up; metrics and the status page while it runs.
    let mut crashed = reaper.watch(a.spawn_run(Some("after_batch:4")));
    let aborted = crate::support::wait_exit(&mut crashed, Duration::from_secs(120));
    assert!(
        aborted.is_some_and(|e| !e.success()) && a.log().contains("aborting at after_batch"),
        "a aborted at its fault point\n{}",
        tail(&a.log())
    );
    let mut run_a = reaper.watch(a.spawn_run(None));
    let address = a.wait_http(1);
    let ends = crate::support::end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let caught_up = wait_until(Duration::from_secs(120), || world.committed() == ends);
    assert!(
        caught_up,
        "caught up on the secured cluster after the crash\n{}",
        tail(&a.log())
    );
    let metrics = http_get(&address, "/metrics").expect("metrics").1;
    let status = http_get(&address, "/api/status").expect("status").1;
    let page = http_get(&address, "/").expect("status page");
    assert_eq!(page.0, 200, "the status page");
    assert!(scrape(&address).contains_key("orderly_assigned_partitions"));
    stop(&mut run_a, &a);

    // replay (group stopped) and dlq list, as the same user.
    run_ok(
        &mut a.command(&["replay", "--shift-by", "0"]),
        "replay on the secured cluster",
    );
    run_ok(
        &mut a.command(&["dlq", "list"]),
        "dlq list on the secured cluster",
    );

    // A second member, under exactly_once, with an empty store: restores
    // every partition, processes the second half; exact state and output.
    world.produce(second);
    let b = world.instance("commit_interval_ms = 200\nguarantee = \"exactly_once\"");
    let mut run_b = reaper.watch(b.spawn_run(None));
    let address_b = b.wait_http(0);
    let ready = wait_until(Duration::from_secs(90), || {
        http_get(&address_b, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(ready, "b restored and is ready\n{}", tail(&b.log()));
    let ends = crate::support::end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let caught_up = wait_until(Duration::from_secs(120), || world.committed() == ends);
    assert!(
        caught_up,
        "b caught up under exactly_once\n{}",
        tail(&b.log())
    );
    stop(&mut run_b, &b);
    assert_eq!(
        b.log().matches("restore finished").count(),
        PARTITIONS as usize,
        "{}",
        tail(&b.log())
    );
    world.verify(&b, &expected);

    // dlq replay re-publishes the dead letters to the input topic (its
    // re-drive log and progress group need the table's last two rows).
    let redrive = format!("{}.redrive", world.dlq);
    for grant in [
        vec!["--operation", "Write", "--topic", world.topic.as_str()],
        vec![
            "--operation",
            "Read",
            "--operation",
            "Write",
            "--operation",
            "Describe",
            "--operation",
            "Create",
            "--topic",
            redrive.as_str(),
        ],
    ] {
        acls(&broker, "--add", &grant);
    }
    let before: i64 = ends.values().sum();
    let redriven = run_ok(
        &mut b.command(&["dlq", "replay", "--all"]),
        "dlq replay on the secured cluster",
    );
    let after = end_offsets_total(&world.bootstrap, &world.topic, PARTITIONS);
    assert_eq!(
        (after - before) as u64,
        expected.outcomes.dead_lettered,
        "every dead letter re-published once\n{}",
        text(&redriven.stdout)
    );

    // orderly produce, as the same user (Write on the input topic).
    let before = end_offsets_total(&world.bootstrap, &world.topic, PARTITIONS);
    let produced = run_ok(
        &mut b.command(&["produce", "--orders", "20", "--seed", "7"]),
        "produce on the secured cluster",
    );
    let after = end_offsets_total(&world.bootstrap, &world.topic, PARTITIONS);
    assert!(
        after >= before + 20,
        "produce wrote its records: {before} -> {after}"
    );
    let produce_text = format!("{}{}", text(&produced.stdout), text(&produced.stderr));

    // No secret anywhere a user or an operator looks.
    for (what, content) in [
        ("config check", check_text.as_str()),
        ("config show", shown_text.as_str()),
        ("/metrics", metrics.as_str()),
        ("/api/status", status.as_str()),
        ("the status page", page.1.as_str()),
        ("produce", produce_text.as_str()),
        ("a's log", a.log().as_str()),
        ("b's log", b.log().as_str()),
    ] {
        assert!(
            !content.contains(PASSWORD_OF_ORDERLY),
            "{what} shows the password"
        );
        assert!(
            !content.contains("PRIVATE KEY"),
            "{what} shows a private key"
        );
    }

    // Without the group's ACL, config check fails naming it.
    let group_grant = [
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--resource-pattern-type",
        "prefixed",
        "--group",
        world.group.as_str(),
    ];
    acls(&broker, "--remove", &group_grant);
    let check = b
        .command(&["config", "check"])
        .output()
        .expect("config check");
    let check_text = format!("{}{}", text(&check.stdout), text(&check.stderr));
    assert!(
        !check.status.success(),
        "config check fails without the group's ACL\n{check_text}"
    );
    assert!(
        check_text.contains(&world.group) && check_text.contains("Read"),
        "names the group and the operation\n{check_text}"
    );
    acls(&broker, "--add", &group_grant);

    // Each documented ACL removed in turn: run refuses before consuming
    // (exit 10) naming the operation, the resource and the principal, or,
    // for the transactional ids (which no describe call reports), stops at
    // the first partition's start naming the id. Then the ACL comes back.
    let output = format!("{}-status", world.topic);
    let txn_prefix = format!("{}-{}-", world.group, world.topic);
    let cases: Vec<(Vec<&str>, &str, &str, i32)> = vec![
        (
            vec![
                "--operation",
                "Read",
                "--operation",
                "Describe",
                "--topic",
                &world.topic,
            ],
            // Write on it (granted for dlq replay above) implies Describe.
            "Read on topic",
            world.topic.as_str(),
            10,
        ),
        (
            group_grant.to_vec(),
            "Read, Describe on group",
            world.group.as_str(),
            10,
        ),
        (
            vec![
                "--operation",
                "Read",
                "--operation",
                "Write",
                "--operation",
                "Describe",
                "--topic",
                &world.dlq,
            ],
            "Write, Describe on topic",
            world.dlq.as_str(),
            10,
        ),
        (
            vec![
                "--operation",
                "Read",
                "--operation",
                "Write",
                "--operation",
                "Describe",
                "--topic",
                &output,
            ],
            "Write, Describe, Read on topic",
            output.as_str(),
            10,
        ),
        (
            vec![
                "--operation",
                "Read",
                "--operation",
                "Write",
                "--operation",
                "Describe",
                "--topic",
                &changelog,
            ],
            // Without Describe the broker describes nothing of it.
            "Read, Write, Describe, DescribeConfigs on topic",
            changelog.as_str(),
            10,
        ),
        (
            vec![
                "--operation",
                "Create",
                "--operation",
                "DescribeConfigs",
                "--topic",
                &changelog,
            ],
            "DescribeConfigs on topic",
            changelog.as_str(),
            10,
        ),
        (
            vec![
                "--operation",
                "Write",
                "--operation",
                "Describe",
                "--resource-pattern-type",
                "prefixed",
                "--transactional-id",
                &txn_prefix,
            ],
            "Write and Describe on this transactional id",
            txn_prefix.as_str(),
            1,
        ),
    ];
    for (grant, operations, resource, code) in cases {
        acls(&broker, "--remove", &grant);
        let before = b.log().len();
        let mut run = reaper.watch(b.spawn_run(None));
        let exit = crate::support::wait_exit(&mut run, Duration::from_secs(60));
        let log = b.log()[before..].to_string();
        assert_eq!(
            exit.and_then(|e| e.code()),
            Some(code),
            "without {operations} {resource}: run exits {code}\n{log}"
        );
        assert!(
            log.contains(operations) && log.contains(resource) && log.contains("User:orderly"),
            "without {operations} {resource}: the message names it\n{log}"
        );
        assert!(
            !log.contains(PASSWORD_OF_ORDERLY),
            "the password is not shown\n{log}"
        );
        acls(&broker, "--add", &grant);
    }
}

/// Wrong credentials and a CA that does not verify the brokers: `run`
/// refuses at once (exit 10) naming what failed, without retrying, and
/// `config check` fails its broker line the same way.
#[test]
fn wrong_credentials_and_an_unverified_certificate_are_named() {
    let data = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start_secure(data.path().join("kafka"));
    let world = World::new(broker.bootstrap.clone());
    let settings = broker.client_settings("KAFKA_USER", "KAFKA_PASSWORD");
    let with = |replace: &dyn Fn(&str, &str) -> String| {
        let mut w = World::new(broker.bootstrap.clone());
        w.group = world.group.clone();
        w.kafka_extra = format!(
            "[kafka.librdkafka]\n{}",
            settings
                .iter()
                .map(|(k, v)| format!("\"{k}\" = \"{}\"\n", replace(k, v)))
                .collect::<String>()
        );
        w
    };
    let wrong_password = with(&|k, v| {
        if k == "sasl.password" {
            "not-the-password".into()
        } else {
            v.to_string()
        }
    });
    let system_ca = with(&|k, v| {
        if k == "ssl.ca.location" {
            "/etc/ssl/certs/ca-certificates.crt".into()
        } else {
            v.to_string()
        }
    });
    for (world, named, label) in [
        (
            &wrong_password,
            "refused User:orderly's credentials",
            "a wrong password",
        ),
        (
            &system_ca,
            "the TLS handshake with",
            "a CA that did not sign the brokers' certificate",
        ),
    ] {
        let member = world.instance("");
        let started = std::time::Instant::now();
        let out = member.command(&["run"]).output().expect("run");
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(10), "{label}: run exits 10\n{all}");
        assert!(all.contains(named), "{label}: named\n{all}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{label}: refused without retrying"
        );
        assert!(all.lines().count() < 40, "{label}: no retry storm\n{all}");
        assert!(!all.contains("not-the-password") && !all.contains(PASSWORD_OF_ORDERLY));
        let check = member
            .command(&["config", "check"])
            .output()
            .expect("config check");
        let check_text = format!("{}{}", text(&check.stdout), text(&check.stderr));
        assert!(
            !check.status.success() && check_text.contains(named),
            "{label}: config check names it\n{check_text}"
        );
    }
}

/// `http.bearer_token`: the status API and state queries answer 401
/// without it and 200 with it, the probes stay open, `/metrics` is closed
/// when `http.open_metrics = false`, the page's HTML is open; `config show`
/// redacts the token. An endpoint beyond loopback without a token warns at
/// start-up.
#[test]
fn the_endpoint_asks_for_its_token_where_configured() {
    let world = World::new(crate::required_env("ORDERLY_E2E_BOOTSTRAP"));
    let reaper = Reaper::default();
    let token = "tok-7f3a9c51d2e8";
    let env = [
        ("ORDERLY_HTTP__BEARER_TOKEN", token),
        ("ORDERLY_HTTP__OPEN_METRICS", "false"),
        ("ORDERLY_HTTP__ADDRESS", "0.0.0.0:0"),
    ];
    let guarded = world.instance("");
    let mut run =
        reaper.watch(guarded.spawn_run_env(None, "info,librdkafka=warn,rdkafka=warn", &env));
    let address = guarded.wait_http(0).replace("0.0.0.0", "127.0.0.1");
    let get = |path: &str, auth: Option<&str>| {
        let header = auth
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        crate::observe::http_request(
            &address,
            format!("GET {path} HTTP/1.1\r\nHost: x\r\n{header}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .expect("request")
        .0
    };
    assert_eq!(get("/healthz", None), 200, "probes stay open");
    assert_ne!(get("/readyz", None), 401, "probes stay open");
    assert_eq!(get("/", None), 200, "the page's HTML is open");
    assert_eq!(get("/api/status", None), 401);
    assert_eq!(get("/api/status", Some("wrong-token")), 401);
    assert_eq!(get("/state/order-1", None), 401);
    assert_eq!(get("/metrics", None), 401, "open_metrics = false");
    assert_eq!(get("/api/status", Some(token)), 200);
    assert_ne!(get("/state/order-1", Some(token)), 401);
    assert_eq!(get("/metrics", Some(token)), 200);
    stop(&mut run, &guarded);
    assert!(
        !guarded.log().contains("without http.bearer_token"),
        "no warning with a token\n{}",
        tail(&guarded.log())
    );
    let mut show = guarded.command(&["config", "show"]);
    show.env("ORDERLY_HTTP__BEARER_TOKEN", token);
    let shown = show.output().expect("config show");
    let shown = text(&shown.stdout);
    assert!(
        !shown.contains(token) && shown.contains("bearer_token = \"<redacted>\""),
        "{shown}"
    );

    let open = world.instance("");
    let mut run = reaper.watch(open.spawn_run_env(
        None,
        "info,librdkafka=warn,rdkafka=warn",
        &[("ORDERLY_HTTP__ADDRESS", "0.0.0.0:0")],
    ));
    open.wait_http(0);
    stop(&mut run, &open);
    assert!(
        open.log().contains("without http.bearer_token"),
        "an open endpoint beyond loopback warns\n{}",
        tail(&open.log())
    );
}
