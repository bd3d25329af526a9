//! ShareGroupHeartbeat (key 76, v1): a share-group member joins, heartbeats and
//! leaves; the answer carries its member epoch and, when it changed, its partitions.
//! The decisions are `group::share::group`'s; this checks the request as Kafka's
//! `throwIfShareGroupHeartbeatRequestIsInvalid` does and authorizes READ on the group
//! and DESCRIBE on every subscribed topic.

use kafka_protocol::messages::share_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use crate::group::consumer::TopicsImage;
use crate::group::share::{group::LEAVE_EPOCH, ShareHeartbeat, JOIN_EPOCH};
use crate::security::acl::{AclOperation, ResourceType};

pub async fn handle(
    ctx: &RequestContext,
    request: ShareGroupHeartbeatRequest,
) -> ShareGroupHeartbeatResponse {
    if let Err(message) = check(&request) {
        return refused(ResponseError::InvalidRequest, Some(message));
    }
    let group_id = request.group_id.to_string();
    if !ctx.authorize_group(AclOperation::Read, &group_id) {
        return refused(ResponseError::GroupAuthorizationFailed, None);
    }
    if let Some(names) = &request.subscribed_topic_names {
        let denied = names
            .iter()
            .any(|n| !ctx.authorize(AclOperation::Describe, ResourceType::Topic, n));
        if denied {
            return refused(ResponseError::TopicAuthorizationFailed, None);
        }
    }
    let topics: TopicsImage = ctx
        .services
        .store
        .topics()
        .await
        .into_iter()
        .map(|t| (t.name, (t.topic_id, t.partitions)))
        .collect();
    let heartbeat = ShareHeartbeat {
        member_id: request.member_id.to_string(),
        member_epoch: request.member_epoch,
        rack_id: request.rack_id.as_ref().map(|s| s.to_string()),
        subscribed_topic_names: request
            .subscribed_topic_names
            .as_ref()
            .map(|names| names.iter().map(|n| n.to_string()).collect()),
        client_id: ctx.client_id.clone().unwrap_or_default(),
        client_host: format!("/{}", ctx.peer.ip()),
    };
    match ctx
        .services
        .groups
        .share_heartbeat(&group_id, heartbeat, &topics)
    {
        Ok(answer) => ShareGroupHeartbeatResponse::default()
            .with_member_id(Some(str_bytes(answer.member_id)))
            .with_member_epoch(answer.member_epoch)
            .with_heartbeat_interval_ms(answer.heartbeat_interval_ms)
            .with_assignment(answer.assignment.map(|assignment| {
                Assignment::default().with_topic_partitions(
                    assignment
                        .into_iter()
                        .map(|(topic_id, partitions)| {
                            TopicPartitions::default()
                                .with_topic_id(topic_id)
                                .with_partitions(partitions.into_iter().collect())
                        })
                        .collect(),
                )
            })),
        Err(error) => {
            let message = match error {
                crate::group::state::GroupError::GroupIdNotFound => {
                    format!("Group {group_id} is not a share group.")
                }
                other => other.to_string(),
            };
            refused(errors::group_error(&error), Some(message))
        }
    }
}

fn refused(error: ResponseError, message: Option<String>) -> ShareGroupHeartbeatResponse {
    ShareGroupHeartbeatResponse::default()
        .with_error_code(error.code())
        .with_error_message(message.map(str_bytes))
        .with_member_epoch(LEAVE_EPOCH)
}

/// Kafka's request checks (v1: the client names its member id).
fn check(r: &ShareGroupHeartbeatRequest) -> Result<(), String> {
    if r.group_id.is_empty() {
        return Err("GroupId can't be empty.".into());
    }
    if r.rack_id.as_ref().is_some_and(|s| s.is_empty()) {
        return Err("RackId can't be empty.".into());
    }
    if r.member_id.is_empty() {
        return Err("MemberId can't be empty.".into());
    }
    match r.member_epoch {
        JOIN_EPOCH => {
            if r.subscribed_topic_names.as_ref().is_none_or(Vec::is_empty) {
                return Err("SubscribedTopicNames must be set in first request.".into());
            }
            Ok(())
        }
        LEAVE_EPOCH => Ok(()),
        epoch if epoch > 0 => Ok(()),
        _ => Err("MemberEpoch is invalid.".into()),
    }
}
