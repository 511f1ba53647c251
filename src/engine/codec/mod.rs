//! Avro events in the Confluent wire format: magic byte 0, a 4-byte
//! big-endian schema id, then the Avro binary body. The writer schema is
//! fetched from the registry by id (cached) and resolved against the
//! entity's reader schema (an order's v2, say, so v1 and v2 records both
//! decode); what a resolved record becomes is the entity's
//! [`crate::Entity::read`].

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::Schema;

use crate::engine::entity::{Entity, Event};
use crate::registry::{Registry, RegistryError};

mod datum;
pub(crate) mod error;
pub(crate) mod guard;
pub(crate) use datum::DatumWriter;
pub use error::{DecodeError, PoisonKind};

#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("avro encoding failed: {0}")]
    Avro(String),
}

/// A resolved writer and the count of records read with it.
struct Writer<R> {
    reader: R,
    records: Arc<AtomicU64>,
}

type Resolved<R> = Arc<Writer<R>>;

/// Records per writer schema id (every record whose schema id resolved,
/// decodable or not), for `orderly_records_by_schema_total`. Bounded by the
/// schemas the registry holds: unknown ids are not counted.
#[derive(Debug, Default)]
pub(crate) struct SchemaCounts(RwLock<BTreeMap<u32, Arc<AtomicU64>>>);

impl SchemaCounts {
    fn counter(&self, id: u32) -> Arc<AtomicU64> {
        if let Some(counter) = self.0.read().ok().and_then(|m| m.get(&id).cloned()) {
            return counter;
        }
        match self.0.write() {
            Ok(mut map) => map.entry(id).or_default().clone(),
            Err(_) => Arc::default(),
        }
    }

