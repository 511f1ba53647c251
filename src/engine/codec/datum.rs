//! A datum writer prepared once per schema.
//!
//! apache-avro's `GenericDatumWriter` resolves the schema's names and
//! validates the value field by field through a name table every time one
//! is built, and `to_avro_datum` builds one per call: on the write-out path
//! that was a fifth of the processor's CPU on an order stream whose every
//! event changes a status. This writer resolves the names once and writes
//! Avro's binary encoding straight from the schema for the kinds a status
//! record is made of (primitives, strings, enums, unions, records,
//! timestamps, named references). Any other pairing of value and schema
//! (decimals, arrays, a record without one of its fields, a value of the
//! wrong kind) goes to apache-avro's writer, which validates it and writes
//! it or says why not: the bytes are the same either way.

use std::collections::HashMap;

use apache_avro::schema::{Name, ResolvedSchema};
use apache_avro::types::Value;
use apache_avro::Schema;

use super::EncodeError;

/// Writes values of one schema in Avro's binary encoding.
pub(crate) struct DatumWriter {
    schema: Schema,
    /// The schema's named types by full name, for its references.
    names: HashMap<Name, Schema>,
    /// False for a schema whose names this writer does not resolve as
    /// apache-avro does (see [`resolves_plainly`]): every value of it goes
    /// to apache-avro's writer.
    direct: bool,
}

impl DatumWriter {
    /// A writer of `schema`; an error if a reference in it names no type.
    pub(crate) fn new(schema: Schema) -> Result<Self, EncodeError> {
        let names = ResolvedSchema::try_from(&schema)
            .map_err(|e| EncodeError::Avro(e.to_string()))?
            .get_names()
            .iter()
            .map(|(name, schema)| (name.clone(), (*schema).clone()))
            .collect();
        let direct = resolves_plainly(&schema, None);
        Ok(DatumWriter {
            schema,
            names,
            direct,
        })
    }

    pub(crate) fn schema(&self) -> &Schema {
        &self.schema
    }

    /// `value` in the Confluent wire format: the header naming `schema_id`,
    /// then the body.
    pub(crate) fn wire(&self, schema_id: u32, value: &Value) -> Result<Vec<u8>, EncodeError> {
        let mut out = super::wire_header(schema_id, 128);
        self.write(value, &mut out)?;
        Ok(out)
    }

    /// Appends `value`'s encoding to `out`; an error, with `out` as it was,
    /// if `value` does not match the schema.
    pub(crate) fn write(&self, value: &Value, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let start = out.len();
        if self.direct && self.write_direct(value, &self.schema, out) {
            return Ok(());
        }
        out.truncate(start);
        #[allow(deprecated)] // the replacement builds the same writer per call
        let body = apache_avro::to_avro_datum(&self.schema, value.clone())
            .map_err(|e| EncodeError::Avro(e.to_string()))?;
        out.extend_from_slice(&body);
        Ok(())
    }

    /// Writes `value` as `schema` if both are of a kind written here and
    /// they match; false (with `out` partly written) otherwise.
    pub(crate) fn write_direct(&self, value: &Value, schema: &Schema, out: &mut Vec<u8>) -> bool {
        match (value, schema) {
            (_, Schema::Ref { name }) => match self.names.get(name) {
                Some(named) => self.write_direct(value, named, out),
                None => false,
            },
            (Value::Null, Schema::Null) => true,
            (Value::Boolean(b), Schema::Boolean) => {
                out.push(u8::from(*b));
                true
            }
            (Value::Int(n), Schema::Int)
            | (Value::Date(n), Schema::Date)
            | (Value::TimeMillis(n), Schema::TimeMillis) => {
                write_long(i64::from(*n), out);
                true
            }
            (Value::Long(n), Schema::Long)
            | (Value::TimestampMillis(n), Schema::TimestampMillis)
            | (Value::TimestampMicros(n), Schema::TimestampMicros)
            | (Value::TimeMicros(n), Schema::TimeMicros) => {
                write_long(*n, out);
                true
            }
            (Value::Float(x), Schema::Float) => {
                out.extend_from_slice(&x.to_le_bytes());
                true
            }
            (Value::Double(x), Schema::Double) => {
                out.extend_from_slice(&x.to_le_bytes());
                true
            }
            (Value::String(s), Schema::String) => {
                write_bytes(s.as_bytes(), out);
                true
            }
            (Value::Bytes(b), Schema::Bytes) => {
                write_bytes(b, out);
                true
            }
            (Value::Enum(index, symbol), Schema::Enum(e)) => {
                if e.symbols.get(*index as usize) != Some(symbol) {
                    return false;
                }
                write_long(i64::from(*index), out);
                true
            }
            (Value::Union(index, inner), Schema::Union(u)) => {
                let Some(variant) = u.variants().get(*index as usize) else {
                    return false;
                };
                write_long(i64::from(*index), out);
                self.write_direct(inner, variant, out)
            }
            (Value::Record(fields), Schema::Record(r)) => {
                if fields.len() != r.fields.len() {
                    return false;
                }
                r.fields.iter().enumerate().all(|(at, field)| {
                    let value = match fields.get(at) {
                        Some((name, value)) if *name == field.name => Some(value),
                        _ => fields
                            .iter()
                            .find(|(n, _)| *n == field.name)
                            .map(|(_, v)| v),
                    };
                    value.is_some_and(|value| self.write_direct(value, &field.schema, out))
                })
            }
            _ => false,
        }
    }
}

/// True when every reference in `schema` is written with its full name and
/// every record's field names are its own: then a reference is its stored
/// name and a value's field is found by name, as this writer does. False for
/// a reference that takes its namespace from the enclosing type (a name
/// written with a leading dot, a schema built by hand) or a field alias
/// equal to another field's name, which apache-avro resolves otherwise.
fn resolves_plainly(schema: &Schema, enclosing: Option<&str>) -> bool {
    match schema {
        Schema::Ref { name } => *name.fully_qualified_name(enclosing) == *name,
        Schema::Record(r) => {
            let namespace = r.name.namespace().or(enclosing);
            r.fields.iter().enumerate().all(|(at, field)| {
                r.lookup.get(&field.name) == Some(&at) && resolves_plainly(&field.schema, namespace)
            })
        }
        Schema::Union(u) => u.variants().iter().all(|v| resolves_plainly(v, enclosing)),
        Schema::Array(a) => resolves_plainly(&a.items, enclosing),
        Schema::Map(m) => resolves_plainly(&m.types, enclosing),
        _ => true,
    }
}

/// A long (and an int): zig-zag, then seven bits a byte, low first.
fn write_long(n: i64, out: &mut Vec<u8>) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Bytes and strings: the length as a long, then the bytes.
fn write_bytes(bytes: &[u8], out: &mut Vec<u8>) {
    write_long(bytes.len() as i64, out);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
#[path = "datum_tests.rs"]
mod tests;
