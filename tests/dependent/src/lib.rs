//! Support tickets, an entity of this crate's own: `TicketEvent` records
//! keyed by `ticket_id`, numbered per ticket by `seq`. A ticket's state is
//! its status, who holds it and how many events touched it (a sum, so an
//! event applied twice would show); the outbox publishes its status changes.

use apache_avro::{reader::datum::GenericDatumReader, types::Value, Schema};
use orderly::{read_value, resolving_reader, DecodeError, Entity, Event, Fields, State};
use serde::{Deserialize, Serialize};

/// The events' Avro schema (the registry's subject `<input topic>-value`).
pub const SCHEMA: &str = r#"{"type": "record", "name": "TicketEvent", "namespace": "example.support",
  "fields": [{"name": "event_id", "type": "string"}, {"name": "ticket_id", "type": "string"},
  {"name": "seq", "type": "long"}, {"name": "at", "type": "long"},
  {"name": "status", "type": "string"}, {"name": "assignee", "type": ["null", "string"], "default": null}]}"#;

/// What one event says about its ticket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    pub status: String,
    pub assignee: Option<String>,
}

/// What the store keeps per ticket (its serde layout is the stored layout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ticket {
    pub status: String,
    pub assignee: Option<String>,
    /// Events applied to this ticket: each counted once, whatever Kafka
    /// redelivers.
    pub touches: u64,
}

/// The entity: its reader schema and its output schema.
#[derive(Clone)]
pub struct Tickets {
    reader: &'static Schema,
    output: String,
}

impl Tickets {
    /// The entity with its schemas (parsed once, for the process's life).
    pub fn new() -> Result<Self, apache_avro::Error> {
        Ok(Tickets {
            reader: Box::leak(Box::new(Schema::parse_str(SCHEMA)?)),
            output: orderly::string_status_schema(
                "TicketStatusChanged",
                "example.support",
                "ticket_id",
            ),
        })
    }
}

impl Entity for Tickets {
    type Body = Change;
    type Data = Ticket;
    type Status = String;
    type View = serde_json::Value;
    type Reader = GenericDatumReader<'static>;
    const KEY_FIELD: &'static str = "ticket_id";
    const NAME: &'static str = "ticket";

    fn apply(previous: Option<&Ticket>, change: Change) -> Ticket {
        let touches = previous.map_or(0, |t| t.touches) + 1;
        // A change that names nobody keeps the ticket's holder.
        let assignee = change
            .assignee
            .or_else(|| previous.and_then(|t| t.assignee.clone()));
        Ticket {
            status: change.status,
            assignee,
            touches,
        }
    }
    fn status(ticket: &Ticket) -> Option<String> {
        Some(ticket.status.clone())
    }
    fn view(&self, s: &State<Self>) -> serde_json::Value {
        serde_json::json!({ "ticket_id": s.key, "version": s.version, "status": s.data.status,
            "assignee": s.data.assignee, "touches": s.data.touches })
    }
    fn reader_schema(&self) -> Option<&Schema> {
        Some(self.reader)
    }
    fn reader(&self, id: u32, writer: Schema) -> Result<Self::Reader, DecodeError> {
        resolving_reader(id, writer, self.reader)
    }
    fn read(&self, reader: &Self::Reader, body: &[u8]) -> Result<Event<Change>, DecodeError> {
        let f = Fields::of(read_value(reader, body)?)?;
        Ok(Event {
            event_id: f.string("event_id")?,
            key: f.string("ticket_id")?,
            version: f.long("seq")?,
            occurred_at: f.long("at")?,
            body: Change {
                status: f.string("status")?,
                assignee: assignee(f.get("assignee")),
            },
        })
    }
    fn status_value(status: &String) -> Value {
        Value::String(status.clone())
    }
    fn status_schema(&self) -> &str {
        &self.output
    }
}

/// The optional `assignee`: a union of null and string.
fn assignee(value: Option<&Value>) -> Option<String> {
    match value {
        Some(Value::Union(_, inner)) => match inner.as_ref() {
            Value::String(name) => Some(name.clone()),
            _ => None,
        },
        Some(Value::String(name)) => Some(name.clone()),
        _ => None,
    }
}
