//! Who in the group owns a partition (for `/state`'s 421 answer), read from
//! the group's metadata (DescribeConsumerGroups, either protocol) and cached
//! briefly; available to the HTTP endpoint before the consumer exists.

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};

use super::context::OrderlyContext;
use crate::config::Config;
use crate::observe::{GroupOwners, Member, OwnersError};

/// How long one reading of the group's members is reused.
const CACHE_FOR: Duration = Duration::from_secs(5);

/// The group's owners, once [`OwnersSlot::attach`] gave it the consumer.
#[derive(Default)]
pub(crate) struct OwnersSlot(OnceLock<ConsumerOwners>);

impl OwnersSlot {
    pub(crate) fn attach(&self, config: &Config, consumer: &Arc<BaseConsumer<OrderlyContext>>) {
        let _ = self.0.set(ConsumerOwners {
            consumer: Arc::downgrade(consumer),
            group: config.kafka.group_id.clone(),
            topic: config.kafka.input_topic.clone(),
            cache: Mutex::new(None),
        });
    }
}

/// Each member's id and its partitions of the input topic.
pub(crate) type MemberPartitions = Vec<(String, Vec<i32>)>;

impl OwnersSlot {
    /// Each member's id and its partitions of the input topic (cached like
    /// the owners), and this member's own id: what standbys are chosen by.
    pub(crate) fn members(&self) -> Result<(Option<String>, MemberPartitions), OwnersError> {
        let owners = self.0.get().ok_or(OwnersError::NotJoined)?;
        let consumer = owners.consumer.upgrade().ok_or(OwnersError::Closed)?;
        let me = crate::kafka::group_members::own_member_id(consumer.client());
        let members = owners
            .assignments()?
            .iter()
            .map(|(member, partitions)| (member.member_id.clone(), partitions.clone()))
            .collect();
        Ok((me, members))
    }
}

impl GroupOwners for OwnersSlot {
    fn owner(&self, partition: i32) -> Result<Option<Member>, OwnersError> {
        self.0.get().ok_or(OwnersError::NotJoined)?.owner(partition)
    }
}

type Assignments = Vec<(Member, Vec<i32>)>;

struct ConsumerOwners {
    consumer: Weak<BaseConsumer<OrderlyContext>>,
    group: String,
    topic: String,
    cache: Mutex<Option<(Instant, Arc<Assignments>)>>,
}

impl ConsumerOwners {
    fn assignments(&self) -> Result<Arc<Assignments>, OwnersError> {
        // A panic while the lock was held leaves at worst a stale reading,
        // which expires like any other.
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((at, cached)) = cache.as_ref() {
            if at.elapsed() < CACHE_FOR {
                return Ok(cached.clone());
            }
        }
        let consumer = self.consumer.upgrade().ok_or(OwnersError::Closed)?;
        let members = crate::kafka::group_members::describe_group(
            consumer.client(),
            &self.group,
            Duration::from_secs(2),
        )?;
        let out: Assignments = members
            .into_iter()
            .map(|m| {
                let partitions = m
                    .assignment
                    .iter()
                    .filter(|(t, _)| *t == self.topic)
                    .map(|(_, p)| *p)
                    .collect();
                (
                    Member {
                        member_id: m.member_id,
                        client_id: m.client_id,
                        host: m.host,
                    },
                    partitions,
                )
            })
            .collect();
        let out = Arc::new(out);
        *cache = Some((Instant::now(), out.clone()));
        Ok(out)
    }
}

impl GroupOwners for ConsumerOwners {
    fn owner(&self, partition: i32) -> Result<Option<Member>, OwnersError> {
        Ok(self
            .assignments()?
            .iter()
            .find(|(_, partitions)| partitions.contains(&partition))
            .map(|(m, _)| m.clone()))
    }
}
