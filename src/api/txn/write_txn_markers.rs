//! WriteTxnMarkers (key 27, v1): a transaction coordinator asks this broker, as the
//! leader of the named partitions, to write COMMIT or ABORT markers. Between brokers
//! only: CLUSTER_ACTION. A partition refuses a marker from an older coordinator epoch
//! (TRANSACTION_COORDINATOR_FENCED) or producer epoch (INVALID_PRODUCER_EPOCH).

use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{WriteTxnMarkersRequest, WriteTxnMarkersResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;
use crate::log::txn::{MarkerKind, TxnMarker};
use crate::model::{ProducerEpoch, ProducerId, TopicPartition};
use crate::security::acl::AclOperation;
use crate::txn::markers::MarkerError;

pub async fn handle(
    ctx: &RequestContext,
    request: WriteTxnMarkersRequest,
) -> WriteTxnMarkersResponse {
    let allowed = ctx.authorize_cluster(AclOperation::ClusterAction);
    let mut results = Vec::with_capacity(request.markers.len());
    for wanted in &request.markers {
        let marker = TxnMarker {
            producer_id: ProducerId(wanted.producer_id.0),
            producer_epoch: ProducerEpoch(wanted.producer_epoch),
            coordinator_epoch: wanted.coordinator_epoch,
            kind: MarkerKind::from_committed(wanted.transaction_result),
        };
        let partitions: Vec<TopicPartition> = wanted
            .topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|&p| TopicPartition::new(t.name.to_string(), p))
            })
            .collect();
        let outcomes = if allowed {
            ctx.services
                .txn
                .markers()
                .write_here(&marker, &partitions)
                .await
                .into_iter()
                .map(|r| r.err().map(|e| marker_error(&e)))
                .collect()
        } else {
            vec![Some(ResponseError::ClusterAuthorizationFailed); partitions.len()]
        };
        let mut outcomes = outcomes.into_iter();
        let topics = wanted
            .topics
            .iter()
            .map(|t| {
                WritableTxnMarkerTopicResult::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partition_indexes
                            .iter()
                            .map(|&p| {
                                WritableTxnMarkerPartitionResult::default()
                                    .with_partition_index(p)
                                    .with_error_code(errors::code(outcomes.next().flatten()))
                            })
                            .collect(),
                    )
            })
            .collect();
        results.push(
            WritableTxnMarkerResult::default()
                .with_producer_id(wanted.producer_id)
                .with_topics(topics),
        );
    }
    WriteTxnMarkersResponse::default().with_markers(results)
}

fn marker_error(error: &MarkerError) -> ResponseError {
    match error {
        MarkerError::Unknown(_) => ResponseError::UnknownTopicOrPartition,
        MarkerError::NotLeader(_) => ResponseError::NotLeaderOrFollower,
        MarkerError::Partition(e) => errors::partition_error(e),
    }
}
