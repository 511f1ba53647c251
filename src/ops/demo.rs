//! The embedded default: librdkafka's in-process mock cluster, an
//! in-process schema registry, a generated workload, the processor over it,
//! and a summary checked against the generator's expectation.
//!
//! One generic run (`demo_of`) for any entity; each built-in domain
//! (orders, stock) brings its generator, its expectation and how a stored
//! state is compared with it ([`run_demo`]).

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::FutureProducer;
use rdkafka::ClientConfig;
use serde::Serialize;
use tracing::info;

use crate::config::Config;
use crate::domains::orders::codec::Encoder;
use crate::domains::orders::workload::{plan, PlannedRecord, WorkloadSpec};
use crate::domains::orders::Orders;
use crate::domains::stock::workload::StockSpec;
use crate::domains::stock::{Stock, StockEncoder};
use crate::engine::entity::{Entity, State};
use crate::engine::outcomes::Outcomes;
use crate::engine::store::Store;
use crate::ops::load::produce_planned;
use crate::processor::Processor;
use crate::registry::Registry;

/// What the demo generates and processes: the domain, with its workload.
#[derive(Debug, Clone)]
pub(crate) enum DemoWorkload {
    /// Orders, the built-in domain (the default).
    Orders(WorkloadSpec),
    /// Per-SKU stock levels, an accumulating state.
    Stock(StockSpec),
}

#[derive(Debug, Clone)]
pub(crate) struct DemoOptions {
    pub workload: DemoWorkload,
    pub partitions: i32,
    /// Keep the store here instead of a temporary directory.
    pub store_dir: Option<PathBuf>,
    /// Give up waiting for the processor to catch up after this long.
    pub timeout: Duration,
    /// Processing and store settings (from `--config` and the environment);
    /// the Kafka, registry and store location are the demo's own.
    pub base_config: Option<Config>,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            workload: DemoWorkload::Orders(WorkloadSpec::default()),
            partitions: 4,
            store_dir: None,
            timeout: Duration::from_secs(300),
            base_config: None,
        }
    }
}

/// The demo's outcome: durable counters read back from the store, the
/// generator's expectation, and whether they agree.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct DemoSummary {
    /// The domain: `orders` or `stock`.
    pub entity: &'static str,
    /// Entities generated (orders, SKUs), each expected to end with a state.
    pub keys: usize,
    /// Orders generated (the order demo only; `keys` for every domain).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orders: Option<usize>,
    /// What one entity is called (`order`, `SKU`).
    #[serde(skip)]
    pub(crate) noun: &'static str,
    pub partitions: i32,
    pub consumed: u64,
    pub applied: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub dead_lettered: u64,
    pub expected: ExpectedCounts,
    pub counts_match_expected: bool,
    pub(crate) outcomes_add_up: bool,
    pub state_matches_expected: bool,
    pub(crate) state_mismatches: usize,
    pub(crate) dlq_topic_records: i64,
    /// Status changes on the output topic (the outbox: OrderStatusChanged,
    /// StockAvailabilityChanged), their distinct event ids, and the status
    /// changes the generator expects.
    pub outbox_records: u64,
    pub(crate) outbox_distinct: u64,
    pub(crate) outbox_expected: u64,
    /// The distinct event ids published are exactly the expected ones.
    pub(crate) outbox_matches_expected: bool,
    /// `processing.guarantee` of the run.
    pub guarantee: &'static str,
    /// From starting the processor until the checkpoints covered every
    /// record: joining the group plus processing.
    pub elapsed_seconds: f64,
    /// From starting the processor until its first partition was assigned
    /// (connecting and joining the group; about 3 s on the mock cluster).
    pub join_seconds: f64,
    /// From the first partition assignment (the records are all there, so
    /// processing starts at once) until the checkpoints covered every record.
    pub processing_seconds: f64,
    /// From the first batch decided to the last (what the processor spends
    /// processing, without waiting for the next write-out).
    pub decide_seconds: f64,
    /// Records consumed per second of `decide_seconds`: the pipeline's rate.
    pub events_per_second: f64,
    /// The write-out interval: the last records became durable within it.
    pub commit_interval_ms: u64,
    /// Records consumed per second of `elapsed_seconds`, join included.
    pub events_per_second_including_join: f64,
}

