//! One test's world: a fresh input topic, dead-letter topic, group and
//! registry double on the shared broker; producing planned records; the
//! final exact checks; an Apache Kafka broker a test can stop and start
//! (or reach through a proxy it can cut).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::producer::FutureProducer;

use orderly::testkit::headers::{HEADER_OFFSET, HEADER_PARTITION, HEADER_TOPIC};
use orderly::testkit::orders::workload::{plan, Expectation, PlannedRecord, WorkloadSpec};
use orderly::testkit::orders::{Encoder, StateView};
use orderly::testkit::produce_planned;
use orderly::Registry;

use crate::support::registry_double::RegistryDouble;
use crate::support::{
    committed, create_topics, end_offsets, read_all, run_ok, signal, text, unique, wait_exit,
    wait_until, Instance, Setup,
};
use crate::{PARTITIONS, SESSION_TIMEOUT_MS};

/// The schema registry of a world: the in-process double, or a real one
/// (Apicurio Registry's Confluent API) at `url`.
pub struct TestRegistry {
    pub url: String,
    _double: Option<RegistryDouble>,
}

impl TestRegistry {
    fn double() -> Self {
        let double = RegistryDouble::start();
        TestRegistry {
            url: double.url.clone(),
            _double: Some(double),
        }
    }
}

pub struct World {
    pub bootstrap: String,
    pub registry: TestRegistry,
    pub runtime: tokio::runtime::Runtime,
    pub topic: String,
    pub dlq: String,
    pub group: String,
    /// `[kafka]` lines of every instance (the group protocol).
    pub kafka_extra: String,
    /// The `[entity]` section of every instance (`""`: the default, orders).
    pub entity_section: String,
    /// `kafka.session_timeout_ms` of every instance ([`SESSION_TIMEOUT_MS`]
    /// unless [`Self::with_session_timeout`] says otherwise).
    pub session_timeout_ms: u64,
}

/// The counters a workload implies: what `state stats` must show at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub applied: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub dead_lettered: u64,
}

impl From<&Expectation> for Counts {
    fn from(e: &Expectation) -> Self {
        Counts {
            applied: e.outcomes.applied,
            duplicates: e.outcomes.duplicates,
            stale: e.outcomes.stale,
            dead_lettered: e.outcomes.dead_lettered,
        }
    }
}

impl From<&orderly::testkit::stock::workload::StockExpectation> for Counts {
    fn from(e: &orderly::testkit::stock::workload::StockExpectation) -> Self {
        Counts {
            applied: e.outcomes.applied,
            duplicates: e.outcomes.duplicates,
            stale: e.outcomes.stale,
            dead_lettered: e.outcomes.dead_lettered,
        }
    }
}

/// One record of the output topic, decoded: the entity's key, the version
/// and event id of the change, and the status it changed to (its Avro enum
/// symbol or string).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    pub key: String,
    pub version: i64,
    pub event_id: String,
    pub from_status: Option<String>,
    pub to_status: String,
}

impl World {
    pub fn new(bootstrap: String) -> Self {
        let world = Self::without_output_topic(bootstrap);
        world.create_output_topic();
        world
    }

    /// A world whose output topic (`<topic>-status`) does not exist yet.
    pub fn without_output_topic(bootstrap: String) -> Self {
        Self::with_registry(bootstrap, TestRegistry::double())
    }

    /// A world (with its output topic) whose registry is the real one at
    /// `url`; subjects are per topic, so worlds never share one.
    pub fn with_real_registry(bootstrap: String, url: String) -> Self {
        let world = Self::with_registry(bootstrap, TestRegistry { url, _double: None });
        world.create_output_topic();
        world
    }

    fn with_registry(bootstrap: String, registry: TestRegistry) -> Self {
        let topic = unique("orders");
        let dlq = unique("orders-dlq");
        create_topics(&bootstrap, &[(&topic, PARTITIONS), (&dlq, 1)]);
        World {
            bootstrap,
            registry,
            runtime: tokio::runtime::Runtime::new().expect("runtime"),
            topic,
            dlq,
            group: unique("group"),
            kafka_extra: String::new(),
            entity_section: String::new(),
            session_timeout_ms: SESSION_TIMEOUT_MS,
        }
    }

