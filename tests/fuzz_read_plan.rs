//! Differential fuzzing of the hand-written Avro read plan
//! (`src/domains/orders/plan.rs`) against apache-avro's generic decoder, resolved
//! against the same reader schema.
//!
//! Each case takes a valid record of one of several writer schemas (the two
//! OrderEvent versions and two wider writers with reordered, promoted and
//! skipped fields of every kind the plan covers), applies up to three
//! mutations (bit flips, byte changes, truncation, removed, inserted or
//! appended bytes, a field's varint replaced by a corrupt, huge or negative
//! value or by an over-long encoding, or a random body) and requires:
//!
//! * no panic in the plan;
//! * no allocation larger than the input (a corrupted length must be
//!   checked against the bytes left before anything is allocated);
//! * the same accept/reject as apache-avro, and the same event when both
//!   accept.
//!
//! One class is excluded, where apache-avro is wrong: it decodes a boolean
//! or a string that the end of input cuts off as `null` (an end-of-file
//! convention of its container reader), so a record truncated inside a
//! trailing writer-only boolean or string field is accepted by it. The plan
//! rejects such a record; the test detects the case exactly (apache-avro's
//! unresolved value holds a `null` in a field whose writer type is not
//! null) and counts it.
//!
//! `cargo test` runs a few thousand cases. The long run (at least a million
//! cases, release build):
//!
//! ```text
//! PROPTEST_CASES=1000000 cargo test --release --test fuzz_read_plan -- --nocapture
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Instant;

use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::Schema;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use orderly::testkit::orders::{decode_generic, reader_schema, Plan, SCHEMA_V1, SCHEMA_V2};

/// Cases run by `cargo test` unless `PROPTEST_CASES` says otherwise.
const DEFAULT_CASES: u32 = 3_000;

// ---------------------------------------------------------------------------
// Allocation tracking: the plan runs with a per-thread switch on, and every
// allocation made meanwhile is measured.

struct Tracking;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = TRACKING.try_with(|on| {
        if on.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
            let _ = TOTAL.try_with(|t| t.set(t.get().saturating_add(size)));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// bookkeeping touches only const-initialised thread-locals (no allocation).
unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// Runs `f` and returns its result with the largest single allocation and
/// the total bytes allocated meanwhile on this thread.
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize, usize) {
    LARGEST.with(|l| l.set(0));
    TOTAL.with(|t| t.set(0));
    TRACKING.with(|on| on.set(true));
    let out = f();
    TRACKING.with(|on| on.set(false));
    (out, LARGEST.with(Cell::get), TOTAL.with(Cell::get))
}

// ---------------------------------------------------------------------------
// Writer schemas, each covered by the plan.

/// OrderEvent fields reordered, `version` as an int, an enum with a symbol
/// the reader lacks, and skipped fields of most kinds in between.
const WIDE: &str = r#"{"type":"record","name":"OrderEvent","namespace":"io.orderly","fields":[
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

/// Int-typed OrderEvent fields (promoted to long), 32-bit logical types, a
/// null field, and a string and a boolean last (the end-of-input class).
const TRAILING: &str = r#"{"type":"record","name":"OrderEvent","namespace":"io.orderly","fields":[
    {"name":"marker","type":"null"},
    {"name":"event_id","type":"string"},
    {"name":"order_id","type":"string"},
    {"name":"version","type":"int"},
    {"name":"amount","type":"int"},
    {"name":"event_type","type":{"type":"enum","name":"EventType","symbols":["CREATED","PAID","SHIPPED","DELIVERED","CANCELLED"]}},
    {"name":"occurred_at","type":"int"},
    {"name":"day","type":{"type":"int","logicalType":"date"}},
    {"name":"at","type":{"type":"int","logicalType":"time-millis"}},
    {"name":"micros","type":{"type":"long","logicalType":"timestamp-micros"}},
    {"name":"currency","type":"string"},
    {"name":"comment","type":"string"},
    {"name":"done","type":"boolean"}
]}"#;

struct Writer {
    name: &'static str,
    schema: &'static Schema,
    plan: Plan,
    /// Resolves against the reader schema: the production generic path.
    resolving: GenericDatumReader<'static>,
    /// The writer's own view, to spot apache-avro's end-of-input nulls.
    unresolved: GenericDatumReader<'static>,
}

