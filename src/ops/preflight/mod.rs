//! Pre-flight checks: what `orderly config check` reports, one [`Check`] per
//! line, and what `run` can verify before it joins the group. Each check says
//! what it found or, when it fails, what to do.
//!
//! Order of [`check_all`]: store directory, HTTP address, broker, input
//! topic, dead-letter topic, changelog, output topic, schema registry. It stops at the first failure (the later checks
//! depend on the earlier ones, and the operator fixes one thing at a time).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::ClientConfig;

use crate::config::Config;
use crate::error_chain::error_text;
use crate::ops::program;

mod probe;

use probe::{metadata, topic_partitions, topic_shape, with_last_error, ProbeContext};

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    /// What was checked: "store", "broker", "input topic", "dlq topic", "changelog",
    /// "registry".
    pub name: &'static str,
    pub ok: bool,
    /// What was found; on a failure, also what to do.
    pub(crate) detail: String,
}

impl Check {
    pub(crate) fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Check {
            name,
            ok: true,
            detail: detail.into(),
        }
    }

    pub(crate) fn fail(name: &'static str, detail: impl Into<String>) -> Self {
        Check {
            name,
            ok: false,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let status = if self.ok { "ok" } else { "FAIL" };
        write!(f, "{status:<5}{:<13}{}", self.name, self.detail)
    }
}

/// What the checks need of the entity the binary processes: the field its
/// key is (for the endpoint's `/state/{key}`) and its reader schema (for
/// the schema guard; `None`: any writer schema is read).
pub(crate) struct Checked<'a> {
    pub(crate) key_field: &'a str,
    pub(crate) reader: Option<&'a apache_avro::Schema>,
}

/// Runs every check in order and stops after the first failure, which is
/// then the last element, handing each check to `report` as soon as it is
/// done.
pub(crate) async fn check_all(
    config: &Config,
    entity: &Checked<'_>,
    timeout: Duration,
    mut report: impl FnMut(&Check),
) -> Vec<Check> {
    let mut checks = Vec::new();
    let mut push = |check: Check, checks: &mut Vec<Check>| {
        report(&check);
        let ok = check.ok;
        checks.push(check);
        ok
    };
    let _ = push(check_store(config), &mut checks)
        && push(check_http(config, entity.key_field), &mut checks)
        && push(check_security(config), &mut checks)
        && push(check_broker(config, timeout).await, &mut checks)
        && push(check_input_topic(config, timeout).await, &mut checks)
        && push(check_group(config, timeout).await, &mut checks)
        && push(check_dlq_topic(config, timeout).await, &mut checks)
        && push(check_changelog_topic(config, timeout).await, &mut checks)
        && push(check_output_topic(config, timeout).await, &mut checks)
        && push(check_acls(config, timeout).await, &mut checks)
        && push(check_registry(config).await, &mut checks)
        && push(check_schemas(config, entity.reader).await, &mut checks);
    checks
}

/// `path` made absolute against the current directory (without resolving
/// links, and without requiring it to exist).
pub(crate) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// True when `path` holds a sled store: sled 0.34 writes `conf` and `db`
/// into its directory when it creates the store.
pub fn store_present(path: &Path) -> bool {
    path.join("conf").is_file() && path.join("db").is_file()
}

/// `store.path`: an existing store, or a place where `run` can create one.
pub(crate) fn check_store(config: &Config) -> Check {
    let path = absolute(&config.store.path);
    let shown = path.display();
    if store_present(&path) {
        return Check::ok("store", format!("existing store at {shown}"));
    }
    if path.is_file() {
        return Check::fail(
            "store",
            format!("{shown} is a file: set store.path to a directory"),
        );
    }
    match std::fs::read_dir(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Check::ok(
            "store",
            format!(
                "no store yet at {shown}; `{} run` creates it",
                program::name()
            ),
        ),
        Err(e) => Check::fail(
            "store",
            format!("cannot read {shown}: {e}: fix its permissions or set store.path"),
        ),
        Ok(mut entries) => {
            if entries.next().is_none() {
                Check::ok(
                    "store",
                    format!(
                        "{shown} is empty; `{} run` creates the store there",
                        program::name()
                    ),
                )
            } else {
                Check::fail(
                    "store",
                    format!(
                        "{shown} holds files but no store (no sled `conf` and `db`): set store.path to a store or to a new directory"
                    ),
                )
            }
        }
    }
}

