//! The end-to-end suite: the real `orderly` binary as child processes
//! against a real Kafka-protocol broker process, over TCP.
//!
//! Broker-agnostic: it takes the bootstrap address from
//! `ORDERLY_E2E_BOOTSTRAP` (nisshi in CI; Apache Kafka or Redpanda on a
//! laptop). The broker-restart test needs a broker it can stop and start:
//! `ORDERLY_E2E_NISSHI` names the nisshi binary, and the test runs its own
//! instance with sqlite storage. `.ci/run` sets both and turns on the `e2e`
//! feature; without the feature these tests are not compiled, and with it
//! but without the variables they fail and say how to run them.
#![cfg(feature = "e2e")]

mod support;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rand::Rng;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;

use orderly::codec::Encoder;
use orderly::event::StateView;
use orderly::load::produce_planned;
use orderly::processor::{HEADER_OFFSET, HEADER_PARTITION, HEADER_TOPIC};
use orderly::registry::Registry;
use orderly::workload::{plan, Expectation, PlannedRecord, WorkloadSpec};
use support::registry_double::RegistryDouble;
use support::{committed, create_topics, end_offsets, read_all, signal, unique, wait_exit, wait_until, Instance, Setup};

const PARTITIONS: i32 = 4;
const SESSION_TIMEOUT_MS: u64 = 6000;

fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set. The end-to-end suite needs a real broker: run `bash .ci/run`, which installs and \
             starts nisshi and sets ORDERLY_E2E_BOOTSTRAP and ORDERLY_E2E_NISSHI, or start a Kafka-compatible broker \
             yourself and run `ORDERLY_E2E_BOOTSTRAP=host:port cargo test --features e2e --test e2e`"
        )
    })
}

struct World {
    bootstrap: String,
    registry: RegistryDouble,
    runtime: tokio::runtime::Runtime,
    topic: String,
    dlq: String,
    group: String,
}

impl World {
    fn new(bootstrap: String) -> Self {
        let topic = unique("orders");
        let dlq = unique("orders-dlq");
        create_topics(&bootstrap, &[(&topic, PARTITIONS), (&dlq, 1)]);
        World {
            bootstrap,
            registry: RegistryDouble::start(),
            runtime: tokio::runtime::Runtime::new().expect("runtime"),
            topic,
            dlq,
            group: unique("group"),
        }
    }

    fn instance(&self, extra: &str) -> Instance {
        Instance::new(&Setup {
            bootstrap: &self.bootstrap,
            registry_url: &self.registry.url,
            group: &self.group,
            topic: &self.topic,
            dlq_topic: &self.dlq,
            session_timeout_ms: SESSION_TIMEOUT_MS,
            extra,
        })
    }

    fn plan(&self, spec: &WorkloadSpec) -> (Vec<PlannedRecord>, Expectation) {
        let registry = Registry::http(&self.registry.url, Duration::from_secs(5)).expect("registry client");
        let encoder = self.runtime.block_on(Encoder::register(&registry, &self.topic)).expect("register schemas");
        plan(spec, &encoder).expect("plan")
    }

    fn producer(&self) -> FutureProducer {
        ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .create()
            .expect("producer")
    }

    fn produce(&self, records: &[PlannedRecord]) {
        self.runtime.block_on(produce_planned(&self.producer(), &self.topic, records)).expect("produce");
    }

    fn committed(&self) -> BTreeMap<i32, i64> {
        committed(&self.bootstrap, &self.group, &self.topic, PARTITIONS)
    }

    fn committed_total(&self) -> i64 {
        self.committed().values().filter(|o| **o > 0).sum()
    }

    /// Runs a clean instance until the group's committed offsets reach the
    /// topic's end offsets, then stops it with SIGTERM (must exit 0).
    fn finish(&self, instance: &Instance) -> Duration {
        let ends = end_offsets(&self.bootstrap, &self.topic, PARTITIONS);
        let before = instance.connected_count();
        let mut child = instance.spawn_run(None);
        let started = Instant::now();
        assert!(instance.wait_ready(before), "never connected\n{}", tail(&instance.log()));
        let caught_up = wait_until(Duration::from_secs(300), || self.committed() == ends);
        let took = started.elapsed();
        signal(&child, "TERM");
        let status = wait_exit(&mut child, Duration::from_secs(30));
        assert!(caught_up, "committed {:?} never reached end offsets {ends:?}\n{}", self.committed(), tail(&instance.log()));
        assert!(status.is_some_and(|s| s.success()), "SIGTERM exits 0: {status:?}\n{}", tail(&instance.log()));
        took
    }

