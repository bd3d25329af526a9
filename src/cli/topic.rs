//! `tern topic list|describe|create|delete|alter-config`.

use std::collections::BTreeMap;

use anyhow::Context;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreateTopicsRequest, DeleteTopicsRequest, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;

use super::client;
use super::client::Client;
use super::commands::{check, key_value, Connection, TopicCommand};
use super::output;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

pub async fn run(connection: &Connection, command: TopicCommand) -> anyhow::Result<()> {
    let mut client = client::connect(connection).await?;
    match command {
        TopicCommand::List => list(&mut client, connection.json).await,
        TopicCommand::Describe { name } => describe(&mut client, &name, connection.json).await,
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => {
            create(
                &mut client,
                &name,
                partitions,
                replication_factor,
                &configs,
                connection.json,
            )
            .await
        }
        TopicCommand::Delete { name } => delete(&mut client, &name, connection.json).await,
        TopicCommand::AlterConfig { name, set, delete } => {
            alter_configs(
                &mut client,
                RESOURCE_TOPIC,
                &name,
                &set,
                &delete,
                connection.json,
            )
            .await
        }
    }
}

pub async fn metadata(
    client: &mut Client,
    topics: Option<&[&str]>,
) -> anyhow::Result<MetadataResponse> {
    let request = MetadataRequest::default()
        .with_topics(topics.map(|t| {
            t.iter()
                .map(|n| MetadataRequestTopic::default().with_name(Some(name(n))))
                .collect()
        }))
        .with_allow_auto_topic_creation(false);
    Ok(client.send(request, 12).await?.1)
}

async fn list(client: &mut Client, as_json: bool) -> anyhow::Result<()> {
    let response = metadata(client, None).await?;
    let mut topics: Vec<(String, usize, usize)> = response
        .topics
        .iter()
        .filter(|t| t.error_code == 0)
        .map(|t| {
            let rf = t.partitions.first().map_or(0, |p| p.replica_nodes.len());
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.partitions.len(),
                rf,
            )
        })
        .collect();
    topics.sort();
    if as_json {
        let value: Vec<_> = topics
            .iter()
            .map(|(n, p, rf)| json!({"name": n, "partitions": p, "replication_factor": rf}))
            .collect();
        return output::json(&json!(value));
    }
    let rows: Vec<Vec<String>> = topics
        .iter()
        .map(|(n, p, rf)| vec![n.clone(), p.to_string(), rf.to_string()])
        .collect();
    output::table(&["TOPIC", "PARTITIONS", "REPLICATION"], &rows);
    Ok(())
}

/// `(earliest, latest)` offsets of each partition, from each partition's leader.
async fn offsets(
    client: &mut Client,
    topic: &str,
    partitions: &[i32],
) -> anyhow::Result<BTreeMap<i32, (i64, i64)>> {
    let earliest = super::client::offsets_from_leaders(client, topic, partitions, -2).await?;
    let latest = super::client::offsets_from_leaders(client, topic, partitions, -1).await?;
    Ok(partitions
        .iter()
        .map(|p| {
            let found = |m: &BTreeMap<i32, i64>| m.get(p).copied().unwrap_or(-1);
            (*p, (found(&earliest), found(&latest)))
        })
        .collect())
}

async fn describe(client: &mut Client, topic: &str, as_json: bool) -> anyhow::Result<()> {
    let response = metadata(client, Some(&[topic])).await?;
    let described = response.topics.first().context("empty metadata response")?;
    check(described.error_code, None, &format!("topic '{topic}'"))?;
    let partition_ids: Vec<i32> = described
        .partitions
        .iter()
        .map(|p| p.partition_index)
        .collect();
    let offsets = offsets(client, topic, &partition_ids).await?;
    let configs_request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(RESOURCE_TOPIC)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(None)]);
    let (_, configs) = client.send(configs_request, 4).await?;
    let overrides: Vec<(String, String)> = configs
        .results
        .iter()
        .flat_map(|r| r.configs.iter())
        .filter(|c| c.config_source == 1)
        .map(|c| {
            (
                c.name.to_string(),
                c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
            )
        })
        .collect();
    let mut partitions: Vec<_> = described.partitions.iter().collect();
    partitions.sort_by_key(|p| p.partition_index);
    if as_json {
        let parts: Vec<_> = partitions
            .iter()
            .map(|p| {
                let (earliest, latest) =
                    offsets.get(&p.partition_index).copied().unwrap_or((-1, -1));
                json!({
                    "partition": p.partition_index,
                    "leader": p.leader_id.0,
                    "replicas": p.replica_nodes.iter().map(|b| b.0).collect::<Vec<_>>(),
                    "isr": p.isr_nodes.iter().map(|b| b.0).collect::<Vec<_>>(),
                    "earliest_offset": earliest,
                    "latest_offset": latest,
                })
            })
            .collect();
        let configs: BTreeMap<_, _> = overrides.into_iter().collect();
        return output::json(&json!({
            "name": topic,
            "topic_id": described.topic_id.to_string(),
            "partitions": parts,
            "configs": configs,
        }));
    }
    println!(
        "Topic: {topic}  Id: {}  Partitions: {}",
        described.topic_id,
        partitions.len()
    );
    for (k, v) in &overrides {
        println!("Config: {k}={v}");
    }
    let rows: Vec<Vec<String>> = partitions
        .iter()
        .map(|p| {
            let (earliest, latest) = offsets.get(&p.partition_index).copied().unwrap_or((-1, -1));
            let ids = |v: &[kafka_protocol::messages::BrokerId]| {
                v.iter()
                    .map(|b| b.0.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            };
            vec![
                p.partition_index.to_string(),
                p.leader_id.0.to_string(),
                ids(&p.replica_nodes),
                ids(&p.isr_nodes),
                earliest.to_string(),
                latest.to_string(),
            ]
        })
        .collect();
    output::table(
        &[
            "PARTITION",
            "LEADER",
            "REPLICAS",
            "ISR",
            "EARLIEST",
            "LATEST",
        ],
        &rows,
    );
    Ok(())
}