/// When the demo's phases ended, as seen from outside the processor.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// Since starting the processor, until its first partition was assigned.
    join: Duration,
    /// Since starting the processor, until every record was covered.
    elapsed: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub(crate) struct ExpectedCounts {
    /// Keys (orders, SKUs) the generator expects a state for.
    pub keys: usize,
    pub records: u64,
    pub applied: u64,
    pub duplicates: u64,
    pub stale: u64,
    pub dead_lettered: u64,
}

impl ExpectedCounts {
    fn of(keys: usize, records: u64, outcomes: Outcomes) -> Self {
        ExpectedCounts {
            keys,
            records,
            applied: outcomes.applied,
            duplicates: outcomes.duplicates,
            stale: outcomes.stale,
            dead_lettered: outcomes.dead_lettered,
        }
    }
}

impl DemoSummary {
    /// True when every guarantee the demo checks holds.
    pub(crate) fn passed(&self) -> bool {
        self.counts_match_expected
            && self.outcomes_add_up
            && self.state_matches_expected
            && self.outbox_matches_expected
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum DemoError {
    /// The cause is in the message and deliberately not a `source` (see
    /// the `From` below), so `{:#}` chains do not print it twice.
    #[error("mock cluster: {0}")]
    Kafka(rdkafka::error::KafkaError),
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
    #[error(transparent)]
    Encode(#[from] crate::engine::codec::EncodeError),
    #[error(transparent)]
    Load(#[from] crate::ops::load::LoadError),
    #[error(transparent)]
    Store(#[from] crate::engine::store::StoreError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Process(#[from] crate::processor::ProcessError),
    #[error("cannot create a temporary store directory: {0}")]
    TempDir(std::io::Error),
    #[error(
        "the mock cluster dropped the oldest records of partition {partition} (it keeps at most 5 MiB or 100,000 \
         record batches per partition): use more --partitions or fewer --orders"
    )]
    MockRetention { partition: i32 },
}

impl From<rdkafka::error::KafkaError> for DemoError {
    fn from(error: rdkafka::error::KafkaError) -> Self {
        DemoError::Kafka(error)
    }
}

/// librdkafka's mock cluster keeps at most 5 MiB or 100,000 record batches
/// per partition and silently deletes older ones; a demo over a truncated topic
/// would prove nothing, so it stops here.
pub(crate) fn check_mock_retention(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> Result<(), DemoError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    for partition in 0..partitions {
        let (low, _) = consumer.fetch_watermarks(topic, partition, Duration::from_secs(5))?;
        if low > 0 {
            return Err(DemoError::MockRetention { partition });
        }
    }
    Ok(())
}

/// One domain's part of the demo: its records and what they imply.
struct Planned {
    /// `orders`, `stock`: also the input topic (the dead-letter and output
    /// topics are named after it).
    entity: &'static str,
    records: Vec<PlannedRecord>,
    expected: ExpectedCounts,
    /// The source event ids whose status changes the outbox must publish.
    status_changes: Vec<String>,
}

impl Planned {
    fn new<'a>(
        entity: &'static str,
        records: Vec<PlannedRecord>,
        expected: ExpectedCounts,
        status_changes: impl IntoIterator<Item = &'a String>,
    ) -> Self {
        Planned {
            entity,
            records,
            expected,
            status_changes: status_changes.into_iter().cloned().collect(),
        }
    }
}

/// Generates the chosen domain's workload, processes it on the mock
/// cluster and checks the end against the generator's expectation.
pub(crate) async fn run_demo(options: DemoOptions) -> Result<DemoSummary, DemoError> {
    let registry = Registry::memory();
    match &options.workload {
        DemoWorkload::Orders(spec) => {
            let encoder = Encoder::register(&registry, "orders").await?;
            let (records, expected) = plan(spec, &encoder)?;
            let counts =
                ExpectedCounts::of(expected.states.len(), expected.records, expected.outcomes);
            let planned = Planned::new("orders", records, counts, &expected.status_changes);
            let mut summary = demo_of(Orders, registry, planned, &options, |state| {
                let want = expected.states.get(&state.key)?;
                Some(state.view() == *want)
            })
            .await?;
            summary.orders = Some(spec.orders);
            Ok(summary)
        }
        DemoWorkload::Stock(spec) => {
            let encoder = StockEncoder::register(&registry, "stock").await?;
            let (records, expected) = crate::domains::stock::workload::plan(spec, &encoder)?;
            let counts =
                ExpectedCounts::of(expected.levels.len(), expected.records, expected.outcomes);
            let planned = Planned::new("stock", records, counts, &expected.status_changes);
            demo_of(Stock, registry, planned, &options, |state| {
                expected
                    .levels
                    .get(&state.key)
                    .map(|want| *want == (state.version, state.data))
            })
            .await
        }
    }
}

/// The demo of `entity` over `planned`: `matches` says whether a stored
/// state is the one the generator expects for its key (`None`: a key the
/// generator never made).
async fn demo_of<E: Entity>(
    entity: E,
    registry: Registry,
    mut planned: Planned,
    options: &DemoOptions,
    matches: impl Fn(&State<E>) -> Option<bool>,
) -> Result<DemoSummary, DemoError> {
    let topics = DemoTopics::of(planned.entity);
    let cluster = MockCluster::new(1)?;
    topics.create(&cluster, options.partitions)?;
    let bootstrap = cluster.bootstrap_servers();

    let records = std::mem::take(&mut planned.records);
    info!(
        records = records.len(),
        keys = planned.expected.keys,
        entity = E::NAME,
        "workload planned"
    );
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()?;
    let ends = produce_planned(&producer, topics.input, &records).await?;
    drop(records);
    check_mock_retention(&bootstrap, topics.input, options.partitions)?;

    let temp;
    let store_path = match &options.store_dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("orderly-demo-")
                .tempdir()
                .map_err(DemoError::TempDir)?;
            temp.path().join("store")
        }
    };
    let config = demo_config(options, &topics, &bootstrap, &store_path)?;
    let store = Store::open(&store_path, config.store.cache_capacity_mb)?;

