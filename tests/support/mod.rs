//! Shared helpers of the integration suites: a registry test double, the
//! `orderly` binary as a child process, and Kafka read-backs that return
//! exactly what is there so assertions are exact.

#![allow(dead_code)]

pub mod explain;
pub mod late_schema;
pub mod mock;
pub mod registry_double;
pub mod shipments;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// A secured broker's bootstrap address and the librdkafka settings the
/// tests' own clients add for it.
type SecuredBroker = (String, Vec<(String, String)>);

/// librdkafka settings the tests' own clients (admin, producers, readers)
/// add for a broker a test secured, by bootstrap address.
static SECURED: std::sync::Mutex<Vec<SecuredBroker>> = std::sync::Mutex::new(Vec::new());

/// Makes [`client`] add `settings` for `bootstrap` (a secured broker: the
/// test's own clients connect as its admin user).
pub fn secure_clients_of(bootstrap: &str, settings: Vec<(String, String)>) {
    if let Ok(mut secured) = SECURED.lock() {
        secured.retain(|(b, _)| b != bootstrap);
        secured.push((bootstrap.to_string(), settings));
    }
}

/// A client configuration for `bootstrap`, with its security settings when
/// a test secured it.
pub fn client(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    if let Ok(secured) = SECURED.lock() {
        for (_, settings) in secured.iter().filter(|(b, _)| b == bootstrap) {
            for (key, value) in settings {
                config.set(key, value);
            }
        }
    }
    config
}

pub fn orderly_bin() -> &'static str {
    env!("CARGO_BIN_EXE_orderly")
}

/// The client id a child `orderly` process names itself by in the group
/// (`orderly-<host>-<pid>`, as orderly's `kafka::client_id`).
pub fn client_id_of(child: &Child) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    format!("orderly-{}-{}", host.trim(), child.id())
}

/// A random suffix for topic and group names.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// Everything a child `orderly` needs: a config file and a store directory.
/// Its changelog topic is `<input topic>-changelog` (the mock-cluster tests
/// create it; on a broker the processor does), its output topic
/// `<input topic>-status` (the tests create it where they need it).
pub struct Instance {
    pub dir: tempfile::TempDir,
    pub config_path: PathBuf,
    pub store_path: PathBuf,
}

pub struct Setup<'a> {
    pub bootstrap: &'a str,
    pub registry_url: &'a str,
    pub group: &'a str,
    pub topic: &'a str,
    pub dlq_topic: &'a str,
    pub session_timeout_ms: u64,
    /// Lines for the `[kafka]` section (e.g. `group_protocol = "consumer"`).
    pub kafka_extra: &'a str,
    pub extra: &'a str,
}

impl Instance {
    pub fn new(setup: &Setup<'_>) -> Self {
        let mut dir = tempfile::tempdir().expect("tempdir");
        if std::env::var_os("ORDERLY_TEST_KEEP").is_some() {
            // To read a failed run's member logs and stores afterwards.
            dir.disable_cleanup(true);
            eprintln!("instance directory kept: {}", dir.path().display());
        }
        let store_path = dir.path().join("store");
        let config_path = dir.path().join("orderly.toml");
        let text = format!(
            "[kafka]\nbootstrap_servers = \"{}\"\ngroup_id = \"{}\"\ninput_topic = \"{}\"\ndlq_topic = \"{}\"\n\
             changelog_topic = \"{}-changelog\"\noutput_topic = \"{}-status\"\nsession_timeout_ms = {}\n{}\n[registry]\nurl = \"{}\"\n[store]\npath = \"{}\"\n\
             [http]\naddress = \"127.0.0.1:0\"\n[processing]\nshutdown_timeout_ms = {}\n{}\n",
            setup.bootstrap,
            setup.group,
            setup.topic,
            setup.dlq_topic,
            setup.topic,
            setup.topic,
            setup.session_timeout_ms,
            setup.kafka_extra,
            setup.registry_url,
            store_path.display(),
            setup.session_timeout_ms / 2,
            setup.extra,
        );
        std::fs::write(&config_path, text).expect("write config");
        Instance {
            dir,
            config_path,
            store_path,
        }
    }

