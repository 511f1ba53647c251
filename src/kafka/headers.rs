//! Every record header orderly writes or reads, in one place: on dead
//! letters, on changelog records, on status changes, on re-driven records.
//! Values are decimal or plain text.

/// Dead letters and status changes: the topic of the input record.
pub const HEADER_TOPIC: &str = "orderly.source.topic";
/// Dead letters and status changes: the input record's partition.
pub const HEADER_PARTITION: &str = "orderly.source.partition";
/// Dead letters and status changes: the input record's offset.
pub const HEADER_OFFSET: &str = "orderly.source.offset";
/// Dead letters: why the record is poison (a [`crate::engine::codec::PoisonKind`]).
pub const HEADER_ERROR_KIND: &str = "orderly.error.kind";
/// Dead letters: the error, in words.
pub const HEADER_ERROR_MESSAGE: &str = "orderly.error.message";
/// How many times `orderly dlq replay` re-published this record (absent: never).
/// A re-published record carries the letter's count + 1; when it fails again,
/// its new letter carries the same header, copied from the input record, so
/// the count survives each round and `dlq replay --max-redrives` can stop it.
pub const HEADER_REDRIVE_COUNT: &str = "orderly.redrive.count";
/// On a re-published record: the source position (`partition:offset`) of
/// the letter it re-drives, for tracing it back.
pub const HEADER_REDRIVE_SOURCE: &str = "orderly.redrive.source";
/// Marked a re-drive record in the dead-letter topic, as orderly wrote them
/// before the re-drive log ([`crate::ops::redrive::log`]); still read, never written.
pub(crate) const HEADER_REDRIVE_DONE: &str = "orderly.redrive.done";

/// Header of every changelog record: the input offset (decimal text) the
/// write-out it belongs to covers, i.e. its checkpoint's `next_offset`.
pub const HEADER_COVERS: &str = "orderly.covers";
/// Changelog records and status changes: the partition's state epoch
/// (decimal text; absent means 0). `orderly replay --reset-state` starts a
/// new epoch with its marker; a restore applies only records of the epoch of
/// the checkpoint it ends at, so no state from before a reset comes back,
/// even after compaction removed the tombstones.
pub(crate) const HEADER_EPOCH: &str = "orderly.epoch";
/// Header of every write-out's changelog records: the client id of the
/// process that wrote them (`orderly-<host>-<pid>`), to tell writers apart
/// when reading a changelog back (a late writer, an operator's question).
pub(crate) const HEADER_WRITER: &str = "orderly.writer";
/// Changelog checkpoint records written by `orderly repair` and by the
/// write-outs after it until the partition's checkpoint passes this input
/// offset (decimal text): the status changes and dead letters of input
/// records below it were published before the repair moved the partition
/// back, so they are not published again.
pub const HEADER_PUBLISHED_TO: &str = "orderly.published-to";

/// `headers` with [`HEADER_PUBLISHED_TO`] added when there is one.
pub(crate) fn with_published_to(
    headers: rdkafka::message::OwnedHeaders,
    published_to: Option<i64>,
) -> rdkafka::message::OwnedHeaders {
    match published_to {
        Some(offset) => headers.insert(rdkafka::message::Header {
            key: HEADER_PUBLISHED_TO,
            value: Some(offset.to_string().as_str()),
        }),
        None => headers,
    }
}

/// A record's headers built from (name, value) pairs, in their order.
pub(crate) fn headers<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> rdkafka::message::OwnedHeaders {
    let pairs = pairs.into_iter();
    let capacity = pairs.size_hint().0;
    pairs.fold(
        rdkafka::message::OwnedHeaders::new_with_capacity(capacity),
        |headers, (key, value)| {
            headers.insert(rdkafka::message::Header {
                key,
                value: Some(value),
            })
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::message::Headers;

    #[test]
    fn headers_keep_the_pairs_in_order() {
        let offset = 42.to_string();
        let built = headers([
            (HEADER_TOPIC, "orders".as_bytes()),
            (HEADER_OFFSET, offset.as_bytes()),
            (HEADER_TOPIC, b"again".as_slice()),
        ]);
        let read: Vec<(&str, Option<&[u8]>)> = built.iter().map(|h| (h.key, h.value)).collect();
        assert_eq!(
            read,
            [
                (HEADER_TOPIC, Some(b"orders".as_slice())),
                (HEADER_OFFSET, Some(b"42".as_slice())),
                (HEADER_TOPIC, Some(b"again".as_slice())),
            ]
        );
        assert_eq!(headers([]).count(), 0);
    }

    #[test]
    fn published_to_is_added_only_when_there_is_one() {
        let base = headers([(HEADER_COVERS, b"5".as_slice())]);
        assert_eq!(with_published_to(base.clone(), None).count(), 1);
        let with = with_published_to(base, Some(9));
        assert_eq!(with.count(), 2);
        assert_eq!(
            with.iter()
                .find(|h| h.key == HEADER_PUBLISHED_TO)
                .and_then(|h| h.value),
            Some(b"9".as_slice())
        );
    }
}
