//! ShareAcknowledge (key 79, v1): a share-group member acknowledges records it
//! acquired (ACCEPT, RELEASE, REJECT, or GAP for offsets without a record) without
//! fetching more; with the final session epoch (-1) it then closes its share session
//! here and everything it still holds is released for redelivery. An opening epoch (0)
//! is INVALID_SHARE_SESSION_EPOCH, as in Kafka; every partition named is answered.

use std::collections::BTreeMap;

use kafka_protocol::messages::share_acknowledge_response::{
    LeaderIdAndEpoch, PartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::{ShareAcknowledgeRequest, ShareAcknowledgeResponse};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::super::context::RequestContext;
use super::super::str_bytes;
use super::share_fetch::session_error;
use super::{acknowledge, persister, WireBatches};
use crate::group::share::session::{SessionRequest, FINAL_EPOCH, OPEN_EPOCH};
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: ShareAcknowledgeRequest,
) -> ShareAcknowledgeResponse {
    let group_id = request.group_id.as_ref().map(|g| g.to_string());
    let member_id = request.member_id.as_ref().map(|m| m.to_string());
    let (Some(group_id), Some(member_id)) = (
        group_id.filter(|g| !g.is_empty()),
        member_id.filter(|m| !m.is_empty()),
    ) else {
        return refused(
            ResponseError::InvalidRequest,
            "GroupId and MemberId are required.",
        );
    };
    if !ctx.authorize_group(AclOperation::Read, &group_id) {
        return refused(ResponseError::GroupAuthorizationFailed, "");
    }
    let epoch = request.share_session_epoch;
    if epoch == OPEN_EPOCH {
        return refused(ResponseError::InvalidShareSessionEpoch, "");
    }
    let updated = ctx.services.shares.sessions().update(
        SessionRequest {
            group_id: &group_id,
            member_id: &member_id,
            epoch,
            added: &[],
            forgotten: &[],
        },
        crate::model::monotonic_ms(),
    );
    if let Err(error) = updated {
        return refused(session_error(error), "");
    }
    let mut acks: BTreeMap<(Uuid, i32), WireBatches> = BTreeMap::new();
    for topic in &request.topics {
        for partition in &topic.partitions {
            acks.entry((topic.topic_id, partition.partition_index))
                .or_default()
                .extend(
                    partition
                        .acknowledgement_batches
                        .iter()
                        .map(|b| (b.first_offset, b.last_offset, b.acknowledge_types.clone())),
                );
        }
    }
    let persister = persister(ctx);
    let mut topics: Vec<ShareAcknowledgeTopicResponse> = Vec::new();
    for (&(topic_id, index), wire) in &acks {
        let result = acknowledge(
            ctx, &persister, &group_id, &member_id, topic_id, index, wire,
        )
        .await;
        let data = PartitionData::default()
            .with_partition_index(index)
            .with_error_code(result.err().map_or(0, |e| e.code()))
            .with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(-1)
                    .with_leader_epoch(-1),
            );
        match topics.last_mut() {
            Some(topic) if topic.topic_id == topic_id => topic.partitions.push(data),
            _ => topics.push(
                ShareAcknowledgeTopicResponse::default()
                    .with_topic_id(topic_id)
                    .with_partitions(vec![data]),
            ),
        }
    }
    if epoch == FINAL_EPOCH {
        let closed = ctx.services.shares.sessions().close(&group_id, &member_id);
        super::release_session(ctx, &persister, &group_id, &member_id, &closed).await;
    }
    ShareAcknowledgeResponse::default().with_responses(topics)
}

fn refused(error: ResponseError, message: &str) -> ShareAcknowledgeResponse {
    ShareAcknowledgeResponse::default()
        .with_error_code(error.code())
        .with_error_message((!message.is_empty()).then(|| str_bytes(message)))
}
