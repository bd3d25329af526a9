//! JoinGroup (key 11, v0–9): waits until the group's rebalance completes. v4+ members
//! without an id first get MEMBER_ID_REQUIRED (KIP-394); v5+ may be static members.
//! A classic member of a live consumer group (online migration) is answered by the
//! consumer group, which assigns.

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use crate::group::state::JoinRequest;
use crate::security::acl::AclOperation;

pub async fn handle(ctx: &RequestContext, request: JoinGroupRequest) -> JoinGroupResponse {
    if request.group_id.is_empty() {
        return JoinGroupResponse::default()
            .with_error_code(ResponseError::InvalidGroupId.code())
            .with_generation_id(-1)
            .with_member_id(request.member_id);
    }
    // READ on the group, as Kafka's handler checks it first.
    if !ctx.authorize_group(AclOperation::Read, &request.group_id) {
        return JoinGroupResponse::default()
            .with_error_code(kafka_protocol::ResponseError::GroupAuthorizationFailed.code())
            .with_generation_id(-1)
            .with_member_id(request.member_id);
    }
    let join = JoinRequest {
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.as_ref().map(|s| s.to_string()),
        client_id: ctx.client_id.clone().unwrap_or_default(),
        client_host: format!("/{}", ctx.peer.ip()),
        session_timeout_ms: request.session_timeout_ms,
        // v0 has no rebalance timeout: it is the session timeout.
        rebalance_timeout_ms: if ctx.api_version >= 1 {
            request.rebalance_timeout_ms
        } else {
            request.session_timeout_ms
        },
        protocol_type: request.protocol_type.to_string(),
        protocols: request
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect(),
        require_known_member_id: ctx.api_version >= 4,
        supports_skip_assignment: ctx.api_version >= 9,
    };
    let waiting = std::time::Instant::now();
    let groups = &ctx.services.groups;
    let result = if groups.is_live_consumer_group(&request.group_id) {
        // A classic member of a consumer group (online migration): answered at once.
        let (topics, racks) = super::topics_image(ctx).await;
        groups
            .classic_join_to_consumer(&request.group_id, join, &topics, racks)
            .await
    } else {
        groups.join(&request.group_id, join).await
    };
    // Joining is mostly waiting for the rebalance: count it as remote time.
    ctx.remote_wait_us.fetch_add(
        waiting.elapsed().as_micros() as u64,
        std::sync::atomic::Ordering::Relaxed,
    );
    let members = result
        .members
        .into_iter()
        .map(|(member_id, instance, metadata)| {
            JoinGroupResponseMember::default()
                .with_member_id(str_bytes(member_id))
                .with_group_instance_id(instance.map(str_bytes))
                .with_metadata(metadata)
        })
        .collect();
    JoinGroupResponse::default()
        .with_error_code(errors::code(result.error.map(|e| errors::group_error(&e))))
        .with_generation_id(result.generation_id)
        .with_protocol_type(result.protocol_type.map(str_bytes))
        .with_protocol_name(result.protocol_name.map(str_bytes))
        .with_leader(str_bytes(result.leader))
        .with_member_id(str_bytes(result.member_id))
        .with_members(members)
        .with_skip_assignment(ctx.api_version >= 9 && result.skip_assignment)
}
