//! Where what an HTTP request touches is served, so that any broker of a cluster
//! answers every call.
//!
//! A partition is read and appended to here when this broker leads it, and otherwise
//! through Kafka requests to its leader (Fetch, Produce acks=all, ListOffsets). A
//! subscription's group is read and committed here when this broker coordinates it,
//! and otherwise through OffsetFetch, OffsetCommit, OffsetDelete and DeleteGroups to
//! its coordinator. Requests to other brokers go through [`crate::cluster::peers`]: they
//! are the same Kafka requests any client would send, so the leader or coordinator
//! applies its own checks (leadership, cluster session, durability) as for any client.
//!
//! On a single node everything is here and nothing leaves the process.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::delete_groups_request::DeleteGroupsRequest;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequest, OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::{BrokerId, GroupId, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use super::subscribe::{parse_messages, read_from, Read, Subscription};
use super::{ApiError, HttpApi};
use crate::cluster::peers::PeerError;
use crate::cluster::TopicSpec;
use crate::group::coordinator::{CommitError, OffsetCommit};
use crate::group::offsets::{self, CommittedOffset, OFFSETS_TOPIC};
use crate::metrics as m;
use crate::replication::{NotServed, Partition, TopicReplicas};

/// Who serves something: this broker (with the local object) or broker `n`.
#[derive(Debug, Clone)]
pub enum Owner<T> {
    Here(T),
    Broker(i32),
}

/// One read of a partition, wherever it is led.
#[derive(Debug, Default)]
pub struct PartitionRead {
    pub read: Read,
    pub log_start: i64,
    pub log_end: i64,
}

/// One group of a multi-group OffsetFetch: its id and the topic partitions asked for
/// (`None`: all it has).
type GroupQuery<'a> = (String, Option<(&'a TopicSpec, Vec<i32>)>);

/// What one Fetch found for one partition.
#[derive(Debug)]
enum Fetched {
    Read(PartitionRead),
    /// The position lies below the partition's log start (retention removed it): the
    /// offset it starts at now.
    Expired(i64),
    Failed(ApiError),
}

/// Kafka's OFFSET_OUT_OF_RANGE error code.
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// How long a call failing with transient errors is retried before its 503.
const RETRY_FOR: Duration = Duration::from_secs(3);

/// How long one Produce to a leader may wait for its acknowledgement.
const PRODUCE_TIMEOUT_MS: i32 = 30_000;
/// Bytes asked of a remote leader per partition read (as a local read takes).
const READ_BYTES: i32 = 1024 * 1024;

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn group_id(group: &str) -> GroupId {
    GroupId(StrBytes::from_string(group.to_string()))
}

/// Kafka errors that mean "not yet, or not here any more": the broker has not caught
/// up with a new topic, or leadership or coordination is moving (UNKNOWN_TOPIC_OR_
/// PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, COORDINATOR_LOAD_IN_PROGRESS,
/// COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR). The request was not carried out.
const RETRIABLE: [i16; 6] = [3, 5, 6, 14, 15, 16];

/// A Kafka error code from another broker, as a 503.
fn remote_error(node: i32, what: &str, code: i16) -> ApiError {
    let message = format!("broker {node} answered {what} with Kafka error {code}");
    if RETRIABLE.contains(&code) {
        ApiError::transient(message)
    } else {
        ApiError::unavailable(message)
    }
}

/// A failed exchange with another broker. Only one that never reached it is worth
/// retrying at once: a request that may have been carried out (a Produce) must not be
/// sent twice behind the caller's back.
fn peer_error(node: i32, error: PeerError) -> ApiError {
    let message = format!("reaching broker {node}: {error}");
    match error {
        PeerError::UnknownBroker(_) | PeerError::Connect(_) => ApiError::transient(message),
        PeerError::Client(_) => ApiError::unavailable(message),
    }
}

fn commit_error(error: CommitError) -> ApiError {
    ApiError::unavailable(format!("committing the subscription's position: {error}"))
}

/// A broker's answer for one partition, unless it left the partition out or answered
/// it with an error.
fn partition_answer<P>(
    node: i32,
    what: &str,
    found: Option<P>,
    error_code: impl Fn(&P) -> i16,
) -> Result<P, ApiError> {
    let found = found.ok_or_else(|| {
        ApiError::unavailable(format!(
            "broker {node} left the partition out of its {what} answer"
        ))
    })?;
    match error_code(&found) {
        0 => Ok(found),
        code => Err(remote_error(node, what, code)),
    }
}

impl HttpApi {
    fn node_id(&self) -> i32 {
        self.services.node.node_id
    }

