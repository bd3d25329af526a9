//! AddPartitionsToTxn (key 24, v0–5): adds partitions to a producer's open transaction.
//! v0–3 carry one transaction from its producer; v4+ carry several, from brokers only
//! (CLUSTER_ACTION), and `verify_only` asks whether the partitions are already in
//! (KIP-890's check before a transactional produce). PRODUCER_FENCED is
//! INVALID_PRODUCER_EPOCH below v2, as in Kafka.

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, TransactionalId,
};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::model::{ProducerEpoch, ProducerId, TopicPartition};
use crate::security::acl::{AclOperation, ResourceType};

pub async fn handle(
    ctx: &RequestContext,
    request: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let response = AddPartitionsToTxnResponse::default();
    if ctx.api_version < 4 {
        let topics = add_one(
            ctx,
            &request.v3_and_below_transactional_id,
            ProducerId(request.v3_and_below_producer_id.0),
            ProducerEpoch(request.v3_and_below_producer_epoch),
            &request.v3_and_below_topics,
            false,
        )
        .await;
        return response.with_results_by_topic_v3_and_below(topics);
    }
    if !ctx.authorize_cluster(AclOperation::ClusterAction) {
        return response.with_error_code(ResponseError::ClusterAuthorizationFailed.code());
    }
    let mut results = Vec::with_capacity(request.transactions.len());
    for txn in &request.transactions {
        let topics = add_one(
            ctx,
            &txn.transactional_id,
            ProducerId(txn.producer_id.0),
            ProducerEpoch(txn.producer_epoch),
            &txn.topics,
            txn.verify_only,
        )
        .await;
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(txn.transactional_id.clone())
                .with_topic_results(topics),
        );
    }
    response.with_results_by_transaction(results)
}

/// One transaction's partitions: every partition gets the same answer unless some are
/// refused by ACL or unknown, which fails the whole request (the rest are
/// OPERATION_NOT_ATTEMPTED), as in Kafka's `handleAddPartitionsToTxnRequest`.
async fn add_one(
    ctx: &RequestContext,
    transactional_id: &TransactionalId,
    producer_id: ProducerId,
    epoch: ProducerEpoch,
    topics: &[AddPartitionsToTxnTopic],
    verify_only: bool,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let all = |code: ResponseError| answer_all(topics, |_, _| Some(code));
    if !ctx.authorize(
        AclOperation::Write,
        ResourceType::TransactionalId,
        transactional_id,
    ) {
        return all(ResponseError::TransactionalIdAuthorizationFailed);
    }
    let mut refusals = Vec::new();
    let mut partitions = Vec::new();
    for topic in topics {
        let allowed = ctx.authorize_topic(AclOperation::Write, &topic.name);
        let known = ctx
            .services
            .replicas
            .topic(&topic.name)
            .map(|t| t.spec.partitions);
        for &p in &topic.partitions {
            let tp = TopicPartition::new(topic.name.to_string(), p);
            if !allowed {
                refusals.push((tp, ResponseError::TopicAuthorizationFailed));
            } else if !known.is_some_and(|count| (0..count).contains(&p))
                || crate::model::is_internal(&topic.name)
            {
                refusals.push((tp, ResponseError::UnknownTopicOrPartition));
            } else {
                partitions.push(tp);
            }
        }
    }
    let find = |list: &[(TopicPartition, ResponseError)], name: &str, p: i32| {
        list.iter()
            .find(|(tp, _)| tp.topic == name && tp.partition == p)
            .map(|(_, e)| *e)
    };
    if !refusals.is_empty() {
        return answer_all(topics, |name, p| {
            Some(find(&refusals, name, p).unwrap_or(ResponseError::OperationNotAttempted))
        });
    }
    let txn = &ctx.services.txn;
    if verify_only {
        return match txn.verify_partitions(transactional_id, producer_id, epoch, &partitions) {
            Ok(added) => {
                let missing: Vec<(TopicPartition, ResponseError)> = partitions
                    .into_iter()
                    .zip(added)
                    .filter(|(_, added)| !added)
                    .map(|(tp, _)| (tp, ResponseError::InvalidTxnState))
                    .collect();
                answer_all(topics, |name, p| find(&missing, name, p))
            }
            Err(error) => all(errors::txn_error(&error, ctx.api_version, 2)),
        };
    }
    match txn
        .add_partitions(transactional_id, producer_id, epoch, &partitions)
        .await
    {
        Ok(()) => answer_all(topics, |_, _| None),
        Err(error) => all(errors::txn_error(&error, ctx.api_version, 2)),
    }
}

fn answer_all(
    topics: &[AddPartitionsToTxnTopic],
    code: impl Fn(&str, i32) -> Option<ResponseError>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|topic| {
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic.name.clone())
                .with_results_by_partition(
                    topic
                        .partitions
                        .iter()
                        .map(|&p| {
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(p)
                                .with_partition_error_code(errors::code(code(&topic.name, p)))
                        })
                        .collect(),
                )
        })
        .collect()
}
