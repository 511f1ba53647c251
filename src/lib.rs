//! # orderly
//!
//! A Kafka Streams-style ordered, idempotent processor of entity events.
//! The engine is generic over an [`Entity`] (the key, version and event id
//! of its events, how an event changes its data, what a change publishes,
//! how records decode); orders ([`Orders`]) are the built-in domain and the
//! binary's, stock ([`Stock`]) a second.
//!
//! ## Guarantees
//!
//! 1. Per `order_id`, state only moves forward: an event whose `version` is
//!    not greater than the stored version is dropped as **stale** and counted.
//!    This holds across crashes, rebalances, paused members and broker
//!    restarts, under either guarantee: each write-out to the changelog is a
//!    transaction of the partition's producer, fenced by the next owner
//!    before it restores, so a late write-out never becomes visible.
//! 2. Each `event_id` takes effect at most once (inbox): a redelivery of an
//!    applied event, within the inbox retention window, is dropped as a
//!    **duplicate** and counted separately from stale events. (Older
//!    redeliveries are still caught by guarantee 1, as stale.)
//! 3. Every consumed record ends in exactly one of: applied, duplicate, stale,
//!    dead-lettered. The four durable counters add up to the records consumed.
//! 4. A Kafka offset is committed only after the state covering it is flushed
//!    to disk. The partition's next offset is written in the same atomic sled
//!    batch as the state it covers, so after a crash at any instant the store
//!    and its checkpoint agree and restart resumes exactly there.
//! 5. A partition that moves to another instance (or whose store is lost) is
//!    restored there from a compacted changelog topic before any of its
//!    records is processed, so guarantees 1-3 hold across a consumer group.
//!    Per write-out the changelog's transaction is committed before the
//!    local store is written, so it is never behind a durable store.
//!    (Under exactly_once, guarantee 4's commit rides in the transaction of
//!    guarantee 6, before the store write; the changelog holds that state,
//!    and the restore brings a store that is behind up to it.)
//! 6. With `processing.guarantee = "exactly_once"`, each partition's
//!    write-out (changelog records, dead letters, status changes, input
//!    offsets) is one Kafka transaction, committed before the store is
//!    written: `read_committed` readers see each of those records once, and
//!    a member fenced by a partition's new owner writes nothing visible for
//!    it.
//!
//! ## Your own entity
//!
//! Implement [`Entity`] and hand it to [`main_with`]: the binary gets the
//! whole command line (`run`, `replay`, `dlq`, `state`, `config`) and the
//! HTTP endpoint, with every guarantee above. Here, a tally per account
//! whose events each add an amount (an accumulating state, like stock):
//!
//! ```
//! use apache_avro::{reader::datum::GenericDatumReader, types::Value, Schema};
//! use orderly::{read_value, resolving_reader, DecodeError, Entity, Event, Fields, State};
//!
//! #[derive(Clone)]
//! struct Tally(&'static Schema, String);
//!
//! impl Entity for Tally {
//!     type Body = i64; // the amount an event adds
//!     type Data = i64; // the running total
//!     type Status = String; // "positive" or "negative", published on change
//!     type View = serde_json::Value;
//!     type Reader = GenericDatumReader<'static>;
//!     const KEY_FIELD: &'static str = "account";
//!
//!     fn apply(total: Option<&i64>, amount: i64) -> i64 {
//!         total.copied().unwrap_or(0) + amount
//!     }
//!     fn status(total: &i64) -> Option<String> {
//!         Some(if *total < 0 { "negative" } else { "positive" }.into())
//!     }
//!     fn view(&self, s: &State<Self>) -> serde_json::Value {
//!         serde_json::json!({ "account": s.key, "version": s.version, "total": s.data })
//!     }
//!     fn reader_schema(&self) -> Option<&Schema> {
//!         Some(self.0)
//!     }
//!     fn reader(&self, id: u32, writer: Schema) -> Result<Self::Reader, DecodeError> {
//!         resolving_reader(id, writer, self.0)
//!     }
//!     fn read(&self, reader: &Self::Reader, body: &[u8]) -> Result<Event<i64>, DecodeError> {
//!         let f = Fields::of(read_value(reader, body)?)?;
//!         Ok(Event {
//!             event_id: f.string("id")?,
//!             key: f.string("account")?,
//!             version: f.long("seq")?,
//!             occurred_at: f.long("at")?,
//!             body: f.long("amount")?,
//!         })
//!     }
//!     fn status_value(status: &String) -> Value {
//!         Value::String(status.clone())
//!     }
//!     fn status_schema(&self) -> &str {
//!         &self.1
//!     }
//! }
//!
//! // The domain logic is pure: the engine decides which events apply.
//! let total = Tally::apply(None, 5);
//! assert_eq!(Tally::apply(Some(&total), -8), -3);
//! assert_eq!(Tally::status(&-3).as_deref(), Some("negative"));
//!
//! let schema = Schema::parse_str(
//!     r#"{"type": "record", "name": "Added", "fields": [{"name": "id", "type": "string"},
//!     {"name": "account", "type": "string"}, {"name": "seq", "type": "long"},
//!     {"name": "at", "type": "long"}, {"name": "amount", "type": "long"}]}"#,
//! )
//! .expect("the schema parses");
//! let status = orderly::string_status_schema("TallyStatusChanged", "example", "account");
//! let tally = Tally(Box::leak(Box::new(schema)), status);
//! # fn main_of(tally: Tally) -> std::process::ExitCode {
//! // The whole `main` of the binary:
//! orderly::main_with(tally)
//! # }
//! # let _ = main_of;
//! # let _ = tally;
//! ```
//!
//! `examples/shipments.rs` is the same as a program, and docs/entities.md
//! says what each part means.
//!
//! ## Module map
//!
//! The API is what the crate root re-exports; the modules themselves are
//! private to the crate, and this map is for reading its source. The
//! folders are the layers; each imports only from the layers below it.
//!
//! * `ops`: the operator surface: the command line (`ops::cli`, the
//!   same for `orderly` and a user's binary), the HTTP endpoint
//!   (`ops::http`: `/metrics`, `/healthz`, `/readyz`, `/state/{key}`, the
//!   status page), `demo`, `replay`, `dlq` (`ops::redrive`), the checks of
//!   `config check` (`ops::preflight`) and producing a workload.
//! * `domains`: the built-in entities: orders (the binary's default, with
//!   its event model, Avro codec, compiled read plan and load generator),
//!   stock (an accumulating state) and latest (any Avro topic, no code: the
//!   newest event per key, fields named by `[entity]`).
//! * `processor`: the consumer-group member, generic over the entity: the
//!   poll thread, the partition supervisor and its tasks (restoring,
//!   processing, draining), the write-out modes and their transactions,
//!   dead letters, the group flush and offset commits; the changelog topic
//!   (`processor::changelog`: restore, replay markers) and the status
//!   changes (`processor::outbox`: sent with the write-out, or relayed).
//! * `observe`: per-partition status, outcome counters, latency
//!   histograms, the Prometheus exposition, the broker connection's log.
//! * `engine`: no Kafka client in it: the [`Entity`] seam, the pure
//!   `decide` core (one event against one entity's state → apply, duplicate
//!   or stale), a partition's cache (decide each batch in memory, write each
//!   changed entity once per write-out with the checkpoint, atomically), the
//!   sled store, the inbox, the four outcomes, the dead-letter breaker and
//!   the Avro codec in the Confluent wire format.
//! * `kafka`: librdkafka client settings (pass-through first, then the
//!   settings the guarantees depend on), a partition read by assignment up
//!   to a known end, a group's members under either protocol, the ACLs
//!   `run` needs, the record headers orderly writes, backoff.
//! * `registry`: the schema registry client (HTTP with its credentials and
//!   CA, or in-process for the demo and the tests).
//! * `config`: layered configuration (`config/default.toml`, `--config`,
//!   `ORDERLY_*`) with validation; `partitioner`: which partition a key
//!   hashes to (librdkafka's and the Java client's partitioners);
//!   `error_chain`: an error and its causes on one line; `program`: the
//!   binary's own name, for the hints messages give.
//! * `allocator`: the global allocator and jemalloc's compiled options,
//!   shared by the binary and the pipeline bench.
//!
//! `docs/layout.md` maps every file.