    /// Sends `request` to broker `node` (at the best common version up to `preferred`).
    async fn ask<R>(&self, node: i32, request: R, preferred: i16) -> Result<R::Response, ApiError>
    where
        R: Request + Encodable + HeaderVersion,
        R::Response: Decodable + HeaderVersion,
    {
        self.services
            .peers
            .send(node, request, preferred)
            .await
            .map_err(|e| peer_error(node, e))
    }

    /// `call`, tried again while it fails with a transient error, for at most
    /// [`RETRY_FOR`]: what a Kafka client does for its retriable errors, so that an
    /// HTTP caller does not see the cluster catching up (a topic created a moment ago,
    /// a leader that just moved).
    pub(super) async fn retrying<T, F, Fut>(&self, call: F) -> Result<T, ApiError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        let mut backoff = Duration::from_millis(20);
        loop {
            match call().await {
                Err(error)
                    if error.transient && tokio::time::Instant::now() + backoff < deadline =>
                {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                result => return result,
            }
        }
    }

    /// The leader of `index` of `topic`: here, another broker, or a 503 when there is
    /// none right now (or the store says here but this broker has not caught up yet).
    pub(super) fn partition_owner(
        &self,
        topic: &TopicReplicas,
        index: i32,
    ) -> Result<Owner<Arc<Partition>>, ApiError> {
        match topic.partition(index) {
            Ok(partition) => Ok(Owner::Here(Arc::clone(partition))),
            Err(NotServed::Unknown) => Err(ApiError::not_found(format!(
                "topic '{}' has no partition {index}",
                topic.spec.name
            ))),
            Err(NotServed::NotLeader) => {
                let leader = self
                    .services
                    .store
                    .assignment(&topic.spec)
                    .and_then(|a| a.partition(index).map(|p| p.leader))
                    .unwrap_or(-1);
                if leader < 0 || leader == self.node_id() {
                    return Err(ApiError::transient(format!(
                        "partition {index} of '{}' has no leader right now; retry",
                        topic.spec.name
                    )));
                }
                Ok(Owner::Broker(leader))
            }
        }
    }

    /// Up to `max` messages of partition `index` from offset `from`, and its offsets.
    pub(super) async fn read_partition(
        &self,
        topic: &TopicReplicas,
        index: i32,
        from: i64,
        max: usize,
    ) -> Result<PartitionRead, ApiError> {
        let leader = match self.partition_owner(topic, index)? {
            Owner::Here(partition) => {
                let (log_start, _, log_end) = partition.offsets();
                let read = read_from(&partition, from, max);
                return Ok(PartitionRead {
                    read,
                    log_start,
                    log_end,
                });
            }
            Owner::Broker(leader) => leader,
        };
        let mut found = self
            .fetch_from(topic, leader, &[(index, from)], max)
            .await?;
        match found.pop() {
            Some((_, read)) => read,
            None => Err(remote_error(leader, "Fetch", -1)),
        }
    }

    /// Reads of those of `wanted` (partition, from offset) that other brokers lead, each
    /// up to `max` messages, in one Fetch per leader: per partition, its read or why it
    /// could not be read now. Partitions led here are left to [`Self::read_partition`],
    /// which reads only as much as is still wanted.
    pub(super) async fn read_remote_partitions(
        &self,
        topic: &TopicReplicas,
        wanted: &[(i32, i64)],
        max: usize,
    ) -> BTreeMap<i32, Result<PartitionRead, ApiError>> {
        let mut by_leader: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
        for &(index, from) in wanted {
            if let Ok(Owner::Broker(leader)) = self.partition_owner(topic, index) {
                by_leader.entry(leader).or_default().push((index, from));
            }
        }
        let mut reads = BTreeMap::new();
        for (leader, partitions) in by_leader {
            match self.fetch_from(topic, leader, &partitions, max).await {
                Ok(found) => reads.extend(found),
                Err(error) => {
                    reads.extend(partitions.iter().map(|&(i, _)| (i, Err(error.clone()))))
                }
            }
        }
        reads
    }