/// The HTTP endpoint's address can be bound (nothing else listens there).
pub(crate) fn check_http(config: &Config, key_field: &str) -> Check {
    match config.http_address() {
        Ok(None) => Check::ok("http", "off (http.address = \"\")"),
        // Bound as `run` binds it, then released.
        Ok(Some(address)) => match crate::ops::http::bind(address) {
            Ok(_) => Check::ok(
                "http",
                format!("{address} is free: /metrics, /healthz, /readyz, /state/{{{key_field}}}, / will be served there"),
            ),
            Err(e) => Check::fail("http", e.to_string()),
        },
        Err(e) => Check::fail("http", e.to_string()),
    }
}

/// The security protocol and SASL mechanism configured are ones this
/// build's librdkafka has (its `builtin.features`).
pub(crate) fn check_security(config: &Config) -> Check {
    let setting = |name: &str| {
        config
            .librdkafka_passthrough()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value)
    };
    let protocol = setting("security.protocol")
        .unwrap_or_else(|| "plaintext".into())
        .to_ascii_uppercase();
    let mechanism = setting("sasl.mechanism")
        .or_else(|| setting("sasl.mechanisms"))
        .unwrap_or_else(|| "GSSAPI".into())
        .to_ascii_uppercase();
    let features = ClientConfig::new()
        .create_native_config()
        .ok()
        .and_then(|native| native.get("builtin.features").ok())
        .unwrap_or_default();
    let has = |feature: &str| features.split(',').any(|f| f == feature);
    let mut needed = Vec::new();
    if protocol.contains("SSL") {
        needed.push("ssl");
    }
    if protocol.starts_with("SASL") {
        needed.push(match mechanism.as_str() {
            "SCRAM-SHA-256" | "SCRAM-SHA-512" => "sasl_scram",
            "OAUTHBEARER" => "sasl_oauthbearer",
            "PLAIN" => "sasl_plain",
            _ => "sasl_gssapi",
        });
    }
    let version = rdkafka::util::get_rdkafka_version().1;
    let what = if protocol.starts_with("SASL") {
        format!("{protocol}, {mechanism}")
    } else {
        protocol.clone()
    };
    match needed.iter().find(|f| !has(f)) {
        None => Check::ok("security", format!("{what} (librdkafka {version}, built with {features})")),
        Some(missing) => Check::fail(
            "security",
            format!(
                "{what} needs librdkafka's {missing}, which this build lacks (librdkafka {version}, built with {features}); \
                 choose another security.protocol or sasl.mechanism"
            ),
        ),
    }
}

/// The broker answers a metadata request within `timeout`.
pub(crate) async fn check_broker(config: &Config, timeout: Duration) -> Check {
    let servers = config.kafka.bootstrap_servers.clone();
    let started = Instant::now();
    match metadata(config, None, timeout).await {
        Ok(meta) => Check::ok(
            "broker",
            format!(
                "{servers}: {} broker(s) answered metadata in {} ms",
                meta.brokers().len(),
                started.elapsed().as_millis()
            ),
        ),
        Err(e) => match crate::kafka::acl::AclError::from_failure(config, e.clone()) {
            refused if refused.is_refusal() => Check::fail("broker", refused.to_string()),
            _ => Check::fail(
                "broker",
                format!(
                    "no metadata from {servers} within {} ms ({e}): check kafka.bootstrap_servers, that the brokers run \
                     and are reachable from here, and the security settings in [kafka.librdkafka]",
                    timeout.as_millis()
                ),
            ),
        },
    }
}

