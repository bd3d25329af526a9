//! OffsetCommit (key 8, v0–9; v0–1 decoded by `server::legacy`): stores offsets durably
//! in `__consumer_offsets` before answering. Members must name the current generation;
//! a group-less consumer commits with generation -1 to an empty group (v0 always does).
//! Kafka 3.9 kept v0 commits in ZooKeeper, apart from v1+ ones (KRaft answered them
//! UNSUPPORTED_VERSION); tern has one store, so every version sees every commit.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::group::coordinator::{CommitError, OffsetCommit};
use crate::security::acl::AclOperation;

use crate::limits::OFFSET_METADATA_MAX_BYTES;

pub async fn handle(ctx: &RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse {
    let services = &ctx.services;
    let mut commits = Vec::new();
    let mut statuses: Vec<Vec<Option<ResponseError>>> = Vec::new();
    // Kafka's rule: READ on the group, then READ on each topic.
    let group_allowed = ctx.authorize_group(AclOperation::Read, &request.group_id);
    for topic in &request.topics {
        let known = services.replicas.topic(&topic.name);
        let topic_allowed = ctx.authorize_topic(AclOperation::Read, &topic.name);
        let mut topic_status = Vec::new();
        for p in &topic.partitions {
            if !group_allowed {
                topic_status.push(Some(ResponseError::GroupAuthorizationFailed));
                continue;
            }
            if !topic_allowed {
                topic_status.push(Some(ResponseError::TopicAuthorizationFailed));
                continue;
            }
            let exists = known
                .as_ref()
                .is_some_and(|t| (0..t.spec.partitions).contains(&p.partition_index));
            let metadata_len = p.committed_metadata.as_ref().map_or(0, |m| m.len());
            if metadata_len > OFFSET_METADATA_MAX_BYTES {
                topic_status.push(Some(ResponseError::OffsetMetadataTooLarge));
            } else if exists {
                commits.push(OffsetCommit {
                    topic: topic.name.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                });
                topic_status.push(None);
            } else {
                topic_status.push(Some(ResponseError::UnknownTopicOrPartition));
            }
        }
        statuses.push(topic_status);
    }
    let instance = request.group_instance_id.as_ref().map(|s| s.to_string());
    let outcome = if commits.is_empty() {
        Ok(())
    } else {
        services
            .groups
            .commit(
                &request.group_id,
                &request.member_id,
                instance.as_deref(),
                request.generation_id_or_member_epoch,
                commits,
            )
            .await
    };
    let shared_error = match &outcome {
        Ok(()) => None,
        Err(e) => {
            if let CommitError::Storage(e) = e {
                tracing::warn!(group = %request.group_id.as_str(), error = %e, "offset commit failed");
            }
            Some(errors::offset_commit_error(e, ctx.api_version))
        }
    };
    let topics = request
        .topics
        .iter()
        .zip(statuses)
        .map(|(topic, topic_status)| {
            let partitions = topic
                .partitions
                .iter()
                .zip(topic_status)
                .map(|(p, status)| {
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(errors::code(status.or(shared_error)))
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}
