//! CreatePartitions (key 37, v0–3): grow a topic; shrinking is refused with
//! INVALID_PARTITIONS. New partitions take the topic's replication factor; explicit
//! assignments (one replica list per new partition, checked as Kafka checks them) pin
//! those partitions' replicas instead of the ring's placement. With an authorizer each
//! topic needs ALTER, else TOPIC_AUTHORIZATION_FAILED with no message (Kafka's
//! `ControllerApis.createPartitions`).

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use crate::security::acl::AclOperation;
use kafka_protocol::ResponseError;

pub async fn handle(
    ctx: &RequestContext,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        if !ctx.authorize_topic(AclOperation::Alter, &topic.name) {
            results.push(
                result
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                    .with_error_message(None),
            );
            continue;
        }
        let assignments: Option<Vec<Vec<i32>>> = topic.assignments.as_ref().map(|all| {
            all.iter()
                .map(|a| a.broker_ids.iter().map(|b| b.0).collect())
                .collect()
        });
        let before = match request.validate_only {
            true => None,
            false => ctx
                .services
                .store
                .topic(&topic.name)
                .await
                .map(|t| t.partitions),
        };
        let created = ctx
            .under_mutation_quota(ctx.api_version >= 3 && !request.validate_only, || async {
                let created = ctx
                    .services
                    .topics
                    .create_partitions(
                        &topic.name,
                        topic.count,
                        assignments.as_deref(),
                        request.validate_only,
                    )
                    .await;
                let added = match (&created, before) {
                    (Ok(()), Some(before)) => (topic.count - before).max(0) as u32,
                    _ => 0,
                };
                (created, added)
            })
            .await;
        let Some(created) = created else {
            results.push(
                result
                    .with_error_code(ResponseError::ThrottlingQuotaExceeded.code())
                    .with_error_message(Some(str_bytes(crate::quota::THROTTLED_MUTATION))),
            );
            continue;
        };
        match created {
            Ok(()) => results.push(result),
            Err(error) => results.push(
                result
                    .with_error_code(errors::topic_error(&error).code())
                    .with_error_message(Some(str_bytes(error.to_string()))),
            ),
        }
    }
    CreatePartitionsResponse::default().with_results(results)
}