/// The principal may perform every operation `run` needs on the topics
/// and the group ([`crate::kafka::acl`]).
pub(crate) async fn check_acls(config: &Config, timeout: Duration) -> Check {
    let checked = config.clone();
    let found =
        tokio::task::spawn_blocking(move || crate::kafka::acl::check(&checked, timeout)).await;
    match found {
        Ok(Ok(missing)) if missing.is_empty() => Check::ok(
            "acls",
            format!(
                "{} may perform every operation run needs on the topics and the group (the transactional ids are \
                 checked as each partition starts)",
                crate::kafka::acl::principal(config)
            ),
        ),
        Ok(Ok(missing)) => Check::fail(
            "acls",
            crate::kafka::acl::AclError::Missing {
                principal: crate::kafka::acl::principal(config),
                bootstrap: config.kafka.bootstrap_servers.clone(),
                missing,
            }
            .to_string(),
        ),
        Ok(Err(e @ crate::kafka::acl::AclError::Unsupported { .. })) => Check::ok("acls", e.to_string()),
        Ok(Err(e)) => Check::fail("acls", e.to_string()),
        Err(e) => Check::fail("acls", format!("acl check task failed: {e}")),
    }
}

/// The input topic exists; reports its partition count.
pub(crate) async fn check_input_topic(config: &Config, timeout: Duration) -> Check {
    let topic = &config.kafka.input_topic;
    let missing = format!(
        "{topic} does not exist: create it (one partition per instance you may run, or more) or set kafka.input_topic"
    );
    let operations = "Read --operation Describe";
    check_topic_exists(config, timeout, "input topic", topic, missing, operations).await
}

/// The check `name` of a topic that must exist: its partition count; else
/// `missing` when it does not exist, or why it cannot be described (with
/// the grant of `operations` when an ACL is what lacks).
async fn check_topic_exists(
    config: &Config,
    timeout: Duration,
    name: &'static str,
    topic: &str,
    missing: String,
    operations: &str,
) -> Check {
    match topic_partitions(config, topic, timeout).await {
        Ok(Some(n)) => Check::ok(name, format!("{topic}: {n} partition(s)")),
        Ok(None) => Check::fail(name, missing),
        Err(e) => Check::fail(
            name,
            format!(
                "cannot describe {topic}: {e}{}",
                acl_hint(config, &e, operations, &format!("--topic {topic}"))
            ),
        ),
    }
}

/// The consumer group may be used: its committed offsets of the input
/// topic can be read (Describe on the group; `run` also needs Read).
pub(crate) async fn check_group(config: &Config, timeout: Duration) -> Check {
    let group = config.kafka.group_id.clone();
    let partitions = match input_partitions(config, timeout, "group").await {
        Ok(n) => n,
        Err(failed) => return failed,
    };
    let mut client = crate::kafka::metadata_client_config(config);
    // read_uncommitted: a read_committed OffsetFetch waits for pending
    // transactional offset commits (exactly_once after a crash).
    client
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_uncommitted");
    let topic = config.kafka.input_topic.clone();
    let fetched = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer<ProbeContext> = client
            .create_with_context(ProbeContext::default())
            .map_err(|e| error_text(&e))?;
        let mut tpl = rdkafka::TopicPartitionList::with_capacity(partitions);
        for partition in 0..partitions {
            tpl.add_partition(&topic, partition as i32);
        }
        // A group's coordinator that is still loading (a fresh broker, or
        // the first use of the offsets topic) answers "not coordinator" for
        // a moment: asked again until the timeout.
        let deadline = Instant::now() + timeout;
        loop {
            match consumer.committed_offsets(tpl.clone(), timeout) {
                Ok(committed) => {
                    let count = committed
                        .elements()
                        .iter()
                        .filter(|e| matches!(e.offset(), rdkafka::Offset::Offset(_)))
                        .count();
                    return Ok::<_, String>(count);
                }
                Err(e) if coordinator_not_ready(&e) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                Err(e) => {
                    // The coordinator lookup's refusal (an ACL) comes as a
                    // client error event, the call itself only times out.
                    return Err(with_last_error(&consumer, &e));
                }
            }
        }
    })
    .await;
    match fetched {
        Ok(Ok(count)) => Check::ok(
            "group",
            format!("{group}: committed offsets of {count} of {partitions} partition(s)"),
        ),
        Ok(Err(text)) => {
            let hint = acl_hint(
                config,
                &text,
                "Read --operation Describe --resource-pattern-type prefixed",
                &format!("--group {group}"),
            );
            Check::fail(
                "group",
                format!("cannot read the committed offsets of group {group}: {text}{hint}"),
            )
        }
        Err(e) => Check::fail("group", format!("group check task failed: {e}")),
    }
}

