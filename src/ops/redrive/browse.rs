//! The dead-letter page's reads (`/dlq` on the endpoint): the letters newest
//! first, filtered by error kind and source partition and cut into pages
//! (pure, over `dlq list`'s listing); and one letter read whole: its
//! headers, its key, and its body as JSON where the registry knows the
//! writer schema.

use std::collections::BTreeMap;

use serde::Serialize;

use super::letter::{self, DlqRecord, Letter};
use super::list::Listing;
use super::scan::Dlq;
use super::RedriveError;
use crate::config::Config;

/// Letters per page unless asked otherwise, and at most.
pub(crate) const PER_PAGE: usize = 25;
pub(crate) const MAX_PER_PAGE: usize = 500;

/// Which letters a page shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    /// The error kind (`unknown_schema`, ...); `None`: every kind.
    pub kind: Option<String>,
    /// The source (input) partition; `None`: every partition.
    pub partition: Option<i32>,
    /// Pending only: letters no re-drive record names yet.
    pub pending: bool,
    /// 0-based.
    pub page: usize,
    pub per_page: usize,
}

/// One page of letters, with what the filters can choose from.
#[derive(Debug, Serialize)]
pub(crate) struct Page {
    pub topic: String,
    /// Letters in the topic, and of those not re-driven yet.
    pub total: usize,
    pub pending: usize,
    /// Letters the filter matches (every page of them).
    pub matching: usize,
    pub page: usize,
    pub pages: usize,
    pub per_page: usize,
    /// Letters per error kind, and per source partition (whole topic).
    pub kinds: BTreeMap<String, usize>,
    pub partitions: BTreeMap<i32, usize>,
    /// Newest first.
    pub letters: Vec<Letter>,
}

/// The page `filter` chooses from `listing` (every letter of the topic).
pub(crate) fn page(listing: Listing, filter: &Filter) -> Page {
    let per_page = filter.per_page.clamp(1, MAX_PER_PAGE);
    let mut kinds = BTreeMap::new();
    let mut partitions = BTreeMap::new();
    for letter in &listing.letters {
        *kinds
            .entry(
                letter
                    .error_kind
                    .clone()
                    .unwrap_or_else(|| "unknown".into()),
            )
            .or_default() += 1;
        if let Some(p) = letter.source_partition {
            *partitions.entry(p).or_default() += 1;
        }
    }
    let pending = listing.letters.iter().filter(|l| !l.redriven).count();
    let total = listing.letters.len();
    let mut chosen: Vec<Letter> = listing
        .letters
        .into_iter()
        .filter(|l| {
            filter
                .kind
                .as_deref()
                .is_none_or(|k| l.error_kind.as_deref().unwrap_or("unknown") == k)
                && filter
                    .partition
                    .is_none_or(|p| l.source_partition == Some(p))
                && (!filter.pending || !l.redriven)
        })
        .collect();
    // Newest first: by time, then by position (letters of one write share a time).
    chosen.sort_by(|a, b| {
        (b.timestamp_ms, b.dlq_partition, b.dlq_offset).cmp(&(
            a.timestamp_ms,
            a.dlq_partition,
            a.dlq_offset,
        ))
    });
    let matching = chosen.len();
    let pages = matching.div_ceil(per_page).max(1);
    let page = filter.page.min(pages - 1);
    let letters = chosen
        .into_iter()
        .skip(page * per_page)
        .take(per_page)
        .collect();
    Page {
        topic: listing.topic,
        total,
        pending,
        matching,
        page,
        pages,
        per_page,
        kinds,
        partitions,
        letters,
    }
}

/// One letter read whole.
#[derive(Debug, Serialize)]
pub(crate) struct Detail {
    #[serde(flatten)]
    pub letter: Letter,
    /// Every header, in order (values as text, lossy).
    pub headers: Vec<(String, String)>,
    /// The record key (lossy text).
    pub key: Option<String>,
    pub payload_bytes: usize,
    /// The body as JSON, when it decodes with a writer schema the registry
    /// knows; otherwise why not.
    pub body: Option<serde_json::Value>,
    pub body_error: Option<String>,
}

/// A letter read whole, and its record's value.
pub(crate) type Read = (Detail, Option<Vec<u8>>);