    pub fn instance(&self, extra: &str) -> Instance {
        self.instance_at(&self.bootstrap, extra)
    }

    /// An instance whose clients bootstrap at `bootstrap` (the same broker
    /// through another listener: a proxy a test can cut).
    pub fn instance_at(&self, bootstrap: &str, extra: &str) -> Instance {
        // `extra` ends the file's `[processing]` section: a section after
        // it is a section of its own.
        let extra = format!("{extra}\n{}", self.entity_section);
        Instance::new(&Setup {
            bootstrap,
            registry_url: &self.registry.url,
            group: &self.group,
            topic: &self.topic,
            dlq_topic: &self.dlq,
            session_timeout_ms: self.session_timeout_ms,
            kafka_extra: &self.kafka_extra,
            extra: &extra,
        })
    }

    /// Every instance of this world uses KIP-848's consumer group protocol
    /// (`kafka.group_protocol = "consumer"`).
    pub fn with_consumer_protocol(mut self) -> Self {
        self.kafka_extra = "group_protocol = \"consumer\"".into();
        self
    }

    /// Every instance of this world has `line` in its `[kafka]` section.
    pub fn with_kafka_setting(mut self, line: &str) -> Self {
        self.kafka_extra = format!("{}\n{line}", self.kafka_extra);
        self
    }

    /// Every instance of this world has a session timeout of `ms` (and a
    /// shutdown deadline of half that): a member that died leaves the group
    /// that much sooner, so a restart's rebalance waits less for it. The
    /// broker's `group.min.session.timeout.ms` (kafka/broker) allows it.
    pub fn with_session_timeout(mut self, ms: u64) -> Self {
        self.session_timeout_ms = ms;
        self
    }

    /// Every instance of this world processes the entity `kind` names
    /// (`entity.kind`: "orders", "stock", ...).
    pub fn with_entity(mut self, kind: &str) -> Self {
        self.entity_section = format!("[entity]\nkind = \"{kind}\"\n");
        self
    }

    /// Every instance of this world processes the entity `entity` describes:
    /// its kind and the field names a `latest` entity reads (the whole
    /// `[entity]` section).
    pub fn with_entity_config(mut self, entity: &orderly::testkit::EntityConfig) -> Self {
        let section = toml::to_string(entity).expect("[entity] as TOML");
        self.entity_section = format!("[entity]\n{section}");
        self
    }

    /// A client of this world's registry (to register schemas and plan).
    pub fn registry_client(&self) -> Registry {
        Registry::http(&self.registry.url, Duration::from_secs(5)).expect("registry client")
    }

    pub fn create_output_topic(&self) {
        create_topics(
            &self.bootstrap,
            &[(&format!("{}-status", self.topic), PARTITIONS)],
        );
    }

    pub fn plan(&self, spec: &WorkloadSpec) -> (Vec<PlannedRecord>, Expectation) {
        let encoder = self
            .runtime
            .block_on(Encoder::register(&self.registry_client(), &self.topic))
            .expect("register schemas");
        plan(spec, &encoder).expect("plan")
    }

    pub fn producer(&self) -> FutureProducer {
        crate::support::client(&self.bootstrap)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .create()
            .expect("producer")
    }

    pub fn produce_with(&self, producer: &FutureProducer, records: &[PlannedRecord]) {
        self.runtime
            .block_on(produce_planned(producer, &self.topic, records))
            .expect("produce");
    }

    pub fn produce(&self, records: &[PlannedRecord]) {
        self.runtime
            .block_on(produce_planned(&self.producer(), &self.topic, records))
            .expect("produce");
    }

    pub fn committed(&self) -> BTreeMap<i32, i64> {
        committed(&self.bootstrap, &self.group, &self.topic, PARTITIONS)
    }

    /// Waits up to `within` until the group has committed every record the
    /// input topic holds now.
    pub fn caught_up(&self, within: Duration) -> bool {
        let ends = end_offsets(&self.bootstrap, &self.topic, PARTITIONS);
        wait_until(within, || self.committed() == ends)
    }

    pub fn committed_total(&self) -> i64 {
        self.committed().values().filter(|o| **o > 0).sum()
    }

