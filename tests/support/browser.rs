//! A small blocking browser driver for the end-to-end tests: Debian's
//! headless Chromium behind `chromedriver`, spoken to over the W3C WebDriver
//! HTTP protocol with a tiny HTTP/1.1 client on `std::net::TcpStream` and
//! `serde_json`. No other crates.
//!
//! Self-contained (its HTTP client and base64 decoder in `browser/wire.rs`)
//! so it can be included on its own, from `tests/*.rs` as
//! `#[path = "support/browser.rs"] mod browser;` and from `tests/e2e/main.rs`
//! as `#[path = "../support/browser.rs"] mod browser;`.
//!
//! Everything blocks: call it from a plain thread or `spawn_blocking`.
//!
//! ```ignore
//! let b = browser::Browser::start()?;
//! b.goto("http://127.0.0.1:8080/")?;
//! let n = b.wait_for("const n = Number(document.querySelector('#count').innerText); return n >= 5 && n;",
//!                    Duration::from_secs(5))?;
//! b.screenshot_png(&dir.join("page.png"))?;
//! ```
//!
//! Locations: `ORDERLY_CHROMEDRIVER` (else `/usr/bin/chromedriver`, else
//! `chromedriver` on `PATH`) and `ORDERLY_CHROMIUM` (else `/usr/bin/chromium`,
//! else `chromium` on `PATH`).

#![allow(dead_code)]

use std::ffi::OsString;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

#[path = "browser/wire.rs"]
pub mod wire;
pub use wire::{base64_decode, http_request};

/// How long `start` waits for chromedriver's `/status` to say ready.
const READY_DEADLINE: Duration = Duration::from_secs(20);
/// Read/write timeout of an ordinary WebDriver command. Above the session's
/// page-load and script timeouts so chromedriver reports those itself.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(60);
/// Page-load and script timeouts given to the session.
const PAGE_LOAD_TIMEOUT_MS: u64 = 30_000;
const SCRIPT_TIMEOUT_MS: u64 = 30_000;
/// Creating a session launches Chromium.
const NEW_SESSION_TIMEOUT: Duration = Duration::from_secs(60);
/// Bounded waits of `Drop`.
const QUIT_TIMEOUT: Duration = Duration::from_secs(5);
const REAP_TIMEOUT: Duration = Duration::from_secs(3);
/// `wait_for`'s polling interval.
const POLL: Duration = Duration::from_millis(100);

/// One headless Chromium under its own chromedriver, with one WebDriver
/// session. Dropping it ends the session and kills both.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    /// Holds `chromedriver.log` and the Chromium profile; removed on drop.
    work_dir: PathBuf,
    log_path: PathBuf,
    profile_dir: PathBuf,
}

impl Browser {
    /// Finds chromedriver and Chromium (see the module docs) and starts them.
    pub fn start() -> Result<Browser, String> {
        let driver = locate(
            "chromedriver",
            "ORDERLY_CHROMEDRIVER",
            "/usr/bin/chromedriver",
            "chromedriver",
            "install Debian's chromium-driver package or set ORDERLY_CHROMEDRIVER",
        )?;
        let chromium = locate(
            "chromium",
            "ORDERLY_CHROMIUM",
            "/usr/bin/chromium",
            "chromium",
            "install Debian's chromium package or set ORDERLY_CHROMIUM",
        )?;
        Browser::start_with(&driver, &chromium)
    }

    /// Starts `driver` on a free loopback port and opens a session that runs
    /// headless `chromium` with a fresh profile.
    pub fn start_with(driver: &Path, chromium: &Path) -> Result<Browser, String> {
        check_executable("chromedriver", driver, "ORDERLY_CHROMEDRIVER")?;
        check_executable("chromium", chromium, "ORDERLY_CHROMIUM")?;
        let work_dir = fresh_temp_dir()?;
        let log_path = work_dir.join("chromedriver.log");
        let profile_dir = work_dir.join("profile");
        if let Err(e) = fs::create_dir(&profile_dir) {
            let _ = fs::remove_dir_all(&work_dir);
            return Err(format!(
                "browser: creating profile dir {}: {e}",
                profile_dir.display()
            ));
        }

        // A port picked here can be taken by someone else before chromedriver
        // binds it; chromedriver then exits, and we try another.
        let mut last_err = String::new();
        for _attempt in 0..3 {
            match spawn_ready_driver(driver, &log_path) {
                Ok((child, port)) => {
                    let mut browser = Browser {
                        driver: child,
                        port,
                        session: String::new(),
                        work_dir: work_dir.clone(),
                        log_path: log_path.clone(),
                        profile_dir: profile_dir.clone(),
                    };
                    // On error, `browser` drops here and cleans up.
                    browser.session = browser.new_session(chromium)?;
                    return Ok(browser);
                }
                Err((retry, e)) => {
                    last_err = e;
                    if !retry {
                        break;
                    }
                }
            }
        }
        let _ = fs::remove_dir_all(&work_dir);
        Err(last_err)
    }

