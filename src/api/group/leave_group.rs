//! LeaveGroup (key 13, v0–5): one member (v0–2) or a batch by member or instance id (v3+).

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use super::super::context::RequestContext;
use super::super::errors;
use crate::security::acl::AclOperation;

pub async fn handle(ctx: &RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse {
    if request.group_id.is_empty() {
        return LeaveGroupResponse::default()
            .with_error_code(kafka_protocol::ResponseError::InvalidGroupId.code());
    }
    // READ on the group, as Kafka's handler checks it first.
    if !ctx.authorize_group(AclOperation::Read, &request.group_id) {
        return LeaveGroupResponse::default()
            .with_error_code(kafka_protocol::ResponseError::GroupAuthorizationFailed.code());
    }
    let groups = &ctx.services.groups;
    if ctx.api_version < 3 {
        let result = groups
            .leave(&request.group_id, &[(request.member_id.to_string(), None)])
            .await;
        let error = result.into_iter().next().and_then(Result::err);
        return LeaveGroupResponse::default()
            .with_error_code(errors::code(error.map(|e| errors::group_error(&e))));
    }
    let members: Vec<(String, Option<String>)> = request
        .members
        .iter()
        .map(|m| {
            (
                m.member_id.to_string(),
                m.group_instance_id.as_ref().map(|s| s.to_string()),
            )
        })
        .collect();
    let results = groups.leave(&request.group_id, &members).await;
    let responses = request
        .members
        .iter()
        .zip(results)
        .map(|(m, r)| {
            MemberResponse::default()
                .with_member_id(m.member_id.clone())
                .with_group_instance_id(m.group_instance_id.clone())
                .with_error_code(errors::code(r.err().map(|e| errors::group_error(&e))))
        })
        .collect();
    LeaveGroupResponse::default().with_members(responses)
}
