//! An error and its causes on one line, for messages and logs.

use std::error::Error;

/// An error and its causes, each stated once: a cause whose text the message
/// already holds (a wrapper that prints its source) is not repeated.
pub(crate) fn error_text(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let part = cause.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = cause.source();
    }
    text
}
