//! DeleteTopics (key 20, v0–6; v0 through `server::legacy`): by name (v0–5
//! `topic_names`) or by name or id (v6).

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes, topic_name};
use crate::security::acl::AclOperation;

pub async fn handle(ctx: &RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse {
    let services = &ctx.services;
    let mut wanted: Vec<(Option<String>, uuid::Uuid)> = request
        .topic_names
        .iter()
        .map(|n| (Some(n.to_string()), uuid::Uuid::nil()))
        .collect();
    wanted.extend(
        request
            .topics
            .iter()
            .map(|t| (t.name.as_ref().map(|n| n.to_string()), t.topic_id)),
    );
    let mut responses = Vec::with_capacity(wanted.len());
    for (name, topic_id) in wanted {
        let result = DeletableTopicResult::default().with_topic_id(topic_id);
        let by_id = name.is_none();
        let name = match name {
            Some(name) => name,
            None => match services.store.topic_by_id(topic_id).await {
                Some(spec) => spec.name,
                None => {
                    responses.push(result.with_error_code(ResponseError::UnknownTopicId.code()));
                    continue;
                }
            },
        };
        // Kafka: a topic that may not be described stays unknown-looking; DELETE is
        // needed to delete it.
        if !ctx.authorize_topic(AclOperation::Describe, &name) {
            let error = if by_id {
                ResponseError::UnknownTopicId
            } else {
                ResponseError::TopicAuthorizationFailed
            };
            let named = if by_id { None } else { Some(topic_name(name)) };
            responses.push(result.with_name(named).with_error_code(error.code()));
            continue;
        }
        let result = result.with_name(Some(topic_name(name.clone())));
        if !ctx.authorize_topic(AclOperation::Delete, &name) {
            responses.push(result.with_error_code(ResponseError::TopicAuthorizationFailed.code()));
            continue;
        }
        let deleted = ctx
            .under_mutation_quota(ctx.api_version >= 5, || async {
                let deleted = services.topics.delete(&name).await;
                let partitions = deleted.as_ref().map_or(0, |s| s.partitions.max(0) as u32);
                (deleted, partitions)
            })
            .await;
        let Some(deleted) = deleted else {
            responses.push(
                result
                    .with_error_code(ResponseError::ThrottlingQuotaExceeded.code())
                    .with_error_message(Some(str_bytes(crate::quota::THROTTLED_MUTATION))),
            );
            continue;
        };
        match deleted {
            Ok(spec) => responses.push(result.with_topic_id(spec.topic_id)),
            Err(error) => responses.push(
                result
                    .with_error_code(errors::topic_error(&error).code())
                    .with_error_message(Some(str_bytes(error.to_string()))),
            ),
        }
    }
    DeleteTopicsResponse::default().with_responses(responses)
}
