//! Where writer schemas come from: a Confluent-compatible schema registry over
//! HTTP (through `schema_registry_converter`), or an in-process map for the
//! demo and fast tests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use schema_registry_converter::async_impl::schema_registry::{get_schema_by_id, post_schema, SrSettings};
use schema_registry_converter::schema_registry_common::{SchemaType, SuppliedSchema};

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The registry answered that it has no schema with this id: a
    /// deterministic failure, the record is poison.
    #[error("schema id {id} is not registered: {message}")]
    UnknownId { id: u32, message: String },
    /// The registry could not be reached or failed: transient, retry.
    #[error("schema registry unavailable: {0}")]
    Unavailable(String),
    #[error("schema registry rejected the schema for subject {subject}: {message}")]
    Rejected { subject: String, message: String },
    #[error("invalid registry settings: {0}")]
    Settings(String),
}

/// A schema registry client.
#[derive(Clone)]
pub enum Registry {
    Http(Arc<SrSettings>),
    /// In-process registry: ids are assigned in registration order from 1.
    Memory(Arc<Mutex<MemoryRegistry>>),
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
        Ok(Registry::Http(Arc::new(settings)))
    }

    pub fn memory() -> Self {
        Registry::Memory(Arc::new(Mutex::new(MemoryRegistry { next_id: 1, ..Default::default() })))
    }

    /// The schema text registered under `id`.
    pub async fn schema_by_id(&self, id: u32) -> Result<String, RegistryError> {
        match self {
            Registry::Http(settings) => match get_schema_by_id(id, settings).await {
                Ok(registered) => Ok(registered.schema),
                Err(e) => {
                    let text = format!("{} {}", e.error, e.cause.clone().unwrap_or_default());
                    if !e.retriable && (text.contains("404") || text.contains("40403") || text.to_lowercase().contains("not found")) {
                        Err(RegistryError::UnknownId { id, message: text })
                    } else {
                        Err(RegistryError::Unavailable(text))
                    }
                }
            },
            Registry::Memory(inner) => {
                let inner = inner.lock().map_err(|_| RegistryError::Unavailable("registry lock poisoned".into()))?;
                inner
                    .by_id
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| RegistryError::UnknownId { id, message: "not in the in-process registry".into() })
            }
        }
    }

    /// Registers `schema` under `subject` (idempotent) and returns its id.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        match self {
            Registry::Http(settings) => {
                let supplied = SuppliedSchema::new(None, SchemaType::Avro, schema.to_string());
                post_schema(settings, subject.to_string(), supplied).await.map(|r| r.id).map_err(|e| {
                    let message = format!("{} {}", e.error, e.cause.unwrap_or_default());
                    if e.retriable {
                        RegistryError::Unavailable(message)
                    } else {
                        RegistryError::Rejected { subject: subject.into(), message }
                    }
                })
            }
            Registry::Memory(inner) => {
                let mut inner = inner.lock().map_err(|_| RegistryError::Unavailable("registry lock poisoned".into()))?;
                let existing = inner
                    .by_subject
                    .get(subject)
                    .and_then(|versions| versions.iter().find(|(s, _)| s == schema).map(|(_, id)| *id));
                if let Some(id) = existing {
                    return Ok(id);
                }
                let id = inner.next_id;
                inner.next_id += 1;
                inner.by_id.insert(id, schema.to_string());
                inner.by_subject.entry(subject.to_string()).or_default().push((schema.to_string(), id));
                Ok(id)
            }
        }
    }
}
