//! ReadShareGroupState (key 84, v0): a partition leader taking a share-partition
//! over reads its stored state from the group's coordinator (this broker). Between
//! brokers only: CLUSTER_ACTION on the cluster. A share-partition with no state
//! answers start offset -1.

use kafka_protocol::messages::read_share_group_state_response::{
    PartitionResult, ReadStateResult, StateBatch,
};
use kafka_protocol::messages::{ReadShareGroupStateRequest, ReadShareGroupStateResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::persister::{error_code, NO_STATE};
use crate::group::share::ShareKey;
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: ReadShareGroupStateRequest,
) -> ReadShareGroupStateResponse {
    let allowed = ctx.authorize_cluster(AclOperation::ClusterAction);
    let results = request
        .topics
        .iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let result = PartitionResult::default()
                        .with_partition(p.partition)
                        .with_start_offset(NO_STATE);
                    if !allowed {
                        return result
                            .with_error_code(ResponseError::ClusterAuthorizationFailed.code());
                    }
                    let key = ShareKey {
                        group: request.group_id.to_string(),
                        topic_id: topic.topic_id,
                        partition: p.partition,
                    };
                    match ctx.services.groups.read_share_state(&key, p.leader_epoch) {
                        Ok(None) => result,
                        Ok(Some(state)) => result
                            .with_state_epoch(state.state_epoch)
                            .with_start_offset(state.snapshot.start_offset)
                            .with_state_batches(
                                state
                                    .snapshot
                                    .batches
                                    .iter()
                                    .map(|b| {
                                        StateBatch::default()
                                            .with_first_offset(b.first)
                                            .with_last_offset(b.last)
                                            .with_delivery_state(b.state.id())
                                            .with_delivery_count(b.delivery_count)
                                    })
                                    .collect(),
                            ),
                        Err(error) => result.with_error_code(error_code(&error)),
                    }
                })
                .collect();
            ReadStateResult::default()
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions)
        })
        .collect();
    ReadShareGroupStateResponse::default().with_results(results)
}
