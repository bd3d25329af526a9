//! ShareGroupDescribe (key 77, v1): a share group's state, epoch and members with
//! their partitions. DESCRIBE on the group; a group of another kind is
//! GROUP_ID_NOT_FOUND, as Kafka answers.

use kafka_protocol::messages::share_group_describe_response::{
    Assignment, DescribedGroup, Member, TopicPartitions,
};
use kafka_protocol::messages::{ShareGroupDescribeRequest, ShareGroupDescribeResponse, TopicName};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{str_bytes, AUTHORIZED_OPERATIONS_OMITTED};
use crate::group::share::ShareGroup;
use crate::security::acl::{AclOperation, ResourceType};

/// The assignor share groups use (Kafka's `simple`).
const ASSIGNOR: &str = "simple";

pub async fn handle(
    ctx: &RequestContext,
    request: ShareGroupDescribeRequest,
) -> ShareGroupDescribeResponse {
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
            let Some(group) = ctx.services.groups.describe_share(group_id) else {
                return refuse(
                    ResponseError::GroupIdNotFound,
                    format!("Group {} is not a share group.", group_id.as_str()),
                );
            };
            let described = match request.include_authorized_operations {
                true => described.with_authorized_operations(
                    ctx.authorized_operations(ResourceType::Group, group_id),
                ),
                false => described,
            };
            described
                .with_group_state(str_bytes(group.state_name()))
                .with_group_epoch(group.group_epoch())
                .with_assignment_epoch(group.group_epoch())
                .with_assignor_name(str_bytes(ASSIGNOR))
                .with_members(members(&group))
        })
        .collect();
    ShareGroupDescribeResponse::default().with_groups(groups)
}

fn members(group: &ShareGroup) -> Vec<Member> {
    group
        .members()
        .map(|m| {
            Member::default()
                .with_member_id(str_bytes(m.member_id.clone()))
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
                .with_assignment(
                    Assignment::default().with_topic_partitions(
                        m.assigned
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
                    ),
                )
        })
        .collect()
}
