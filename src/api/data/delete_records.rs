//! DeleteRecords (key 21, v0–2): move a partition's log start offset forward; whole
//! segments below it are deleted. Offset -1 means the high watermark. Internal topics
//! are refused with INVALID_TOPIC_EXCEPTION, as Kafka's `ReplicaManager` does: trimming
//! `__consumer_offsets` would lose committed offsets (its coordinator trims it itself).

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;

pub async fn handle(ctx: &RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        if crate::topics::is_internal(&topic.name) {
            let partitions = topic
                .partitions
                .iter()
                .map(|wanted| {
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(wanted.partition_index)
                        .with_low_watermark(-1)
                        .with_error_code(ResponseError::InvalidTopicException.code())
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
        let partitions = topic
            .partitions
            .iter()
            .map(|wanted| {
                let result = DeleteRecordsPartitionResult::default()
                    .with_partition_index(wanted.partition_index)
                    .with_low_watermark(-1);
                let partition = match replicas
                    .as_ref()
                    .map(|t| t.partition(wanted.partition_index))
                {
                    Some(Ok(partition)) => partition,
                    Some(Err(not_served)) => {
                        return result.with_error_code(errors::not_served(not_served).code())
                    }
                    None => {
                        return result
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    }
                };
                let (_, high_watermark, _) = partition.offsets();
                let offset = if wanted.offset == -1 {
                    high_watermark
                } else {
                    wanted.offset
                };
                if offset < 0 || offset > high_watermark {
                    return result.with_error_code(ResponseError::OffsetOutOfRange.code());
                }
                match partition.delete_records_before(offset) {
                    Ok(low_watermark) => result.with_low_watermark(low_watermark),
                    Err(e) => result.with_error_code(errors::partition_error(&e).code()),
                }
            })
            .collect();
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}
