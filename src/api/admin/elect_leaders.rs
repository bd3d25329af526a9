//! ElectLeaders (key 43, v0–2): preferred or unclean leader election for the named
//! partitions (null: every partition; then, as Kafka, partitions whose election is not
//! needed are left out of the answer).
//!
//! The decision per partition is `election::election_verdict` (Kafka's codes). The
//! controller already elects the preferred replica by itself whenever it is in sync, so
//! a PREFERRED request that can succeed only waits (bounded by `timeout_ms`) until the
//! store shows it led by its preferred replica. An UNCLEAN request marks the partition
//! for a one-shot unclean election the controller honours even when the topic's
//! `unclean.leader.election.enable` is false (counted in
//! `tern_unclean_leader_elections_total`), then waits the same way. What is not done by
//! the deadline answers REQUEST_TIMED_OUT, or the verdict the partition has by then.
//!
//! With an authorizer the request needs ALTER on the cluster; without it every named
//! partition, and the top-level code from v1, answer CLUSTER_AUTHORIZATION_FAILED
//! (Kafka's `ElectLeadersRequest.getErrorResponse`, which its controller answers).

use std::collections::BTreeSet;
use std::time::Duration;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{str_bytes, topic_name};
use crate::cluster::election::{
    election_done, election_verdict, ElectionType, ElectionVerdict, Membership,
};
use crate::cluster::{MetadataStore, TopicSpec};
use crate::security::acl::AclOperation;

/// How often a waiting request looks at the store again.
const POLL: Duration = Duration::from_millis(50);
/// The longest a request waits, whatever its timeout says.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// One partition of the request: where it stands, and what it waits for.
struct Item {
    topic: usize,
    partition: i32,
    spec: Option<TopicSpec>,
    outcome: Option<ResponseError>,
    /// Left out of the answer (an all-partitions request, election not needed).
    omit: bool,
}

fn code(verdict: ElectionVerdict) -> Option<ResponseError> {
    match verdict {
        ElectionVerdict::NotNeeded => Some(ResponseError::ElectionNotNeeded),
        ElectionVerdict::PreferredNotAvailable => Some(ResponseError::PreferredLeaderNotAvailable),
        ElectionVerdict::EligibleNotAvailable => Some(ResponseError::EligibleLeadersNotAvailable),
        ElectionVerdict::Elect => None,
    }
}

/// One partition as the store sees it now.
struct Now {
    verdict: ElectionVerdict,
    done: bool,
    /// An unclean election is asked for and not yet taken up by the controller.
    requested: bool,
}

/// The verdict for one partition as the store sees it now; `None` when unknown.
fn verdict_now(
    store: &dyn MetadataStore,
    spec: &TopicSpec,
    partition: i32,
    kind: ElectionType,
) -> Option<Now> {
    let brokers = store.brokers();
    let live: BTreeSet<i32> = brokers.iter().map(|b| b.node_id).collect();
    let down: BTreeSet<i32> = brokers
        .iter()
        .filter(|b| b.shutting_down)
        .map(|b| b.node_id)
        .collect();
    let members = Membership {
        live: &live,
        shutting_down: &down,
        restarted: &std::collections::BTreeMap::new(),
    };
    let assignment = store.assignment(spec)?;
    let state = assignment.partition(partition)?;
    Some(Now {
        verdict: election_verdict(state, kind, &members),
        done: election_done(state, kind),
        requested: state.unclean_requested,
    })
}

/// The answer to a request without ALTER on the cluster.
fn refused(ctx: &RequestContext, request: &ElectLeadersRequest) -> ElectLeadersResponse {
    let error = ResponseError::ClusterAuthorizationFailed;
    let message = Some(str_bytes(error.to_string()));
    let results = request
        .topic_partitions
        .iter()
        .flatten()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|&p| {
                    PartitionResult::default()
                        .with_partition_id(p)
                        .with_error_code(error.code())
                        .with_error_message(message.clone())
                })
                .collect();
            ReplicaElectionResult::default()
                .with_topic(t.topic.clone())
                .with_partition_result(partitions)
        })
        .collect();
    let response = ElectLeadersResponse::default().with_replica_election_results(results);
    // The top-level code exists from v1; v0 carries the refusal per partition only.
    if ctx.api_version >= 1 {
        response.with_error_code(error.code())
    } else {
        response
    }
}

/// Marks partition `partition` of `spec` for a one-shot unclean election.
async fn request_unclean(store: &dyn MetadataStore, spec: &TopicSpec, partition: i32) -> bool {
    match store
        .request_unclean_election(&spec.name, spec.topic_id, partition)
        .await
    {
        Ok(_) => true,
        Err(error) => {
            tracing::warn!(topic = %spec.name, partition, %error, "asking for an unclean election failed");
            false
        }
    }
}

