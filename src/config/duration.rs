//! Durations written with a unit (`250ms`, `30s`, `15m`, `12h`, `7d`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A duration written as a number with a unit (`250ms`, `30s`, `15m`,
/// `12h`, `7d`): parsed when the configuration is loaded, printed back as
/// it was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HumanDuration {
    text: String,
    duration: Duration,
}

impl HumanDuration {
    pub fn get(&self) -> Duration {
        self.duration
    }
}

impl std::str::FromStr for HumanDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Ok(HumanDuration {
            text: text.trim().to_string(),
            duration: parse_duration(text)?,
        })
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Parses `250ms`, `30s`, `15m`, `12h`, `7d`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| {
        format!("`{text}` is not a duration: use a number and a unit (ms, s, m, h, d), e.g. \"7d\"")
    })?;
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        "d" => n.checked_mul(86_400_000),
        _ => {
            return Err(format!(
                "`{text}` has unknown unit `{unit}`: use ms, s, m, h or d"
            ))
        }
    };
    ms.map(Duration::from_millis)
        .ok_or_else(|| format!("`{text}` is too large"))
}
