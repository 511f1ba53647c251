//! The status page at `/` of `orderly run`, driven in headless Chromium
//! (Debian's `chromium` and `chromedriver`, installed by `.ci/run`): what a
//! person sees while records flow, and that it agrees with the store.

use std::time::Duration;

use orderly::workload::WorkloadSpec;

use crate::browser::Browser;
use crate::required_env;
use crate::support::{end_offsets, signal, wait_exit, wait_until, Reaper};
use crate::world::{tail, World};
use crate::PARTITIONS;

const FIELDS: [&str; 4] = ["applied", "duplicate", "stale", "dead_lettered"];

/// A number the page shows, from its raw `data-value`.
fn shown(browser: &Browser, css: &str) -> i64 {
    let value = browser.attr(css, "data-value").unwrap_or_else(|e| panic!("{css}: {e}"));
    value.as_deref().and_then(|v| v.parse::<f64>().ok()).map(|v| v as i64).unwrap_or(-1)
}

fn cell(partition: i32, field: &str) -> String {
    format!("#partitions tr[data-partition=\"{partition}\"] td[data-field=\"{field}\"]")
}

#[test]
fn the_status_page_shows_every_partition_live_and_agrees_with_the_store() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let spec = WorkloadSpec { orders: 3_000, poison_rate: 0.004, seed: 41, ..Default::default() };
    let (records, expected) = world.plan(&spec);
    let instance = world.instance("commit_interval_ms = 200");
    let reaper = Reaper::default();
    let mut run = reaper.watch(instance.spawn_run(None));
    let address = instance.wait_http(0);

    let browser = Browser::start().unwrap_or_else(|e| panic!("headless Chromium (installed by .ci/run): {e}"));
    browser.goto(&format!("http://{address}/")).expect("open the status page");
    let rows = format!("return document.querySelectorAll('#partitions tr[data-partition]').length === {PARTITIONS}");
    browser.wait_for(&rows, Duration::from_secs(60)).unwrap_or_else(|e| panic!("a row per partition: {e}\n{}", tail(&instance.log())));
    let ready = "return document.getElementById('ready').dataset.value === 'true'";
    browser.wait_for(ready, Duration::from_secs(60)).unwrap_or_else(|e| panic!("the page shows ready: {e}"));

    // Records start flowing after the page is open: it must follow them.
    let flowing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let producer = {
        let (producer, topic, flowing) = (world.producer(), world.topic.clone(), flowing.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            for chunk in records.chunks(400) {
                runtime.block_on(orderly::load::produce_planned(&producer, &topic, chunk)).expect("produce");
                std::thread::sleep(Duration::from_millis(300));
            }
            flowing.store(false, std::sync::atomic::Ordering::SeqCst);
        })
    };
    let first = (shown(&browser, "#total-consumed"), shown(&browser, "#updates"));
    let moved = wait_until(Duration::from_secs(30), || {
        shown(&browser, "#total-consumed") > first.0 && shown(&browser, "#updates") >= first.1 + 3
    });
    let still_flowing = flowing.load(std::sync::atomic::Ordering::SeqCst);
    assert!(moved, "the page follows the records: consumed {first:?} -> {}", shown(&browser, "#total-consumed"));
    assert!(still_flowing, "seen updating while records were still being produced");
    let screenshot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    browser.screenshot_png(&screenshot).expect("screenshot");
    eprintln!("status page screenshot: {}", screenshot.display());

    producer.join().expect("producer");
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let consumed: i64 = ends.values().sum();
    assert!(wait_until(Duration::from_secs(120), || world.committed() == ends), "{}", tail(&instance.log()));
    let settled = wait_until(Duration::from_secs(20), || {
        shown(&browser, "#total-consumed") == consumed
            && (0..PARTITIONS).all(|p| shown(&browser, &cell(p, "checkpoint")) == ends[&p] && shown(&browser, &cell(p, "lag")) == 0)
    });
    assert!(settled, "the page reaches the end: consumed {} of {consumed}", shown(&browser, "#total-consumed"));
    let page: Vec<[i64; 4]> = (0..PARTITIONS).map(|p| FIELDS.map(|f| shown(&browser, &cell(p, f)))).collect();
    let hit_rate = browser.text("#hit-rate").expect("hit rate").unwrap_or_default();
    let want_rate = format!("{:.2}%", 100.0 * expected.duplicates as f64 / consumed as f64);
    assert_eq!(hit_rate.trim(), want_rate, "idempotency hit rate as shown");
    let completion = browser.text("#completion-p50").expect("completion").unwrap_or_default();
    assert!(!completion.trim().is_empty() && completion.trim() != "–", "completion time shown: {completion:?}");
    drop(browser);

    signal(&run, "TERM");
    assert!(wait_exit(&mut run, Duration::from_secs(30)).is_some_and(|s| s.success()), "{}", tail(&instance.log()));
    let stats = instance.stats();
    for p in 0..PARTITIONS {
        let row = stats["partitions"].as_array().expect("partitions").iter().find(|r| r["partition"] == p).expect("partition row");
        let stored = ["applied", "duplicates", "stale", "dead_lettered"].map(|k| row[k].as_i64().unwrap_or(-1));
        assert_eq!(page[p as usize], stored, "partition {p}: the page's counters equal the store's");
    }
    assert_eq!(world.verify(&instance, &expected), 0);
}
