//! Where writer schemas come from: a Confluent-compatible schema registry over
//! HTTP (through `schema_registry_converter`), or an in-process map for the
//! demo and fast tests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schema_registry_converter::async_impl::schema_registry::{
    get_all_versions, get_schema_by_id, get_schema_by_subject_and_version, post_schema, SrSettings,
};
use schema_registry_converter::error::SRCError;
use schema_registry_converter::schema_registry_common::{RawError, SchemaType, SuppliedSchema};

mod access;
mod error;
pub(crate) use access::is_tls_verification;
pub(crate) use access::Endpoint;
pub use error::RegistryError;

/// Confluent's `error_code` for "schema not found" (`GET /schemas/ids/{id}`).
/// Only this code makes a record poison: a 404 without it (a wrong base
/// path, an ingress or proxy page) says nothing about the record.
pub(crate) const SCHEMA_NOT_FOUND: u32 = 40403;

/// A schema registry client.
#[derive(Clone)]
pub enum Registry {
    /// A Confluent-compatible registry over HTTP(S).
    Http(Arc<HttpRegistry>),
    /// In-process registry: ids are assigned in registration order from 1.
    Memory(Arc<Mutex<MemoryRegistry>>),
}

/// The HTTP client's settings and the endpoint they were built from (for
/// error messages).
pub struct HttpRegistry {
    settings: SrSettings,
    endpoint: Endpoint,
    /// An access failure (401, 403, TLS) is logged once, not per record
    /// that waits for it; a successful look-up re-arms it.
    refusal_logged: AtomicBool,
}

#[derive(Default)]
pub struct MemoryRegistry {
    by_id: HashMap<u32, String>,
    by_subject: HashMap<String, Vec<(String, u32)>>,
    next_id: u32,
}

impl Registry {
    /// A registry at `url` without credentials, trusting the system's CAs.
    pub fn http(url: &str, timeout: Duration) -> Result<Self, RegistryError> {
        Self::connect(Endpoint::new(url, timeout))
    }

    /// The registry of the `[registry]` settings, with their credentials and
    /// CA: what `run`, `produce` and `config check` use.
    pub fn from_config(config: &crate::config::RegistryConfig) -> Result<Self, RegistryError> {
        Self::connect(Endpoint::from_config(config))
    }

    /// A registry client for `endpoint` (its HTTP client from
    /// `Endpoint::http_client`'s constructor). Warns when credentials
    /// would travel over plain HTTP.
    pub fn connect(endpoint: Endpoint) -> Result<Self, RegistryError> {
        if endpoint.sends_credentials_in_clear_text() {
            tracing::warn!(
                url = endpoint.url(),
                "registry.url is http:// and credentials are set: they travel in clear text; use the registry's https:// URL"
            );
        }
        let settings = SrSettings::new_builder(endpoint.url().to_string())
            .set_timeout(endpoint.timeout())
            .build_with(endpoint.client_builder()?)
            .map_err(|e| RegistryError::Settings(describe(&e)))?;
        Ok(Registry::Http(Arc::new(HttpRegistry {
            settings,
            endpoint,
            refusal_logged: AtomicBool::new(false),
        })))
    }

    /// An empty in-process registry (the demo, tests).
    pub fn memory() -> Self {
        Registry::Memory(Arc::new(Mutex::new(MemoryRegistry {
            next_id: 1,
            ..Default::default()
        })))
    }

    /// The schema text registered under `id`. An access failure (401, 403,
    /// TLS) is logged once, at error level, until a look-up succeeds again.
    pub async fn schema_by_id(&self, id: u32) -> Result<String, RegistryError> {
        let result = self.lookup(id).await;
        if let Registry::Http(http) = self {
            match &result {
                Err(e) if e.is_access_failure() => {
                    if !http.refusal_logged.swap(true, Ordering::Relaxed) {
                        tracing::error!(
                            error = %e,
                            "schema registry access failed; records whose writer schema is not cached yet wait \
                             for it (retried, never dead-lettered); logged once until a look-up succeeds"
                        );
                    }
                }
                Ok(_) => http.refusal_logged.store(false, Ordering::Relaxed),
                Err(_) => {}
            }
        }
        result
    }

