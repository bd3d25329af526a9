//! `tern group list|describe|configs|alter-config|delete|reset-offsets`: groups from every broker (classic,
//! KIP-848 consumer and KIP-932 share groups), and a group's members, assignments,
//! committed offsets and lag (log end offset minus committed offset; for a share group
//! its start offsets). A group is described with ConsumerGroupDescribe first, as
//! Kafka's admin client does, then ShareGroupDescribe, then DescribeGroups.

use std::collections::BTreeMap;

use anyhow::Context;
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup;
use kafka_protocol::messages::{
    AlterShareGroupOffsetsRequest, ConsumerGroupDescribeRequest, DeleteGroupsRequest,
    DescribeConfigsRequest, DescribeGroupsRequest, DescribeShareGroupOffsetsRequest,
    FindCoordinatorRequest, GroupId, ListGroupsRequest, OffsetCommitRequest, OffsetFetchRequest,
    ShareGroupDescribeRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use serde_json::json;

use super::client;
use super::client::Client;
use super::commands::{check, Connection, GroupCommand};
use super::output;
use super::topic;

pub async fn run(connection: &Connection, command: GroupCommand) -> anyhow::Result<()> {
    let mut client = client::connect(connection).await?;
    match command {
        GroupCommand::List => list(&mut client, connection.json).await,
        GroupCommand::Describe { group } => describe(&mut client, &group, connection.json).await,
        GroupCommand::Delete { group } => delete(&mut client, &group).await,
        GroupCommand::Configs { group } => configs(&mut client, &group, connection.json).await,
        GroupCommand::AlterConfig { group, set, delete } => {
            topic::alter_configs(
                &mut client,
                topic::RESOURCE_GROUP,
                &group,
                &set,
                &delete,
                connection.json,
            )
            .await
        }
        GroupCommand::ResetOffsets {
            group,
            topic,
            to_earliest,
            to_latest,
            to_offset,
        } => {
            let target = match (to_earliest, to_latest, to_offset) {
                (true, _, _) => ResetTo::Earliest,
                (_, true, _) => ResetTo::Latest,
                (_, _, Some(offset)) => ResetTo::Offset(offset),
                _ => anyhow::bail!("say where: --to-earliest, --to-latest or --to-offset N"),
            };
            reset_offsets(&mut client, &group, &topic, target).await
        }
    }
}

/// Every config of a group (DescribeConfigs of its GROUP resource): value, and whether
/// the group sets it or runs with the broker's.
async fn configs(client: &mut Client, group: &str, as_json: bool) -> anyhow::Result<()> {
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(topic::RESOURCE_GROUP)
            .with_resource_name(StrBytes::from_string(group.to_string()))
            .with_configuration_keys(None)]);
    let (_, response) = client.send(request, 4).await?;
    let result = response
        .results
        .first()
        .context("empty DescribeConfigs response")?;
    check(
        result.error_code,
        result.error_message.as_deref(),
        &format!("describing the configs of '{group}'"),
    )?;
    let rows: Vec<(String, String, &str)> = result
        .configs
        .iter()
        .map(|c| {
            let source = if c.config_source == GROUP_CONFIG_SOURCE {
                "group"
            } else {
                "broker"
            };
            (
                c.name.to_string(),
                c.value.as_ref().map(|v| v.to_string()).unwrap_or_default(),
                source,
            )
        })
        .collect();
    if as_json {
        let configs: Vec<_> = rows
            .iter()
            .map(|(name, value, source)| json!({"name": name, "value": value, "source": source}))
            .collect();
        return output::json(&json!({"group": group, "configs": configs}));
    }
    let table: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(name, value, source)| vec![name, value, source.to_string()])
        .collect();
    output::table(&["CONFIG", "VALUE", "SET BY"], &table);
    Ok(())
}

/// DescribeConfigs' source of a value the group itself sets (DYNAMIC_GROUP_CONFIG).
const GROUP_CONFIG_SOURCE: i8 = 8;

/// One partition's row in `group describe`.
struct OffsetRow {
    topic: String,
    partition: i32,
    committed: Option<i64>,
    log_end: Option<i64>,
    lag: Option<i64>,
    member: String,
}

