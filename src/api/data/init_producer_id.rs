//! InitProducerId (key 22, v0–5). Idempotent producers: a new producer id with epoch
//! 0, or (KIP-360, v3+) the same id with its epoch bumped when the client passes its
//! current id and epoch. Transactional producers: the transaction coordinator's
//! answer (`txn::TxnCoordinator::init_producer_id`), which fences the id's previous
//! producer.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use crate::security::acl::{AclOperation, ResourceType};

pub async fn handle(
    ctx: &RequestContext,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    // Kafka 3+ (KIP-679): a transactional id needs WRITE on it; an idempotent producer
    // IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
    match request
        .transactional_id
        .as_ref()
        .filter(|id| !id.is_empty())
    {
        Some(id) if !ctx.authorize(AclOperation::Write, ResourceType::TransactionalId, id) => {
            return response
                .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
        }
        None if !ctx.authorize_cluster(AclOperation::IdempotentWrite)
            && !ctx.authorize_any(AclOperation::Write, ResourceType::Topic) =>
        {
            return response.with_error_code(ResponseError::ClusterAuthorizationFailed.code());
        }
        _ => {}
    }
    let (current_id, current_epoch) = (request.producer_id.0, request.producer_epoch);
    if let Some(id) = request.transactional_id.as_ref() {
        // Kafka: an empty transactional id is INVALID_REQUEST, not an idempotent producer.
        let expected = (current_id >= 0).then_some((
            crate::model::ProducerId(current_id),
            crate::model::ProducerEpoch(current_epoch),
        ));
        return match ctx
            .services
            .txn
            .init_producer_id(id, request.transaction_timeout_ms, expected)
            .await
        {
            Ok((producer_id, epoch)) => response
                .with_producer_id(ProducerId(producer_id.0))
                .with_producer_epoch(epoch.0),
            Err(error) => response.with_error_code(
                super::super::errors::txn_error(&error, ctx.api_version, 4).code(),
            ),
        };
    }
    if current_id >= 0 && (0..i16::MAX - 1).contains(&current_epoch) {
        return response
            .with_producer_id(ProducerId(current_id))
            .with_producer_epoch(current_epoch + 1);
    }
    match ctx.services.producer_ids.next().await {
        Ok(id) => response
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(error) => {
            tracing::error!(%error, "could not allocate a producer id");
            response.with_error_code(ResponseError::CoordinatorNotAvailable.code())
        }
    }
}
