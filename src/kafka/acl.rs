//! The ACLs `run` needs, checked before it consumes anything.
//!
//! The broker tells a client which operations its principal may perform on
//! a topic or a group (the authorized operations of KIP-430, asked for with
//! DescribeTopics and DescribeConsumerGroups), without any right to read the
//! ACLs themselves. [`needs`] lists what a configuration needs (pure),
//! [`missing`] compares it with what the broker answered (pure), and
//! [`check`] asks the broker. Not checkable this way: Write on the
//! partitions' transactional ids (a producer learns it at its
//! `init_transactions`, which stops the process naming the id), and Create
//! on a changelog topic that does not exist yet (its creation fails naming
//! it).

use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;

use crate::config::Config;

/// An ACL operation orderly needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Operation {
    Read,
    Write,
    Describe,
    DescribeConfigs,
}

impl Operation {
    /// The name `kafka-acls.sh --operation` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Operation::Read => "Read",
            Operation::Write => "Write",
            Operation::Describe => "Describe",
            Operation::DescribeConfigs => "DescribeConfigs",
        }
    }

    fn from_native(value: u32) -> Option<Self> {
        use rd::rd_kafka_AclOperation_t as Op;
        match value {
            v if v == Op::RD_KAFKA_ACL_OPERATION_READ as u32 => Some(Operation::Read),
            v if v == Op::RD_KAFKA_ACL_OPERATION_WRITE as u32 => Some(Operation::Write),
            v if v == Op::RD_KAFKA_ACL_OPERATION_DESCRIBE as u32 => Some(Operation::Describe),
            v if v == Op::RD_KAFKA_ACL_OPERATION_DESCRIBE_CONFIGS as u32 => {
                Some(Operation::DescribeConfigs)
            }
            _ => None,
        }
    }
}

/// A resource an ACL is on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Resource {
    Topic(String),
    /// Granted prefixed in the docs, so it covers the restore readers'
    /// `<group>-restore` too.
    Group(String),
}

impl Resource {
    /// The resource as `kafka-acls.sh` names it.
    fn flag(&self) -> String {
        match self {
            Resource::Topic(name) => format!("--topic {name}"),
            Resource::Group(name) => format!("--resource-pattern-type prefixed --group {name}"),
        }
    }

    fn describe(&self) -> String {
        match self {
            Resource::Topic(name) => format!("topic {name}"),
            Resource::Group(name) => format!("group {name}"),
        }
    }
}

/// What a configuration needs on one resource, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Need {
    pub resource: Resource,
    pub operations: Vec<Operation>,
    pub why: &'static str,
}

/// What the broker says the principal may do on a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Authorized {
    /// The operations allowed (implied ones included: Read implies
    /// Describe).
    Operations(Vec<Operation>),
    /// Not even Describe: the broker refused to describe it.
    Refused,
    /// The broker did not say (the topic does not exist, or an old broker):
    /// not checked here.
    Unknown,
}

/// One ACL the principal lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Missing {
    pub resource: Resource,
    pub operations: Vec<Operation>,
    pub why: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum AclError {
    /// The principal lacks ACLs `run` needs.
    #[error("{principal} lacks ACLs orderly needs: {}", list(.missing, .principal, .bootstrap))]
    Missing {
        principal: String,
        bootstrap: String,
        missing: Vec<Missing>,
    },
    /// The cluster refused the credentials (wrong or expired password,
    /// unknown user, wrong mechanism).
    #[error(
        "the cluster at {bootstrap} refused {principal}'s credentials ({detail}): check sasl.username, sasl.password \
         (ORDERLY_KAFKA__LIBRDKAFKA__SASL_PASSWORD) and sasl.mechanism under [kafka.librdkafka]"
    )]
    Authentication {
        bootstrap: String,
        principal: String,
        detail: String,
    },
    /// The brokers' certificate did not verify (or the TLS handshake failed
    /// otherwise).
    #[error(
        "the TLS handshake with {bootstrap} failed ({detail}): ssl.ca.location under [kafka.librdkafka] must name the \
         CA that signed the brokers' certificates (and security.protocol must match the listener)"
    )]
    Tls { bootstrap: String, detail: String },
    /// No answer (the cluster is down or unreachable): not a refusal, the
    /// processor waits for it.
    #[error("cannot ask {bootstrap} which operations orderly may perform: {detail}")]
    Unreachable { bootstrap: String, detail: String },
    /// The cluster cannot answer the question (it names no controller: an
    /// old broker, or librdkafka's mock cluster).
    #[error("{bootstrap} cannot say which operations orderly may perform (it names no controller); not checked")]
    Unsupported { bootstrap: String },
}

