//! The end-to-end suite: the real `orderly` binary as child processes
//! against a real Kafka-protocol broker process, over TCP.
//!
//! Broker-agnostic: it takes the bootstrap address from
//! `ORDERLY_E2E_BOOTSTRAP` (nisshi in CI; Apache Kafka or Redpanda on a
//! laptop). The broker-restart test needs a broker it can stop and start:
//! `ORDERLY_E2E_NISSHI` names the nisshi binary, and the test runs its own
//! instance with sqlite storage. `.ci/run` sets both and turns on the `e2e`
//! feature; without the feature these tests are not compiled, and with it
//! but without the variables they fail and say how to run them.
//!
//! * [`world`]: a fresh topic, group and registry per test, and the final
//!   exact checks;
//! * [`drills`]: one instance under crashes, SIGTERM and a broker restart;
//! * [`group`]: several instances in one group, restores from the changelog;
//! * [`replay`]: `orderly replay` on one instance and on a group's stores;
//! * [`outbox`]: the outbox while its output topic is missing;
//! * [`redrive`]: dead letters re-driven after a fix, each applied once;
//! * [`observe`]: the HTTP endpoint: exact metrics, state queries, health,
//!   abuse; [`status_page`]: the status page in headless Chromium.
#![cfg(feature = "e2e")]

#[path = "../support/mod.rs"]
mod support;
#[path = "../support/browser.rs"]
mod browser;
mod drills;
mod group;
mod observe;
mod outbox;
mod pauses;
mod replay;
mod redrive;
mod status_page;
mod world;

pub const PARTITIONS: i32 = 4;
pub const SESSION_TIMEOUT_MS: u64 = 6000;

pub fn required_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set. The end-to-end suite needs a real broker: run `bash .ci/run`, which installs and \
             starts nisshi and sets ORDERLY_E2E_BOOTSTRAP and ORDERLY_E2E_NISSHI, or start a Kafka-compatible broker \
             yourself and run `ORDERLY_E2E_BOOTSTRAP=host:port cargo test --features e2e --test e2e`"
        )
    })
}
