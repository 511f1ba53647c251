//! A compiled read plan: a writer schema resolved against the OrderEvent
//! reader schema once, then applied to each record's bytes directly, with
//! no intermediate `Value` tree. Covers writer schemas made of the
//! OrderEvent fields (any order, `int` promoted to `long`) plus extra
//! primitive or enum fields, which are skipped. Anything else (unions,
//! nested records, renamed fields) is left to apache-avro's generic
//! resolution, which `Plan::compile` signals by returning `None`.
//! `tests::plan_agrees_with_generic_resolution` checks the two agree on
//! valid records; `tests/fuzz_read_plan.rs` checks they agree on corrupted
//! ones (same accept/reject, same value, no panic, no allocation larger
//! than the input).
//!
//! The plan reads untrusted bytes: every length is checked against the
//! input left before anything is allocated, and every value is checked the
//! way apache-avro checks it (an `int` must fit 32 bits, a boolean is 0 or 1,
//! an enum index must name a symbol, a string must be UTF-8), including in
//! fields it skips.

use apache_avro::Schema;

use crate::domains::orders::event::{EventType, OrderEvent, DEFAULT_CURRENCY};

/// The reader's record name; a writer record of another name does not resolve.
const RECORD_NAME: &str = "io.orderly.OrderEvent";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    EventId,
    OrderId,
    Version,
    EventType,
    Amount,
    OccurredAt,
    Currency,
}

#[derive(Debug, Clone)]
enum Step {
    /// Read a string into a target field.
    Str(Target),
    /// Read a long (zigzag varint) into a target field.
    Long(Target),
    /// Read an int (zigzag varint that must fit 32 bits), promoted to long.
    Int(Target),
    /// Read an enum index and map it by symbol to an event type.
    EventType(Vec<Option<EventType>>),
    /// Skip a field the reader does not have.
    Skip(Skip),
}

#[derive(Debug, Clone, Copy)]
enum Skip {
    Nothing,
    /// One byte, 0 or 1.
    Boolean,
    /// A varint that must fit 32 bits (int, date, time-millis).
    Int,
    /// A varint (long and the 64-bit logical types).
    Long,
    /// An int naming one of this many symbols.
    Enum(usize),
    Four,
    Eight,
    /// A length, then that many bytes.
    Bytes,
    /// A length, then that many bytes of UTF-8.
    String,
    Fixed(usize),
}

/// The steps that read one record written with a given writer schema.
#[derive(Debug, Clone)]
pub struct Plan {
    steps: Vec<Step>,
}

/// Why the plan could not read a record (the record is poison).
pub(crate) type PlanError = String;

impl Plan {
    /// Compiles `writer` against the OrderEvent reader, or `None` when the
    /// writer uses anything the plan does not cover.
    pub fn compile(writer: &Schema) -> Option<Plan> {
        let Schema::Record(record) = writer else {
            return None;
        };
        if record.name.fullname(None) != RECORD_NAME {
            return None;
        }
        let mut steps = Vec::with_capacity(record.fields.len());
        let mut seen: Vec<Target> = Vec::new();
        for field in &record.fields {
            let target = match field.name.as_str() {
                "event_id" => Some(Target::EventId),
                "order_id" => Some(Target::OrderId),
                "version" => Some(Target::Version),
                "event_type" => Some(Target::EventType),
                "amount" => Some(Target::Amount),
                "occurred_at" => Some(Target::OccurredAt),
                "currency" => Some(Target::Currency),
                _ => None,
            };
            let step = match (target, &field.schema) {
                (
                    Some(t @ (Target::EventId | Target::OrderId | Target::Currency)),
                    Schema::String,
                ) => Step::Str(t),
                (Some(t @ (Target::Version | Target::Amount)), Schema::Long) => Step::Long(t),
                (Some(t @ (Target::Version | Target::Amount)), Schema::Int) => Step::Int(t),
                (Some(Target::OccurredAt), Schema::Long | Schema::TimestampMillis) => {
                    Step::Long(Target::OccurredAt)
                }
                (Some(Target::OccurredAt), Schema::Int) => Step::Int(Target::OccurredAt),
                (Some(Target::EventType), Schema::Enum(e)) => {
                    if e.name.fullname(None) != "io.orderly.EventType" {
                        return None;
                    }
                    Step::EventType(
                        e.symbols
                            .iter()
                            .map(|s| EventType::from_symbol(s))
                            .collect(),
                    )
                }
                (Some(_), _) => return None,
                (None, schema) => Step::Skip(skip_for(schema)?),
            };
            if let Some(t) = target {
                seen.push(t);
            }
            steps.push(step);
        }
        let required = [
            Target::EventId,
            Target::OrderId,
            Target::Version,
            Target::EventType,
            Target::Amount,
            Target::OccurredAt,
        ];
        if !required.iter().all(|t| seen.contains(t)) {
            return None;
        }
        Some(Plan { steps })
    }

