//! Followers replicate by fetching from their leaders, as Kafka's replica fetcher
//! threads do: one task per leader this broker follows partitions of, each with its
//! own connection, sending one Fetch for all of them (with this broker's replica id,
//! the partition's leader epoch and the epoch of its last batch) and long-polling
//! until the leader has something new.
//!
//! What comes back goes to `Partition::apply_fetch_answer`, whose replica state decides
//! what it means: batches are appended unchanged, so a replica's log is byte-identical to
//! its leader's; a `diverging_epoch` answer (the follower holds a tail the leader does
//! not: it led or followed a deposed leader) truncates that tail; a fetch offset below
//! the leader's log start starts the replica over there. This file only speaks Fetch.
//!
//! The set of tasks follows the replicas' roles: whenever a reconcile changes them
//! (`ReplicaManager::watch_roles`), tasks start for new leaders and stop for leaders
//! no longer followed; each task re-reads its partitions every round.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::fetch_request::{
    FetchPartition, FetchRequest, FetchTopic, ReplicaState,
};
use kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio_util::sync::CancellationToken;

use super::replica::{FetchAnswer, FetchPosition};
use super::{Partition, ReplicaManager};
use crate::client::{Client, ClientSecurity};
use crate::cluster::MetadataStore;
use crate::limits::{
    REPLICA_FETCH_BACKOFF, REPLICA_FETCH_MAX_BYTES, REPLICA_FETCH_PARTITION_MAX_BYTES,
    REPLICA_FETCH_WAIT_MS,
};
use crate::model::{LeaderEpoch, Offset};

/// The fetch version followers send: v12 has `last_fetched_epoch` and
/// `diverging_epoch` (KIP-595's truncation on fetch) and still names topics.
/// v15: the replica's id and incarnation travel in `replica_state` (KIP-903), so that
/// an ISR expansion names the follower process that caught up; topics by id (v13+).
const FETCH_VERSION: i16 = 15;

#[derive(Debug)]
pub struct ReplicaFetchers {
    node_id: i32,
    replicas: Arc<ReplicaManager>,
    store: Arc<dyn MetadataStore>,
    tasks: parking_lot::Mutex<HashMap<i32, CancellationToken>>,
    /// How leaders' inter-broker listeners are reached.
    security: ClientSecurity,
}

impl ReplicaFetchers {
    pub fn new(
        node_id: i32,
        replicas: Arc<ReplicaManager>,
        store: Arc<dyn MetadataStore>,
        security: ClientSecurity,
    ) -> Arc<Self> {
        Arc::new(Self {
            node_id,
            replicas,
            store,
            security,
            tasks: parking_lot::Mutex::new(HashMap::new()),
        })
    }