    let (timing, caught_up) = watch_progress(store.clone(), ends, Instant::now(), options.timeout);
    let commit_interval_ms = config.processing.commit_interval_ms;
    let exactly_once = config.processing.guarantee == crate::config::Guarantee::ExactlyOnce;
    let report = Processor::for_entity(entity.clone(), config, store.clone(), registry)
        .run(caught_up)
        .await?;
    let timing = timing.lock().ok().and_then(|t| *t);
    let timing = timing.unwrap_or(Timing {
        join: options.timeout,
        elapsed: options.timeout,
    });

    let mut summary = summarize(
        &store,
        &planned,
        E::NAME,
        state_mismatches(&store, planned.expected.keys, matches)?,
        options.partitions,
        dlq_records(&bootstrap, &topics.dlq)?,
        timing,
    )?;
    summary.decide_seconds = report.decide_seconds;
    summary.events_per_second = rate(
        summary.consumed,
        Duration::from_secs_f64(report.decide_seconds),
    );
    summary.commit_interval_ms = commit_interval_ms;
    let published = outbox_event_ids(&entity, &bootstrap, &topics.output, options.partitions)?;
    check_published(&mut summary, &planned, &published, exactly_once);
    drop(producer);
    drop(cluster);
    Ok(summary)
}

/// The demo's topics on the mock cluster, named after the entity's input
/// topic.
struct DemoTopics {
    input: &'static str,
    dlq: String,
    changelog: &'static str,
    output: String,
}

impl DemoTopics {
    fn of(input: &'static str) -> Self {
        DemoTopics {
            input,
            dlq: format!("{input}.dlq"),
            changelog: "orderly-demo-changelog",
            output: format!("{input}.status"),
        }
    }