/// A coordinator that is still being chosen or loading its state.
pub(crate) fn coordinator_not_ready(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::NotCoordinator
                | RDKafkaErrorCode::CoordinatorLoadInProgress
                | RDKafkaErrorCode::CoordinatorNotAvailable
        )
    )
}

/// When `error` is an authorization failure: the ACL that grants
/// `operations` on `resource` to the configured principal, as a
/// `kafka-acls` command (docs/operating.md, "A secured cluster", lists
/// them all).
fn acl_hint(config: &Config, error: &str, operations: &str, resource: &str) -> String {
    if !error.to_ascii_lowercase().contains("authorization") {
        return String::new();
    }
    let principal = crate::kafka::acl::principal(config);
    format!(
        ". The principal lacks an ACL; grant it with: kafka-acls.sh --bootstrap-server {} --command-config <admin.properties> \
         --add --allow-principal {principal} --operation {operations} {resource} (docs/operating.md, \"A secured cluster\")",
        config.kafka.bootstrap_servers
    )
}

/// The dead-letter topic exists; if not, says how to create it.
pub(crate) async fn check_dlq_topic(config: &Config, timeout: Duration) -> Check {
    let topic = &config.kafka.dlq_topic;
    let missing = format!(
        "{topic} does not exist: create it before `{} run` (poison records go there), e.g. \
         kafka-topics.sh --bootstrap-server {} --create --topic {topic} --partitions 1; or set kafka.dlq_topic",
        program::name(),
        config.kafka.bootstrap_servers
    );
    let operations = "Write --operation Describe --operation Read";
    check_topic_exists(config, timeout, "dlq topic", topic, missing, operations).await
}

/// The changelog topic: off, present with the input topic's partition
/// count, or missing (then `run` creates it).
pub(crate) async fn check_changelog_topic(config: &Config, timeout: Duration) -> Check {
    let off = "off (kafka.changelog_topic = \"\"): run a single instance only";
    let topic = config.changelog_topic();
    let (topic, input) = match optional_topic(config, timeout, "changelog", topic, off).await {
        Ok(both) => both,
        Err(answer) => return answer,
    };
    let shape = topic_shape(config, &topic, timeout).await;
    let brokers = shape.as_ref().map_or(0, |s| s.brokers);
    let few = |replicas: usize| {
        if brokers > 1 && replicas < 2 {
            format!(
                "; warning: replication factor {replicas} on a cluster of {brokers} brokers: losing one broker loses \
                 changelog partitions, and Kafka 4.3/4.4 can then lose a transaction marker (KAFKA-20734, \
                 docs/operating.md); use 3 (kafka.changelog_replication_factor, or kafka-reassign-partitions.sh \
                 for an existing topic)"
            )
        } else {
            String::new()
        }
    };
    match shape.map(|s| s.partitions.map(|n| (n, s.min_replicas))) {
        Ok(Some((n, replicas))) if n == input => Check::ok(
            "changelog",
            format!("{topic}: {n} partition(s), as the input topic, replication factor {replicas}{}", few(replicas)),
        ),
        Ok(Some((n, _))) => Check::fail(
            "changelog",
            format!(
                "{topic} has {n} partition(s) and the input topic has {input}; they must match: set another \
                 kafka.changelog_topic or recreate it"
            ),
        ),
        Ok(None) => Check::ok(
            "changelog",
            format!(
                "{topic} does not exist yet; `{} run` creates it ({input} partitions, cleanup.policy=compact){}",
                program::name(),
                match usize::try_from(config.kafka.changelog_replication_factor) {
                    Ok(factor) => few(factor),
                    Err(_) => String::new(), // -1: the broker's default.replication.factor
                }
            ),
        ),
        Err(e) => Check::fail(
            "changelog",
            format!(
                "cannot describe {topic}: {e}{}",
                acl_hint(config, &e, "Read --operation Write --operation Describe --operation Create --operation DescribeConfigs", &format!("--topic {topic}"))
            ),
        ),
    }
}