    /// `orderly <args> --config <file>`, stdout and stderr appended to `log`.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(orderly_bin());
        cmd.args(args)
            .arg("--config")
            .arg(&self.config_path)
            .env_remove("ORDERLY_FAULT");
        cmd
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("orderly.log")
    }

    /// Starts `orderly run`, optionally with a fault point armed.
    pub fn spawn_run(&self, fault: Option<&str>) -> Child {
        self.spawn_run_logging(fault, "info,librdkafka=warn,rdkafka=warn")
    }

    /// [`Self::spawn_run`] with its own `RUST_LOG`.
    pub fn spawn_run_logging(&self, fault: Option<&str>, rust_log: &str) -> Child {
        self.spawn_run_env(fault, rust_log, &[])
    }

    /// [`Self::spawn_run`] with its own `RUST_LOG` and extra environment
    /// (`ORDERLY_*` overrides).
    pub fn spawn_run_env(
        &self,
        fault: Option<&str>,
        rust_log: &str,
        env: &[(&str, &str)],
    ) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("log file");
        let mut cmd = self.command(&["run"]);
        cmd.env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log clone"))
            .stderr(log);
        if let Some(fault) = fault {
            cmd.env("ORDERLY_FAULT", fault);
        }
        for (key, value) in env {
            cmd.env(key, value);
        }
        cmd.spawn().expect("spawn orderly run")
    }

    /// `orderly state stats --json` (the processor must be stopped).
    pub fn stats(&self) -> serde_json::Value {
        let out = self
            .command(&["state", "stats", "--json"])
            .output()
            .expect("run state stats");
        assert!(
            out.status.success(),
            "state stats failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("stats JSON")
    }

    /// `orderly state dump` as order_id -> state JSON.
    pub fn dump(&self) -> BTreeMap<String, serde_json::Value> {
        self.dump_keyed("order_id")
    }

    /// `orderly state dump` as key -> state JSON, each line's key read from
    /// its field `key_field` (`order_id` for orders, `sku` for stock).
    pub fn dump_keyed(&self, key_field: &str) -> BTreeMap<String, serde_json::Value> {
        let out = self
            .command(&["state", "dump"])
            .output()
            .expect("run state dump");
        assert!(
            out.status.success(),
            "state dump failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|line| {
                let v: serde_json::Value = serde_json::from_str(line).expect("dump line JSON");
                let key = v[key_field].as_str().expect(key_field).to_string();
                (key, v)
            })
            .collect()
    }

    /// How many runs have logged reaching the broker so far.
    pub fn connected_count(&self) -> usize {
        self.log().matches("connected to kafka").count()
    }

    /// Waits until a run started after `before` connections has reached the
    /// broker (its signal handlers are installed well before that).
    pub fn wait_ready(&self, before: usize) -> bool {
        wait_until(Duration::from_secs(60), || self.connected_count() > before)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The address the latest run's HTTP endpoint listens on (each test
    /// instance binds port 0), once it has logged it.
    pub fn http_address(&self) -> Option<String> {
        let log = self.log();
        let line = log
            .lines()
            .rev()
            .find(|l| l.contains("http endpoint listening"))?;
        // Text logs say address=HOST:PORT, JSON logs "address":"HOST:PORT".
        let (at, end) = match line.find("address=") {
            Some(at) => (at + "address=".len(), ' '),
            None => (line.find("\"address\":\"")? + "\"address\":\"".len(), '"'),
        };
        Some(line[at..].split(end).next()?.trim().to_string())
    }

    /// Waits for the latest run started after `before` endpoint starts to
    /// log its HTTP address.
    pub fn wait_http(&self, before: usize) -> String {
        assert!(
            wait_until(Duration::from_secs(60), || self.http_starts() > before),
            "no http endpoint\n{}",
            self.log()
        );
        self.http_address().expect("http address in the log")
    }

    /// How many runs have started their HTTP endpoint so far.
    pub fn http_starts(&self) -> usize {
        self.log().matches("http endpoint listening").count()
    }
}

/// Kills every child it watches when dropped, so a failing test leaves no
/// `orderly` process behind.
#[derive(Default)]
pub struct Reaper(std::sync::Mutex<Vec<u32>>);

