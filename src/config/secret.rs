//! What is never printed: the values of secret settings and the
//! `REDACTED` that `config show` prints in their place.

use serde::{Deserialize, Serialize};

/// What `config show` prints in place of a secret.
pub(crate) const REDACTED: &str = "<redacted>";

/// Parts of librdkafka setting names whose values are secrets (passwords,
/// private keys, JAAS and OAuth configurations, tokens).
const SECRET_MARKERS: &[&str] = &[
    "password",
    "secret",
    "sasl.jaas",
    "sasl.oauthbearer.config",
    "ssl.key.pem",
    "ssl_key",
    "token",
    "credential",
];

/// True when a librdkafka setting's value must not be printed.
pub(crate) fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_MARKERS.iter().any(|marker| key.contains(marker))
}

/// A setting whose value is a secret (a password, a token): its `Debug`
/// form never shows it, so a `{:?}` of the configuration cannot leak it.
/// `config show` prints [`Config::redacted`], where it is `REDACTED`.
#[derive(Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("\"\"")
        } else {
            f.write_str(REDACTED)
        }
    }
}