    /// Creates every topic; the dead-letter topic has one partition, the
    /// others `partitions`.
    fn create<C: rdkafka::ClientContext>(
        &self,
        cluster: &MockCluster<'_, C>,
        partitions: i32,
    ) -> Result<(), DemoError> {
        cluster.create_topic(self.input, partitions, 1)?;
        cluster.create_topic(&self.dlq, 1, 1)?;
        // The mock cluster has no CreateTopics: the changelog is created here.
        cluster.create_topic(self.changelog, partitions, 1)?;
        cluster.create_topic(&self.output, partitions, 1)?;
        Ok(())
    }
}

/// The processor's configuration for the demo: `options.base_config` (or
/// the defaults) pointed at the mock cluster's topics and `store_path`.
fn demo_config(
    options: &DemoOptions,
    topics: &DemoTopics,
    bootstrap: &str,
    store_path: &std::path::Path,
) -> Result<Config, DemoError> {
    let mut config = match options.base_config.clone() {
        Some(config) => config,
        None => Config::defaults()?,
    };
    config.kafka.bootstrap_servers = bootstrap.into();
    config.kafka.group_id = "orderly-demo".into();
    config.kafka.input_topic = topics.input.into();
    config.kafka.dlq_topic = topics.dlq.clone();
    config.kafka.changelog_topic = topics.changelog.into();
    config.kafka.output_topic = topics.output.clone();
    config.store.path = store_path.to_path_buf();
    Ok(config)
}

/// Checks the status changes `published` to the output topic against the
/// ones the generator expects, into `summary`.
fn check_published(
    summary: &mut DemoSummary,
    planned: &Planned,
    published: &[String],
    exactly_once: bool,
) {
    let wanted: HashSet<String> = planned
        .status_changes
        .iter()
        .map(|id| crate::processor::outbox::status_event_id(id))
        .collect();
    let distinct: HashSet<&String> = published.iter().collect();
    summary.outbox_records = published.len() as u64;
    summary.outbox_distinct = distinct.len() as u64;
    summary.outbox_expected = wanted.len() as u64;
    summary.outbox_matches_expected =
        distinct.len() == wanted.len() && distinct.iter().all(|id| wanted.contains(*id));
    summary.guarantee = if exactly_once {
        "exactly_once"
    } else {
        "at_least_once"
    };
    if exactly_once {
        // Transactions promise more: each status change once, each poison
        // record one letter.
        summary.outbox_matches_expected &= published.len() == wanted.len();
        summary.counts_match_expected &= summary.dlq_topic_records as u64 == summary.dead_lettered;
    }
}

/// How often the demo looks at the store while the processor runs: the
/// resolution of its timings.
const WATCH_INTERVAL: Duration = Duration::from_millis(5);

/// The processor's shutdown future for the demo: completes once the
/// checkpoints cover `ends` (or after `timeout`). Measured from outside the
/// processor, by watching the store: the first partition tree appears when
/// the processor is assigned its first partition (it opens the tree to read
/// the checkpoint), and the checkpoints reach the end offsets when the last
/// record is processed. The timing is filled in when the future completes.
fn watch_progress(
    store: Store,
    ends: BTreeMap<i32, i64>,
    started: Instant,
    timeout: Duration,
) -> (
    Arc<Mutex<Option<Timing>>>,
    impl std::future::Future<Output = ()>,
) {
    let slot = Arc::new(Mutex::new(None));
    let out = slot.clone();
    let trees_before = store.partitions().len();
    let watch = async move {
        let mut joined = None;
        while started.elapsed() < timeout {
            tokio::time::sleep(WATCH_INTERVAL).await;
            if joined.is_none() && store.partitions().len() > trees_before {
                joined = Some(started.elapsed());
            }
            if covers(&store, &ends) {
                let elapsed = started.elapsed();
                let timing = Timing {
                    join: joined.unwrap_or(elapsed),
                    elapsed,
                };
                if let Ok(mut slot) = slot.lock() {
                    *slot = Some(timing);
                }
                return;
            }
        }
        tracing::warn!("demo timed out before the processor caught up");
    };
    (out, watch)
}