/// Each broker coordinates some groups: ask them all.
async fn list(client: &mut Client, as_json: bool) -> anyhow::Result<()> {
    let brokers = topic::metadata(client, Some(&[])).await?.brokers;
    let mut groups: BTreeMap<String, (String, String, String)> = BTreeMap::new();
    for broker in &brokers {
        let address = format!("{}:{}", broker.host, broker.port);
        let mut other = client.sibling(&address).await?;
        let (_, response) = other.send(ListGroupsRequest::default(), 5).await?;
        check(
            response.error_code,
            None,
            &format!("listing groups on {address}"),
        )?;
        for g in response.groups {
            groups.insert(
                g.group_id.to_string(),
                (
                    g.protocol_type.to_string(),
                    g.group_state.to_string(),
                    g.group_type.to_string(),
                ),
            );
        }
    }
    if as_json {
        let value: Vec<_> = groups
            .iter()
            .map(|(g, (p, s, t))| json!({"group": g, "type": t, "protocol_type": p, "state": s}))
            .collect();
        return output::json(&json!(value));
    }
    let rows: Vec<Vec<String>> = groups
        .into_iter()
        .map(|(g, (p, s, t))| vec![g, t, s, p])
        .collect();
    output::table(&["GROUP", "TYPE", "STATE", "PROTOCOL TYPE"], &rows);
    Ok(())
}

/// A group as `describe` shows it, whichever kind it is.
struct Described {
    kind: &'static str,
    state: String,
    protocol_type: String,
    /// The classic group's protocol, or the consumer group's assignor.
    protocol: String,
    /// The consumer group's group and assignment epochs.
    epochs: Option<(i32, i32)>,
    members: Vec<DescribedMember>,
}

struct DescribedMember {
    member_id: String,
    client_id: String,
    client_host: String,
    instance_id: Option<String>,
    member_epoch: Option<i32>,
    /// In a consumer group: `consumer`, or `classic` for a member not yet migrated.
    protocol: Option<&'static str>,
    assignment: Vec<(String, i32)>,
}

/// ConsumerGroupDescribe; `None` when the group is not a consumer group.
async fn describe_consumer(
    coordinator: &mut Client,
    group_id: &GroupId,
) -> anyhow::Result<Option<Described>> {
    let request = ConsumerGroupDescribeRequest::default().with_group_ids(vec![group_id.clone()]);
    let (_, response) = coordinator.send(request, 1).await?;
    let d = response
        .groups
        .first()
        .context("empty ConsumerGroupDescribe response")?;
    if d.error_code == ResponseError::GroupIdNotFound.code() {
        return Ok(None);
    }
    check(
        d.error_code,
        d.error_message.as_deref(),
        "describing the consumer group",
    )?;
    let members = d
        .members
        .iter()
        .map(|m| DescribedMember {
            member_id: m.member_id.to_string(),
            client_id: m.client_id.to_string(),
            client_host: m.client_host.to_string(),
            instance_id: m.instance_id.as_ref().map(|s| s.to_string()),
            member_epoch: Some(m.member_epoch),
            // KIP-1099's member type: 0 classic, 1 consumer.
            protocol: Some(match m.member_type {
                0 => "classic",
                _ => "consumer",
            }),
            assignment: m
                .assignment
                .topic_partitions
                .iter()
                .flat_map(|tp| {
                    let name = tp.topic_name.to_string();
                    tp.partitions.iter().map(move |p| (name.clone(), *p))
                })
                .collect(),
        })
        .collect();
    Ok(Some(Described {
        kind: "consumer",
        state: d.group_state.to_string(),
        protocol_type: "consumer".into(),
        protocol: d.assignor_name.to_string(),
        epochs: Some((d.group_epoch, d.assignment_epoch)),
        members,
    }))
}

/// ShareGroupDescribe; `None` when the group is not a share group.
async fn describe_share(
    coordinator: &mut Client,
    group_id: &GroupId,
) -> anyhow::Result<Option<Described>> {
    let request = ShareGroupDescribeRequest::default().with_group_ids(vec![group_id.clone()]);
    let (_, response) = coordinator.send(request, 1).await?;
    let d = response
        .groups
        .first()
        .context("empty ShareGroupDescribe response")?;
    if d.error_code == ResponseError::GroupIdNotFound.code() {
        return Ok(None);
    }
    check(
        d.error_code,
        d.error_message.as_deref(),
        "describing the share group",
    )?;
    let members = d
        .members
        .iter()
        .map(|m| DescribedMember {
            member_id: m.member_id.to_string(),
            client_id: m.client_id.to_string(),
            client_host: m.client_host.to_string(),
            instance_id: None,
            member_epoch: Some(m.member_epoch),
            protocol: None,
            assignment: m
                .assignment
                .topic_partitions
                .iter()
                .flat_map(|tp| {
                    let name = tp.topic_name.to_string();
                    tp.partitions.iter().map(move |p| (name.clone(), *p))
                })
                .collect(),
        })
        .collect();
    Ok(Some(Described {
        kind: "share",
        state: d.group_state.to_string(),
        protocol_type: "share".into(),
        protocol: d.assignor_name.to_string(),
        epochs: Some((d.group_epoch, d.assignment_epoch)),
        members,
    }))
}