    /// Runs a clean instance until the group's committed offsets reach the
    /// topic's end offsets, then stops it with SIGTERM (must exit 0).
    pub fn finish(&self, instance: &Instance) -> Duration {
        let ends = end_offsets(&self.bootstrap, &self.topic, PARTITIONS);
        let before = instance.connected_count();
        let mut child = instance.spawn_run(None);
        let started = Instant::now();
        assert!(
            instance.wait_ready(before),
            "never connected\n{}",
            tail(&instance.log())
        );
        let caught_up = wait_until(Duration::from_secs(300), || self.committed() == ends);
        let took = started.elapsed();
        signal(&child, "TERM");
        let status = wait_exit(&mut child, Duration::from_secs(30));
        assert!(
            caught_up,
            "committed {:?} never reached end offsets {ends:?}\n{}",
            self.committed(),
            tail(&instance.log())
        );
        assert!(
            status.is_some_and(|s| s.success()),
            "SIGTERM exits 0: {status:?}\n{}",
            tail(&instance.log())
        );
        took
    }

    /// A fresh instance (an empty store, `settings`, the same group) that
    /// joins, restores every partition from the changelog, is handed to
    /// `running` and then stopped (SIGTERM, exit 0); for the final checks on
    /// its store.
    pub fn restore_fresh(&self, settings: &str, running: impl FnOnce(&Instance)) -> Instance {
        let fresh = self.instance(settings);
        let mut child = fresh.spawn_run(None);
        let restored = wait_until(Duration::from_secs(120), || {
            fresh.log().matches("restore finished").count() >= PARTITIONS as usize
        });
        if restored {
            running(&fresh);
        }
        stop(&mut child, &fresh);
        assert!(
            restored,
            "a fresh store restores every partition\n{}",
            tail(&fresh.log())
        );
        fresh
    }

    /// The final checks: exact counters, every order's state, committed
    /// offsets at the end, dead letters for exactly the poison records.
    pub fn verify(&self, instance: &Instance, expected: &Expectation) -> usize {
        let mismatches = self.verify_state(instance, expected);
        self.verify_outbox(expected, true);
        mismatches
    }

    /// Every record of the output topic (the outbox), per partition in
    /// offset order: (order id, version, event id).
    pub fn outbox_records(&self) -> BTreeMap<i32, Vec<(String, i64, String)>> {
        let schema = apache_avro::Schema::parse_str(orderly::testkit::orders::STATUS_SCHEMA)
            .expect("the order output schema");
        self.output_records(&schema, "order_id")
            .into_iter()
            .map(|(partition, list)| {
                let list = list
                    .into_iter()
                    .map(|r| (r.key, r.version, r.event_id))
                    .collect();
                (partition, list)
            })
            .collect()
    }

