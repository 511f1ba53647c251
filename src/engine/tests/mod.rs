//! The engine's unit tests that need an entity, run with orders (a test
//! module may name a domain; the engine's code never does): one file per
//! part of the engine they test.

mod decide;
mod packed_runs;
mod partition_state;
mod spill;
mod store;