async fn create(
    client: &mut Client,
    topic: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[String],
    as_json: bool,
) -> anyhow::Result<()> {
    let configs = configs
        .iter()
        .map(|c| {
            let (k, v) = key_value(c)?;
            Ok(CreatableTopicConfig::default()
                .with_name(StrBytes::from_string(k))
                .with_value(Some(StrBytes::from_string(v))))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(name(topic))
            .with_num_partitions(partitions)
            .with_replication_factor(replication_factor)
            .with_configs(configs)]);
    let (_, response) = client.send(request, 7).await?;
    let result = response
        .topics
        .first()
        .context("empty CreateTopics response")?;
    check(
        result.error_code,
        result.error_message.as_deref(),
        &format!("creating '{topic}'"),
    )?;
    if as_json {
        return output::json(&json!({
            "name": topic,
            "topic_id": result.topic_id.to_string(),
            "partitions": result.num_partitions,
            "replication_factor": result.replication_factor,
        }));
    }
    println!(
        "Created topic {topic} ({} partitions)",
        result.num_partitions
    );
    Ok(())
}

async fn delete(client: &mut Client, topic: &str, as_json: bool) -> anyhow::Result<()> {
    let version = client.version_for(kafka_protocol::messages::ApiKey::DeleteTopics, 6)?;
    let request = if version >= 6 {
        DeleteTopicsRequest::default().with_topics(vec![
            DeleteTopicState::default().with_name(Some(name(topic)))
        ])
    } else {
        DeleteTopicsRequest::default().with_topic_names(vec![name(topic)])
    }
    .with_timeout_ms(30_000);
    let (_, response) = client.send(request, version).await?;
    let result = response
        .responses
        .first()
        .context("empty DeleteTopics response")?;
    check(
        result.error_code,
        result.error_message.as_deref(),
        &format!("deleting '{topic}'"),
    )?;
    if as_json {
        return output::json(&json!({"name": topic, "deleted": true}));
    }
    println!("Deleted topic {topic}");
    Ok(())
}

/// DescribeConfigs/IncrementalAlterConfigs resource types.
pub(super) const RESOURCE_TOPIC: i8 = 2;
pub(super) const RESOURCE_GROUP: i8 = 32;

/// Sets and deletes configs of one resource (a topic or a group) with
/// IncrementalAlterConfigs.
pub(super) async fn alter_configs(
    client: &mut Client,
    resource_type: i8,
    resource: &str,
    set: &[String],
    delete: &[String],
    as_json: bool,
) -> anyhow::Result<()> {
    let mut configs = Vec::new();
    for raw in set {
        let (k, v) = key_value(raw)?;
        configs.push(
            AlterableConfig::default()
                .with_name(StrBytes::from_string(k))
                .with_config_operation(0)
                .with_value(Some(StrBytes::from_string(v))),
        );
    }
    for key in delete {
        configs.push(
            AlterableConfig::default()
                .with_name(StrBytes::from_string(key.clone()))
                .with_config_operation(1),
        );
    }
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_string(resource.to_string()))
            .with_configs(configs),
    ]);
    let (_, response) = client.send(request, 1).await?;
    let result = response
        .responses
        .first()
        .context("empty IncrementalAlterConfigs response")?;
    check(
        result.error_code,
        result.error_message.as_deref(),
        &format!("altering '{resource}'"),
    )?;
    if as_json {
        return output::json(&json!({"name": resource, "altered": true}));
    }
    println!("Altered configs of {resource}");
    Ok(())
}
