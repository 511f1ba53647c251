use apache_avro::types::Value;
use apache_avro::Schema;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

use super::DatumWriter;

/// Every kind the writer writes itself, a named type used twice, and a
/// union over a reference.
const EVERY_KIND: &str = r#"{
  "type": "record", "name": "Every", "namespace": "test.kinds",
  "fields": [
    {"name": "n", "type": "null"},
    {"name": "b", "type": "boolean"},
    {"name": "i", "type": "int"},
    {"name": "l", "type": "long"},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "s", "type": "string"},
    {"name": "by", "type": "bytes"},
    {"name": "e", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B", "C"]}},
    {"name": "u", "type": ["null", "Kind", "string", "long"]},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tm", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "tu", "type": {"type": "long", "logicalType": "time-micros"}},
    {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "inner", "type": {"type": "record", "name": "Inner", "fields": [{"name": "x", "type": "long"}]}},
    {"name": "again", "type": "Inner"}
  ]
}"#;

const SYMBOLS: [&str; 3] = ["A", "B", "C"];

fn apache(schema: &Schema, value: &Value) -> Result<Vec<u8>, String> {
    #[allow(deprecated)]
    apache_avro::to_avro_datum(schema, value.clone()).map_err(|e| e.to_string())
}

fn written(writer: &DatumWriter, value: &Value) -> Result<Vec<u8>, String> {
    let mut out = b"kept".to_vec();
    writer.write(value, &mut out).map_err(|e| e.to_string())?;
    assert_eq!(&out[..4], b"kept", "what was in the buffer is kept");
    Ok(out[4..].to_vec())
}

fn direct(writer: &DatumWriter, value: &Value) -> bool {
    writer.direct && writer.write_direct(value, writer.schema(), &mut Vec::new())
}

/// The writer and apache-avro agree: the same bytes, or both refuse.
fn agree(writer: &DatumWriter, schema: &Schema, value: &Value) {
    match (written(writer, value), apache(schema, value)) {
        (Ok(ours), Ok(theirs)) => assert_eq!(ours, theirs, "{value:?}"),
        (Err(_), Err(_)) => {}
        (ours, theirs) => panic!("{value:?}: ours {ours:?}, apache-avro's {theirs:?}"),
    }
}

prop_compose! {
    fn every_kind()(
        b in any::<bool>(), i in any::<i32>(), l in any::<i64>(), f in any::<f32>(),
        d in any::<f64>(), s in ".{0,40}", by in prop::collection::vec(any::<u8>(), 0..300),
        e in 0u32..3, u in 0u32..4, us in "[a-z]{0,8}", ul in any::<i64>(), ts in any::<i64>(),
        day in any::<i32>(), x in any::<i64>(), y in any::<i64>(), shuffle in any::<bool>(),
        tm in 0..86_400_000i32, tu in any::<i64>(), tsu in any::<i64>(),
    ) -> Value {
        let u = match u {
            0 => Value::Union(0, Box::new(Value::Null)),
            1 => Value::Union(1, Box::new(Value::Enum(e, SYMBOLS[e as usize].into()))),
            2 => Value::Union(2, Box::new(Value::String(us))),
            _ => Value::Union(3, Box::new(Value::Long(ul))),
        };
        let mut fields = vec![
            ("n".to_string(), Value::Null),
            ("b".into(), Value::Boolean(b)),
            ("i".into(), Value::Int(i)),
            ("l".into(), Value::Long(l)),
            ("f".into(), Value::Float(f)),
            ("d".into(), Value::Double(d)),
            ("s".into(), Value::String(s)),
            ("by".into(), Value::Bytes(by)),
            ("e".into(), Value::Enum(e, SYMBOLS[e as usize].into())),
            ("u".into(), u),
            ("ts".into(), Value::TimestampMillis(ts)),
            ("day".into(), Value::Date(day)),
            ("tm".into(), Value::TimeMillis(tm)),
            ("tu".into(), Value::TimeMicros(tu)),
            ("tsu".into(), Value::TimestampMicros(tsu)),
            ("inner".into(), Value::Record(vec![("x".into(), Value::Long(x))])),
            ("again".into(), Value::Record(vec![("x".into(), Value::Long(y))])),
        ];
        if shuffle {
            fields.reverse();
        }
        Value::Record(fields)
    }
}

