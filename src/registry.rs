//! Where writer schemas come from: a Confluent-compatible schema registry over
//! HTTP (through `schema_registry_converter`), or an in-process map for the
//! demo and fast tests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schema_registry_converter::async_impl::schema_registry::{
    get_all_versions, get_schema_by_id, get_schema_by_subject_and_version, post_schema, SrSettings,
};
use schema_registry_converter::error::SRCError;
use schema_registry_converter::schema_registry_common::{RawError, SchemaType, SuppliedSchema};

/// Confluent's `error_code` for "schema not found" (`GET /schemas/ids/{id}`).
/// Only this code makes a record poison: a 404 without it (a wrong base
/// path, an ingress or proxy page) says nothing about the record.
pub(crate) const SCHEMA_NOT_FOUND: u32 = 40403;

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registry answered with Confluent's error code 40403 (schema not
    /// found): a deterministic failure, the record is poison.
    #[error("schema id {id} is not registered: {message}")]
    UnknownId { id: u32, message: String },
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
        url: String,
        id: u32,
        message: String,
    },
    /// The start-up probe did not get an answer that a Confluent-compatible
    /// registry gives.
    #[error("{url} does not answer like a Confluent-compatible schema registry (check registry.url): {message}")]
    NotARegistry { url: String, message: String },
    #[error("schema registry rejected the schema for subject {subject}: {message}")]
    Rejected { subject: String, message: String },
    #[error("invalid registry settings: {0}")]
    Settings(String),
}

/// A schema registry client.
#[derive(Clone)]
pub enum Registry {
    Http(Arc<HttpRegistry>),
    /// In-process registry: ids are assigned in registration order from 1.
    Memory(Arc<Mutex<MemoryRegistry>>),
}

/// The HTTP client's settings and the base URL they were built from (for
/// error messages).
pub struct HttpRegistry {
    settings: SrSettings,
    url: String,
}

#[derive(Default)]
pub struct MemoryRegistry {
    by_id: HashMap<u32, String>,
    by_subject: HashMap<String, Vec<(String, u32)>>,
    next_id: u32,
}

impl Registry {
    pub fn http(url: &str, timeout: Duration) -> Result<Self, RegistryError> {
        let settings = SrSettings::new_builder(url.to_string())
            .set_timeout(timeout)
            .build()
            .map_err(|e| RegistryError::Settings(e.to_string()))?;
        Ok(Registry::Http(Arc::new(HttpRegistry {
            settings,
            url: url.to_string(),
        })))
    }

    pub fn memory() -> Self {
        Registry::Memory(Arc::new(Mutex::new(MemoryRegistry {
            next_id: 1,
            ..Default::default()
        })))
    }

    /// The schema text registered under `id`.
    pub async fn schema_by_id(&self, id: u32) -> Result<String, RegistryError> {
        match self {
            Registry::Http(http) => match get_schema_by_id(id, &http.settings).await {
                Ok(registered) => Ok(registered.schema),
                Err(e) => Err(classify_lookup(&http.url, id, &e)),
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
        match self.schema_by_id(0).await {
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
                        let message = describe(&e);
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
                    let message = describe(e);
                    if e.retriable {
                        RegistryError::Unavailable(message)
                    } else {
                        RegistryError::Unexpected {
                            url: http.url.clone(),
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

/// Classifies a failed `GET /schemas/ids/{id}` on the registry's own error
/// code, never on the HTTP status or the message text: only 40403 means the
/// id is unknown (poison); an unreachable registry or a 502/503 is
/// `Unavailable`; every other answer is `Unexpected`. Both of those are
/// retried by the decoder and never skip the record.
fn classify_lookup(url: &str, id: u32, e: &SRCError) -> RegistryError {
    let message = describe(e);
    if e.retriable {
        return RegistryError::Unavailable(message);
    }
    match registry_error_code(e) {
        Some(SCHEMA_NOT_FOUND) => RegistryError::UnknownId { id, message },
        _ => RegistryError::Unexpected {
            url: url.to_string(),
            id,
            message,
        },
    }
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
