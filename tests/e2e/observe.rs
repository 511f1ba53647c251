//! The HTTP endpoint of `orderly run` on a real broker: metrics that equal
//! the expected outcome exactly, counters seeded from the checkpoints after a
//! restart, `/state/{order_id}` answers (200, 404, 400, 421), health and
//! readiness, and a server that keeps answering under abuse.

use std::collections::BTreeMap;
use std::time::Duration;

use orderly::testkit::orders::workload::WorkloadSpec;
use orderly::testkit::orders::StateView;

use crate::browser::wire::http_exchange;
use crate::required_env;
use crate::support::{end_offsets, signal, wait_exit, wait_until, Reaper};
use crate::world::{tail, World};
use crate::PARTITIONS;

/// Sends raw request bytes to `address` (HOST:PORT) on a fresh connection:
/// (status, body). An error when the server answers nothing.
pub(crate) fn http_request(address: &str, request: &[u8]) -> Result<(u16, String), String> {
    let addr: std::net::SocketAddr = address.parse().map_err(|e| format!("{address}: {e}"))?;
    let (status, body) = http_exchange(addr, request, Duration::from_secs(30))?;
    Ok((status, String::from_utf8_lossy(&body).into_owned()))
}

/// `GET path` on `address`: (status, body).
pub fn http_get(address: &str, path: &str) -> Result<(u16, String), String> {
    http_request(
        address,
        format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
}

/// One scrape, as `name{labels}` -> value (comments and `# EOF` dropped).
pub fn scrape(address: &str) -> BTreeMap<String, f64> {
    let (status, body) = http_get(address, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "{body}");
    assert!(
        body.ends_with("# EOF\n"),
        "OpenMetrics text ends with # EOF"
    );
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("series value");
            (
                series.to_string(),
                value.parse::<f64>().expect("numeric value"),
            )
        })
        .collect()
}

/// The sum of every series of `name` whose labels contain `matching`.
pub fn total(metrics: &BTreeMap<String, f64>, name: &str, matching: &str) -> f64 {
    metrics
        .iter()
        .filter(|(series, _)| {
            (series.as_str() == name || series.starts_with(&format!("{name}{{")))
                && series.contains(matching)
        })
        .map(|(_, v)| v)
        .sum()
}

fn outcome_totals(metrics: &BTreeMap<String, f64>) -> [u64; 4] {
    ["applied", "duplicate", "stale", "dead_lettered"].map(|outcome| {
        total(
            metrics,
            "orderly_records_total",
            &format!("outcome=\"{outcome}\""),
        ) as u64
    })
}

