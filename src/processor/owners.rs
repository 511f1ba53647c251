//! What the HTTP endpoint needs from the processor: its identity, and who in
//! the group owns a partition (for `/state`'s 421 answer), read from the
//! group's metadata (ListGroups/DescribeGroups) and cached briefly.

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
        let list = consumer.fetch_group_list(Some(&self.group), Duration::from_secs(2)).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for group in list.groups().iter().filter(|g| g.name() == self.group) {
            for member in group.members() {
                let partitions = member.assignment().map(|bytes| assigned_partitions(bytes, &self.topic)).unwrap_or_default();
                let who = Member { member_id: member.id().into(), client_id: member.client_id().into(), host: member.client_host().into() };
                out.push((who, partitions));
            }
        }
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

/// The partitions of `topic` in a consumer-protocol member assignment
/// (version: i16, [topic: string, [partition: i32]], user data). Anything
/// malformed reads as no partitions.
fn assigned_partitions(bytes: &[u8], topic: &str) -> Vec<i32> {
    let mut reader = Reader { bytes, at: 0 };
    let mut out = Vec::new();
    let parsed = (|| -> Option<()> {
        reader.i16()?;
        for _ in 0..reader.i32()?.max(0) {
            let name = reader.string()?;
            let count = reader.i32()?.max(0);
            for _ in 0..count {
                let partition = reader.i32()?;
                if name == topic {
                    out.push(partition);
                }
            }
        }
        Some(())
    })();
    if parsed.is_none() {
        out.clear();
    }
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let slice = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(slice)
    }
    fn i16(&mut self) -> Option<i16> {
        self.take(2).map(|b| i16::from_be_bytes([b[0], b[1]]))
    }
    fn i32(&mut self) -> Option<i32> {
        self.take(4).map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn string(&mut self) -> Option<&'a str> {
        let len = usize::try_from(self.i16()?).ok()?;
        std::str::from_utf8(self.take(len)?).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(topics: &[(&str, &[i32])]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&(topics.len() as i32).to_be_bytes());
        for (name, partitions) in topics {
            b.extend_from_slice(&(name.len() as i16).to_be_bytes());
            b.extend_from_slice(name.as_bytes());
            b.extend_from_slice(&(partitions.len() as i32).to_be_bytes());
            for p in *partitions {
                b.extend_from_slice(&p.to_be_bytes());
            }
        }
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b
    }

    #[test]
    fn reads_member_assignments() {
        let bytes = assignment(&[("other", &[0, 1]), ("orders", &[2, 5])]);
        assert_eq!(assigned_partitions(&bytes, "orders"), vec![2, 5]);
        assert_eq!(assigned_partitions(&bytes, "missing"), Vec::<i32>::new());
        assert_eq!(assigned_partitions(&bytes[..bytes.len() - 9], "orders"), Vec::<i32>::new(), "truncated reads as none");
        assert_eq!(assigned_partitions(&[], "orders"), Vec::<i32>::new());
    }
}