fn writers() -> Vec<Writer> {
    [
        ("v1", SCHEMA_V1),
        ("v2", SCHEMA_V2),
        ("wide", WIDE),
        ("trailing", TRAILING),
    ]
    .into_iter()
    .map(|(name, text)| {
        let schema: &'static Schema =
            Box::leak(Box::new(Schema::parse_str(text).expect("writer parses")));
        Writer {
            name,
            schema,
            plan: Plan::compile(schema).unwrap_or_else(|| panic!("the plan covers writer {name}")),
            resolving: GenericDatumReader::builder(schema)
                .reader_schema(reader_schema())
                .build()
                .expect("resolving reader"),
            unresolved: GenericDatumReader::builder(schema)
                .build()
                .expect("writer reader"),
        }
    })
    .collect()
}

fn fields(schema: &Schema) -> &[apache_avro::schema::RecordField] {
    match schema {
        Schema::Record(record) => &record.fields,
        _ => &[],
    }
}

// ---------------------------------------------------------------------------
// Valid records.

fn small_or_any_i64() -> BoxedStrategy<i64> {
    prop_oneof![3 => -1_000i64..1_000, 1 => any::<i64>()].boxed()
}

fn small_or_any_i32() -> BoxedStrategy<i32> {
    prop_oneof![3 => -1_000i32..1_000, 1 => any::<i32>()].boxed()
}

fn text() -> BoxedStrategy<String> {
    prop_oneof![4 => "[a-z0-9-]{0,16}", 1 => ".{0,8}"].boxed()
}

/// A valid value of a field schema the writers above use.
fn value_of(schema: &Schema) -> BoxedStrategy<Value> {
    match schema {
        Schema::Null => Just(Value::Null).boxed(),
        Schema::Boolean => any::<bool>().prop_map(Value::Boolean).boxed(),
        Schema::Int => small_or_any_i32().prop_map(Value::Int).boxed(),
        Schema::Date => small_or_any_i32().prop_map(Value::Date).boxed(),
        Schema::TimeMillis => (0i32..86_400_000).prop_map(Value::TimeMillis).boxed(),
        Schema::Long => small_or_any_i64().prop_map(Value::Long).boxed(),
        Schema::TimestampMillis => small_or_any_i64().prop_map(Value::TimestampMillis).boxed(),
        Schema::TimestampMicros => small_or_any_i64().prop_map(Value::TimestampMicros).boxed(),
        Schema::Float => any::<f32>().prop_map(Value::Float).boxed(),
        Schema::Double => any::<f64>().prop_map(Value::Double).boxed(),
        Schema::String => text().prop_map(Value::String).boxed(),
        Schema::Bytes => proptest::collection::vec(any::<u8>(), 0..16)
            .prop_map(Value::Bytes)
            .boxed(),
        Schema::Fixed(fixed) => {
            let size = fixed.size;
            proptest::collection::vec(any::<u8>(), size)
                .prop_map(move |b| Value::Fixed(size, b))
                .boxed()
        }
        Schema::Enum(e) => {
            let symbols = e.symbols.clone();
            (0..symbols.len())
                .prop_map(move |i| Value::Enum(i as u32, symbols[i].clone()))
                .boxed()
        }
        other => panic!("no value strategy for {other:?}"),
    }
}

/// Encodes one field's value on its own: a record's encoding is its fields'
/// encodings one after the other, so this gives each field's bytes.
#[allow(deprecated)] // the datum writer's replacement needs a builder per call
fn encode_field(schema: &Schema, value: Value) -> Vec<u8> {
    apache_avro::to_avro_datum(schema, value).expect("a generated value encodes")
}

/// Whether a field's encoding starts with a varint (length, int, long, enum).
fn starts_with_varint(schema: &Schema) -> bool {
    !matches!(
        schema,
        Schema::Null | Schema::Boolean | Schema::Float | Schema::Double | Schema::Fixed(_)
    )
}

// ---------------------------------------------------------------------------
// Mutations.

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit {
        at: Index,
        bit: u8,
    },
    SetByte {
        at: Index,
        byte: u8,
    },
    Truncate {
        at: Index,
    },
    Remove {
        at: Index,
        len: usize,
    },
    Insert {
        at: Index,
        bytes: Vec<u8>,
    },
    Append {
        bytes: Vec<u8>,
    },
    /// A field's leading varint (length, int, long, enum index) replaced by
    /// the encoding of `value`.
    Varint {
        field: Index,
        value: i64,
    },
    /// A field's leading varint replaced by a ten-byte (or, with a
    /// continuation bit in `last`, longer) encoding.
    Overlong {
        field: Index,
        value: u64,
        last: u8,
    },
    /// The whole body replaced.
    Random {
        bytes: Vec<u8>,
    },
}