/// True when every partition's checkpoint has reached its end offset.
pub fn covers(store: &Store, ends: &BTreeMap<i32, i64>) -> bool {
    let Ok(checkpoints) = store.checkpoints() else {
        return false;
    };
    ends.iter().all(|(partition, end)| {
        checkpoints
            .iter()
            .any(|(_, p, c)| p == partition && c.next_offset >= *end)
    })
}

/// Stored states that are not the generator's, plus the generator's keys
/// without a stored state: `matches` compares a stored state with the one
/// expected for its key (`None`: a key the generator never made).
fn state_mismatches<E: Entity>(
    store: &Store,
    expected_states: usize,
    matches: impl Fn(&State<E>) -> Option<bool>,
) -> Result<usize, DemoError> {
    let (mut matched, mut unexpected) = (0usize, 0usize);
    store.for_each::<E>(|state| match matches(&state) {
        Some(true) => matched += 1,
        Some(false) => {}
        None => unexpected += 1,
    })?;
    Ok(expected_states.saturating_sub(matched) + unexpected)
}

fn summarize(
    store: &Store,
    planned: &Planned,
    noun: &'static str,
    mismatches: usize,
    partitions: i32,
    dlq_topic_records: i64,
    timing: Timing,
) -> Result<DemoSummary, DemoError> {
    let stats = store.stats()?;
    let sum = |f: fn(&crate::engine::store::Checkpoint) -> u64| {
        stats.iter().map(|s| f(&s.checkpoint)).sum::<u64>()
    };
    let consumed: u64 = stats
        .iter()
        .map(|s| (s.checkpoint.next_offset - s.checkpoint.start_offset) as u64)
        .sum();
    let (applied, duplicates, stale, dead_lettered) = (
        sum(|c| c.applied),
        sum(|c| c.duplicates),
        sum(|c| c.stale),
        sum(|c| c.dead_lettered),
    );
    let expected = &planned.expected;
    let processing = timing.elapsed.saturating_sub(timing.join);
    Ok(DemoSummary {
        entity: planned.entity,
        keys: expected.keys,
        orders: None,
        noun,
        partitions,
        consumed,
        applied,
        duplicates,
        stale,
        dead_lettered,
        counts_match_expected: (applied, duplicates, stale, dead_lettered, consumed)
            == (
                expected.applied,
                expected.duplicates,
                expected.stale,
                expected.dead_lettered,
                expected.records,
            ),
        outcomes_add_up: applied + duplicates + stale + dead_lettered == consumed,
        expected: expected.clone(),
        state_matches_expected: mismatches == 0,
        state_mismatches: mismatches,
        dlq_topic_records,
        outbox_records: 0,
        outbox_distinct: 0,
        outbox_expected: 0,
        outbox_matches_expected: false,
        guarantee: "at_least_once",
        elapsed_seconds: timing.elapsed.as_secs_f64(),
        join_seconds: timing.join.as_secs_f64(),
        processing_seconds: processing.as_secs_f64(),
        decide_seconds: 0.0,
        events_per_second: rate(consumed, processing),
        commit_interval_ms: 0,
        events_per_second_including_join: rate(consumed, timing.elapsed),
    })
}

/// `records` per second of `over`; 0 when no time was measured.
fn rate(records: u64, over: Duration) -> f64 {
    let secs = over.as_secs_f64();
    if secs > 0.0 {
        records as f64 / secs
    } else {
        0.0
    }
}

