//! A binary of its own entity: shipments (Avro `ShipmentScanned` records keyed
//! by `shipment_id`), whose state is the newest scan and whose status changes
//! are published. It gets orderly's command line (`run`, `replay`, `dlq`,
//! `state`, `config`) and HTTP endpoint: `cargo run --example shipments -- --help`.

use apache_avro::{reader::datum::GenericDatumReader, types::Value, Schema};
use orderly::{read_value, resolving_reader, DecodeError, Entity, Event, Fields, State};
use serde::{Deserialize, Serialize};

const SCHEMA: &str = r#"{"type": "record", "name": "ShipmentScanned", "namespace": "example", "fields": [
  {"name": "scan_id", "type": "string"}, {"name": "shipment_id", "type": "string"},
  {"name": "seq", "type": "long"}, {"name": "status", "type": "string"},
  {"name": "location", "type": "string"}, {"name": "at", "type": "long"}]}"#;

/// The stored part of a shipment (its serde layout is the stored layout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Scan {
    status: String,
    location: String,
}

/// The reader schema, and the output schema (string statuses).
#[derive(Clone)]
struct Shipments(&'static Schema, String);

impl Entity for Shipments {
    type Body = Scan;
    type Data = Scan;
    type Status = String;
    type View = serde_json::Value;
    type Reader = GenericDatumReader<'static>;
    const KEY_FIELD: &'static str = "shipment_id";
    const NAME: &'static str = "shipment";

    fn apply(_previous: Option<&Scan>, scan: Scan) -> Scan {
        scan
    }
    fn status(scan: &Scan) -> Option<String> {
        Some(scan.status.clone())
    }
    fn view(&self, s: &State<Self>) -> serde_json::Value {
        serde_json::json!({ "shipment_id": s.key, "version": s.version, "status": s.data.status,
            "location": s.data.location, "scan_id": s.event_id, "at": s.occurred_at })
    }
    fn reader_schema(&self) -> Option<&Schema> {
        Some(self.0)
    }
    fn reader(&self, id: u32, writer: Schema) -> Result<Self::Reader, DecodeError> {
        resolving_reader(id, writer, self.0)
    }
    fn read(&self, reader: &Self::Reader, body: &[u8]) -> Result<Event<Scan>, DecodeError> {
        let f = Fields::of(read_value(reader, body)?)?;
        Ok(Event {
            event_id: f.string("scan_id")?,
            key: f.string("shipment_id")?,
            version: f.long("seq")?,
            occurred_at: f.long("at")?,
            body: Scan {
                status: f.string("status")?,
                location: f.string("location")?,
            },
        })
    }
    fn status_value(status: &String) -> Value {
        Value::String(status.clone())
    }
    fn status_schema(&self) -> &str {
        &self.1
    }
}

fn main() -> std::process::ExitCode {
    match Schema::parse_str(SCHEMA) {
        Ok(schema) => orderly::main_with(Shipments(
            Box::leak(Box::new(schema)),
            orderly::string_status_schema("ShipmentStatusChanged", "example", "shipment_id"),
        )),
        Err(e) => {
            eprintln!("error: the shipment schema does not parse: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