    async fn lookup(&self, id: u32) -> Result<String, RegistryError> {
        match self {
            Registry::Http(http) => match get_schema_by_id(id, &http.settings).await {
                Ok(registered) => Ok(registered.schema),
                Err(e) => Err(classify_lookup(&http.endpoint, id, &e)),
            },
            Registry::Memory(inner) => {
                let inner = inner
                    .lock()
                    .map_err(|_| RegistryError::Unavailable("registry lock poisoned".into()))?;
                inner
                    .by_id
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| RegistryError::UnknownId {
                        id,
                        message: "not in the in-process registry".into(),
                    })
            }
        }
    }

    /// Checks that the registry answers like a Confluent-compatible one:
    /// schema id 0 (Confluent assigns ids from 1) is either found or
    /// answered with error code 40403. For start-up and `config check`, so a
    /// wrong URL is a clear error before any record is read.
    pub async fn probe(&self) -> Result<(), RegistryError> {
        match self.lookup(0).await {
            Ok(_) | Err(RegistryError::UnknownId { .. }) => Ok(()),
            Err(RegistryError::Unexpected { url, message, .. }) => Err(RegistryError::NotARegistry {
                url,
                message: format!("GET /schemas/ids/0 did not answer with a schema or error code {SCHEMA_NOT_FOUND}: {message}"),
            }),
            Err(other) => Err(other),
        }
    }

    /// Registers `schema` under `subject` (idempotent) and returns its id.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        match self {
            Registry::Http(http) => {
                let supplied = SuppliedSchema::new(None, SchemaType::Avro, schema.to_string());
                post_schema(&http.settings, subject.to_string(), supplied)
                    .await
                    .map(|r| r.id)
                    .map_err(|e| {
                        if let Some(failure) = access_failure(&http.endpoint, &e) {
                            return failure;
                        }
                        let message = http.endpoint.scrub(&describe(&e));
                        if e.retriable {
                            RegistryError::Unavailable(message)
                        } else {
                            RegistryError::Rejected {
                                subject: subject.into(),
                                message,
                            }
                        }
                    })
            }
            Registry::Memory(inner) => {
                let mut inner = inner
                    .lock()
                    .map_err(|_| RegistryError::Unavailable("registry lock poisoned".into()))?;
                let existing = inner.by_subject.get(subject).and_then(|versions| {
                    versions
                        .iter()
                        .find(|(s, _)| s == schema)
                        .map(|(_, id)| *id)
                });
                if let Some(id) = existing {
                    return Ok(id);
                }
                let id = inner.next_id;
                inner.next_id += 1;
                inner.by_id.insert(id, schema.to_string());
                inner
                    .by_subject
                    .entry(subject.to_string())
                    .or_default()
                    .push((schema.to_string(), id));
                Ok(id)
            }
        }
    }

    /// Every version registered under `subject`, oldest first; none when
    /// the subject is not registered (Confluent's error code 40401).
    pub async fn versions(&self, subject: &str) -> Result<Vec<RegisteredVersion>, RegistryError> {
        match self {
            Registry::Http(http) => {
                let failed = |e: &SRCError| {
                    if let Some(failure) = access_failure(&http.endpoint, e) {
                        return failure;
                    }
                    let message = http.endpoint.scrub(&describe(e));
                    if e.retriable {
                        RegistryError::Unavailable(message)
                    } else {
                        RegistryError::Unexpected {
                            url: http.endpoint.url().to_string(),
                            id: 0,
                            message,
                        }
                    }
                };
                let numbers = match get_all_versions(&http.settings, subject.to_string()).await {
                    Ok(numbers) => numbers,
                    Err(e) if registry_error_code(&e) == Some(SUBJECT_NOT_FOUND) => {
                        return Ok(Vec::new())
                    }
                    Err(e) => return Err(failed(&e)),
                };
                let mut versions = Vec::with_capacity(numbers.len());
                for version in numbers {
                    let registered =
                        get_schema_by_subject_and_version(&http.settings, subject, Some(version))
                            .await
                            .map_err(|e| failed(&e))?;
                    versions.push(RegisteredVersion {
                        version,
                        id: registered.id,
                        schema: registered.schema,
                    });
                }
                Ok(versions)
            }
            Registry::Memory(inner) => {
                let inner = inner
                    .lock()
                    .map_err(|_| RegistryError::Unavailable("registry lock poisoned".into()))?;
                Ok(inner
                    .by_subject
                    .get(subject)
                    .map(|versions| {
                        versions
                            .iter()
                            .enumerate()
                            .map(|(n, (schema, id))| RegisteredVersion {
                                version: n as u32 + 1,
                                id: *id,
                                schema: schema.clone(),
                            })
                            .collect()
                    })
                    .unwrap_or_default())
            }
        }
    }
}

