//! What only a real Apache Kafka shows: Kafka's own tools beside orderly
//! (`kafka-consumer-groups --describe`, `--reset-offsets`), commit metadata
//! kept by the broker, `offsets_for_times` inside a topic, a changelog the
//! broker has really compacted, and a real schema registry (Apicurio
//! Registry's Confluent API) instead of the double.

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use orderly::testkit::orders::workload::WorkloadSpec;

use crate::observe::http_get;
use crate::support::{
    assert_succeeded, client_id_of, end_offsets, run_ok, text, wait_exit, wait_until, Instance,
    Reaper,
};
use crate::world::{broker_script, stop, tail, World};
use crate::{required_env, PARTITIONS};

/// `kafka/broker tool NAME ARGS...` (Kafka's own command-line tools).
pub(crate) fn kafka_tool(name: &str, args: &[&str]) -> Output {
    Command::new(broker_script())
        .arg("tool")
        .arg(name)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run kafka/broker tool")
}

/// The rows of a `kafka-consumer-groups` table, as maps from its header's
/// column names.
fn table_rows(out: &str) -> Vec<BTreeMap<String, String>> {
    let mut rows = Vec::new();
    let mut header: Option<Vec<String>> = None;
    for line in out.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let cells: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        if cells.first().is_some_and(|c| c == "GROUP") {
            header = Some(cells);
            continue;
        }
        if let Some(names) = &header {
            if cells.len() == names.len() {
                rows.push(names.iter().cloned().zip(cells).collect());
            }
        }
    }
    rows
}

/// The group's committed offsets of the input topic with their metadata.
fn committed_with_metadata(world: &World) -> BTreeMap<i32, (i64, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &world.bootstrap)
        .set("group.id", &world.group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition(&world.topic, p);
    }
    let list = consumer
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    list.elements()
        .iter()
        .map(|e| {
            (
                e.partition(),
                (
                    if let Offset::Offset(o) = e.offset() {
                        o
                    } else {
                        -1
                    },
                    e.metadata().to_string(),
                ),
            )
        })
        .collect()
}

