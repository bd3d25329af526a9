//! AlterShareGroupOffsets (key 91, v0): an operator sets where an empty share group
//! starts reading partitions (`tern group reset-offsets`); their in-flight state is
//! dropped. READ on the group and on each topic, as Kafka checks them; a group with
//! members is NON_EMPTY_GROUP.

use kafka_protocol::messages::alter_share_group_offsets_response::{
    AlterShareGroupOffsetsResponsePartition as Partition,
    AlterShareGroupOffsetsResponseTopic as Topic,
};
use kafka_protocol::messages::{AlterShareGroupOffsetsRequest, AlterShareGroupOffsetsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: AlterShareGroupOffsetsRequest,
) -> AlterShareGroupOffsetsResponse {
    let group_id = request.group_id.to_string();
    let refuse = |error: ResponseError, message: &str| {
        AlterShareGroupOffsetsResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)))
    };
    if !ctx.authorize_group(AclOperation::Read, &group_id) {
        return refuse(ResponseError::GroupAuthorizationFailed, "not authorized");
    }
    let mut responses = Vec::with_capacity(request.topics.len());
    let mut starts = Vec::new();
    for topic in &request.topics {
        let spec = ctx.services.store.topic(&topic.topic_name).await;
        let error = if !ctx.authorize_topic(AclOperation::Read, &topic.topic_name) {
            Some(ResponseError::TopicAuthorizationFailed)
        } else {
            spec.is_none()
                .then_some(ResponseError::UnknownTopicOrPartition)
        };
        let topic_id = spec.as_ref().map(|s| s.topic_id).unwrap_or_default();
        let partitions = topic
            .partitions
            .iter()
            .map(|p| {
                let bad = error.or_else(|| {
                    let in_range = spec
                        .as_ref()
                        .is_some_and(|s| (0..s.partitions).contains(&p.partition_index));
                    (!in_range || p.start_offset < 0).then_some(ResponseError::InvalidRequest)
                });
                if bad.is_none() {
                    starts.push(((topic_id, p.partition_index), Some(p.start_offset)));
                }
                Partition::default()
                    .with_partition_index(p.partition_index)
                    .with_error_code(bad.map_or(0, |e| e.code()))
            })
            .collect();
        responses.push(
            Topic::default()
                .with_topic_name(topic.topic_name.clone())
                .with_topic_id(topic_id)
                .with_partitions(partitions),
        );
    }
    if let Err(error) = ctx
        .services
        .groups
        .reset_share_starts(&group_id, &starts)
        .await
    {
        return refuse(errors::group_error(&error), &error.to_string());
    }
    AlterShareGroupOffsetsResponse::default().with_responses(responses)
}