    fn new_session(&self, chromium: &Path) -> Result<String, String> {
        let caps = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "pageLoadStrategy": "normal",
                    "timeouts": {
                        "pageLoad": PAGE_LOAD_TIMEOUT_MS,
                        "script": SCRIPT_TIMEOUT_MS,
                        "implicit": 0
                    },
                    "goog:chromeOptions": {
                        "binary": chromium.to_string_lossy(),
                        "args": [
                            "--headless=new",
                            "--no-sandbox",
                            "--disable-gpu",
                            "--disable-quic",
                            "--no-first-run",
                            "--disable-background-networking",
                            "--disable-component-update",
                            "--disable-sync",
                            "--disable-dev-shm-usage",
                            "--window-size=1280,900",
                            format!("--user-data-dir={}", self.profile_dir.display()),
                        ]
                    }
                }
            }
        });
        let value = self
            .command(
                "new session",
                "POST",
                "/session",
                Some(&caps),
                NEW_SESSION_TIMEOUT,
            )
            .map_err(|e| {
                format!(
                    "{e}\n--- chromedriver log (tail) ---\n{}",
                    self.log_tail(30)
                )
            })?;
        value
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| format!("browser: new session: no sessionId in {value}"))
    }

    /// Navigates and waits for the page's load event (up to 30 s). A page
    /// that could not be loaded (Chromium's own error page, e.g. for a
    /// refused connection, which WebDriver itself reports as a success) is
    /// an `Err` with Chromium's error text.
    pub fn goto(&self, url: &str) -> Result<(), String> {
        self.session_command(
            &format!("goto {url}"),
            "POST",
            "url",
            Some(&json!({ "url": url })),
        )?;
        let shown = self.eval(
            "return location.href.startsWith('chrome-error://') ? (document.body ? document.body.innerText : '') : null;",
        )?;
        match shown.as_str() {
            Some(text) => {
                let text: Vec<&str> = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .collect();
                Err(format!(
                    "browser: goto {url}: Chromium shows its error page: {}",
                    shorten(&text.join(" / "), 500)
                ))
            }
            None => Ok(()),
        }
    }

    /// The current page's URL.
    pub fn current_url(&self) -> Result<String, String> {
        let v = self.session_command("current url", "GET", "url", None)?;
        v.as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("browser: current url: not a string: {v}"))
    }

    /// Runs `js_body` as the body of a function (so it should `return`
    /// something) and gives back its JSON-serialised result; `undefined`
    /// comes back as `null`. A thrown exception is an `Err` with its message.
    pub fn eval(&self, js_body: &str) -> Result<Value, String> {
        self.eval_with(js_body, &[])
    }

    /// `eval` with `arguments[0..]` bound to `args`.
    pub fn eval_with(&self, js_body: &str, args: &[Value]) -> Result<Value, String> {
        let body = json!({ "script": js_body, "args": args });
        self.session_command(
            &format!("eval `{}`", shorten(js_body, 120)),
            "POST",
            "execute/sync",
            Some(&body),
        )
    }

    /// `innerText` of the first element matching `css` (what a person sees,
    /// with CSS-hidden parts left out), or `None` if nothing matches.
    pub fn text(&self, css: &str) -> Result<Option<String>, String> {
        let v = self.eval_with(
            "const e = document.querySelector(arguments[0]); return e === null ? null : e.innerText;",
            &[json!(css)],
        )?;
        Ok(v.as_str().map(str::to_owned))
    }

    /// Attribute `name` of the first element matching `css`; `None` if no
    /// element matches or it has no such attribute.
    pub fn attr(&self, css: &str, name: &str) -> Result<Option<String>, String> {
        let v = self.eval_with(
            "const e = document.querySelector(arguments[0]); return e === null ? null : e.getAttribute(arguments[1]);",
            &[json!(css), json!(name)],
        )?;
        Ok(v.as_str().map(str::to_owned))
    }

    /// How many elements match `css`.
    pub fn count(&self, css: &str) -> Result<usize, String> {
        let v = self.eval_with(
            "return document.querySelectorAll(arguments[0]).length;",
            &[json!(css)],
        )?;
        v.as_u64()
            .map(|n| n as usize)
            .ok_or_else(|| format!("browser: count `{css}`: not a number: {v}"))
    }

    /// Runs `js_predicate_body` (a function body that `return`s) every 100 ms
    /// until it returns a truthy value, and gives that value back. Errors
    /// while polling (a script exception, a page mid-navigation) count as
    /// "not yet"; after `timeout` the error names the last value and error.
    pub fn wait_for(&self, js_predicate_body: &str, timeout: Duration) -> Result<Value, String> {
        let start = Instant::now();
        let mut last_value = Value::Null;
        let mut last_err: Option<String>;
        let mut polls = 0u32;
        loop {
            polls += 1;
            match self.eval(js_predicate_body) {
                Ok(v) if truthy(&v) => return Ok(v),
                Ok(v) => {
                    last_value = v;
                    last_err = None;
                }
                Err(e) => last_err = Some(e),
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(format!(
                    "browser: wait_for timed out after {elapsed:?} ({polls} polls) waiting for `{}`; last value {}{}",
                    shorten(js_predicate_body, 300),
                    shorten(&last_value.to_string(), 300),
                    last_err.map(|e| format!("; last error: {e}")).unwrap_or_default(),
                ));
            }
            std::thread::sleep(POLL.min(timeout - elapsed));
        }
    }

    /// Returns a PNG of the viewport.
    pub fn screenshot(&self) -> Result<Vec<u8>, String> {
        let v = self.session_command("screenshot", "GET", "screenshot", None)?;
        let b64 = v.as_str().ok_or_else(|| {
            format!(
                "browser: screenshot: not a string: {}",
                shorten(&v.to_string(), 200)
            )
        })?;
        base64_decode(b64).map_err(|e| format!("browser: screenshot: {e}"))
    }

    /// Writes a PNG of the viewport to `path`.
    pub fn screenshot_png(&self, path: &Path) -> Result<(), String> {
        let png = self.screenshot()?;
        fs::write(path, &png)
            .map_err(|e| format!("browser: screenshot: writing {}: {e}", path.display()))
    }

    /// The last `lines` lines of chromedriver's output.
    pub fn log_tail(&self, lines: usize) -> String {
        tail_file(&self.log_path, lines)
    }

    /// chromedriver's process id (Chromium runs in its process group).
    pub fn driver_pid(&self) -> u32 {
        self.driver.id()
    }

    /// The Chromium profile directory (`--user-data-dir`), removed on drop.
    pub fn profile_dir(&self) -> &Path {
        &self.profile_dir
    }

    /// The base URL of this browser's chromedriver.
    pub fn driver_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn session_command(
        &self,
        what: &str,
        method: &str,
        suffix: &str,
        body: Option<&Value>,
    ) -> Result<Value, String> {
        let path = format!("/session/{}/{suffix}", self.session);
        self.command(what, method, &path, body, COMMAND_TIMEOUT)
    }

    /// One WebDriver command: its `value` on success, or an error naming
    /// the command, the HTTP status and WebDriver's error and message.
    fn command(
        &self,
        what: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<Value, String> {
        let (status, bytes) = http_request(self.port, method, path, body, timeout)
            .map_err(|e| format!("browser: {what}: {method} {path}: {e}"))?;
        let parsed: Value = serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "browser: {what}: HTTP {status}: response is not JSON ({e}): {}",
                shorten(&String::from_utf8_lossy(&bytes), 300)
            )
        })?;
        let value = match parsed {
            Value::Object(mut m) => m.remove("value").unwrap_or(Value::Null),
            other => other,
        };
        if status == 200 {
            return Ok(value);
        }
        let error = value
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("unknown error");
        let message = value.get("message").and_then(Value::as_str).unwrap_or("");
        // chromedriver's messages often repeat the error code first.
        let message = message
            .strip_prefix(error)
            .map(|m| m.trim_start_matches(':').trim_start())
            .unwrap_or(message);
        let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
        Err(format!(
            "browser: {what}: HTTP {status}: {error}: {}",
            shorten(&message, 600)
        ))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ask chromedriver to close Chromium, briefly; then kill the whole
        // process group (chromedriver and Chromium) regardless.
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = http_request(self.port, "DELETE", &path, None, QUIT_TIMEOUT);
        }
        kill_group(&mut self.driver);
        remove_dir_patiently(&self.work_dir);
    }
}