    /// Every record of the output topic, read `read_committed`, per
    /// partition in offset order, decoded with the entity's output `schema`
    /// whose key is the field `key_field`.
    pub fn output_records(
        &self,
        schema: &apache_avro::Schema,
        key_field: &str,
    ) -> BTreeMap<i32, Vec<Published>> {
        use apache_avro::types::Value;
        use rdkafka::consumer::{BaseConsumer, Consumer};
        use rdkafka::Message;
        let topic = format!("{}-status", self.topic);
        let consumer: BaseConsumer = crate::support::client(&self.bootstrap)
            .set("group.id", unique("outbox-reader"))
            .set("isolation.level", "read_committed")
            .set("enable.auto.commit", "false")
            .create()
            .expect("consumer");
        // A status: an enum symbol or a string, maybe in a union with null.
        fn status(value: Value) -> Option<String> {
            match value {
                Value::Enum(_, symbol) | Value::String(symbol) => Some(symbol),
                Value::Union(_, inner) => status(*inner),
                _ => None,
            }
        }
        let mut out = BTreeMap::new();
        for partition in 0..PARTITIONS {
            let (low, high) = consumer
                .fetch_watermarks(&topic, partition, Duration::from_secs(10))
                .expect("watermarks");
            let mut tpl = rdkafka::TopicPartitionList::new();
            tpl.add_partition_offset(&topic, partition, rdkafka::Offset::Offset(low))
                .expect("tpl");
            consumer.assign(&tpl).expect("assign");
            let mut records = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(60);
            let mut next = low;
            while next < high && Instant::now() < deadline {
                let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) else {
                    // Transaction markers hold offsets without records: the
                    // position says when the partition is read.
                    let at = consumer
                        .position()
                        .ok()
                        .and_then(|l| l.find_partition(&topic, partition).map(|e| e.offset()));
                    if let Some(rdkafka::Offset::Offset(at)) = at {
                        next = next.max(at);
                    }
                    continue;
                };
                next = m.offset() + 1;
                let payload = m.payload().unwrap_or_default();
                #[allow(deprecated)]
                let decoded = apache_avro::from_avro_datum(
                    schema,
                    &mut payload.get(5..).unwrap_or_default(),
                    None,
                );
                let Ok(Value::Record(mut fields)) = decoded else {
                    panic!(
                        "output record at {partition}/{} does not decode",
                        m.offset()
                    )
                };
                let mut take = |name: &str| {
                    fields
                        .iter()
                        .position(|(n, _)| n == name)
                        .map(|at| fields.swap_remove(at).1)
                };
                let (
                    Some(Value::String(key)),
                    Some(Value::Long(version)),
                    Some(Value::String(event_id)),
                    Some(from),
                    Some(Some(to_status)),
                ) = (
                    take(key_field),
                    take("version"),
                    take("event_id"),
                    take("from_status"),
                    take("to_status").map(status),
                )
                else {
                    panic!("output record without {key_field}, version, event_id or statuses")
                };
                records.push(Published {
                    key,
                    version,
                    event_id,
                    from_status: status(from),
                    to_status,
                });
            }
            assert!(
                next >= high,
                "read the output partition {partition} to its end"
            );
            out.insert(partition, records);
        }
        out
    }

    /// The outbox's promises: every applied status change on the output
    /// topic at least once, nothing else (the distinct event ids are exactly
    /// the expected ones) and, when `monotonic`, per order the versions
    /// never go backwards in offset order.
    pub fn verify_outbox(&self, expected: &Expectation, monotonic: bool) {
        let records = self.outbox_records();
        let wanted: std::collections::HashSet<String> = expected
            .status_changes
            .iter()
            .map(|id| orderly::testkit::status_event_id(id))
            .collect();
        let got: std::collections::HashSet<String> = records
            .values()
            .flatten()
            .map(|(_, _, id)| id.clone())
            .collect();
        let total: usize = records.values().map(Vec::len).sum();
        let missing = wanted.difference(&got).count();
        let extra = got.difference(&wanted).count();
        assert_eq!((missing, extra), (0, 0), "outbox: {missing} expected status changes missing, {extra} unexpected ({total} records)");
        if monotonic {
            for (partition, list) in &records {
                let mut newest: std::collections::HashMap<&str, i64> =
                    std::collections::HashMap::new();
                for (order, version, _) in list {
                    let last = newest.entry(order.as_str()).or_insert(*version);
                    assert!(*version >= *last, "partition {partition}: order {order} went back from version {last} to {version}");
                    *last = *version;
                }
            }
        }
        eprintln!(
            "outbox: {} distinct status changes, {total} records ({} re-sent)",
            got.len(),
            total - got.len()
        );
    }

    /// exactly_once's promise on the output topic, read `read_committed`:
    /// every expected status change exactly once (not "each event id at
    /// least once": each record once), versions never going backwards; and
    /// on the dead-letter topic exactly one letter per poison record.
    pub fn verify_exactly_once(&self, expected: &Expectation) {
        let records = self.outbox_records();
        let total: usize = records.values().map(Vec::len).sum();
        self.verify_outbox(expected, true);
        assert_eq!(
            total,
            expected.status_changes.len(),
            "each status change exactly once on the output topic"
        );
        self.verify_one_letter_each(expected.outcomes.dead_lettered);
    }

    /// exactly_once's promise on the dead-letter topic, read
    /// `read_committed`: `expected` letters, one per poison record.
    pub fn verify_one_letter_each(&self, expected: u64) {
        let letters = read_all(&self.bootstrap, &self.dlq);
        assert_eq!(
            letters.len() as u64,
            expected,
            "exactly one dead letter per poison record"
        );
    }

    /// The final state checks without the outbox's.
    pub fn verify_state(&self, instance: &Instance, expected: &Expectation) -> usize {
        self.verify_counts(instance, Counts::from(expected));
        let mismatches = compare_states(&instance.dump(), &expected.states, |v| {
            serde_json::from_value::<StateView>(v.clone()).expect("state JSON")
        });
        assert_eq!(mismatches, 0, "final state mismatches");
        self.verify_dead_letters(expected.outcomes.dead_lettered);
        mismatches
    }

    /// Committed offsets at the topic's end, and the store's counters
    /// (`state stats`) exactly `expected`, adding up to the records consumed.
    pub fn verify_counts(&self, instance: &Instance, expected: Counts) {
        let ends = end_offsets(&self.bootstrap, &self.topic, PARTITIONS);
        assert_eq!(
            self.committed(),
            ends,
            "committed offsets equal end offsets"
        );
        let stats = instance.stats();
        let totals = &stats["totals"];
        let consumed: i64 = ends.values().sum();
        let got = |name: &str| totals[name].as_u64();
        assert_eq!(got("consumed"), Some(consumed as u64), "{stats}");
        assert_eq!(got("applied"), Some(expected.applied), "{stats}");
        assert_eq!(got("duplicates"), Some(expected.duplicates), "{stats}");
        assert_eq!(got("stale"), Some(expected.stale), "{stats}");
        assert_eq!(
            got("dead_lettered"),
            Some(expected.dead_lettered),
            "{stats}"
        );
    }

    /// The dead-letter topic holds letters for exactly `expected` distinct
    /// source records of this world's input topic.
    pub fn verify_dead_letters(&self, expected: u64) {
        let letters = read_all(&self.bootstrap, &self.dlq);
        let mut sources: Vec<(String, String, String)> = letters
            .iter()
            .map(|l| {
                (
                    l.headers[HEADER_TOPIC].clone(),
                    l.headers[HEADER_PARTITION].clone(),
                    l.headers[HEADER_OFFSET].clone(),
                )
            })
            .collect();
        assert!(sources.iter().all(|(topic, _, _)| *topic == self.topic));
        sources.sort();
        sources.dedup();
        assert_eq!(
            sources.len() as u64,
            expected,
            "each poison record dead-lettered at least once, nothing else"
        );
    }
}