    /// One Fetch of `partitions` (partition, from offset) from broker `leader`, each
    /// parsed into up to `max` messages. A position below a partition's log start
    /// (retention removed it) is read again from the log start, as a local read does.
    async fn fetch_from(
        &self,
        topic: &TopicReplicas,
        leader: i32,
        partitions: &[(i32, i64)],
        max: usize,
    ) -> Result<Vec<(i32, Result<PartitionRead, ApiError>)>, ApiError> {
        let mut found = self.fetch_once(topic, leader, partitions, max).await?;
        let expired: Vec<(i32, i64)> = found
            .iter()
            .filter_map(|(index, fetched)| match fetched {
                Fetched::Expired(log_start) => Some((*index, *log_start)),
                _ => None,
            })
            .collect();
        if !expired.is_empty() {
            let again = self.fetch_once(topic, leader, &expired, max).await?;
            found.retain(|(_, fetched)| !matches!(fetched, Fetched::Expired(_)));
            found.extend(again);
        }
        Ok(found
            .into_iter()
            .map(|(index, fetched)| {
                let read = match fetched {
                    Fetched::Read(read) => Ok(read),
                    Fetched::Failed(error) => Err(error),
                    // Expired again at once: retention is racing this read.
                    Fetched::Expired(_) => Err(remote_error(leader, "Fetch", OFFSET_OUT_OF_RANGE)),
                };
                (index, read)
            })
            .collect())
    }

