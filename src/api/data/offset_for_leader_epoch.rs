//! OffsetForLeaderEpoch (key 23, v2–4, as Kafka 4 after KIP-896): where a leader epoch ends in this leader's log
//! (KIP-101, KIP-279): the largest epoch at or below the one asked for, and the start
//! offset of the next epoch after it (or the log end for the latest). Followers use it
//! to find a divergent tail; consumers validate their position after a leader change
//! with it (KIP-320). Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere), and
//! a stale or future `current_leader_epoch` is FENCED_LEADER_EPOCH or
//! UNKNOWN_LEADER_EPOCH, as Kafka's `Partition.lastOffsetForLeaderEpoch`.
//!
//! With an authorizer, as Kafka's `handleOffsetForLeaderEpochRequest`: CLUSTER_ACTION on
//! the cluster (what followers hold) allows every topic; otherwise (KIP-320's consumers)
//! each topic needs DESCRIBE, else its partitions answer TOPIC_AUTHORIZATION_FAILED.
//! Kafka decides by the permission alone, not by `replica_id`, and so does tern.

use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::model::LeaderEpoch;
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let follower = ctx.authorize_cluster(AclOperation::ClusterAction);
    let topics = request
        .topics
        .iter()
        .map(|topic| {
            if !follower && !ctx.authorize_topic(AclOperation::Describe, topic.topic.0.as_str()) {
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|wanted| {
                        EpochEndOffset::default()
                            .with_partition(wanted.partition)
                            .with_leader_epoch(-1)
                            .with_end_offset(-1)
                            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                    })
                    .collect();
                return OffsetForLeaderTopicResult::default()
                    .with_topic(topic.topic.clone())
                    .with_partitions(partitions);
            }
            let replicas = ctx.services.replicas.topic(topic.topic.0.as_str());
            let partitions = topic
                .partitions
                .iter()
                .map(|wanted| {
                    let answer = EpochEndOffset::default()
                        .with_partition(wanted.partition)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1);
                    let partition = match replicas.as_ref().map(|t| t.partition(wanted.partition)) {
                        Some(Ok(partition)) => partition,
                        Some(Err(not_served)) => {
                            return answer.with_error_code(errors::not_served(not_served).code())
                        }
                        None => {
                            return answer
                                .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        }
                    };
                    let current = partition.leader_epoch();
                    if let Err(error) =
                        errors::check_current_leader_epoch(wanted.current_leader_epoch, current)
                    {
                        return answer.with_error_code(error.code());
                    }
                    let (epoch, end_offset) =
                        partition.end_offset_for_epoch(LeaderEpoch(wanted.leader_epoch));
                    answer
                        .with_leader_epoch(epoch.0)
                        .with_end_offset(end_offset.0)
                })
                .collect();
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
