//! What a phase costs, read from /proc: wall time, CPU (this process, its
//! threads, the broker's process) and peak RSS (`VmHWM` of this process,
//! reset before each phase); and the size of a store directory.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::figures::Phase;

/// Wall time, CPU and peak RSS of one phase.
pub struct Meter {
    started: Instant,
    /// This process's CPU seconds at the start.
    pub cpu: f64,
    broker_pid: Option<u32>,
    /// The broker process's CPU seconds at the start.
    pub broker_cpu: Option<f64>,
    rss_at_start_mib: f64,
    written_at_start: Option<u64>,
}

impl Meter {
    pub fn start(broker_pid: Option<u32>) -> Self {
        reset_peak_rss();
        Meter {
            started: Instant::now(),
            cpu: process_cpu(None).unwrap_or(0.0),
            broker_pid,
            broker_cpu: broker_pid.and_then(|pid| process_cpu(Some(pid))),
            rss_at_start_mib: kib_to_mib(status_kib("VmRSS").unwrap_or(0)),
            written_at_start: written_bytes(),
        }
    }

    pub fn finish(&self, key: &str, name: &str, events: u64) -> Phase {
        let seconds = self.started.elapsed().as_secs_f64();
        Phase {
            key: key.into(),
            name: name.into(),
            events,
            seconds,
            events_per_s: events as f64 / seconds.max(1e-9),
            steady_events_per_s: events as f64 / seconds.max(1e-9),
            cpu_seconds: process_cpu(None).unwrap_or(0.0) - self.cpu,
            broker_cpu_seconds: match (
                self.broker_pid.and_then(|pid| process_cpu(Some(pid))),
                self.broker_cpu,
            ) {
                (Some(end), Some(start)) => Some(end - start),
                _ => None,
            },
            peak_rss_mib: kib_to_mib(status_kib("VmHWM").unwrap_or(0)),
            rss_at_start_mib: self.rss_at_start_mib,
            keys_written_per_event: None,
            bytes_written_per_event: None,
            disk_bytes_per_event: None,
            written_bytes: match (written_bytes(), self.written_at_start) {
                (Some(end), Some(start)) => Some(end.saturating_sub(start)),
                _ => None,
            },
            written_bytes_per_event: None,
            http: None,
        }
    }

    /// `finish`, with the steady rate counted from the first record, seen
    /// `first` after the start.
    pub fn finish_read(&self, key: &str, name: &str, (events, first): (u64, Duration)) -> Phase {
        let mut phase = self.finish(key, name, events);
        let after = phase.seconds - first.as_secs_f64();
        if events > 1 && after > 0.0 {
            phase.steady_events_per_s = (events - 1) as f64 / after;
        }
        phase
    }
}

/// Bytes this process has passed to write(2), pwrite(2) and the like so far
/// (`wchar` of /proc/self/io): whether or not they reached the disk yet, and
/// not counting socket sends (librdkafka uses sendmsg).
pub fn written_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Resets VmHWM to the current RSS (Linux >= 4.0).
pub fn reset_peak_rss() {
    if let Err(e) = std::fs::write("/proc/self/clear_refs", "5") {
        eprintln!("pipeline: cannot reset the peak RSS ({e}); peaks include earlier phases");
    }
}

pub fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line[field.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

pub fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// utime + stime in seconds from a /proc stat line (USER_HZ is 100 on Linux).
fn stat_cpu(stat: &str) -> Option<(String, f64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat[open + 1..close].to_string();
    let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((name, ticks as f64 / 100.0))
}

pub fn process_cpu(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        None => "/proc/self/stat".to_string(),
        Some(pid) => format!("/proc/{pid}/stat"),
    };
    stat_cpu(&std::fs::read_to_string(path).ok()?).map(|(_, s)| s)
}

/// CPU seconds of every live thread of this process, by thread id.
pub fn thread_cpu() -> HashMap<u32, (String, f64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(cpu) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| stat_cpu(&s))
        {
            out.insert(tid, cpu);
        }
    }
    out
}

/// `rdk:broker1` and `rdk:broker-1` -> `rdk:broker`; `sled-io-3` -> `sled-io`.
pub fn thread_group(name: &str) -> String {
    name.trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches(['-', '_', '#'])
        .to_string()
}

pub fn dir_size(path: &Path) -> u64 {
    let Ok(dir) = std::fs::read_dir(path) else {
        return 0;
    };
    dir.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Returns freed heap to the OS so the next phase's RSS baseline does not
/// carry the previous phase's garbage.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: glibc's malloc_trim only releases free memory.
        unsafe {
            malloc_trim(0);
        }
    }
}

/// The median and 99th percentile of microsecond samples, in milliseconds.
pub fn percentiles_ms(samples: &mut [u64]) -> (f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0);
    }
    samples.sort_unstable();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    (at(0.5), at(0.99))
}

/// The 1-minute load average.
pub fn load1() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A `/proc/<pid>/status` field in KiB (`VmHWM`, `VmRSS`).
pub fn pid_status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))?;
    line[field.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// What `du` says a directory takes: the blocks its files hold, in bytes
/// (sparse files count what they hold, not their length).
pub fn dir_disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(dir) = std::fs::read_dir(path) else {
        return 0;
    };
    dir.flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_disk_usage(&e.path()) + m.blocks() * 512,
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}
