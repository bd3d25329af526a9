//! AddOffsetsToTxn (key 25, v0–4): adds the group's `__consumer_offsets` partition to
//! the producer's open transaction, so that its TxnOffsetCommits are committed or
//! aborted with it. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2, as in Kafka.

use kafka_protocol::messages::{AddOffsetsToTxnRequest, AddOffsetsToTxnResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::model::{
    coordinator_partition, ProducerEpoch, ProducerId, TopicPartition, OFFSETS_TOPIC,
};
use crate::security::acl::{AclOperation, ResourceType};

pub async fn handle(
    ctx: &RequestContext,
    request: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let response = AddOffsetsToTxnResponse::default();
    let id = &request.transactional_id;
    if !ctx.authorize(AclOperation::Write, ResourceType::TransactionalId, id) {
        return response.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
    }
    if !ctx.authorize_group(AclOperation::Read, &request.group_id) {
        return response.with_error_code(ResponseError::GroupAuthorizationFailed.code());
    }
    let count = ctx.services.groups.partition_count();
    let offsets = TopicPartition::new(
        OFFSETS_TOPIC,
        coordinator_partition(&request.group_id, count),
    );
    let result = ctx
        .services
        .txn
        .add_partitions(
            id,
            ProducerId(request.producer_id.0),
            ProducerEpoch(request.producer_epoch),
            &[offsets],
        )
        .await;
    match result {
        Ok(()) => response,
        Err(error) => {
            response.with_error_code(errors::txn_error(&error, ctx.api_version, 2).code())
        }
    }
}
