//! DescribeProducers (key 61, v0): the producers a partition's leader knows, with the
//! first offset of each one's open transaction (what `tern txn find-hanging` looks
//! for). READ on the topic, as in Kafka.

use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{DescribeProducersRequest, DescribeProducersResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeProducersRequest,
) -> DescribeProducersResponse {
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            let allowed = ctx.authorize_topic(AclOperation::Read, &topic.name);
            let replicas = ctx.services.replicas.topic(&topic.name);
            let partitions = topic
                .partition_indexes
                .iter()
                .map(|&index| {
                    let answer = PartitionResponse::default().with_partition_index(index);
                    if !allowed {
                        return answer
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code());
                    }
                    let partition = match replicas.as_ref().map(|t| t.partition(index)) {
                        Some(Ok(partition)) => partition,
                        Some(Err(not_served)) => {
                            return answer.with_error_code(errors::not_served(not_served).code())
                        }
                        None => {
                            return answer
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        }
                    };
                    let mut producers = partition.producers();
                    producers.sort_by_key(|p| p.0);
                    answer.with_active_producers(
                        producers
                            .into_iter()
                            .map(|(id, epoch, sequence, timestamp, coordinator, first)| {
                                ProducerState::default()
                                    .with_producer_id(ProducerId(id))
                                    .with_producer_epoch(i32::from(epoch))
                                    .with_last_sequence(sequence)
                                    .with_last_timestamp(timestamp)
                                    .with_coordinator_epoch(coordinator)
                                    .with_current_txn_start_offset(first)
                            })
                            .collect(),
                    )
                })
                .collect();
            TopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    DescribeProducersResponse::default().with_topics(topics)
}
