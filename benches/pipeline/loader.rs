//! The loader: a child process (this same binary with `--loader`) that
//! starts librdkafka's mock cluster (unless a broker was given), creates the
//! topics, plans the workload and produces it, then tells the benchmark where
//! it is. Keeping the mock's in-memory log in another process keeps it out of
//! the benchmark's RSS.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rdkafka::producer::Producer;
use rdkafka::ClientConfig;
use serde::{Deserialize, Serialize};

use orderly::testkit::orders::workload::{StreamedPlan, WorkloadSpec};
use orderly::testkit::orders::Encoder;

use crate::figures::Counts;
use crate::measure::{kib_to_mib, status_kib};
use crate::Args;

#[derive(Debug, Serialize, Deserialize)]
pub struct LoadInfo {
    pub bootstrap: String,
    pub topic: String,
    pub dlq_topic: String,
    pub partitions: i32,
    pub requested_partitions: i32,
    /// Estimated size of the record batches in the broker's log.
    pub log_mib: f64,
    pub ends: BTreeMap<i32, i64>,
    pub records: u64,
    pub expected: Counts,
    pub v1_id: u32,
    pub v2_id: u32,
    pub plan_seconds: f64,
    pub produce_seconds: f64,
    pub loader_peak_rss_mib: f64,
}

const DEFAULT_PARTITIONS: i32 = 4;
/// Per-record bytes of a v2 record batch beyond key and value (length,
/// attributes, deltas, header count), rounded up.
const RECORD_OVERHEAD: usize = 12;
/// What one mock partition holds (5 MiB), less a margin for batch headers.
const MOCK_PARTITION_BUDGET: u64 = 9 * 1024 * 1024 / 2;

impl LoadInfo {
    /// Records in the topic: the sum of the partitions' end offsets.
    pub fn total_events(&self) -> u64 {
        self.ends.values().map(|e| *e as u64).sum()
    }
}

/// The child: starts the mock cluster (unless a bootstrap was given), creates
/// the topics, plans and produces the workload, prints a `LoadInfo` line and
/// keeps the mock cluster up until its stdin closes.
pub async fn loader(args: Args) -> anyhow::Result<()> {
    let topic = args.topic.clone().context("--topic")?;
    let dlq_topic = format!("{topic}.dlq");
    let spec: WorkloadSpec = serde_json::from_str(args.spec.as_deref().context("--spec")?)?;
    // The real registry when one is given (--registry): the ids the records
    // carry must be the ones a contender in another process fetches.
    let registry = crate::registry_of(&args)?;
    let encoder = Encoder::register(&registry, &topic).await?;
    let started = Instant::now();
    // Planned in 16 bytes a send and encoded as it is produced: the whole
    // plan of `lifecycle-10m` (63M records) would not fit in memory.
    let plan = StreamedPlan::new(&spec)?;
    let plan_seconds = started.elapsed().as_secs_f64();
    eprintln!(
        "pipeline: planned {} sends over {} orders in {plan_seconds:.1} s",
        plan.sends(),
        spec.orders
    );
    if let Some(path) = &args.expect_file {
        // Every order's final state, as a fingerprint, for the side-by-side
        // phases to check each contender's store against.
        let mut file = std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| format!("{}", path.display()))?,
        );
        writeln!(
            file,
            "fingerprints {} {}",
            plan.order_prefix(),
            plan.fingerprints().len()
        )?;
        for f in plan.fingerprints() {
            file.write_all(&f.to_le_bytes())?;
        }
        file.flush()?;
    }

    // librdkafka's mock cluster keeps at most 5 MiB of record batches per
    // partition (rdkafka_mock.c: `mpart->max_size = 1024 * 1024 * 5`, not
    // configurable) and silently deletes the oldest batches beyond that. When
    // the workload does not fit in the requested partitions, use more. The
    // size is estimated from the first records (the check after producing
    // catches an estimate that fell short).
    let requested = args.partitions.unwrap_or(DEFAULT_PARTITIONS);
    let sample: Vec<_> = plan
        .records(&encoder)
        .take(4_096)
        .collect::<Result<_, _>>()?;
    let sample_bytes: usize = sample
        .iter()
        .map(|r| r.key.len() + r.payload.len() + RECORD_OVERHEAD)
        .sum();
    let log_bytes = (sample_bytes as f64 / sample.len().max(1) as f64
        * plan.sends() as f64
        * (1.0 + spec.poison_rate)
        * 1.05) as u64;
    drop(sample);
    let fitting = log_bytes.div_ceil(MOCK_PARTITION_BUDGET).max(1) as i32;
    let partitions = match (&args.bootstrap, args.partitions) {
        (None, Some(n)) if n < fitting => bail!(
            "the workload (~{} MiB of record batches) does not fit in {n} partitions of the mock cluster, which keeps \
             only 5 MiB per partition: use --partitions {fitting} or more, fewer --events, or --bootstrap",
            log_bytes >> 20
        ),
        (None, None) => requested.max(fitting),
        _ => requested,
    };

    let cluster;
    let bootstrap = match &args.bootstrap {
        None => {
            cluster = rdkafka::mocking::MockCluster::new(1)?;
            cluster.create_topic(&topic, partitions, 1)?;
            cluster.create_topic(&dlq_topic, 1, 1)?;
            // (c)'s changelog: the mock cluster has no CreateTopics (on a
            // broker, the processor creates it).
            cluster.create_topic(&format!("{topic}-changelog"), partitions, 1)?;
            cluster.create_topic(&format!("{topic}-changelog-o"), partitions, 1)?;
            cluster.create_topic(&format!("{topic}-status"), partitions, 1)?;
            cluster.bootstrap_servers()
        }
        Some(bootstrap) => {
            create_topics(bootstrap, &topic, &dlq_topic, partitions).await?;
            bootstrap.clone()
        }
    };
    let producer: rdkafka::producer::FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()?;
    let started = Instant::now();
    let mut records = plan.records(&encoder);
    let mut ends =
        orderly::testkit::produce_streamed(&producer, &topic, records.by_ref(), plan.sends())
            .await?;
    let produce_seconds = started.elapsed().as_secs_f64();
    let expected = records.expectation();
    for p in 0..partitions {
        ends.entry(p).or_insert(0);
    }
    let expected_counts = Counts {
        applied: expected.outcomes.applied,
        duplicates: expected.outcomes.duplicates,
        stale: expected.outcomes.stale,
        dead_lettered: expected.outcomes.dead_lettered,
    };
    // Every record must still be there: a broker that dropped the oldest ones
    // (the mock's size cap, or retention) would make every phase read less.
    let records_total = expected.records;
    let mut low_total = 0i64;
    for p in 0..partitions {
        let (low, high) = producer
            .client()
            .fetch_watermarks(&topic, p, Duration::from_secs(10))?;
        low_total += low;
        if high != ends[&p] {
            bail!(
                "partition {p}: high watermark {high}, but the producer's last offset says {}",
                ends[&p]
            );
        }
    }
    if low_total > 0 {
        bail!("the broker already deleted {low_total} of the {records_total} records produced (size cap or retention); use more --partitions");
    }
    let info = LoadInfo {
        bootstrap,
        topic,
        dlq_topic,
        partitions,
        requested_partitions: requested,
        log_mib: log_bytes as f64 / (1024.0 * 1024.0),
        ends,
        records: records_total,
        expected: expected_counts,
        v1_id: encoder.v1_id,
        v2_id: encoder.v2_id,
        plan_seconds,
        produce_seconds,
        loader_peak_rss_mib: kib_to_mib(status_kib("VmHWM").unwrap_or(0)),
    };
    drop(producer);
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(&info)?)?;
    out.flush()?;
    drop(out);
    if args.bootstrap.is_none() {
        // Serve the mock cluster until the benchmark is done (or gone).
        let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await;
    }
    Ok(())
}

