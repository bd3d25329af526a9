//! OffsetDelete (key 47, v0): drops a group's committed offsets for partitions of
//! topics none of its members subscribes to. With an authorizer, as Kafka's
//! `handleOffsetDeleteRequest`: the group needs DELETE (checked first, else the top-level
//! GROUP_AUTHORIZATION_FAILED), and each topic READ (else TOPIC_AUTHORIZATION_FAILED on
//! its partitions, which are not deleted).

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::security::acl::{AclOperation, ResourceType};

pub async fn handle(ctx: &RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse {
    if !ctx.authorize_group(AclOperation::Delete, &request.group_id) {
        return OffsetDeleteResponse::default()
            .with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    if request.group_id.is_empty() {
        return OffsetDeleteResponse::default()
            .with_error_code(ResponseError::InvalidGroupId.code());
    }
    let (allowed, _) = ctx.partition_by_authorized(
        AclOperation::Read,
        ResourceType::Topic,
        request.topics.iter(),
        |t| t.name.as_str(),
    );
    let wanted: Vec<(String, i32)> = allowed
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.to_string(), p.partition_index))
        })
        .collect();
    let results = match ctx
        .services
        .groups
        .delete_offsets(&request.group_id, &wanted)
        .await
    {
        Ok(results) => results,
        Err(e) => {
            return OffsetDeleteResponse::default().with_error_code(errors::commit_error(&e).code())
        }
    };
    let mut results = results.into_iter();
    let topics = request
        .topics
        .iter()
        .map(|t| {
            let refused = !allowed.iter().any(|a| a.name == t.name);
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let error = if refused {
                        Some(ResponseError::TopicAuthorizationFailed)
                    } else {
                        results.next().flatten().map(|e| errors::group_error(&e))
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(errors::code(error))
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