/// A share group's start offsets (DescribeShareGroupOffsets), by topic and partition.
async fn share_start_offsets(
    coordinator: &mut Client,
    group_id: &GroupId,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
        DescribeShareGroupOffsetsRequestGroup::default()
            .with_group_id(group_id.clone())
            .with_topics(None),
    ]);
    let (_, response) = coordinator.send(request, 0).await?;
    let g = response
        .groups
        .first()
        .context("empty DescribeShareGroupOffsets response")?;
    check(
        g.error_code,
        g.error_message.as_deref(),
        "fetching the share group's start offsets",
    )?;
    Ok(g.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .filter(|p| p.error_code == 0 && p.start_offset >= 0)
                .map(|p| {
                    (
                        (t.topic_name.to_string(), p.partition_index),
                        p.start_offset,
                    )
                })
        })
        .collect())
}

/// The group's coordinator, found through `client`.
async fn coordinator(client: &mut Client, group: &str) -> anyhow::Result<Client> {
    let (_, found) = client
        .send(
            FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.to_string())),
            3,
        )
        .await?;
    check(
        found.error_code,
        found.error_message.as_deref(),
        &format!("finding the coordinator of '{group}'"),
    )?;
    Ok(client
        .sibling(&format!("{}:{}", found.host, found.port))
        .await?)
}

async fn delete(client: &mut Client, group: &str) -> anyhow::Result<()> {
    let mut coordinator = coordinator(client, group).await?;
    let group_id = GroupId(StrBytes::from_string(group.to_string()));
    let (_, response) = coordinator
        .send(
            DeleteGroupsRequest::default().with_groups_names(vec![group_id]),
            2,
        )
        .await?;
    let result = response
        .results
        .first()
        .context("empty DeleteGroups response")?;
    check(result.error_code, None, &format!("deleting '{group}'"))?;
    println!("Deleted group {group}");
    Ok(())
}

/// Where `reset-offsets` moves a group.
#[derive(Debug, Clone, Copy)]
enum ResetTo {
    Earliest,
    Latest,
    Offset(i64),
}