    /// Reads one record body. Validation of the values (positive version,
    /// non-empty ids) is the caller's.
    pub fn read(&self, body: &[u8]) -> Result<OrderEvent, PlanError> {
        let mut input = Input { bytes: body, at: 0 };
        let mut event = OrderEvent {
            event_id: String::new(),
            order_id: String::new(),
            version: 0,
            event_type: EventType::Created,
            amount: 0,
            currency: String::new(),
            occurred_at: 0,
        };
        let mut has_currency = false;
        for step in &self.steps {
            match step {
                Step::Str(target) => {
                    let text = input.string()?;
                    match target {
                        Target::EventId => event.event_id = text,
                        Target::OrderId => event.order_id = text,
                        _ => {
                            event.currency = text;
                            has_currency = true;
                        }
                    }
                }
                Step::Long(target) => set_number(&mut event, *target, input.long()?),
                Step::Int(target) => set_number(&mut event, *target, i64::from(input.int()?)),
                Step::EventType(symbols) => {
                    let index = input.enum_index(symbols.len())?;
                    event.event_type = symbols.get(index).copied().flatten().ok_or_else(|| {
                        format!("enum index {index} has no EventType symbol in the reader schema")
                    })?;
                }
                Step::Skip(skip) => input.skip(*skip)?,
            }
        }
        if input.at != body.len() {
            return Err(format!(
                "{} trailing bytes after the record",
                body.len() - input.at
            ));
        }
        if !has_currency {
            event.currency = DEFAULT_CURRENCY.to_string();
        }
        Ok(event)
    }
}

/// Stores a number read by a `Long` or `Int` step.
fn set_number(event: &mut OrderEvent, target: Target, value: i64) {
    match target {
        Target::Version => event.version = value,
        Target::Amount => event.amount = value,
        _ => event.occurred_at = value,
    }
}

fn skip_for(schema: &Schema) -> Option<Skip> {
    Some(match schema {
        Schema::Null => Skip::Nothing,
        Schema::Boolean => Skip::Boolean,
        Schema::Int | Schema::Date | Schema::TimeMillis => Skip::Int,
        Schema::Enum(e) => Skip::Enum(e.symbols.len()),
        Schema::Long
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => Skip::Long,
        Schema::Float => Skip::Four,
        Schema::Double => Skip::Eight,
        Schema::Bytes => Skip::Bytes,
        Schema::String => Skip::String,
        Schema::Fixed(f) => Skip::Fixed(f.size),
        _ => return None,
    })
}

