//! What the HTTP endpoint needs from the processor: its identity, and who in
//! the group owns a partition (for `/state`'s 421 answer), read from the
//! group's metadata (DescribeConsumerGroups, either protocol) and cached
//! briefly.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::context::OrderlyContext;
use super::{ProcessError, Shared};
use crate::http::{GroupOwners, HttpContext, Member};
use crate::partitioner::Partitioner;
use crate::telemetry::status::Identity;

/// How long one reading of the group's members is reused.
const CACHE_FOR: Duration = Duration::from_secs(5);

pub fn http_context(shared: &Arc<Shared>, consumer: &Arc<BaseConsumer<OrderlyContext>>) -> Result<HttpContext, ProcessError> {
    let config = &shared.config;
    let partitioner = Partitioner::from_name(&config.kafka.input_partitioner).map_err(ProcessError::Config)?;
    let identity = Identity {
        group: config.kafka.group_id.clone(),
        topic: shared.topic.clone(),
        instance: format!("{}/{}", crate::kafka::hostname(), std::process::id()),
        outbox_enabled: shared.outbox.is_some(),
    };
    let owners = Arc::new(ConsumerOwners {
        consumer: Arc::downgrade(consumer),
        group: config.kafka.group_id.clone(),
        topic: shared.topic.clone(),
        cache: Mutex::new(None),
    });
    // A revoke blocks the poll loop for up to the shutdown deadline.
    let stall_limit = Duration::from_millis(config.processing.shutdown_timeout_ms) + Duration::from_secs(10);
    Ok(HttpContext::new(shared.telemetry.clone(), shared.store.clone(), identity, partitioner, owners, stall_limit))
}


type Assignments = Vec<(Member, Vec<i32>)>;

struct ConsumerOwners {
    consumer: Weak<BaseConsumer<OrderlyContext>>,
    group: String,
    topic: String,
    cache: Mutex<Option<(Instant, Arc<Assignments>)>>,
}

impl ConsumerOwners {
    fn assignments(&self) -> Result<Arc<Assignments>, String> {
        let mut cache = self.cache.lock().map_err(|_| "cache lock poisoned".to_string())?;
        if let Some((at, cached)) = cache.as_ref() {
            if at.elapsed() < CACHE_FOR {
                return Ok(cached.clone());
            }
        }
        let consumer = self.consumer.upgrade().ok_or("the consumer is closed")?;
        let members = crate::group_members::describe_group(consumer.client(), &self.group, Duration::from_secs(2)).map_err(|e| e.to_string())?;
        let out: Assignments = members
            .into_iter()
            .map(|m| {
                let partitions = m.assignment.iter().filter(|(t, _)| *t == self.topic).map(|(_, p)| *p).collect();
                (Member { member_id: m.member_id, client_id: m.client_id, host: m.host }, partitions)
            })
            .collect();
        let out = Arc::new(out);
        *cache = Some((Instant::now(), out.clone()));
        Ok(out)
    }
}

impl GroupOwners for ConsumerOwners {
    fn owner(&self, partition: i32) -> Result<Option<Member>, String> {
        Ok(self.assignments()?.iter().find(|(_, partitions)| partitions.contains(&partition)).map(|(m, _)| m.clone()))
    }
}
