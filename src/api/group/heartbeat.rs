//! Heartbeat (key 12, v0–4): keeps a member's session alive and tells it of rebalances.

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use super::super::context::RequestContext;
use super::super::errors;
use crate::security::acl::AclOperation;

pub async fn handle(ctx: &RequestContext, request: HeartbeatRequest) -> HeartbeatResponse {
    if request.group_id.is_empty() {
        return HeartbeatResponse::default()
            .with_error_code(kafka_protocol::ResponseError::InvalidGroupId.code());
    }
    // READ on the group, as Kafka's handler checks it first.
    if !ctx.authorize_group(AclOperation::Read, &request.group_id) {
        return HeartbeatResponse::default()
            .with_error_code(kafka_protocol::ResponseError::GroupAuthorizationFailed.code());
    }
    let instance = request.group_instance_id.as_ref().map(|s| s.to_string());
    let result = ctx.services.groups.heartbeat(
        &request.group_id,
        &request.member_id,
        instance.as_deref(),
        request.generation_id,
    );
    HeartbeatResponse::default()
        .with_error_code(errors::code(result.err().map(|e| errors::group_error(&e))))
}