fn wait_ready_http(instance: &Instance, before: usize) -> String {
    let address = instance.wait_http(before);
    let ready = wait_until(Duration::from_secs(90), || {
        http_get(&address, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(ready, "ready\n{}", tail(&instance.log()));
    address
}

/// Two members caught up: `kafka-consumer-groups --describe` lists every
/// partition with its owner and a lag of 0, and `--members` both members
/// by orderly's client ids. The commits carry orderly's metadata, which the
/// broker keeps. Then an operator's `--reset-offsets` with the group
/// stopped: `orderly run` refuses to start (exit 9), naming `orderly
/// replay`, rather than resume from its checkpoint and ignore the reset;
/// `orderly replay --shift-by 0` keeps the checkpoints, after which the
/// group starts and nothing is processed twice.
#[test]
fn kafka_tools_describe_the_group_and_an_outside_offset_reset_is_refused() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 3_000,
        poison_rate: 0.003,
        seed: 171,
        ..Default::default()
    });
    world.produce(&records);
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let (a, b) = (
        world.instance("commit_interval_ms = 200"),
        world.instance("commit_interval_ms = 200"),
    );
    let reaper = Reaper::default();
    let mut run_a = reaper.watch(a.spawn_run(None));
    let mut run_b = reaper.watch(b.spawn_run(None));
    let client_ids = [client_id_of(&run_a), client_id_of(&run_b)];
    let caught_up = wait_until(Duration::from_secs(120), || world.committed() == ends);
    assert!(
        caught_up,
        "caught up\n{}\n---\n{}",
        tail(&a.log()),
        tail(&b.log())
    );

    // --describe: both members own partitions once the group has settled.
    let bootstrap = world.bootstrap.as_str();
    let mut rows = Vec::new();
    let settled = wait_until(Duration::from_secs(60), || {
        let out = kafka_tool(
            "consumer-groups",
            &[
                "--bootstrap-server",
                bootstrap,
                "--describe",
                "--group",
                &world.group,
            ],
        );
        rows = table_rows(&text(&out.stdout));
        // A partition between owners (mid-rebalance) shows "-" in both
        // columns; settled means every partition has an owner and both
        // processes own some.
        let owned = |r: &BTreeMap<String, String>| r.get("CONSUMER-ID").is_some_and(|c| c != "-");
        let owners: std::collections::BTreeSet<&str> = rows
            .iter()
            .filter(|r| owned(r))
            .filter_map(|r| r.get("CLIENT-ID").map(String::as_str))
            .collect();
        rows.len() == PARTITIONS as usize && rows.iter().all(owned) && owners.len() == 2
    });
    assert!(settled, "kafka-consumer-groups --describe: {rows:?}");
    for row in &rows {
        let partition: i32 = row["PARTITION"].parse().expect("partition");
        assert_eq!(row["TOPIC"], world.topic);
        assert_eq!(
            row["CURRENT-OFFSET"],
            ends[&partition].to_string(),
            "{row:?}"
        );
        assert_eq!(
            row["LOG-END-OFFSET"],
            ends[&partition].to_string(),
            "{row:?}"
        );
        assert_eq!(row["LAG"], "0", "{row:?}");
        assert_ne!(
            row["CONSUMER-ID"], "-",
            "partition {partition} has an owner: {row:?}"
        );
        assert!(
            client_ids.contains(&row["CLIENT-ID"]),
            "owned by an orderly process: {row:?} (ids {client_ids:?})"
        );
    }
    let out = kafka_tool(
        "consumer-groups",
        &[
            "--bootstrap-server",
            bootstrap,
            "--describe",
            "--group",
            &world.group,
            "--members",
        ],
    );
    let members = table_rows(&text(&out.stdout));
    assert_eq!(members.len(), 2, "two members: {}", text(&out.stdout));
    let owned: usize = members
        .iter()
        .map(|m| m["#PARTITIONS"].parse::<usize>().expect("#PARTITIONS"))
        .sum();
    assert_eq!(owned, PARTITIONS as usize, "{members:?}");
    eprintln!(
        "kafka-consumer-groups --describe --members:\n{}",
        text(&out.stdout)
    );
    stop(&mut run_a, &a);
    stop(&mut run_b, &b);

    // Commit metadata round-trips: every commit is tagged as orderly's.
    let committed = committed_with_metadata(&world);
    for (partition, (offset, metadata)) in &committed {
        assert_eq!(*offset, ends[partition]);
        assert_eq!(
            metadata,
            orderly::testkit::COMMIT_METADATA,
            "partition {partition}"
        );
    }

    // An operator resets the stopped group to the earliest offsets with
    // Kafka's tool: orderly would resume from its checkpoints and ignore
    // it, so it refuses to start and says what to do.
    let out = kafka_tool(
        "consumer-groups",
        &[
            "--bootstrap-server",
            bootstrap,
            "--group",
            &world.group,
            "--topic",
            &world.topic,
            "--reset-offsets",
            "--to-earliest",
            "--execute",
        ],
    );
    assert_succeeded(&out, "reset-offsets");
    let reset = committed_with_metadata(&world);
    assert!(
        reset.values().all(|(o, m)| *o == 0 && m.is_empty()),
        "the tool committed 0 without metadata: {reset:?}"
    );
    let refused_log = a.dir.path().join("refused.log");
    let log_file = std::fs::File::create(&refused_log).expect("log file");
    let mut refused = a
        .command(&["run"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log_file)
        .spawn()
        .expect("orderly run");
    let status = wait_exit(&mut refused, Duration::from_secs(60));
    let stderr = std::fs::read_to_string(&refused_log).unwrap_or_default();
    assert_eq!(
        status.and_then(|s| s.code()),
        Some(9),
        "refused with exit 9 (not left running)\n{stderr}"
    );
    assert!(
        stderr.contains("kafka-consumer-groups") && stderr.contains("orderly replay"),
        "says what to do: {stderr}"
    );
    for partition in 0..PARTITIONS {
        assert!(
            stderr.contains(&format!(
                "partition {partition} committed at 0, checkpoint at {}",
                ends[&partition]
            )),
            "{stderr}"
        );
    }

    // Keep the checkpoints: the group offsets go back to them, tagged.
    run_ok(
        &mut a.command(&["replay", "--shift-by", "0"]),
        "replay --shift-by 0",
    );
    let restored = committed_with_metadata(&world);
    for (partition, (offset, metadata)) in &restored {
        assert_eq!(
            (*offset, metadata.as_str()),
            (ends[partition], orderly::testkit::COMMIT_METADATA),
            "partition {partition}"
        );
    }
    let before = a.http_starts();
    let mut run_a = reaper.watch(a.spawn_run(None));
    wait_ready_http(&a, before);
    stop(&mut run_a, &a);
    assert!(
        !a.log()
            .contains("cannot check the group's committed offsets"),
        "the check ran\n{}",
        tail(&a.log())
    );
    world.verify_state(&a, &expected);
}

/// `replay --to-datetime` with a time between two halves of the topic moves
/// each partition to the first record of the second half (Kafka's
/// `offsets_for_times`), and the group's offsets with it.
#[test]
fn replay_to_a_datetime_inside_the_topic_moves_each_partition_to_the_right_offset() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, _) = world.plan(&WorkloadSpec {
        orders: 2_000,
        poison_rate: 0.0,
        seed: 172,
        ..Default::default()
    });
    let (first, second) = records.split_at(records.len() / 2);
    world.produce(first);
    let middle = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    std::thread::sleep(Duration::from_millis(1_200));
    let at = SystemTime::now();
    std::thread::sleep(Duration::from_millis(1_200));
    world.produce(second);
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    assert!(
        middle.iter().all(|(p, m)| *m > 0 && *m < ends[p]),
        "both halves in every partition: {middle:?} {ends:?}"
    );
    let instance = world.instance("commit_interval_ms = 200");
    world.finish(&instance);

    let stamp = humantime::format_rfc3339_millis(at).to_string();
    let out = run_ok(
        &mut instance.command(&["replay", "--to-datetime", &stamp, "--dry-run", "--json"]),
        "replay --to-datetime --dry-run",
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    let planned: BTreeMap<i32, i64> = plan["partitions"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["partition"].as_i64().expect("partition") as i32,
                r["new_offset"].as_i64().expect("new offset"),
            )
        })
        .collect();
    assert_eq!(
        planned, middle,
        "--to-datetime {stamp}: each partition's first record at or after it"
    );
    // A time before the first record is the earliest offset; after the
    // last, the end.
    let early = humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_secs(1_000_000_000))
        .to_string();
    let out = instance
        .command(&["replay", "--to-datetime", &early, "--dry-run", "--json"])
        .output()
        .expect("replay");
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    assert!(
        plan["partitions"]
            .as_array()
            .expect("rows")
            .iter()
            .all(|r| r["new_offset"] == 0),
        "{plan}"
    );

    run_ok(
        &mut instance.command(&["replay", "--to-datetime", &stamp]),
        "replay --to-datetime",
    );
    assert_eq!(
        world.committed(),
        middle,
        "the group's offsets moved to the second half"
    );
    // The checkpoints moved too: the second half is read again, and counted
    // as replayed.
    world.finish(&instance);
    let resumed = instance.stats();
    for p in resumed["partitions"].as_array().expect("partitions") {
        let partition = p["partition"].as_i64().expect("partition") as i32;
        assert_eq!(
            p["replayed"].as_i64(),
            Some(ends[&partition] - middle[&partition]),
            "{p}"
        );
    }
}