/// Confluent's `error_code` for "subject not found".
pub(crate) const SUBJECT_NOT_FOUND: u32 = 40401;

/// One version of a subject, as the registry holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredVersion {
    pub version: u32,
    pub id: u32,
    pub schema: String,
}

/// Classifies a failed `GET /schemas/ids/{id}`: an access failure (401,
/// 403, TLS) first; then on the registry's own error code, never on the
/// message text: only 40403 means the id is unknown (poison); an
/// unreachable registry or a 502/503 is `Unavailable`; every other answer
/// is `Unexpected`. All but `UnknownId` are retried by the decoder and
/// never skip the record.
fn classify_lookup(endpoint: &Endpoint, id: u32, e: &SRCError) -> RegistryError {
    if let Some(failure) = access_failure(endpoint, e) {
        return failure;
    }
    let message = endpoint.scrub(&describe(e));
    if e.retriable {
        return RegistryError::Unavailable(message);
    }
    match registry_error_code(e) {
        Some(SCHEMA_NOT_FOUND) => RegistryError::UnknownId { id, message },
        _ => RegistryError::Unexpected {
            url: endpoint.url().to_string(),
            id,
            message,
        },
    }
}

/// A 401 or 403 answer, or a TLS certificate that does not verify.
///
/// `schema_registry_converter` keeps no status code: it says "HTTP request
/// to schema registry failed with status {status}" (its only message with a
/// status), which is read here; the registry's JSON error, when it sent
/// one, is the source. A failed TLS handshake is the `reqwest::Error`
/// source of a failed send.
fn access_failure(endpoint: &Endpoint, e: &SRCError) -> Option<RegistryError> {
    if let Some(status) = http_status(e).filter(|s| *s == 401 || *s == 403) {
        let detail = std::error::Error::source(e)
            .and_then(|source| source.downcast_ref::<RawError>())
            .filter(|raw| raw.error_code != 0)
            .map(|raw| raw.message.clone())
            .unwrap_or_default();
        return Some(endpoint.refused(status, &detail));
    }
    let source = std::error::Error::source(e)?;
    access::is_tls_verification(source).then(|| endpoint.tls_failure(&access::chain_text(source)))
}

/// The HTTP status of a registry answer that was not a success.
fn http_status(e: &SRCError) -> Option<u16> {
    let rest = e
        .error
        .strip_prefix("HTTP request to schema registry failed with status ")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The `error_code` of the registry's JSON error body, when there was one.
/// `schema_registry_converter` keeps the parsed body as the error's source,
/// and reports code 0 when the body was not a registry error (an HTML page).
fn registry_error_code(e: &SRCError) -> Option<u32> {
    let source = std::error::Error::source(e)?;
    let raw = source.downcast_ref::<RawError>()?;
    (raw.error_code != 0).then_some(raw.error_code)
}

fn describe(e: &SRCError) -> String {
    match &e.cause {
        Some(cause) => format!("{} ({cause})", e.error),
        None => e.error.clone(),
    }
}
