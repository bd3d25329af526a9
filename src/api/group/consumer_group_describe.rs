//! ConsumerGroupDescribe (key 69, v0–1): a KIP-848 group's epochs, assignor and
//! members with their current and target assignments. DESCRIBE on the group, as Kafka
//! checks it; a group that is not a consumer group is GROUP_ID_NOT_FOUND.

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, TopicName,
};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{str_bytes, AUTHORIZED_OPERATIONS_OMITTED};
use crate::group::consumer::{self, ConsumerGroup};
use crate::security::acl::{AclOperation, ResourceType};

/// `MemberType` (v1): the member speaks the consumer protocol.
const CONSUMER_MEMBER: i8 = 1;
/// A member still speaking the classic protocol (online migration; KIP-1099).
const CLASSIC_MEMBER: i8 = 0;

pub async fn handle(
    ctx: &RequestContext,
    request: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let groups = request
        .group_ids
        .iter()
        .map(|group_id| {
            let described = DescribedGroup::default()
                .with_group_id(group_id.clone())
                .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
            let refuse = |error: ResponseError, message: String| {
                described
                    .clone()
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(message)))
            };
            if !ctx.authorize_group(AclOperation::Describe, group_id) {
                return refuse(
                    ResponseError::GroupAuthorizationFailed,
                    "not authorized".into(),
                );
            }
            if !ctx.services.groups.is_coordinator_for(group_id) {
                return refuse(ResponseError::NotCoordinator, "not the coordinator".into());
            }
            let Some(group) = ctx.services.groups.describe_consumer(group_id) else {
                return refuse(
                    ResponseError::GroupIdNotFound,
                    format!("Group {} is not a consumer group.", group_id.as_str()),
                );
            };
            let described = match request.include_authorized_operations {
                true => described.with_authorized_operations(
                    ctx.authorized_operations(ResourceType::Group, group_id),
                ),
                false => described,
            };
            described
                .with_group_state(str_bytes(group.state().name()))
                .with_group_epoch(group.group_epoch())
                .with_assignment_epoch(group.assignment_epoch())
                .with_assignor_name(str_bytes(group.assignor_name()))
                .with_members(members(ctx, &group))
        })
        .collect();
    ConsumerGroupDescribeResponse::default().with_groups(groups)
}

fn members(ctx: &RequestContext, group: &ConsumerGroup) -> Vec<Member> {
    let empty = consumer::Assignment::new();
    group
        .members()
        .map(|m| {
            let member = Member::default()
                .with_member_id(str_bytes(m.member_id.clone()))
                .with_instance_id(m.instance_id.clone().map(str_bytes))
                .with_rack_id(m.rack_id.clone().map(str_bytes))
                .with_member_epoch(m.member_epoch)
                .with_client_id(str_bytes(m.client_id.clone()))
                .with_client_host(str_bytes(m.client_host.clone()))
                .with_subscribed_topic_names(
                    m.subscribed_topic_names
                        .iter()
                        .map(|n| TopicName(str_bytes(n.clone())))
                        .collect(),
                )
                .with_subscribed_topic_regex(m.subscribed_topic_regex.clone().map(str_bytes))
                .with_assignment(assignment(group, &m.assigned))
                .with_target_assignment(assignment(
                    group,
                    group.target_of(&m.member_id).unwrap_or(&empty),
                ));
            match ctx.api_version >= 1 {
                true => member.with_member_type(match m.classic {
                    Some(_) => CLASSIC_MEMBER,
                    None => CONSUMER_MEMBER,
                }),
                false => member,
            }
        })
        .collect()
}

fn assignment(group: &ConsumerGroup, partitions: &consumer::Assignment) -> Assignment {
    Assignment::default().with_topic_partitions(
        partitions
            .iter()
            .map(|(id, ps)| {
                TopicPartitions::default()
                    .with_topic_id(*id)
                    .with_topic_name(TopicName(str_bytes(
                        group.topic_name(id).unwrap_or_default().to_string(),
                    )))
                    .with_partitions(ps.iter().copied().collect())
            })
            .collect(),
    )
}
