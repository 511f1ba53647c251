//! Smoke test of the browser driver in `tests/support/browser.rs`: headless
//! Chromium (Debian's `chromium` and `chromium-driver`) loads a page served
//! from this test, sees it update live, sees data it fetched, and takes a
//! screenshot. Needs Chromium, so only with `--features e2e`.
#![cfg(feature = "e2e")]

#[path = "support/browser.rs"]
mod browser;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use browser::Browser;

const PAGE: &str = r#"<!doctype html>
<html>
<head><meta charset="utf-8"><title>orderly browser smoke</title>
<style>body { font-family: sans-serif; margin: 2em; } .hidden { display: none; }</style>
</head>
<body>
<h1 id="title">Browser smoke</h1>
<p>Ticks: <span id="counter">0</span></p>
<ul id="items">
  <li class="item" data-kind="a">one</li>
  <li class="item" data-kind="b">two</li>
  <li class="item hidden" data-kind="c">three</li>
</ul>
<p id="fetched">loading</p>
<script>
  let ticks = 0;
  setInterval(() => { ticks += 1; document.getElementById('counter').textContent = String(ticks); }, 200);
  fetch('/data.json')
    .then(r => r.json())
    .then(d => { document.getElementById('fetched').textContent = d.greeting + ' #' + d.n; })
    .catch(e => { document.getElementById('fetched').textContent = 'fetch failed: ' + e; });
</script>
</body>
</html>
"#;

const DATA: &str = r#"{"greeting": "hello from the server", "n": 42}"#;

/// Serves `PAGE` at `/` and `DATA` at `/data.json` on a loopback port, from a
/// thread that lives as long as the test process. Returns the base URL.
fn serve() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind test server");
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = handle(stream);
            });
        }
    });
    format!("http://{addr}")
}

fn handle(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/");
    let (status, content_type, body) = match path {
        "/" => ("200 OK", "text/html; charset=utf-8", PAGE),
        "/data.json" => ("200 OK", "application/json", DATA),
        _ => ("404 Not Found", "text/plain", "not found"),
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

#[test]
fn loads_reads_waits_and_screenshots() {
    let t0 = Instant::now();
    let base = serve();
    let b = Browser::start().unwrap_or_else(|e| panic!("{e}"));
    let started = t0.elapsed();

    b.goto(&format!("{base}/")).unwrap();
    assert_eq!(b.current_url().unwrap(), format!("{base}/"));
    assert_eq!(
        b.eval("return document.title;").unwrap(),
        "orderly browser smoke"
    );
    assert_eq!(b.text("#title").unwrap().as_deref(), Some("Browser smoke"));
    assert_eq!(b.text("#nothing-here").unwrap(), None);
    assert_eq!(b.count(".item").unwrap(), 3);
    assert_eq!(b.count(".nothing-here").unwrap(), 0);
    assert_eq!(b.attr(".item", "data-kind").unwrap().as_deref(), Some("a"));
    assert_eq!(b.attr(".item", "data-missing").unwrap(), None);
    assert_eq!(b.attr("#nothing-here", "id").unwrap(), None);
    // innerText is what a person sees: the hidden item is left out.
    assert_eq!(b.text("#items").unwrap().as_deref(), Some("one\ntwo"));
    assert_eq!(
        b.eval_with("return arguments[0] + arguments[1];", &[1.into(), 2.into()])
            .unwrap(),
        3
    );

    // Live updates: the counter moves on its own and we see it move (by at
    // least 2 ticks, to 5 or more, however slowly the steps above ran).
    let first: u64 = b.text("#counter").unwrap().unwrap().parse().unwrap();
    let target = (first + 2).max(5);
    let reached = b
        .wait_for(
            &format!("const n = Number(document.getElementById('counter').innerText); return n >= {target} ? n : false;"),
            Duration::from_secs(10),
        )
        .unwrap();
    let reached = reached.as_u64().unwrap();
    assert!(
        reached >= target,
        "counter went from {first} to {reached}, wanted {target}"
    );

    // Data the page fetched from the server shows up in the DOM.
    b.wait_for(
        "return document.getElementById('fetched').innerText.includes('#');",
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(
        b.text("#fetched").unwrap().as_deref(),
        Some("hello from the server #42")
    );

    // Errors carry context.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap(); // bound, then released
    let err = b.goto(&format!("http://{closed}/")).unwrap_err();
    assert!(
        err.contains("ERR_CONNECTION_REFUSED") && err.contains(&closed.to_string()),
        "{err}"
    );
    eprintln!("goto error: {err}");
    b.goto(&format!("{base}/")).unwrap();
    assert_eq!(b.text("#title").unwrap().as_deref(), Some("Browser smoke"));
    let err = b.eval("throw new Error('boom');").unwrap_err();
    assert!(
        err.contains("boom") && err.contains("javascript error") && err.contains("HTTP 500"),
        "{err}"
    );
    eprintln!("eval error: {err}");
    let t = Instant::now();
    let err = b
        .wait_for("return 0;", Duration::from_millis(350))
        .unwrap_err();
    assert!(
        err.contains("timed out") && err.contains("return 0;"),
        "{err}"
    );
    eprintln!("wait_for error: {err}");
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "wait_for overran: {:?}",
        t.elapsed()
    );

    // Screenshot: a PNG of the 1280x900-ish viewport.
    let dir = std::env::temp_dir().join(format!("orderly-browser-smoke-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let png_path = dir.join("page.png");
    b.screenshot_png(&png_path).unwrap();
    let png = std::fs::read(&png_path).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert!(
        png.len() > 2_000 && png.len() < 20_000_000,
        "implausible PNG size {}",
        png.len()
    );
    assert_eq!(&png[12..16], b"IHDR");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert!(
        (800..=4000).contains(&width) && (500..=4000).contains(&height),
        "PNG is {width}x{height}"
    );
    std::fs::remove_dir_all(&dir).unwrap();

    // Drop ends chromedriver and Chromium, promptly.
    let profile = b.profile_dir().to_path_buf();
    let pid = b.driver_pid();
    let t = Instant::now();
    drop(b);
    let dropped_in = t.elapsed();
    assert!(
        dropped_in < Duration::from_secs(10),
        "drop took {dropped_in:?}"
    );
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "chromedriver {pid} still running"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_mentioning(&profile.to_string_lossy());
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Chromium processes left behind: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !profile.exists(),
        "profile dir {} left behind",
        profile.display()
    );
    eprintln!(
        "browser smoke: start {started:?}, drop {dropped_in:?}, total {:?}, screenshot {width}x{height} {} bytes",
        t0.elapsed(),
        png.len()
    );
}

/// Pids whose command line contains `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(needle) {
                pids.push(pid);
            }
        }
    }
    pids
}