    /// The final checks: exact counters, every order's state, committed
    /// offsets at the end, dead letters for exactly the poison records.
    fn verify(&self, instance: &Instance, expected: &Expectation) -> usize {
        let ends = end_offsets(&self.bootstrap, &self.topic, PARTITIONS);
        assert_eq!(self.committed(), ends, "committed offsets equal end offsets");
        let stats = instance.stats();
        let totals = &stats["totals"];
        let consumed: i64 = ends.values().sum();
        assert_eq!(totals["consumed"].as_u64(), Some(consumed as u64), "{stats}");
        assert_eq!(totals["applied"].as_u64(), Some(expected.applied), "{stats}");
        assert_eq!(totals["duplicates"].as_u64(), Some(expected.duplicates), "{stats}");
        assert_eq!(totals["stale"].as_u64(), Some(expected.stale), "{stats}");
        assert_eq!(totals["dead_lettered"].as_u64(), Some(expected.dead_lettered), "{stats}");
        let dump = instance.dump();
        let mut mismatches = 0usize;
        for (order_id, want) in &expected.states {
            let got: Option<StateView> = dump.get(order_id).map(|v| serde_json::from_value(v.clone()).expect("state JSON"));
            if got.as_ref() != Some(want) {
                mismatches += 1;
                if mismatches < 5 {
                    eprintln!("mismatch {order_id}: got {got:?}, want {want:?}");
                }
            }
        }
        mismatches += dump.len().saturating_sub(expected.states.len());
        assert_eq!(mismatches, 0, "final state mismatches");
        let letters = read_all(&self.bootstrap, &self.dlq);
        let mut sources: Vec<(String, String, String)> = letters
            .iter()
            .map(|l| (l.headers[HEADER_TOPIC].clone(), l.headers[HEADER_PARTITION].clone(), l.headers[HEADER_OFFSET].clone()))
            .collect();
        assert!(sources.iter().all(|(topic, _, _)| *topic == self.topic));
        sources.sort();
        sources.dedup();
        assert_eq!(sources.len() as u64, expected.dead_lettered, "each poison record dead-lettered at least once, nothing else");
        mismatches
    }
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// 100,000+ events over 4 partitions; the processor is killed with SIGKILL
/// at random moments at least 20 times while it works, and aborted at each
/// chosen crash point; restarted each time. The end state is exact.
#[test]
fn crash_drill() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let spec = WorkloadSpec { orders: 33_000, poison_rate: 0.002, seed: 2026, ..Default::default() };
    let (records, expected) = world.plan(&spec);
    assert!(records.len() >= 100_000, "{} records", records.len());
    // Frequent write-outs, so the crash points and kills land between many
    // of them.
    let instance = world.instance("batch_max_records = 500\ncommit_interval_ms = 20");
    let drill_started = Instant::now();