/// The letter at (`partition`, `offset`) of the dead-letter topic, with its
/// payload; `None` when no letter is there. Blocking.
pub(crate) fn read_one(
    config: &Config,
    partition: i32,
    offset: i64,
) -> Result<Option<Read>, RedriveError> {
    let dlq = Dlq::open(config)?;
    let (low, high) = dlq.watermarks(partition)?;
    if offset < low || offset >= high {
        return Ok(None);
    }
    let mut found = None;
    dlq.scan(partition, offset, offset + 1, |message| {
        use rdkafka::message::{Headers, Message};
        if message.offset() != offset {
            return Ok(());
        }
        let DlqRecord::Letter(letter) = letter::parse(message) else {
            return Ok(());
        };
        let headers = message
            .headers()
            .map(|hs| {
                hs.iter()
                    .map(|h| {
                        (
                            h.key.to_string(),
                            String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let payload = message.payload().map(<[u8]>::to_vec);
        found = Some((
            Detail {
                letter,
                headers,
                key: message
                    .key()
                    .map(|k| String::from_utf8_lossy(k).into_owned()),
                payload_bytes: payload.as_ref().map_or(0, Vec::len),
                body: None,
                body_error: None,
            },
            payload,
        ));
        Ok(())
    })?;
    Ok(found)
}

/// A payload in the Confluent wire format as JSON, read with its writer
/// schema from `registry`; or why it cannot be.
pub(crate) async fn body_as_json(
    registry: &crate::registry::Registry,
    payload: Option<&[u8]>,
) -> Result<serde_json::Value, String> {
    let bytes = payload.ok_or("the record has no value")?;
    if bytes.len() < 5 || bytes[0] != 0 {
        return Err("not in the Confluent wire format (no magic byte 0 and schema id)".into());
    }
    let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
    let text = registry
        .schema_by_id(id)
        .await
        .map_err(|e| format!("schema id {id}: {e}"))?;
    let schema = apache_avro::Schema::parse_str(&text)
        .map_err(|e| format!("schema id {id} does not parse: {e}"))?;
    let mut body = &bytes[5..];
    let value = apache_avro::reader::datum::GenericDatumReader::builder(&schema)
        .build()
        .and_then(|reader| reader.read_value(&mut body))
        .map_err(|e| format!("does not decode with schema id {id}: {e}"))?;
    if !body.is_empty() {
        return Err(format!(
            "{} bytes follow the record schema id {id} describes",
            body.len()
        ));
    }
    serde_json::Value::try_from(value).map_err(|e| format!("as JSON: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(partition: i32, offset: i64, kind: &str, at: i64, redriven: bool) -> Letter {
        Letter {
            dlq_partition: 0,
            dlq_offset: offset,
            source_topic: Some("orders".into()),
            source_partition: Some(partition),
            source_offset: Some(offset * 10),
            error_kind: Some(kind.into()),
            error_message: Some("why".into()),
            dead_lettered_at: None,
            timestamp_ms: Some(at),
            redrive_count: 0,
            redriven,
            defect: None,
        }
    }

    fn listing(letters: Vec<Letter>) -> Listing {
        Listing {
            topic: "orders-dlq".into(),
            partitions: 1,
            total: letters.len(),
            redriven: letters.iter().filter(|l| l.redriven).count(),
            letters,
        }
    }

    #[test]
    fn pages_are_newest_first_filtered_and_counted() {
        let all = (0..7)
            .map(|i| {
                let kind = if i % 2 == 0 {
                    "undecodable"
                } else {
                    "unknown_schema"
                };
                letter((i % 3) as i32, i, kind, 1_000 + i, i == 6)
            })
            .collect::<Vec<_>>();
        let first = page(
            listing(all.clone()),
            &Filter {
                per_page: 3,
                ..Default::default()
            },
        );
        assert_eq!(
            (first.total, first.pending, first.matching, first.pages),
            (7, 6, 7, 3)
        );
        let offsets: Vec<i64> = first.letters.iter().map(|l| l.dlq_offset).collect();
        assert_eq!(offsets, vec![6, 5, 4]);
        assert_eq!(first.kinds.get("undecodable"), Some(&4));
        assert_eq!(first.partitions.get(&0), Some(&3));
        let last = page(
            listing(all.clone()),
            &Filter {
                per_page: 3,
                page: 99,
                ..Default::default()
            },
        );
        assert_eq!(last.page, 2, "a page past the end shows the last");
        assert_eq!(last.letters.len(), 1);
        let chosen = page(
            listing(all),
            &Filter {
                kind: Some("undecodable".into()),
                partition: Some(0),
                pending: true,
                per_page: 25,
                page: 0,
            },
        );
        let offsets: Vec<i64> = chosen.letters.iter().map(|l| l.dlq_offset).collect();
        assert_eq!(offsets, vec![0], "offset 6 is re-driven, 3 is another kind");
        assert_eq!(chosen.matching, 1);
    }
}
