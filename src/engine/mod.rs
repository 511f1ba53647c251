//! The engine: what every entity gets, with no Kafka client in it. The
//! [`entity::Entity`] seam, the pure [`decide`] core, a partition's cache
//! ([`partition_state`]), the sled [`store`], the four [`outcomes`], the
//! dead-letter `breaker`, the Avro [`codec`] and the crash points.

pub(crate) mod breaker;
pub(crate) mod codec;
pub(crate) mod decide;
pub(crate) mod entity;
pub(crate) mod explain;
pub(crate) mod fault;
pub(crate) mod generation;
pub(crate) mod inbox;
pub(crate) mod outbox_record;
pub(crate) mod outcomes;
pub(crate) mod partition_state;
pub(crate) mod runs;
pub(crate) mod store;
pub(crate) mod stored_state;
#[cfg(test)]
mod tests;