    /// Keeps one fetcher per followed leader until `shutdown`.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut roles = self.replicas.watch_roles();
        loop {
            self.plan(&shutdown);
            tokio::select! {
                _ = shutdown.cancelled() => break,
                changed = roles.changed() => if changed.is_err() { break },
            }
        }
        for (_, task) in self.tasks.lock().drain() {
            task.cancel();
        }
    }

    /// Starts fetchers for leaders followed now, stops those no longer followed.
    fn plan(self: &Arc<Self>, shutdown: &CancellationToken) {
        let leaders: std::collections::BTreeSet<i32> = self
            .replicas
            .all_partitions()
            .iter()
            .filter_map(|p| p.following().map(|leader| leader.0))
            .collect();
        let mut tasks = self.tasks.lock();
        tasks.retain(|leader, task| {
            let keep = leaders.contains(leader);
            if !keep {
                task.cancel();
            }
            keep
        });
        for leader in leaders {
            if tasks.contains_key(&leader) {
                continue;
            }
            let stop = shutdown.child_token();
            tasks.insert(leader, stop.clone());
            let this = Arc::clone(self);
            tokio::spawn(async move {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = this.fetch_from(leader) => {}
                }
            });
        }
    }

    /// Fetches from `leader` for as long as the task lives.
    async fn fetch_from(&self, leader: i32) {
        let mut client: Option<Client> = None;
        let mut round = 0usize;
        loop {
            let followed = self.replicas.followed_from(leader);
            if followed.is_empty() {
                tokio::time::sleep(REPLICA_FETCH_BACKOFF).await;
                continue;
            }
            if client.is_none() {
                client = self.connect(leader).await;
                if client.is_none() {
                    tokio::time::sleep(REPLICA_FETCH_BACKOFF).await;
                    continue;
                }
            }
            let Some(connection) = client.as_mut() else {
                continue;
            };
            // Each partition's position now: its answer applies only while it still holds.
            // A partition whose flush fails is offline and left out.
            let mut partitions: Vec<(Arc<Partition>, FetchPosition)> = Vec::new();
            for p in followed {
                if let Ok(position) = p.fetch_position_on_disk().await {
                    partitions.push((p, position));
                }
            }
            if partitions.is_empty() {
                tokio::time::sleep(REPLICA_FETCH_BACKOFF).await;
                continue;
            }
            // The leader fills a response in request order: each partition takes its
            // turn first (Kafka's fetcher moves fetched partitions to the end).
            let first = round % partitions.len();
            partitions.rotate_left(first);
            round = round.wrapping_add(1);
            // The replica's identity moves into `replica_state` at v15 (KIP-903).
            let version = connection
                .version_for(ApiKey::Fetch, FETCH_VERSION)
                .unwrap_or(FETCH_VERSION);
            let request = self.request(&partitions, version);
            match connection.send(request, version).await {
                Ok((_, response)) => {
                    if !self.apply(leader, &partitions, response).await {
                        tokio::time::sleep(REPLICA_FETCH_BACKOFF).await;
                    }
                }
                Err(error) => {
                    tracing::debug!(leader, %error, "replica fetch failed; reconnecting");
                    client = None;
                    tokio::time::sleep(REPLICA_FETCH_BACKOFF).await;
                }
            }
        }
    }

    async fn connect(&self, leader: i32) -> Option<Client> {
        let address = self
            .store
            .brokers()
            .into_iter()
            .find(|b| b.node_id == leader)?
            .peer_address();
        match Client::connect_with(&address, "tern-replica-fetcher", &self.security).await {
            Ok(client) => Some(client),
            Err(error) => {
                tracing::debug!(leader, %error, "cannot reach the leader to replicate");
                None
            }
        }
    }

    /// One Fetch for every partition followed from this leader, each at its log end.
    fn request(
        &self,
        partitions: &[(Arc<Partition>, FetchPosition)],
        version: i16,
    ) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for (partition, position) in partitions {
            let wanted = FetchPartition::default()
                .with_partition(partition.id().partition)
                .with_current_leader_epoch(position.current_leader_epoch.0)
                .with_fetch_offset(position.fetch_offset.0)
                .with_last_fetched_epoch(position.last_fetched_epoch.map_or(-1, |e| e.0))
                .with_log_start_offset(position.log_start.0)
                .with_partition_max_bytes(REPLICA_FETCH_PARTITION_MAX_BYTES);
            let name = &partition.id().topic;
            match topics.iter_mut().find(|t| t.topic.0.as_str() == name) {
                Some(topic) => topic.partitions.push(wanted),
                None => topics.push(
                    FetchTopic::default()
                        .with_topic(TopicName(StrBytes::from_string(name.clone())))
                        .with_topic_id(partition.topic_id())
                        .with_partitions(vec![wanted]),
                ),
            }
        }
        let request = if version >= 15 {
            FetchRequest::default().with_replica_state(
                ReplicaState::default()
                    .with_replica_id(BrokerId(self.node_id))
                    .with_replica_epoch(self.store.incarnation().unwrap_or(-1)),
            )
        } else {
            FetchRequest::default().with_replica_id(BrokerId(self.node_id))
        };
        request
            .with_max_wait_ms(REPLICA_FETCH_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(REPLICA_FETCH_MAX_BYTES)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(topics)
    }

    /// Applies a fetch response; false when nothing progressed (back off).
    async fn apply(
        &self,
        leader: i32,
        partitions: &[(Arc<Partition>, FetchPosition)],
        response: FetchResponse,
    ) -> bool {
        if response.error_code != 0 {
            tracing::debug!(leader, error = response.error_code, "replica fetch refused");
            return false;
        }
        let mut progressed = false;
        for topic in &response.responses {
            for data in &topic.partitions {
                // v13+ answers name topics by id only.
                let Some((partition, asked)) = partitions.iter().find(|(p, _)| {
                    (p.id().topic == topic.topic.0.as_str()
                        || (!topic.topic_id.is_nil() && p.topic_id() == topic.topic_id))
                        && p.id().partition == data.partition_index
                }) else {
                    continue;
                };
                match self.apply_partition(leader, partition, asked, data).await {
                    Ok(moved) => progressed |= moved,
                    Err(error) => {
                        tracing::warn!(partition = %partition.id(), leader, %error, "replicating failed")
                    }
                }
            }
        }
        progressed
    }

    /// Applies one partition's answer (`ReplicaState::apply_fetch_answer` decides what it
    /// means); `Ok(true)` when the next fetch asks something else.
    async fn apply_partition(
        &self,
        leader: i32,
        partition: &Partition,
        asked: &FetchPosition,
        data: &kafka_protocol::messages::fetch_response::PartitionData,
    ) -> Result<bool, super::PartitionError> {
        let answer = match ResponseError::try_from_code(data.error_code) {
            None if data.diverging_epoch.epoch >= 0 || data.diverging_epoch.end_offset >= 0 => {
                FetchAnswer::Diverging {
                    epoch: LeaderEpoch(data.diverging_epoch.epoch),
                    end_offset: Offset(data.diverging_epoch.end_offset),
                }
            }
            None => FetchAnswer::Records {
                records: data.records.as_deref().unwrap_or_default(),
                high_watermark: Offset(data.high_watermark),
                log_start: Offset(data.log_start_offset),
            },
            Some(ResponseError::OffsetOutOfRange) => FetchAnswer::OutOfRange {
                high_watermark: Offset(data.high_watermark),
                log_start: Offset(data.log_start_offset),
            },
            Some(error) => {
                tracing::debug!(partition = %partition.id(), leader, ?error, "replica fetch refused for partition");
                return Ok(false);
            }
        };
        let fetched = match &answer {
            FetchAnswer::Records { records, .. } => records.len() as u64,
            _ => 0,
        };
        let moved = partition.apply_fetch_answer(leader, asked, answer).await?;
        if moved && fetched > 0 {
            metrics::counter!(crate::metrics::REPLICATION_BYTES_IN_TOTAL).increment(fetched);
        }
        Ok(moved)
    }
}
