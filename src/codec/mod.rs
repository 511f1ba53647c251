//! Avro order events in the Confluent wire format: magic byte 0, a 4-byte
//! big-endian schema id, then the Avro binary body. The writer schema is
//! fetched from the registry by id (cached) and resolved against the v2
//! reader schema, so v1 and v2 records both decode.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::Schema;

use crate::entity::{Entity, Event};
use crate::event::{EventType, OrderEvent, DEFAULT_CURRENCY};
use crate::registry::{Registry, RegistryError};

pub mod error;
pub mod guard;
pub use error::{DecodeError, PoisonKind};
/// Public so the differential fuzz test (`tests/fuzz_read_plan.rs`) can
/// drive it directly; the decoder is the API.
pub mod plan;
use plan::Plan;

pub const SCHEMA_V1: &str = include_str!("../../schemas/order_event_v1.avsc");
pub const SCHEMA_V2: &str = include_str!("../../schemas/order_event_v2.avsc");

#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("avro encoding failed: {0}")]
    Avro(String),
}

/// The processor's reader schema (v2), parsed once per process.
pub fn reader_schema() -> &'static Schema {
    static READER: OnceLock<Schema> = OnceLock::new();
    // The schema is compiled in and covered by tests; failing to parse it is a
    // build defect, not an input error.
    #[allow(clippy::expect_used)]
    READER.get_or_init(|| Schema::parse_str(SCHEMA_V2).expect("schemas/order_event_v2.avsc parses"))
}

/// An order writer schema resolved against the reader schema, ready to
/// decode: a compiled plan when the writer is one it covers (every
/// OrderEvent version so far), apache-avro's generic resolution otherwise.
pub struct OrderReader(Reader);

