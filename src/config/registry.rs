//! `[registry]`: the schema registry, its credentials and CA, and the
//! schema guard.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::secret::{Secret, REDACTED};

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    pub url: String,
    pub timeout_ms: u64,
    /// Basic authentication's user name (`""`: none); set with `password`.
    pub username: String,
    /// Basic authentication's password.
    pub password: Secret,
    /// A bearer token instead of basic authentication (`""`: none).
    pub bearer_token: Secret,
    /// A PEM file of the CA certificate(s) that verify an https registry,
    /// trusted instead of the system's CAs (`""`: the system's).
    pub ca_location: String,
    /// What `run` does when a registered writer schema of the input subject
    /// cannot be read ([`crate::engine::codec::guard`]).
    pub schema_guard: SchemaGuard,
}

impl RegistryConfig {
    /// `ca_location` as a path, `None` when it is `""`.
    pub fn ca_location(&self) -> Option<&Path> {
        let text = self.ca_location.trim();
        (!text.is_empty()).then(|| Path::new(text))
    }
}

/// `registry.schema_guard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SchemaGuard {
    /// Refuse to start, naming the version.
    Refuse,
    /// Log a warning naming it, and start.
    Warn,
    /// Do not check.
    Off,
}

/// `url` with the password of its user info (`https://user:pw@host`) redacted.
pub(super) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let Some((userinfo, host)) = authority.rsplit_once('@') else {
        return url.to_string();
    };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:{REDACTED}@{host}{path}"),
        None => url.to_string(),
    }
}

/// True when `url` has user info (`https://user:pw@host`, `https://user@host`).
pub(super) fn url_has_userinfo(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    rest[..authority_end].contains('@')
}