async fn create_topics(
    bootstrap: &str,
    topic: &str,
    dlq_topic: &str,
    partitions: i32,
) -> anyhow::Result<()> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    // (c)'s output topic (the outbox) too; the processor creates the changelog.
    let status = format!("{topic}-status");
    let topics = [
        NewTopic::new(topic, partitions, TopicReplication::Fixed(1)),
        NewTopic::new(dlq_topic, 1, TopicReplication::Fixed(1)),
        NewTopic::new(&status, partitions, TopicReplication::Fixed(1)),
    ];
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    for result in admin.create_topics(&topics, &options).await? {
        if let Err((name, code)) = result {
            bail!("cannot create topic {name} on {bootstrap}: {code}");
        }
    }
    Ok(())
}

/// Starts the loader child and waits for its `LoadInfo`.
pub fn start_loader(
    args: &Args,
    spec: &WorkloadSpec,
    topic: &str,
) -> anyhow::Result<(Child, LoadInfo)> {
    let exe = std::env::current_exe()?;
    let mut command = Command::new(exe);
    command
        .arg("--loader")
        .arg("--topic")
        .arg(topic)
        .arg("--spec")
        .arg(serde_json::to_string(spec)?)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(bootstrap) = &args.bootstrap {
        command.arg("--bootstrap").arg(bootstrap);
    }
    if let Some(partitions) = args.partitions {
        command.arg("--partitions").arg(partitions.to_string());
    }
    if let Some(registry) = &args.registry {
        command.arg("--registry").arg(registry);
    }
    if let Some(path) = &args.expect_file {
        command.arg("--expect-file").arg(path);
    }
    let mut child = command.spawn().context("starting the loader child")?;
    let stdout = child.stdout.take().context("loader stdout")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    if line.trim().is_empty() {
        let status = child.wait()?;
        bail!("the loader exited ({status}) without loading the workload; see its errors above");
    }
    let info: LoadInfo = serde_json::from_str(line.trim()).context("loader output")?;
    Ok((child, info))
}
