//! librdkafka's transactional offset call when the group coordinator goes
//! away (its issues 5456 and 5511: `send_offsets_to_transaction` waits on a
//! coordinator request whose timeout is never checked), on librdkafka's
//! mock cluster as librdkafka's own test for 5456 holds it: three brokers,
//! the group's coordinator on one of them and nothing else there, taken
//! down while the processor runs under exactly_once. The wait is reported
//! (the log names the call), orderly gives the call up at its own bound and
//! starts the partition over, and once the coordinator is back the run ends
//! with exact counters and states.

mod support;

use std::time::Duration;

use rdkafka::mocking::{MockCluster, MockCoordinator};

use orderly::testkit::orders::workload::{plan, WorkloadSpec};
use orderly::testkit::orders::Encoder;
use orderly::testkit::produce_planned;
use orderly::{Registry, Store};
use support::mock::{assert_counters, producer};
use support::registry_double::RegistryDouble;
use support::{committed, signal, unique, wait_exit, wait_until, Instance, Setup};

const PARTITIONS: i32 = 4;
/// The group coordinator's broker: no partition leads there.
const COORDINATOR: i32 = 2;

#[test]
fn a_group_coordinator_held_away_during_send_offsets_is_reported_and_the_partition_recovers() {
    let mock: MockCluster<'static, rdkafka::producer::DefaultProducerContext> =
        MockCluster::new(3).expect("mock cluster");
    let topic = unique("orders");
    let dlq = unique("orders-dlq");
    let group = unique("group");
    let topics = [
        (topic.clone(), PARTITIONS),
        (dlq.clone(), 1),
        (format!("{topic}-changelog"), PARTITIONS),
        (format!("{topic}-status"), PARTITIONS),
    ];
    for (name, partitions) in &topics {
        mock.create_topic(name, *partitions, 1).expect("topic");
        for p in 0..*partitions {
            let leader = if p % 2 == 0 { 1 } else { 3 };
            mock.partition_leader(name, p, Some(leader))
                .expect("leader");
        }
    }
    mock.coordinator(MockCoordinator::Group(group.clone()), COORDINATOR)
        .expect("group coordinator");
    for p in 0..PARTITIONS {
        // The partitions' transactional ids (`<group>-<topic>-<partition>`)
        // stay reachable: only the offsets' coordinator goes away.
        mock.coordinator(
            MockCoordinator::Transaction(format!("{group}-{topic}-{p}")),
            1,
        )
        .expect("transaction coordinator");
    }
    let bootstrap = mock.bootstrap_servers();

    let registry = RegistryDouble::start();
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let http = Registry::http(&registry.url, Duration::from_secs(5)).expect("registry");
    let encoder = runtime
        .block_on(Encoder::register(&http, &topic))
        .expect("register over HTTP");
    let (records, expected) = plan(
        &WorkloadSpec {
            orders: 6_000,
            poison_rate: 0.005,
            seed: 29,
            ..Default::default()
        },
        &encoder,
    )
    .expect("plan");
    let ends = runtime
        .block_on(produce_planned(&producer(&bootstrap), &topic, &records))
        .expect("produce");
    // A session longer than the coordinator is away: the member keeps its
    // partitions, so what is tested is the offset call, not a rebalance.
    let instance = Instance::new(&Setup {
        kafka_extra: "",
        bootstrap: &bootstrap,
        registry_url: &registry.url,
        group: &group,
        topic: &topic,
        dlq_topic: &dlq,
        session_timeout_ms: 180_000,
        extra: "guarantee = \"exactly_once\"\nbatch_max_records = 50\nbatch_max_wait_ms = 5\ncommit_interval_ms = 50",
    });
    let mut child = instance.spawn_run(None);
    let started = wait_until(Duration::from_secs(60), || {
        committed(&bootstrap, &group, &topic, PARTITIONS)
            .values()
            .any(|o| *o > 0)
    });
    assert!(started, "the first write-outs commit\n{}", instance.log());
    mock.broker_down(COORDINATOR).expect("coordinator down");
    let reported = wait_until(Duration::from_secs(60), || {
        instance
            .log()
            .contains("a write-out is waiting in librdkafka's send_offsets_to_transaction")
    });
    let given_up = reported
        && wait_until(Duration::from_secs(90), || {
            instance
                .log()
                .contains("send_offsets_to_transaction did not return within")
        });
    mock.broker_up(COORDINATOR).expect("coordinator up");
    let caught_up = given_up
        && wait_until(Duration::from_secs(180), || {
            committed(&bootstrap, &group, &topic, PARTITIONS) == ends
        });
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    assert!(reported, "the wait is reported\n{log}");
    assert!(given_up, "the call is given up at orderly's bound\n{log}");
    assert!(caught_up, "committed offsets reach the end offsets\n{log}");
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0: {status:?}\n{log}"
    );
    let store = Store::open(&instance.store_path, 64).expect("store");
    assert_counters(
        &store,
        expected.outcomes.applied,
        expected.outcomes.duplicates,
        expected.outcomes.stale,
        expected.outcomes.dead_lettered,
    );
    let mismatches = expected
        .states
        .iter()
        .filter(|(id, want)| {
            store
                .find::<orderly::Orders>(id)
                .expect("get")
                .map(|s| s.view())
                .as_ref()
                != Some(*want)
        })
        .count();
    assert_eq!(mismatches, 0, "every order's state exact");
    drop(mock);
}