/// Moves an empty group's offsets on every partition of `topic`: a share group's start
/// offsets (AlterShareGroupOffsets), another group's committed offsets (OffsetCommit
/// as an admin, generation -1), as kafka-consumer-groups.sh --reset-offsets does.
async fn reset_offsets(
    client: &mut Client,
    group: &str,
    topic: &str,
    target: ResetTo,
) -> anyhow::Result<()> {
    let partitions: Vec<i32> = topic::metadata(client, Some(&[topic]))
        .await?
        .topics
        .first()
        .context("the topic is not in the metadata")?
        .partitions
        .iter()
        .map(|p| p.partition_index)
        .collect();
    let offsets: BTreeMap<i32, i64> = match target {
        ResetTo::Offset(offset) => partitions.iter().map(|&p| (p, offset)).collect(),
        ResetTo::Earliest => {
            super::client::offsets_from_leaders(client, topic, &partitions, -2).await?
        }
        ResetTo::Latest => {
            super::client::offsets_from_leaders(client, topic, &partitions, -1).await?
        }
    };
    let mut coordinator = coordinator(client, group).await?;
    let group_id = GroupId(StrBytes::from_string(group.to_string()));
    let name = TopicName(StrBytes::from_string(topic.to_string()));
    let share = describe_share(&mut coordinator, &group_id).await?.is_some();
    if share {
        use kafka_protocol::messages::alter_share_group_offsets_request::{
            AlterShareGroupOffsetsRequestPartition, AlterShareGroupOffsetsRequestTopic,
        };
        let request = AlterShareGroupOffsetsRequest::default()
            .with_group_id(group_id)
            .with_topics(vec![AlterShareGroupOffsetsRequestTopic::default()
                .with_topic_name(name)
                .with_partitions(
                    offsets
                        .iter()
                        .map(|(&p, &o)| {
                            AlterShareGroupOffsetsRequestPartition::default()
                                .with_partition_index(p)
                                .with_start_offset(o)
                        })
                        .collect(),
                )]);
        let (_, response) = coordinator.send(request, 0).await?;
        check(
            response.error_code,
            response.error_message.as_deref(),
            &format!("resetting '{group}'"),
        )?;
        for t in &response.responses {
            for p in &t.partitions {
                check(
                    p.error_code,
                    p.error_message.as_deref(),
                    &format!("resetting {topic}-{}", p.partition_index),
                )?;
            }
        }
    } else {
        use kafka_protocol::messages::offset_commit_request::{
            OffsetCommitRequestPartition, OffsetCommitRequestTopic,
        };
        let request = OffsetCommitRequest::default()
            .with_group_id(group_id)
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![OffsetCommitRequestTopic::default()
                .with_name(name)
                .with_partitions(
                    offsets
                        .iter()
                        .map(|(&p, &o)| {
                            OffsetCommitRequestPartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(o)
                        })
                        .collect(),
                )]);
        let (_, response) = coordinator.send(request, 8).await?;
        for t in &response.topics {
            for p in &t.partitions {
                check(
                    p.error_code,
                    None,
                    &format!("resetting {topic}-{}", p.partition_index),
                )?;
            }
        }
    }
    for (p, o) in &offsets {
        println!("{group} {topic}-{p} -> {o}");
    }
    Ok(())
}

async fn describe_classic(
    coordinator: &mut Client,
    group_id: &GroupId,
) -> anyhow::Result<Described> {
    let (_, described) = coordinator
        .send(
            DescribeGroupsRequest::default().with_groups(vec![group_id.clone()]),
            5,
        )
        .await?;
    let d = described
        .groups
        .first()
        .context("empty DescribeGroups response")?;
    check(
        d.error_code,
        d.error_message.as_deref(),
        &format!("describing '{}'", group_id.as_str()),
    )?;
    Ok(Described {
        kind: "classic",
        state: d.group_state.to_string(),
        protocol_type: d.protocol_type.to_string(),
        protocol: d.protocol_data.to_string(),
        epochs: None,
        members: d
            .members
            .iter()
            .map(|m| DescribedMember {
                member_id: m.member_id.to_string(),
                client_id: m.client_id.to_string(),
                client_host: m.client_host.to_string(),
                instance_id: m.group_instance_id.as_ref().map(|s| s.to_string()),
                member_epoch: None,
                protocol: None,
                assignment: assigned_partitions(&m.member_assignment),
            })
            .collect(),
    })
}

/// Topic partitions in a consumer-protocol assignment; nothing if it is malformed.
fn assigned_partitions(assignment: &[u8]) -> Vec<(String, i32)> {
    crate::group::consumer::embedded::decode_assignment(assignment)
        .map(|named| {
            named
                .into_iter()
                .flat_map(|(topic, ps)| ps.into_iter().map(move |p| (topic.clone(), p)))
                .collect()
        })
        .unwrap_or_default()
}

/// A group's committed offsets (OffsetFetch), by topic and partition.
async fn committed_offsets(
    coordinator: &mut Client,
    group_id: GroupId,
    group: &str,
) -> anyhow::Result<BTreeMap<(String, i32), i64>> {
    let (_, fetched) = coordinator
        .send(
            OffsetFetchRequest::default()
                .with_group_id(group_id)
                .with_topics(None),
            7,
        )
        .await?;
    check(
        fetched.error_code,
        None,
        &format!("fetching offsets of '{group}'"),
    )?;
    let mut committed = BTreeMap::new();
    for t in &fetched.topics {
        for p in &t.partitions {
            if p.committed_offset >= 0 {
                committed.insert((t.name.to_string(), p.partition_index), p.committed_offset);
            }
        }
    }
    Ok(committed)
}