/// The event ids of every record on the output topic (in `entity`'s
/// output schema).
fn outbox_event_ids<E: Entity>(
    entity: &E,
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> Result<Vec<String>, DemoError> {
    use rdkafka::Message;
    let schema = apache_avro::Schema::parse_str(entity.status_schema())
        .map_err(|e| crate::engine::codec::EncodeError::Avro(e.to_string()))?;
    let encoder = crate::processor::outbox::OutboxEncoder::<E>::with_schema(schema, 0, "")?;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "orderly-demo-outbox-reader")
        .create()?;
    let mut tpl = rdkafka::TopicPartitionList::new();
    let mut remaining = 0i64;
    for p in 0..partitions {
        let (low, high) = consumer.fetch_watermarks(topic, p, Duration::from_secs(5))?;
        remaining += high - low;
        tpl.add_partition_offset(topic, p, rdkafka::Offset::Offset(low))?;
    }
    consumer.assign(&tpl)?;
    let mut ids = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while remaining > 0 && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            remaining -= 1;
            let value = message.payload().map(|p| encoder.decode(p));
            if let Some(Ok(apache_avro::types::Value::Record(fields))) = value {
                if let Some((_, apache_avro::types::Value::String(id))) =
                    fields.iter().find(|(n, _)| n == "event_id")
                {
                    ids.push(id.clone());
                }
            }
        }
    }
    Ok(ids)
}

/// Records in the dead-letter topic (sum of high watermarks).
fn dlq_records(bootstrap: &str, dlq_topic: &str) -> Result<i64, DemoError> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()?;
    let (low, high) = consumer.fetch_watermarks(dlq_topic, 0, Duration::from_secs(5))?;
    Ok(high - low)
}

impl DemoSummary {
    /// A human-readable table.
    pub(crate) fn table(&self) -> String {
        let e = &self.expected;
        let mark = |ok: bool| if ok { "yes" } else { "NO" };
        format!(
            "orderly demo: {keys} {noun}s over {partitions} partitions (in-process mock Kafka cluster, {guarantee})\n\
             \n\
             outcome         processor   expected\n\
             consumed     {consumed:>12} {records:>10}\n\
             applied      {applied:>12} {e_applied:>10}\n\
             duplicates   {duplicates:>12} {e_dup:>10}\n\
             stale        {stale:>12} {e_stale:>10}\n\
             dead-lettered{dead:>12} {e_dead:>10}   (dead-letter topic holds {dlq})\n\
             status changes{outbox:>11} {e_outbox:>10}   (outbox: distinct event ids on the output topic, {outbox_records} records)\n\
             \n\
             outcomes add up to consumed: {add_up}\n\
             counters match the generator: {counts}\n\
             every {noun}'s state matches the generator: {states} ({mismatches} mismatches)\n\
             every status change published, nothing else: {outbox_ok}\n\
             \n\
             processing: {eps:.0} events/s ({consumed} records decided in {decide_secs:.3} s, from the first \
             batch to the last); durable {proc_secs:.3} s after the first partition assignment (state is \
             written every {interval} ms under load, and soon after a partition has read all its input)\n\
             joining the group: {join_secs:.1} s before that ({eps_all:.0} events/s over {secs:.1} s with it)\n",
            keys = self.keys,
            noun = self.noun,
            partitions = self.partitions,
            guarantee = self.guarantee,
            consumed = self.consumed,
            records = e.records,
            applied = self.applied,
            e_applied = e.applied,
            duplicates = self.duplicates,
            e_dup = e.duplicates,
            stale = self.stale,
            e_stale = e.stale,
            dead = self.dead_lettered,
            e_dead = e.dead_lettered,
            dlq = self.dlq_topic_records,
            outbox = self.outbox_distinct,
            e_outbox = self.outbox_expected,
            outbox_records = self.outbox_records,
            outbox_ok = mark(self.outbox_matches_expected),
            add_up = mark(self.outcomes_add_up),
            counts = mark(self.counts_match_expected),
            states = mark(self.state_matches_expected),
            mismatches = self.state_mismatches,
            eps = self.events_per_second,
            proc_secs = self.processing_seconds,
            decide_secs = self.decide_seconds,
            interval = self.commit_interval_ms,
            join_secs = self.join_seconds,
            eps_all = self.events_per_second_including_join,
            secs = self.elapsed_seconds,
        )
    }
}