/// Spawns chromedriver on a free port and waits for it to be ready. On error,
/// the bool says whether another port is worth a try (chromedriver exited
/// early, likely because the port was taken meanwhile).
fn spawn_ready_driver(driver: &Path, log_path: &Path) -> Result<(Child, u16), (bool, String)> {
    let port = free_port().map_err(|e| (false, e))?;
    let log = fs::File::create(log_path).map_err(|e| {
        (
            false,
            format!("browser: creating {}: {e}", log_path.display()),
        )
    })?;
    let log2 = log.try_clone().map_err(|e| {
        (
            false,
            format!("browser: cloning {}: {e}", log_path.display()),
        )
    })?;
    let mut child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        // Its own process group, so drop can kill Chromium with it.
        .process_group(0)
        .spawn()
        .map_err(|e| {
            (
                false,
                format!("browser: spawning chromedriver {}: {e}", driver.display()),
            )
        })?;

    let start = Instant::now();
    let mut last: String;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err((
                true,
                format!(
                    "browser: chromedriver {} exited early ({status}) on port {port}\n--- chromedriver log (tail) ---\n{}",
                    driver.display(),
                    tail_file(log_path, 30)
                ),
            ));
        }
        match http_request(port, "GET", "/status", None, Duration::from_secs(2)) {
            Ok((200, body)) => {
                let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let ready = v.pointer("/value/ready").and_then(Value::as_bool) == Some(true);
                // The log line proves it is *our* chromedriver on that port.
                let ours = fs::read_to_string(log_path)
                    .map(|s| s.contains(&format!("started successfully on port {port}")))
                    .unwrap_or(false);
                if ready && ours {
                    return Ok((child, port));
                }
                last = format!(
                    "status {}{}",
                    shorten(&v.to_string(), 200),
                    if ours {
                        ""
                    } else {
                        " (no start line in log yet)"
                    }
                );
            }
            Ok((status, body)) => {
                last = format!(
                    "HTTP {status}: {}",
                    shorten(&String::from_utf8_lossy(&body), 200)
                );
            }
            Err(e) => last = e,
        }
        if start.elapsed() >= READY_DEADLINE {
            kill_group(&mut child);
            return Err((
                false,
                format!(
                    "browser: chromedriver {} not ready on port {port} after {READY_DEADLINE:?} (last: {last})\n--- chromedriver log (tail) ---\n{}",
                    driver.display(),
                    tail_file(log_path, 30)
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

unsafe extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

const SIGKILL: i32 = 9;

/// Kills `child`'s process group (it leads one) and reaps it, waiting at
/// most `REAP_TIMEOUT`.
fn kill_group(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        // The unreaped child still holds its pid, so the group id is ours.
        let pgid = child.id() as i32;
        if pgid > 0 {
            unsafe {
                kill(-pgid, SIGKILL);
            }
        }
        let _ = child.kill();
    } else {
        // chromedriver is gone and reaped; its group id may be reused, so
        // Chromium, if any, is left to notice on its own.
        return;
    }
    let deadline = Instant::now() + REAP_TIMEOUT;
    while Instant::now() < deadline {
        match child.try_wait() {
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            _ => return,
        }
    }
}

fn remove_dir_patiently(dir: &Path) {
    // Chromium's processes may take a moment to die and stop writing.
    for _ in 0..10 {
        match fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                std::thread::sleep(Duration::from_millis(50))
            }
            _ => return,
        }
    }
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("browser: finding a free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("browser: finding a free port: {e}"))
}

fn fresh_temp_dir() -> Result<PathBuf, String> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for _ in 0..100 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "orderly-browser-{}-{nanos}-{n}",
            std::process::id()
        ));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("browser: creating temp dir {}: {e}", dir.display())),
        }
    }
    Err("browser: could not create a fresh temp dir".to_owned())
}

fn locate(what: &str, env: &str, default: &str, name: &str, hint: &str) -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p)); // checked by start_with
    }
    if Path::new(default).is_file() {
        return Ok(PathBuf::from(default));
    }
    let path: OsString = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(name);
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    Err(format!("browser: {what} not found: {env} is unset, {default} does not exist and no `{name}` on PATH; {hint}"))
}

fn check_executable(what: &str, path: &Path, env: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    match fs::metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(()),
        Ok(_) => Err(format!(
            "browser: {what} at {} is not an executable file (set {env})",
            path.display()
        )),
        Err(e) => Err(format!(
            "browser: {what} not found at {}: {e} (set {env})",
            path.display()
        )),
    }
}

fn tail_file(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// JavaScript truthiness of a JSON value.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().map(|f| f != 0.0 && !f.is_nan()).unwrap_or(true),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}