struct Input<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], PlanError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "record is truncated: needs {n} bytes at {}, has {}",
                    self.at,
                    self.bytes.len()
                )
            })?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    /// A zigzag-encoded variable-length long. At most ten bytes; as in
    /// apache-avro (and Avro's Java reader), bits of the tenth byte beyond
    /// the 64th are dropped rather than rejected, so both readers accept the
    /// same records.
    fn long(&mut self) -> Result<i64, PlanError> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.bytes.get(self.at) else {
                return Err(format!(
                    "record is truncated: varint needs a byte at {}",
                    self.at
                ));
            };
            self.at += 1;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(((value >> 1) as i64) ^ -((value & 1) as i64));
            }
        }
        Err("varint is longer than ten bytes".into())
    }

    /// A long that must fit 32 bits (Avro `int`).
    fn int(&mut self) -> Result<i32, PlanError> {
        let value = self.long()?;
        i32::try_from(value).map_err(|_| format!("int value {value} does not fit 32 bits"))
    }

    /// An enum index into `symbols` symbols.
    fn enum_index(&mut self, symbols: usize) -> Result<usize, PlanError> {
        let index = self.int()?;
        usize::try_from(index)
            .ok()
            .filter(|i| *i < symbols)
            .ok_or_else(|| format!("enum index {index} is out of range for {symbols} symbols"))
    }

    /// A length prefix. Not checked against the input here: `take` does
    /// that before anything is read or allocated.
    fn length(&mut self) -> Result<usize, PlanError> {
        let len = self.long()?;
        usize::try_from(len).map_err(|_| format!("negative length {len}"))
    }

    fn utf8(&mut self) -> Result<&str, PlanError> {
        let len = self.length()?;
        let raw = self.take(len)?;
        std::str::from_utf8(raw).map_err(|e| format!("string is not UTF-8: {e}"))
    }

    fn string(&mut self) -> Result<String, PlanError> {
        self.utf8().map(str::to_owned)
    }

    fn skip(&mut self, skip: Skip) -> Result<(), PlanError> {
        match skip {
            Skip::Nothing => {}
            Skip::Boolean => match self.take(1)? {
                [0 | 1] => {}
                other => return Err(format!("boolean byte is {other:?}, not 0 or 1")),
            },
            Skip::Int => {
                self.int()?;
            }
            Skip::Long => {
                self.long()?;
            }
            Skip::Enum(symbols) => {
                self.enum_index(symbols)?;
            }
            Skip::Four => {
                self.take(4)?;
            }
            Skip::Eight => {
                self.take(8)?;
            }
            Skip::Bytes => {
                let len = self.length()?;
                self.take(len)?;
            }
            Skip::String => {
                self.utf8()?;
            }
            Skip::Fixed(n) => {
                self.take(n)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::reader::datum::GenericDatumReader;
    use apache_avro::types::Value;
    use proptest::prelude::*;

    /// A writer with the OrderEvent fields reordered, `version` as an int, a
    /// reordered enum with a symbol the reader lacks, and extra fields of
    /// every skippable kind.
    const WIDE_WRITER: &str = r#"{"type":"record","name":"OrderEvent","namespace":"io.orderly","fields":[
        {"name":"note","type":"string"},
        {"name":"order_id","type":"string"},
        {"name":"flag","type":"boolean"},
        {"name":"event_id","type":"string"},
        {"name":"score","type":"double"},
        {"name":"version","type":"int"},
        {"name":"event_type","type":{"type":"enum","name":"EventType","symbols":["PAID","CREATED","SHIPPED","DELIVERED","CANCELLED","RETURNED"]}},
        {"name":"hash","type":{"type":"fixed","name":"H","size":4}},
        {"name":"amount","type":"long"},
        {"name":"blob","type":"bytes"},
        {"name":"occurred_at","type":{"type":"long","logicalType":"timestamp-millis"}},
        {"name":"currency","type":"string"},
        {"name":"ratio","type":"float"},
        {"name":"level","type":{"type":"enum","name":"Level","symbols":["LOW","HIGH"]}}
    ]}"#;

    #[derive(Debug, Clone)]
    struct Fields {
        event_id: String,
        order_id: String,
        version: i32,
        symbol: usize,
        amount: i64,
        occurred_at: i64,
        currency: String,
        note: String,
        blob: Vec<u8>,
        score: f64,
    }

    prop_compose! {
        fn fields()(
            event_id in ".{0,40}",
            order_id in ".{0,20}",
            version in any::<i32>(),
            symbol in 0usize..6,
            amount in any::<i64>(),
            occurred_at in any::<i64>(),
            currency in "[A-Z]{0,4}",
            note in ".{0,10}",
            blob in proptest::collection::vec(any::<u8>(), 0..20),
            score in any::<f64>(),
        ) -> Fields {
            Fields {
                event_id, order_id, version, symbol, amount,
                occurred_at, currency, note, blob, score,
            }
        }
    }

    fn wide_value(f: &Fields) -> Value {
        let symbols = [
            "PAID",
            "CREATED",
            "SHIPPED",
            "DELIVERED",
            "CANCELLED",
            "RETURNED",
        ];
        Value::Record(vec![
            ("note".into(), Value::String(f.note.clone())),
            ("order_id".into(), Value::String(f.order_id.clone())),
            ("flag".into(), Value::Boolean(f.version % 2 == 0)),
            ("event_id".into(), Value::String(f.event_id.clone())),
            ("score".into(), Value::Double(f.score)),
            ("version".into(), Value::Int(f.version)),
            (
                "event_type".into(),
                Value::Enum(f.symbol as u32, symbols[f.symbol].into()),
            ),
            ("hash".into(), Value::Fixed(4, vec![1, 2, 3, 4])),
            ("amount".into(), Value::Long(f.amount)),
            ("blob".into(), Value::Bytes(f.blob.clone())),
            ("occurred_at".into(), Value::TimestampMillis(f.occurred_at)),
            ("currency".into(), Value::String(f.currency.clone())),
            ("ratio".into(), Value::Float(0.5)),
            ("level".into(), Value::Enum(1, "HIGH".into())),
        ])
    }

    fn v1_value(f: &Fields) -> Value {
        let symbol = f.symbol % 5;
        Value::Record(vec![
            ("event_id".into(), Value::String(f.event_id.clone())),
            ("order_id".into(), Value::String(f.order_id.clone())),
            ("version".into(), Value::Long(f.version as i64)),
            (
                "event_type".into(),
                Value::Enum(symbol as u32, EventType::SYMBOLS[symbol].into()),
            ),
            ("amount".into(), Value::Long(f.amount)),
            ("occurred_at".into(), Value::TimestampMillis(f.occurred_at)),
        ])
    }

    /// Both readers on the same bytes: equal events, or both errors.
    fn agree(writer: &Schema, body: &[u8]) -> Result<(), TestCaseError> {
        let plan = Plan::compile(writer).expect("the plan covers this writer");
        let generic = GenericDatumReader::builder(writer)
            .reader_schema(crate::domains::orders::codec::reader_schema())
            .build()
            .unwrap();
        let fast = plan.read(body);
        let slow = crate::domains::orders::codec::decode_generic(&generic, body);
        match (&fast, &slow) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(_), Err(_)) => {}
            _ => prop_assert!(false, "plan {:?} vs generic {:?}", fast, slow),
        }
        Ok(())
    }

    #[allow(deprecated)]
    fn encode(writer: &Schema, value: Value) -> Vec<u8> {
        apache_avro::to_avro_datum(writer, value).unwrap()
    }

    proptest! {
        #[test]
        fn plan_agrees_with_generic_resolution(f in fields(), cut in any::<prop::sample::Index>()) {
            for (text, value) in [
                (crate::domains::orders::codec::SCHEMA_V1, v1_value(&f)),
                (WIDE_WRITER, wide_value(&f)),
            ] {
                let writer = Schema::parse_str(text).unwrap();
                let body = encode(&writer, value);
                agree(&writer, &body)?;
                // Any truncation fails in both.
                let short = &body[..cut.index(body.len().max(1)).min(body.len().saturating_sub(1))];
                agree(&writer, short)?;
            }
        }
    }

    #[test]
    fn v2_writer_is_planned_and_other_shapes_fall_back() {
        assert!(Plan::compile(
            &Schema::parse_str(crate::domains::orders::codec::SCHEMA_V2).unwrap()
        )
        .is_some());
        let renamed = WIDE_WRITER.replace("\"name\":\"OrderEvent\"", "\"name\":\"Other\"");
        assert!(Plan::compile(&Schema::parse_str(&renamed).unwrap()).is_none());
        let with_union = crate::domains::orders::codec::SCHEMA_V2.replace(
            r#""type": "string", "default": "EUR""#,
            r#""type": ["null", "string"], "default": null"#,
        );
        assert!(
            Plan::compile(&Schema::parse_str(&with_union).unwrap()).is_none(),
            "unions go to the generic reader"
        );
    }
}
