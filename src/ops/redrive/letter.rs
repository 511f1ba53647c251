//! One record of the dead-letter topic, read back: a letter, with the
//! headers the processor wrote parsed, or a re-drive record naming the
//! source positions a replay re-published.

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;

use rdkafka::message::{BorrowedMessage, Message};
use serde::{Deserialize, Serialize};
use tracing::warn;

use super::time::rfc3339_millis;
use crate::kafka::headers::{
    HEADER_ERROR_KIND, HEADER_ERROR_MESSAGE, HEADER_OFFSET, HEADER_PARTITION, HEADER_REDRIVE_COUNT,
    HEADER_REDRIVE_DONE, HEADER_TOPIC,
};

/// Where a dead-lettered record was in its source topic: what `--source
/// P:O` names and what re-drive records list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SourcePos {
    /// The source partition.
    pub partition: i32,
    /// The record's offset in it.
    pub offset: i64,
}

impl fmt::Display for SourcePos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.partition, self.offset)
    }
}

impl FromStr for SourcePos {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad =
            || format!("`{text}` is not PARTITION:OFFSET (two non-negative numbers, e.g. 0:1234)");
        let (partition, offset) = text.trim().split_once(':').ok_or_else(bad)?;
        let partition: i32 = partition.parse().map_err(|_| bad())?;
        let offset: i64 = offset.parse().map_err(|_| bad())?;
        if partition < 0 || offset < 0 {
            return Err(bad());
        }
        Ok(SourcePos { partition, offset })
    }
}

/// A dead letter as `dlq list` shows it. The source fields are `None` when
/// a header is missing (a record some other tool wrote), and `defect` says
/// why `dlq replay` cannot use such a letter.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Letter {
    pub(crate) dlq_partition: i32,
    pub(crate) dlq_offset: i64,
    pub source_topic: Option<String>,
    pub source_partition: Option<i32>,
    pub source_offset: Option<i64>,
    pub error_kind: Option<String>,
    pub error_message: Option<String>,
    /// When it was dead-lettered: the record's timestamp, RFC 3339 (UTC).
    pub dead_lettered_at: Option<String>,
    pub timestamp_ms: Option<i64>,
    /// Times its record was re-published before it failed this time.
    pub redrive_count: u32,
    /// Whether a re-drive record names this letter's source position.
    pub redriven: bool,
    /// Why `dlq replay` cannot use it; `None` for a well-formed letter.
    pub(crate) defect: Option<String>,
}

impl Letter {
    /// The source position, when both headers are there and parse.
    pub(crate) fn source(&self) -> Option<SourcePos> {
        Some(SourcePos {
            partition: self.source_partition?,
            offset: self.source_offset?,
        })
    }
}

/// A re-drive record's payload (written by `replay`).
#[derive(Debug, Deserialize)]
pub(crate) struct RedriveRecord {
    pub input_topic: String,
    /// `partition:offset` of each re-published letter's source.
    pub sources: Vec<String>,
}

/// What a dead-letter record is.
pub(crate) enum DlqRecord {
    Letter(Letter),
    /// A re-drive record: these source positions of this input topic were
    /// re-published.
    Redriven {
        input_topic: String,
        sources: Vec<SourcePos>,
    },
}

/// Parses one record of the dead-letter topic.
pub(crate) fn parse(message: &BorrowedMessage<'_>) -> DlqRecord {
    let header = |name: &str| crate::kafka::header(message, name);
    let text = |name: &str| header(name).map(|v| String::from_utf8_lossy(v).into_owned());
    if header(HEADER_REDRIVE_DONE).is_some() {
        return parse_redrive_record(message);
    }
    let mut defects = Vec::new();
    let mut number = |name: &str| -> Option<i64> {
        match text(name) {
            None => {
                defects.push(format!("no {name} header"));
                None
            }
            Some(value) => match value.trim().parse::<i64>() {
                Ok(n) if n >= 0 => Some(n),
                _ => {
                    defects.push(format!("{name} is `{value}`, not a number"));
                    None
                }
            },
        }
    };
    let source_partition = number(HEADER_PARTITION).and_then(|p| i32::try_from(p).ok());
    let source_offset = number(HEADER_OFFSET);
    let redrive_count = match text(HEADER_REDRIVE_COUNT) {
        None => 0,
        Some(value) => value.trim().parse::<u32>().unwrap_or_else(|_| {
            defects.push(format!("{HEADER_REDRIVE_COUNT} is `{value}`, not a count"));
            0
        }),
    };
    let source_topic = text(HEADER_TOPIC);
    if source_topic.is_none() {
        defects.push(format!("no {HEADER_TOPIC} header"));
    }
    let timestamp_ms = message.timestamp().to_millis();
    DlqRecord::Letter(Letter {
        dlq_partition: message.partition(),
        dlq_offset: message.offset(),
        source_topic,
        source_partition,
        source_offset,
        error_kind: text(HEADER_ERROR_KIND),
        error_message: text(HEADER_ERROR_MESSAGE),
        dead_lettered_at: timestamp_ms.map(rfc3339_millis),
        timestamp_ms,
        redrive_count,
        redriven: false,
        defect: (!defects.is_empty())
            .then(|| format!("not an orderly dead letter: {}", defects.join(", "))),
    })
}

fn parse_redrive_record(message: &BorrowedMessage<'_>) -> DlqRecord {
    let parsed = message
        .payload()
        .and_then(|p| serde_json::from_slice::<RedriveRecord>(p).ok());
    let Some(record) = parsed else {
        warn!(
            partition = message.partition(),
            offset = message.offset(),
            "unreadable re-drive record ignored"
        );
        return DlqRecord::Redriven {
            input_topic: String::new(),
            sources: Vec::new(),
        };
    };
    let sources = record
        .sources
        .iter()
        .filter_map(|s| s.parse().ok())
        .collect();
    DlqRecord::Redriven {
        input_topic: record.input_topic,
        sources,
    }
}

/// The source positions of one input topic that re-drive records name.
#[derive(Default)]
pub(crate) struct RedrivenSet(HashSet<SourcePos>);

impl RedrivenSet {
    /// Adds a re-drive record's positions when they belong to `input_topic`.
    pub(crate) fn add(&mut self, input_topic: &str, record_topic: &str, sources: Vec<SourcePos>) {
        if record_topic == input_topic {
            self.0.extend(sources);
        }
    }

    /// Records a position; false when it was there already.
    pub(crate) fn insert(&mut self, source: SourcePos) -> bool {
        self.0.insert(source)
    }

    pub(crate) fn contains(&self, source: &SourcePos) -> bool {
        self.0.contains(source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_positions_parse_strictly() {
        assert_eq!(
            "3:42".parse::<SourcePos>(),
            Ok(SourcePos {
                partition: 3,
                offset: 42
            })
        );
        assert_eq!(
            " 0:0 ".parse::<SourcePos>().map(|s| s.to_string()),
            Ok("0:0".to_string())
        );
        for bad in [
            "",
            "3",
            "3:",
            ":4",
            "a:1",
            "1:b",
            "-1:4",
            "1:-4",
            "1:2:3",
            "99999999999:1",
        ] {
            let error = bad.parse::<SourcePos>().expect_err(bad);
            assert!(error.contains("PARTITION:OFFSET"), "{bad}: {error}");
        }
    }
}
