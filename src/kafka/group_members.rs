//! The members of a consumer group and their assignments, through
//! librdkafka's `DescribeConsumerGroups` admin call, which speaks both group
//! protocols: DescribeGroups for a classic group, ConsumerGroupDescribe for
//! a KIP-848 `consumer` group. (rdkafka's `fetch_group_list` sends only
//! DescribeGroups, which Apache Kafka answers for a `consumer` group with no
//! members at all: a replay would not see a running member, and `/state`
//! could not name an owner.) rdkafka 0.39 does not wrap the call, so this
//! module does, over `rdkafka-sys`.

use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::bindings as rd;
use rdkafka::client::{Client, ClientContext};

/// One member of a group, as the broker describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupMember {
    pub member_id: String,
    pub client_id: String,
    pub host: String,
    /// Its assigned partitions, as (topic, partition).
    pub assignment: Vec<(String, i32)>,
}

#[derive(Debug, thiserror::Error)]
pub enum DescribeError {
    #[error("group name {0:?} contains a NUL byte")]
    BadName(String),
    #[error("describing group {group} timed out after {timeout:?}")]
    Timeout { group: String, timeout: Duration },
    #[error("describing group {group} failed: {message}")]
    Broker { group: String, message: String },
}

/// Describes `group` with `client`'s connection (any client type can send
/// admin requests). An unknown or empty group has no members.
pub(crate) fn describe_group<C: ClientContext>(
    client: &Client<C>,
    group: &str,
    timeout: Duration,
) -> Result<Vec<GroupMember>, DescribeError> {
    let name = CString::new(group).map_err(|_| DescribeError::BadName(group.to_string()))?;
    let rk = client.native_ptr();
    let timeout_ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let failed = |message: String| DescribeError::Broker {
        group: group.to_string(),
        message,
    };
    // SAFETY: `rk` is valid while `client` is borrowed. The options, queue
    // and event are created here and destroyed on every path below (the
    // guards); the group name outlives the call, which copies it. Every
    // pointer read from the result (descriptions, members, strings,
    // partition lists) is owned by the event and read before it is
    // destroyed, and checked for NULL first.
    unsafe {
        let Some(event) = ask(rk, &name, timeout_ms) else {
            return Err(DescribeError::Timeout {
                group: group.to_string(),
                timeout,
            });
        };
        if rd::rd_kafka_event_error(event.0) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
        {
            return Err(failed(text(rd::rd_kafka_event_error_string(event.0))));
        }
        let result = rd::rd_kafka_event_DescribeConsumerGroups_result(event.0);
        if result.is_null() {
            return Err(failed("no DescribeConsumerGroups result".into()));
        }
        members_of(result).map_err(failed)
    }
}

/// Sends DescribeConsumerGroups for the group `name` and waits for its
/// answer: the result event, or `None` when none came in time.
///
/// # Safety
/// `rk` is a valid client handle for the whole call.
unsafe fn ask(
    rk: *mut rd::rd_kafka_t,
    name: &CStr,
    timeout_ms: i32,
) -> Option<Guard<rd::rd_kafka_event_t>> {
    let options = Guard(
        rd::rd_kafka_AdminOptions_new(
            rk,
            rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBECONSUMERGROUPS,
        ),
        rd::rd_kafka_AdminOptions_destroy,
    );
    let mut errstr = [0 as std::ffi::c_char; 256];
    rd::rd_kafka_AdminOptions_set_request_timeout(
        options.0,
        timeout_ms,
        errstr.as_mut_ptr(),
        errstr.len(),
    );
    let queue = Guard(rd::rd_kafka_queue_new(rk), rd::rd_kafka_queue_destroy);
    let mut groups = [name.as_ptr()];
    rd::rd_kafka_DescribeConsumerGroups(rk, groups.as_mut_ptr(), 1, options.0, queue.0);
    // The request timeout bounds the answer; a little more for the queue.
    let event = rd::rd_kafka_queue_poll(queue.0, timeout_ms.saturating_add(1_000));
    (!event.is_null()).then(|| Guard(event, rd::rd_kafka_event_destroy))
}

/// The members of every group description in `result` (a group the broker
/// does not know has none); the error's text when a description failed.
///
/// # Safety
/// `result` is a valid DescribeConsumerGroups result, alive for the call.
unsafe fn members_of(
    result: *const rd::rd_kafka_DescribeConsumerGroups_result_t,
) -> Result<Vec<GroupMember>, String> {
    let mut count = 0usize;
    let descriptions = rd::rd_kafka_DescribeConsumerGroups_result_groups(result, &mut count);
    let mut members = Vec::new();
    for i in 0..count {
        let description = *descriptions.add(i);
        if description.is_null() {
            continue;
        }
        let error = rd::rd_kafka_ConsumerGroupDescription_error(description);
        if !error.is_null() {
            let code = rd::rd_kafka_error_code(error);
            if code == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_GROUP_ID_NOT_FOUND {
                continue;
            }
            return Err(text(rd::rd_kafka_error_string(error)));
        }
        for m in 0..rd::rd_kafka_ConsumerGroupDescription_member_count(description) {
            let member = rd::rd_kafka_ConsumerGroupDescription_member(description, m);
            if !member.is_null() {
                members.push(member_of(member));
            }
        }
    }
    Ok(members)
}

/// One member's description, copied.
///
/// # Safety
/// `member` is a valid, non-NULL member description, alive for the call.
unsafe fn member_of(member: *const rd::rd_kafka_MemberDescription_t) -> GroupMember {
    let mut assignment = Vec::new();
    let assigned = rd::rd_kafka_MemberDescription_assignment(member);
    if !assigned.is_null() {
        let list = rd::rd_kafka_MemberAssignment_partitions(assigned);
        if !list.is_null() && !(*list).elems.is_null() {
            for e in 0..usize::try_from((*list).cnt).unwrap_or(0) {
                let elem = &*(*list).elems.add(e);
                assignment.push((text(elem.topic), elem.partition));
            }
        }
    }
    GroupMember {
        member_id: text(rd::rd_kafka_MemberDescription_consumer_id(member)),
        client_id: text(rd::rd_kafka_MemberDescription_client_id(member)),
        host: text(rd::rd_kafka_MemberDescription_host(member)),
        assignment,
    }
}

/// This client's member id in its consumer group, as the broker gave it
/// (`None` before it joined, or for a client that is not a group member).
pub(crate) fn own_member_id<C: ClientContext>(client: &Client<C>) -> Option<String> {
    let rk = client.native_ptr();
    // SAFETY: `rk` is valid while `client` is borrowed; the returned string
    // is allocated by librdkafka, copied here, and freed with its allocator.
    unsafe {
        let id = rd::rd_kafka_memberid(rk);
        if id.is_null() {
            return None;
        }
        let owned = text(id);
        rd::rd_kafka_mem_free(rk, id.cast());
        (!owned.is_empty()).then_some(owned)
    }
}

/// A C string owned by librdkafka, copied (empty when NULL).
///
/// # Safety
/// `ptr` is NULL or a valid NUL-terminated string.
unsafe fn text(ptr: *const std::ffi::c_char) -> String {
    if ptr.is_null() {
        String::new()
    } else {
        CStr::from_ptr(ptr).to_string_lossy().into_owned()
    }
}

/// Destroys a librdkafka object when dropped.
struct Guard<T>(*mut T, unsafe extern "C" fn(*mut T));

impl<T> Drop for Guard<T> {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the pointer came from the matching constructor and is
            // destroyed once, here.
            unsafe { (self.1)(self.0) }
        }
    }
}
