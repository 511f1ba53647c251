//! Integration tests on librdkafka's in-process mock cluster: the processor
//! in-process, and the real `orderly` binary as a child process (the mock
//! cluster listens on loopback, so a child can reach it).

mod support;

#[path = "processor_mock/crashes.rs"]
mod crashes;
#[path = "processor_mock/in_process.rs"]
mod in_process;
#[path = "processor_mock/outages.rs"]
mod outages;

use std::collections::BTreeMap;
use std::time::Duration;

use orderly::testkit::orders::workload::{plan, Expectation, WorkloadSpec};
use orderly::testkit::orders::Encoder;
use orderly::testkit::produce_planned;
use orderly::Registry;
use orderly::{Config, Store};
use support::mock::{self, producer, Cluster};
use support::registry_double::RegistryDouble;
use support::{unique, Instance, Setup};

const PARTITIONS: i32 = 4;

fn cluster() -> Cluster {
    mock::cluster(PARTITIONS, true)
}

/// Runs the order processor in-process until the store covers `ends`.
async fn process_until_caught_up(
    config: Config,
    store: Store,
    registry: Registry,
    ends: BTreeMap<i32, i64>,
) {
    mock::process_until_caught_up(orderly::Orders, config, store, registry, ends).await
}

fn assert_store_matches(store: &Store, expected: &Expectation) {
    mock::assert_counters(
        store,
        expected.outcomes.applied,
        expected.outcomes.duplicates,
        expected.outcomes.stale,
        expected.outcomes.dead_lettered,
    );
    let mut mismatches = Vec::new();
    for (order_id, want) in &expected.states {
        let got = store
            .find::<orderly::Orders>(order_id)
            .expect("get")
            .map(|s| s.view());
        if got.as_ref() != Some(want) {
            mismatches.push((order_id.clone(), got, want.clone()));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} mismatched orders, first: {:?}",
        mismatches.len(),
        mismatches.first()
    );
}

/// A mock cluster whose topic holds a planned workload (schemas registered
/// through the registry double over HTTP), and an `orderly` binary instance
/// configured for it with a fresh group and `extra` processing settings.
struct Loaded {
    c: Cluster,
    /// Serves the binary's schema look-ups for as long as the test runs.
    _registry: RegistryDouble,
    group: String,
    ends: BTreeMap<i32, i64>,
    total: i64,
    expected: Expectation,
    instance: Instance,
}

fn loaded(spec: WorkloadSpec, extra: &str) -> Loaded {
    let c = cluster();
    let registry = RegistryDouble::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let http = Registry::http(&registry.url, Duration::from_secs(5)).unwrap();
    let encoder = runtime
        .block_on(Encoder::register(&http, &c.topic))
        .expect("register over HTTP");
    let (records, expected) = plan(&spec, &encoder).expect("plan");
    let ends = runtime
        .block_on(produce_planned(&producer(&c.bootstrap), &c.topic, &records))
        .expect("produce");
    let total: i64 = ends.values().sum();
    let group = unique("group");
    let instance = Instance::new(&Setup {
        kafka_extra: "",
        bootstrap: &c.bootstrap,
        registry_url: &registry.url,
        group: &group,
        topic: &c.topic,
        dlq_topic: &c.dlq,
        session_timeout_ms: 6000,
        extra,
    });
    Loaded {
        c,
        _registry: registry,
        group,
        ends,
        total,
        expected,
        instance,
    }
}
