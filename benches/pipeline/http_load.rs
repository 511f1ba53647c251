//! `--http` and `--http-load`: (c), (o) and (e) serve the `run` endpoint
//! (`Processor::with_http` on 127.0.0.1:0) and, with `--http-load`, drive an
//! abuse load against it while the phase processes (issue: "the HTTP server
//! survives a slow client, 1,000 concurrent requests and garbage requests
//! without slowing the pipeline by more than 5%").
//!
//! The load runs on a thread of its own (`bench-http-load`) with a
//! single-threaded tokio runtime and raw TCP, from the moment
//! `Processor::run` is called until the store covers the end offsets; the
//! phase's shutdown then waits for the requests in flight, so that stopping
//! the endpoint does not count as failures. Its parts:
//!
//! * [`SLOW_CLIENTS`] slow clients (slowloris): a request head sent one byte
//!   per second, reconnecting whenever the server cuts the connection off
//!   (it gives 5 s for the headers);
//! * one garbage request every [`GARBAGE_EVERY`], in turn random bytes, a
//!   64 KiB header and an unknown method;
//! * a scrape of `/metrics` and a poll of `/api/status` every [`SCRAPE_EVERY`]
//!   (each on a new connection);
//! * every [`BURST_EVERY`] a burst of [`BURST`] concurrent requests, each on
//!   its own connection, over [`BURST_PATHS`], waiting for every answer
//!   before the next burst (bursts never overlap).
//!
//! "Answered" means an HTTP status line came back; "failed" a connection
//! refused or reset, a close without a status line, or no answer within
//! [`REQUEST_TIMEOUT`]. A garbage request is expected to get a 4xx or to
//! be closed, and a slow client to be cut off: those are counted apart.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::MissedTickBehavior;

pub const SLOW_CLIENTS: usize = 20;
pub const GARBAGE_EVERY: Duration = Duration::from_millis(100);
pub const SCRAPE_EVERY: Duration = Duration::from_secs(1);
pub const BURST_EVERY: Duration = Duration::from_secs(2);
/// With a limited number of bursts, the first comes this long into the
/// phase (after the group join, while records are processed).
pub const FIRST_BURST_AFTER: Duration = Duration::from_secs(3);
pub const BURST: usize = 1000;
pub const BURST_PATHS: [&str; 5] = [
    "/metrics",
    "/api/status",
    "/state/order-00000001",
    "/healthz",
    "/",
];
/// A request not answered (to the end of its body) within this is failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest answer read (the rest is not waited for).
const MAX_ANSWER: usize = 4 << 20;

/// What the endpoint did during a phase.
#[derive(Debug, Clone, Serialize)]
pub struct HttpOut {
    /// "served (idle)" or "served + abuse load".
    pub mode: String,
    pub address: String,
    /// CPU seconds of the server's thread (`orderly-http`) until covered.
    pub server_thread_cpu_seconds: f64,
    /// CPU seconds of the load generator's thread (same process, same cores).
    pub load_thread_cpu_seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadOut>,
}

/// The abuse load's outcome.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadOut {
    /// Seconds from the start of the load to the stop (covered), and to the
    /// last request in flight answered.
    pub seconds: f64,
    pub drained_seconds: f64,
    /// Well-formed requests (bursts and scrapes): answered with a status
    /// line / failed.
    pub answered: u64,
    pub failed: u64,
    pub bursts: BurstsOut,
    pub metrics_scrapes: Requests,
    pub status_polls: Requests,
    pub garbage: Requests,
    pub slow: SlowOut,
}

