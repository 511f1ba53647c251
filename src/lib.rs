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
//! ## Module map
//!
//! * [`entity`]: the seam between the engine and a domain: the [`Entity`]
//!   trait, the decoded [`Event`] and the stored [`State`].
//! * [`domains`]: the built-in entities: orders, stock, and latest (any Avro
//!   topic, no code: the newest event per key, fields named by `[entity]`).
//! * [`decide`]: the pure core: one event against one entity's state
//!   → apply, duplicate or stale. No I/O.
//! * [`partition_state`]: one partition's order cache (read through from
//!   its store): decide each event in memory, write each changed order once
//!   per commit interval with the checkpoint, atomically.
//! * [`event`]: the event and state model.
//! * [`codec`]: Avro in the Confluent wire format; poison classification.
//! * [`registry`]: schema registry client (HTTP with its credentials and CA, or
//!   in-process for the demo).
//! * [`store`]: sled layout: a tree per partition with states (recent inbox
//!   entries inside), older inbox chunks and the checkpoint (next offset and
//!   counters), written as one batch.
//! * [`changelog`]: the changelog topic: restoring a partition's tree from
//!   it, replay markers, creating the topic (write-outs are transactions of
//!   `processor::transaction`).
//! * [`outbox`]: status changes to the output topic: published with the
//!   write-out that makes them durable (`direct`), or stored with the state
//!   they come from and relayed (`relay`).
//! * [`processor`]: the consumer-group member: poll thread, the partition
//!   supervisor and its partition tasks (restoring, processing, draining),
//!   dead letters, group flush and offset commits.
//! * [`replay`]: `orderly replay`: move partitions to a new offset on every
//!   instance (a changelog marker, or the local store) and the group's
//!   committed offsets.
//! * [`config`]: layered configuration with validation.
//! * `group_members`: a consumer group's members and assignments under
//!   either group protocol (librdkafka's DescribeConsumerGroups).
//! * `processor::transaction`: the per-partition transactional producer
//!   (either guarantee; it fences a partition's previous owner) and its
//!   write-out round.
//! * [`kafka`]: librdkafka client settings (consumer, producers, admin):
//!   pass-through first, then the settings the guarantees depend on.
//! * [`partition_reader`]: one partition of a topic read by assignment up
//!   to a known end (the changelog, the relay's read-back of the output
//!   topic, the dead-letter topic and the re-drive log).
//! * [`redrive`]: `orderly dlq list|replay`: the dead-letter topic read
//!   back, and letters re-published to the input topic after a fix, each
//!   once, with a re-drive count that stops a record failing forever.
//! * [`telemetry`]: per-partition status, outcome counters and latency
//!   histograms, exposed as Prometheus metrics and the status page's JSON.
//! * [`http`]: the `run` process's HTTP endpoint: `/metrics`, `/healthz`,
//!   `/readyz`, `/state/{order_id}` and the built-in status page.
//! * `partitioner`: which partition an `order_id` hashes to (librdkafka's
//!   and the Java client's partitioners).
//! * [`acl`]: the ACLs `run` needs, compared with the operations the
//!   broker says the principal may perform (checked before consuming).
//! * [`preflight`]: start-up checks (store, broker, topics, registry) for
//!   `config check` and `run`.
//! * [`workload`]: the load generator and its independently computed
//!   expected outcome.
//! * [`demo`]: the embedded default run on librdkafka's mock cluster.
//! * [`load`]: producing a planned workload, every record acknowledged.
//! * [`allocator`]: the global allocator and jemalloc's compiled options,
//!   shared by the binary and the pipeline bench.
//! * `fault`: crash points for the crash drill (compiled in with the
//!   `fault-injection` feature only, which the tests turn on).
//!
//! What a library user (the binary, the tests, the benches, an embedding
//! program) needs is `pub`; the rest is `pub(crate)` (the
//! `unreachable_pub` lint keeps it that way), so the compiler reports dead
//! code. The crate-private modules: `breaker`, `group_members`,
//! `partitioner`, `retry`, `fault`.

#![warn(unreachable_pub)]

pub mod acl;
pub mod allocator;
pub(crate) mod breaker;
pub mod changelog;
pub mod cli;
pub mod codec;
pub mod config;
pub mod decide;
pub mod demo;
pub mod domains;
pub mod entity;
pub mod event;
pub(crate) mod fault;
pub(crate) mod group_members;
pub mod headers;
pub mod http;
pub mod kafka;
pub mod load;
pub mod outbox;
pub mod outcomes;
pub mod partition_reader;
pub mod partition_state;
pub(crate) mod partitioner;
pub mod preflight;
pub mod processor;
pub mod redrive;
pub mod registry;
pub mod replay;
pub(crate) mod retry;
pub mod store;
pub mod telemetry;
pub mod workload;

pub use domains::latest::Latest;
pub use domains::orders::Orders;
pub use domains::stock::Stock;
pub use entity::{Entity, Event, State};