impl AclError {
    /// Sorts a failed request's text (with the client's last error) into
    /// a refusal of the credentials, of TLS, or no answer.
    pub(crate) fn from_failure(config: &Config, detail: String) -> Self {
        let bootstrap = config.kafka.bootstrap_servers.clone();
        let lower = detail.to_ascii_lowercase();
        if lower.contains("sasl authentication error") || lower.contains("authentication failure") {
            AclError::Authentication {
                bootstrap,
                principal: principal(config),
                detail,
            }
        } else if lower.contains("ssl handshake failed")
            || lower.contains("certificate verify failed")
        {
            AclError::Tls { bootstrap, detail }
        } else {
            AclError::Unreachable { bootstrap, detail }
        }
    }

    /// A refusal by the cluster's security (not a cluster that is away, or
    /// one that cannot answer).
    pub(crate) fn is_refusal(&self) -> bool {
        !matches!(
            self,
            AclError::Unreachable { .. } | AclError::Unsupported { .. }
        )
    }
}

fn list(missing: &[Missing], principal: &str, bootstrap: &str) -> String {
    missing
        .iter()
        .map(|m| {
            let names: Vec<&str> = m.operations.iter().map(|o| o.name()).collect();
            let operations: String = m
                .operations
                .iter()
                .map(|o| format!("--operation {} ", o.name()))
                .collect();
            format!(
                "{} on {} ({}); grant it with: kafka-acls.sh --bootstrap-server {bootstrap} --command-config \
                 <admin.properties> --add --allow-principal {principal} {operations}{}",
                names.join(", "),
                m.resource.describe(),
                m.why,
                m.resource.flag()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
        + " (docs/operating.md, \"A secured cluster\")"
}

/// What `run` needs for `config` (docs/operating.md's table).
pub(crate) fn needs(config: &Config) -> Vec<Need> {
    use Operation::*;
    let mut needs = vec![
        Need {
            resource: Resource::Topic(config.kafka.input_topic.clone()),
            operations: vec![Read, Describe],
            why: "the input, read by the group",
        },
        Need {
            resource: Resource::Group(config.kafka.group_id.clone()),
            operations: vec![Read, Describe],
            why: "the consumer group",
        },
        Need {
            resource: Resource::Topic(config.kafka.dlq_topic.clone()),
            operations: vec![Write, Describe],
            why: "dead letters",
        },
    ];
    if let Some(changelog) = config.changelog_topic() {
        needs.push(Need {
            resource: Resource::Topic(changelog),
            operations: vec![Read, Write, Describe, DescribeConfigs],
            why: "the changelog: write-outs, restores, its settings checked at start-up",
        });
    }
    if let Some(output) = config.output_topic() {
        needs.push(Need {
            resource: Resource::Topic(output),
            operations: vec![Write, Describe, Read],
            why: "status changes, and reading back the last one published",
        });
    }
    needs
}

/// The needs `authorized` does not cover. A resource the broker said
/// nothing about is passed over.
pub(crate) fn missing(needs: &[Need], authorized: &BTreeMap<Resource, Authorized>) -> Vec<Missing> {
    needs
        .iter()
        .filter_map(|need| {
            let lacking: Vec<Operation> = match authorized.get(&need.resource) {
                Some(Authorized::Operations(allowed)) => need
                    .operations
                    .iter()
                    .copied()
                    .filter(|op| !allowed.contains(op))
                    .collect(),
                Some(Authorized::Refused) => need.operations.clone(),
                Some(Authorized::Unknown) | None => Vec::new(),
            };
            (!lacking.is_empty()).then(|| Missing {
                resource: need.resource.clone(),
                operations: lacking,
                why: need.why,
            })
        })
        .collect()
}

/// The principal orderly connects as, as ACLs name it.
///
/// With SASL the user name; with a TLS client certificate, the principal
/// the broker maps it to (not known here); otherwise the anonymous user.
pub(crate) fn principal(config: &Config) -> String {
    let mut certificate = false;
    for (key, value) in config.librdkafka_passthrough() {
        match key {
            "sasl.username" => return format!("User:{value}"),
            "ssl.certificate.location" | "ssl.certificate.pem" | "ssl.keystore.location" => {
                certificate = true
            }
            _ => {}
        }
    }
    if certificate {
        "the principal of orderly's client certificate".into()
    } else {
        "User:ANONYMOUS".into()
    }
}

/// Asks the broker what the principal may do on every resource `config`
/// needs and returns what is missing (blocking: call it off the async
/// workers). A cluster without an authorizer allows everything.
pub(crate) fn check(config: &Config, timeout: Duration) -> Result<Vec<Missing>, AclError> {
    let needs = needs(config);
    let client = client(config).map_err(|e| AclError::from_failure(config, e.to_string()))?;
    let mut topics = Vec::new();
    let mut groups = Vec::new();
    for need in &needs {
        match &need.resource {
            Resource::Topic(name) => topics.push(name.clone()),
            Resource::Group(name) => groups.push(name.clone()),
        }
    }
    let mut authorized = BTreeMap::new();
    // Metadata first (of the input topic only: every topic's would cost a
    // large cluster a big answer): a refused login or certificate shows here, and the
    // answer names the controller the describe calls need.
    let described = client
        .fetch_metadata(Some(&config.kafka.input_topic), timeout)
        .map_err(|e| e.to_string())
        .and_then(|metadata| {
            // SAFETY: the client is live; a zero timeout only reads the
            // cached answer.
            let controller = unsafe { rd::rd_kafka_controllerid(client.client().native_ptr(), 0) };
            // librdkafka's mock cluster names a controller it does not have.
            if metadata.brokers().iter().any(|b| b.id() == controller) {
                Ok(())
            } else {
                Err(String::new())
            }
        });
    if let Err(text) = described {
        if text.is_empty() {
            return Err(AclError::Unsupported {
                bootstrap: config.kafka.bootstrap_servers.clone(),
            });
        }
        return Err(failure(config, &client, text));
    }
    let described = describe_topics(&client, &topics, timeout)
        .and_then(|t| Ok((t, describe_groups(&client, &groups, timeout)?)));
    let (topics, groups) = match described {
        Ok(both) => both,
        Err(text) => return Err(failure(config, &client, text)),
    };
    for (name, allowed) in topics {
        authorized.insert(Resource::Topic(name), allowed);
    }
    for (name, allowed) in groups {
        authorized.insert(Resource::Group(name), allowed);
    }
    Ok(missing(&needs, &authorized))
}

/// A failed request as an error, with the last client error when there is
/// one: why the request failed comes as a client error event.
fn failure(config: &Config, client: &BaseConsumer<LastError>, text: String) -> AclError {
    let _ = client.poll(Duration::from_millis(50));
    let last = client.context().last_error();
    AclError::from_failure(
        config,
        match last {
            Some(reason) => format!("{text}; last client error: {reason}"),
            None => text,
        },
    )
}

/// Refuses when `check` finds a missing ACL (an error naming each, with the
/// command that grants it).
pub(crate) fn refuse_missing(config: &Config, timeout: Duration) -> Result<(), AclError> {
    let missing = check(config, timeout)?;
    if missing.is_empty() {
        return Ok(());
    }
    Err(AclError::Missing {
        principal: principal(config),
        bootstrap: config.kafka.bootstrap_servers.clone(),
        missing,
    })
}

/// Remembers the last client error (authentication and TLS failures come
/// only as error events).
#[derive(Default)]
pub(crate) struct LastError(std::sync::Mutex<Option<String>>);

impl LastError {
    fn last_error(&self) -> Option<String> {
        self.0.lock().ok().and_then(|l| l.clone())
    }
}

impl ClientContext for LastError {
    fn log(&self, _level: rdkafka::config::RDKafkaLogLevel, _fac: &str, _message: &str) {}

    fn error(&self, _error: KafkaError, reason: &str) {
        if let Ok(mut last) = self.0.lock() {
            *last = Some(reason.to_string());
        }
    }
}

impl ConsumerContext for LastError {}

fn client(config: &Config) -> Result<BaseConsumer<LastError>, KafkaError> {
    crate::kafka::metadata_client_config(config).create_with_context(LastError::default())
}

/// Owns the handles of one admin request; destroys them on every path.
struct Request {
    queue: *mut rd::rd_kafka_queue_t,
    options: *mut rd::rd_kafka_AdminOptions_t,
    event: *mut rd::rd_kafka_event_t,
}

impl Request {
    /// A queue and options asking for the authorized operations.
    ///
    /// # Safety
    /// `rk` is a live client handle that outlives the request.
    unsafe fn new(
        rk: *mut rd::rd_kafka_t,
        op: rd::rd_kafka_admin_op_t,
        timeout: Duration,
    ) -> Result<Self, String> {
        let request = Request {
            queue: rd::rd_kafka_queue_new(rk),
            options: rd::rd_kafka_AdminOptions_new(rk, op),
            event: std::ptr::null_mut(),
        };
        let error = rd::rd_kafka_AdminOptions_set_include_authorized_operations(request.options, 1);
        if !error.is_null() {
            let text = CStr::from_ptr(rd::rd_kafka_error_string(error))
                .to_string_lossy()
                .into_owned();
            rd::rd_kafka_error_destroy(error);
            return Err(text);
        }
        let mut errstr = [0 as c_char; 256];
        let millis = timeout.as_millis().min(i32::MAX as u128) as i32;
        rd::rd_kafka_AdminOptions_set_request_timeout(
            request.options,
            millis,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        Ok(request)
    }

    /// Waits for the answer; an error of the request as a whole is text.
    ///
    /// # Safety
    /// The request was sent on `self.queue`.
    unsafe fn wait(&mut self, timeout: Duration) -> Result<(), String> {
        let millis = (timeout + Duration::from_secs(1))
            .as_millis()
            .min(i32::MAX as u128) as i32;
        self.event = rd::rd_kafka_queue_poll(self.queue, millis);
        if self.event.is_null() {
            return Err("no answer from the cluster before the timeout".into());
        }
        if rd::rd_kafka_event_error(self.event)
            != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            let text = rd::rd_kafka_event_error_string(self.event);
            return Err(if text.is_null() {
                "the request failed".into()
            } else {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            });
        }
        Ok(())
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        // SAFETY: each handle was created by librdkafka for this request and
        // is destroyed once, here.
        unsafe {
            if !self.event.is_null() {
                rd::rd_kafka_event_destroy(self.event);
            }
            rd::rd_kafka_AdminOptions_destroy(self.options);
            rd::rd_kafka_queue_destroy(self.queue);
        }
    }
}

/// The operations in a description's array (values librdkafka does not
/// name, or orderly does not need, are skipped).
///
/// # Safety
/// `ops` points to `count` values, or is null.
unsafe fn operations(ops: *const rd::rd_kafka_AclOperation_t, count: usize) -> Authorized {
    if ops.is_null() || count == 0 {
        return Authorized::Unknown;
    }
    // Read as integers: a value outside the enum must not be read as it.
    let raw = std::slice::from_raw_parts(ops.cast::<u32>(), count);
    Authorized::Operations(
        raw.iter()
            .filter_map(|v| Operation::from_native(*v))
            .collect(),
    )
}

/// What a description's error means here.
///
/// # Safety
/// `error` is null or a live error of a description.
unsafe fn refused(error: *const rd::rd_kafka_error_t) -> Option<Authorized> {
    if error.is_null() {
        return None;
    }
    use rd::rd_kafka_resp_err_t as E;
    match rd::rd_kafka_error_code(error) {
        E::RD_KAFKA_RESP_ERR_NO_ERROR => None,
        E::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED
        | E::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED => Some(Authorized::Refused),
        _ => Some(Authorized::Unknown),
    }
}

/// The names as C strings (a NUL in one is an error naming it).
fn c_names(names: &[String], what: &str) -> Result<Vec<CString>, String> {
    names
        .iter()
        .map(|n| CString::new(n.as_str()).map_err(|_| format!("{what} {n:?} holds a NUL")))
        .collect()
}

/// One describe request (DescribeTopics, DescribeConsumerGroups) and how
/// to read its kind of description (a topic's, a group's).
struct Describe<R, T> {
    /// The request's name, for an answer of another kind.
    request: &'static str,
    /// What the names are, for one holding a NUL.
    what: &'static str,
    op: rd::rd_kafka_admin_op_t,
    /// Sends the request for the names on the request's queue.
    send: unsafe fn(*mut rd::rd_kafka_t, &mut [*const c_char], &Request),
    result: unsafe extern "C" fn(*mut rd::rd_kafka_event_t) -> *const R,
    descriptions: unsafe extern "C" fn(*const R, *mut usize) -> *mut *const T,
    name: unsafe extern "C" fn(*const T) -> *const c_char,
    error: unsafe extern "C" fn(*const T) -> *const rd::rd_kafka_error_t,
    operations: unsafe extern "C" fn(*const T, *mut usize) -> *const rd::rd_kafka_AclOperation_t,
}

impl<R, T> Describe<R, T> {
    fn run(
        &self,
        client: &BaseConsumer<LastError>,
        names: &[String],
        timeout: Duration,
    ) -> Result<Vec<(String, Authorized)>, String> {
        let names = c_names(names, self.what)?;
        let mut pointers: Vec<*const c_char> = names.iter().map(|n| n.as_ptr()).collect();
        // SAFETY: the client outlives the request; `names` outlives the
        // collection, which librdkafka copies; every handle is destroyed once;
        // the descriptions live as long as the request's event.
        unsafe {
            let rk = client.client().native_ptr();
            let mut request = Request::new(rk, self.op, timeout)?;
            (self.send)(rk, &mut pointers, &request);
            request.wait(timeout)?;
            let result = (self.result)(request.event);
            if result.is_null() {
                return Err(format!("unexpected answer to {}", self.request));
            }
            let mut count = 0usize;
            let descriptions = (self.descriptions)(result, &mut count);
            Ok(self.read(descriptions, count))
        }
    }

    /// Each description's name and what it allows.
    ///
    /// # Safety
    /// `descriptions` points to `count` live descriptions of type `T`.
    unsafe fn read(
        &self,
        descriptions: *const *const T,
        count: usize,
    ) -> Vec<(String, Authorized)> {
        let mut out = Vec::with_capacity(count);
        for i in 0..count {
            let description = *descriptions.add(i);
            let name = CStr::from_ptr((self.name)(description))
                .to_string_lossy()
                .into_owned();
            let allowed = match refused((self.error)(description)) {
                Some(answer) => answer,
                None => {
                    let mut n = 0usize;
                    let ops = (self.operations)(description, &mut n);
                    operations(ops, n)
                }
            };
            out.push((name, allowed));
        }
        out
    }
}

fn describe_topics(
    client: &BaseConsumer<LastError>,
    topics: &[String],
    timeout: Duration,
) -> Result<Vec<(String, Authorized)>, String> {
    /// # Safety
    /// As in [`Describe::run`].
    unsafe fn send(rk: *mut rd::rd_kafka_t, pointers: &mut [*const c_char], request: &Request) {
        let collection =
            rd::rd_kafka_TopicCollection_of_topic_names(pointers.as_mut_ptr(), pointers.len());
        rd::rd_kafka_DescribeTopics(rk, collection, request.options, request.queue);
        rd::rd_kafka_TopicCollection_destroy(collection);
    }
    Describe {
        request: "DescribeTopics",
        what: "topic name",
        op: rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        send,
        result: rd::rd_kafka_event_DescribeTopics_result,
        descriptions: rd::rd_kafka_DescribeTopics_result_topics,
        name: rd::rd_kafka_TopicDescription_name,
        error: rd::rd_kafka_TopicDescription_error,
        operations: rd::rd_kafka_TopicDescription_authorized_operations,
    }
    .run(client, topics, timeout)
}

fn describe_groups(
    client: &BaseConsumer<LastError>,
    groups: &[String],
    timeout: Duration,
) -> Result<Vec<(String, Authorized)>, String> {
    /// # Safety
    /// As in [`Describe::run`].
    unsafe fn send(rk: *mut rd::rd_kafka_t, pointers: &mut [*const c_char], request: &Request) {
        rd::rd_kafka_DescribeConsumerGroups(
            rk,
            pointers.as_mut_ptr(),
            pointers.len(),
            request.options,
            request.queue,
        );
    }
    Describe {
        request: "DescribeConsumerGroups",
        what: "group id",
        op: rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
        send,
        result: rd::rd_kafka_event_DescribeConsumerGroups_result,
        descriptions: rd::rd_kafka_DescribeConsumerGroups_result_groups,
        name: rd::rd_kafka_ConsumerGroupDescription_group_id,
        error: rd::rd_kafka_ConsumerGroupDescription_error,
        operations: rd::rd_kafka_ConsumerGroupDescription_authorized_operations,
    }
    .run(client, groups, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Operation::*;

    fn config() -> Config {
        Config::load(None).expect("defaults")
    }

    #[test]
    fn the_needs_follow_the_configuration() {
        let mut config = config();
        config.kafka.changelog_topic = String::new();
        config.kafka.output_topic = String::new();
        let plain: Vec<Resource> = needs(&config).into_iter().map(|n| n.resource).collect();
        assert_eq!(
            plain,
            vec![
                Resource::Topic(config.kafka.input_topic.clone()),
                Resource::Group(config.kafka.group_id.clone()),
                Resource::Topic(config.kafka.dlq_topic.clone()),
            ]
        );
        let full = needs(&super::tests::config());
        assert_eq!(full.len(), 3 + config_topics(&super::tests::config()));
    }

    fn config_topics(config: &Config) -> usize {
        usize::from(config.changelog_topic().is_some())
            + usize::from(config.output_topic().is_some())
    }

    #[test]
    fn missing_names_what_the_broker_did_not_allow() {
        let needs = vec![
            Need {
                resource: Resource::Topic("in".into()),
                operations: vec![Read, Describe],
                why: "input",
            },
            Need {
                resource: Resource::Topic("dlq".into()),
                operations: vec![Write, Describe],
                why: "dead letters",
            },
            Need {
                resource: Resource::Group("g".into()),
                operations: vec![Read, Describe],
                why: "group",
            },
            Need {
                resource: Resource::Topic("changelog".into()),
                operations: vec![Read, Write],
                why: "changelog",
            },
        ];
        let authorized = BTreeMap::from([
            (
                Resource::Topic("in".into()),
                Authorized::Operations(vec![Read, Describe]),
            ),
            (
                Resource::Topic("dlq".into()),
                Authorized::Operations(vec![Describe, Read]),
            ),
            (Resource::Group("g".into()), Authorized::Refused),
            (Resource::Topic("changelog".into()), Authorized::Unknown),
        ]);
        let found = missing(&needs, &authorized);
        assert_eq!(
            found,
            vec![
                Missing {
                    resource: Resource::Topic("dlq".into()),
                    operations: vec![Write],
                    why: "dead letters"
                },
                Missing {
                    resource: Resource::Group("g".into()),
                    operations: vec![Read, Describe],
                    why: "group"
                },
            ]
        );
        let error = AclError::Missing {
            principal: "User:orderly".into(),
            bootstrap: "b:9093".into(),
            missing: found,
        };
        let text = error.to_string();
        assert!(
            text.starts_with(
                "User:orderly lacks ACLs orderly needs: Write on topic dlq (dead letters)"
            ),
            "{text}"
        );
        assert!(
            text.contains("--allow-principal User:orderly --operation Write --topic dlq"),
            "{text}"
        );
        assert!(
            text.contains(
                "--operation Read --operation Describe --resource-pattern-type prefixed --group g"
            ),
            "{text}"
        );
    }

    #[test]
    fn failures_are_sorted_by_what_refused() {
        let config = config();
        let auth = "no answer; last client error: sasl_ssl://b:9093/bootstrap: SASL authentication error: \
                    Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512";
        assert!(matches!(
            AclError::from_failure(&config, auth.into()),
            AclError::Authentication { .. }
        ));
        let tls = "last client error: sasl_ssl://b:9093/bootstrap: SSL handshake failed: error:0A000086:SSL \
                   routines::certificate verify failed: broker certificate could not be verified";
        let error = AclError::from_failure(&config, tls.into());
        assert!(matches!(error, AclError::Tls { .. }) && error.is_refusal());
        let away = AclError::from_failure(
            &config,
            "no answer from the cluster before the timeout".into(),
        );
        assert!(!away.is_refusal());
    }

    #[test]
    fn a_resource_the_broker_said_nothing_about_is_passed_over() {
        let needs = vec![Need {
            resource: Resource::Topic("t".into()),
            operations: vec![Write],
            why: "x",
        }];
        assert!(missing(&needs, &BTreeMap::new()).is_empty());
    }
}
