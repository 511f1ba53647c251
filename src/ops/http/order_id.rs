//! The `{order_id}` of `/state/{order_id}`, taken from the raw request path
//! so every way it can be wrong gets its own clear answer.

/// Longest order id the endpoint accepts, in bytes.
pub(crate) const MAX_ORDER_ID_BYTES: usize = 512;

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BadOrderId {
    #[error("the order id is empty: use /state/{{order_id}}")]
    Empty,
    #[error("the order id is {0} bytes long; at most {MAX_ORDER_ID_BYTES} are accepted")]
    TooLong(usize),
    #[error("the order id is not valid UTF-8 after percent-decoding")]
    NotUtf8,
    #[error(
        "the order id has an invalid percent-escape at byte {0} (use %XX with two hex digits)"
    )]
    BadEscape(usize),
}

/// Percent-decodes one path segment and checks it is a plausible order id.
pub(super) fn parse(segment: &str) -> Result<String, BadOrderId> {
    let raw = segment.as_bytes();
    let mut bytes = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hex = raw
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            bytes.push(hex.ok_or(BadOrderId::BadEscape(i))?);
            i += 3;
        } else {
            bytes.push(raw[i]);
            i += 1;
        }
        if bytes.len() > MAX_ORDER_ID_BYTES {
            // Count the whole thing for the message, without keeping it.
            return Err(BadOrderId::TooLong(decoded_len(segment)));
        }
    }
    if bytes.is_empty() {
        return Err(BadOrderId::Empty);
    }
    String::from_utf8(bytes).map_err(|_| BadOrderId::NotUtf8)
}

fn decoded_len(segment: &str) -> usize {
    segment.len() - 2 * segment.matches('%').count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_and_checks() {
        assert_eq!(parse("order-00000001"), Ok("order-00000001".into()));
        assert_eq!(parse("a%2Fb%20c"), Ok("a/b c".into()));
        assert_eq!(parse("caf%C3%A9"), Ok("café".into()));
        assert_eq!(parse(""), Err(BadOrderId::Empty));
        assert_eq!(parse("%FF%FE"), Err(BadOrderId::NotUtf8));
        assert_eq!(parse("ab%2"), Err(BadOrderId::BadEscape(2)));
        assert_eq!(parse("ab%zz"), Err(BadOrderId::BadEscape(2)));
        assert_eq!(
            parse(&"x".repeat(MAX_ORDER_ID_BYTES)).map(|s| s.len()),
            Ok(MAX_ORDER_ID_BYTES)
        );
        assert_eq!(
            parse(&"x".repeat(MAX_ORDER_ID_BYTES + 1)),
            Err(BadOrderId::TooLong(MAX_ORDER_ID_BYTES + 1))
        );
    }
}
