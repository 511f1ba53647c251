//! The dead-letter page at `/dlq` of `orderly run`, driven in headless
//! Chromium behind the bearer token: letters listed newest first, filtered
//! by kind, one opened (its body decoded once its schema is registered),
//! two re-driven from the page, and those two applied, counted and gone
//! from the page's pending count.

use std::time::Duration;

use orderly::testkit::orders::workload::PlannedRecord;
use orderly::testkit::orders::Encoder;
use orderly::Registry;

use crate::browser::Browser;
use crate::observe::http_get;
use crate::required_env;
use crate::support::late_schema::{self, schema_v3};
use crate::support::{wait_until, Reaper};
use crate::world::{stop, tail, World};

const FIXABLE: usize = 6;
const GOOD: usize = 10;
const TOKEN: &str = "dlq-page-secret";
/// A page script's `fixable()`: the rows of letters the late schema fixes
/// (not the one written with a schema id no registry has).
const FIXABLE_ROWS: &str = "const fixable = () => Array.from(document.querySelectorAll('#letters tr[data-dlq]')).filter(r => r.dataset.kind === 'unknown_schema' && !r.cells[4].title.includes('999999'));";

/// The applied count `/api/status` shows.
fn applied(address: &str) -> u64 {
    let body = http_request_with_token(address, "/api/status");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    status["totals"]["applied"].as_u64().unwrap_or(0)
}

fn http_request_with_token(address: &str, path: &str) -> String {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
    );
    crate::observe::http_request(address, request.as_bytes())
        .map(|(_, body)| body)
        .unwrap_or_default()
}

