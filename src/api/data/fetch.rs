//! Fetch (key 1, v4–18): whole record batches straight from the segment maps.
//!
//! - A fetch offset inside a batch returns that whole batch; the client drops the
//!   records below its offset.
//! - KIP-74: the first batch of the first non-empty partition is returned even when
//!   larger than `max_bytes` or `partition_max_bytes`, so a consumer always progresses.
//! - Long poll: with less than `min_bytes` available, wait (at most `max_wait_ms`,
//!   capped by `fetch_max_wait_ms`) for an append to any requested partition.
//! - Sessionless: the response always carries session id 0, which tells clients that
//!   use KIP-227 sessions to send full requests.
//! - Consumers read below the high watermark and long-poll on it. A follower (a
//!   request with a replica id) reads up to the log end, long-polls on it, and its
//!   fetch offset is its progress: the leader's ISR and high watermark follow it
//!   (`Partition::read_for_follower`); a divergent follower is told where to truncate
//!   (`diverging_epoch`, v12+).

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, ProducerId};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tokio::time::Instant;

use super::super::context::RequestContext;
use super::super::errors;
use crate::log::txn::AbortedTxn;
use crate::model::{Isolation, LeaderEpoch, Offset};
use crate::replication::replica::FetchPosition;
use crate::replication::{FollowerProgress, NotServed, TopicReplicas};
use crate::security::acl::AclOperation;

