//! DescribeShareGroupOffsets (key 90, v0): each share-partition's start offset (the
//! first record not yet acknowledged or archived), from the group's coordinator.
//! DESCRIBE on the group, and on each topic (else TOPIC_AUTHORIZATION_FAILED for its
//! partitions); no topics named means every topic the group holds state for. A
//! partition with no state answers -1.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_share_group_offsets_response::{
    DescribeShareGroupOffsetsResponseGroup as Group,
    DescribeShareGroupOffsetsResponsePartition as Partition,
    DescribeShareGroupOffsetsResponseTopic as Topic,
};
use kafka_protocol::messages::{
    DescribeShareGroupOffsetsRequest, DescribeShareGroupOffsetsResponse, TopicName,
};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::super::context::RequestContext;
use super::super::str_bytes;
use crate::group::share::ShareState;
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeShareGroupOffsetsRequest,
) -> DescribeShareGroupOffsetsResponse {
    let mut groups = Vec::with_capacity(request.groups.len());
    for wanted in &request.groups {
        let group = Group::default().with_group_id(wanted.group_id.clone());
        let refuse = |error: ResponseError, message: String| {
            group
                .clone()
                .with_error_code(error.code())
                .with_error_message(Some(str_bytes(message)))
        };
        if !ctx.authorize_group(AclOperation::Describe, &wanted.group_id) {
            groups.push(refuse(
                ResponseError::GroupAuthorizationFailed,
                "not authorized".into(),
            ));
            continue;
        }
        if !ctx.services.groups.is_coordinator_for(&wanted.group_id) {
            groups.push(refuse(
                ResponseError::NotCoordinator,
                "not the coordinator".into(),
            ));
            continue;
        }
        let Some(states) = ctx.services.groups.share_states(&wanted.group_id) else {
            groups.push(refuse(
                ResponseError::GroupIdNotFound,
                format!("Group {} is not a share group.", wanted.group_id.as_str()),
            ));
            continue;
        };
        let by_topic: BTreeMap<Uuid, BTreeMap<i32, ShareState>> =
            states
                .into_iter()
                .fold(BTreeMap::new(), |mut acc, (topic, partition, state)| {
                    acc.entry(topic).or_default().insert(partition, state);
                    acc
                });
        let topics = match &wanted.topics {
            Some(named) => {
                let mut topics = Vec::with_capacity(named.len());
                for t in named {
                    let spec = ctx.services.store.topic(&t.topic_name).await;
                    topics.push(describe_topic(
                        ctx,
                        &t.topic_name,
                        spec.map(|s| s.topic_id),
                        &t.partitions,
                        &by_topic,
                    ));
                }
                topics
            }
            None => {
                let mut topics = Vec::with_capacity(by_topic.len());
                for (topic_id, partitions) in &by_topic {
                    let Some(spec) = ctx.services.store.topic_by_id(*topic_id).await else {
                        continue;
                    };
                    if !ctx.authorize_topic(AclOperation::Describe, &spec.name) {
                        continue;
                    }
                    let indexes: Vec<i32> = partitions.keys().copied().collect();
                    let name = TopicName(str_bytes(spec.name));
                    topics.push(describe_topic(
                        ctx,
                        &name,
                        Some(*topic_id),
                        &indexes,
                        &by_topic,
                    ));
                }
                topics
            }
        };
        groups.push(group.with_topics(topics));
    }
    DescribeShareGroupOffsetsResponse::default().with_groups(groups)
}

fn describe_topic(
    ctx: &RequestContext,
    name: &TopicName,
    topic_id: Option<Uuid>,
    partitions: &[i32],
    states: &BTreeMap<Uuid, BTreeMap<i32, ShareState>>,
) -> Topic {
    let error = if !ctx.authorize_topic(AclOperation::Describe, name) {
        Some(ResponseError::TopicAuthorizationFailed)
    } else if topic_id.is_none() {
        Some(ResponseError::UnknownTopicOrPartition)
    } else {
        None
    };
    let of_topic = topic_id.and_then(|id| states.get(&id));
    let partitions = partitions
        .iter()
        .map(|&index| {
            let partition = Partition::default()
                .with_partition_index(index)
                .with_start_offset(-1)
                .with_leader_epoch(-1);
            if let Some(error) = error {
                return partition.with_error_code(error.code());
            }
            match of_topic.and_then(|p| p.get(&index)) {
                Some(state) => partition
                    .with_start_offset(state.snapshot.start_offset)
                    .with_leader_epoch(state.leader_epoch),
                None => partition,
            }
        })
        .collect();
    Topic::default()
        .with_topic_name(name.clone())
        .with_topic_id(topic_id.unwrap_or_default())
        .with_partitions(partitions)
}
