//! Initialising a partition's transactional producer, which fences the
//! partition's earlier producers, without librdkafka's fixed wait.
//!
//! When the previous owner died (or was cut off) inside a transaction, the
//! coordinator answers the new owner's first InitProducerId with
//! CONCURRENT_TRANSACTIONS: it has begun aborting the open transaction
//! (writing its abort markers takes milliseconds), and the producer is to
//! ask again. librdkafka asks again after a fixed 500 ms
//! (`rdkafka_idempotence.c`), which was most of a standby's take-over. So a
//! producer that gets that answer is dropped before it asks again, and a
//! new one asks at once: its InitProducerId finds the abort done (or gets
//! the same answer, and the next one asks), and bumps the epoch, fencing
//! every earlier producer of the id as `init_transactions` always does.
//!
//! A dropped producer never held a producer id, and it is destroyed before
//! the next one asks, so it cannot fence the one that replaces it. After
//! [`FRESH_TRIES`] producers the last one keeps librdkafka's own retries.
//!
//! The cost: the spare is created while the first producer asks, so every
//! assignment of a partition briefly holds two producers (one more
//! connection, with its TLS and SASL handshake on a secured cluster); the
//! unused spare is destroyed as soon as the first one is ready.

use std::time::{Duration, Instant};

use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::producer::{FutureProducer, Producer};
use tracing::debug;

/// How many producers ask in turn before the last keeps librdkafka's retries.
pub(crate) const FRESH_TRIES: u32 = 4;

/// How long one `init_transactions` call waits before it says whether its
/// producer was told to ask again (a timed-out call is resumed by the next).
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// A transactional producer's client context: logs as the default one
/// does, but the coordinator's "ask again" to InitProducerId, which [`init`]
/// answers itself, at debug level.
pub(crate) struct FenceWatch;

impl ClientContext for FenceWatch {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        if fac == "GETPID"
            && log_message.contains(&RDKafkaErrorCode::ConcurrentTransactions.to_string())
        {
            debug!(
                "the coordinator is aborting the previous owner's open transaction; a new producer asks again: {log_message}"
            );
            return;
        }
        DefaultClientContext.log(level, fac, log_message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        DefaultClientContext.error(error, reason);
    }
}

/// A partition's transactional producer.
pub(crate) type TxnProducer = FutureProducer<FenceWatch>;

/// What [`init`] made.
pub(crate) struct Fenced {
    pub(crate) producer: TxnProducer,
    /// Producers created, the last one included.
    pub(crate) tries: u32,
}