#![warn(unreachable_pub)]
#![warn(missing_docs)]

// The public API: what a binary of its own entity, or a program embedding
// the processor, uses. Everything else is the crate's own.

// The seam between the engine and a domain.
pub use engine::entity::{Entity, Event, State};
// The applied event ids a [`State`] remembers.
pub use engine::inbox::Inbox;

// The built-in entities.
pub use domains::{latest::Latest, orders::Orders, stock::Stock};

// The command line: `orderly`'s own, and a binary of its own entity's.
pub use ops::cli::{main, main_with};

// What an entity's [`Entity::reader`] and [`Entity::read`] use.
pub use engine::codec::{read_value, resolving_reader, DecodeError, Fields, PoisonKind};
// The output schema of an entity whose status is a string.
pub use processor::outbox::string_status_schema;

// The global allocator orderly runs with, for a binary's `orderly::allocator!()`.
pub use allocator::{Allocator, MallocConf, ALLOCATOR, JEMALLOC_OPTIONS};

/// The Kafka client orderly is built on: orderly's fork of rdkafka
/// (`vendor/rdkafka`), for a program that needs a client of its own (its
/// tests' mock cluster, a producer) without a second copy of rdkafka.
pub use rdkafka;

// Embedding the processor in a program of its own.
pub use config::Config;
pub use engine::store::Store;
pub use processor::{Processor, RunReport};
pub use registry::Registry;

// The crate's insides: private to the crate. Its own integration tests,
// benches and binary reach what they drive through `testkit`, one curated
// list of re-exports (hidden from the docs, not part of the API).
// An item in them is `pub` only when the root or `testkit` re-exports it
// (or a public signature reaches it); `unreachable_pub` flags any other.
pub(crate) mod allocator;
pub(crate) mod config;
pub(crate) mod domains;
pub(crate) mod engine;
pub(crate) mod error_chain;
pub(crate) mod kafka;
pub(crate) mod observe;
pub(crate) mod ops;
pub(crate) mod partitioner;
pub(crate) mod processor;
pub(crate) mod program;
pub(crate) mod registry;
#[doc(hidden)]
pub mod testkit;
