//! CreatePartitions (key 37, v0–3): grow a topic. Explicit assignments may only name
//! this broker; shrinking is refused with INVALID_PARTITIONS.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};

pub async fn handle(
    ctx: &RequestContext,
    request: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let node = ctx.node_id();
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let result = CreatePartitionsTopicResult::default().with_name(topic.name.clone());
        let foreign = topic
            .assignments
            .iter()
            .flatten()
            .any(|a| a.broker_ids.is_empty() || a.broker_ids.iter().any(|b| b.0 != node));
        if foreign {
            results.push(
                result
                    .with_error_code(ResponseError::InvalidReplicaAssignment.code())
                    .with_error_message(Some(str_bytes(format!(
                        "assignments may only name broker {node}"
                    )))),
            );
            continue;
        }
        match ctx
            .services
            .topics
            .create_partitions(&topic.name, topic.count, request.validate_only)
            .await
        {
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
