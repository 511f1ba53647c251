//! The tickets entity with nothing of orderly's but the `orderly`
//! dependency: on librdkafka's mock cluster in process through the
//! embedding API and as this crate's own binary (`tickets run`, then
//! `tickets state`), and as the binary on Apache Kafka with a real schema
//! registry (ignored unless asked for: `.ci/run` runs it under
//! `kafka/broker run -- registry/apicurio run`). Each ticket's events
//! arrive with redeliveries, a stale copy and a poison record; the counters
//! and every ticket's state are checked exactly.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use apache_avro::{types::Value, Schema};
use orderly::rdkafka::consumer::{BaseConsumer, Consumer};
use orderly::rdkafka::mocking::MockCluster;
use orderly::rdkafka::producer::{FutureProducer, FutureRecord};
use orderly::rdkafka::{ClientConfig, Offset, TopicPartitionList};
use orderly::{Config, Processor, Registry, Store};
use tickets::{Tickets, SCHEMA};

const PARTITIONS: i32 = 2;
const TICKETS: usize = 40;

/// The topics a run needs, on a fresh mock cluster.
struct Topics {
    cluster: MockCluster<'static, orderly::rdkafka::producer::DefaultProducerContext>,
    bootstrap: String,
}

fn topics() -> Topics {
    let cluster = MockCluster::new(1).expect("mock cluster");
    for (topic, partitions) in [("tickets", PARTITIONS), ("tickets.dlq", 1)] {
        cluster.create_topic(topic, partitions, 1).expect("topic");
    }
    // The mock cluster has no CreateTopics: the changelog and output too.
    for topic in ["tickets-changelog", "tickets.status"] {
        cluster.create_topic(topic, PARTITIONS, 1).expect("topic");
    }
    let bootstrap = cluster.bootstrap_servers();
    Topics { cluster, bootstrap }
}

/// What the planned records should end as.
#[derive(Debug, Default, PartialEq)]
struct Expected {
    records: i64,
    applied: u64,
    duplicates: u64,
    stale: u64,
    dead_lettered: u64,
}

fn wire(schema_id: u32, body: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0];
    bytes.extend_from_slice(&schema_id.to_be_bytes());
    bytes.extend_from_slice(body);
    bytes
}

fn event(
    schema: &Schema,
    id: u32,
    event_id: &str,
    ticket: &str,
    seq: i64,
    status: &str,
) -> Vec<u8> {
    let assignee = if status == "OPEN" {
        Value::Union(0, Box::new(Value::Null))
    } else {
        Value::Union(1, Box::new(Value::String("ana".into())))
    };
    let record = Value::Record(vec![
        ("event_id".into(), Value::String(event_id.into())),
        ("ticket_id".into(), Value::String(ticket.into())),
        ("seq".into(), Value::Long(seq)),
        ("at".into(), Value::Long(1_765_000_000_000 + seq)),
        ("status".into(), Value::String(status.into())),
        ("assignee".into(), assignee),
    ]);
    #[allow(deprecated)]
    let body = apache_avro::to_avro_datum(schema, record).expect("encode");
    wire(id, &body)
}

/// Every ticket OPEN, ASSIGNED, CLOSED, with each ASSIGNED redelivered
/// (duplicate), every fifth ticket's OPEN sent again under a new event id
/// after its CLOSED (stale), and one poison record.
async fn produce(bootstrap: &str, topic: &str, schema_id: u32) -> Expected {
    let schema = Schema::parse_str(SCHEMA).expect("schema");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    let mut planned: Vec<(String, Vec<u8>)> = Vec::new();
    let mut expected = Expected::default();
    for t in 0..TICKETS {
        let ticket = format!("ticket-{t:03}");
        for (seq, status) in [(1, "OPEN"), (2, "ASSIGNED"), (3, "CLOSED")] {
            planned.push((
                ticket.clone(),
                event(
                    &schema,
                    schema_id,
                    &format!("{ticket}-{seq}"),
                    &ticket,
                    seq,
                    status,
                ),
            ));
            expected.applied += 1;
            if seq == 2 {
                planned.push((
                    ticket.clone(),
                    event(
                        &schema,
                        schema_id,
                        &format!("{ticket}-2"),
                        &ticket,
                        2,
                        status,
                    ),
                ));
                expected.duplicates += 1;
            }
        }
        if t % 5 == 0 {
            planned.push((
                ticket.clone(),
                event(
                    &schema,
                    schema_id,
                    &format!("{ticket}-late"),
                    &ticket,
                    1,
                    "OPEN",
                ),
            ));
            expected.stale += 1;
        }
    }
    planned.push(("ticket-poison".into(), wire(schema_id, b"\x02not avro")));
    expected.dead_lettered += 1;
    for (key, payload) in &planned {
        producer
            .send(
                FutureRecord::to(topic).key(key).payload(payload),
                Duration::from_secs(10),
            )
            .await
            .expect("delivered");
    }
    expected.records = planned.len() as i64;
    expected
}