/// Requests of one kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Requests {
    pub sent: u64,
    pub answered: u64,
    pub failed: u64,
    /// Answers by status code; failures by kind ("refused", "reset",
    /// "closed", "timeout", ...).
    pub statuses: BTreeMap<String, u64>,
    pub failures: BTreeMap<String, u64>,
    /// Per request, connect to the end of the answer (answered ones).
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    pub latency_max_ms: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct BurstsOut {
    /// Bursts completed (every request answered or failed).
    pub count: u64,
    pub requests: Requests,
    /// A burst's completion: from its start to its last answer.
    pub completion_ms: Vec<f64>,
    pub completion_p50_ms: f64,
    pub completion_p99_ms: f64,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SlowOut {
    pub clients: usize,
    /// Connections opened, and how many the server cut off (closed or reset).
    pub connections: u64,
    pub cut_off: u64,
    pub connect_failures: u64,
    /// Connections still open (not cut off yet) when the load stopped.
    pub open_at_stop: u64,
    /// Answers a slow client got before being cut off (e.g. 408), by status.
    pub statuses: BTreeMap<String, u64>,
    /// Seconds from connecting to being cut off.
    pub cut_off_after_p50_s: f64,
    pub cut_off_after_max_s: f64,
    /// Bytes of the head sent before the cut, at most.
    pub max_head_bytes_sent: u64,
}

/// The running load: [`HttpLoad::stopper`] (set when the phase is covered)
/// ends it, [`HttpLoad::done`] resolves when the requests in flight are
/// through, [`HttpLoad::join`] gives the figures.
pub struct HttpLoad {
    stop: Arc<AtomicBool>,
    done: Option<tokio::sync::oneshot::Receiver<()>>,
    thread: std::thread::JoinHandle<LoadOut>,
}

impl HttpLoad {
    /// `max_bursts`: stop bursting after this many (0: every
    /// [`BURST_EVERY`] until the phase ends; otherwise the first comes
    /// [`FIRST_BURST_AFTER`] in, once the group has joined).
    pub fn start(address: SocketAddr, max_bursts: usize) -> anyhow::Result<HttpLoad> {
        let stop = Arc::new(AtomicBool::new(false));
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("bench-http-load".into())
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("the load's runtime");
                    let out = runtime.block_on(drive(address, stop, max_bursts));
                    let _ = done_tx.send(());
                    out
                })?
        };
        Ok(HttpLoad {
            stop,
            done: Some(done),
            thread,
        })
    }

    pub fn stopper(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Resolves when the load has stopped and its requests in flight are through.
    pub fn done(&mut self) -> tokio::sync::oneshot::Receiver<()> {
        self.done.take().expect("done taken once")
    }

    pub fn join(self) -> LoadOut {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap_or_default()
    }
}

/// Shared tallies.
#[derive(Default)]
struct Tally {
    bursts: BurstsOut,
    burst_latencies: Vec<f64>,
    metrics: Requests,
    metrics_latencies: Vec<f64>,
    status: Requests,
    status_latencies: Vec<f64>,
    garbage: Requests,
    garbage_latencies: Vec<f64>,
    slow: SlowOut,
    slow_cut_after: Vec<f64>,
}

type Shared = Arc<Mutex<Tally>>;

/// How one exchange ended.
enum Outcome {
    Status(u16),
    Failed(&'static str),
}

fn record(requests: &mut Requests, latencies: &mut Vec<f64>, outcome: &Outcome, ms: f64) {
    requests.sent += 1;
    match outcome {
        Outcome::Status(code) => {
            requests.answered += 1;
            *requests.statuses.entry(code.to_string()).or_default() += 1;
            latencies.push(ms);
        }
        Outcome::Failed(kind) => {
            requests.failed += 1;
            *requests.failures.entry((*kind).to_string()).or_default() += 1;
        }
    }
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn summarize(requests: &mut Requests, latencies: &mut [f64]) {
    latencies.sort_by(f64::total_cmp);
    requests.latency_p50_ms = percentile(latencies, 0.5);
    requests.latency_p99_ms = percentile(latencies, 0.99);
    requests.latency_max_ms = latencies.last().copied().unwrap_or(0.0);
}

fn io_kind(error: &std::io::Error) -> &'static str {
    use std::io::ErrorKind::*;
    match error.kind() {
        ConnectionRefused => "refused",
        ConnectionReset => "reset",
        ConnectionAborted => "aborted",
        BrokenPipe => "broken pipe",
        TimedOut => "timeout",
        AddrNotAvailable | AddrInUse => "no local port",
        _ => "io error",
    }
}

/// Sends `request` on a new connection and reads the answer to its end (the
/// requests ask for `Connection: close`): the status line's code, or how it
/// failed.
async fn exchange(address: SocketAddr, request: &[u8]) -> Outcome {
    match tokio::time::timeout(REQUEST_TIMEOUT, exchange_inner(address, request)).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome::Failed("timeout"),
    }
}