    // Chosen crash points first, then random SIGKILLs; records are produced
    // in chunks while the processor runs, so kills land mid-work.
    let faults = ["after_dlq:1", "after_batch:2", "after_flush:2", "after_batch:5", "after_flush:4"];
    let kills = 22;
    let cycles = faults.len() + kills;
    let chunk = records.len().div_ceil(cycles);
    let mut chunks = records.chunks(chunk);
    let mut rng = rand::thread_rng();
    let (mut sigkills, mut mid_work_kills, mut aborts, mut restarts) = (0, 0, 0, 0);
    let mut produced = 0i64;
    for cycle in 0..cycles {
        let before = world.committed_total();
        let fault = faults.get(cycle).copied();
        let mut child = instance.spawn_run(fault);
        restarts += 1;
        // A SIGKILL cycle gets half its chunk before the kill is armed and
        // half just before it, so the kill lands while records are in flight.
        let part = chunks.next().unwrap_or(&[]);
        let (now, later) = if fault.is_some() { (part, &part[..0]) } else { part.split_at(part.len() / 2) };
        world.produce(now);
        produced += now.len() as i64;
        match fault {
            Some(fault) => {
                let status = wait_exit(&mut child, Duration::from_secs(120));
                assert!(status.is_some_and(|s| !s.success()), "{fault}: aborted\n{}", tail(&instance.log()));
                aborts += 1;
            }
            None => {
                // Kill once it is demonstrably working, at a random moment.
                let progressed = wait_until(Duration::from_secs(60), || world.committed_total() > before);
                assert!(progressed, "cycle {cycle}: no progress\n{}", tail(&instance.log()));
                // The rest of the chunk streams in small pieces; the kill
                // lands at a random moment while it is still arriving, so it
                // interrupts a processor with work in flight.
                let delay = Duration::from_millis(rng.gen_range(0..250));
                let in_flight = std::thread::scope(|scope| {
                    let feeding = scope.spawn(|| {
                        for piece in later.chunks(later.len().div_ceil(10).max(1)) {
                            world.produce(piece);
                            std::thread::sleep(Duration::from_millis(30));
                        }
                    });
                    std::thread::sleep(delay);
                    let in_flight = !feeding.is_finished() || world.committed_total() < produced + later.len() as i64;
                    signal(&child, "KILL");
                    feeding.join().expect("feeding thread");
                    in_flight
                });
                produced += later.len() as i64;
                let status = wait_exit(&mut child, Duration::from_secs(10));
                assert!(status.is_some(), "SIGKILL ends the process");
                sigkills += 1;
                if in_flight {
                    mid_work_kills += 1;
                }
            }
        }
        eprintln!("cycle {cycle}: {} at {:.1} s, committed {}", fault.unwrap_or("SIGKILL"), drill_started.elapsed().as_secs_f64(), world.committed_total());
    }
    for part in chunks {
        world.produce(part);
    }
    let finish = world.finish(&instance);
    restarts += 1;
    let mismatches = world.verify(&instance, &expected);
    let aborted_points = instance.log().matches("fault injection: aborting at").count();
    eprintln!(
        "crash drill: {} events ({} applied, {} duplicates, {} stale, {} dead-lettered), {sigkills} SIGKILLs ({mid_work_kills} with work left), \
         {aborts} aborts at chosen points ({aborted_points} logged), {restarts} starts, {mismatches} mismatches, \
         final catch-up {:.1} s, drill {:.1} s",
        records.len(),
        expected.applied,
        expected.duplicates,
        expected.stale,
        expected.dead_lettered,
        finish.as_secs_f64(),
        drill_started.elapsed().as_secs_f64()
    );
    assert!(mid_work_kills >= 20, "only {mid_work_kills} of {sigkills} SIGKILLs landed while records were left to process");
    assert_eq!(aborted_points, faults.len());
}

