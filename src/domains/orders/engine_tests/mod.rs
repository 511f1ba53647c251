//! The engine's unit tests that need an entity, run with orders: they live
//! here so that the engine never names a domain (tests included).

mod decide;
mod outbox;
mod packed_runs;
mod partition_state;
mod processing;
mod store;
