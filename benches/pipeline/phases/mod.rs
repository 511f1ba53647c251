//! The phases, each measured on the same pre-loaded topic: (a) and (b) in
//! `bare`, (d) in `store_alone`, (c) and (e) in `full`, (r) (restoring what
//! (c) wrote to its changelog) in `restore`, the side-by-side phases in
//! `side_by_side`, (fo) in `failover`; and the plain consumer that
//! (a), (b) and (d)'s untimed read share.

pub mod bare;
pub mod child;
pub mod failover;
pub mod full;
pub mod restore;
pub mod side_by_side;
pub mod store_alone;

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};

use orderly::testkit::orders::{Encoder, EventType, OrderEvent, WriterVersion};
use orderly::testkit::{consumer_config, Decoder};
use orderly::Config;

use crate::loader::LoadInfo;
use crate::Args;

/// The processor's own consumer settings, with a fresh group id (unused:
/// partitions are assigned, not subscribed).
pub fn plain_consumer(args: &Args, bootstrap: &str) -> anyhow::Result<BaseConsumer> {
    let mut config = Config::defaults()?;
    passthrough(args, &mut config)?;
    config.kafka.bootstrap_servers = bootstrap.into();
    config.kafka.group_id = format!("orderly-bench-plain-{}", uuid::Uuid::new_v4().simple());
    Ok(consumer_config(&config).create()?)
}

/// Adds the `--librdkafka KEY=VALUE` settings to `config.kafka.librdkafka`.
pub fn passthrough(args: &Args, config: &mut Config) -> anyhow::Result<()> {
    for setting in &args.librdkafka {
        let (key, value) = setting
            .split_once('=')
            .with_context(|| format!("--librdkafka {setting}: use KEY=VALUE"))?;
        config
            .kafka
            .librdkafka
            .insert(key.trim().into(), toml::Value::String(value.trim().into()));
    }
    Ok(())
}

/// Assigns every partition from the beginning and hands each record to `f`
/// until every partition reached its end offset. Returns the records read.
pub fn read_all(
    consumer: &BaseConsumer,
    load: &LoadInfo,
    timeout: Duration,
    mut f: impl FnMut(&BorrowedMessage<'_>),
) -> anyhow::Result<(u64, Duration)> {
    {
        let mut tpl = TopicPartitionList::new();
        for p in load.ends.keys() {
            tpl.add_partition_offset(&load.topic, *p, Offset::Beginning)?;
        }
        consumer.assign(&tpl)?;
    }
    let width = load.ends.keys().max().map(|p| *p as usize + 1).unwrap_or(0);
    let mut end = vec![0i64; width];
    for (p, e) in &load.ends {
        end[*p as usize] = *e;
    }
    let mut remaining = end.iter().filter(|e| **e > 0).count();
    let mut done = vec![false; width];
    let mut read = 0u64;
    let mut errors = 0u64;
    let started = Instant::now();
    let mut first = None;
    while remaining > 0 {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) => {
                if read == 0 {
                    first = Some(started.elapsed());
                }
                read += 1;
                let p = msg.partition() as usize;
                f(&msg);
                if p < width && !done[p] && msg.offset() + 1 >= end[p] {
                    done[p] = true;
                    remaining -= 1;
                }
            }
            Some(Err(error)) => {
                errors += 1;
                if errors <= 10 {
                    eprintln!("pipeline: consumer error: {error}");
                }
            }
            None => {}
        }
        if started.elapsed() > timeout {
            bail!("timed out after reading {read} records ({errors} errors)");
        }
    }
    consumer.unassign()?;
    Ok((read, first.unwrap_or_default()))
}

/// Decodes one v1 and one v2 record so the schema cache is warm.
pub fn warm(
    runtime: &tokio::runtime::Runtime,
    decoder: &Decoder<orderly::Orders>,
    encoder: &Encoder,
) -> anyhow::Result<()> {
    let event = OrderEvent {
        event_id: "warm".into(),
        order_id: "warm".into(),
        version: 1,
        event_type: EventType::Created,
        amount: 1,
        currency: "EUR".into(),
        occurred_at: 1,
    };
    for version in [WriterVersion::V1, WriterVersion::V2] {
        let bytes = encoder.encode(&event, version)?;
        runtime
            .block_on(decoder.decode(Some(&bytes)))
            .map_err(|e| anyhow!("{e}"))?;
    }
    Ok(())
}
