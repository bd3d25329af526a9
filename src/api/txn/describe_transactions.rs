//! DescribeTransactions (key 65, v0): a transactional id's state at its coordinator.
//! DESCRIBE on the transactional id; topics the caller may not describe are left out,
//! as in Kafka.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::security::acl::{AclOperation, ResourceType};

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let states = request
        .transactional_ids
        .iter()
        .map(|id| {
            let answer = TransactionState::default()
                .with_transactional_id(id.clone())
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .with_transaction_start_time_ms(-1);
            if !ctx.authorize(AclOperation::Describe, ResourceType::TransactionalId, id) {
                return answer
                    .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code());
            }
            match ctx.services.txn.describe(id) {
                Ok(meta) => {
                    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
                    for tp in &meta.partitions {
                        if ctx.authorize_topic(AclOperation::Describe, &tp.topic) {
                            topics.entry(&tp.topic).or_default().push(tp.partition);
                        }
                    }
                    answer
                        .with_transaction_state(StrBytes::from_static_str(meta.state.name()))
                        .with_transaction_timeout_ms(meta.timeout_ms)
                        .with_transaction_start_time_ms(meta.start_ms)
                        .with_producer_id(ProducerId(meta.producer_id.0))
                        .with_producer_epoch(meta.producer_epoch.0)
                        .with_topics(
                            topics
                                .into_iter()
                                .map(|(topic, partitions)| {
                                    TopicData::default()
                                        .with_topic(TopicName(StrBytes::from_string(
                                            topic.to_string(),
                                        )))
                                        .with_partitions(partitions)
                                })
                                .collect(),
                        )
                }
                Err(error) => answer.with_error_code(errors::txn_error(&error, 0, 0).code()),
            }
        })
        .collect();
    DescribeTransactionsResponse::default().with_transaction_states(states)
}
