//! DescribeGroups (key 15, v0–6): state, protocol and members; an unknown group is
//! described as "Dead", as Kafka does. With an authorizer each group needs DESCRIBE, else
//! GROUP_AUTHORIZATION_FAILED with empty state, protocol and members (Kafka's
//! `DescribeGroupsResponse.groupError`); from v3, `include_authorized_operations` fills
//! KIP-430's bits of each group answered without error.

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};

use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{str_bytes, AUTHORIZED_OPERATIONS_OMITTED};
use crate::group::state::GroupState;
use crate::security::acl::{AclOperation, ResourceType};

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeGroupsRequest,
) -> DescribeGroupsResponse {
    let groups = request
        .groups
        .iter()
        .map(|group_id| {
            let described = DescribedGroup::default()
                .with_group_id(group_id.clone())
                .with_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED);
            // KIP-430's bits go on every group answered without an error.
            let with_operations = |described: DescribedGroup| {
                if ctx.api_version >= 3 && request.include_authorized_operations {
                    described.with_authorized_operations(
                        ctx.authorized_operations(ResourceType::Group, group_id),
                    )
                } else {
                    described
                }
            };
            if !ctx.authorize_group(AclOperation::Describe, group_id) {
                return described
                    .with_group_state(str_bytes(""))
                    .with_error_code(ResponseError::GroupAuthorizationFailed.code());
            }
            if !ctx.services.groups.is_coordinator_for(group_id) {
                return described
                    .with_group_state(str_bytes(""))
                    .with_error_code(ResponseError::NotCoordinator.code());
            }
            let Some(group) = ctx.services.groups.describe(group_id) else {
                // KIP-1043: from v6 an unknown group is an error (still described as Dead).
                let described = described.with_group_state(str_bytes("Dead"));
                return if ctx.api_version >= 6 {
                    described
                        .with_error_code(ResponseError::GroupIdNotFound.code())
                        .with_error_message(Some(str_bytes(format!(
                            "group '{}' not found",
                            group_id.as_str()
                        ))))
                } else {
                    with_operations(described)
                };
            };
            // Kafka reports the chosen protocol only once the group is Stable.
            let protocol_data = if group.state == GroupState::Stable {
                group.protocol_name.clone()
            } else {
                String::new()
            };
            let members = group
                .members
                .iter()
                .map(|m| {
                    let member = DescribedGroupMember::default()
                        .with_member_id(str_bytes(m.member_id.clone()))
                        .with_client_id(str_bytes(m.client_id.clone()))
                        .with_client_host(str_bytes(m.client_host.clone()))
                        .with_member_metadata(
                            m.protocols
                                .iter()
                                .find(|(n, _)| *n == group.protocol_name)
                                .map(|(_, md)| md.clone())
                                .unwrap_or_default(),
                        )
                        .with_member_assignment(m.assignment.clone());
                    if ctx.api_version >= 4 {
                        member.with_group_instance_id(m.group_instance_id.clone().map(str_bytes))
                    } else {
                        member
                    }
                })
                .collect();
            with_operations(described)
                .with_group_state(str_bytes(group.state.name()))
                .with_protocol_type(str_bytes(group.protocol_type))
                .with_protocol_data(str_bytes(protocol_data))
                .with_members(members)
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}
