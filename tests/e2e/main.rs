//! The end-to-end suite: the real `orderly` binary as child processes
//! against a real Kafka-protocol broker process, over TCP.
//!
//! It takes the bootstrap address of a shared broker from
//! `ORDERLY_E2E_BOOTSTRAP`: Apache Kafka 4.4 from `kafka/broker run` in CI
//! and on a laptop. The broker-restart tests start a broker of their own
//! with `kafka/broker start --dir`, so they can stop and start it with its
//! data; the network-cut tests one with a proxy listener
//! (`--proxy-listener`), so one member reaches it through a proxy they cut.
//! `.ci/run` sets the variable and turns on the `e2e` feature; without the
//! feature these tests are not compiled, and with it but without the
//! variable they fail and say how to run them.
//!
//! * [`world`]: a fresh topic, group and registry per test, and the final
//!   exact checks;
//! * [`drills`]: one instance under crashes (at each guarantee), SIGTERM
//!   and a broker restart;
//! * [`exactly_once`]: transactions: each record once, a fenced zombie;
//! * [`late_writes`]: a member paused at each point of a write-out, three
//!   members through repeated pauses and broker kills: no state moves
//!   back, after a fresh restore from a compacted changelog;
//! * [`network_cut`]: one member cut off the broker (a [`proxy`] that
//!   stops forwarding, sockets left open) with a write-out queued, healed
//!   after its partitions moved: no state moves back;
//! * [`cluster`]: the same scenarios on three brokers of the test's own
//!   (RF 3, min ISR 2): rolling restarts, kills, leader moves, the
//!   controller quorum's leader lost;
//! * [`group`]: several instances in one group, restores from the changelog;
//! * [`replay`]: `orderly replay` on one instance and on a group's stores;
//! * [`outbox`]: the outbox while its output topic is missing;
//! * [`redrive`]: dead letters re-driven after a fix, each applied once;
//! * [`kafka_native`]: Kafka's own tools beside orderly, commit metadata,
//!   `offsets_for_times`, a compacted changelog, a real schema registry
//!   (`ORDERLY_E2E_REGISTRY`, from `registry/apicurio run`);
//! * [`stock`]: the second domain, stock levels, through the crash drill in
//!   each guarantee and a fresh restore: every level exact;
//! * [`latest`]: the no-code entity (`entity.kind = "latest"`) on shipment
//!   events through the crash drill and a fresh restore: each key's newest
//!   event, every field;
//! * [`secured`]: a SASL_SSL broker with ACLs: every command as a least-privileged user;
//! * [`operator`]: what an operator sees: no warning on a fresh broker's
//!   first start;
//! * [`observe`]: the HTTP endpoint: exact metrics, state queries, health,
//!   abuse; [`status_page`]: the status page in headless Chromium.
#![cfg(feature = "e2e")]

#[path = "../support/browser.rs"]
mod browser;
mod cluster;
mod dlq_page;
mod drills;
mod exactly_once;
mod explain;
mod group;
mod kafka_native;
mod late_writes;
mod latest;
mod network_cut;
mod observe;
mod operator;
mod outbox;
mod pauses;
mod proxy;
mod redrive;
mod repair;
mod replay;
mod secured;
mod standby;
mod status_page;
mod stock;
#[path = "../support/mod.rs"]
mod support;
mod world;

pub const PARTITIONS: i32 = 4;
pub const SESSION_TIMEOUT_MS: u64 = 6000;
/// The session timeout of the tests that wait for the group to drop a
/// member they killed, aborted or paused (the crash drills, the late
/// write-outs, the network cut, the zombie): each such wait is about one
/// session timeout, and what the tests prove does not depend on its length
/// (a paused member is still paused past it). kafka/broker allows it
/// (`group.min.session.timeout.ms`).
pub const SHORT_SESSION_TIMEOUT_MS: u64 = 3000;

pub fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set. The end-to-end suite needs a real broker: run \
             `kafka/broker run -- cargo test --features e2e --test e2e -- --test-threads=1`, which starts Apache Kafka \
             4.4 and sets ORDERLY_E2E_BOOTSTRAP (or `bash .ci/run` for all of CI)"
        )
    })
}
