//! AlterPartitionReassignments (key 45, v0): pin partitions to operator-chosen replicas,
//! or cancel (null replicas). The decision per partition is
//! `cluster::reassignment::alteration` (Kafka's validation and codes); the pins of one
//! topic are written in one compare-and-swap of the topic (`TopicSpec::replica_assignments`)
//! and the controller carries them out stepwise, as it carries out the ring's moves.
//! The answer, as Kafka's, says the reassignment was accepted, not that it completed
//! (ListPartitionReassignments shows it while it runs).
//!
//! A cancel removes the pin and the ring places the partition again. Kafka reverts a
//! cancelled reassignment to the partition's original replicas; tern reverts to the
//! ring's placement, which is what the partition had unless the cluster changed. A cancel
//! of a partition the ring itself is moving (no pin) succeeds and changes nothing: the
//! ring's target is what a cancel would revert to.
//!
//! With an authorizer the request needs ALTER on the cluster; without it the top-level
//! code and every partition answer CLUSTER_AUTHORIZATION_FAILED (Kafka's
//! `authorizeClusterOperation` and `AlterPartitionReassignmentsRequest.getErrorResponse`).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::str_bytes;
use crate::cluster::reassignment::{alteration, AlterError, Alteration};
use crate::cluster::MetadataError;
use crate::security::acl::AclOperation;

/// One partition's outcome: `Ok(true)` a pin change to write, `Ok(false)` nothing to
/// write, or the error code and message to answer.
type Outcome = Result<bool, (ResponseError, String)>;

pub async fn handle(
    ctx: &RequestContext,
    request: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    if !ctx.authorize_cluster(AclOperation::Alter) {
        return refused(&request);
    }
    let store = &ctx.services.store;
    let brokers = store.brokers();
    let registered: BTreeSet<i32> = brokers.iter().map(|b| b.node_id).collect();
    let active: BTreeSet<i32> = brokers
        .iter()
        .filter(|b| !b.shutting_down)
        .map(|b| b.node_id)
        .collect();
    let mut responses = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let name = topic.name.to_string();
        let spec = store.topic(&name).await;
        let assignment = spec.as_ref().and_then(|s| store.assignment(s));
        // Per partition: Ok(write it) or the error to answer.
        let mut outcomes: Vec<(i32, Outcome)> = Vec::new();
        let mut changes: BTreeMap<i32, Option<Vec<i32>>> = BTreeMap::new();
        for partition in &topic.partitions {
            let index = partition.partition_index;
            let Some(spec) = spec.as_ref() else {
                outcomes.push((
                    index,
                    Err((
                        ResponseError::UnknownTopicOrPartition,
                        format!("Unable to find a topic named {name}."),
                    )),
                ));
                continue;
            };
            let replicas: Option<Vec<i32>> = partition
                .replicas
                .as_ref()
                .map(|r| r.iter().map(|b| b.0).collect());
            let current = assignment.as_ref().and_then(|a| a.partition(index));
            let decided = alteration(
                spec,
                current,
                index,
                replicas.as_deref(),
                &registered,
                &active,
            );
            let outcome = match decided {
                Ok(Alteration::Pin(replicas)) => {
                    changes.insert(index, Some(replicas));
                    Ok(true)
                }
                Ok(Alteration::Unpin) => {
                    changes.insert(index, None);
                    Ok(true)
                }
                Ok(Alteration::Nothing) => Ok(false),
                Err(AlterError::UnknownPartition) => Err((
                    ResponseError::UnknownTopicOrPartition,
                    format!("Unable to find partition {name}:{index}."),
                )),
                Err(AlterError::NoReassignmentInProgress) => Err((
                    ResponseError::NoReassignmentInProgress,
                    ResponseError::NoReassignmentInProgress.to_string(),
                )),
                Err(AlterError::Invalid(error)) => {
                    Err((ResponseError::InvalidReplicaAssignment, error.to_string()))
                }
            };
            outcomes.push((index, outcome));
        }
        let written = match (&spec, changes.is_empty()) {
            (Some(spec), false) => store
                .set_replica_assignments(&name, spec.topic_id, &changes)
                .await
                .map(|_| ())
                .map_err(|error| match error {
                    MetadataError::UnknownTopic(_) => (
                        ResponseError::UnknownTopicOrPartition,
                        format!("Unable to find a topic named {name}."),
                    ),
                    other => (ResponseError::UnknownServerError, other.to_string()),
                }),
            _ => Ok(()),
        };
        if written.is_ok() && !changes.is_empty() {
            tracing::info!(topic = %name, changes = ?changes, "partition reassignment changed");
        }
        let partitions = outcomes
            .into_iter()
            .map(|(index, outcome)| {
                let outcome = match (outcome, &written) {
                    (Ok(true), Err(error)) => Err(error.clone()),
                    (other, _) => other,
                };
                let response = ReassignablePartitionResponse::default().with_partition_index(index);
                match outcome {
                    Ok(_) => response,
                    Err((error, message)) => response
                        .with_error_code(error.code())
                        .with_error_message(Some(str_bytes(message))),
                }
            })
            .collect();
        responses.push(
            ReassignableTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    AlterPartitionReassignmentsResponse::default().with_responses(responses)
}

/// The answer to a request without ALTER on the cluster.
fn refused(request: &AlterPartitionReassignmentsRequest) -> AlterPartitionReassignmentsResponse {
    let error = ResponseError::ClusterAuthorizationFailed;
    let message = Some(str_bytes(error.to_string()));
    let responses = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    ReassignablePartitionResponse::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(error.code())
                        .with_error_message(message.clone())
                })
                .collect();
            ReassignableTopicResponse::default()
                .with_name(t.name.clone())
                .with_partitions(partitions)
        })
        .collect();
    AlterPartitionReassignmentsResponse::default()
        .with_error_code(error.code())
        .with_error_message(message)
        .with_responses(responses)
}