fn corrupt_value() -> BoxedStrategy<i64> {
    prop_oneof![
        Just(i64::MAX),
        Just(i64::MIN),
        Just(-1i64),
        Just(i64::from(i32::MAX) + 1),
        Just(i64::from(i32::MIN) - 1),
        Just(1i64 << 40),
        0i64..64,
        (1i64 << 20)..(1i64 << 40),
        any::<i64>(),
    ]
    .boxed()
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let bytes = |max| proptest::collection::vec(any::<u8>(), 1..max);
    prop_oneof![
        3 => (any::<Index>(), 0u8..8).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Mutation::SetByte { at, byte }),
        2 => any::<Index>().prop_map(|at| Mutation::Truncate { at }),
        1 => (any::<Index>(), 1usize..8).prop_map(|(at, len)| Mutation::Remove { at, len }),
        1 => (any::<Index>(), bytes(8)).prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => bytes(16).prop_map(|bytes| Mutation::Append { bytes }),
        3 => (any::<Index>(), corrupt_value()).prop_map(|(field, value)| Mutation::Varint { field, value }),
        1 => (any::<Index>(), any::<u64>(), any::<u8>()).prop_map(|(field, value, last)| Mutation::Overlong { field, value, last }),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(|bytes| Mutation::Random { bytes }),
    ]
}

fn zigzag_varint(value: i64) -> Vec<u8> {
    let mut z = ((value << 1) ^ (value >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        let byte = (z & 0x7f) as u8;
        z >>= 7;
        if z == 0 {
            out.push(byte);
            return out;
        }
        out.push(byte | 0x80);
    }
}

/// Nine bytes with continuation bits, then `last` (which may carry bits past
/// the 64th, or a continuation bit of its own).
fn overlong_varint(value: u64, last: u8) -> Vec<u8> {
    let mut out: Vec<u8> = (0..9)
        .map(|i| ((value >> (7 * i)) & 0x7f) as u8 | 0x80)
        .collect();
    out.push(last);
    if last & 0x80 != 0 {
        out.push(0);
    }
    out
}

/// The length of the varint at the start of `bytes`.
fn varint_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .position(|b| b & 0x80 == 0)
        .map_or(bytes.len(), |i| i + 1)
}

/// The record's bytes after `mutations`. Field-level mutations apply to the
/// valid layout first, then byte-level ones in order.
fn mutate(schemas: &[&Schema], mut encoded: Vec<Vec<u8>>, mutations: &[Mutation]) -> Vec<u8> {
    let varint_fields: Vec<usize> = (0..schemas.len())
        .filter(|i| starts_with_varint(schemas[*i]))
        .collect();
    for m in mutations {
        let (field, replacement) = match m {
            Mutation::Varint { field, value } => (field, zigzag_varint(*value)),
            Mutation::Overlong { field, value, last } => (field, overlong_varint(*value, *last)),
            _ => continue,
        };
        if varint_fields.is_empty() {
            continue;
        }
        let bytes = &mut encoded[varint_fields[field.index(varint_fields.len())]];
        let old = varint_len(bytes);
        bytes.splice(..old, replacement);
    }
    let mut body: Vec<u8> = encoded.concat();
    for m in mutations {
        let len = body.len();
        match m {
            Mutation::FlipBit { at, bit } if len > 0 => body[at.index(len)] ^= 1 << bit,
            Mutation::SetByte { at, byte } if len > 0 => body[at.index(len)] = *byte,
            Mutation::Truncate { at } => body.truncate(at.index(len.max(1))),
            Mutation::Remove { at, len: n } if len > 0 => {
                let start = at.index(len);
                body.drain(start..(start + n).min(len));
            }
            Mutation::Insert { at, bytes } => {
                let at = at.index(len + 1);
                body.splice(at..at, bytes.iter().copied());
            }
            Mutation::Append { bytes } => body.extend_from_slice(bytes),
            Mutation::Random { bytes } => body = bytes.clone(),
            _ => {}
        }
    }
    body
}

// ---------------------------------------------------------------------------
// The property.

