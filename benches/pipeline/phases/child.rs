//! An `orderly run` child process of a phase: its config written to its
//! directory, its stderr kept in `orderly.err` and watched for the lines the
//! phases time (its HTTP address, its partitions' restores), its endpoint
//! asked, and its stop. Shared by the failover drill and the side-by-side's
//! cold restore.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// One `orderly run` child of the drill (and of the side-by-side's cold
/// restore).
pub(super) struct Instance {
    pub(super) child: Child,
    pub(super) pid: u32,
    pub(super) store: PathBuf,
    pub(super) log_path: PathBuf,
    /// The HTTP address it logged.
    pub(super) address: Arc<Mutex<Option<String>>>,
    /// Its "restore finished" lines, with when they came.
    pub(super) restores: Arc<Mutex<Vec<(Instant, String)>>>,
    /// When its partitions' restores began ("restoring from the changelog"
    /// lines of one partition, which name the records to read).
    pub(super) restore_starts: Arc<Mutex<Vec<Instant>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Instance {
    pub(super) fn spawn(bin: &Path, dir: &Path, config: &str) -> anyhow::Result<Instance> {
        std::fs::create_dir_all(dir)?;
        let config_path = dir.join("orderly.toml");
        std::fs::write(&config_path, config)?;
        let log_path = dir.join("orderly.err");
        let mut child = run_command(bin, &config_path)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let address: Arc<Mutex<Option<String>>> = Arc::default();
        let restores: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
        let restore_starts: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let reader = {
            let stderr = child.stderr.take().context("orderly's stderr")?;
            let (address, restores) = (address.clone(), restores.clone());
            let restore_starts = restore_starts.clone();
            let mut log = std::fs::File::create(&log_path)?;
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if line.contains("http endpoint listening") {
                        if let Some(at) = line.find("address=") {
                            let a = line[at + "address=".len()..].split(' ').next();
                            *lock(&address) = a.map(String::from);
                        }
                    }
                    if line.contains("restore finished") {
                        lock(&restores).push((Instant::now(), line.clone()));
                    }
                    if line.contains("restoring from the changelog") && line.contains(" records=") {
                        lock(&restore_starts).push(Instant::now());
                    }
                    let _ = writeln!(log, "{line}");
                }
            })
        };
        Ok(Instance {
            pid: child.id(),
            child,
            store: dir.join("store"),
            log_path,
            address,
            restores,
            restore_starts,
            reader: Some(reader),
        })
    }

    /// Whether its `/readyz` answers 200.
    pub(super) fn ready(&self) -> bool {
        lock(&self.address)
            .clone()
            .is_some_and(|address| http_get(&address, "/readyz").is_ok())
    }

    pub(super) fn status(&self) -> Option<serde_json::Value> {
        let address = lock(&self.address).clone()?;
        let body = http_get(&address, "/api/status").ok()?;
        serde_json::from_str(&body).ok()
    }

    pub(super) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Its last log lines.
    pub(super) fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log_path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }

    /// SIGTERM, unless it has exited.
    pub(super) fn terminate(&mut self) {
        if self.exited().is_none() {
            let _ = sigterm(self.pid);
        }
    }

    /// Waits for its exit after `terminate`, SIGKILL after 60 s.
    pub(super) fn wait_stopped(&mut self) {
        if let Ok((_, true)) = wait_or_kill(&mut self.child, Duration::from_secs(60)) {
            eprintln!(
                "pipeline: orderly run (pid {}) still running 60 s after SIGTERM: SIGKILL",
                self.pid
            );
        }
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// Sends SIGTERM to `pid`.
pub(super) fn sigterm(pid: u32) -> std::io::Result<()> {
    Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .map(|_| ())
}

/// Waits for `child` to exit, SIGKILL once `grace` has passed: its exit
/// status, and whether it had to be killed.
pub(super) fn wait_or_kill(
    child: &mut Child,
    grace: Duration,
) -> std::io::Result<(std::process::ExitStatus, bool)> {
    let deadline = Instant::now() + grace;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok((status, false));
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            return Ok((child.wait()?, true));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `orderly --config CONFIG run`, logging at info to a pipe (its stderr).
pub(super) fn run_command(bin: &Path, config: &Path) -> Command {
    let mut command = Command::new(bin);
    command
        .arg("--config")
        .arg(config)
        .arg("run")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A GET on a `run` endpoint; the body of a 200.
pub(super) fn http_get(address: &str, path: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").context("no HTTP header")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("{path}: {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_string())
}

/// The value of `field=N` on a log line.
pub(super) fn field(line: &str, field: &str) -> Option<i64> {
    let at = line.find(&format!(" {field}="))? + field.len() + 2;
    line[at..]
        .split(|c: char| !c.is_ascii_digit() && c != '-')
        .next()?
        .parse()
        .ok()
}
