//! The side-by-side results as the report's phases and its table.

use crate::figures::fmt_opt;
use crate::figures::Phase;

use super::watch::{MIDDLE, MIDDLE_MIN_STEPS};
use super::{Contender, SideBySideOut};

impl SideBySideOut {
    /// Each run and restore as a `Phase` for the main table.
    pub fn phases(&self) -> Vec<Phase> {
        let mut out = Vec::new();
        for r in &self.runs {
            let who = match r.contender {
                Contender::Orderly => "orderly run (child)",
                Contender::KafkaStreams => "Kafka Streams peer",
            };
            out.push(Phase {
                key: r.key.clone(),
                name: format!(
                    "{who}, {}",
                    match r.contender {
                        Contender::Orderly => r.guarantee.orderly(),
                        Contender::KafkaStreams => r.guarantee.streams(),
                    }
                ),
                events: r.events,
                seconds: r.seconds,
                events_per_s: r.events_per_s.unwrap_or(0.0),
                cpu_seconds: r.cpu_seconds,
                broker_cpu_seconds: r.broker_cpu_seconds,
                steady_events_per_s: r.steady_events_per_s.unwrap_or(0.0),
                peak_rss_mib: r.peak_rss_mib,
                rss_at_start_mib: 0.0,
                keys_written_per_event: None,
                bytes_written_per_event: None,
                disk_bytes_per_event: None,
                written_bytes: None,
                written_bytes_per_event: None,
                http: None,
            });
        }
        out
    }