    /// `(schema id, records)`, by id.
    pub(crate) fn snapshot(&self) -> Vec<(u32, u64)> {
        self.0
            .read()
            .map(|m| {
                m.iter()
                    .map(|(id, n)| (*id, n.load(Ordering::Relaxed)))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// apache-avro's generic resolution of `writer` against `reader`. The
/// writer lives for the rest of the process (leaked to get a `'static`
/// reader): one per schema id, a few KiB each.
pub fn resolving_reader(
    id: u32,
    writer: Schema,
    reader: &'static Schema,
) -> Result<GenericDatumReader<'static>, DecodeError> {
    let writer: &'static Schema = Box::leak(Box::new(writer));
    GenericDatumReader::builder(writer)
        .reader_schema(reader)
        .build()
        .map_err(|e| {
            DecodeError::poison(
                PoisonKind::BadSchema,
                format!("schema id {id} cannot be resolved: {e}"),
            )
        })
}

/// Writer schemas by registry id, resolved against the reader schema once and
/// shared by all partition tasks. Warm after the first record of each id.
///
/// Writers the plan does not cover live for the rest of the process (they
/// are leaked to get a `'static` generic reader): one per such schema id, a
/// few KiB each. Unknown ids are not cached.
pub struct Decoder<E: Entity> {
    entity: E,
    registry: Registry,
    writers: RwLock<HashMap<u32, Resolved<E::Reader>>>,
    counts: Arc<SchemaCounts>,
    /// Schema ids the registry said it does not know, each warned about
    /// once (at most [`MAX_UNKNOWN_WARNED`] of them).
    unknown: std::sync::Mutex<std::collections::HashSet<u32>>,
    /// Since when the registry has not answered, and when that was last
    /// said (`None`: it answers): one line when it stops answering, a
    /// reminder every [`REGISTRY_REMINDER`], one line when it is back,
    /// however many partitions wait on it.
    outage: std::sync::Mutex<Option<(std::time::Instant, std::time::Instant)>>,
}

/// How often a registry that stays unavailable is logged again.
const REGISTRY_REMINDER: std::time::Duration = std::time::Duration::from_secs(30);

/// Unknown schema ids warned about, at most (garbage records can carry any).
const MAX_UNKNOWN_WARNED: usize = 100;

impl<E: Entity> Decoder<E> {
    /// A decoder of `entity`'s events.
    pub fn for_entity(entity: E, registry: Registry) -> Self {
        Self::with_counts(entity, registry, Arc::default())
    }

    /// A decoder that counts records per schema id into `counts`.
    pub(crate) fn with_counts(entity: E, registry: Registry, counts: Arc<SchemaCounts>) -> Self {
        Decoder {
            entity,
            registry,
            writers: RwLock::new(HashMap::new()),
            counts,
            unknown: Default::default(),
            outage: Default::default(),
        }
    }

    /// Decodes one record payload into an event, or says why it cannot.
    pub async fn decode(&self, payload: Option<&[u8]>) -> Result<Event<E::Body>, DecodeError> {
        let (id, body) = split_wire(payload)?;
        let writer = self.writer_schema(id).await?;
        self.decode_body(&writer, body)
    }

    /// Decodes with an already-cached writer schema, without awaiting; `None`
    /// when the schema id is not cached yet (the caller then awaits `decode`).
    pub fn decode_cached(
        &self,
        payload: Option<&[u8]>,
    ) -> Option<Result<Event<E::Body>, DecodeError>> {
        let (id, body) = match split_wire(payload) {
            Ok(parts) => parts,
            Err(e) => return Some(Err(e)),
        };
        let writer = self.writers.read().ok()?.get(&id).cloned()?;
        Some(self.decode_body(&writer, body))
    }

    fn decode_body(
        &self,
        writer: &Writer<E::Reader>,
        body: &[u8],
    ) -> Result<Event<E::Body>, DecodeError> {
        writer.records.fetch_add(1, Ordering::Relaxed);
        validate::<E>(self.entity.read(&writer.reader, body)?)
    }

    async fn writer_schema(&self, id: u32) -> Result<Resolved<E::Reader>, DecodeError> {
        if let Some(schema) = self.writers.read().ok().and_then(|m| m.get(&id).cloned()) {
            return Ok(schema);
        }
        let answer = self.registry.schema_by_id(id).await;
        self.note_answer(id, &answer);
        let text = answer.map_err(|e| match e {
            RegistryError::UnknownId { .. } => {
                DecodeError::poison(PoisonKind::UnknownSchema, e.to_string())
            }
            other => DecodeError::Transient(other.to_string()),
        })?;
        let schema = Schema::parse_str(&text).map_err(|e| {
            DecodeError::poison(
                PoisonKind::BadSchema,
                format!("schema id {id} does not parse: {e}"),
            )
        })?;
        let resolved = Arc::new(Writer {
            reader: self.entity.reader(id, schema)?,
            records: self.counts.counter(id),
        });
        if let Ok(mut map) = self.writers.write() {
            map.entry(id).or_insert_with(|| resolved.clone());
        }
        Ok(resolved)
    }
}

impl<E: Entity> Decoder<E> {
    /// Logs what a registry answer changes: its return after an outage
    /// (once), a schema id it does not know (once per id).
    fn note_answer(&self, id: u32, answer: &Result<String, RegistryError>) {
        let mut outage = self.outage.lock().unwrap_or_else(|p| p.into_inner());
        match answer {
            Ok(_) | Err(RegistryError::UnknownId { .. }) => {
                if let Some((since, _)) = outage.take() {
                    tracing::info!(
                        down_s = format!("{:.1}", since.elapsed().as_secs_f64()),
                        "schema registry reachable again; the records that waited on it go on"
                    );
                }
            }
            Err(error) => {
                let now = std::time::Instant::now();
                match outage.as_mut() {
                    None => {
                        *outage = Some((now, now));
                        tracing::warn!(
                            %error,
                            "schema registry unavailable; retrying (the records wait for it, none is skipped; a \
                             reminder every {}s)",
                            REGISTRY_REMINDER.as_secs()
                        );
                    }
                    Some((since, said))
                        if now.saturating_duration_since(*said) >= REGISTRY_REMINDER =>
                    {
                        *said = now;
                        tracing::warn!(
                            %error,
                            down_s = now.saturating_duration_since(*since).as_secs(),
                            "schema registry still unavailable; retrying"
                        );
                    }
                    Some(_) => {}
                }
            }
        }
        drop(outage);
        if let Err(RegistryError::UnknownId { .. }) = answer {
            let mut unknown = self.unknown.lock().unwrap_or_else(|p| p.into_inner());
            if unknown.len() < MAX_UNKNOWN_WARNED && unknown.insert(id) {
                tracing::warn!(
                    schema_id = id,
                    "writer schema id {id} is not registered in the schema registry: records written with it are \
                     dead-lettered (unknown_schema). A registry restarted with in-memory storage gives the schemas \
                     new ids; check that registry.url is the producers' registry"
                );
            }
        }
    }
}

/// Splits the Confluent header from the Avro body.
pub(crate) fn split_wire(payload: Option<&[u8]>) -> Result<(u32, &[u8]), DecodeError> {
    let bytes = match payload {
        None | Some([]) => {
            return Err(DecodeError::poison(
                PoisonKind::EmptyPayload,
                "record has no value",
            ))
        }
        Some(b) => b,
    };
    if bytes[0] != 0 {
        return Err(DecodeError::poison(
            PoisonKind::BadMagicByte,
            format!(
                "magic byte is {} (expected 0, the Confluent wire format)",
                bytes[0]
            ),
        ));
    }
    if bytes.len() < 5 {
        return Err(DecodeError::poison(
            PoisonKind::Undecodable,
            format!("{} bytes is shorter than the 5-byte header", bytes.len()),
        ));
    }
    let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
    Ok((id, &bytes[5..]))
}

/// Reads a whole body as one Avro value with apache-avro's resolution
/// (for entities without a compiled plan); trailing bytes are poison.
pub fn read_value(reader: &GenericDatumReader<'_>, body: &[u8]) -> Result<Value, DecodeError> {
    let mut cursor = body;
    let value = reader
        .read_value(&mut cursor)
        .map_err(|e| DecodeError::poison(PoisonKind::Undecodable, e.to_string()))?;
    if !cursor.is_empty() {
        return Err(DecodeError::poison(
            PoisonKind::Undecodable,
            format!("{} trailing bytes after the record", cursor.len()),
        ));
    }
    Ok(value)
}

/// What every decoded event must satisfy, whichever entity and reader
/// decoded it.
fn validate<E: Entity>(event: Event<E::Body>) -> Result<Event<E::Body>, DecodeError> {
    if event.key.is_empty() {
        return Err(DecodeError::poison(
            PoisonKind::Invalid,
            format!("{} is empty", E::KEY_FIELD),
        ));
    }
    if event.event_id.is_empty() {
        return Err(DecodeError::poison(
            PoisonKind::Invalid,
            "event_id is empty",
        ));
    }
    if event.version <= 0 {
        return Err(DecodeError::poison(
            PoisonKind::Invalid,
            format!("version {} is not positive", event.version),
        ));
    }
    Ok(event)
}

/// A decoded Avro record's fields by name: what an entity's
/// [`crate::Entity::read`] takes its event from. A missing or mistyped
/// field is a poison record naming the field.
#[derive(Debug, Clone)]
pub struct Fields(Vec<(String, Value)>);

impl Fields {
    /// The fields of `value`, which must be a record.
    pub fn of(value: Value) -> Result<Fields, DecodeError> {
        match value {
            Value::Record(fields) => Ok(Fields(fields)),
            _ => Err(DecodeError::poison(
                PoisonKind::Undecodable,
                "top-level value is not a record",
            )),
        }
    }

    /// A field's value (a union's branch unwrapped), if the record has it.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| match v {
                Value::Union(_, inner) => inner.as_ref(),
                other => other,
            })
    }