#[derive(Default)]
struct Tally {
    cases: Cell<u64>,
    both_accept: Cell<u64>,
    both_reject: Cell<u64>,
    eof_null_excluded: Cell<u64>,
}

fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

/// apache-avro accepted `body` only because it read a cut-off boolean or
/// string as `null`: its unresolved value holds `null` in a field whose
/// writer type is not null.
fn apache_read_eof_as_null(writer: &Writer, body: &[u8]) -> bool {
    let mut cursor = body;
    let Ok(Value::Record(values)) = writer.unresolved.read_value(&mut cursor) else {
        return false;
    };
    fields(writer.schema)
        .iter()
        .zip(&values)
        .any(|(field, (_, value))| !matches!(field.schema, Schema::Null) && *value == Value::Null)
}

fn check(writer: &Writer, body: &[u8], tally: &Tally) -> Result<(), TestCaseError> {
    bump(&tally.cases);
    let (fast, largest, total) = measured(|| writer.plan.read(body));
    let limit_single = body.len().max(256);
    let limit_total = body.len() + 1024;
    prop_assert!(
        largest <= limit_single && total <= limit_total,
        "writer {}: the plan allocated {largest} bytes at once and {total} in all for a {}-byte body",
        writer.name,
        body.len()
    );
    let slow = decode_generic(&writer.resolving, body);
    match (&fast, &slow) {
        (Ok(a), Ok(b)) => {
            prop_assert_eq!(a, b, "writer {}: both accept, values differ", writer.name);
            bump(&tally.both_accept);
        }
        (Err(_), Err(_)) => bump(&tally.both_reject),
        (Err(_), Ok(_)) if apache_read_eof_as_null(writer, body) => bump(&tally.eof_null_excluded),
        _ => {
            return Err(TestCaseError::fail(format!(
                "writer {}: plan {fast:?} vs apache-avro {slow:?} on body {body:02x?}",
                writer.name
            )))
        }
    }
    Ok(())
}

fn cases() -> u32 {
    match std::env::var("PROPTEST_CASES") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("PROPTEST_CASES={text} is not a number")),
        Err(_) => DEFAULT_CASES,
    }
}

#[test]
fn plan_matches_apache_avro_on_mutated_records() {
    // Bounds apache-avro's own up-front allocation for a corrupted length
    // (its default is 512 MiB); records here are far smaller, so no
    // accept/reject changes.
    apache_avro::util::max_allocation_bytes(1 << 20);
    let writers: &'static [Writer] = Box::leak(writers().into_boxed_slice());
    let strategy = (0..writers.len()).prop_flat_map(move |w| {
        let schemas: Vec<&'static Schema> = fields(writers[w].schema)
            .iter()
            .map(|f| &f.schema)
            .collect();
        let values: Vec<BoxedStrategy<Value>> = schemas.iter().map(|s| value_of(s)).collect();
        (Just(w), values, proptest::collection::vec(mutation(), 0..4))
    });
    let cases = cases();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let tally = Tally::default();
    let started = Instant::now();
    let result = runner.run(&strategy, |(w, values, mutations)| {
        let writer = &writers[w];
        let schemas: Vec<&Schema> = fields(writer.schema).iter().map(|f| &f.schema).collect();
        let encoded: Vec<Vec<u8>> = schemas
            .iter()
            .zip(values)
            .map(|(s, v)| encode_field(s, v))
            .collect();
        let body = mutate(&schemas, encoded, &mutations);
        check(writer, &body, &tally)
    });
    let elapsed = started.elapsed();
    eprintln!(
        "fuzz_read_plan: {} cases ({} requested) in {:.1} s: {} accepted by both, {} rejected by both, \
         {} apache-avro end-of-input nulls excluded",
        tally.cases.get(),
        cases,
        elapsed.as_secs_f64(),
        tally.both_accept.get(),
        tally.both_reject.get(),
        tally.eof_null_excluded.get(),
    );
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(
        tally.cases.get() >= u64::from(cases),
        "ran {} of {cases} cases",
        tally.cases.get()
    );
    assert!(
        tally.both_accept.get() > 0 && tally.both_reject.get() > 0,
        "the mix has valid and broken records"
    );
}