pub async fn handle(ctx: &RequestContext, request: FetchRequest) -> FetchResponse {
    // tern never creates a fetch session (it answers session id 0), so any other id
    // names a session it does not have.
    if ctx.api_version >= 7 && request.session_id != 0 {
        return FetchResponse::default()
            .with_error_code(ResponseError::FetchSessionIdNotFound.code());
    }
    let max_wait = Duration::from_millis(request.max_wait_ms.max(0) as u64)
        .min(ctx.services.server.fetch_max_wait);
    let deadline = Instant::now() + max_wait;
    loop {
        let attempt = read_once(ctx, &request);
        let done = attempt.bytes >= i64::from(request.min_bytes.max(0)) || attempt.has_error;
        if done || Instant::now() >= deadline || attempt.watches.is_empty() {
            record_metrics(&attempt);
            return attempt.response;
        }
        let waited = Instant::now();
        wait_for_append(attempt.watches, deadline).await;
        ctx.remote_wait_us.fetch_add(
            waited.elapsed().as_micros() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

struct Attempt {
    response: FetchResponse,
    bytes: i64,
    has_error: bool,
    watches: Vec<watch::Receiver<i64>>,
    /// `(topic name, bytes, records)` served to a consumer; v13+ requests name topics by
    /// id only.
    served: Vec<(String, u64, u64)>,
    /// A follower's fetch: `bytes` count as replication, not as any topic's bytes out.
    from_follower: bool,
}

fn resolve(
    ctx: &RequestContext,
    name: &str,
    topic_id: uuid::Uuid,
) -> Option<std::sync::Arc<TopicReplicas>> {
    if ctx.api_version >= 13 {
        ctx.services.replicas.topic_by_id(topic_id)
    } else {
        ctx.services.replicas.topic(name)
    }
}

/// Kafka's Fetch rule: a follower (replica id set) needs CLUSTER_ACTION on the cluster, a
/// consumer READ on the topic — checked by name before existence, so that v4–12 cannot
/// probe for names; a v13+ topic id that names nothing stays UNKNOWN_TOPIC_ID.
fn authorized(
    ctx: &RequestContext,
    replica_id: i32,
    by_id: bool,
    name: &str,
    replicas: Option<&TopicReplicas>,
) -> bool {
    if replica_id >= 0 {
        return ctx.authorize_cluster(AclOperation::ClusterAction);
    }
    match (by_id, replicas) {
        (true, Some(t)) => ctx.authorize_topic(AclOperation::Read, &t.spec.name),
        (true, None) => true,
        (false, _) => ctx.authorize_topic(AclOperation::Read, name),
    }
}

fn aborted_transactions(aborted: &[AbortedTxn]) -> Vec<AbortedTransaction> {
    aborted
        .iter()
        .map(|txn| {
            AbortedTransaction::default()
                .with_producer_id(ProducerId(txn.producer_id))
                .with_first_offset(txn.first_offset)
        })
        .collect()
}

/// The fetching follower's id (v15+ in `replica_state`); negative for a consumer.
pub fn replica_id(ctx: &RequestContext, request: &FetchRequest) -> i32 {
    if ctx.api_version >= 15 {
        request.replica_state.replica_id.0
    } else {
        request.replica_id.0
    }
}

fn read_once(ctx: &RequestContext, request: &FetchRequest) -> Attempt {
    let mut remaining = i64::from(request.max_bytes.max(0));
    let mut bytes = 0i64;
    let mut has_error = false;
    let mut watches = Vec::new();
    let mut topics = Vec::with_capacity(request.topics.len());
    let mut served = Vec::new();
    let replica_id = replica_id(ctx, request);
    // KIP-903's broker epoch: tern's followers send their incarnation (v15+).
    let replica_incarnation = (ctx.api_version >= 15 && request.replica_state.replica_epoch >= 0)
        .then_some(request.replica_state.replica_epoch);
    let now = crate::model::now_ms();
    let isolation = Isolation::from_wire(request.isolation_level);
    for topic in &request.topics {
        let replicas = resolve(ctx, &topic.topic, topic.topic_id);
        let by_id = ctx.api_version >= 13;
        let authorized = authorized(ctx, replica_id, by_id, &topic.topic, replicas.as_deref());
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for wanted in &topic.partitions {
            let mut data = PartitionData::default()
                .with_partition_index(wanted.partition)
                .with_high_watermark(-1)
                .with_last_stable_offset(-1)
                .with_log_start_offset(-1)
                .with_preferred_read_replica(BrokerId(-1))
                .with_records(Some(Bytes::new()));
            if !authorized {
                has_error = true;
                partitions
                    .push(data.with_error_code(ResponseError::TopicAuthorizationFailed.code()));
                continue;
            }
            // KIP-392: a consumer (v11+) may read from a follower it was pointed to.
            let follower_read = replica_id < 0 && ctx.api_version >= 11;
            let lookup = replicas.as_ref().map(|t| {
                t.partition(wanted.partition).or_else(|not_served| {
                    t.replica(wanted.partition)
                        .filter(|p| follower_read && p.following().is_some())
                        .ok_or(not_served)
                })
            });
            let partition = match lookup {
                Some(Ok(partition)) => partition,
                lookup => {
                    has_error = true;
                    let code = match lookup {
                        Some(Err(NotServed::Unknown)) => errors::unknown_partition(true, by_id),
                        Some(Err(not_served)) => errors::not_served(not_served),
                        _ => errors::unknown_partition(false, by_id),
                    };
                    partitions.push(data.with_error_code(code.code()));
                    continue;
                }
            };
            let limit = i64::from(wanted.partition_max_bytes.max(0))
                .min(remaining)
                .max(0) as u64;
            let outcome = if replica_id >= 0 {
                let position = FetchPosition {
                    fetch_offset: Offset(wanted.fetch_offset),
                    last_fetched_epoch: (ctx.api_version >= 12 && wanted.last_fetched_epoch >= 0)
                        .then_some(LeaderEpoch(wanted.last_fetched_epoch)),
                    current_leader_epoch: LeaderEpoch(wanted.current_leader_epoch),
                    log_start: Offset(wanted.log_start_offset),
                };
                watches.push(partition.watch_log_end());
                partition
                    .read_for_follower(
                        crate::replication::FollowerProcess {
                            id: replica_id,
                            incarnation: replica_incarnation,
                        },
                        &position,
                        limit,
                        now,
                    )
                    .map(|read| {
                        if let Some(proposal) = read.proposal {
                            ctx.services.replicas.propose_isr(partition, proposal);
                        }
                        if let Some((epoch, end_offset)) = read.diverging {
                            has_error = true;
                            data.diverging_epoch = EpochEndOffset::default()
                                .with_epoch(epoch)
                                .with_end_offset(end_offset);
                        }
                        read.read
                    })
            } else {
                let epoch = partition.leader_epoch();
                if let Err(code) =
                    errors::check_current_leader_epoch(wanted.current_leader_epoch, epoch)
                {
                    has_error = true;
                    partitions.push(data.with_error_code(code.code()));
                    continue;
                }
                let preferred = (ctx.api_version >= 11 && partition.is_leader())
                    .then(|| {
                        preferred_read_replica(
                            ctx,
                            partition,
                            request.rack_id.as_str(),
                            Offset(wanted.fetch_offset),
                        )
                    })
                    .flatten();
                if let Some(preferred) = preferred {
                    // Kafka answers with no records and the replica to read from.
                    let offsets = partition.offsets();
                    partitions.push(
                        data.with_preferred_read_replica(BrokerId(preferred))
                            .with_high_watermark(offsets.high_watermark().0)
                            .with_last_stable_offset(offsets.last_stable().0)
                            .with_log_start_offset(offsets.log_start().0),
                    );
                    has_error = true;
                    continue;
                }
                watches.push(partition.watch_high_watermark());
                partition.read_for_consumer(
                    Offset(wanted.fetch_offset),
                    limit,
                    bytes == 0,
                    isolation,
                )
            };
            match outcome {
                Ok(read) => {
                    let size = read.records.as_ref().map_or(0, |r| r.len() as i64);
                    if let (Some(records), Some(t), true) =
                        (read.records.as_ref(), replicas.as_ref(), replica_id < 0)
                    {
                        let count = crate::log::batch::record_count(records);
                        served.push((t.spec.name.clone(), size as u64, count));
                    }
                    bytes += size;
                    remaining -= size;
                    // Kafka names aborted transactions to read_committed fetches only.
                    let aborted = (isolation == Isolation::ReadCommitted && replica_id < 0)
                        .then(|| aborted_transactions(&read.aborted));
                    data = data
                        .with_high_watermark(read.high_watermark.0)
                        .with_last_stable_offset(read.last_stable_offset.0)
                        .with_log_start_offset(read.log_start_offset.0)
                        .with_aborted_transactions(aborted)
                        .with_records(Some(read.records.unwrap_or_default()));
                }
                Err(e) => {
                    has_error = true;
                    let offsets = partition.offsets();
                    data = data
                        .with_error_code(errors::partition_error(&e).code())
                        .with_high_watermark(offsets.high_watermark().0)
                        .with_last_stable_offset(offsets.last_stable().0)
                        .with_log_start_offset(offsets.log_start().0);
                }
            }
            partitions.push(data);
        }
        topics.push(
            FetchableTopicResponse::default()
                .with_topic(topic.topic.clone())
                .with_topic_id(topic.topic_id)
                .with_partitions(partitions),
        );
    }
    Attempt {
        response: FetchResponse::default()
            .with_session_id(0)
            .with_responses(topics),
        bytes,
        has_error,
        watches,
        served,
        from_follower: replica_id >= 0,
    }
}

/// KIP-392's rack-aware selection: when the consumer names a rack the leader is not
/// in, a follower in that rack (see [`choose_read_replica`]).
fn preferred_read_replica(
    ctx: &RequestContext,
    partition: &crate::replication::Partition,
    client_rack: &str,
    fetch_offset: Offset,
) -> Option<i32> {
    if client_rack.is_empty() || ctx.services.node.rack.as_deref() == Some(client_rack) {
        return None;
    }
    let in_rack: Vec<i32> = ctx
        .services
        .store
        .brokers()
        .into_iter()
        .filter(|b| b.rack.as_deref() == Some(client_rack))
        .map(|b| b.node_id)
        .collect();
    let isr = partition.isr();
    choose_read_replica(
        &partition.follower_progress(),
        |id| isr.contains(&crate::model::BrokerId(id)) && in_rack.contains(&id),
        fetch_offset,
    )
}

/// Of the followers `eligible` accepts (in sync, in the consumer's rack), one that holds
/// `fetch_offset` (its log start at or below it and its log end at or past it, as
/// Kafka's `ReplicaManager.findPreferredReadReplica` requires): the most caught up,
/// then the lowest id. A follower whose log start passed the offset would answer
/// OFFSET_OUT_OF_RANGE, and the consumer would reset its position.
fn choose_read_replica(
    followers: &[FollowerProgress],
    eligible: impl Fn(i32) -> bool,
    fetch_offset: Offset,
) -> Option<i32> {
    followers
        .iter()
        .filter(|f| eligible(f.id))
        .filter(|f| f.log_end >= fetch_offset.0)
        .filter(|f| f.log_start.is_none_or(|start| start <= fetch_offset.0))
        .max_by_key(|f| (f.log_end, -f.id))
        .map(|f| f.id)
}

/// Counts what was served: per topic (bytes and records, by topic name) to consumers,
/// in all to followers; and the per-partition errors of a response.
fn record_metrics(attempt: &Attempt) {
    if attempt.from_follower && attempt.bytes > 0 {
        metrics::counter!(crate::metrics::REPLICATION_BYTES_OUT_TOTAL)
            .increment(attempt.bytes as u64);
    }
    for (topic, bytes, records) in &attempt.served {
        metrics::counter!(crate::metrics::TOPIC_BYTES_OUT_TOTAL, "topic" => topic.clone())
            .increment(*bytes);
        metrics::counter!(crate::metrics::TOPIC_MESSAGES_OUT_TOTAL, "topic" => topic.clone())
            .increment(*records);
    }
    for topic in &attempt.response.responses {
        for partition in topic.partitions.iter().filter(|p| p.error_code != 0) {
            let error = partition.error_code.to_string();
            metrics::counter!(crate::metrics::PARTITION_ERRORS_TOTAL, "api" => "Fetch", "error" => error).increment(1);
        }
    }
}

/// The record sets in a response, for the encoder to reference instead of copy.
pub fn record_sets(response: &FetchResponse) -> Vec<Bytes> {
    response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .filter_map(|p| p.records.clone())
        .filter(|r| !r.is_empty())
        .collect()
}

/// Waits until any partition's log end moves, or the deadline.
async fn wait_for_append(mut watches: Vec<watch::Receiver<i64>>, deadline: Instant) {
    let changes = watches.iter_mut().map(|w| Box::pin(w.changed()));
    let _ = tokio::time::timeout_at(deadline, futures::future::select_all(changes)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn follower(id: i32, log_start: Option<i64>, log_end: i64) -> FollowerProgress {
        FollowerProgress {
            id,
            log_end,
            log_start,
            last_caught_up_ms: 0,
        }
    }

    #[test]
    fn a_read_replica_holds_the_offset_the_consumer_reads() {
        let followers = [
            follower(2, Some(0), 100),
            follower(3, Some(60), 120),
            follower(4, None, 90),
        ];
        let anyone = |_| true;
        // 3 is the most caught up, but its log start passed offset 50.
        assert_eq!(choose_read_replica(&followers, anyone, Offset(50)), Some(2));
        assert_eq!(choose_read_replica(&followers, anyone, Offset(60)), Some(3));
        // Past 2's and 4's log end: only 3 has it.
        assert_eq!(
            choose_read_replica(&followers, anyone, Offset(110)),
            Some(3)
        );
        assert_eq!(choose_read_replica(&followers, anyone, Offset(121)), None);
        // A log start not yet declared does not rule a follower out (Kafka's unknown, -1).
        assert_eq!(
            choose_read_replica(&followers, |id| id == 4, Offset(0)),
            Some(4)
        );
        assert_eq!(
            choose_read_replica(&followers, |id| id != 2, Offset(50)),
            Some(4),
            "ineligible ones are passed over"
        );
    }

    #[test]
    fn ties_go_to_the_lowest_id() {
        let followers = [follower(5, Some(0), 10), follower(3, Some(0), 10)];
        assert_eq!(
            choose_read_replica(&followers, |_| true, Offset(5)),
            Some(3)
        );
    }
}