async fn exchange_inner(address: SocketAddr, request: &[u8]) -> Outcome {
    let mut stream = match TcpStream::connect(address).await {
        Ok(stream) => stream,
        Err(e) => {
            return Outcome::Failed(if io_kind(&e) == "refused" {
                "connect refused"
            } else {
                "connect failed"
            })
        }
    };
    // A garbage request may be answered (and the connection closed) before
    // all of it is written: read whatever came back all the same.
    let write_error = stream.write_all(request).await.err();
    let mut answer = Vec::with_capacity(1024);
    let mut buf = [0u8; 8 * 1024];
    let read_error = loop {
        match stream.read(&mut buf).await {
            Ok(0) => break None,
            Ok(n) => {
                if answer.len() < MAX_ANSWER {
                    answer.extend_from_slice(&buf[..n]);
                } else {
                    break None;
                }
            }
            Err(e) => break Some(e),
        }
    };
    if let Some(code) = status_code(&answer) {
        return Outcome::Status(code);
    }
    match (read_error, write_error) {
        (Some(e), _) | (None, Some(e)) => Outcome::Failed(io_kind(&e)),
        (None, None) => Outcome::Failed("closed without an answer"),
    }
}

fn status_code(answer: &[u8]) -> Option<u16> {
    let line = answer.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    if !words.next()?.starts_with("HTTP/") {
        return None;
    }
    words.next()?.parse().ok()
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: orderly-bench\r\nAccept: */*\r\nConnection: close\r\n\r\n").into_bytes()
}

/// A small xorshift, for the garbage's random bytes.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

fn garbage(kind: u64, rng: &mut XorShift) -> Vec<u8> {
    match kind % 3 {
        0 => {
            let len = 64 + (rng.next() % 4032) as usize;
            (0..len).map(|_| rng.next() as u8).collect()
        }
        1 => {
            let mut r = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: ".to_vec();
            r.extend(std::iter::repeat_n(b'a', 64 * 1024));
            r.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
            r
        }
        _ => b"BREW /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".to_vec(),
    }
}

async fn drive(address: SocketAddr, stop: Arc<AtomicBool>, max_bursts: usize) -> LoadOut {
    let started = Instant::now();
    let tally: Shared = Arc::default();
    let (stop_tx, stopped) = watch::channel(false);
    // The phase's watcher (an OS thread) sets `stop`; tasks wait on `stopped`.
    let poller = tokio::spawn(async move {
        while !stop.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = stop_tx.send(true);
    });
    let mut tasks = JoinSet::new();
    for i in 0..SLOW_CLIENTS {
        tasks.spawn(slow_client(address, i, stopped.clone(), tally.clone()));
    }
    tasks.spawn(garbage_loop(address, stopped.clone(), tally.clone()));
    tasks.spawn(scrape_loop(address, stopped.clone(), tally.clone()));
    tasks.spawn(burst_loop(
        address,
        stopped.clone(),
        tally.clone(),
        max_bursts,
    ));
    let mut stopped_rx = stopped.clone();
    until_stopped(&mut stopped_rx).await;
    let stopped_at = started.elapsed();
    while tasks.join_next().await.is_some() {}
    let _ = poller.await;

    let mut t = std::mem::take(&mut *tally.lock().unwrap());
    summarize(&mut t.bursts.requests, &mut t.burst_latencies);
    summarize(&mut t.metrics, &mut t.metrics_latencies);
    summarize(&mut t.status, &mut t.status_latencies);
    summarize(&mut t.garbage, &mut t.garbage_latencies);
    let mut completions = t.bursts.completion_ms.clone();
    completions.sort_by(f64::total_cmp);
    t.bursts.completion_p50_ms = percentile(&completions, 0.5);
    t.bursts.completion_p99_ms = percentile(&completions, 0.99);
    t.slow_cut_after.sort_by(f64::total_cmp);
    t.slow.cut_off_after_p50_s = percentile(&t.slow_cut_after, 0.5);
    t.slow.cut_off_after_max_s = t.slow_cut_after.last().copied().unwrap_or(0.0);
    t.slow.clients = SLOW_CLIENTS;
    let well_formed = [&t.bursts.requests, &t.metrics, &t.status];
    LoadOut {
        seconds: stopped_at.as_secs_f64(),
        drained_seconds: started.elapsed().as_secs_f64(),
        answered: well_formed.iter().map(|r| r.answered).sum(),
        failed: well_formed.iter().map(|r| r.failed).sum(),
        bursts: t.bursts,
        metrics_scrapes: t.metrics,
        status_polls: t.status,
        garbage: t.garbage,
        slow: t.slow,
    }
}

/// Resolves once the load is told to stop.
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// Sends a request head one byte per second; when the server cuts the
/// connection off, connects again.
async fn slow_client(
    address: SocketAddr,
    index: usize,
    mut stopped: watch::Receiver<bool>,
    tally: Shared,
) {
    let head = format!(
        "GET /state/order-{index:08} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slowloris/{index}\r\nAccept: */*\r\n\r\n"
    )
    .into_bytes();
    // Spread the clients over the first second.
    tokio::select! {
        _ = until_stopped(&mut stopped) => return,
        _ = tokio::time::sleep(Duration::from_millis(50 * index as u64)) => {}
    }
    while !*stopped.borrow() {
        let connected = Instant::now();
        let mut stream = match TcpStream::connect(address).await {
            Ok(stream) => stream,
            Err(_) => {
                tally.lock().unwrap().slow.connect_failures += 1;
                tokio::select! {
                    _ = until_stopped(&mut stopped) => return,
                    _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
                }
            }
        };
        tally.lock().unwrap().slow.connections += 1;
        let (mut reader, mut writer) = stream.split();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut sent = 0usize;
        let mut buf = [0u8; 4096];
        let mut answer = Vec::new();
        loop {
            tokio::select! {
                _ = until_stopped(&mut stopped) => {
                    let mut t = tally.lock().unwrap();
                    t.slow.open_at_stop += 1;
                    t.slow.max_head_bytes_sent = t.slow.max_head_bytes_sent.max(sent as u64);
                    return;
                }
                _ = tick.tick() => {
                    if sent < head.len() {
                        if writer.write_all(&head[sent..sent + 1]).await.is_err() {
                            break;
                        }
                        sent += 1;
                    }
                }
                read = reader.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => answer.extend_from_slice(&buf[..n.min(4096)]),
                },
            }
        }
        let mut t = tally.lock().unwrap();
        t.slow.cut_off += 1;
        t.slow.max_head_bytes_sent = t.slow.max_head_bytes_sent.max(sent as u64);
        if let Some(code) = status_code(&answer) {
            *t.slow.statuses.entry(code.to_string()).or_default() += 1;
        }
        t.slow_cut_after.push(connected.elapsed().as_secs_f64());
    }
}