async fn describe(client: &mut Client, group: &str, as_json: bool) -> anyhow::Result<()> {
    let mut coordinator = coordinator(client, group).await?;
    let group_id = GroupId(StrBytes::from_string(group.to_string()));
    let d = match describe_consumer(&mut coordinator, &group_id).await? {
        Some(described) => described,
        None => match describe_share(&mut coordinator, &group_id).await? {
            Some(described) => described,
            None => describe_classic(&mut coordinator, &group_id).await?,
        },
    };
    let committed = match d.kind {
        "share" => share_start_offsets(&mut coordinator, &group_id).await?,
        _ => committed_offsets(&mut coordinator, group_id, group).await?,
    };
    // A share group's partitions may be shared: the member column names them all.
    let mut owners: BTreeMap<(String, i32), String> = BTreeMap::new();
    for member in &d.members {
        for tp in &member.assignment {
            let owner = owners.entry(tp.clone()).or_default();
            if !owner.is_empty() {
                owner.push(',');
            }
            owner.push_str(&member.member_id);
        }
    }
    let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for (t, p) in committed.keys().chain(owners.keys()) {
        by_topic.entry(t.clone()).or_default().push(*p);
    }
    let mut log_end: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for (t, partitions) in &by_topic {
        let ends = super::client::offsets_from_leaders(client, t, partitions, -1).await?;
        for (p, offset) in ends {
            log_end.insert((t.clone(), p), offset);
        }
    }
    let mut keys: Vec<(String, i32)> = committed.keys().chain(owners.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    let rows: Vec<OffsetRow> = keys
        .into_iter()
        .map(|(topic, partition)| {
            let committed = committed.get(&(topic.clone(), partition)).copied();
            let log_end = log_end.get(&(topic.clone(), partition)).copied();
            let lag = match (committed, log_end) {
                (Some(c), Some(e)) => Some((e - c).max(0)),
                _ => None,
            };
            let member = owners
                .get(&(topic.clone(), partition))
                .cloned()
                .unwrap_or_default();
            OffsetRow {
                topic,
                partition,
                committed,
                log_end,
                lag,
                member,
            }
        })
        .collect();
    if as_json {
        let members: Vec<_> = d
            .members
            .iter()
            .map(|m| {
                json!({
                    "member_id": m.member_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "group_instance_id": m.instance_id,
                    "member_epoch": m.member_epoch,
                    "member_protocol": m.protocol,
                    "assignment": m.assignment
                        .iter()
                        .map(|(t, p)| json!({"topic": t, "partition": p}))
                        .collect::<Vec<_>>(),
                })
            })
            .collect();
        let offsets: Vec<_> = rows
            .iter()
            .map(|r| {
                json!({
                    "topic": r.topic,
                    "partition": r.partition,
                    "committed_offset": r.committed,
                    "log_end_offset": r.log_end,
                    "lag": r.lag,
                    "member": r.member,
                })
            })
            .collect();
        return output::json(&json!({
            "group": group,
            "type": d.kind,
            "state": d.state,
            "protocol_type": d.protocol_type,
            "protocol": d.protocol,
            "group_epoch": d.epochs.map(|e| e.0),
            "assignment_epoch": d.epochs.map(|e| e.1),
            "members": members,
            "offsets": offsets,
        }));
    }
    let epochs = d
        .epochs
        .map(|(g, a)| format!("  Epoch: {g} (assignment {a})"))
        .unwrap_or_default();
    println!(
        "Group: {group}  Type: {}  State: {}  Protocol: {} {}  Members: {}{epochs}",
        d.kind,
        d.state,
        d.protocol_type,
        d.protocol,
        d.members.len()
    );
    let show = |v: &Option<i64>| v.map_or("-".to_string(), |x| x.to_string());
    let table: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.topic.clone(),
                r.partition.to_string(),
                show(&r.committed),
                show(&r.log_end),
                show(&r.lag),
                r.member.clone(),
            ]
        })
        .collect();
    output::table(
        &[
            "TOPIC",
            "PARTITION",
            "COMMITTED",
            "LOG END",
            "LAG",
            "MEMBER",
        ],
        &table,
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_consumer_assignments_and_refuses_garbage() {
        // v0, one topic "t" with partitions 3 and 5, no user data.
        let mut a = vec![
            0, 0, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 5, 0xff, 0xff, 0xff,
            0xff,
        ];
        assert_eq!(
            assigned_partitions(&a),
            vec![("t".to_string(), 3), ("t".to_string(), 5)]
        );
        a.truncate(19); // partition 5 cut short
        assert!(assigned_partitions(&a).is_empty());
        assert!(assigned_partitions(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_empty());
    }
}