enum Reader {
    Plan(Plan),
    Generic(GenericDatumReader<'static>),
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

impl OrderReader {
    /// Resolves `writer` against the reader schema.
    pub(crate) fn resolve(id: u32, writer: Schema) -> Result<OrderReader, DecodeError> {
        if let Some(plan) = Plan::compile(&writer) {
            return Ok(OrderReader(Reader::Plan(plan)));
        }
        resolving_reader(id, writer, reader_schema()).map(|r| OrderReader(Reader::Generic(r)))
    }

    /// Decodes one body.
    pub(crate) fn read(&self, body: &[u8]) -> Result<OrderEvent, DecodeError> {
        match &self.0 {
            Reader::Plan(plan) => plan
                .read(body)
                .map_err(|message| DecodeError::poison(PoisonKind::Undecodable, message)),
            Reader::Generic(generic) => decode_generic(generic, body),
        }
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

/// Decodes a body with apache-avro's generic resolution (the path for
/// writer schemas the plan does not cover, and the fuzz test's reference).
pub fn decode_generic(
    reader: &GenericDatumReader<'_>,
    body: &[u8],
) -> Result<OrderEvent, DecodeError> {
    event_from_value(read_value(reader, body)?)
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

fn event_from_value(value: Value) -> Result<OrderEvent, DecodeError> {
    let Value::Record(fields) = value else {
        return Err(DecodeError::poison(
            PoisonKind::Undecodable,
            "top-level value is not a record",
        ));
    };
    let mut event_id = None;
    let mut order_id = None;
    let mut version = None;
    let mut event_type = None;
    let mut amount = None;
    let mut occurred_at = None;
    let mut currency = None;
    for (name, field) in fields {
        match (name.as_str(), field) {
            ("event_id", Value::String(s)) => event_id = Some(s),
            ("order_id", Value::String(s)) => order_id = Some(s),
            ("version", Value::Long(v)) => version = Some(v),
            ("event_type", Value::Enum(_, symbol)) => event_type = EventType::from_symbol(&symbol),
            ("amount", Value::Long(v)) => amount = Some(v),
            ("occurred_at", Value::TimestampMillis(v) | Value::Long(v)) => occurred_at = Some(v),
            ("currency", Value::String(s)) => currency = Some(s),
            _ => {}
        }
    }
    let missing = |field: &str| {
        DecodeError::poison(PoisonKind::Invalid, format!("field `{field}` is missing"))
    };
    Ok(OrderEvent {
        event_id: event_id.ok_or_else(|| missing("event_id"))?,
        order_id: order_id.ok_or_else(|| missing("order_id"))?,
        version: version.ok_or_else(|| missing("version"))?,
        event_type: event_type.ok_or_else(|| missing("event_type"))?,
        amount: amount.ok_or_else(|| missing("amount"))?,
        occurred_at: occurred_at.ok_or_else(|| missing("occurred_at"))?,
        currency: currency.unwrap_or_else(|| DEFAULT_CURRENCY.to_string()),
    })
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

/// Which schema a record is written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriterVersion {
    V1,
    V2,
}

/// Encodes events in the wire format with registered schema ids.
pub struct Encoder {
    v1: Schema,
    v2: Schema,
    pub v1_id: u32,
    pub v2_id: u32,
}

impl Encoder {
    /// Registers both schema versions under `<topic>-value` and returns an encoder.
    pub async fn register(registry: &Registry, topic: &str) -> Result<Self, RegistryError> {
        let subject = format!("{topic}-value");
        let v1_id = registry.register(&subject, SCHEMA_V1).await?;
        let v2_id = registry.register(&subject, SCHEMA_V2).await?;
        Ok(Self::with_ids(v1_id, v2_id))
    }

    pub(crate) fn with_ids(v1_id: u32, v2_id: u32) -> Self {
        #[allow(clippy::expect_used)]
        let parse = |s: &str| Schema::parse_str(s).expect("compiled-in schema parses");
        Encoder {
            v1: parse(SCHEMA_V1),
            v2: parse(SCHEMA_V2),
            v1_id,
            v2_id,
        }
    }

    /// The wire-format bytes of `event` written with `version`'s schema (v1
    /// drops `currency`).
    pub fn encode(
        &self,
        event: &OrderEvent,
        version: WriterVersion,
    ) -> Result<Vec<u8>, EncodeError> {
        let mut fields = vec![
            (
                "event_id".to_string(),
                Value::String(event.event_id.clone()),
            ),
            (
                "order_id".to_string(),
                Value::String(event.order_id.clone()),
            ),
            ("version".to_string(), Value::Long(event.version)),
            (
                "event_type".to_string(),
                Value::Enum(
                    event.event_type.index() as u32,
                    event.event_type.as_str().to_string(),
                ),
            ),
            ("amount".to_string(), Value::Long(event.amount)),
            (
                "occurred_at".to_string(),
                Value::TimestampMillis(event.occurred_at),
            ),
        ];
        let (schema, id) = match version {
            WriterVersion::V1 => (&self.v1, self.v1_id),
            WriterVersion::V2 => {
                fields.push((
                    "currency".to_string(),
                    Value::String(event.currency.clone()),
                ));
                (&self.v2, self.v2_id)
            }
        };
        #[allow(deprecated)] // the datum writer's replacement needs a builder per call
        let body = apache_avro::to_avro_datum(schema, Value::Record(fields))
            .map_err(|e| EncodeError::Avro(e.to_string()))?;
        Ok(wire(id, &body))
    }
}

/// Prefixes an Avro body with the Confluent header.
pub fn wire(schema_id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(0);
    out.extend_from_slice(&schema_id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domains::orders::Orders;

    fn sample(currency: &str) -> OrderEvent {
        OrderEvent {
            event_id: "5f0c6f2e-0000-4000-8000-000000000001".into(),
            order_id: "order-42".into(),
            version: 3,
            event_type: EventType::Shipped,
            amount: 12_345,
            currency: currency.into(),
            occurred_at: 1_764_547_200_000,
        }
    }

    async fn setup() -> (Decoder<Orders>, Encoder) {
        let registry = Registry::memory();
        let encoder = Encoder::register(&registry, "orders").await.unwrap();
        (Decoder::new(registry), encoder)
    }

    /// Captures the log lines of `f`, run on this thread.
    fn logs_of(f: impl FnOnce()) -> String {
        use std::io::Write;
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = buffer.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    /// Issue 32: a schema id the registry does not know is a clear warning,
    /// once per id, not only dead letters.
    #[test]
    fn an_unknown_schema_id_is_warned_about_once() {
        let logs = logs_of(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            runtime.block_on(async {
                let (decoder, _) = setup().await;
                let mut payload = vec![0u8];
                payload.extend_from_slice(&999u32.to_be_bytes());
                payload.push(0);
                for _ in 0..3 {
                    assert!(matches!(
                        decoder.decode(Some(&payload)).await,
                        Err(DecodeError::Poison {
                            kind: PoisonKind::UnknownSchema,
                            ..
                        })
                    ));
                }
            });
        });
        assert_eq!(
            logs.matches("WARN").count(),
            1,
            "one warning for three records: {logs}"
        );
        assert!(
            logs.contains("writer schema id 999 is not registered")
                && logs.contains("in-memory storage"),
            "{logs}"
        );
    }

    #[tokio::test]
    async fn v1_and_v2_records_both_decode() {
        let (decoder, encoder) = setup().await;
        let v2 = encoder.encode(&sample("USD"), WriterVersion::V2).unwrap();
        assert_eq!(
            OrderEvent::from(decoder.decode(Some(&v2)).await.unwrap()),
            sample("USD")
        );
        let v1 = encoder.encode(&sample("USD"), WriterVersion::V1).unwrap();
        assert_eq!(v1[0], 0);
        assert_ne!(v1[1..5], v2[1..5], "different schema ids");
        assert_eq!(
            OrderEvent::from(decoder.decode(Some(&v1)).await.unwrap()),
            sample(DEFAULT_CURRENCY),
            "v1 reads the default currency"
        );
        assert!(decoder.decode_cached(Some(&v1)).is_some(), "cache is warm");
    }

    async fn poison_kind(decoder: &Decoder<Orders>, bytes: &[u8]) -> PoisonKind {
        match decoder.decode(Some(bytes)).await {
            Err(DecodeError::Poison { kind, .. }) => kind,
            other => panic!("expected poison, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn poison_records_are_classified() {
        let (decoder, encoder) = setup().await;
        let good = encoder.encode(&sample("EUR"), WriterVersion::V2).unwrap();
        let mut bad_magic = good.clone();
        bad_magic[0] = 1;
        assert_eq!(
            poison_kind(&decoder, &bad_magic).await,
            PoisonKind::BadMagicByte
        );
        assert_eq!(
            poison_kind(&decoder, &wire(999, &good[5..])).await,
            PoisonKind::UnknownSchema
        );
        assert_eq!(
            poison_kind(&decoder, &good[..good.len() - 4]).await,
            PoisonKind::Undecodable
        );
        assert_eq!(
            poison_kind(&decoder, &good[..3]).await,
            PoisonKind::Undecodable
        );
        assert!(matches!(
            decoder.decode(None).await,
            Err(DecodeError::Poison {
                kind: PoisonKind::EmptyPayload,
                ..
            })
        ));
        let mut no_order = sample("EUR");
        no_order.order_id.clear();
        assert_eq!(
            poison_kind(
                &decoder,
                &encoder.encode(&no_order, WriterVersion::V2).unwrap()
            )
            .await,
            PoisonKind::Invalid
        );
        for version in [WriterVersion::V1, WriterVersion::V2] {
            let mut no_id = sample("EUR");
            no_id.event_id.clear();
            match decoder
                .decode(Some(&encoder.encode(&no_id, version).unwrap()))
                .await
            {
                Err(DecodeError::Poison {
                    kind: PoisonKind::Invalid,
                    message,
                }) => assert!(message.contains("event_id"), "{message}"),
                other => panic!("an empty event_id is poison ({version:?}), got {other:?}"),
            }
        }
        let mut zero = sample("EUR");
        zero.version = 0;
        assert_eq!(
            poison_kind(&decoder, &encoder.encode(&zero, WriterVersion::V1).unwrap()).await,
            PoisonKind::Invalid
        );
    }
}