/// Where the check `name` of a topic that may be off starts: the topic and
/// the input topic's partition count, or already its answer (`off` when the
/// topic is off, a failure when the input topic cannot be described).
async fn optional_topic(
    config: &Config,
    timeout: Duration,
    name: &'static str,
    topic: Option<String>,
    off: &'static str,
) -> Result<(String, usize), Check> {
    let Some(topic) = topic else {
        return Err(Check::ok(name, off));
    };
    Ok((topic, input_partitions(config, timeout, name).await?))
}

/// The input topic's partition count, or the failed check `name` reports.
async fn input_partitions(
    config: &Config,
    timeout: Duration,
    name: &'static str,
) -> Result<usize, Check> {
    match topic_partitions(config, &config.kafka.input_topic, timeout).await {
        Ok(Some(n)) => Ok(n),
        Ok(None) => Err(Check::fail(
            name,
            format!(
                "the input topic {} does not exist",
                config.kafka.input_topic
            ),
        )),
        Err(e) => Err(Check::fail(
            name,
            format!("cannot describe {}: {e}", config.kafka.input_topic),
        )),
    }
}

/// The output topic (the outbox's status changes): off, or present with at
/// least the input topic's partition count (each input partition publishes
/// into its own number). orderly never creates it.
pub(crate) async fn check_output_topic(config: &Config, timeout: Duration) -> Check {
    let off = "off (kafka.output_topic = \"\"): no status changes are published";
    let topic = config.output_topic();
    let (topic, input) = match optional_topic(config, timeout, "output topic", topic, off).await {
        Ok(both) => both,
        Err(answer) => return answer,
    };
    match topic_partitions(config, &topic, timeout).await {
        Ok(Some(n)) if n >= input => Check::ok("output topic", format!("{topic}: {n} partition(s)")),
        Ok(Some(n)) => Check::fail(
            "output topic",
            format!(
                "{topic} has {n} partition(s), fewer than the input topic's {input}: status changes of input partition P \
                 go to its partition P; add partitions (kafka-topics.sh --bootstrap-server {} --alter --topic {topic} \
                 --partitions {input}) or set kafka.output_topic",
                config.kafka.bootstrap_servers
            ),
        ),
        Ok(None) => Check::fail(
            "output topic",
            format!(
                "{topic} does not exist: create it before `{} run` (status changes are published there), e.g. \
                 kafka-topics.sh --bootstrap-server {} --create --topic {topic} --partitions {input}; or set \
                 kafka.output_topic = \"\" to turn the outbox off",
                program::name(),
                config.kafka.bootstrap_servers
            ),
        ),
        Err(e) => Check::fail("output topic", format!("cannot describe {topic}: {e}")),
    }
}

