//! The `{key}` of `/state/{key}`, taken from the raw request path so every
//! way it can be wrong gets its own clear answer, in the words of the
//! entity (its key field: `order_id`, `sku`, or a user's own).

/// Longest key the endpoint accepts, in bytes.
pub(crate) const MAX_KEY_BYTES: usize = 512;

/// Why a path segment is not a key.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BadKey {
    Empty,
    TooLong(usize),
    NotUtf8,
    BadEscape(usize),
}

impl BadKey {
    /// The answer for a request, naming the key as the entity does
    /// (`field`: its key field).
    pub(super) fn message(&self, field: &str) -> String {
        match self {
            BadKey::Empty => format!("the {field} is empty: use /state/{{{field}}}"),
            BadKey::TooLong(len) => {
                format!("the {field} is {len} bytes long; at most {MAX_KEY_BYTES} are accepted")
            }
            BadKey::NotUtf8 => format!("the {field} is not valid UTF-8 after percent-decoding"),
            BadKey::BadEscape(at) => format!(
                "the {field} has an invalid percent-escape at byte {at} (use %XX with two hex digits)"
            ),
        }
    }
}

/// Percent-decodes one path segment and checks it is a plausible key.
pub(super) fn parse(segment: &str) -> Result<String, BadKey> {
    let raw = segment.as_bytes();
    let mut bytes = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hex = raw
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            bytes.push(hex.ok_or(BadKey::BadEscape(i))?);
            i += 3;
        } else {
            bytes.push(raw[i]);
            i += 1;
        }
        if bytes.len() > MAX_KEY_BYTES {
            // Count the whole thing for the message, without keeping it.
            return Err(BadKey::TooLong(decoded_len(segment)));
        }
    }
    if bytes.is_empty() {
        return Err(BadKey::Empty);
    }
    String::from_utf8(bytes).map_err(|_| BadKey::NotUtf8)
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
        assert_eq!(parse(""), Err(BadKey::Empty));
        assert_eq!(parse("%FF%FE"), Err(BadKey::NotUtf8));
        assert_eq!(parse("ab%2"), Err(BadKey::BadEscape(2)));
        assert_eq!(parse("ab%zz"), Err(BadKey::BadEscape(2)));
        assert_eq!(
            parse(&"x".repeat(MAX_KEY_BYTES)).map(|s| s.len()),
            Ok(MAX_KEY_BYTES)
        );
        assert_eq!(
            parse(&"x".repeat(MAX_KEY_BYTES + 1)),
            Err(BadKey::TooLong(MAX_KEY_BYTES + 1))
        );
    }

    #[test]
    fn answers_name_the_entitys_key() {
        assert_eq!(
            BadKey::Empty.message("shipment_id"),
            "the shipment_id is empty: use /state/{shipment_id}"
        );
        assert!(BadKey::NotUtf8.message("sku").starts_with("the sku is"));
    }
}