    pub fn table_lines(&self) -> Vec<String> {
        let mut lines = vec![String::new(), format!("side by side (each in its own process; medians over rounds; orderly: {}, peer: {})", self.orderly_bin, self.peer)];
        if !self.orderly_config_overrides.is_empty() {
            lines.push(format!(
                "orderly config overrides: {}",
                self.orderly_config_overrides.join("; ")
            ));
        }
        lines.push(format!(
            "{:<14} {:<16} {:>6} {:>10} {:>12} {:>12} {:>9} {:>9} {:>11} {:>11} {:>13} {:>12} {:>9} {:>10}",
            "contender",
            "guarantee",
            "rounds",
            "ev/s",
            "1st rec ev/s",
            "middle ev/s",
            "RSS MiB",
            "cpu s/1M",
            "mid cpu/1M",
            "broker s/1M",
            "broker cpu/s",
            "cold r/s",
            "ready s",
            "restore r/s"
        ));
        for r in &self.rows {
            let (who, g) = match r.contender {
                Contender::Orderly => ("orderly", r.guarantee.orderly()),
                Contender::KafkaStreams => ("kafka streams", r.guarantee.streams()),
            };
            let rounds = if r.valid_rounds == r.rounds {
                r.rounds.to_string()
            } else {
                format!("{}/{} ok", r.valid_rounds, r.rounds)
            };
            lines.push(format!(
                "{:<14} {:<16} {:>6} {:>10} {:>12} {:>12} {:>9} {:>9} {:>11} {:>11} {:>13} {:>12} {:>9} {:>10}",
                who,
                g,
                rounds,
                r.events_per_s
                    .map(|x| format!("{x:.0}"))
                    .unwrap_or_else(|| "MISMATCH".into()),
                fmt_opt(r.steady_events_per_s, 0),
                fmt_opt(r.middle_events_per_s, 0),
                fmt_opt(r.peak_rss_mib, 0),
                fmt_opt(r.cpu_seconds_per_million, 2),
                fmt_opt(r.middle_cpu_seconds_per_million, 2),
                fmt_opt(r.broker_cpu_seconds_per_million, 2),
                fmt_opt(r.broker_cpu_per_second, 2),
                fmt_opt(r.restore_records_per_s, 0),
                fmt_opt(r.restore_seconds, 2),
                fmt_opt(r.restore_read_records_per_s, 0),
            ));
        }
        if !self.restores.is_empty() {
            lines.push(
                "  (restores, at_least_once rows: a cold process with empty state; ready s: from its start until ready to process; \
                 cold r/s: records / ready s; restore r/s: records / the first partition's restore start to the last one's end)"
                    .into(),
            );
        }
        lines.push(format!(
            "  (ev/s: records / spawn to the committed offsets covering the input; 1st rec: from the first record; \
             middle: between the polls that saw {:.0}% and {:.0}% of the offsets committed; cpu s/1M with start-up, mid cpu/1M without; \
             broker cpu/s: the broker's CPU seconds per second of the run)",
            MIDDLE.0 * 100.0,
            MIDDLE.1 * 100.0
        ));
        for q in &self.ratios {
            if let Some(why) = &q.refused {
                lines.push(format!(
                    "orderly / peer, {:<13}: no ratio, the contenders did different work: {why}",
                    q.guarantee.orderly()
                ));
                continue;
            }
            lines.push(format!(
                "orderly / peer, {:<13}: ev/s {}, 1st rec {}, middle {}, RSS {}, cpu/ev {}, middle cpu/ev {}, broker cpu/ev {}, cold restore r/s {}, ready s {}, restore r/s {}",
                q.guarantee.orderly(),
                fmt_opt(q.events_per_s, 2),
                fmt_opt(q.steady_events_per_s, 2),
                fmt_opt(q.middle_events_per_s, 2),
                fmt_opt(q.peak_rss, 2),
                fmt_opt(q.cpu_per_event, 2),
                fmt_opt(q.middle_cpu_per_event, 2),
                fmt_opt(q.broker_cpu_per_event, 2),
                fmt_opt(q.restore_records_per_s, 2),
                fmt_opt(q.restore_seconds, 2),
                fmt_opt(q.restore_read_records_per_s, 2),
            ));
        }
        lines.push("per run:".into());
        for r in &self.runs {
            lines.push(format!(
                "  ({:<3}) load {:>4.1}  {:>7.2} s  first record {:>5} s  ev/s {:>8}  1st rec {:>8}  middle {:>8} ({})  RSS {:>4.0} MiB  cpu {:>6.2} s  broker {:>6} s  stop {:>5.2} s  counts {}  states {}",
                r.key,
                r.load1_at_start,
                r.seconds,
                fmt_opt(r.first_record_seconds, 2),
                fmt_opt(r.events_per_s, 0),
                fmt_opt(r.steady_events_per_s, 0),
                fmt_opt(r.middle_events_per_s, 0),
                r.middle
                    .map(|m| format!(
                        "{:.0}%-{:.0}% in {:.2}-{:.2} s, cpu {:.2} s",
                        m.from_share * 100.0,
                        m.to_share * 100.0,
                        m.from_seconds,
                        m.to_seconds,
                        m.cpu_seconds
                    ))
                    .unwrap_or_else(|| format!("fewer than {MIDDLE_MIN_STEPS} commits in it")),
                r.peak_rss_mib,
                r.cpu_seconds,
                fmt_opt(r.broker_cpu_seconds, 2),
                r.shutdown_seconds,
                if r.counts_match { "ok".to_string() } else { format!("MISMATCH {:?}", r.counts) },
                match r.states_mismatched {
                    Some(0) => "ok".to_string(),
                    Some(n) => format!("{n} MISMATCHED"),
                    None => "-".into(),
                }
            ));
        }
        for r in &self.runs {
            let bytes = |k: &str| {
                r.own_report[k]
                    .as_u64()
                    .map(|b| b as f64 / (1 << 20) as f64)
            };
            let inbox = bytes("inbox_bytes").unwrap_or(0.0);
            if let (Some(disk), Some(live)) = (
                bytes("disk_bytes"),
                bytes("state_bytes")
                    .map(|states| states + inbox)
                    .filter(|live| *live > 0.0),
            ) {
                lines.push(format!(
                    "  ({:<3}) store after the run: {disk:.1} MiB on disk, {live:.1} MiB live (inbox chunks {inbox:.1}) ({:.2}x)",
                    r.key,
                    disk / live
                ));
            }
        }
        for r in &self.restores {
            lines.push(format!(
                "  ({}) restore: {} changelog records, ready {:.2} s after the process started = {:.0} records/s; from the restore's first start to its last end {:.2} s = {:.0} records/s ({})",
                r.key, r.changelog_records, r.seconds, r.records_per_s, r.read_seconds, r.read_records_per_s, r.how
            ));
        }
        lines
    }
}