/// Creates producers from `client` (which holds the transactional id) and
/// initialises their transactions as the module doc says, within `timeout`.
/// While one producer asks, the next is already created (connected, its
/// coordinator found): a transactional producer asks for its producer id
/// only when `init_transactions` is called. Blocking: call it off the async
/// runtime.
pub(crate) fn init(client: &rdkafka::ClientConfig, timeout: Duration) -> KafkaResult<Fenced> {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut tries = 0;
    let mut producer: TxnProducer = client.create_with_context(FenceWatch)?;
    loop {
        tries += 1;
        let last = tries >= FRESH_TRIES;
        let spare: Option<TxnProducer> = if last {
            None
        } else {
            Some(client.create_with_context(FenceWatch)?)
        };
        let refused = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wait = if last { left } else { left.min(LOOK_EVERY) };
            let Err(e) = producer.init_transactions(wait) else {
                break None;
            };
            // A call that timed out says so, or names the retriable answer
            // its producer is waiting to ask again after (a refusal while
            // the coordinator aborts, a coordinator moving or loading during
            // a broker restart); the next call resumes either. Only the
            // refusal is answered with a new producer: librdkafka handles
            // the others as a single long call would.
            let code = e.rdkafka_error_code();
            let resumable = match &e {
                KafkaError::Transaction(error) => error.is_retriable(),
                _ => false,
            } || code == Some(RDKafkaErrorCode::OperationTimedOut);
            if !resumable || left.is_zero() {
                break Some(Err(e));
            }
            if !last && code == Some(RDKafkaErrorCode::ConcurrentTransactions) {
                break Some(Ok(()));
            }
        };
        match (refused, spare) {
            (None, spare) => {
                if let Some(spare) = spare {
                    // Never asked: it holds nothing. Destroyed aside, so the
                    // caller does not wait for its threads to end.
                    std::thread::spawn(move || drop(spare));
                }
                debug!(
                    tries,
                    seconds = started.elapsed().as_secs_f64(),
                    "transactional producer initialised"
                );
                return Ok(Fenced { producer, tries });
            }
            (Some(Err(e)), _) => return Err(e),
            (Some(Ok(())), Some(spare)) => {
                debug!(
                    tries,
                    seconds = started.elapsed().as_secs_f64(),
                    "InitProducerId refused while the coordinator aborts an open transaction; the next producer asks"
                );
                // Destroyed here, before the next producer asks: it holds no
                // producer id and its retry never goes out.
                drop(producer);
                producer = spare;
            }
            // Refused on the last try: it keeps librdkafka's retries.
            (Some(Ok(())), None) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::DefaultProducerContext;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    use super::*;

    fn client(cluster: &MockCluster<'static, DefaultProducerContext>) -> rdkafka::ClientConfig {
        let mut client = rdkafka::ClientConfig::new();
        client
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("transactional.id", "fence-test");
        client
    }

    #[test]
    fn a_refused_init_is_asked_again_at_once_by_a_new_producer() {
        let cluster = MockCluster::new(1).expect("mock cluster");
        // The coordinator's answer while it aborts a dead owner's transaction.
        cluster.request_errors(
            RDKafkaApiKey::InitProducerId,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS],
        );
        let fenced = init(&client(&cluster), Duration::from_secs(10)).expect("initialised");
        // Replaced at once, not asked again by librdkafka 500 ms later.
        assert_eq!(fenced.tries, 2, "the refused producer was replaced");
        fenced
            .producer
            .begin_transaction()
            .expect("the new producer is usable");
    }

    #[test]
    fn after_its_tries_the_last_producer_keeps_librdkafkas_retries() {
        let cluster = MockCluster::new(1).expect("mock cluster");
        let refusals = vec![
            RDKafkaRespErr::RD_KAFKA_RESP_ERR_CONCURRENT_TRANSACTIONS;
            FRESH_TRIES as usize + 1
        ];
        cluster.request_errors(RDKafkaApiKey::InitProducerId, &refusals);
        let fenced = init(&client(&cluster), Duration::from_secs(10)).expect("initialised");
        assert_eq!(fenced.tries, FRESH_TRIES);
    }

    #[test]
    fn a_coordinator_that_moves_or_loads_is_waited_out_on_the_same_producer() {
        let cluster = MockCluster::new(1).expect("mock cluster");
        // What a broker restart answers for a while (seen on Apache Kafka 4.4
        // in the broker-restart drill).
        cluster.request_errors(
            RDKafkaApiKey::InitProducerId,
            &[
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
            ],
        );
        let fenced = init(&client(&cluster), Duration::from_secs(20)).expect("initialised");
        assert_eq!(fenced.tries, 1);
    }

    #[test]
    fn a_refusal_that_asking_again_cannot_change_ends_the_init_at_once() {
        let cluster = MockCluster::new(1).expect("mock cluster");
        // No ACL for the transactional id: the process stops naming it.
        cluster.request_errors(
            RDKafkaApiKey::InitProducerId,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED; 8],
        );
        let started = Instant::now();
        let Err(error) = init(&client(&cluster), Duration::from_secs(20)) else {
            panic!("initialised without the ACL");
        };
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "waited: {error}"
        );
        assert_eq!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed),
            "{error}"
        );
    }

    #[test]
    fn an_init_without_a_refusal_keeps_its_first_producer() {
        let cluster = MockCluster::new(1).expect("mock cluster");
        let fenced = init(&client(&cluster), Duration::from_secs(10)).expect("initialised");
        assert_eq!(fenced.tries, 1);
    }
}