    /// One Fetch of `partitions` from broker `leader`.
    async fn fetch_once(
        &self,
        topic: &TopicReplicas,
        leader: i32,
        partitions: &[(i32, i64)],
        max: usize,
    ) -> Result<Vec<(i32, Fetched)>, ApiError> {
        // About `max` small messages (what is read but not handed out is read again next
        // time), bounded; the first batch comes whole anyway.
        let budget = (max.saturating_mul(2 * 1024)).clamp(64 * 1024, READ_BYTES as usize) as i32;
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(budget)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(&topic.spec.name))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&(index, from)| {
                            FetchPartition::default()
                                .with_partition(index)
                                .with_current_leader_epoch(-1)
                                .with_fetch_offset(from)
                                .with_log_start_offset(-1)
                                .with_partition_max_bytes(budget)
                        })
                        .collect(),
                )]);
        let response = self.ask(leader, request, 12).await?;
        if response.error_code != 0 {
            return Err(remote_error(leader, "Fetch", response.error_code));
        }
        let mut answers: BTreeMap<i32, _> = response
            .responses
            .into_iter()
            .flat_map(|t| t.partitions)
            .map(|p| (p.partition_index, p))
            .collect();
        Ok(partitions
            .iter()
            .map(|&(index, from)| {
                let answer = partition_answer(leader, "Fetch", answers.remove(&index), |p| {
                    // Sorted out below: below the log start it is Expired; above the
                    // log end (a log that moved without its data) there is nothing yet.
                    if p.error_code == OFFSET_OUT_OF_RANGE {
                        0
                    } else {
                        p.error_code
                    }
                });
                let fetched = match answer {
                    Ok(p) if p.error_code == OFFSET_OUT_OF_RANGE && from < p.log_start_offset => {
                        Fetched::Expired(p.log_start_offset)
                    }
                    Ok(p) => {
                        let from = from.max(p.log_start_offset);
                        let label = format!("{}-{index}", topic.spec.name);
                        let read = match &p.records {
                            Some(bytes) if p.error_code == 0 => {
                                parse_messages(bytes, from, max, &label)
                            }
                            _ => Read {
                                messages: Vec::new(),
                                next: from,
                            },
                        };
                        Fetched::Read(PartitionRead {
                            read,
                            log_start: p.log_start_offset,
                            log_end: p.high_watermark,
                        })
                    }
                    Err(error) => Fetched::Failed(error),
                };
                (index, fetched)
            })
            .collect())
    }

    /// The next offset partition `index` will give out.
    pub(super) async fn log_end(&self, topic: &TopicReplicas, index: i32) -> Result<i64, ApiError> {
        let leader = match self.partition_owner(topic, index)? {
            Owner::Here(partition) => return Ok(partition.offsets().2),
            Owner::Broker(leader) => leader,
        };
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(&topic.spec.name))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(index)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(-1)])]);
        let response = self.ask(leader, request, 7).await?;
        let found = response
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition_index == index);
        let found = partition_answer(leader, "ListOffsets", found, |p| p.error_code)?;
        Ok(found.offset)
    }

    /// Appends one encoded batch to partition `index` once it is durable (here: fsynced;
    /// elsewhere: acks=all): its base offset.
    pub(super) async fn append(
        &self,
        topic: &TopicReplicas,
        index: i32,
        batch: Bytes,
        now: i64,
    ) -> Result<i64, ApiError> {
        let leader = match self.partition_owner(topic, index)? {
            Owner::Here(partition) => {
                if !self.services.store.may_lead() {
                    return Err(ApiError::unavailable(
                        "this broker's cluster session has lapsed; retry",
                    ));
                }
                let unavailable =
                    |e: crate::replication::PartitionError| ApiError::unavailable(e.to_string());
                let info = partition.append(&batch, now).map_err(unavailable)?;
                partition
                    .wait_durable(info.last_offset)
                    .await
                    .map_err(unavailable)?;
                // (A leader elsewhere counts what it is sent, as for any producer.)
                let name = topic.spec.name.clone();
                metrics::counter!(m::TOPIC_BYTES_IN_TOTAL, "topic" => name.clone())
                    .increment(batch.len() as u64);
                metrics::counter!(m::TOPIC_MESSAGES_IN_TOTAL, "topic" => name).increment(1);
                return Ok(info.base_offset);
            }
            Owner::Broker(leader) => leader,
        };
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(PRODUCE_TIMEOUT_MS)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name(&topic.spec.name))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(index)
                    .with_records(Some(batch))])]);
        let response = self.ask(leader, request, 9).await?;
        let answer = response
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .find(|p| p.index == index);
        let answer = partition_answer(leader, "Produce", answer, |p| p.error_code)?;
        Ok(answer.base_offset)
    }

    /// The coordinator of `group`: here, another broker, or a 503 when there is none
    /// right now (this broker's session lapsed, or the group's partition is unplaced).
    async fn coordinator(&self, group: &str) -> Result<Owner<()>, ApiError> {
        let groups = &self.services.groups;
        if groups.is_coordinator_for(group) {
            return Ok(Owner::Here(()));
        }
        let index = offsets::partition_for(group, groups.partition_count());
        let store = &self.services.store;
        let leader = match store.topic(OFFSETS_TOPIC).await {
            Some(spec) => store
                .assignment(&spec)
                .and_then(|a| a.partition(index).map(|p| p.leader))
                .unwrap_or(-1),
            None => -1,
        };
        if leader < 0 || leader == self.node_id() {
            return Err(ApiError::transient(format!(
                "group '{group}' has no coordinator right now; retry"
            )));
        }
        Ok(Owner::Broker(leader))
    }

    /// `group`'s committed offsets on `spec`'s partitions.
    pub(super) async fn committed(
        &self,
        group: &str,
        spec: &TopicSpec,
    ) -> Result<BTreeMap<i32, CommittedOffset>, ApiError> {
        let wanted = (0..spec.partitions).collect::<Vec<_>>();
        let node = match self.coordinator(group).await? {
            Owner::Here(()) => {
                let wanted = [(spec.name.clone(), wanted)];
                return Ok(self
                    .services
                    .groups
                    .fetch_offsets(group, Some(&wanted))
                    .into_iter()
                    .filter_map(|(_, p, o)| o.map(|o| (p, o)))
                    .collect());
            }
            Owner::Broker(node) => node,
        };
        let mut found = self
            .fetch_remote_offsets(node, vec![(group.to_string(), Some((spec, wanted)))])
            .await?;
        Ok(found.pop().map(|(_, offsets)| offsets).unwrap_or_default())
    }

    /// OffsetFetch (v8, many groups at once) from broker `node`: per group, its offsets
    /// on one topic's partitions (or, with `None`, whether it has any at all: every
    /// offset it holds, keyed by partition of any topic, which callers only count).
    async fn fetch_remote_offsets(
        &self,
        node: i32,
        groups: Vec<GroupQuery<'_>>,
    ) -> Result<Vec<(String, BTreeMap<i32, CommittedOffset>)>, ApiError> {
        let request = OffsetFetchRequest::default().with_groups(
            groups
                .iter()
                .map(|(group, topic)| {
                    OffsetFetchRequestGroup::default()
                        .with_group_id(group_id(group))
                        .with_member_epoch(-1)
                        .with_topics(topic.as_ref().map(|(spec, partitions)| {
                            vec![OffsetFetchRequestTopics::default()
                                .with_name(topic_name(&spec.name))
                                .with_partition_indexes(partitions.clone())]
                        }))
                })
                .collect(),
        );
        let response = self.ask(node, request, 8).await?;
        response
            .groups
            .into_iter()
            .map(|g| group_offsets(node, g))
            .collect()
    }

    /// Commits `commits` for `group` (a simple commit: no generation, no member).
    pub(super) async fn commit(
        &self,
        group: &str,
        commits: Vec<OffsetCommit>,
    ) -> Result<(), ApiError> {
        let node = match self.coordinator(group).await? {
            Owner::Here(()) => {
                return self
                    .services
                    .groups
                    .commit(group, "", None, -1, commits)
                    .await
                    .map_err(commit_error);
            }
            Owner::Broker(node) => node,
        };
        let mut topics: BTreeMap<String, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
        for c in commits {
            topics.entry(c.topic).or_default().push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(c.partition)
                    .with_committed_offset(c.offset)
                    .with_committed_leader_epoch(c.leader_epoch)
                    .with_committed_metadata(c.metadata.map(StrBytes::from_string)),
            );
        }
        let request = OffsetCommitRequest::default()
            .with_group_id(group_id(group))
            .with_generation_id_or_member_epoch(-1)
            .with_retention_time_ms(-1)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(name, partitions)| {
                        OffsetCommitRequestTopic::default()
                            .with_name(topic_name(&name))
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let response = self.ask(node, request, 8).await?;
        let failed = response
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|p| p.error_code != 0);
        match failed {
            Some(p) => Err(remote_error(node, "OffsetCommit", p.error_code)),
            None => Ok(()),
        }
    }

    /// Drops `group`'s offsets on `partitions` of `spec`, and the group itself once it
    /// has no offsets left (it may already be gone).
    pub(super) async fn forget(
        &self,
        group: &str,
        spec: &TopicSpec,
        partitions: Vec<i32>,
    ) -> Result<(), ApiError> {
        let node = match self.coordinator(group).await? {
            Owner::Here(()) => {
                let groups = &self.services.groups;
                let partitions: Vec<(String, i32)> = partitions
                    .into_iter()
                    .map(|p| (spec.name.clone(), p))
                    .collect();
                groups
                    .delete_offsets(group, &partitions)
                    .await
                    .map_err(commit_error)?;
                if groups.fetch_offsets(group, None).is_empty() {
                    let _ = groups.delete_group(group).await;
                }
                return Ok(());
            }
            Owner::Broker(node) => node,
        };
        let request = OffsetDeleteRequest::default()
            .with_group_id(group_id(group))
            .with_topics(vec![OffsetDeleteRequestTopic::default()
                .with_name(topic_name(&spec.name))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|p| OffsetDeleteRequestPartition::default().with_partition_index(p))
                        .collect(),
                )]);
        let response = self.ask(node, request, 0).await?;
        if response.error_code != 0 {
            return Err(remote_error(node, "OffsetDelete", response.error_code));
        }
        let left = self
            .fetch_remote_offsets(node, vec![(group.to_string(), None)])
            .await?;
        if left.iter().all(|(_, offsets)| offsets.is_empty()) {
            let request = DeleteGroupsRequest::default().with_groups_names(vec![group_id(group)]);
            // Best effort, as here: the group may already be gone.
            let _ = self.ask(node, request, 2).await;
        }
        Ok(())
    }

    /// Every HTTP subscription's position on partition `index` of `spec`, over every
    /// coordinator of the cluster.
    pub(super) async fn subscriptions_of(
        &self,
        spec: &TopicSpec,
        index: i32,
    ) -> Result<Vec<Subscription>, ApiError> {
        let mut found: Vec<Subscription> = self.local_subscriptions_of(&spec.name, index);
        for broker in self.services.store.brokers() {
            if broker.node_id == self.node_id() {
                continue;
            }
            let node = broker.node_id;
            let listed = self.ask(node, ListGroupsRequest::default(), 4).await?;
            if listed.error_code != 0 {
                return Err(remote_error(node, "ListGroups", listed.error_code));
            }
            let groups: Vec<_> = listed
                .groups
                .iter()
                .map(|g| g.group_id.0.to_string())
                .filter(|g| g.starts_with("http-"))
                .map(|g| (g, Some((spec, vec![index]))))
                .collect();
            if groups.is_empty() {
                continue;
            }
            let offsets = self.fetch_remote_offsets(node, groups).await?;
            found.extend(
                offsets
                    .into_iter()
                    .filter_map(|(_, mut o)| o.remove(&index))
                    .map(|o| Subscription::of(&o)),
            );
        }
        Ok(found)
    }
}

/// One group's answer to a multi-group OffsetFetch: its committed offsets by partition.
fn group_offsets(
    node: i32,
    group: OffsetFetchResponseGroup,
) -> Result<(String, BTreeMap<i32, CommittedOffset>), ApiError> {
    if group.error_code != 0 {
        return Err(remote_error(node, "OffsetFetch", group.error_code));
    }
    let mut offsets = BTreeMap::new();
    for p in group.topics.iter().flat_map(|t| &t.partitions) {
        if p.error_code != 0 {
            return Err(remote_error(node, "OffsetFetch", p.error_code));
        }
        if p.committed_offset >= 0 {
            offsets.insert(
                p.partition_index,
                CommittedOffset {
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.metadata.as_ref().map(|m| m.to_string()),
                    commit_timestamp: -1,
                },
            );
        }
    }
    Ok((group.group_id.0.to_string(), offsets))
}