/// The changelog topic created beforehand with settings that make the
/// broker compact it within seconds. After the run, the broker has removed
/// records (fewer readable records than offsets), and a member with an
/// empty store restores every order exactly from what is left; so does a
/// `replay --to-earliest --reset-state` over it.
#[test]
fn a_changelog_the_broker_compacted_restores_every_order_exactly() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let changelog = format!("{}-changelog", world.topic);
    create_compacting_topic(&world.bootstrap, &changelog);
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 1_500,
        poison_rate: 0.003,
        seed: 173,
        ..Default::default()
    });
    // Small batches and a short commit interval write each order many times
    // over many segments; the waves give the segments time to roll.
    let a = world.instance("commit_interval_ms = 20\nbatch_max_records = 50");
    let reaper = Reaper::default();
    let mut run_a = reaper.watch(a.spawn_run(None));
    for wave in records.chunks(records.len() / 6 + 1) {
        world.produce(wave);
        std::thread::sleep(Duration::from_millis(700));
    }
    let caught_up = world.caught_up(Duration::from_secs(120));
    assert!(caught_up, "caught up\n{}", tail(&a.log()));
    stop(&mut run_a, &a);

    let started = Instant::now();
    let mut counts = (0, 0);
    let compacted = wait_until(Duration::from_secs(90), || {
        counts = compaction_removed(&world.bootstrap, &changelog);
        counts.0 > counts.1 / 10
    });
    assert!(
        compacted,
        "the broker compacted the changelog: {} records removed over {} offsets",
        counts.0, counts.1
    );
    eprintln!(
        "compaction: {} records removed over {} offsets after {:?}",
        counts.0,
        counts.1,
        started.elapsed()
    );

    // A member with an empty store restores from the compacted changelog.
    let b = world.instance("commit_interval_ms = 200");
    let mut run_b = reaper.watch(b.spawn_run(None));
    wait_ready_http(&b, 0);
    stop(&mut run_b, &b);
    assert_eq!(
        b.log().matches("restore finished").count(),
        PARTITIONS as usize,
        "{}",
        tail(&b.log())
    );
    world.verify_state(&b, &expected);

    // And a reset replay over it starts every partition over, exactly.
    run_ok(
        &mut b.command(&["replay", "--to-earliest", "--reset-state"]),
        "replay --to-earliest --reset-state",
    );
    world.finish(&b);
    world.verify_state(&b, &expected);
}

