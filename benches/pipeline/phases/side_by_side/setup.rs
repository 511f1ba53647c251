//! What a run needs before it starts and after it ends: its topics, an
//! empty group, the offsets reader, orderly's generated config, and the
//! check of a state dump against the expectation.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

use orderly::testkit::orders::StateView;

use crate::loader::LoadInfo;
use crate::Args;

use super::{Ctx, Guarantee};

pub(super) fn create_topics(ctx: &Ctx<'_>, names: &[String]) -> anyhow::Result<()> {
    create_topics_like_input(ctx.runtime, ctx.load, names)
}

/// Creates `names` on the input's broker, with the input's partition count.
pub(in crate::phases) fn create_topics_like_input(
    runtime: &tokio::runtime::Runtime,
    load: &LoadInfo,
    names: &[String],
) -> anyhow::Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &load.bootstrap)
        .create()?;
    let topics: Vec<NewTopic<'_>> = names
        .iter()
        .map(|n| NewTopic::new(n, load.partitions, TopicReplication::Fixed(1)))
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in runtime.block_on(admin.create_topics(&topics, &options))? {
        if let Err((name, code)) = result {
            bail!("cannot create topic {name}: {code}");
        }
    }
    Ok(())
}

/// A consumer in `group` that only reads its committed offsets (never
/// subscribes or commits).
/// Waits until `group` has no member (ListGroups' member list); how long.
pub(super) fn wait_group_empty(
    bootstrap: &str,
    group: &str,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let admin: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let started = Instant::now();
    loop {
        let list = admin.fetch_group_list(Some(group), Duration::from_secs(5))?;
        let members = list
            .groups()
            .iter()
            .map(|g| g.members().len())
            .sum::<usize>();
        if members == 0 {
            return Ok(started.elapsed());
        }
        if started.elapsed() > timeout {
            bail!("group {group} still has {members} members after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub(in crate::phases) fn offsets_reader(
    bootstrap: &str,
    group: &str,
) -> anyhow::Result<BaseConsumer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()?)
}

/// The bench's knobs as orderly config lines: ([processing], [store],
/// [kafka.librdkafka]) bodies.
pub(in crate::phases) fn overrides(args: &Args) -> (String, String, String) {
    let mut processing = String::new();
    if let Some(ms) = args.commit_interval_ms {
        processing += &format!("commit_interval_ms = {ms}\n");
    }
    if let Some(b) = args.cache_max_bytes {
        processing += &format!("cache_max_bytes = {b}\n");
    }
    if let Some(n) = args.batch_max_records {
        processing += &format!("batch_max_records = {n}\n");
    }
    if let Some(ms) = args.batch_max_wait_ms {
        processing += &format!("batch_max_wait_ms = {ms}\n");
    }
    let mut store = String::new();
    if let Some(mb) = args.cache_mb {
        store += &format!("cache_capacity_mb = {mb}\n");
    }
    let mut librdkafka = String::new();
    for setting in &args.librdkafka {
        if let Some((k, v)) = setting.split_once('=') {
            librdkafka += &format!("{} = {}\n", toml_str(k.trim()), toml_str(v.trim()));
        }
    }
    (processing, store, librdkafka)
}

pub(in crate::phases) fn overrides_toml(args: &Args) -> String {
    let (p, s, l) = overrides(args);
    let mut out = String::new();
    for (section, body) in [("processing", p), ("store", s), ("kafka.librdkafka", l)] {
        for line in body.lines() {
            out += &format!("{section}.{line}\n");
        }
    }
    out
}

pub(in crate::phases) fn toml_str(s: &str) -> String {
    toml::Value::String(s.into()).to_string()
}

pub(super) fn orderly_config(
    ctx: &Ctx<'_>,
    group: &str,
    store: &Path,
    output: &str,
    dlq: &str,
    guarantee: Guarantee,
) -> String {
    OrderlyConfig {
        args: ctx.args,
        load: ctx.load,
        registry_url: &ctx.registry_url,
        group,
        store,
        output,
        dlq,
        guarantee: guarantee.orderly(),
        http_address: "",
        kafka_extra: "",
        processing_extra: "",
    }
    .toml()
}

/// A generated `orderly run` config: the bench's topic, broker, registry
/// and knobs (`overrides`), and what the phase adds.
pub(in crate::phases) struct OrderlyConfig<'a> {
    pub args: &'a Args,
    pub load: &'a LoadInfo,
    pub registry_url: &'a str,
    pub group: &'a str,
    pub store: &'a Path,
    pub output: &'a str,
    pub dlq: &'a str,
    /// `processing.guarantee`.
    pub guarantee: &'a str,
    /// `http.address` ("" turns the endpoint off).
    pub http_address: &'a str,
    /// More `[kafka]` lines.
    pub kafka_extra: &'a str,
    /// More `[processing]` lines.
    pub processing_extra: &'a str,
}

impl OrderlyConfig<'_> {
    pub fn toml(&self) -> String {
        let (processing, store_extra, librdkafka) = overrides(self.args);
        format!(
            "[kafka]\nbootstrap_servers = {}\ngroup_id = {}\ninput_topic = {}\ndlq_topic = {}\noutput_topic = {}\n{}\n\
             [kafka.librdkafka]\n{librdkafka}\n[registry]\nurl = {}\n\n[store]\npath = {}\n{store_extra}\n\
             [http]\naddress = {}\n\n[processing]\nguarantee = \"{}\"\n{processing}{}",
            toml_str(&self.load.bootstrap),
            toml_str(self.group),
            toml_str(&self.load.topic),
            toml_str(self.dlq),
            toml_str(self.output),
            self.kafka_extra,
            toml_str(self.registry_url),
            toml_str(&self.store.display().to_string()),
            toml_str(self.http_address),
            self.guarantee,
            self.processing_extra,
        )
    }
}

/// Orders whose dumped state (JSON lines with `order_id` ... and
/// `partition`) differs from the expectation, missing and extra included.
pub(super) fn check_dump(
    ctx: &Ctx<'_>,
    lines: impl Iterator<Item = std::io::Result<String>>,
) -> anyhow::Result<Option<u64>> {
    let Some(expected) = &ctx.expected else {
        return Ok(None);
    };
    let mut seen = 0u64;
    let mut bad = 0u64;
    let mut shown = 0;
    for line in lines {
        let line = line.context("reading a state dump")?;
        if line.trim().is_empty() {
            continue;
        }
        let got: StateView =
            serde_json::from_str(&line).with_context(|| format!("state dump line {line}"))?;
        seen += 1;
        if !expected.matches(&got) {
            bad += 1;
            if shown < 3 {
                shown += 1;
                eprintln!("pipeline: state differs from the expected one: got {got:?}");
            }
        }
    }
    // Each dumped order is distinct, so the expected ones not seen are
    // expected - (seen - extra); extras are counted in `bad` already.
    let matched = seen - bad;
    Ok(Some(
        bad + (expected.fingerprints.len() as u64).saturating_sub(matched),
    ))
}
