//! The engine: what every entity gets, with no Kafka client in it. The
//! [`entity::Entity`] seam, the pure [`decide`] core, a partition's cache
//! ([`partition_state`]), the sled [`store`], the four [`outcomes`], the
//! dead-letter `breaker`, the Avro [`codec`] and the crash points.

pub(crate) mod breaker;
pub mod codec;
pub mod decide;
pub mod entity;
pub(crate) mod fault;
pub mod inbox;
pub mod outbox_record;
pub mod outcomes;
pub mod partition_state;
pub mod store;