    /// A `string` field (or an enum's symbol).
    pub fn string(&self, name: &str) -> Result<String, DecodeError> {
        match self.get(name) {
            Some(Value::String(s)) | Some(Value::Enum(_, s)) => Ok(s.clone()),
            other => Err(Self::wrong(name, "a string", other)),
        }
    }

    /// A `long` field (an `int` or a timestamp too).
    pub fn long(&self, name: &str) -> Result<i64, DecodeError> {
        match self.get(name) {
            Some(Value::Long(v))
            | Some(Value::TimestampMillis(v))
            | Some(Value::TimestampMicros(v)) => Ok(*v),
            Some(Value::Int(v)) => Ok(i64::from(*v)),
            other => Err(Self::wrong(name, "a long", other)),
        }
    }

    fn wrong(name: &str, want: &str, got: Option<&Value>) -> DecodeError {
        let message = match got {
            None => format!("field `{name}` is missing"),
            Some(Value::Null) => format!("field `{name}` is null"),
            Some(other) => format!("field `{name}` is not {want}: {other:?}"),
        };
        DecodeError::poison(PoisonKind::Invalid, message)
    }
}

/// Prefixes an Avro body with the Confluent header.
pub fn wire(schema_id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = wire_header(schema_id, body.len());
    out.extend_from_slice(body);
    out
}

/// The Confluent header naming `schema_id`, with room for a body of
/// `body_len` bytes after it.
pub(crate) fn wire_header(schema_id: u32, body_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + body_len);
    out.push(0);
    out.extend_from_slice(&schema_id.to_be_bytes());
    out
}