/// Topic settings that make the broker compact within seconds.
const COMPACTING: [(&str, &str); 5] = [
    ("cleanup.policy", "compact"),
    ("segment.ms", "300"),
    ("min.cleanable.dirty.ratio", "0.01"),
    ("min.compaction.lag.ms", "0"),
    ("delete.retention.ms", "1000"),
];

pub(crate) fn create_compacting_topic(bootstrap: &str, name: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin");
    let topic = COMPACTING.iter().fold(
        NewTopic::new(name, PARTITIONS, TopicReplication::Fixed(1)),
        |topic, (k, v)| topic.set(k, v),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let results = runtime
        .block_on(admin.create_topics(&[topic], &AdminOptions::new()))
        .expect("create topic");
    for result in results {
        result.expect("changelog topic created");
    }
}

/// Turns the settings of [`create_compacting_topic`] on for an existing
/// topic (incremental alter configs).
pub(crate) fn make_compacting(bootstrap: &str, name: &str) {
    use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("admin");
    let config = COMPACTING.iter().fold(
        AlterConfig::new(ResourceSpecifier::Topic(name)),
        |config, (k, v)| config.set(k, v),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let results = runtime
        .block_on(admin.alter_configs(&[config], &AdminOptions::new()))
        .expect("alter configs");
    for result in results {
        result.expect("changelog topic altered");
    }
}

/// Records the broker's compaction removed from `topic`, at least: read
/// `read_uncommitted` (so aborted records count as present), a gap between
/// two consecutive records' offsets holds at most one transaction marker,
/// so `gap - 1` further offsets held records that are gone. (Counting
/// readable records against offsets is no proof under transactions: the
/// markers take offsets too.) Also returns the offsets spanned.
pub(crate) fn compaction_removed(bootstrap: &str, topic: &str) -> (i64, i64) {
    use rdkafka::consumer::Consumer;
    use rdkafka::Message;
    let (mut removed, mut spanned) = (0, 0);
    for partition in 0..PARTITIONS {
        let consumer: BaseConsumer = crate::support::client(bootstrap)
            .set("group.id", crate::support::unique("compaction-reader"))
            .set("isolation.level", "read_uncommitted")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(10))
            .expect("watermarks");
        spanned += high - low;
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(low))
            .expect("tpl");
        consumer.assign(&tpl).expect("assign");
        let mut previous = low - 1;
        let deadline = Instant::now() + Duration::from_secs(30);
        while previous + 1 < high && Instant::now() < deadline {
            match consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    removed += (m.offset() - previous - 2).max(0);
                    previous = m.offset();
                }
                _ => {
                    let at = consumer
                        .position()
                        .ok()
                        .and_then(|l| l.find_partition(topic, partition).map(|e| e.offset()));
                    if matches!(at, Some(rdkafka::Offset::Offset(o)) if o >= high) {
                        break;
                    }
                }
            }
        }
    }
    (removed, spanned)
}