/// The registry answers like a Confluent schema registry: `GET
/// {url}/subjects` returns a JSON array of subject names. Asked with the
/// client every registry call of orderly uses (its credentials and CA).
pub(crate) async fn check_registry(config: &Config) -> Check {
    let shown_url = config.redacted().registry.url;
    let base = config.registry.url.trim_end_matches('/');
    let url = format!("{base}/subjects");
    let shown = format!("{}/subjects", shown_url.trim_end_matches('/'));
    let endpoint = crate::registry::Endpoint::from_config(&config.registry);
    let client = match endpoint.http_client() {
        Ok(client) => client,
        Err(e) => return Check::fail("registry", e.to_string()),
    };
    let response = match client
        .get(&url)
        .header(
            "Accept",
            "application/vnd.schemaregistry.v1+json, application/json",
        )
        .send()
        .await
    {
        Ok(response) => response,
        Err(e) if crate::registry::is_tls_verification(&e) => {
            return Check::fail(
                "registry",
                endpoint.tls_failure(&error_text(&e)).to_string(),
            )
        }
        Err(e) => {
            return Check::fail(
                "registry",
                format!(
                    "GET {shown} failed ({}): check registry.url and that the registry runs",
                    endpoint.scrub(&error_text(&e))
                ),
            )
        }
    };
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Check::fail(
            "registry",
            endpoint.refused(status.as_u16(), "").to_string(),
        );
    }
    let body = match response.bytes().await {
        Ok(body) => body,
        Err(e) => {
            return Check::fail(
                "registry",
                format!("GET {shown}: cannot read the answer ({})", error_text(&e)),
            )
        }
    };
    let not_registry = "this is not a Confluent-compatible schema registry: set registry.url to the registry's base URL";
    if !status.is_success() {
        return Check::fail(
            "registry",
            format!(
                "GET {shown} answered {status} {}: {not_registry}",
                endpoint.scrub(&snippet(&body))
            ),
        );
    }
    match serde_json::from_slice::<Vec<String>>(&body) {
        Ok(subjects) => {
            let subject = format!("{}-value", config.kafka.input_topic);
            let note = if subjects.contains(&subject) {
                "registered"
            } else {
                "not registered yet (producers register it)"
            };
            let clear_text = if endpoint.sends_credentials_in_clear_text() {
                "; warning: registry.url is http:// and credentials are set, they travel in clear text (use https://)"
            } else {
                ""
            };
            Check::ok(
                "registry",
                format!(
                    "{shown_url}: {} subject(s); {subject} {note}{clear_text}",
                    subjects.len()
                ),
            )
        }
        Err(_) => Check::fail(
            "registry",
            format!(
                "GET {shown} answered {status} but not a JSON array of subjects {}: {not_registry}",
                endpoint.scrub(&snippet(&body))
            ),
        ),
    }
}

/// Every registered writer schema of the input subject is readable (what
/// `run`'s schema guard checks).
pub(crate) async fn check_schemas(config: &Config, reader: Option<&apache_avro::Schema>) -> Check {
    let registry = match crate::registry::Registry::from_config(&config.registry) {
        Ok(registry) => registry,
        Err(e) => return Check::fail("schemas", e.to_string()),
    };
    match crate::engine::codec::guard::guard(&registry, &config.kafka.input_topic, reader).await {
        Ok(report) if report.incompatible.is_empty() => Check::ok("schemas", report.summary()),
        Ok(report) => Check::fail(
            "schemas",
            format!(
                "{}; `{} run` refuses to start (registry.schema_guard = \"refuse\")",
                report.summary(),
                program::name()
            ),
        ),
        Err(e) => Check::fail(
            "schemas",
            format!(
                "cannot list the versions of {}-value: {e}",
                config.kafka.input_topic
            ),
        ),
    }
}

/// The start of an HTTP body, on one line, for an error message.
fn snippet(body: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(body)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    if text.is_empty() {
        return "(empty body)".into();
    }
    let mut short: String = text.chars().take(120).collect();
    if short.len() < text.len() {
        short.push_str("...");
    }
    format!("({short})")
}

#[cfg(test)]
mod tests;
