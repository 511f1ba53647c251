//! `orderly dlq list`: every letter of the dead-letter topic, from the start
//! of each partition to its end offset when the command started, newest last.

use serde::Serialize;

use super::letter::{self, DlqRecord, Letter, RedrivenSet};
use super::scan::Dlq;
use super::{Progress, RedriveError};
use crate::config::Config;

/// Characters of an error message shown in the table (JSON has all).
const MESSAGE_WIDTH: usize = 60;

#[derive(Debug, Serialize)]
pub(crate) struct Listing {
    pub topic: String,
    pub partitions: i32,
    /// Letters in the topic (the listing may show fewer: `--limit`).
    pub total: usize,
    /// Of those, how many the re-drive log names.
    pub redriven: usize,
    /// Newest last.
    pub letters: Vec<Letter>,
}

/// Reads every letter of `kafka.dlq_topic`; `limit` keeps the newest ones.
/// Blocking: call it from a thread that may block.
pub(crate) fn list(config: &Config, limit: Option<usize>) -> Result<Listing, RedriveError> {
    let dlq = Dlq::open(config)?;
    let (partitions, _) = dlq.partition_counts(&config.kafka.input_topic)?;
    let input_topic = &config.kafka.input_topic;
    let mut letters = Vec::new();
    let mut redriven = RedrivenSet::default();
    super::log::RedriveLog::of(config).read_into(&dlq, input_topic, &mut redriven)?;
    let mut bounds = Vec::with_capacity(partitions as usize);
    for partition in 0..partitions {
        bounds.push((partition, dlq.watermarks(partition)?));
    }
    let total: i64 = bounds
        .iter()
        .map(|(_, (low, end))| (end - low).max(0))
        .sum();
    let mut progress = Progress::new("dlq list", total as u64);
    for (partition, (low, end)) in bounds {
        dlq.scan(partition, low, end, |message| {
            match letter::parse(message) {
                DlqRecord::Letter(letter) => letters.push(letter),
                DlqRecord::Redriven {
                    input_topic: topic,
                    sources,
                } => redriven.add(input_topic, &topic, sources),
            }
            progress.read_one();
            Ok(())
        })?;
    }
    for letter in &mut letters {
        let same_topic = letter.source_topic.as_deref() == Some(input_topic.as_str());
        letter.redriven = same_topic && letter.source().is_some_and(|s| redriven.contains(&s));
    }
    letters.sort_by_key(|l| {
        (
            l.timestamp_ms.unwrap_or(i64::MIN),
            l.dlq_partition,
            l.dlq_offset,
        )
    });
    let total = letters.len();
    let redriven = letters.iter().filter(|l| l.redriven).count();
    if let Some(limit) = limit {
        letters.drain(..total.saturating_sub(limit));
    }
    Ok(Listing {
        topic: dlq.topic.clone(),
        partitions,
        total,
        redriven,
        letters,
    })
}

impl Listing {
    /// The table `dlq list` prints: one row per letter, the message
    /// shortened, then a line of totals.
    pub(crate) fn table(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        if self.total == 0 {
            let _ = writeln!(
                out,
                "no dead letters in {} ({} partition{})",
                self.topic,
                self.partitions,
                if self.partitions == 1 { "" } else { "s" }
            );
            return out;
        }
        let dash = || "-".to_string();
        let topic_width = self
            .letters
            .iter()
            .filter_map(|l| l.source_topic.as_ref())
            .map(|t| t.chars().count())
            .max()
            .unwrap_or(0)
            .max(12);
        let _ = writeln!(
            out,
            "{:<24}  {:<topic_width$}  {:>9}  {:>10}  {:<14}  {:>8}  {:<8}  message",
            "dead-lettered at",
            "source topic",
            "partition",
            "offset",
            "kind",
            "redrives",
            "redriven"
        );
        for l in &self.letters {
            let _ = writeln!(
                out,
                "{:<24}  {:<topic_width$}  {:>9}  {:>10}  {:<14}  {:>8}  {:<8}  {}",
                l.dead_lettered_at.clone().unwrap_or_else(dash),
                l.source_topic.clone().unwrap_or_else(dash),
                l.source_partition
                    .map(|p| p.to_string())
                    .unwrap_or_else(dash),
                l.source_offset.map(|o| o.to_string()).unwrap_or_else(dash),
                l.error_kind.clone().unwrap_or_else(dash),
                l.redrive_count,
                if l.redriven { "yes" } else { "no" },
                shorten(
                    l.error_message
                        .as_deref()
                        .or(l.defect.as_deref())
                        .unwrap_or("-"),
                    MESSAGE_WIDTH
                ),
            );
        }
        let shown = if self.letters.len() < self.total {
            format!("; the newest {} shown", self.letters.len())
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "{} dead letter{} in {} ({} partition{}), {} re-driven{shown}",
            self.total,
            if self.total == 1 { "" } else { "s" },
            self.topic,
            self.partitions,
            if self.partitions == 1 { "" } else { "s" },
            self.redriven
        );
        out
    }
}

/// `text` on one line, cut to `width` characters with an ellipsis.
fn shorten(text: &str, width: usize) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.chars().count() <= width {
        return line;
    }
    let mut short: String = line.chars().take(width.saturating_sub(1)).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_shortened_on_one_line() {
        assert_eq!(shorten("short", 10), "short");
        assert_eq!(shorten("a\nb   c", 10), "a b c");
        let long = "x".repeat(100);
        let short = shorten(&long, 60);
        assert_eq!(short.chars().count(), 60);
        assert!(short.ends_with('…'));
    }
}