fn check_tickets(store: &Store) {
    for t in 0..TICKETS {
        let key = format!("ticket-{t:03}");
        let state = store
            .find::<Tickets>(&key)
            .expect("read")
            .expect("a state for every ticket");
        assert_eq!(
            (state.version, state.data.status.as_str()),
            (3, "CLOSED"),
            "{key}"
        );
        assert_eq!(state.data.touches, 3, "{key}: each event counted once");
        assert_eq!(state.data.assignee.as_deref(), Some("ana"), "{key}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_entity_runs_in_process_on_orderlys_store() {
    let topics = topics();
    let registry = Registry::memory();
    let schema_id = registry
        .register("tickets-value", SCHEMA)
        .await
        .expect("register");
    let expected = produce(&topics.bootstrap, "tickets", schema_id).await;

    let dir = tempfile::tempdir().expect("temp dir");
    let mut config = Config::defaults().expect("defaults");
    config.kafka.bootstrap_servers = topics.bootstrap.clone();
    config.kafka.group_id = "tickets".into();
    config.kafka.input_topic = "tickets".into();
    config.kafka.dlq_topic = "tickets.dlq".into();
    config.kafka.changelog_topic = "tickets-changelog".into();
    config.kafka.output_topic = "tickets.status".into();
    config.store.path = dir.path().join("store");
    let store = Store::open(&config.store.path, config.store.cache_capacity_mb).expect("store");

    let watched = store.clone();
    let caught_up = async move {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let done: i64 = watched
                .checkpoints()
                .expect("checkpoints")
                .iter()
                .map(|(_, _, c)| c.next_offset)
                .sum();
            if done >= expected.records || Instant::now() > deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let tickets = Tickets::new().expect("entity");
    let report = Processor::for_entity(tickets, config, store.clone(), registry)
        .run(caught_up)
        .await
        .expect("run");
    let o = report.outcomes;
    assert_eq!(
        (o.applied, o.duplicates, o.stale, o.dead_lettered),
        (
            expected.applied,
            expected.duplicates,
            expected.stale,
            expected.dead_lettered
        )
    );
    check_tickets(&store);
    drop(topics.cluster);
}

/// A schema registry that knows one schema (id 1) and accepts registrations
/// (the outbox's output schema, id 2): enough for `tickets run`.
fn registry_stub() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address");
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request = String::new();
            let (mut line, mut length) = (String::new(), 0usize);
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let (status, json) = if request.starts_with("GET /schemas/ids/1") {
                ("200 OK", serde_json::json!({ "schema": SCHEMA }))
            } else if request.starts_with("GET /schemas/ids/") {
                (
                    "404 Not Found",
                    serde_json::json!({ "error_code": 40403, "message": "schema not found" }),
                )
            } else if request.starts_with("POST /subjects/") {
                ("200 OK", serde_json::json!({ "id": 2 }))
            } else {
                (
                    "404 Not Found",
                    serde_json::json!({ "error_code": 40401, "message": "not found" }),
                )
            };
            let json = json.to_string();
            let _ = write!(
                reader.get_mut(),
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{json}",
                json.len()
            );
        }
    });
    format!("http://{address}")
}

/// Where a run of the binary reads and writes.
struct Place<'a> {
    bootstrap: &'a str,
    registry: &'a str,
    /// The group, and the topics: `<name>`, `.dlq`, `-changelog`, `.status`.
    name: &'a str,
}

fn tickets(store: &Path, at: &Place<'_>, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tickets"));
    let name = at.name;
    command
        .args(args)
        .env("ORDERLY_STORE__PATH", store)
        .env("ORDERLY_KAFKA__BOOTSTRAP_SERVERS", at.bootstrap)
        .env("ORDERLY_KAFKA__GROUP_ID", name)
        .env("ORDERLY_KAFKA__INPUT_TOPIC", name)
        .env("ORDERLY_KAFKA__DLQ_TOPIC", format!("{name}.dlq"))
        .env(
            "ORDERLY_KAFKA__CHANGELOG_TOPIC",
            format!("{name}-changelog"),
        )
        .env("ORDERLY_KAFKA__OUTPUT_TOPIC", format!("{name}.status"))
        .env("ORDERLY_REGISTRY__URL", at.registry)
        .env("ORDERLY_HTTP__ADDRESS", "127.0.0.1:0");
    command
}

fn succeeded(mut command: Command) -> String {
    let Output {
        status,
        stdout,
        stderr,
    } = command.output().expect("the tickets binary starts");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr),
    );
    assert!(
        status.success(),
        "{status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout.into_owned()
}

