//! The status page at `/` of `orderly run`, driven in headless Chromium
//! (Debian's `chromium` and `chromedriver`, installed by `.ci/run`): what a
//! person sees while records flow, and that it agrees with the store.

use std::time::Duration;

use crate::browser::Browser;
use crate::required_env;
use crate::support::{end_offsets, signal, wait_exit, wait_until, Reaper};
use crate::world::{tail, World};
use crate::PARTITIONS;

const FIELDS: [&str; 4] = ["applied", "duplicate", "stale", "dead_lettered"];

/// A number the page shows, from its raw `data-value`.
fn shown(browser: &Browser, css: &str) -> i64 {
    let value = browser
        .attr(css, "data-value")
        .unwrap_or_else(|e| panic!("{css}: {e}"));
    value
        .as_deref()
        .and_then(|v| v.parse::<f64>().ok())
        .map(|v| v as i64)
        .unwrap_or(-1)
}

fn cell(partition: i32, field: &str) -> String {
    format!("#partitions tr[data-partition=\"{partition}\"] td[data-field=\"{field}\"]")
}

/// What the live stream sent.
#[derive(Debug, Default, Clone, Copy)]
struct Sent {
    records: u64,
    applied: u64,
    duplicates: u64,
    stale: u64,
    dead_lettered: u64,
}

/// Produces a live stream, dated as it is sent (so completion times are
/// real): per round, 150 new orders' CREATED and PAID events, every 20th
/// event sent twice (a duplicate), every 10th order's CREATED sent again
/// after its PAID (stale), and one poison record.
fn live_stream(
    world: &World,
    rounds: usize,
    flowing: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<Sent> {
    use orderly::testkit::orders::{Encoder, EventType, OrderEvent, WriterVersion};
    let registry = orderly::Registry::http(&world.registry.url, Duration::from_secs(5))
        .expect("registry client");
    let encoder = world
        .runtime
        .block_on(Encoder::register(&registry, &world.topic))
        .expect("register schemas");
    let (producer, topic) = (world.producer(), world.topic.clone());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let mut sent = Sent::default();
        for round in 0..rounds {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0);
            let mut batch = Vec::new();
            for j in 0..150 {
                let order_id = format!("live-{round:03}-{j:03}");
                let event = |version: i64, event_type| OrderEvent {
                    event_id: format!("{order_id}-v{version}"),
                    order_id: order_id.clone(),
                    version,
                    event_type,
                    amount: 1_000 + j,
                    currency: "EUR".into(),
                    occurred_at: now,
                };
                let (created, paid) = (event(1, EventType::Created), event(2, EventType::Paid));
                let mut push = |e: &OrderEvent| {
                    batch.push(orderly::testkit::orders::workload::PlannedRecord {
                        key: order_id.clone(),
                        payload: encoder.encode(e, WriterVersion::V2).expect("encode"),
                    })
                };
                push(&created);
                push(&paid);
                sent.applied += 2;
                if j % 20 == 0 {
                    push(&paid);
                    sent.duplicates += 1;
                }
                if j % 10 == 5 {
                    // The same CREATED under a new id, after PAID: stale.
                    push(&OrderEvent {
                        event_id: format!("{order_id}-late"),
                        ..created.clone()
                    });
                    sent.stale += 1;
                }
            }
            batch.push(orderly::testkit::orders::workload::PlannedRecord {
                key: format!("poison-{round}"),
                payload: b"not avro".to_vec(),
            });
            sent.dead_lettered += 1;
            sent.records += batch.len() as u64;
            runtime
                .block_on(orderly::testkit::produce_planned(&producer, &topic, &batch))
                .expect("produce");
            std::thread::sleep(Duration::from_millis(300));
        }
        flowing.store(false, std::sync::atomic::Ordering::SeqCst);
        sent
    })
}