#[test]
fn metrics_state_queries_and_health_match_the_run() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let spec = WorkloadSpec {
        orders: 2_000,
        poison_rate: 0.004,
        seed: 31,
        ..Default::default()
    };
    let (records, expected) = world.plan(&spec);
    world.produce(&records);
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    let consumed: i64 = ends.values().sum();
    let a = world.instance("commit_interval_ms = 200");
    let reaper = Reaper::default();

    let mut run = reaper.watch(a.spawn_run(None));
    let address = a.wait_http(0);
    let (status, body) = http_get(&address, "/healthz").expect("healthz");
    assert_eq!(status, 200, "healthz: {body}");
    assert!(
        wait_until(Duration::from_secs(60), || http_get(&address, "/readyz")
            .is_ok_and(|(s, _)| s == 200)),
        "never ready\n{}",
        tail(&a.log())
    );
    assert!(
        wait_until(Duration::from_secs(120), || world.committed() == ends),
        "never caught up\n{}",
        tail(&a.log())
    );
    // The end offsets reach the metrics at the poll loop's next turns.
    assert!(
        wait_until(Duration::from_secs(10), || {
            let m = scrape(&address);
            (0..PARTITIONS)
                .all(|p| m.get(&format!("orderly_consumer_lag{{partition=\"{p}\"}}")) == Some(&0.0))
        }),
        "lag reaches 0 on every partition: {:?}",
        scrape(&address)
    );
    let m = scrape(&address);
    let want = [
        expected.outcomes.applied,
        expected.outcomes.duplicates,
        expected.outcomes.stale,
        expected.outcomes.dead_lettered,
    ];
    assert_eq!(
        outcome_totals(&m),
        want,
        "per-outcome counters equal the expected counts"
    );
    assert_eq!(m["orderly_assigned_partitions"], PARTITIONS as f64);
    assert_eq!(
        m["orderly_completion_seconds_count"] as u64, expected.outcomes.applied,
        "one completion per applied event"
    );
    assert_eq!(
        m["orderly_batch_records_sum"] as i64, consumed,
        "batch sizes add up to the records consumed"
    );
    assert_eq!(
        m["orderly_batch_records_count"], m["orderly_batch_duration_seconds_count"],
        "one size and one duration per batch"
    );
    assert_eq!(
        m["orderly_batch_records_count"],
        m["orderly_batch_records_bucket{le=\"+Inf\"}"]
    );
    assert!(m["orderly_write_out_duration_seconds_count"] >= PARTITIONS as f64);
    assert!(
        m["orderly_flush_duration_seconds_count"] >= 1.0
            && m["orderly_commit_duration_seconds_count"] >= 1.0
    );
    let gaps = total(&m, "orderly_version_gaps_total", "");
    assert!(
        gaps > 0.0,
        "the reordered workload applies events that skip versions"
    );

    // State queries: a sample of orders, an unknown one, bad ids.
    let sample: Vec<(&String, &StateView)> = expected.states.iter().step_by(97).collect();
    for (order_id, want) in &sample {
        let (status, body) = http_get(&address, &format!("/state/{order_id}")).expect("state");
        assert_eq!(status, 200, "{order_id}: {body}");
        let got: StateView = serde_json::from_str(&body).expect("state JSON");
        assert_eq!(&got, *want, "{order_id}");
    }
    let (status, body) = http_get(&address, "/state/no-such-order").expect("state");
    assert_eq!(status, 404, "{body}");
    for (path, says) in [
        ("/state/", "empty"),
        ("/state", "empty"),
        ("/state/%FF%FE", "UTF-8"),
        ("/state/abc%2", "percent"),
        (&format!("/state/{}", "x".repeat(600)), "at most 512"),
    ] {
        let (status, body) = http_get(&address, path).expect("bad id");
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }

    // A second member takes some partitions: orders there are not here (421).
    let b = world.instance("commit_interval_ms = 200");
    let mut run_b = reaper.watch(b.spawn_run(None));
    let b_client_id = crate::support::client_id_of(&run_b);
    let address_b = b.wait_http(0);
    let split = wait_until(Duration::from_secs(60), || {
        let (ma, mb) = (scrape(&address), scrape(&address_b));
        ma["orderly_assigned_partitions"] + mb["orderly_assigned_partitions"] == PARTITIONS as f64
            && mb["orderly_assigned_partitions"] > 0.0
            && http_get(&address_b, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    assert!(
        split,
        "the group splits the partitions\n{}\n{}",
        tail(&a.log()),
        tail(&b.log())
    );
    let mut misdirected = 0;
    for (order_id, want) in &sample {
        let (status, body) = http_get(&address, &format!("/state/{order_id}")).expect("state");
        if status == 421 {
            misdirected += 1;
            let answer: serde_json::Value = serde_json::from_str(&body).expect("421 JSON");
            let partition = answer["partition"].as_i64().expect("partition");
            // The answer names the owner from the group's metadata
            // (DescribeGroups member assignments): b's client id, which
            // carries its host and pid.
            let owner = &answer["owner"];
            assert_eq!(
                owner["client_id"].as_str(),
                Some(b_client_id.as_str()),
                "{order_id}: the owner is b: {answer}"
            );
            assert!(
                owner["member_id"].as_str().is_some_and(|m| !m.is_empty()),
                "{order_id}: a member id: {answer}"
            );
            // The other member answers for it.
            let (status_b, body_b) =
                http_get(&address_b, &format!("/state/{order_id}")).expect("state on b");
            assert_eq!(
                status_b, 200,
                "{order_id} (partition {partition}) is on the other member: {body_b}"
            );
            assert_eq!(
                &serde_json::from_str::<StateView>(&body_b).expect("JSON"),
                *want
            );
            eprintln!("421 for {order_id}: {answer}");
        } else {
            assert_eq!(status, 200, "{order_id}: {body}");
        }
    }
    assert!(
        misdirected > 0,
        "some sampled orders live on the other member's partitions"
    );
    signal(&run_b, "TERM");
    assert!(
        wait_exit(&mut run_b, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "{}",
        tail(&b.log())
    );
    signal(&run, "TERM");
    assert!(
        wait_exit(&mut run, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "{}",
        tail(&a.log())
    );

    // A restart with nothing new to do: the counters come back from the
    // checkpoints (b's partitions through the changelog), still exact.
    let before = a.http_starts();
    let mut run = reaper.watch(a.spawn_run(None));
    let address = a.wait_http(before);
    assert!(
        wait_until(Duration::from_secs(60), || http_get(&address, "/readyz")
            .is_ok_and(|(s, _)| s == 200)),
        "{}",
        tail(&a.log())
    );
    // Ready means the partitions assigned so far are; the group may still
    // be handing this member the rest (seen on a loaded machine: a quarter
    // of the counts at the first scrape), so the counts are read until
    // every partition's are in, and must then be exact.
    let mut m = scrape(&address);
    wait_until(Duration::from_secs(60), || {
        m = scrape(&address);
        outcome_totals(&m) == want
    });
    assert_eq!(
        outcome_totals(&m),
        want,
        "counters seeded from the durable checkpoints"
    );
    assert_eq!(
        m["orderly_completion_seconds_count"], 0.0,
        "nothing was completed by this run"
    );
    signal(&run, "TERM");
    assert!(
        wait_exit(&mut run, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "{}",
        tail(&a.log())
    );
    assert_eq!(world.verify(&a, &expected), 0);
}

#[test]
fn the_endpoint_survives_slow_clients_floods_and_garbage() {
    let world = World::new(required_env("ORDERLY_E2E_BOOTSTRAP"));
    let spec = WorkloadSpec {
        orders: 4_000,
        poison_rate: 0.002,
        seed: 32,
        ..Default::default()
    };
    let (records, expected) = world.plan(&spec);
    let instance = world.instance("commit_interval_ms = 200");
    let reaper = Reaper::default();
    // This run logs JSON (for log shippers): checked at the end.
    let mut run = reaper.watch(instance.spawn_run_env(
        None,
        "info,librdkafka=warn,rdkafka=warn",
        &[("ORDERLY_LOG_FORMAT", "json")],
    ));
    let address = instance.wait_http(0);

    // Slow clients: each sends a request head one byte a second; the server
    // must drop them (header timeout) without holding up anyone else.
    let slow: Vec<std::thread::JoinHandle<bool>> = (0..20)
        .map(|_| {
            let address = address.clone();
            std::thread::spawn(move || {
                use std::io::Write;
                let Ok(mut stream) = std::net::TcpStream::connect(&address) else {
                    return false;
                };
                for byte in b"GET /metrics HTTP/1.1\r\nHost: x\r\n" {
                    if stream.write_all(&[*byte]).is_err() {
                        return true; // closed by the server
                    }
                    std::thread::sleep(Duration::from_millis(1000));
                }
                false
            })
        })
        .collect();
    let producer = {
        let world_records = records.clone();
        let producer = world.producer();
        let (bootstrap, topic) = (world.bootstrap.clone(), world.topic.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Runtime::new().expect("runtime");
            for chunk in world_records.chunks(2_000) {
                runtime
                    .block_on(orderly::testkit::produce_planned(&producer, &topic, chunk))
                    .expect("produce");
                std::thread::sleep(Duration::from_millis(100));
            }
            drop(bootstrap);
        })
    };

    // Garbage: not HTTP, a huge head, a bad method, a truncated request.
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    for request in [
        &b"\x00\x01\x02 not http at all\r\n\r\n"[..],
        huge.as_bytes(),
        b"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /metr",
    ] {
        let answer = http_request(&address, request);
        let status = answer.map(|(s, _)| s).unwrap_or(0);
        assert!(
            matches!(status, 0 | 400 | 405 | 431 | 404),
            "garbage answered {status}"
        );
    }

    // A flood: 1,000 requests at once over the endpoints.
    let started = std::time::Instant::now();
    let flood: Vec<std::thread::JoinHandle<u16>> = (0..1_000)
        .map(|i| {
            let address = address.clone();
            std::thread::spawn(move || {
                let path = [
                    "/metrics",
                    "/api/status",
                    "/state/order-00000001",
                    "/healthz",
                    "/",
                ][i % 5];
                http_get(&address, path).map(|(s, _)| s).unwrap_or(0)
            })
        })
        .collect();
    let statuses: Vec<u16> = flood.into_iter().map(|h| h.join().unwrap_or(0)).collect();
    let answered = statuses
        .iter()
        .filter(|s| matches!(**s, 200 | 404 | 421))
        .count();
    eprintln!(
        "flood: {answered} of 1000 answered in {:.2} s",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        answered,
        1_000,
        "every flooded request is answered: {:?}",
        statuses
            .iter()
            .filter(|s| !matches!(**s, 200 | 404 | 421))
            .collect::<Vec<_>>()
    );

    let dropped = slow
        .into_iter()
        .map(|h| h.join().unwrap_or(false))
        .filter(|d| *d)
        .count();
    assert_eq!(
        dropped, 20,
        "every slow client was cut off by the header timeout"
    );
    let (status, _) = http_get(&address, "/healthz").expect("healthz");
    assert_eq!(status, 200);
    producer.join().expect("producer thread");
    let ends = end_offsets(&world.bootstrap, &world.topic, PARTITIONS);
    assert!(
        wait_until(Duration::from_secs(120), || world.committed() == ends),
        "{}",
        tail(&instance.log())
    );
    signal(&run, "TERM");
    assert!(
        wait_exit(&mut run, Duration::from_secs(30)).is_some_and(|s| s.success()),
        "{}",
        tail(&instance.log())
    );
    assert_eq!(
        world.verify(&instance, &expected),
        0,
        "the pipeline under the flood is exact"
    );
    check_json_logs(&instance.log(), &world);
}

/// Every line is a JSON object; record-path lines carry the partition span
/// (topic, partition, group).
fn check_json_logs(log: &str, world: &World) {
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {l}"))
        })
        .collect();
    let message = |v: &serde_json::Value| {
        v["fields"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let first_batches = lines
        .iter()
        .filter(|v| message(v).starts_with("first batch on this partition"))
        .count();
    assert_eq!(
        first_batches, PARTITIONS as usize,
        "one first-batch line per partition"
    );
    let in_span: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|v| v["span"]["name"] == "partition")
        .collect();
    for line in lines
        .iter()
        .filter(|v| message(v).starts_with("first batch") || message(v).starts_with("seeked"))
    {
        assert_eq!(
            line["span"]["name"], "partition",
            "record-path lines are in the partition span: {line}"
        );
    }
    for line in &in_span {
        assert_eq!(
            line["span"]["topic"].as_str(),
            Some(world.topic.as_str()),
            "{line}"
        );
        assert_eq!(
            line["span"]["group"].as_str(),
            Some(world.group.as_str()),
            "{line}"
        );
        assert!(line["span"]["partition"].is_number(), "{line}");
    }
    eprintln!(
        "json logs: {} lines, {} in a partition span",
        lines.len(),
        in_span.len()
    );
}
