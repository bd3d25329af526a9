//! WriteShareGroupState (key 85, v0): a share-partition's leader stores its state
//! with the group's coordinator (this broker), durably before the answer. Between
//! brokers only: CLUSTER_ACTION on the cluster. A leader older than the one that last
//! read or wrote the state is FENCED_LEADER_EPOCH.

use kafka_protocol::messages::write_share_group_state_response::{
    PartitionResult, WriteStateResult,
};
use kafka_protocol::messages::{WriteShareGroupStateRequest, WriteShareGroupStateResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::persister::error_code;
use crate::group::share::partition::{DeliveryState, Snapshot, StateBatch};
use crate::group::share::{ShareKey, ShareState};
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: WriteShareGroupStateRequest,
) -> WriteShareGroupStateResponse {
    let allowed = ctx.authorize_cluster(AclOperation::ClusterAction);
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in &topic.partitions {
            let result = PartitionResult::default().with_partition(p.partition);
            if !allowed {
                partitions
                    .push(result.with_error_code(ResponseError::ClusterAuthorizationFailed.code()));
                continue;
            }
            let batches: Option<Vec<StateBatch>> = p
                .state_batches
                .iter()
                .map(|b| {
                    Some(StateBatch {
                        first: b.first_offset,
                        last: b.last_offset,
                        state: DeliveryState::from_id(b.delivery_state)?,
                        delivery_count: b.delivery_count,
                    })
                })
                .collect();
            let Some(batches) = batches else {
                partitions.push(result.with_error_code(ResponseError::InvalidRequest.code()));
                continue;
            };
            let key = ShareKey {
                group: request.group_id.to_string(),
                topic_id: topic.topic_id,
                partition: p.partition,
            };
            let state = ShareState {
                state_epoch: p.state_epoch,
                leader_epoch: p.leader_epoch,
                snapshot: Snapshot {
                    start_offset: p.start_offset,
                    batches,
                },
            };
            let code = match ctx.services.groups.write_share_state(&key, &state).await {
                Ok(()) => 0,
                Err(error) => error_code(&error),
            };
            partitions.push(result.with_error_code(code));
        }
        results.push(
            WriteStateResult::default()
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions),
        );
    }
    WriteShareGroupStateResponse::default().with_results(results)
}