#[test]
fn the_dead_letter_page_lists_filters_opens_and_redrives() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let registry =
        Registry::http(&world.registry.url, Duration::from_secs(5)).expect("registry client");
    let encoder = world
        .runtime
        .block_on(Encoder::register(&registry, &world.topic))
        .expect("register v1 and v2");
    // As in the re-drive test: the outbox's schema takes id 3 here, the
    // late schema 4 once it is registered.
    world
        .runtime
        .block_on(registry.register(
            &format!("{}-status-value", world.topic),
            orderly::testkit::orders::STATUS_SCHEMA,
        ))
        .expect("register the outbox schema");
    let late_id = 4;
    let mut records = late_schema::records(&encoder, late_id, FIXABLE, GOOD);
    // One letter of another kind, to filter by.
    records.push(PlannedRecord {
        key: "order-json".into(),
        payload: br#"{"order_id":"order-json"}"#.to_vec(),
    });
    world.produce(&records);
    let instance = world.instance("commit_interval_ms = 200");
    let reaper = Reaper::default();
    let mut run = reaper.watch(instance.spawn_run_env(
        None,
        "info,librdkafka=warn,rdkafka=warn",
        &[("ORDERLY_HTTP__BEARER_TOKEN", TOKEN)],
    ));
    assert!(
        world.caught_up(Duration::from_secs(120)),
        "{}",
        tail(&instance.log())
    );
    let address = instance.wait_http(0);
    let letters = FIXABLE + 2;
    let before = applied(&address);
    assert_eq!(
        before,
        (FIXABLE + 2 * GOOD) as u64,
        "{}",
        tail(&instance.log())
    );

    // Without the token, the page's data and the re-drive are refused.
    let (status, _) = http_get(&address, "/api/dlq").expect("GET /api/dlq");
    assert_eq!(status, 401);
    let post = format!(
        "POST /api/dlq/redrive HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 19\r\nConnection: close\r\n\r\n{{\"sources\":[\"0:0\"]}}"
    );
    let (status, _) = crate::observe::http_request(&address, post.as_bytes()).expect("POST");
    assert_eq!(status, 401, "a re-drive without the token is refused");

    // The fix: the late schema registered, the letters become re-drivable.
    let id = world
        .runtime
        .block_on(registry.register(&format!("{}-late-value", world.topic), &schema_v3()))
        .expect("register v3");
    assert_eq!(id, late_id);

    let browser = Browser::start()
        .unwrap_or_else(|e| panic!("headless Chromium (installed by .ci/run): {e}"));
    // The token, as the page keeps it once asked (per tab), set before the
    // page loads so it never has to ask.
    browser
        .goto(&format!("http://{address}/healthz"))
        .expect("open the endpoint");
    browser
        .eval(&format!(
            "window.sessionStorage.setItem('orderly-token', '{TOKEN}'); return true"
        ))
        .expect("keep the token");
    browser
        .goto(&format!("http://{address}/dlq"))
        .expect("open the dead-letter page");
    let wait = |js: &str, what: &str| {
        browser
            .wait_for(js, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{what}: {e}\n{}", tail(&instance.log())))
    };
    wait(
        &format!("return document.querySelectorAll('#letters tr[data-dlq]').length === {letters}"),
        "every letter listed",
    );
    wait(
        &format!("return document.getElementById('pending').dataset.value === '{letters}'"),
        "every letter pending",
    );
    // Newest first: the letters' positions in the topic go down the page.
    let order = browser
        .eval("return Array.from(document.querySelectorAll('#letters tr[data-dlq]')).map(r => parseInt(r.dataset.dlq.split(':')[1]))")
        .expect("positions");
    let offsets: Vec<i64> = serde_json::from_value(order).expect("numbers");
    let mut newest_first = offsets.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(offsets, newest_first, "newest first");

    // Filter by kind, then back.
    browser
        .eval("const k = document.getElementById('kind'); k.value = 'bad_magic_byte'; k.dispatchEvent(new Event('change')); return true")
        .expect("filter");
    wait(
        "const rows = document.querySelectorAll('#letters tr[data-dlq]'); return rows.length === 1 && rows[0].dataset.kind === 'bad_magic_byte'",
        "the filter keeps one letter",
    );
    browser
        .eval("const k = document.getElementById('kind'); k.value = ''; k.dispatchEvent(new Event('change')); return true")
        .expect("unfilter");
    wait(
        &format!("return document.querySelectorAll('#letters tr[data-dlq]').length === {letters}"),
        "every letter again",
    );

    // Open a fixable letter: decoded with the schema registered since.
    browser
        .eval(&format!("{FIXABLE_ROWS} const r = fixable()[0]; r.click(); window.__opened = r.dataset.dlq; return true"))
        .expect("open a letter");
    let decoded = wait(
        "const d = document.getElementById('detail'); return !d.hidden && d.dataset.dlq === window.__opened && document.getElementById('detail-body').dataset.decoded === '1' && document.getElementById('detail-body').textContent",
        "the letter opens, its body decoded",
    );
    let body = decoded.as_str().unwrap_or_default().to_string();
    assert!(body.contains("order-fix-"), "the body as JSON: {body}");

    // Re-drive two fixable letters from the page.
    let chosen = browser
        .eval(&format!("{FIXABLE_ROWS} return fixable().slice(0, 2).map(r => {{ r.querySelector('input.pick').click(); return r.dataset.source; }})"))
        .expect("pick two");
    assert_eq!(chosen.as_array().map(Vec::len), Some(2), "{chosen}");
    browser
        .eval("document.getElementById('redrive').click(); return true")
        .expect("re-drive");
    wait(
        "return document.getElementById('result').dataset.redriven",
        "the re-drive's result shown",
    );
    let redriven = browser
        .attr("#result", "data-redriven")
        .expect("result")
        .unwrap_or_default();
    let said = browser.text("#result").ok().flatten().unwrap_or_default();
    assert_eq!(redriven, "2", "{said}");
    wait(
        &format!(
            "return document.getElementById('pending').dataset.value === '{}'",
            letters - 2
        ),
        "two letters fewer pending",
    );
    // The two records come back through the input and apply.
    let target = before + 2;
    let counted = wait_until(Duration::from_secs(60), || applied(&address) == target);
    assert!(
        counted,
        "re-driven records applied: {before} -> {}\n{}",
        applied(&address),
        tail(&instance.log())
    );
    stop(&mut run, &instance);
}