/// The group's committed offsets, summed over the input's partitions.
fn committed(at: &Place<'_>) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", at.bootstrap)
        .set("group.id", at.name)
        .create()
        .expect("consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        list.add_partition(at.name, p);
    }
    let Ok(found) = consumer.committed_offsets(list, Duration::from_secs(5)) else {
        return 0;
    };
    let total = found
        .elements()
        .iter()
        .map(|e| {
            if let Offset::Offset(o) = e.offset() {
                o
            } else {
                0
            }
        })
        .sum();
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_teams_binary_runs_on_the_mock_cluster_and_names_its_key() {
    let topics = topics();
    let registry = registry_stub();
    let expected = produce(&topics.bootstrap, "tickets", 1).await;
    let at = Place {
        bootstrap: &topics.bootstrap,
        registry: &registry,
        name: "tickets",
    };
    run_the_binary(&at, &expected, &[("ORDERLY_REGISTRY__SCHEMA_GUARD", "off")]);
    drop(topics.cluster);
}

/// The team's binary on Apache Kafka with a real schema registry, as
/// docs/entities.md runs it against the quick start: the topics created
/// beforehand (the changelog by `tickets run` itself), the schema
/// registered by the producer, the schema guard on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Apache Kafka and a schema registry: .ci/run runs it under kafka/broker run -- registry/apicurio run"]
async fn the_teams_binary_runs_on_apache_kafka_with_a_real_registry() {
    let need = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: run this test under kafka/broker run -- registry/apicurio run"
            )
        })
    };
    let (bootstrap, registry) = (need("ORDERLY_E2E_BOOTSTRAP"), need("ORDERLY_E2E_REGISTRY"));
    let name = format!("tickets-{}", std::process::id());
    create_topics(
        &bootstrap,
        &[
            (name.clone(), PARTITIONS),
            (format!("{name}.dlq"), 1),
            (format!("{name}.status"), PARTITIONS),
        ],
    )
    .await;
    let schema_id = Registry::http(&registry, Duration::from_secs(10))
        .expect("registry client")
        .register(&format!("{name}-value"), SCHEMA)
        .await
        .expect("register the ticket schema");
    let expected = produce(&bootstrap, &name, schema_id).await;
    let at = Place {
        bootstrap: &bootstrap,
        registry: &registry,
        name: &name,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let check = succeeded(tickets(
        &dir.path().join("store"),
        &at,
        &["config", "check"],
    ));
    assert!(
        check.contains("/state/{ticket_id}") && check.contains("`tickets run` creates it"),
        "config check speaks of tickets:\n{check}"
    );
    run_the_binary(&at, &expected, &[]);
}

async fn create_topics(bootstrap: &str, topics: &[(String, i32)]) {
    use orderly::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use orderly::rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin client");
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|(name, n)| NewTopic::new(name, *n, TopicReplication::Fixed(-1)))
        .collect();
    let created = admin.create_topics(&new, &AdminOptions::new()).await;
    for result in created.expect("create topics") {
        result.expect("topic created");
    }
}

/// `tickets --help`, then `tickets run` until the group committed every
/// record (then killed), then `tickets state` on the store it left.
fn run_the_binary(at: &Place<'_>, expected: &Expected, env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = dir.path().join("store");

    let help = succeeded(tickets(&store, at, &["state", "get", "--help"]));
    assert!(
        help.contains("<TICKET_ID>") && help.contains("tickets state dump"),
        "{help}"
    );
    assert!(
        !help.contains("order_id") && !help.contains("order's") && !help.contains("orderly state"),
        "a ticket's help speaks of orders:\n{help}"
    );

    let mut run = tickets(&store, at, &["run"])
        .envs(env.iter().copied())
        .stderr(Stdio::null())
        .spawn()
        .expect("run");
    let deadline = Instant::now() + Duration::from_secs(90);
    while committed(at) < expected.records {
        assert!(
            Instant::now() < deadline,
            "tickets run did not commit every record in 90 s"
        );
        if let Ok(Some(status)) = run.try_wait() {
            panic!("tickets run exited ({status}) before committing every record");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Killed, not stopped: what is committed is durable in the store.
    run.kill().expect("kill");
    let _ = run.wait();

    let stats = succeeded(tickets(&store, at, &["state", "stats", "--json"]));
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("stats JSON");
    let totals = &stats["totals"];
    assert_eq!(totals["tickets"], TICKETS as u64, "{stats}");
    let counted: BTreeMap<&str, u64> = ["applied", "duplicates", "stale", "dead_lettered"]
        .into_iter()
        .map(|k| (k, totals[k].as_u64().unwrap_or(u64::MAX)))
        .collect();
    assert_eq!(
        counted,
        BTreeMap::from([
            ("applied", expected.applied),
            ("duplicates", expected.duplicates),
            ("stale", expected.stale),
            ("dead_lettered", expected.dead_lettered)
        ])
    );
    let one = succeeded(tickets(
        &store,
        at,
        &["state", "get", "ticket-007", "--json"],
    ));
    let one: serde_json::Value = serde_json::from_str(&one).expect("state JSON");
    assert_eq!(
        (one["version"].as_i64(), one["touches"].as_u64()),
        (Some(3), Some(3)),
        "{one}"
    );
    let store = Store::open(&store, 64).expect("store");
    check_tickets(&store);
}
