//! TxnOffsetCommit (key 28, v0–5): offsets a transactional producer commits for a
//! group, held by the group coordinator until the transaction's marker (see
//! `GroupCoordinator::commit_transactional`). v3+ name the consumer's member and
//! generation, checked as a plain commit's are (KIP-447). ACLs as Kafka's: WRITE on the
//! transactional id, READ on the group, READ on each topic.

use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::group::coordinator::OffsetCommit;
use crate::limits::OFFSET_METADATA_MAX_BYTES;
use crate::security::acl::{AclOperation, ResourceType};

pub async fn handle(
    ctx: &RequestContext,
    request: TxnOffsetCommitRequest,
) -> TxnOffsetCommitResponse {
    let services = &ctx.services;
    let whole = if !ctx.authorize(
        AclOperation::Write,
        ResourceType::TransactionalId,
        &request.transactional_id,
    ) {
        Some(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !ctx.authorize_group(AclOperation::Read, &request.group_id) {
        Some(ResponseError::GroupAuthorizationFailed)
    } else {
        None
    };
    let mut commits = Vec::new();
    let mut statuses: Vec<Vec<Option<ResponseError>>> = Vec::new();
    for topic in &request.topics {
        let known = services.replicas.topic(&topic.name);
        let allowed = ctx.authorize_topic(AclOperation::Read, &topic.name);
        let mut topic_status = Vec::new();
        for p in &topic.partitions {
            let exists = known
                .as_ref()
                .is_some_and(|t| (0..t.spec.partitions).contains(&p.partition_index));
            let metadata_len = p.committed_metadata.as_ref().map_or(0, |m| m.len());
            let status = if whole.is_some() {
                whole
            } else if !allowed {
                Some(ResponseError::TopicAuthorizationFailed)
            } else if !exists {
                Some(ResponseError::UnknownTopicOrPartition)
            } else if metadata_len > OFFSET_METADATA_MAX_BYTES {
                Some(ResponseError::OffsetMetadataTooLarge)
            } else {
                commits.push(OffsetCommit {
                    topic: topic.name.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                });
                None
            };
            topic_status.push(status);
        }
        statuses.push(topic_status);
    }
    let instance = request.group_instance_id.as_ref().map(|s| s.to_string());
    let shared_error = if commits.is_empty() {
        None
    } else {
        let outcome = services
            .groups
            .commit_transactional(
                &request.group_id,
                (request.producer_id.0, request.producer_epoch),
                (
                    &request.member_id,
                    instance.as_deref(),
                    request.generation_id,
                ),
                commits,
            )
            .await;
        match outcome {
            Ok(()) => None,
            Err(error) => {
                let code = errors::offset_commit_error(&error, ctx.api_version);
                // Kafka: clients before v2 do not know COORDINATOR_LOAD_IN_PROGRESS here.
                Some(
                    if ctx.api_version < 2 && code == ResponseError::CoordinatorLoadInProgress {
                        ResponseError::CoordinatorNotAvailable
                    } else {
                        code
                    },
                )
            }
        }
    };
    let topics = request
        .topics
        .iter()
        .zip(statuses)
        .map(|(topic, topic_status)| {
            TxnOffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(
                    topic
                        .partitions
                        .iter()
                        .zip(topic_status)
                        .map(|(p, status)| {
                            TxnOffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(errors::code(status.or(shared_error)))
                        })
                        .collect(),
                )
        })
        .collect();
    TxnOffsetCommitResponse::default().with_topics(topics)
}