/// Known inputs of each divergence class found while building this test, so
/// a regression shows by name.
#[test]
fn plan_matches_apache_avro_on_known_edge_cases() {
    let writers = writers();
    let tally = Tally::default();
    let by_name = |name: &str| writers.iter().find(|w| w.name == name).expect("writer");
    let v1 = by_name("v1");
    let trailing = by_name("trailing");
    let wide = by_name("wide");
    let record = |writer: &Writer, values: Vec<Value>| -> Vec<Vec<u8>> {
        fields(writer.schema)
            .iter()
            .zip(values)
            .map(|(f, v)| encode_field(&f.schema, v))
            .collect()
    };
    let v1_fields = record(
        v1,
        vec![
            Value::String("e".into()),
            Value::String("o".into()),
            Value::Long(1),
            Value::Enum(0, "CREATED".into()),
            Value::Long(5),
            Value::TimestampMillis(7),
        ],
    );
    let base = v1_fields.concat();
    let mut bodies: Vec<(&Writer, Vec<u8>)> = vec![(v1, base.clone())];
    // A ten-byte varint whose last byte carries bits past the 64th (both
    // accept, dropping them), and one with an eleventh byte (both reject).
    for last in [0x01u8, 0x02, 0x7f, 0x80] {
        let mut fields = v1_fields.clone();
        fields[2] = overlong_varint(1, last);
        bodies.push((v1, fields.concat()));
    }
    // An enum index past the symbols, and one past 32 bits.
    for index in [5i64, 1 << 33] {
        let mut fields = v1_fields.clone();
        fields[3] = zigzag_varint(index);
        bodies.push((v1, fields.concat()));
    }
    // A huge string length with a small body.
    let mut fields = v1_fields.clone();
    fields[0] = [zigzag_varint(1 << 40), b"e".to_vec()].concat();
    bodies.push((v1, fields.concat()));

    let trailing_fields = record(
        trailing,
        vec![
            Value::Null,
            Value::String("e".into()),
            Value::String("o".into()),
            Value::Int(1),
            Value::Int(2),
            Value::Enum(1, "PAID".into()),
            Value::Int(3),
            Value::Date(4),
            Value::TimeMillis(5),
            Value::TimestampMicros(6),
            Value::String("USD".into()),
            Value::String("comment".into()),
            Value::Boolean(true),
        ],
    );
    let full = trailing_fields.concat();
    bodies.push((trailing, full.clone()));
    // An int field (promoted `version`, a skipped date) past 32 bits.
    for index in [3usize, 7] {
        let mut fields = trailing_fields.clone();
        fields[index] = zigzag_varint(i64::from(i32::MAX) + 1);
        bodies.push((trailing, fields.concat()));
    }
    // A boolean byte that is neither 0 nor 1.
    let mut bad_bool = full.clone();
    if let Some(last) = bad_bool.last_mut() {
        *last = 2;
    }
    bodies.push((trailing, bad_bool));
    // Cut inside the trailing string and before the trailing boolean: the
    // excluded end-of-input class.
    bodies.push((trailing, full[..full.len() - 1].to_vec()));
    bodies.push((trailing, full[..full.len() - 4].to_vec()));
    // A skipped string that is not UTF-8.
    let mut not_utf8 = trailing_fields.clone();
    not_utf8[11] = [zigzag_varint(2), vec![0xc3, 0x28]].concat();
    bodies.push((trailing, not_utf8.concat()));
    // A skipped enum index past its symbols.
    let wide_fields = record(
        wide,
        vec![
            Value::String("n".into()),
            Value::String("o".into()),
            Value::Boolean(false),
            Value::String("e".into()),
            Value::Double(0.5),
            Value::Int(1),
            Value::Enum(1, "CREATED".into()),
            Value::Fixed(4, vec![1, 2, 3, 4]),
            Value::Long(5),
            Value::Bytes(vec![9]),
            Value::TimestampMillis(7),
            Value::String("EUR".into()),
            Value::Float(0.25),
            Value::Enum(1, "HIGH".into()),
        ],
    );
    bodies.push((wide, wide_fields.concat()));
    let mut bad_level = wide_fields.clone();
    bad_level[13] = zigzag_varint(2);
    bodies.push((wide, bad_level.concat()));

    for (writer, body) in &bodies {
        if let Err(e) = check(writer, body, &tally) {
            panic!("{e}");
        }
    }
    assert_eq!(
        tally.eof_null_excluded.get(),
        2,
        "both end-of-input cases are recognised"
    );
    assert!(
        tally.both_accept.get() >= 4,
        "valid records and dropped varint bits are accepted by both"
    );
}
