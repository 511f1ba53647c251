//! Why the registry did not answer with a schema or an id
//! ([`RegistryError`]), and the words of the access failures: who was
//! refused, and which setting to look at.

use std::path::{Path, PathBuf};

/// Why the registry did not answer with a schema or an id. Each message
/// names what to check.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registry answered with Confluent's error code 40403 (schema not
    /// found): a deterministic failure, the record is poison.
    #[error("schema id {id} is not registered: {message}")]
    UnknownId {
        /// The schema id asked for.
        id: u32,
        /// The registry's message.
        message: String,
    },
    /// The registry could not be reached or failed: transient, retry.
    #[error("schema registry unavailable: {0}")]
    Unavailable(String),
    /// Something answered, but not as a schema registry that lacks the id
    /// would (any other error code, or no registry error body at all: a
    /// wrong base path, an ingress or proxy page, an authorization
    /// failure). Not the record's fault: the decoder retries it and never
    /// dead-letters it.
    #[error("schema registry at {url} gave an unexpected answer for schema id {id} (check registry.url and access): {message}")]
    Unexpected {
        /// The registry's URL.
        url: String,
        /// The schema id asked for.
        id: u32,
        /// What it answered.
        message: String,
    },
    /// The start-up probe did not get an answer that a Confluent-compatible
    /// registry gives.
    #[error("{url} does not answer like a Confluent-compatible schema registry (check registry.url): {message}")]
    NotARegistry {
        /// The registry's URL.
        url: String,
        /// What it answered.
        message: String,
    },
    /// The registry refused to register a schema (incompatible with the
    /// subject's earlier versions, or invalid).
    #[error("schema registry rejected the schema for subject {subject}: {message}")]
    Rejected {
        /// The subject registered under.
        subject: String,
        /// The registry's message.
        message: String,
    },
    /// The registry client could not be built from the settings.
    #[error("invalid registry settings: {0}")]
    Settings(String),
    /// The registry answered 401 (the credentials are missing, wrong or
    /// expired) or 403 (they lack access). Never the record's fault: the
    /// decoder waits as for an outage; start-up and `produce` stop.
    #[error("{}", refused_text(url, *status, who, detail))]
    AccessRefused {
        /// The registry's URL.
        url: String,
        /// 401 or 403.
        status: u16,
        /// Who it refused: which credentials were sent.
        who: Who,
        /// What it said (the password and token scrubbed from it).
        detail: String,
    },
    /// The registry's TLS certificate does not verify against the trusted
    /// CAs (registry.ca_location, or the system's).
    #[error("{}", tls_text(url, ca_location.as_deref(), detail))]
    TlsVerification {
        /// The registry's URL.
        url: String,
        /// `registry.ca_location` (`None`: the system's CAs).
        ca_location: Option<PathBuf>,
        /// Why it did not verify (the password and token scrubbed from it).
        detail: String,
    },
    /// registry.ca_location cannot be read or holds no certificate.
    #[error("registry.ca_location = {}: {message}", path.display())]
    CaFile {
        /// `registry.ca_location`.
        path: PathBuf,
        /// Why it cannot be used.
        message: String,
    },
}

impl RegistryError {
    /// The registry refused orderly's credentials, or orderly cannot
    /// verify the registry: retrying the same request will not help.
    pub fn is_access_failure(&self) -> bool {
        matches!(
            self,
            RegistryError::AccessRefused { .. } | RegistryError::TlsVerification { .. }
        )
    }
}

/// Who the registry refused, for [`RegistryError::AccessRefused`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Who {
    /// No credentials were sent.
    Nobody,
    /// Basic authentication as this user.
    User(String),
    /// A bearer token.
    Token,
}

/// The text of an [`RegistryError::AccessRefused`]: what was refused, and
/// which setting to look at.
pub(crate) fn refused_text(url: &str, status: u16, who: &Who, detail: &str) -> String {
    let what = match (status, who) {
        (401, Who::Nobody) => format!(
            "the schema registry at {url} requires credentials (401 Unauthorized): set registry.username and \
             registry.password (or registry.bearer_token)"
        ),
        (401, Who::User(user)) => format!(
            "the schema registry at {url} refused the credentials of user `{user}` (401 Unauthorized): check \
             registry.username and registry.password (expired or rotated?)"
        ),
        (401, Who::Token) => format!(
            "the schema registry at {url} refused the bearer token (401 Unauthorized): check registry.bearer_token \
             (expired?)"
        ),
        (status, Who::User(user)) => format!(
            "the schema registry at {url} denied user `{user}` access ({status} Forbidden): grant it read access to \
             the subjects orderly reads (and write access for `produce` and the outbox)"
        ),
        (status, _) => format!(
            "the schema registry at {url} denied access ({status} Forbidden): grant orderly's credentials read access \
             to the subjects it reads (and write access for `produce` and the outbox)"
        ),
    };
    if detail.is_empty() {
        what
    } else {
        format!("{what}; it said: {detail}")
    }
}

/// The text of a [`RegistryError::TlsVerification`].
pub(crate) fn tls_text(url: &str, ca_location: Option<&Path>, detail: &str) -> String {
    let trust = match ca_location {
        Some(path) => format!(
            "the CA in registry.ca_location ({}) does not verify the server's certificate (is it the CA that signed \
             it, for this host name?)",
            path.display()
        ),
        None => "the system's CAs do not verify the server's certificate: set registry.ca_location to the PEM file \
                 of the CA that signed it"
            .into(),
    };
    format!("TLS verification of the schema registry at {url} failed: {trust} ({detail})")
}
