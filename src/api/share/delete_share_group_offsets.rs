//! DeleteShareGroupOffsets (key 92, v0): an operator removes an empty share group's
//! state for whole topics, so it starts them afresh (`share.auto.offset.reset`).
//! DELETE on the group and READ on each topic, as Kafka checks them; a group with
//! members is NON_EMPTY_GROUP; a topic the group holds no state for is
//! UNKNOWN_TOPIC_OR_PARTITION "There is no offset information to delete." (Kafka's
//! `sharePartitionsEligibleForOffsetDeletion`). Refusals carry Kafka's messages.

use kafka_protocol::messages::delete_share_group_offsets_response::DeleteShareGroupOffsetsResponseTopic as Topic;
use kafka_protocol::messages::{DeleteShareGroupOffsetsRequest, DeleteShareGroupOffsetsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: DeleteShareGroupOffsetsRequest,
) -> DeleteShareGroupOffsetsResponse {
    let group_id = request.group_id.to_string();
    let refuse = |error: ResponseError, message: &str| {
        DeleteShareGroupOffsetsResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)))
    };
    if !ctx.authorize_group(AclOperation::Delete, &group_id) {
        return refuse(
            ResponseError::GroupAuthorizationFailed,
            "Group authorization failed.",
        );
    }
    if group_id.is_empty() {
        return refuse(ResponseError::InvalidGroupId, "The group id is invalid.");
    }
    let Some(states) = ctx.services.groups.share_states(&group_id) else {
        if !ctx.services.groups.is_coordinator_for(&group_id) {
            return refuse(
                ResponseError::NotCoordinator,
                "This is not the correct coordinator.",
            );
        }
        return refuse(
            ResponseError::GroupIdNotFound,
            &format!("Group {group_id} is not a share group."),
        );
    };
    let mut responses = Vec::with_capacity(request.topics.len());
    let mut deleted = Vec::new();
    for topic in &request.topics {
        let spec = ctx.services.store.topic(&topic.topic_name).await;
        let topic_id = spec.as_ref().map(|s| s.topic_id).unwrap_or_default();
        let held: Vec<_> = states
            .iter()
            .filter(|(id, _, _)| spec.is_some() && *id == topic_id)
            .map(|(id, partition, _)| ((*id, *partition), None))
            .collect();
        let error = if !ctx.authorize_topic(AclOperation::Read, &topic.topic_name) {
            Some((
                ResponseError::TopicAuthorizationFailed,
                "Topic authorization failed.",
            ))
        } else if spec.is_none() {
            Some((
                ResponseError::UnknownTopicOrPartition,
                "This server does not host this topic-partition.",
            ))
        } else if held.is_empty() {
            Some((
                ResponseError::UnknownTopicOrPartition,
                "There is no offset information to delete.",
            ))
        } else {
            None
        };
        if error.is_none() {
            deleted.extend(held);
        }
        responses.push(
            Topic::default()
                .with_topic_name(topic.topic_name.clone())
                .with_topic_id(topic_id)
                .with_error_code(error.map_or(0, |(e, _)| e.code()))
                .with_error_message(error.map(|(_, message)| str_bytes(message))),
        );
    }
    if let Err(error) = ctx
        .services
        .groups
        .reset_share_starts(&group_id, &deleted)
        .await
    {
        return refuse(errors::group_error(&error), &error.to_string());
    }
    DeleteShareGroupOffsetsResponse::default().with_responses(responses)
}