/// The whole job against a real schema registry (Apicurio Registry's
/// Confluent API, from `registry/apicurio`): the schemas registered there,
/// records framed with its ids, decoded through it; exact results.
#[test]
fn a_real_schema_registry_serves_the_run() {
    let world = World::with_real_registry(
        required_env("ORDERLY_E2E_BOOTSTRAP"),
        required_env("ORDERLY_E2E_REGISTRY"),
    );
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 2_000,
        poison_rate: 0.003,
        seed: 174,
        ..Default::default()
    });
    world.produce(&records);
    let instance = world.instance("commit_interval_ms = 200");
    run_ok(
        &mut instance.command(&["config", "check"]),
        "config check against the real registry",
    );
    world.finish(&instance);
    world.verify(&instance, &expected);
    // The subjects are really there. Each ask is bounded and asked again on
    // a new connection: Apicurio once accepted a connection and never
    // answered it, which hung the suite where it should fail.
    let url = format!("{}/subjects", world.registry.url);
    let subjects = (0..5)
        .find_map(|_| {
            let out = Command::new("curl")
                .args(["-sf", "--max-time", "10", &url])
                .output()
                .expect("curl");
            out.status.success().then(|| text(&out.stdout))
        })
        .unwrap_or_else(|| panic!("the registry did not answer GET {url} within 5 tries of 10 s"));
    assert!(
        subjects.contains(&format!("{}-value", world.topic)),
        "{subjects}"
    );
}

/// Under KIP-848's consumer protocol the classic DescribeGroups call lists
/// no members of the group; orderly describes groups with
/// DescribeConsumerGroups, so a replay still sees running members and is
/// refused, and `/state` still names the owner of another member's order.
#[test]
fn under_the_consumer_protocol_replay_and_state_see_the_running_members() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP")).with_consumer_protocol();
    let (records, expected) = world.plan(&WorkloadSpec {
        orders: 1_000,
        poison_rate: 0.0,
        seed: 175,
        ..Default::default()
    });
    world.produce(&records);
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let (a, b) = (
        world.instance("commit_interval_ms = 200"),
        world.instance("commit_interval_ms = 200"),
    );
    let reaper = Reaper::default();
    let mut run_a = reaper.watch(a.spawn_run(None));
    let address_a = wait_ready_http(&a, 0);
    let mut run_b = reaper.watch(b.spawn_run(None));
    let address_b = wait_ready_http(&b, 0);
    let b_client_id = client_id_of(&run_b);
    let split = wait_until(Duration::from_secs(60), || {
        let owned = |address: &str| {
            http_get(address, "/metrics")
                .ok()
                .and_then(|(_, body)| {
                    body.lines()
                        .find(|l| l.starts_with("orderly_assigned_partitions "))
                        .map(str::to_string)
                })
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<f64>().ok())
                })
                .unwrap_or(0.0)
        };
        owned(&address_a) > 0.0 && owned(&address_b) > 0.0 && world.committed() == ends
    });
    assert!(
        split,
        "both members own partitions and caught up\n{}\n---\n{}",
        tail(&a.log()),
        tail(&b.log())
    );

    let out = a
        .command(&["replay", "--to-earliest", "--dry-run"])
        .output()
        .expect("replay");
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(8),
        "refused while members run: {stderr}"
    );
    assert!(stderr.contains(&b_client_id), "names the members: {stderr}");

    let mut misdirected = 0;
    for (order_id, _) in expected.states.iter().step_by(37) {
        let (status, body) = http_get(&address_a, &format!("/state/{order_id}")).expect("state");
        if status == 421 {
            misdirected += 1;
            let answer: serde_json::Value = serde_json::from_str(&body).expect("421 JSON");
            assert_eq!(
                answer["owner"]["client_id"].as_str(),
                Some(b_client_id.as_str()),
                "{answer}"
            );
        }
    }
    assert!(misdirected > 0, "some orders live on b");
    stop(&mut run_b, &b);
    stop(&mut run_a, &a);
}