/// How many keys of `dump` (`state dump`, by key) differ from `expected`
/// (each line read with `parse`), or are missing or extra; the first few
/// are logged.
pub fn compare_states<'a, T: PartialEq + std::fmt::Debug + 'a>(
    dump: &BTreeMap<String, serde_json::Value>,
    expected: impl IntoIterator<Item = (&'a String, &'a T)>,
    parse: impl Fn(&serde_json::Value) -> T,
) -> usize {
    let (mut mismatches, mut found) = (0usize, 0usize);
    for (key, want) in expected {
        let got = dump.get(key).map(&parse);
        found += usize::from(got.is_some());
        if got.as_ref() != Some(want) {
            mismatches += 1;
            if mismatches < 5 {
                eprintln!("mismatch {key}: got {got:?}, want {want:?}");
            }
        }
    }
    mismatches + (dump.len() - found)
}

/// Stops `orderly run` with SIGTERM and asserts it exits 0 within 30 s.
pub fn stop(child: &mut std::process::Child, instance: &Instance) {
    signal(child, "TERM");
    let status = wait_exit(child, Duration::from_secs(30));
    assert!(
        status.is_some_and(|s| s.success()),
        "SIGTERM exits 0: {status:?}\n{}",
        tail(&instance.log())
    );
}

pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// An Apache Kafka broker this test owns (`kafka/broker start --dir`), so
/// it can be stopped and started again with its data intact, on the same
/// port.
pub struct Broker {
    dir: PathBuf,
    pub bootstrap: String,
    running: bool,
    /// The `KEY=value` lines `kafka/broker start` printed (a secured
    /// broker's CA, users and admin client file among them).
    pub printed: BTreeMap<String, String>,
}

pub fn broker_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("kafka")
        .join("broker")
}

