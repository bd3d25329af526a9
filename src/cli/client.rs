//! The admin commands' use of [`crate::client::Client`]: connecting as `tern-cli`, and
//! questions that need more than one broker.

use std::collections::HashMap;

pub use crate::client::Client;
use kafka_protocol::protocol::StrBytes;

/// Connects to the bootstrap broker as `tern-cli`, secured as `connection` says.
pub async fn connect(connection: &super::Connection) -> anyhow::Result<Client> {
    let security = connection.security()?;
    Ok(Client::connect_with(&connection.bootstrap, "tern-cli", &security).await?)
}

/// Offsets of `partitions` of `topic` at `timestamp` (-1 latest, -2 earliest), each asked
/// of the partition's leader (found through `bootstrap`): in a cluster only the leader
/// answers ListOffsets. Partitions without a reachable leader are left out.
pub async fn offsets_from_leaders(
    bootstrap: &mut Client,
    topic: &str,
    partitions: &[i32],
    timestamp: i64,
) -> anyhow::Result<std::collections::BTreeMap<i32, i64>> {
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{ListOffsetsRequest, MetadataRequest, TopicName};

    let name = TopicName(StrBytes::from_string(topic.to_string()));
    let request = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name.clone()))
        ]))
        .with_allow_auto_topic_creation(false);
    let (_, metadata) = bootstrap.send(request, 12).await?;
    let addresses: HashMap<i32, String> = metadata
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
        .collect();
    let mut by_leader: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in metadata.topics.iter().flat_map(|t| t.partitions.iter()) {
        if partitions.contains(&p.partition_index) {
            by_leader
                .entry(p.leader_id.0)
                .or_default()
                .push(p.partition_index);
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for (leader, wanted) in by_leader {
        let Some(address) = addresses.get(&leader) else {
            continue;
        };
        let request = ListOffsetsRequest::default()
            .with_replica_id((-1).into())
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(name.clone())
                .with_partitions(
                    wanted
                        .iter()
                        .map(|&p| {
                            ListOffsetsPartition::default()
                                .with_partition_index(p)
                                .with_timestamp(timestamp)
                        })
                        .collect(),
                )]);
        let response = if address == bootstrap.address() {
            bootstrap.send(request, 7).await?.1
        } else {
            bootstrap.sibling(address).await?.send(request, 7).await?.1
        };
        for p in response.topics.iter().flat_map(|t| t.partitions.iter()) {
            if p.error_code == 0 {
                out.insert(p.partition_index, p.offset);
            }
        }
    }
    Ok(out)
}