proptest! {
    /// The bytes are apache-avro's, field for field, in any field order.
    #[test]
    fn writes_the_bytes_apache_avro_writes(value in every_kind()) {
        let schema = Schema::parse_str(EVERY_KIND).unwrap();
        let writer = DatumWriter::new(schema.clone()).unwrap();
        prop_assert!(direct(&writer, &value), "written directly");
        prop_assert_eq!(written(&writer, &value), apache(&schema, &value));
        prop_assert!(apache(&schema, &value).is_ok());
    }
}

/// A value that does not match goes to apache-avro's writer, which
/// refuses it as it would have; a match the writer does not write itself
/// (an int as a long) comes out as apache-avro writes it.
#[test]
fn a_value_that_does_not_match_is_refused_as_apache_avro_refuses_it() {
    let schema = Schema::parse_str(EVERY_KIND).unwrap();
    let writer = DatumWriter::new(schema.clone()).unwrap();
    let good = every_kind()
        .new_tree(&mut proptest::test_runner::TestRunner::deterministic())
        .unwrap()
        .current();
    let Value::Record(fields) = good else {
        unreachable!()
    };
    let with = |name: &str, value: Value| {
        let mut fields = fields.clone();
        for field in &mut fields {
            if field.0 == name {
                field.1 = value.clone();
            }
        }
        Value::Record(fields)
    };
    let renamed = |from: &str, to: &str| {
        let mut fields = fields.clone();
        for field in &mut fields {
            if field.0 == from {
                field.0 = to.into();
            }
        }
        Value::Record(fields)
    };
    let wrong = [
        renamed("s", "zz"),
        renamed("s", "n"),
        with("l", Value::String("not a long".into())),
        with("e", Value::Enum(1, "C".into())),
        with("e", Value::Enum(7, "A".into())),
        with("u", Value::Union(9, Box::new(Value::Null))),
        with("u", Value::Union(0, Box::new(Value::Long(1)))),
        Value::Record(fields[1..].to_vec()),
    ];
    for value in wrong {
        assert!(!direct(&writer, &value), "{value:?}");
        let mut out = b"kept".to_vec();
        assert!(writer.write(&value, &mut out).is_err(), "{value:?}");
        assert!(apache(&schema, &value).is_err(), "{value:?}");
        assert_eq!(out, b"kept");
    }
    let widened = with("l", Value::Int(-5));
    assert!(!direct(&writer, &widened));
    assert_eq!(written(&writer, &widened), apache(&schema, &widened));
}

/// A reference that takes its namespace from the enclosing record (a name
/// with a leading dot) resolves as apache-avro resolves it: to `x.Inner`,
/// a string, not the top-level `Inner`, a long.
#[test]
fn a_reference_named_within_its_enclosing_namespace_resolves_as_apache_avro_resolves_it() {
    let schema = Schema::parse_str(
        r#"{"type": "record", "name": "Top", "fields": [
          {"name": "a", "type": {"type": "record", "name": "Inner", "fields": [{"name": "v", "type": "long"}]}},
          {"name": "b", "type": {"type": "record", "name": "Mid", "namespace": "x", "fields": [
            {"name": "c", "type": {"type": "record", "name": "Inner", "fields": [{"name": "v", "type": "string"}]}},
            {"name": "d", "type": ".Inner"}
          ]}}
        ]}"#,
    )
    .unwrap();
    let writer = DatumWriter::new(schema.clone()).unwrap();
    let inner = |v: Value| Value::Record(vec![("v".into(), v)]);
    for d in [Value::Long(1), Value::String("s".into())] {
        let value = Value::Record(vec![
            ("a".into(), inner(Value::Long(7))),
            (
                "b".into(),
                Value::Record(vec![
                    ("c".into(), inner(Value::String("c".into()))),
                    ("d".into(), inner(d)),
                ]),
            ),
        ]);
        assert!(!direct(&writer, &value), "{value:?}");
        agree(&writer, &schema, &value);
    }
}

/// A field alias equal to another field's name makes apache-avro check a
/// value's field against the aliased one: such a schema is written by
/// apache-avro alone.
#[test]
fn a_field_alias_equal_to_another_fields_name_is_left_to_apache_avro() {
    let schema = Schema::parse_str(
        r#"{"type": "record", "name": "R", "fields": [
          {"name": "b", "type": "long"},
          {"name": "a", "type": "string", "aliases": ["b"]}
        ]}"#,
    )
    .unwrap();
    let writer = DatumWriter::new(schema.clone()).unwrap();
    let value = Value::Record(vec![
        ("b".into(), Value::Long(1)),
        ("a".into(), Value::String("a".into())),
    ]);
    assert!(!direct(&writer, &value));
    agree(&writer, &schema, &value);
}
