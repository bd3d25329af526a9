//! EndTxn (key 26, v0–5): commits or aborts the producer's open transaction. The answer
//! comes once PrepareCommit/PrepareAbort is in `__transaction_state`; the markers follow
//! in the background, and until they are all written the id answers
//! CONCURRENT_TRANSACTIONS. PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2.

use kafka_protocol::messages::{EndTxnRequest, EndTxnResponse, ProducerId};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::model::{ProducerEpoch, ProducerId as Pid};
use crate::security::acl::{AclOperation, ResourceType};

pub async fn handle(ctx: &RequestContext, request: EndTxnRequest) -> EndTxnResponse {
    let response = EndTxnResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let id = &request.transactional_id;
    if !ctx.authorize(AclOperation::Write, ResourceType::TransactionalId, id) {
        return response.with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
    }
    let result = ctx
        .services
        .txn
        .end_transaction(
            id,
            Pid(request.producer_id.0),
            ProducerEpoch(request.producer_epoch),
            request.committed,
        )
        .await;
    match result {
        // v5 (transaction version 2) names the producer id and epoch to use next; with
        // version 1 they do not change.
        Ok(()) => response
            .with_producer_id(request.producer_id)
            .with_producer_epoch(request.producer_epoch),
        Err(error) => {
            response.with_error_code(errors::txn_error(&error, ctx.api_version, 2).code())
        }
    }
}