#[test]
fn missing_chromedriver_is_a_clear_error() {
    let missing = Path::new("/nonexistent/orderly/chromedriver");
    let err = match Browser::start_with(missing, Path::new("/usr/bin/chromium")) {
        Ok(_) => panic!("started with a missing chromedriver"),
        Err(e) => e,
    };
    assert!(
        err.contains("chromedriver")
            && err.contains("/nonexistent/orderly/chromedriver")
            && err.contains("ORDERLY_CHROMEDRIVER"),
        "unclear error: {err}"
    );
    let err = match Browser::start_with(Path::new("/tmp"), Path::new("/usr/bin/chromium")) {
        Ok(_) => panic!("started with a directory as chromedriver"),
        Err(e) => e,
    };
    assert!(err.contains("not an executable"), "unclear error: {err}");
}

#[test]
fn base64_decoder() {
    assert_eq!(browser::base64_decode("").unwrap(), b"");
    assert_eq!(browser::base64_decode("Zg==").unwrap(), b"f");
    assert_eq!(browser::base64_decode("Zm8=").unwrap(), b"fo");
    assert_eq!(browser::base64_decode("Zm9v").unwrap(), b"foo");
    assert_eq!(browser::base64_decode("Zm9vYg==").unwrap(), b"foob");
    assert_eq!(browser::base64_decode("Zm9v\nYmFy").unwrap(), b"foobar");
    assert_eq!(
        browser::base64_decode("iVBORw0KGgo=").unwrap(),
        b"\x89PNG\r\n\x1a\n"
    );
    assert_eq!(browser::base64_decode("+/8=").unwrap(), [0xfb, 0xff]);
    assert!(browser::base64_decode("Zm9v!").is_err());
    assert!(browser::base64_decode("Zg=a").is_err());
    assert!(browser::base64_decode("Z").is_err());
}

/// The driver's HTTP client against canned responses: chunked (with a chunk
/// extension and a trailer), Content-Length, and read-to-EOF.
#[test]
fn http_client_framing() {
    fn canned(response: &'static [u8]) -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut content_length = 0;
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    content_length = v.trim().parse().unwrap();
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; content_length];
            std::io::Read::read_exact(&mut reader, &mut body).unwrap();
            assert_eq!(body, br#"{"a":1}"#);
            stream.write_all(response).unwrap();
        });
        port
    }
    let body = serde_json::json!({"a": 1});
    let t = Duration::from_secs(5);

    let port = canned(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{\"v\"\r\n6\r\n:true}\r\n0\r\nX-Trailer: y\r\n\r\n");
    let (status, got) = browser::http_request(port, "POST", "/x", Some(&body), t).unwrap();
    assert_eq!((status, got.as_slice()), (200, &br#"{"v":true}"#[..]));

    let port = canned(b"HTTP/1.1 404 Not Found\r\ncontent-length: 4\r\n\r\nnopeEXTRA");
    let (status, got) = browser::http_request(port, "POST", "/x", Some(&body), t).unwrap();
    assert_eq!((status, got.as_slice()), (404, &b"nope"[..]));

    let port = canned(b"HTTP/1.0 200 OK\r\n\r\nuntil eof");
    let (status, got) = browser::http_request(port, "POST", "/x", Some(&body), t).unwrap();
    assert_eq!((status, got.as_slice()), (200, &b"until eof"[..]));

    let port = canned(b"garbage\r\n\r\n");
    let err = browser::http_request(port, "POST", "/x", Some(&body), t).unwrap_err();
    assert!(err.contains("malformed status line"), "{err}");
}
