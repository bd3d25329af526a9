//! ListPartitionReassignments (key 46, v0): every partition with a reassignment in
//! progress — a stored `target`, whether the ring or an operator's pin set it — as
//! `cluster::reassignment::ongoing` describes it (all replicas taking part, those being
//! added, those being removed). A null topic list means every topic; named partitions
//! that are not moving (or do not exist) are left out, as Kafka leaves them out.
//! With an authorizer the request needs DESCRIBE on the cluster; without it the answer is
//! CLUSTER_AUTHORIZATION_FAILED with the named partitions echoed empty (Kafka's
//! `ListPartitionReassignmentsRequest.getErrorResponse`).

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse,
};

use super::super::context::RequestContext;
use super::super::topic_name;
use crate::cluster::reassignment::ongoing;
use crate::security::acl::AclOperation;
use kafka_protocol::ResponseError;

fn brokers(ids: Vec<i32>) -> Vec<BrokerId> {
    ids.into_iter().map(BrokerId).collect()
}

pub async fn handle(
    ctx: &RequestContext,
    request: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    if !ctx.authorize_cluster(AclOperation::Describe) {
        let error = ResponseError::ClusterAuthorizationFailed;
        let topics = request
            .topics
            .iter()
            .flatten()
            .map(|t| {
                OngoingTopicReassignment::default()
                    .with_name(t.name.clone())
                    .with_partitions(
                        t.partition_indexes
                            .iter()
                            .map(|&p| {
                                OngoingPartitionReassignment::default().with_partition_index(p)
                            })
                            .collect(),
                    )
            })
            .collect();
        return ListPartitionReassignmentsResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(super::super::str_bytes(error.to_string())))
            .with_topics(topics);
    }
    let store = &ctx.services.store;
    // (topic, None = all its partitions | Some(the named ones)).
    let wanted: Vec<(String, Option<Vec<i32>>)> = match &request.topics {
        None => store
            .topics()
            .await
            .into_iter()
            .map(|t| (t.name, None))
            .collect(),
        Some(topics) => topics
            .iter()
            .map(|t| (t.name.to_string(), Some(t.partition_indexes.clone())))
            .collect(),
    };
    let mut topics = Vec::new();
    for (name, indexes) in wanted {
        let Some(spec) = store.topic(&name).await else {
            continue;
        };
        let Some(assignment) = store.assignment(&spec) else {
            continue;
        };
        let indexes = indexes.unwrap_or_else(|| (0..spec.partitions).collect());
        let partitions: Vec<OngoingPartitionReassignment> = indexes
            .into_iter()
            .filter_map(|index| {
                let state = assignment.partition(index)?;
                let moving = ongoing(state)?;
                Some(
                    OngoingPartitionReassignment::default()
                        .with_partition_index(index)
                        .with_replicas(brokers(moving.replicas))
                        .with_adding_replicas(brokers(moving.adding))
                        .with_removing_replicas(brokers(moving.removing)),
                )
            })
            .collect();
        if !partitions.is_empty() {
            topics.push(
                OngoingTopicReassignment::default()
                    .with_name(topic_name(name))
                    .with_partitions(partitions),
            );
        }
    }
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
