//! SyncGroup (key 14, v0–5): the leader hands out assignments; everyone waits for them.

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use crate::security::acl::AclOperation;

pub async fn handle(ctx: &RequestContext, request: SyncGroupRequest) -> SyncGroupResponse {
    if request.group_id.is_empty() {
        return SyncGroupResponse::default()
            .with_error_code(kafka_protocol::ResponseError::InvalidGroupId.code());
    }
    // READ on the group, as Kafka's handler checks it first.
    if !ctx.authorize_group(AclOperation::Read, &request.group_id) {
        return SyncGroupResponse::default()
            .with_error_code(kafka_protocol::ResponseError::GroupAuthorizationFailed.code());
    }
    let assignments = request
        .assignments
        .iter()
        .map(|a| (a.member_id.to_string(), a.assignment.clone()))
        .collect();
    let instance = request.group_instance_id.as_ref().map(|s| s.to_string());
    let protocol = (
        request.protocol_type.as_deref(),
        request.protocol_name.as_deref(),
    );
    let waiting = std::time::Instant::now();
    let result = ctx
        .services
        .groups
        .sync(
            &request.group_id,
            &request.member_id,
            instance.as_deref(),
            request.generation_id,
            protocol,
            assignments,
        )
        .await;
    ctx.remote_wait_us.fetch_add(
        waiting.elapsed().as_micros() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    SyncGroupResponse::default()
        .with_error_code(errors::code(result.error.map(|e| errors::group_error(&e))))
        .with_protocol_type(result.protocol_type.map(str_bytes))
        .with_protocol_name(result.protocol_name.map(str_bytes))
        .with_assignment(result.assignment)
}