pub async fn handle(ctx: &RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse {
    if !ctx.authorize_cluster(AclOperation::Alter) {
        return refused(ctx, &request);
    }
    let store = ctx.services.store.as_ref();
    // v0 has no election type: preferred.
    let kind = if ctx.api_version == 0 {
        Some(ElectionType::Preferred)
    } else {
        ElectionType::from_wire(request.election_type)
    };
    let Some(kind) = kind else {
        return ElectLeadersResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code());
    };
    let all = request.topic_partitions.is_none();
    let mut topics: Vec<String> = Vec::new();
    let mut items: Vec<Item> = Vec::new();
    match &request.topic_partitions {
        None => {
            for spec in store.topics().await {
                topics.push(spec.name.clone());
                for partition in 0..spec.partitions {
                    items.push(Item {
                        topic: topics.len() - 1,
                        partition,
                        spec: Some(spec.clone()),
                        outcome: None,
                        omit: false,
                    });
                }
            }
        }
        Some(requested) => {
            for t in requested {
                let spec = store.topic(&t.topic).await;
                topics.push(t.topic.to_string());
                for &partition in &t.partitions {
                    items.push(Item {
                        topic: topics.len() - 1,
                        partition,
                        spec: spec.clone(),
                        outcome: None,
                        omit: false,
                    });
                }
            }
        }
    }
    let mut pending = 0;
    for item in &mut items {
        let Some(spec) = item.spec.as_ref() else {
            item.outcome = Some(ResponseError::UnknownTopicOrPartition);
            continue;
        };
        let Some(Now { verdict, .. }) = verdict_now(store, spec, item.partition, kind) else {
            item.outcome = Some(ResponseError::UnknownTopicOrPartition);
            continue;
        };
        item.outcome = code(verdict);
        item.omit = all && verdict == ElectionVerdict::NotNeeded;
        if item.outcome.is_some() {
            continue;
        }
        if kind == ElectionType::Unclean {
            if !request_unclean(store, spec, item.partition).await {
                item.outcome = Some(ResponseError::UnknownServerError);
                continue;
            }
            tracing::warn!(topic = %spec.name, partition = item.partition, "unclean leader election requested by an operator");
        }
        pending += 1;
    }
    let timeout =
        Duration::from_millis(u64::try_from(request.timeout_ms).unwrap_or(0)).min(MAX_WAIT);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let mut waiting = 0;
        for item in items.iter().filter(|i| i.outcome.is_none()) {
            let Some(spec) = item.spec.as_ref() else {
                continue;
            };
            let Some(now) = verdict_now(store, spec, item.partition, kind) else {
                continue;
            };
            waiting += usize::from(!now.done);
            // The controller takes a request up once, in its next round; a broker that
            // just restarted sits that round out (it may have lost unflushed data), so
            // the round may find no one to elect yet: ask again while one is eligible.
            let ask_again = kind == ElectionType::Unclean
                && !now.done
                && !now.requested
                && now.verdict == ElectionVerdict::Elect;
            if ask_again {
                request_unclean(store, spec, item.partition).await;
            }
        }
        if waiting == 0 || pending == 0 || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    for item in items.iter_mut().filter(|i| i.outcome.is_none()) {
        let now = item
            .spec
            .as_ref()
            .and_then(|spec| verdict_now(store, spec, item.partition, kind));
        item.outcome = match now {
            Some(Now { done: true, .. }) => None,
            Some(Now { verdict, .. }) => code(verdict).or(Some(ResponseError::RequestTimedOut)),
            None => Some(ResponseError::UnknownTopicOrPartition),
        };
    }
    let mut results: Vec<ReplicaElectionResult> = topics
        .iter()
        .map(|name| ReplicaElectionResult::default().with_topic(topic_name(name.clone())))
        .collect();
    for item in items.iter().filter(|i| !i.omit) {
        let (error_code, message) = match item.outcome {
            None => (0, None),
            Some(error) => (
                error.code(),
                Some(str_bytes(error_message(
                    error,
                    &topics[item.topic],
                    item.partition,
                ))),
            ),
        };
        if let Some(result) = results.get_mut(item.topic) {
            result.partition_result.push(
                PartitionResult::default()
                    .with_partition_id(item.partition)
                    .with_error_code(error_code)
                    .with_error_message(message),
            );
        }
    }
    ElectLeadersResponse::default().with_replica_election_results(results)
}

fn error_message(error: ResponseError, topic: &str, partition: i32) -> String {
    match error {
        ResponseError::UnknownTopicOrPartition => {
            format!("No such partition as {topic}-{partition}")
        }
        ResponseError::RequestTimedOut => {
            format!("The election of {topic}-{partition} did not happen before the timeout")
        }
        other => other.to_string(),
    }
}