impl Reaper {
    pub fn watch(&self, child: Child) -> Child {
        if let Ok(mut pids) = self.0.lock() {
            pids.push(child.id());
        }
        child
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        let pids = self.0.lock().map(|p| p.clone()).unwrap_or_default();
        for pid in pids {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg(pid.to_string())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Sends SIGTERM (or SIGKILL) to a child.
pub fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(child.id().to_string())
        .status();
}

/// Waits for a child to exit, up to `limit`; kills it past that.
pub fn wait_exit(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// The group's committed offsets for `partitions` of `topic` (-1 when none).
/// Read `read_uncommitted`: a read_committed consumer's OffsetFetch waits
/// for pending transactional offset commits (exactly_once commits one every
/// write-out) and times out; this one reads the last committed ones.
pub fn committed(bootstrap: &str, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = client(bootstrap)
        .set("isolation.level", "read_uncommitted")
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition(topic, p);
    }
    let result = match consumer.committed_offsets(tpl, Duration::from_secs(10)) {
        Ok(list) => list
            .elements()
            .iter()
            .map(|e| {
                (
                    e.partition(),
                    if let Offset::Offset(o) = e.offset() {
                        o
                    } else {
                        -1
                    },
                )
            })
            .collect(),
        Err(_) => (0..partitions).map(|p| (p, -1)).collect(),
    };
    result
}

/// Polls `check` every 200 ms until it is true or `limit` passes.
pub fn wait_until(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    check()
}

/// One dead letter read back: its headers by name.
#[derive(Debug, Clone)]
pub struct Letter {
    pub offset: i64,
    pub headers: BTreeMap<String, String>,
    pub key: Option<Vec<u8>>,
    pub payload: Option<Vec<u8>>,
}

/// Every record of a one-partition topic, from the beginning to its end.
pub fn read_all(bootstrap: &str, topic: &str) -> Vec<Letter> {
    let consumer: BaseConsumer = client(bootstrap).create().expect("consumer");
    let (low, high) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks");
    read_range(bootstrap, topic, 0, low, high)
}

/// The records of `partition` of `topic` in `[from, to)` (fewer if they do
/// not all arrive within 30 s).
pub fn read_range(bootstrap: &str, topic: &str, partition: i32, from: i64, to: i64) -> Vec<Letter> {
    let consumer: BaseConsumer = client(bootstrap)
        .set("group.id", unique("reader"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from))
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    // The end is reached by position, not by count: transaction markers
    // (exactly_once) and compaction take offsets that hold no record.
    let position = |consumer: &BaseConsumer| -> i64 {
        consumer
            .position()
            .ok()
            .and_then(|list| list.find_partition(topic, partition).map(|e| e.offset()))
            .and_then(|o| {
                if let Offset::Offset(o) = o {
                    Some(o)
                } else {
                    None
                }
            })
            .unwrap_or(-1)
    };
    while (out.len() as i64) < to - from && Instant::now() < deadline {
        let polled = consumer.poll(Duration::from_millis(200));
        if polled.is_none() && position(&consumer) >= to {
            break;
        }
        if let Some(Ok(m)) = polled {
            if m.offset() >= to {
                break;
            }
            let mut headers = BTreeMap::new();
            if let Some(h) = m.headers() {
                for header in h.iter() {
                    headers.insert(
                        header.key.to_string(),
                        header
                            .value
                            .map(|v| String::from_utf8_lossy(v).into_owned())
                            .unwrap_or_default(),
                    );
                }
            }
            out.push(Letter {
                offset: m.offset(),
                headers,
                key: m.key().map(<[u8]>::to_vec),
                payload: m.payload().map(<[u8]>::to_vec),
            });
        }
    }
    out
}

/// Creates topics through the Kafka admin API (works on any broker).
pub fn create_topics(bootstrap: &str, topics: &[(&str, i32)]) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> =
        client(bootstrap).create().expect("admin client");
    let new: Vec<NewTopic<'_>> = topics
        .iter()
        // -1: the broker's default.replication.factor (1 on one node, 3 on
        // kafka/broker's three-node cluster).
        .map(|(name, n)| NewTopic::new(name, *n, TopicReplication::Fixed(-1)))
        .collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let results = runtime
        .block_on(admin.create_topics(
            &new,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        ))
        .expect("create topics");
    for result in results {
        if let Err((topic, code)) = result {
            assert_eq!(
                code,
                rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists,
                "create {topic}: {code:?}"
            );
        }
    }
    // Wait until metadata shows every partition.
    let consumer: BaseConsumer = client(bootstrap).create().expect("consumer");
    for (name, n) in topics {
        let ok = wait_until(Duration::from_secs(30), || {
            consumer
                .fetch_metadata(Some(name), Duration::from_secs(5))
                .map(|m| {
                    m.topics()
                        .first()
                        .is_some_and(|t| t.error().is_none() && t.partitions().len() == *n as usize)
                })
                .unwrap_or(false)
        });
        assert!(ok, "topic {name} has {n} partitions");
    }
}

/// End offsets (high watermarks) of `partitions` of `topic`.
pub fn end_offsets(bootstrap: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = client(bootstrap).create().expect("consumer");
    (0..partitions)
        .map(|p| {
            (
                p,
                consumer
                    .fetch_watermarks(topic, p, Duration::from_secs(10))
                    .expect("watermarks")
                    .1,
            )
        })
        .collect()
}

/// The sum of `topic`'s end offsets over its `partitions`: the records it
/// was ever written (transaction markers included).
pub fn end_offsets_total(bootstrap: &str, topic: &str, partitions: i32) -> i64 {
    end_offsets(bootstrap, topic, partitions).values().sum()
}

/// A child process's output (stdout or stderr) as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts that a command that ran exited 0; else fails naming `what`,
/// with its exit status and everything it printed.
pub fn assert_succeeded(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({})\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// Runs `command` to its end and asserts it exited 0 (as
/// [`assert_succeeded`]); returns its output for the checks that read it.
pub fn run_ok(command: &mut Command, what: &str) -> Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{what} did not start: {e}"));
    assert_succeeded(&out, what);
    out
}
