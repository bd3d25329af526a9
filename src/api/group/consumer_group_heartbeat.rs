//! ConsumerGroupHeartbeat (key 68, v0–1): a KIP-848 member joins, heartbeats, reports
//! what it owns and leaves; the answer carries its member epoch and, when it changed,
//! its assignment. The decisions are `group::consumer`'s; this reads the request,
//! checks it as Kafka's `throwIfConsumerGroupHeartbeatRequestIsInvalid` does, and
//! authorizes READ on the group and DESCRIBE on every subscribed topic name.

use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::{ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use crate::group::consumer::{self, Heartbeat};
use crate::security::acl::{AclOperation, ResourceType};

pub async fn handle(
    ctx: &RequestContext,
    request: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let group_id = request.group_id.to_string();
    if let Err(message) = check(ctx.api_version, &request) {
        return refused(ResponseError::InvalidRequest, Some(message));
    }
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
    let (topics, racks) = super::topics_image(ctx).await;
    // v0 lets the coordinator name a joining member.
    let member_id = match request.member_id.is_empty() {
        true => uuid::Uuid::new_v4().to_string(),
        false => request.member_id.to_string(),
    };
    let heartbeat = Heartbeat {
        member_id,
        member_epoch: request.member_epoch,
        instance_id: request.instance_id.as_ref().map(|s| s.to_string()),
        rack_id: request.rack_id.as_ref().map(|s| s.to_string()),
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        subscribed_topic_names: request
            .subscribed_topic_names
            .as_ref()
            .map(|names| names.iter().map(|n| n.to_string()).collect()),
        subscribed_topic_regex: request
            .subscribed_topic_regex
            .as_ref()
            .map(|s| s.to_string()),
        server_assignor: request.server_assignor.as_ref().map(|s| s.to_string()),
        owned: request.topic_partitions.as_ref().map(|owned| {
            owned
                .iter()
                .map(|tp| (tp.topic_id, tp.partitions.iter().copied().collect()))
                .collect()
        }),
        client_id: ctx.client_id.clone().unwrap_or_default(),
        client_host: format!("/{}", ctx.peer.ip()),
    };
    match ctx
        .services
        .groups
        .consumer_heartbeat(&group_id, heartbeat, &topics, racks)
        .await
    {
        Ok(answer) => ConsumerGroupHeartbeatResponse::default()
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
        Err(error) => refused(errors::group_error(&error), Some(error.to_string())),
    }
}

fn refused(error: ResponseError, message: Option<String>) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse::default()
        .with_error_code(error.code())
        .with_error_message(message.map(str_bytes))
        .with_member_epoch(-1)
}

/// Kafka's request checks (v1: the client names its member id, KIP-1082).
fn check(version: i16, r: &ConsumerGroupHeartbeatRequest) -> Result<(), String> {
    let empty =
        |s: &Option<kafka_protocol::protocol::StrBytes>| s.as_ref().is_some_and(|s| s.is_empty());
    if r.group_id.is_empty() {
        return Err("GroupId can't be empty.".into());
    }
    if empty(&r.instance_id) {
        return Err("InstanceId can't be empty.".into());
    }
    if empty(&r.rack_id) {
        return Err("RackId can't be empty.".into());
    }
    if version >= 1 && r.member_id.is_empty() {
        return Err("MemberId can't be empty.".into());
    }
    match r.member_epoch {
        consumer::JOIN_EPOCH => {
            if r.rebalance_timeout_ms == -1 {
                return Err("RebalanceTimeoutMs must be provided in first request.".into());
            }
            if !r.topic_partitions.as_ref().is_some_and(Vec::is_empty) {
                return Err("TopicPartitions must be empty when (re-)joining.".into());
            }
            let names = r
                .subscribed_topic_names
                .as_ref()
                .is_some_and(|n| !n.is_empty());
            let regex = r
                .subscribed_topic_regex
                .as_ref()
                .is_some_and(|n| !n.is_empty());
            if !names && !regex {
                return Err(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                        .into(),
                );
            }
        }
        consumer::STATIC_LEAVE_EPOCH if r.instance_id.is_none() => {
            return Err("InstanceId can't be null.".into());
        }
        epoch
            if epoch > 0
                || epoch == consumer::LEAVE_EPOCH
                || epoch == consumer::STATIC_LEAVE_EPOCH =>
        {
            if r.member_id.is_empty() {
                return Err("MemberId can't be empty.".into());
            }
        }
        _ => return Err("MemberEpoch is invalid.".into()),
    }
    Ok(())
}
