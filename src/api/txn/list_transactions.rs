//! ListTransactions (key 66, v0–2): the transactional ids this broker coordinates,
//! filtered by state, producer id, (v1+) running time and (v2) an id pattern. Only ids
//! the caller may DESCRIBE are listed, as in Kafka.

use kafka_protocol::messages::list_transactions_response::TransactionState;
use kafka_protocol::messages::{
    ListTransactionsRequest, ListTransactionsResponse, ProducerId, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use crate::model::now_ms;
use crate::security::acl::{AclOperation, ResourceType};
use crate::txn::TxnState;

const STATES: [TxnState; 8] = [
    TxnState::Empty,
    TxnState::Ongoing,
    TxnState::PrepareCommit,
    TxnState::PrepareAbort,
    TxnState::CompleteCommit,
    TxnState::CompleteAbort,
    TxnState::Dead,
    TxnState::PrepareEpochFence,
];

pub async fn handle(
    ctx: &RequestContext,
    request: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let response = ListTransactionsResponse::default();
    let unknown: Vec<StrBytes> = request
        .state_filters
        .iter()
        .filter(|s| !STATES.iter().any(|k| k.name() == s.as_str()))
        .cloned()
        .collect();
    let pattern = match request.transactional_id_pattern.as_deref() {
        Some(p) if !p.is_empty() => match regex::Regex::new(p) {
            Ok(re) => Some(re),
            Err(_) => {
                return response.with_error_code(ResponseError::InvalidRegularExpression.code())
            }
        },
        _ => None,
    };
    let now = now_ms();
    let states = ctx
        .services
        .txn
        .list()
        .into_iter()
        .filter(|t| {
            request.state_filters.is_empty()
                || request
                    .state_filters
                    .iter()
                    .any(|s| s.as_str() == t.meta.state.name())
        })
        .filter(|t| {
            request.producer_id_filters.is_empty()
                || request
                    .producer_id_filters
                    .iter()
                    .any(|p| p.0 == t.meta.producer_id.0)
        })
        .filter(|t| {
            request.duration_filter < 0
                || (t.meta.start_ms >= 0 && now - t.meta.start_ms >= request.duration_filter)
        })
        .filter(|t| {
            pattern
                .as_ref()
                .is_none_or(|re| re.is_match(&t.transactional_id))
        })
        .filter(|t| {
            ctx.authorize(
                AclOperation::Describe,
                ResourceType::TransactionalId,
                &t.transactional_id,
            )
        })
        .map(|t| {
            TransactionState::default()
                .with_transactional_id(TransactionalId(StrBytes::from_string(t.transactional_id)))
                .with_producer_id(ProducerId(t.meta.producer_id.0))
                .with_transaction_state(StrBytes::from_static_str(t.meta.state.name()))
        })
        .collect();
    response
        .with_unknown_state_filters(unknown)
        .with_transaction_states(states)
}
