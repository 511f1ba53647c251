//! The changelog topic at start-up: created when missing (the input topic's
//! partition count, `cleanup.policy=compact`), refused when its partition
//! count differs from the input topic's.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;
use tracing::info;

use super::ChangelogError;
use crate::config::Config;

/// What start-up found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TopicState {
    Created,
    Exists,
}

/// Partitions of `topic` as the cluster's metadata lists them (`None` when
/// it does not exist). Lists every topic, so no broker auto-creates it.
fn partitions(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    timeout: Duration,
) -> Result<Option<usize>, ChangelogError> {
    let metadata =
        admin
            .inner()
            .fetch_metadata(None, timeout)
            .map_err(|e| ChangelogError::Topic {
                topic: topic.into(),
                message: format!("cannot read cluster metadata: {e}"),
            })?;
    Ok(crate::kafka::partition_count(&metadata, topic))
}

/// Creates the changelog topic when missing, with `input_partitions`
/// partitions and `cleanup.policy=compact`; refuses one whose partition
/// count differs.
pub(crate) async fn ensure(
    config: &Config,
    topic: &str,
    input_partitions: usize,
) -> Result<TopicState, ChangelogError> {
    let timeout = Duration::from_secs(10);
    let admin: AdminClient<DefaultClientContext> = crate::kafka::admin_config(config)
        .create()
        .map_err(|e| ChangelogError::Topic {
            topic: topic.into(),
            message: format!("cannot create an admin client: {e}"),
        })?;
    if let Some(found) = partitions(&admin, topic, timeout)? {
        return check_count(topic, found, input_partitions, &config.kafka.input_topic)
            .map(|()| TopicState::Exists);
    }
    let replication = config.kafka.changelog_replication_factor;
    let partitions_i32 = i32::try_from(input_partitions).map_err(|_| ChangelogError::Topic {
        topic: topic.into(),
        message: "too many partitions".into(),
    })?;
    let new = NewTopic::new(topic, partitions_i32, TopicReplication::Fixed(replication))
        .set("cleanup.policy", "compact");
    let results = admin
        .create_topics(
            [&new],
            &AdminOptions::new().operation_timeout(Some(timeout)),
        )
        .await
        .map_err(|e| ChangelogError::Topic {
            topic: topic.into(),
            message: format!("cannot create it: {e}"),
        })?;
    for result in results {
        match result {
            Ok(_) => {}
            // Another instance created it first.
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(ChangelogError::Topic {
                    topic: topic.into(),
                    message: format!(
                        "cannot create it ({code}); create it with {input_partitions} partitions and \
                         cleanup.policy=compact, e.g. kafka-topics.sh --create --topic {topic} --partitions \
                         {input_partitions} --config cleanup.policy=compact"
                    ),
                })
            }
        }
    }
    // Creation propagates through the cluster's metadata.
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(found) = partitions(&admin, topic, timeout)? {
            check_count(topic, found, input_partitions, &config.kafka.input_topic)?;
            info!(
                topic,
                partitions = found,
                replication,
                "created the changelog topic (cleanup.policy=compact)"
            );
            return Ok(TopicState::Created);
        }
        if Instant::now() >= deadline {
            return Err(ChangelogError::Topic {
                topic: topic.into(),
                message: "created, but it did not appear in the metadata within 10 s".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn check_count(
    topic: &str,
    found: usize,
    wanted: usize,
    input_topic: &str,
) -> Result<(), ChangelogError> {
    if found == wanted {
        return Ok(());
    }
    Err(ChangelogError::Topic {
        topic: topic.into(),
        message: format!(
            "it has {found} partitions and the input topic {input_topic} has {wanted}; they must match (changelog \
             partition N holds the state of input partition N). Use another kafka.changelog_topic, or recreate this \
             one with {wanted} partitions (every instance's store then rebuilds from the input topic)"
        ),
    })
}
