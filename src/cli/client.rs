//! The admin commands' use of [`crate::client::Client`]: connecting as `tern-cli`, and
//! questions that need more than one broker.

use std::collections::HashMap;

pub use crate::client::Client;
use kafka_protocol::protocol::StrBytes;

/// Connects to the bootstrap broker as `tern-cli`, secured as `connection` says.
pub async fn connect(connection: &super::commands::Connection) -> anyhow::Result<Client> {
    let security = connection.security()?;
    Ok(Client::connect_with(&connection.bootstrap, "tern-cli", &security).await?)
}

/// The address of each partition's leader of `topic`, as `bootstrap`'s Metadata says
/// (partitions without a live leader are left out); `None` when the topic does not exist.
pub async fn leaders(
    bootstrap: &mut Client,
    topic: &str,
) -> anyhow::Result<Option<std::collections::BTreeMap<i32, String>>> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, TopicName};

    let name = TopicName(StrBytes::from_string(topic.to_string()));
    let request = MetadataRequest::default()
        .with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(name))
        ]))
        .with_allow_auto_topic_creation(false);
    let (_, metadata) = bootstrap.send(request, 12).await?;
    let addresses: HashMap<i32, String> = metadata
        .brokers
        .iter()
        .map(|b| (b.node_id.0, format!("{}:{}", b.host, b.port)))
        .collect();
    let Some(found) = metadata.topics.iter().find(|t| t.error_code == 0) else {
        return Ok(None);
    };
    Ok(Some(
        found
            .partitions
            .iter()
            .filter_map(|p| Some((p.partition_index, addresses.get(&p.leader_id.0)?.clone())))
            .collect(),
    ))
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
    use kafka_protocol::messages::{ListOffsetsRequest, TopicName};

    let name = TopicName(StrBytes::from_string(topic.to_string()));
    let mut by_leader: HashMap<String, Vec<i32>> = HashMap::new();
    for (partition, address) in leaders(bootstrap, topic).await?.unwrap_or_default() {
        if partitions.contains(&partition) {
            by_leader.entry(address).or_default().push(partition);
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for (address, wanted) in by_leader {
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
            bootstrap.sibling(&address).await?.send(request, 7).await?.1
        };
        for p in response.topics.iter().flat_map(|t| t.partitions.iter()) {
            if p.error_code == 0 {
                out.insert(p.partition_index, p.offset);
            }
        }
    }
    Ok(out)
}