#[test]
fn the_status_page_shows_every_partition_live_and_agrees_with_the_store() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let instance = world.instance("commit_interval_ms = 200");
    let reaper = Reaper::default();
    let mut run = reaper.watch(instance.spawn_run(None));
    let address = instance.wait_http(0);

    let browser = Browser::start()
        .unwrap_or_else(|e| panic!("headless Chromium (installed by .ci/run): {e}"));
    if let Err(e) = browser.goto(&format!("http://{address}/")) {
        let exited = run.try_wait().ok().flatten();
        panic!(
            "open the status page: {e}\norderly run exited: {exited:?}\n{}",
            tail(&instance.log())
        );
    }
    let rows = format!("return document.querySelectorAll('#partitions tr[data-partition]').length === {PARTITIONS}");
    browser
        .wait_for(&rows, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("a row per partition: {e}\n{}", tail(&instance.log())));
    let ready = "return document.getElementById('ready').dataset.value === 'true'";
    browser
        .wait_for(ready, Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("the page shows ready: {e}"));

    // Records start flowing after the page is open: it must follow them.
    let flowing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let producer = live_stream(&world, 25, flowing.clone());
    let first = (
        shown(&browser, "#total-consumed"),
        shown(&browser, "#updates"),
    );
    let moved = wait_until(Duration::from_secs(30), || {
        shown(&browser, "#total-consumed") > first.0 && shown(&browser, "#updates") >= first.1 + 3
    });
    let still_flowing = flowing.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        moved,
        "the page follows the records: consumed {first:?} -> {}",
        shown(&browser, "#total-consumed")
    );
    assert!(
        still_flowing,
        "seen updating while records were still being produced"
    );
    let mid = shown(&browser, "#total-consumed");
    assert!(
        wait_until(Duration::from_secs(30), || shown(
            &browser,
            "#total-consumed"
        ) > mid),
        "and it goes on following them"
    );
    // The charts: one sample per update, drawn (a line with a point per
    // sample), the rate above zero at some point while records flowed.
    for chart in ["#chart-rate", "#chart-lag", "#chart-outbox"] {
        assert!(
            shown(&browser, chart) >= 3,
            "{chart} has samples: {}",
            shown(&browser, chart)
        );
        let points = browser
            .attr(&format!("{chart} polyline"), "points")
            .expect("points")
            .unwrap_or_default();
        assert!(
            points.split_whitespace().count() as i64 >= shown(&browser, chart),
            "{chart} draws every sample: {points}"
        );
    }
    let rate_max = browser
        .text("#chart-rate-max")
        .expect("rate max")
        .unwrap_or_default();
    assert!(
        rate_max.starts_with("max ") && rate_max != "max 0.0",
        "the rate chart saw the records: {rate_max}"
    );
    let screenshot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    browser.screenshot_png(&screenshot).expect("screenshot");
    eprintln!("status page screenshot: {}", screenshot.display());

    let sent = producer.join().expect("producer");
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let consumed: i64 = ends.values().sum();
    assert_eq!(consumed as u64, sent.records);
    assert!(
        wait_until(Duration::from_secs(120), || world.committed() == ends),
        "{}",
        tail(&instance.log())
    );
    let settled = wait_until(Duration::from_secs(20), || {
        shown(&browser, "#total-consumed") == consumed
            && (0..PARTITIONS).all(|p| {
                shown(&browser, &cell(p, "checkpoint")) == ends[&p]
                    && shown(&browser, &cell(p, "lag")) == 0
            })
    });
    assert!(
        settled,
        "the page reaches the end: consumed {} of {consumed}",
        shown(&browser, "#total-consumed")
    );
    let totals = [
        "#total-applied",
        "#total-duplicate",
        "#total-stale",
        "#total-dead_lettered",
    ]
    .map(|id| shown(&browser, id) as u64);
    assert_eq!(
        totals,
        [
            sent.applied,
            sent.duplicates,
            sent.stale,
            sent.dead_lettered
        ],
        "the page's totals are the stream's"
    );
    let page: Vec<[i64; 4]> = (0..PARTITIONS)
        .map(|p| FIELDS.map(|f| shown(&browser, &cell(p, f))))
        .collect();
    let hit_rate = browser
        .text("#hit-rate")
        .expect("hit rate")
        .unwrap_or_default();
    let want_rate = format!("{:.2}%", 100.0 * sent.duplicates as f64 / consumed as f64);
    assert_eq!(hit_rate.trim(), want_rate, "idempotency hit rate as shown");
    // Events are dated as they are sent: completion is the pipeline's own
    // delay (batch wait, commit interval, flush), well under a minute.
    let p99 = browser
        .attr("#completion-p99", "data-value")
        .expect("p99")
        .and_then(|v| v.parse::<f64>().ok());
    assert!(
        p99.is_some_and(|s| s > 0.0 && s < 60.0),
        "completion p99 {p99:?} s"
    );
    drop(browser);

    signal(&run, "TERM");
    assert!(
        wait_exit(&mut run, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "{}",
        tail(&instance.log())
    );
    let stats = instance.stats();
    for p in 0..PARTITIONS {
        let row = stats["partitions"]
            .as_array()
            .expect("partitions")
            .iter()
            .find(|r| r["partition"] == p)
            .expect("partition row");
        let stored = ["applied", "duplicates", "stale", "dead_lettered"]
            .map(|k| row[k].as_i64().unwrap_or(-1));
        assert_eq!(
            page[p as usize], stored,
            "partition {p}: the page's counters equal the store's"
        );
    }
}