/// Runs `kafka/broker` with `args` and returns what it printed; a failure
/// fails the test with what it said.
pub fn broker_command<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    let out = run_ok(
        Command::new(broker_script())
            .args(args)
            .stdin(Stdio::null()),
        &format!("kafka/broker {}", shown.join(" ")),
    );
    text(&out.stdout)
}

/// The `KEY=value` lines `kafka/broker start` (or `cluster start`) printed.
pub fn printed_lines(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Broker {
    pub fn start(dir: PathBuf) -> Self {
        let mut broker = Broker {
            dir,
            bootstrap: String::new(),
            running: false,
            printed: BTreeMap::new(),
        };
        broker.restart();
        broker
    }

    /// A broker with a proxy listener (`kafka/broker start
    /// --proxy-listener`): [`Self::proxy_listener`] is where a proxy
    /// forwards to, [`Self::proxy_advertised`] where it must listen.
    pub fn start_with_proxy_listener(dir: PathBuf) -> Self {
        let mut broker = Broker {
            dir,
            bootstrap: String::new(),
            running: false,
            printed: BTreeMap::new(),
        };
        broker.start_with(&["--proxy-listener"]);
        broker
    }

    /// The address the proxy listener is bound to.
    pub fn proxy_listener(&self) -> &str {
        &self.printed["KAFKA_PROXY_LISTENER"]
    }

    /// The address the proxy listener is advertised at.
    pub fn proxy_advertised(&self) -> &str {
        &self.printed["KAFKA_PROXY_ADVERTISED"]
    }

    /// A broker in secured mode (`kafka/broker start --secure`): SASL_SSL,
    /// SCRAM-SHA-512, ACLs; this test's own clients connect as its admin.
    pub fn start_secure(dir: PathBuf) -> Self {
        let mut broker = Broker {
            dir,
            bootstrap: String::new(),
            running: false,
            printed: BTreeMap::new(),
        };
        broker.start_with(&["--secure"]);
        crate::support::secure_clients_of(
            &broker.bootstrap,
            broker.client_settings("KAFKA_ADMIN_USER", "KAFKA_ADMIN_PASSWORD"),
        );
        broker
    }

    /// librdkafka settings for a secured broker's user named by the printed
    /// `user` and `password` lines.
    pub fn client_settings(&self, user: &str, password: &str) -> Vec<(String, String)> {
        [
            ("security.protocol", "SASL_SSL".to_string()),
            ("sasl.mechanism", "SCRAM-SHA-512".to_string()),
            ("sasl.username", self.printed[user].clone()),
            ("sasl.password", self.printed[password].clone()),
            ("ssl.ca.location", self.printed["KAFKA_CA"].clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    pub fn restart(&mut self) {
        self.start_with(&[]);
    }

    fn start_with(&mut self, extra: &[&str]) {
        let mut args = vec![
            "start".into(),
            "--dir".into(),
            self.dir.clone().into_os_string(),
        ];
        args.extend(extra.iter().map(std::ffi::OsString::from));
        let printed = printed_lines(&broker_command(&args));
        let bootstrap = printed
            .get("KAFKA_BOOTSTRAP")
            .expect("kafka/broker start prints KAFKA_BOOTSTRAP=")
            .clone();
        assert!(
            self.bootstrap.is_empty() || self.bootstrap == bootstrap,
            "the broker keeps its port"
        );
        self.bootstrap = bootstrap;
        self.printed = printed;
        self.running = true;
    }

    /// Stops the broker with SIGKILL (no clean shutdown).
    pub fn kill(&mut self) {
        if self.running {
            let status = Command::new(broker_script())
                .arg("stop")
                .arg(&self.dir)
                .arg("--kill")
                .status()
                .expect("kafka/broker stop --kill");
            assert!(status.success(), "kafka/broker stop --kill");
            self.running = false;
        }
    }

    pub fn stop(&mut self) {
        if self.running {
            let status = Command::new(broker_script())
                .arg("stop")
                .arg(&self.dir)
                .status()
                .expect("kafka/broker stop");
            assert!(status.success(), "kafka/broker stop");
            self.running = false;
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if self.running {
            let _ = Command::new(broker_script())
                .arg("stop")
                .arg(&self.dir)
                .arg("--kill")
                .status();
        }
    }
}