/// One garbage request every `GARBAGE_EVERY`, each on its own connection
/// (not waiting for the previous one).
async fn garbage_loop(address: SocketAddr, mut stopped: watch::Receiver<bool>, tally: Shared) {
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut tick = tokio::time::interval(GARBAGE_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut in_flight = JoinSet::new();
    let mut n = 0u64;
    loop {
        tokio::select! {
            _ = until_stopped(&mut stopped) => break,
            _ = tick.tick() => {}
        }
        let request = garbage(n, &mut rng);
        n += 1;
        let tally = tally.clone();
        in_flight.spawn(async move {
            let start = Instant::now();
            let outcome = exchange(address, &request).await;
            let mut t = tally.lock().unwrap();
            let t = &mut *t;
            record(
                &mut t.garbage,
                &mut t.garbage_latencies,
                &outcome,
                start.elapsed().as_secs_f64() * 1e3,
            );
        });
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
}

/// `/metrics` and `/api/status` every `SCRAPE_EVERY`.
async fn scrape_loop(address: SocketAddr, mut stopped: watch::Receiver<bool>, tally: Shared) {
    let mut tick = tokio::time::interval(SCRAPE_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut in_flight = JoinSet::new();
    loop {
        tokio::select! {
            _ = until_stopped(&mut stopped) => break,
            _ = tick.tick() => {}
        }
        for metrics in [true, false] {
            let tally = tally.clone();
            in_flight.spawn(async move {
                let start = Instant::now();
                let outcome = exchange(
                    address,
                    &get(if metrics { "/metrics" } else { "/api/status" }),
                )
                .await;
                let ms = start.elapsed().as_secs_f64() * 1e3;
                let mut t = tally.lock().unwrap();
                let t = &mut *t;
                if metrics {
                    record(&mut t.metrics, &mut t.metrics_latencies, &outcome, ms);
                } else {
                    record(&mut t.status, &mut t.status_latencies, &outcome, ms);
                }
            });
        }
        while in_flight.try_join_next().is_some() {}
    }
    while in_flight.join_next().await.is_some() {}
}

/// Every `BURST_EVERY` (or right after the previous burst if it took
/// longer) `BURST` concurrent requests, each on its own connection.
async fn burst_loop(
    address: SocketAddr,
    mut stopped: watch::Receiver<bool>,
    tally: Shared,
    max_bursts: usize,
) {
    let requests: Vec<Arc<Vec<u8>>> = BURST_PATHS.iter().map(|p| Arc::new(get(p))).collect();
    let first = if max_bursts > 0 {
        tokio::time::Instant::now() + FIRST_BURST_AFTER
    } else {
        tokio::time::Instant::now()
    };
    let mut tick = tokio::time::interval_at(first, BURST_EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut bursts = 0;
    loop {
        if max_bursts > 0 && bursts >= max_bursts {
            until_stopped(&mut stopped).await;
            break;
        }
        bursts += 1;
        tokio::select! {
            _ = until_stopped(&mut stopped) => break,
            _ = tick.tick() => {}
        }
        let start = Instant::now();
        let mut burst = JoinSet::new();
        for i in 0..BURST {
            let request = requests[i % requests.len()].clone();
            burst.spawn(async move {
                let outcome = exchange(address, &request).await;
                (outcome, start.elapsed().as_secs_f64() * 1e3)
            });
        }
        let mut results = Vec::with_capacity(BURST);
        while let Some(joined) = burst.join_next().await {
            if let Ok(result) = joined {
                results.push(result);
            }
        }
        let completion = start.elapsed().as_secs_f64() * 1e3;
        let mut t = tally.lock().unwrap();
        let t = &mut *t;
        for (outcome, ms) in &results {
            record(&mut t.bursts.requests, &mut t.burst_latencies, outcome, *ms);
        }
        t.bursts.count += 1;
        t.bursts
            .completion_ms
            .push((completion * 10.0).round() / 10.0);
    }
}

/// One line per part of the load, for the table.
pub fn table_lines(key: &str, http: &HttpOut) -> Vec<String> {
    let mut lines = vec![format!(
        "({key}) http endpoint {} at {}: cpu s of orderly-http {:.2}, of the load generator {:.2}",
        http.mode, http.address, http.server_thread_cpu_seconds, http.load_thread_cpu_seconds
    )];
    let Some(l) = &http.load else { return lines };
    let map = |m: &BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let req = |name: &str, r: &Requests| {
        format!(
            "({key}) http {name}: {} sent, {} answered ({}), {} failed{}; latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            r.sent,
            r.answered,
            map(&r.statuses),
            r.failed,
            if r.failures.is_empty() { String::new() } else { format!(" ({})", map(&r.failures)) },
            r.latency_p50_ms,
            r.latency_p99_ms,
            r.latency_max_ms
        )
    };
    lines.push(format!(
        "({key}) http load for {:.1} s (in-flight drained at {:.1} s): well-formed requests {} answered, {} failed",
        l.seconds, l.drained_seconds, l.answered, l.failed
    ));
    lines.push(format!(
        "({key}) http bursts of {BURST}: {} done, completion p50 {:.0} ms, p99 {:.0} ms (each: {:?})",
        l.bursts.count, l.bursts.completion_p50_ms, l.bursts.completion_p99_ms, l.bursts.completion_ms
    ));
    lines.push(req("burst requests", &l.bursts.requests));
    lines.push(req("/metrics scrapes", &l.metrics_scrapes));
    lines.push(req("/api/status polls", &l.status_polls));
    lines.push(req("garbage", &l.garbage));
    lines.push(format!(
        "({key}) http slow clients {}: {} connections, {} cut off (after p50 {:.1} s, max {:.1} s), {} open at the stop; at most {} head bytes sent; {} connect failures{}",
        l.slow.clients,
        l.slow.connections,
        l.slow.cut_off,
        l.slow.cut_off_after_p50_s,
        l.slow.cut_off_after_max_s,
        l.slow.open_at_stop,
        l.slow.max_head_bytes_sent,
        l.slow.connect_failures,
        if l.slow.statuses.is_empty() { String::new() } else { format!(", answers {}", map(&l.slow.statuses)) }
    ));
    lines
}
