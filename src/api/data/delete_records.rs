//! DeleteRecords (key 21, v0–2): move a partition's log start offset forward; whole
//! segments below it are deleted. Offset -1 means the high watermark. Internal topics
//! are refused with INVALID_TOPIC_EXCEPTION, as Kafka's `ReplicaManager` does: trimming
//! `__consumer_offsets` would lose committed offsets (its coordinator trims it itself).
//! With an authorizer each topic needs DELETE, checked first (Kafka's
//! `handleDeleteRecordsRequest`): else its partitions answer TOPIC_AUTHORIZATION_FAILED.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::model::Offset;
use crate::replication::Partition;
use crate::security::acl::AclOperation;

pub async fn handle(ctx: &RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let refusal = if !ctx.authorize_topic(AclOperation::Delete, &topic.name) {
            Some(ResponseError::TopicAuthorizationFailed)
        } else if crate::topics::is_internal(&topic.name) {
            Some(ResponseError::InvalidTopicException)
        } else {
            None
        };
        if let Some(error) = refusal {
            let partitions = topic
                .partitions
                .iter()
                .map(|wanted| {
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(wanted.partition_index)
                        .with_low_watermark(-1)
                        .with_error_code(error.code())
                })
                .collect();
            topics.push(
                DeleteRecordsTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_partitions(partitions),
            );
            continue;
        }
        let replicas = ctx.services.replicas.topic(&topic.name);
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for wanted in &topic.partitions {
            let result = DeleteRecordsPartitionResult::default()
                .with_partition_index(wanted.partition_index)
                .with_low_watermark(-1);
            let outcome = match replicas
                .as_ref()
                .map(|t| t.partition(wanted.partition_index))
            {
                Some(Ok(partition)) => delete_before(partition, wanted.offset).await,
                Some(Err(not_served)) => Err(errors::not_served(not_served)),
                None => Err(ResponseError::UnknownTopicOrPartition),
            };
            partitions.push(match outcome {
                Ok(low_watermark) => result.with_low_watermark(low_watermark),
                Err(error) => result.with_error_code(error.code()),
            });
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}

/// Deletes below `offset` (-1: the high watermark); returns the new low watermark.
/// A topic whose `cleanup.policy` lacks `delete` refuses it with POLICY_VIOLATION, as
/// Kafka's `deleteRecordsOnLeader` does.
async fn delete_before(partition: &Partition, offset: i64) -> Result<i64, ResponseError> {
    if !partition.cleanup_policy().delete {
        return Err(ResponseError::PolicyViolation);
    }
    let high_watermark = partition.offsets().high_watermark().0;
    let offset = if offset == -1 { high_watermark } else { offset };
    if offset < 0 || offset > high_watermark {
        return Err(ResponseError::OffsetOutOfRange);
    }
    partition
        .delete_records_before(Offset(offset))
        .await
        .map(|log_start| log_start.0)
        .map_err(|e| errors::partition_error(&e))
}