/// SIGTERM during load: exits 0 within the configured deadline, and what it
/// processed is flushed and committed (the store's checkpoints equal the
/// group's committed offsets).
#[test]
fn sigterm_during_load_drains_flushes_and_commits() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let (records, _) = world.plan(&WorkloadSpec { orders: 30_000, seed: 5, ..Default::default() });
    let instance = world.instance("batch_max_records = 200");
    let mut child = instance.spawn_run(None);
    // The load arrives over several seconds while the processor runs, so the
    // signal lands mid-load.
    let (took, status) = std::thread::scope(|scope| {
        let producing = scope.spawn(|| {
            for chunk in records.chunks(2_000) {
                world.produce(chunk);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let progressed = wait_until(Duration::from_secs(60), || world.committed_total() > 0);
        assert!(progressed, "no progress\n{}", tail(&instance.log()));
        let signalled = Instant::now();
        signal(&child, "TERM");
        let status = wait_exit(&mut child, Duration::from_secs(30));
        let took = signalled.elapsed();
        producing.join().expect("producer thread");
        (took, status)
    });
    assert!(status.is_some_and(|s| s.success()), "exit 0: {status:?}\n{}", tail(&instance.log()));
    let deadline = Duration::from_millis(SESSION_TIMEOUT_MS / 2);
    assert!(took < deadline + Duration::from_secs(2), "stopped in {took:?}, deadline {deadline:?}");
    let stats = instance.stats();
    let committed = world.committed();
    let mut processed = 0;
    for p in stats["partitions"].as_array().expect("partitions") {
        let partition = p["partition"].as_i64().unwrap() as i32;
        let next = p["next_offset"].as_i64().unwrap();
        // A partition that processed nothing yet has no committed offset.
        let committed = committed.get(&partition).copied().filter(|o| *o >= 0).unwrap_or(0);
        assert_eq!(committed, next, "partition {partition}: committed equals the durable checkpoint");
        processed += next;
    }
    eprintln!("sigterm: stopped in {took:?} after processing {processed} of {} records", records.len());
    assert!((processed as usize) < records.len(), "the signal landed during the load");
}

/// A broker (sqlite storage) stopped for several seconds mid-load and
/// started again: the processor logs the outage, keeps its state, resumes,
/// and the final checks hold.
#[test]
fn broker_restart_mid_load() {
    let nisshi = required_env("ORDERLY_E2E_NISSHI");
    let data = tempfile::tempdir().expect("tempdir");
    let mut broker = Broker::start(PathBuf::from(nisshi), data.path().join("broker.db"));
    let world = World::new(broker.bootstrap.clone());
    let (records, expected) = world.plan(&WorkloadSpec { orders: 12_000, poison_rate: 0.002, seed: 99, ..Default::default() });
    let half = records.len() / 2;
    world.produce(&records[..half]);
    let instance = world.instance("batch_max_records = 200");
    let mut child = instance.spawn_run(None);
    let progressed = wait_until(Duration::from_secs(60), || world.committed_total() > 0);
    assert!(progressed, "no progress\n{}", tail(&instance.log()));

    broker.stop();
    std::thread::sleep(Duration::from_secs(6));
    assert!(child.try_wait().expect("try_wait").is_none(), "processor survives the outage\n{}", tail(&instance.log()));
    broker.restart();
    world.produce(&records[half..]);
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let caught_up = wait_until(Duration::from_secs(240), || world.committed() == ends);
    signal(&child, "TERM");
    let status = wait_exit(&mut child, Duration::from_secs(30));
    let log = instance.log();
    assert!(caught_up, "caught up after the restart\n{}", tail(&log));
    assert!(status.is_some_and(|s| s.success()), "exit 0: {status:?}\n{}", tail(&log));
    assert!(
        log.contains("kafka client error") || log.contains("consumer error") || log.contains("offset commit failed"),
        "the outage is logged\n{}",
        tail(&log)
    );
    world.verify(&instance, &expected);
}

/// A nisshi broker this test owns, on sqlite storage, so it can be stopped
/// and started with its data intact.
struct Broker {
    binary: PathBuf,
    db: PathBuf,
    port: u16,
    bootstrap: String,
    child: Option<Child>,
}

impl Broker {
    fn start(binary: PathBuf, db: PathBuf) -> Self {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port();
        let mut broker = Broker { binary, db, port, bootstrap: format!("127.0.0.1:{port}"), child: None };
        broker.restart();
        broker
    }

    fn restart(&mut self) {
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.db.with_extension("log"))
            .expect("broker log");
        let child = Command::new(&self.binary)
            .args(["broker", "--listener-url", &url, "--advertised-listener-url", &url])
            // nisshi reads the path after sqlite:// relative to its working directory.
            .current_dir(self.db.parent().expect("db dir"))
            .args(["--storage-engine", &format!("sqlite://{}", self.db.file_name().expect("db file").to_string_lossy())])
            .args(["--group-initial-rebalance-delay", "200ms"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start nisshi");
        self.child = Some(child);
        let up = wait_until(Duration::from_secs(30), || std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok());
        assert!(up, "nisshi listens on {}", self.port);
    }

    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, "TERM");
            if wait_exit(&mut child, Duration::from_secs(10)).is_none() {
                let _ = child.kill();
            }
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
