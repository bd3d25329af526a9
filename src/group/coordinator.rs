//! The group coordinator: owns every group whose `__consumer_offsets` partition this
//! broker leads, parks JoinGroup and SyncGroup requests until their answers exist,
//! writes commits to that partition (and acknowledges them once durable), and drives
//! the groups' timers. It owns no sockets: handlers call it with decoded values.
//!
//! In a cluster, a group's coordinator is the leader of partition
//! `offsets::partition_for(group)`. The broker hands the coordinator each offsets
//! partition it comes to lead ([`GroupCoordinator::elect`], which replays it) and takes
//! it back when leadership moves ([`GroupCoordinator::resign`]), so the coordinator
//! moves with partition leadership. Requests for other groups get NOT_COORDINATOR.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::config::{GroupConfigs, GroupSettings};
use super::consumer::{
    ConsumerGroup, ConsumerGroupConfig, Heartbeat, HeartbeatAnswer, PartitionRacks, TopicsImage,
};
use super::offsets::{self, Change, CommittedOffset, ReplayedState};
use super::state::{
    Delivery, Group, GroupError, GroupLimits, GroupState, JoinRequest, JoinResult, Member, Reply,
    SyncResult,
};
use crate::log::batch;
use crate::log::txn::{MarkerKind, TxnMarker};
use crate::model::{monotonic_ms, now_ms};
use crate::replication::{Acks, Partition, PartitionError, TopicReplicas};

use crate::limits::OFFSET_COMMIT_TIMEOUT;

mod migration;
mod share;

/// Coordinator settings (from the broker config).
#[derive(Debug, Clone, Copy)]
pub struct CoordinatorConfig {
    pub limits: GroupLimits,
    /// KIP-848 consumer groups' settings.
    pub consumer: ConsumerGroupConfig,
    /// KIP-932 share groups' settings.
    pub share: super::share::ShareGroupConfig,
    /// Whether a live group changes kind when its members change protocol.
    pub migration: super::consumer::classic::MigrationPolicy,
    /// Offsets of empty groups expire after this long (`offsets.retention.minutes`).
    pub offsets_retention_ms: i64,
}

#[derive(Debug)]
enum Waiter {
    Join(oneshot::Sender<JoinResult>),
    Sync(oneshot::Sender<SyncResult>),
}

#[derive(Debug)]
struct GroupEntry {
    group: Group,
    offsets: BTreeMap<(String, i32), CommittedOffset>,
    waiters: HashMap<String, Waiter>,
    /// The settled membership last written to the log.
    persisted: Option<(i32, Vec<String>)>,
    empty_since_ms: Option<i64>,
    /// Offsets committed in open transactions (TxnOffsetCommit), by producer id: they
    /// count once the transaction's COMMIT marker is written here.
    pending: BTreeMap<i64, BTreeMap<(String, i32), CommittedOffset>>,
    /// Set when this is a KIP-848 consumer group (then `group` stays an empty classic
    /// group): members heartbeat with ConsumerGroupHeartbeat instead of joining.
    consumer: Option<ConsumerGroup>,
    /// Set when this is a KIP-932 share group (membership only; `group` stays empty).
    share: Option<super::share::ShareGroup>,
    /// The stored state of the group's share-partitions, by (topic id, partition).
    share_states: BTreeMap<(uuid::Uuid, i32), super::share::ShareState>,
    /// The highest leader epoch that read each share-partition's state: a write from
    /// an older leader is fenced (not stored: a new coordinator starts from the records).
    share_readers: HashMap<(uuid::Uuid, i32), i32>,
}

/// One group as ListGroups lists it.
#[derive(Debug, Clone)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: &'static str,
    /// `classic` or `consumer` (ListGroups v5's group type).
    pub kind: &'static str,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol_name: String,
    pub members: Vec<Member>,
}

/// One group's size and committed offsets (`topic, partition, offset`).
#[derive(Debug, Clone)]
pub struct GroupLag {
    pub group: String,
    /// `classic`, `consumer` or `share`.
    pub kind: &'static str,
    pub members: usize,
    pub committed: Vec<(String, i32, i64)>,
    /// A share group's start offsets, by topic id and partition.
    pub share_starts: Vec<(uuid::Uuid, i32, i64)>,
}

/// What a commit request carries for one partition.
#[derive(Debug, Clone)]
pub struct OffsetCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error(transparent)]
    Group(#[from] GroupError),
    #[error("writing offsets: {0}")]
    Storage(#[from] PartitionError),
}

#[derive(Debug)]
pub struct GroupCoordinator {
    groups: Mutex<HashMap<String, GroupEntry>>,
    /// Serialises group-metadata writes, so the newest state is always written last.
    persist_lock: tokio::sync::Mutex<()>,
    /// Partitions of the offsets topic (compacted by the log cleaner, as any
    /// topic with `cleanup.policy=compact`).
    partition_count: usize,
    /// The offsets partitions this broker leads, indexed by partition number.
    partitions: parking_lot::RwLock<Vec<Option<Arc<Partition>>>>,
    config: CoordinatorConfig,
    /// Each group's settings: the broker's, with the group's own configs over them.
    configs: GroupConfigs,
    /// The cluster session: when it has lapsed (by this broker's clock) another broker
    /// may already coordinate these groups, so every group request is refused.
    session: Option<Arc<dyn crate::cluster::MetadataStore>>,
}

impl GroupCoordinator {
    /// A coordinator for an offsets topic of `partition_count` partitions, leading none yet.
    pub fn new(partition_count: i32, config: CoordinatorConfig) -> Self {
        let count = partition_count.max(0) as usize;
        Self {
            groups: Mutex::new(HashMap::new()),
            persist_lock: tokio::sync::Mutex::new(()),
            partition_count: count,
            partitions: parking_lot::RwLock::new(vec![None; count]),
            configs: GroupConfigs::fixed(
                GroupSettings {
                    consumer_session_timeout_ms: config.consumer.session_timeout_ms,
                    consumer_heartbeat_interval_ms: config.consumer.heartbeat_interval_ms,
                    share_session_timeout_ms: config.share.session_timeout_ms,
                    share_heartbeat_interval_ms: config.share.heartbeat_interval_ms,
                    share_record_lock_duration_ms: super::share::partition::ShareConfig::default()
                        .lock_duration_ms,
                    share_auto_offset_reset: super::config::AutoOffsetReset::Latest,
                    share_isolation_level: crate::model::Isolation::ReadUncommitted,
                },
                (
                    config.limits.min_session_timeout_ms,
                    config.limits.max_session_timeout_ms,
                ),
            ),
            config,
            session: None,
        }
    }

    /// Groups run with `configs` (the broker's settings and each group's own).
    pub fn with_group_configs(mut self, configs: GroupConfigs) -> Self {
        self.configs = configs;
        self
    }

    /// The group configs: what each group runs with, and the check of new ones.
    pub fn group_configs(&self) -> &GroupConfigs {
        &self.configs
    }

    /// What KIP-848 consumer group `group_id` runs with now.
    fn consumer_config(&self, group_id: &str) -> ConsumerGroupConfig {
        let settings = self.configs.settings(group_id);
        ConsumerGroupConfig {
            session_timeout_ms: settings.consumer_session_timeout_ms,
            heartbeat_interval_ms: settings.consumer_heartbeat_interval_ms,
            ..self.config.consumer
        }
    }

    /// What share group `group_id` runs with now.
    fn share_config(&self, group_id: &str) -> super::share::ShareGroupConfig {
        let settings = self.configs.settings(group_id);
        super::share::ShareGroupConfig {
            session_timeout_ms: settings.share_session_timeout_ms,
            heartbeat_interval_ms: settings.share_heartbeat_interval_ms,
            ..self.config.share
        }
    }

    /// Refuses every group request while `store`'s session says this broker may not
    /// act as a leader (a broker cut off from etcd must not accept commits that a new
    /// coordinator elsewhere would not see).
    pub fn with_session(mut self, store: Arc<dyn crate::cluster::MetadataStore>) -> Self {
        self.session = Some(store);
        self
    }

    /// Makes the coordinator lead exactly the offsets partitions `topic` says this
    /// broker leads: replays those it gains, forgets the groups of those it lost.
    pub fn follow_leadership(&self, topic: &TopicReplicas) {
        let (mut gained, mut lost) = (0, 0);
        for index in 0..self.partition_count() {
            let led = topic.partition(index).ok();
            let current = self.partition(index as usize);
            match (led, current) {
                (Some(led), Some(current)) if Arc::ptr_eq(led, &current) => {}
                (Some(led), _) => {
                    self.elect(index as usize, Arc::clone(led));
                    gained += 1;
                }
                (None, Some(_)) => {
                    self.resign(index as usize);
                    lost += 1;
                }
                (None, None) => {}
            }
        }
        if gained + lost > 0 {
            let groups = self.groups.lock().len();
            tracing::info!(gained, lost, groups, "group coordination moved");
        }
    }

    /// Takes over offsets partition `index`: rebuilds its groups by replaying it.
    pub fn elect(&self, index: usize, partition: Arc<Partition>) {
        let state = replay(&partition);
        let limits = self.config.limits;
        let mut loaded = 0;
        {
            let mut groups = self.groups.lock();
            for (group_id, record) in &state.groups {
                let group = Group::restore(group_id, limits, record, monotonic_ms());
                let fingerprint = group.fingerprint();
                let mut entry = new_entry(group);
                entry.persisted = Some(fingerprint);
                groups.insert(group_id.clone(), entry);
                loaded += 1;
            }
            for (group_id, image) in &state.consumer {
                if !image.exists() {
                    continue;
                }
                let entry = groups
                    .entry(group_id.clone())
                    .or_insert_with(|| new_entry(Group::new(group_id, limits)));
                let consumer = ConsumerGroup::restore(image, self.config.consumer, monotonic_ms());
                entry.consumer = Some(consumer);
                loaded += 1;
            }
            for (group_id, offsets) in state.offsets {
                let entry = groups
                    .entry(group_id.clone())
                    .or_insert_with(|| new_entry(Group::new(&group_id, limits)));
                entry.offsets = offsets;
            }
            for (key, share_state) in state.share {
                let entry = groups
                    .entry(key.group.clone())
                    .or_insert_with(|| new_entry(Group::new(&key.group, limits)));
                if entry.consumer.is_none() && entry.group.is_empty() {
                    entry
                        .share
                        .get_or_insert_with(|| super::share::ShareGroup::new(self.config.share));
                }
                entry
                    .share_states
                    .insert((key.topic_id, key.partition), share_state);
            }
            for (producer_id, by_group) in state.pending {
                for (group_id, offsets) in by_group {
                    let entry = groups
                        .entry(group_id.clone())
                        .or_insert_with(|| new_entry(Group::new(&group_id, limits)));
                    entry.pending.insert(producer_id, offsets);
                }
            }
            if let Some(slot) = self.partitions.write().get_mut(index) {
                *slot = Some(Arc::clone(&partition));
            }
        }
        tracing::debug!(partition = %partition.id(), groups = loaded, "coordinating groups");
    }

    /// Gives up offsets partition `index`: its groups are coordinated elsewhere now.
    /// Parked joins and syncs are answered by their timeouts' fallbacks.
    pub fn resign(&self, index: usize) {
        let count = self.partition_count();
        let mut groups = self.groups.lock();
        if let Some(slot) = self.partitions.write().get_mut(index) {
            *slot = None;
        }
        groups.retain(|group_id, _| offsets::partition_for(group_id, count) as usize != index);
        tracing::debug!(
            partition = index,
            "no longer coordinating groups of offsets partition"
        );
    }

    pub fn partition_count(&self) -> i32 {
        self.partition_count as i32
    }

    fn partition(&self, index: usize) -> Option<Arc<Partition>> {
        self.partitions.read().get(index).cloned().flatten()
    }

    /// Whether this broker coordinates `group_id` (it leads the group's partition and
    /// its cluster session holds).
    pub fn is_coordinator_for(&self, group_id: &str) -> bool {
        let lapsed = self.session.as_ref().is_some_and(|s| !s.may_lead());
        !lapsed && self.partition_of(group_id).is_some()
    }

    fn partition_of(&self, group_id: &str) -> Option<Arc<Partition>> {
        self.partition(offsets::partition_for(group_id, self.partition_count()) as usize)
    }

    /// `Err(NotCoordinator)` unless this broker coordinates `group_id`.
    fn check_coordinator(&self, group_id: &str) -> Result<(), GroupError> {
        if self.is_coordinator_for(group_id) {
            Ok(())
        } else {
            Err(GroupError::NotCoordinator)
        }
    }

    pub async fn join(&self, group_id: &str, request: JoinRequest) -> JoinResult {
        if let Err(error) = self.check_coordinator(group_id) {
            return JoinResult::error(error, &request.member_id);
        }
        let rebalance_timeout = Duration::from_millis(request.rebalance_timeout_ms.max(0) as u64);
        let receiver = {
            let mut groups = self.groups.lock();
            let limits = self.config.limits;
            let entry = groups
                .entry(group_id.to_string())
                .or_insert_with(|| new_entry(Group::new(group_id, limits)));
            // An empty consumer group becomes classic again; a live one serves its
            // classic members (`classic_join_to_consumer`, which the handler calls).
            if entry.share.is_some() {
                return JoinResult::error(
                    GroupError::InconsistentGroupProtocol,
                    &request.member_id,
                );
            }
            match &entry.consumer {
                Some(consumer) if !consumer.is_empty() => {
                    // It became a consumer group since the handler looked: join again.
                    return rebalancing(&request.member_id);
                }
                Some(_) => entry.consumer = None,
                None => {}
            }
            let (who, instance) = (request.member_id.clone(), request.group_instance_id.clone());
            let (reply, deliveries) = entry.group.join(request, monotonic_ms());
            tracing::debug!(
                group = group_id,
                member = %who,
                ?instance,
                state = entry.group.state().name(),
                generation = entry.group.generation_id(),
                reply = ?reply,
                "join"
            );
            deliver(entry, deliveries);
            entry.note_emptiness();
            match reply {
                Reply::Now(result) => Err(result),
                Reply::Wait { member_id } => {
                    let (tx, rx) = oneshot::channel();
                    if let Some(Waiter::Join(old)) =
                        entry.waiters.insert(member_id.clone(), Waiter::Join(tx))
                    {
                        let _ = old.send(rebalancing(&member_id));
                    }
                    Ok((member_id, rx))
                }
            }
        };
        let (member_id, rx) = match receiver {
            Ok(waiting) => waiting,
            Err(result) => {
                // A static member replaced without a rebalance changes the membership.
                self.persist_if_settled(group_id).await;
                return result;
            }
        };
        // The group answers within the rebalance timeout; the margin covers the ticker.
        let wait = rebalance_timeout + crate::limits::JOIN_MARGIN;
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(result)) => result,
            _ => rebalancing(&member_id),
        }
    }

    pub async fn sync(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        protocol: (Option<&str>, Option<&str>),
        assignments: Vec<(String, Bytes)>,
    ) -> SyncResult {
        if let Err(error) = self.check_coordinator(group_id) {
            return sync_error(error);
        }
        let rx = {
            let mut groups = self.groups.lock();
            let Some(entry) = groups.get_mut(group_id) else {
                return sync_error(GroupError::UnknownMemberId);
            };
            if let Some(answer) = Self::classic_sync_to_consumer(
                entry,
                member_id,
                instance_id,
                generation_id,
                protocol,
            ) {
                return answer;
            }
            if let Err(error) =
                entry
                    .group
                    .check_sync_protocol(member_id, generation_id, protocol.0, protocol.1)
            {
                return sync_error(error);
            }
            let (reply, deliveries) = entry.group.sync(
                member_id,
                instance_id,
                generation_id,
                assignments,
                monotonic_ms(),
            );
            deliver(entry, deliveries);
            match reply {
                Reply::Now(result) => Err(result),
                Reply::Wait { member_id } => {
                    let (tx, rx) = oneshot::channel();
                    entry.waiters.insert(member_id, Waiter::Sync(tx));
                    Ok(rx)
                }
            }
        };
        let rx = match rx {
            Ok(rx) => rx,
            Err(result) => {
                // The leader's sync settles the group: store it before answering, as Kafka does.
                self.persist_if_settled(group_id).await;
                return result;
            }
        };
        let wait = Duration::from_millis(self.config.limits.max_session_timeout_ms.max(0) as u64);
        match tokio::time::timeout(wait, rx).await {
            Ok(Ok(result)) => result,
            _ => sync_error(GroupError::RebalanceInProgress),
        }
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        self.check_coordinator(group_id)?;
        let mut groups = self.groups.lock();
        let entry = groups
            .get_mut(group_id)
            .ok_or(GroupError::UnknownMemberId)?;
        let result = match entry.consumer.as_mut() {
            Some(consumer) => {
                consumer.classic_heartbeat(member_id, instance_id, generation_id, monotonic_ms())
            }
            None => entry
                .group
                .heartbeat(member_id, instance_id, generation_id, monotonic_ms()),
        };
        if result.is_err() {
            tracing::debug!(
                group = group_id,
                member = member_id,
                generation_id,
                ?result,
                "heartbeat refused"
            );
        }
        result
    }

    /// LeaveGroup for each `(member id, instance id)`; one result per member.
    pub async fn leave(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Vec<Result<(), GroupError>> {
        if let Err(error) = self.check_coordinator(group_id) {
            return members.iter().map(|_| Err(error)).collect();
        }
        let consumer_group = self
            .groups
            .lock()
            .get(group_id)
            .is_some_and(|entry| entry.consumer.is_some());
        if consumer_group {
            return self.classic_leave_consumer(group_id, members).await;
        }
        let results = {
            let mut groups = self.groups.lock();
            let Some(entry) = groups.get_mut(group_id) else {
                return members
                    .iter()
                    .map(|_| Err(GroupError::UnknownMemberId))
                    .collect();
            };
            let mut results = Vec::with_capacity(members.len());
            for (member_id, instance_id) in members {
                let (result, deliveries) =
                    entry
                        .group
                        .leave(member_id, instance_id.as_deref(), monotonic_ms());
                deliver(entry, deliveries);
                results.push(result);
            }
            entry.note_emptiness();
            results
        };
        self.persist_if_settled(group_id).await;
        results
    }

    /// Validates and durably stores a commit; the in-memory view changes only once
    /// the records are on disk, so OffsetFetch never shows an unacknowledged commit.
    pub async fn commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        commits: Vec<OffsetCommit>,
    ) -> Result<(), CommitError> {
        self.check_coordinator(group_id)?;
        let now = now_ms();
        let changes = {
            let mut groups = self.groups.lock();
            let limits = self.config.limits;
            let entry = entry_or_create(
                &mut groups,
                group_id,
                limits,
                generation_id < 0,
                GroupError::GroupIdNotFound,
            )?;
            entry.validate_commit(member_id, instance_id, generation_id)?;
            offset_changes(group_id, &commits, now)
        };
        self.write_then_apply(group_id, &changes).await?;
        Ok(())
    }

    /// TxnOffsetCommit: stores offsets committed in producer `producer_id`'s
    /// transaction. They stay pending (OffsetFetch with `require_stable` answers
    /// UNSTABLE_OFFSET_COMMIT for them) until the transaction's marker reaches this
    /// partition ([`Self::complete_transaction`]). Member and generation are checked as
    /// for a plain commit when the request names them (v3+, KIP-447).
    pub async fn commit_transactional(
        &self,
        group_id: &str,
        producer: (i64, i16),
        member: (&str, Option<&str>, i32),
        commits: Vec<OffsetCommit>,
    ) -> Result<(), CommitError> {
        self.check_coordinator(group_id)?;
        let (member_id, instance_id, generation_id) = member;
        let now = now_ms();
        let changes = {
            let mut groups = self.groups.lock();
            let limits = self.config.limits;
            let entry = groups
                .entry(group_id.to_string())
                .or_insert_with(|| new_entry(Group::new(group_id, limits)));
            if !member_id.is_empty() || generation_id >= 0 {
                entry.validate_commit(member_id, instance_id, generation_id)?;
            }
            offset_changes(group_id, &commits, now)
        };
        let partition = self
            .partition_of(group_id)
            .ok_or(GroupError::NotCoordinator)?;
        let batch = offsets::encode_transactional_changes(&changes, now, producer.0, producer.1);
        partition
            .write(&batch, now, Acks::All, OFFSET_COMMIT_TIMEOUT)
            .await?;
        if let Some(entry) = self.groups.lock().get_mut(group_id) {
            let pending = entry.pending.entry(producer.0).or_default();
            for change in changes {
                if let Change::Offset {
                    topic,
                    partition,
                    value: Some(value),
                    ..
                } = change
                {
                    pending.insert((topic, partition), value);
                }
            }
        }
        Ok(())
    }

    /// A transaction marker was written to offsets partition `index`: the producer's
    /// pending offsets in its groups are committed, or dropped on abort.
    pub fn complete_transaction(&self, index: i32, producer_id: i64, commit: bool) {
        let count = self.partition_count();
        let mut groups = self.groups.lock();
        for (group_id, entry) in groups.iter_mut() {
            if offsets::partition_for(group_id, count) != index {
                continue;
            }
            if let Some(pending) = entry.pending.remove(&producer_id) {
                if commit {
                    entry.offsets.extend(pending);
                }
            }
        }
    }

    /// Whether `group_id` has offsets of `topic`/`partition` in an open transaction.
    pub fn has_pending_offset(&self, group_id: &str, topic: &str, partition: i32) -> bool {
        let groups = self.groups.lock();
        groups.get(group_id).is_some_and(|entry| {
            let key = (topic.to_string(), partition);
            entry
                .pending
                .values()
                .any(|offsets| offsets.contains_key(&key))
        })
    }

    /// Writes the group's metadata when it has settled (Stable or Empty) with a
    /// membership the log does not have yet, so a restart restores it (Kafka writes
    /// the same record after every rebalance).
    async fn persist_if_settled(&self, group_id: &str) {
        let _turn = self.persist_lock.lock().await;
        let pending = {
            let groups = self.groups.lock();
            groups.get(group_id).and_then(|entry| {
                let settled = matches!(entry.group.state(), GroupState::Stable | GroupState::Empty);
                let fingerprint = entry.group.fingerprint();
                (settled && entry.persisted.as_ref() != Some(&fingerprint))
                    .then(|| (entry.group.record(now_ms()), fingerprint))
            })
        };
        let Some((record, fingerprint)) = pending else {
            return;
        };
        let change = [Change::Group {
            group: group_id.to_string(),
            value: Some(record),
        }];
        match self.write(group_id, &change).await {
            Ok(()) => {
                if let Some(entry) = self.groups.lock().get_mut(group_id) {
                    entry.persisted = Some(fingerprint);
                }
            }
            Err(error) => {
                tracing::warn!(group = group_id, %error, "could not store group metadata")
            }
        }
    }

    /// Writes `changes` durably, then applies them to the in-memory view.
    async fn write_then_apply(
        &self,
        group_id: &str,
        changes: &[Change],
    ) -> Result<(), PartitionError> {
        self.write(group_id, changes).await?;
        if let Some(entry) = self.groups.lock().get_mut(group_id) {
            apply(entry, changes);
        }
        Ok(())
    }

    async fn write(&self, group_id: &str, changes: &[Change]) -> Result<(), PartitionError> {
        if changes.is_empty() {
            return Ok(());
        }
        let partition = self.partition_of(group_id).ok_or_else(|| {
            PartitionError::StorageFailed(crate::model::TopicPartition::new(
                offsets::OFFSETS_TOPIC,
                -1,
            ))
        })?;
        let batch = offsets::encode_changes(changes, now_ms());
        partition
            .write(&batch, now_ms(), Acks::All, OFFSET_COMMIT_TIMEOUT)
            .await
            .map(|_| ())
    }

    /// Committed offsets of a group: all of them, or those asked for (`None` when unknown).
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        wanted: Option<&[(String, Vec<i32>)]>,
    ) -> Vec<(String, i32, Option<CommittedOffset>)> {
        let groups = self.groups.lock();
        let offsets = groups.get(group_id).map(|e| &e.offsets);
        match wanted {
            Some(wanted) => wanted
                .iter()
                .flat_map(|(topic, partitions)| {
                    partitions.iter().map(move |&p| {
                        let found = offsets.and_then(|o| o.get(&(topic.clone(), p)).cloned());
                        (topic.clone(), p, found)
                    })
                })
                .collect(),
            None => offsets
                .into_iter()
                .flatten()
                .map(|((t, p), o)| (t.clone(), *p, Some(o.clone())))
                .collect(),
        }
    }

    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        let groups = self.groups.lock();
        // DescribeGroups describes classic groups only (Kafka: "not a classic group").
        let entry = groups
            .get(group_id)
            .filter(|e| e.consumer.is_none() && e.share.is_none())?;
        Some(GroupDescription {
            state: entry.group.state(),
            protocol_type: entry.group.protocol_type().unwrap_or_default().to_string(),
            protocol_name: entry.group.protocol_name().unwrap_or_default().to_string(),
            members: entry.group.members().cloned().collect(),
        })
    }

    /// Every live group, classic or consumer.
    pub fn list(&self) -> Vec<ListedGroup> {
        let groups = self.groups.lock();
        let mut out: Vec<_> = groups
            .iter()
            .filter(|(_, e)| e.group.state() != GroupState::Dead)
            .map(|(id, e)| match (&e.consumer, &e.share) {
                (Some(consumer), _) => ListedGroup {
                    group_id: id.clone(),
                    protocol_type: "consumer".to_string(),
                    state: consumer.state().name(),
                    kind: "consumer",
                },
                (None, Some(share)) => ListedGroup {
                    group_id: id.clone(),
                    protocol_type: "share".to_string(),
                    state: share.state_name(),
                    kind: "share",
                },
                (None, None) => ListedGroup {
                    group_id: id.clone(),
                    protocol_type: e.group.protocol_type().unwrap_or_default().to_string(),
                    state: e.group.state().name(),
                    kind: "classic",
                },
            })
            .collect();
        out.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        out
    }

    /// ConsumerGroupHeartbeat: `topics` is what the members may subscribe to now.
    /// A group is created by a join (epoch 0). An empty classic group with the same id
    /// (committed offsets only) becomes a consumer group, keeping its offsets; a live
    /// classic group is not taken over (GROUP_ID_NOT_FOUND, as Kafka answers without
    /// online migration).
    pub async fn consumer_heartbeat(
        &self,
        group_id: &str,
        request: Heartbeat,
        topics: &TopicsImage,
        racks: PartitionRacks,
    ) -> Result<HeartbeatAnswer, GroupError> {
        self.check_coordinator(group_id)?;
        // One change at a time, written in the order made: the records replay to the
        // state the members were told about.
        let _turn = self.persist_lock.lock().await;
        let (answer, records) = self.consumer_step(group_id, request, topics, racks)?;
        if !records.is_empty() {
            if let Err(error) = self.write(group_id, &records).await {
                // The answer is not given: a member never acts on state that a new
                // coordinator would not replay (its epoch there fences it back in).
                tracing::warn!(group = group_id, %error, "could not store consumer group state");
                return Err(GroupError::CoordinatorNotAvailable);
            }
        }
        answer
    }

    /// The in-memory half of a heartbeat: the answer and the records it changed.
    #[allow(clippy::type_complexity)]
    fn consumer_step(
        &self,
        group_id: &str,
        request: Heartbeat,
        topics: &TopicsImage,
        racks: PartitionRacks,
    ) -> Result<(Result<HeartbeatAnswer, GroupError>, Vec<Change>), GroupError> {
        let joining = request.member_epoch == super::consumer::JOIN_EPOCH;
        let config = self.consumer_config(group_id);
        let mut groups = self.groups.lock();
        let limits = self.config.limits;
        let entry = entry_or_create(
            &mut groups,
            group_id,
            limits,
            joining,
            GroupError::UnknownMemberId,
        )?;
        let mut changes = Vec::new();
        let mut before = None;
        if entry.consumer.is_none() {
            if entry.share.is_some() || (!entry.group.is_empty() && !joining) {
                return Err(GroupError::GroupIdNotFound);
            }
            if !joining {
                return Err(GroupError::UnknownMemberId);
            }
            if entry.group.is_empty() {
                entry.consumer = Some(ConsumerGroup::new(config));
            } else {
                // Online upgrade: every record of the new group is written.
                super::consumer::check_heartbeat(&request)?;
                changes.push(self.upgrade(group_id, entry, topics, config)?);
                before = Some(super::consumer::records::Image::default());
            }
        }
        let consumer = entry
            .consumer
            .as_mut()
            .ok_or(GroupError::CoordinatorNotAvailable)?;
        consumer.set_config(config);
        let before = before.unwrap_or_else(|| consumer.image());
        consumer.set_partition_racks(racks);
        let answer = consumer.heartbeat(request, topics, monotonic_ms());
        let after = consumer.image();
        migration::count_rebalance(group_id, &before, &after);
        changes.extend(consumer_changes(group_id, &before, &after));
        if let Some(more) = self.downgrade(group_id, entry) {
            changes.extend(more);
        }
        entry.note_emptiness();
        Ok((answer, changes))
    }

    /// Removes consumer-group members whose session or revocation timed out, and
    /// stores the change.
    async fn expire_consumer_members(&self) {
        let _turn = self.persist_lock.lock().await;
        let now = monotonic_ms();
        let expired: Vec<(String, Vec<Change>)> = {
            let mut groups = self.groups.lock();
            groups
                .iter_mut()
                .filter_map(|(group_id, entry)| {
                    let consumer = entry.consumer.as_mut()?;
                    let before = consumer.image();
                    let gone = consumer.expire(now);
                    if gone.is_empty() {
                        return None;
                    }
                    tracing::info!(group = %group_id, members = ?gone, "consumer group members removed: session or revocation timed out");
                    let mut changes = consumer_changes(group_id, &before, &consumer.image());
                    if let Some(more) = self.downgrade(group_id, entry) {
                        changes.extend(more);
                    }
                    entry.note_emptiness();
                    Some((group_id.clone(), changes))
                })
                .collect()
        };
        for (group_id, changes) in expired {
            if let Err(error) = self.write(&group_id, &changes).await {
                tracing::warn!(group = %group_id, %error, "could not store consumer group state");
            }
        }
    }

    /// A consumer group's state, for ConsumerGroupDescribe (`None`: no such consumer group).
    pub fn describe_consumer(&self, group_id: &str) -> Option<ConsumerGroup> {
        self.groups.lock().get(group_id)?.consumer.clone()
    }

    /// OffsetFetch v9+ naming a member of a consumer group: it must hold that epoch
    /// (classic groups do not check).
    pub fn validate_offset_fetch(
        &self,
        group_id: &str,
        member_id: &str,
        member_epoch: i32,
    ) -> Result<(), GroupError> {
        let groups = self.groups.lock();
        let Some(entry) = groups.get(group_id) else {
            return Ok(());
        };
        if entry.share.is_some() {
            return Err(GroupError::GroupIdNotFound);
        }
        match &entry.consumer {
            Some(consumer) => consumer.validate_fetch(member_id, member_epoch),
            None => Ok(()),
        }
    }

    /// Members and committed offsets of every group, for lag metrics.
    pub fn lag_snapshot(&self) -> Vec<GroupLag> {
        let groups = self.groups.lock();
        groups
            .iter()
            .map(|(id, e)| GroupLag {
                group: id.clone(),
                kind: e.kind(),
                members: match (&e.consumer, &e.share) {
                    (Some(consumer), _) => consumer.members().count(),
                    (None, Some(share)) => share.members().count(),
                    (None, None) => e.group.members().count(),
                },
                committed: e
                    .offsets
                    .iter()
                    .map(|((t, p), o)| (t.clone(), *p, o.offset))
                    .collect(),
                share_starts: e
                    .share_states
                    .iter()
                    .map(|((t, p), state)| (*t, *p, state.snapshot.start_offset))
                    .collect(),
            })
            .collect()
    }

    /// Deletes an empty group and its offsets.
    pub async fn delete_group(&self, group_id: &str) -> Result<(), CommitError> {
        self.check_coordinator(group_id)?;
        let changes = {
            let mut groups = self.groups.lock();
            let entry = groups
                .get_mut(group_id)
                .ok_or(GroupError::GroupIdNotFound)?;
            if entry.group.state() == GroupState::Dead {
                return Err(GroupError::GroupIdNotFound.into());
            }
            if !entry.is_empty() {
                return Err(GroupError::NonEmptyGroup.into());
            }
            let mut changes = vec![Change::Group {
                group: group_id.to_string(),
                value: None,
            }];
            if let Some(consumer) = &entry.consumer {
                let gone = super::consumer::records::Image::default();
                changes.extend(consumer_changes(group_id, &consumer.image(), &gone));
            }
            changes.extend(entry.share_states.keys().map(|(topic_id, partition)| {
                Change::ShareState {
                    key: super::share::ShareKey {
                        group: group_id.to_string(),
                        topic_id: *topic_id,
                        partition: *partition,
                    },
                    value: None,
                }
            }));
            changes
        };
        self.write(group_id, &changes).await?;
        let mut groups = self.groups.lock();
        if let Some(mut entry) = groups.remove(group_id) {
            let _ = entry.group.delete();
        }
        Ok(())
    }

    /// OffsetDelete: drops the offsets of partitions whose topic no member subscribes to.
    pub async fn delete_offsets(
        &self,
        group_id: &str,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Option<GroupError>>, CommitError> {
        self.check_coordinator(group_id)?;
        let (changes, results) = {
            let groups = self.groups.lock();
            let entry = groups.get(group_id).ok_or(GroupError::GroupIdNotFound)?;
            // Only consumer-protocol subscriptions can be read; other active groups keep all.
            if !entry.group.is_empty() && entry.group.protocol_type() != Some("consumer") {
                return Err(GroupError::NonEmptyGroup.into());
            }
            let subscribed: Vec<String> = match &entry.consumer {
                Some(consumer) => consumer
                    .subscribed_topic_names()
                    .map(str::to_string)
                    .collect(),
                None => entry
                    .group
                    .member_metadata()
                    .iter()
                    .flat_map(|m| {
                        super::consumer::embedded::decode_subscription(m)
                            .map(|s| s.topics)
                            .unwrap_or_default()
                    })
                    .collect(),
            };
            let mut changes = Vec::new();
            let mut results = Vec::new();
            for (topic, partition) in partitions {
                if subscribed.iter().any(|t| t == topic) {
                    results.push(Some(GroupError::GroupSubscribedToTopic));
                } else {
                    results.push(None);
                    if entry.offsets.contains_key(&(topic.clone(), *partition)) {
                        changes.push(Change::Offset {
                            group: group_id.to_string(),
                            topic: topic.clone(),
                            partition: *partition,
                            value: None,
                        });
                    }
                }
            }
            (changes, results)
        };
        self.write_then_apply(group_id, &changes).await?;
        Ok(results)
    }

    /// Advances every group's timers and expires old offsets of empty groups.
    pub async fn tick(&self) {
        self.expire_consumer_members().await;
        self.expire_share_members();
        let now = monotonic_ms();
        let wall = now_ms();
        let mut expired: Vec<(String, Vec<Change>)> = Vec::new();
        let mut unsettled_writes: Vec<String> = Vec::new();
        {
            let mut groups = self.groups.lock();
            for (group_id, entry) in groups.iter_mut() {
                let deliveries = entry.group.tick(now);
                deliver(entry, deliveries);
                entry.note_emptiness();
                let settled = matches!(entry.group.state(), GroupState::Stable | GroupState::Empty);
                if settled
                    && entry.persisted.as_ref() != Some(&entry.group.fingerprint())
                    && entry.persisted.is_some()
                {
                    unsettled_writes.push(group_id.clone());
                }
                if let Some(since) = entry.empty_since_ms {
                    let cutoff = wall - self.config.offsets_retention_ms;
                    if since < cutoff {
                        let changes: Vec<Change> = entry
                            .offsets
                            .iter()
                            .filter(|(_, o)| o.commit_timestamp < cutoff)
                            .map(|((t, p), _)| Change::Offset {
                                group: group_id.clone(),
                                topic: t.clone(),
                                partition: *p,
                                value: None,
                            })
                            .collect();
                        if !changes.is_empty() {
                            expired.push((group_id.clone(), changes));
                        }
                    }
                }
            }
        }
        for group_id in unsettled_writes {
            self.persist_if_settled(&group_id).await;
        }
        for (group_id, changes) in expired {
            if self.write_then_apply(&group_id, &changes).await.is_ok() {
                tracing::info!(group = %group_id, expired = changes.len(), "expired committed offsets");
            }
        }
    }
}

/// The records that take a consumer group's stored state from `before` to `after`.
fn consumer_changes(
    group_id: &str,
    before: &super::consumer::records::Image,
    after: &super::consumer::records::Image,
) -> Vec<Change> {
    super::consumer::records::diff(group_id, before, after)
        .into_iter()
        .map(|record| Change::Consumer {
            group: group_id.to_string(),
            record,
        })
        .collect()
}

/// The records a commit of `commits` to `group_id` writes, plain or transactional.
fn offset_changes(group_id: &str, commits: &[OffsetCommit], now: i64) -> Vec<Change> {
    commits
        .iter()
        .map(|c| Change::Offset {
            group: group_id.to_string(),
            topic: c.topic.clone(),
            partition: c.partition,
            value: Some(CommittedOffset {
                offset: c.offset,
                leader_epoch: c.leader_epoch,
                metadata: c.metadata.clone(),
                commit_timestamp: now,
            }),
        })
        .collect()
}

/// The entry of `group_id`, created (as an empty classic group) when `create` allows;
/// otherwise a missing group is `missing`.
fn entry_or_create<'a>(
    groups: &'a mut HashMap<String, GroupEntry>,
    group_id: &str,
    limits: GroupLimits,
    create: bool,
    missing: GroupError,
) -> Result<&'a mut GroupEntry, GroupError> {
    if !groups.contains_key(group_id) {
        if !create {
            return Err(missing);
        }
        groups.insert(
            group_id.to_string(),
            new_entry(Group::new(group_id, limits)),
        );
    }
    groups
        .get_mut(group_id)
        .ok_or(GroupError::CoordinatorNotAvailable)
}

fn new_entry(group: Group) -> GroupEntry {
    GroupEntry {
        group,
        offsets: BTreeMap::new(),
        waiters: HashMap::new(),
        persisted: None,
        empty_since_ms: None,
        pending: BTreeMap::new(),
        consumer: None,
        share: None,
        share_states: BTreeMap::new(),
        share_readers: HashMap::new(),
    }
}

impl GroupEntry {
    fn is_empty(&self) -> bool {
        self.group.is_empty()
            && self.consumer.as_ref().is_none_or(ConsumerGroup::is_empty)
            && self
                .share
                .as_ref()
                .is_none_or(super::share::ShareGroup::is_empty)
    }

    /// The group's kind, as ListGroups v5 names it.
    fn kind(&self) -> &'static str {
        match (&self.consumer, &self.share) {
            (Some(_), _) => "consumer",
            (None, Some(_)) => "share",
            (None, None) => "classic",
        }
    }

    /// Validates a commit by `member_id` with `generation` (a member epoch for a
    /// consumer group) against whichever kind of group this is.
    fn validate_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), GroupError> {
        if self.share.is_some() {
            // Kafka's `ShareGroup.validateOffsetCommit`: share groups commit nothing.
            return Err(GroupError::GroupIdNotFound);
        }
        match &self.consumer {
            Some(consumer) => consumer.validate_commit(member_id, generation),
            None => self
                .group
                .validate_commit(member_id, instance_id, generation),
        }
    }

    fn note_emptiness(&mut self) {
        if self.is_empty() {
            self.empty_since_ms.get_or_insert_with(now_ms);
        } else {
            self.empty_since_ms = None;
        }
    }
}

fn apply(entry: &mut GroupEntry, changes: &[Change]) {
    for change in changes {
        match change {
            Change::Offset {
                topic,
                partition,
                value: Some(v),
                ..
            } => {
                entry.offsets.insert((topic.clone(), *partition), v.clone());
            }
            Change::Offset {
                topic,
                partition,
                value: None,
                ..
            } => {
                entry.offsets.remove(&(topic.clone(), *partition));
            }
            Change::Group { value: Some(_), .. }
            | Change::Consumer { .. }
            | Change::ShareState { .. } => {}
            Change::Group { value: None, .. } => entry.offsets.clear(),
        }
    }
}

fn deliver(entry: &mut GroupEntry, deliveries: Vec<Delivery>) {
    if deliveries
        .iter()
        .any(|d| matches!(d, Delivery::Join { result, .. } if result.error.is_none()))
    {
        let group = entry.group.group_id.clone();
        let labels = [("group", group), ("type", "classic".to_string())];
        metrics::counter!(crate::metrics::GROUP_REBALANCES_TOTAL, &labels).increment(1);
    }
    for delivery in deliveries {
        match delivery {
            Delivery::Join { member_id, result } => {
                if let Some(Waiter::Join(tx)) = entry.waiters.remove(&member_id) {
                    let _ = tx.send(result);
                }
            }
            Delivery::Sync { member_id, result } => {
                if let Some(Waiter::Sync(tx)) = entry.waiters.remove(&member_id) {
                    let _ = tx.send(result);
                }
            }
        }
    }
}

fn rebalancing(member_id: &str) -> JoinResult {
    JoinResult {
        error: Some(GroupError::RebalanceInProgress),
        generation_id: -1,
        protocol_type: None,
        protocol_name: None,
        leader: String::new(),
        member_id: member_id.to_string(),
        members: Vec::new(),
        skip_assignment: false,
    }
}

fn sync_error(error: GroupError) -> SyncResult {
    SyncResult {
        error: Some(error),
        protocol_type: None,
        protocol_name: None,
        assignment: Bytes::new(),
    }
}

/// Reads a whole offsets partition from its log start and rebuilds its groups.
fn replay(partition: &Partition) -> ReplayedState {
    let mut state = ReplayedState::default();
    // To the log end, as Kafka's GroupMetadataManager loads (FetchIsolation.LOG_END): a
    // new leader's log is the partition's truth — its followers truncate to it — and
    // its high watermark may still lag behind commits that were acknowledged.
    let offsets = partition.offsets();
    let mut offset = offsets.log_start().0;
    let end = offsets.log_end().0;
    let mut skipped = 0usize;
    while offset < end {
        let Ok(read) = partition.read_to_log_end(crate::model::Offset(offset), 1 << 20, true)
        else {
            break;
        };
        let Some(records) = read.records else { break };
        let mut progressed = false;
        for header in batch::batches(&records) {
            let Ok(header) = header else { break };
            if header.is_control() {
                if let Some(marker) = TxnMarker::decode(&header) {
                    state.apply_marker(marker.producer_id.0, marker.kind == MarkerKind::Commit);
                }
                offset = header.last_offset() + 1;
                progressed = true;
                continue;
            }
            let transactional = header.is_transactional().then(|| header.producer_id());
            for record in header.records().unwrap_or_default() {
                if record.offset >= offset {
                    let applied = match (record.key, transactional) {
                        (Some(key), Some(pid)) => state.apply_transactional(pid, key, record.value),
                        (Some(key), None) => state.apply(key, record.value),
                        (None, _) => false,
                    };
                    if !applied {
                        skipped += 1;
                    }
                }
            }
            offset = header.last_offset() + 1;
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    if skipped > 0 {
        tracing::warn!(partition = %partition.id(), skipped, "skipped unreadable offset records");
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::state::GroupLimits;
    use crate::log::{Log, LogConfig, OpenMode};
    use crate::model::TopicPartition;

    fn config() -> CoordinatorConfig {
        CoordinatorConfig {
            limits: GroupLimits {
                min_session_timeout_ms: 1000,
                max_session_timeout_ms: 60_000,
                initial_rebalance_delay_ms: 0,
                max_size: 100,
            },
            migration: crate::group::consumer::classic::MigrationPolicy::Bidirectional,
            consumer: ConsumerGroupConfig {
                session_timeout_ms: 10_000,
                heartbeat_interval_ms: 500,
                max_size: 100,
            },
            share: crate::group::share::ShareGroupConfig {
                session_timeout_ms: 10_000,
                heartbeat_interval_ms: 500,
                max_size: 100,
            },
            offsets_retention_ms: 7 * 24 * 3600 * 1000,
        }
    }

    /// A coordinator leading the one offsets partition `partition`.
    fn coordinating(partition: Arc<Partition>) -> GroupCoordinator {
        let coordinator = GroupCoordinator::new(1, config());
        coordinator.elect(0, partition);
        coordinator
    }

    fn offsets_partition(dir: &std::path::Path) -> std::io::Result<Arc<Partition>> {
        let log_config = LogConfig {
            segment_bytes: 4096,
            index_bytes: 4096,
            flush_messages: 1,
            cleanup: crate::log::CleanupPolicy::COMPACT,
            min_cleanable_dirty_ratio: 0.0,
            ..LogConfig::default()
        };
        let log = Log::open(
            dir,
            log_config,
            OpenMode {
                clean: false,
                recovery_point: 0,
            },
        )?;
        let partition = Partition::new(
            TopicPartition::new(offsets::OFFSETS_TOPIC, 0),
            uuid::Uuid::nil(),
            0,
            log,
            0,
            1,
            crate::replication::LeaderLease::always(),
        );
        partition.apply_assignment(
            &crate::cluster::TopicAssignment::all_on(
                &crate::cluster::TopicSpec {
                    name: offsets::OFFSETS_TOPIC.into(),
                    topic_id: uuid::Uuid::nil(),
                    numeric_id: 0,
                    partitions: 1,
                    replication_factor: 1,
                    configs: Default::default(),
                    replica_assignments: Default::default(),
                },
                0,
            )
            .partitions[0],
            None,
            0,
        );
        Ok(Arc::new(partition))
    }

    fn commit_of(topic: &str, partition: i32, offset: i64) -> OffsetCommit {
        OffsetCommit {
            topic: topic.into(),
            partition,
            offset,
            leader_epoch: 0,
            metadata: Some(format!("m{offset}")),
        }
    }

    #[tokio::test]
    async fn the_log_cleaner_keeps_the_latest_state_and_a_new_coordinator_replays_it(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let partition = offsets_partition(dir.path())?;
        let coordinator = coordinating(Arc::clone(&partition));
        for round in 0..200 {
            for group in ["a", "b"] {
                coordinator
                    .commit(
                        group,
                        "",
                        None,
                        -1,
                        vec![commit_of("t", 0, round), commit_of("t", 1, round * 2)],
                    )
                    .await?;
            }
        }
        coordinator.delete_group("b").await?;
        // More commits, so that the deletion is in a sealed (cleanable) segment.
        for round in 200..260 {
            coordinator
                .commit("c", "", None, -1, vec![commit_of("t", 0, round)])
                .await?;
        }
        partition.flush().await?;
        let before = partition.size_bytes();
        let outcome = partition
            .clean(1 << 20, None, now_ms())?
            .ok_or("a pass is due for the offsets partition")?;
        let after = partition.size_bytes();
        assert!(
            after * 4 < before && outcome.records_dropped > 0,
            "the cleaner freed most of the log ({before} -> {after} bytes)"
        );
        // A new coordinator replaying the compacted log sees exactly the live state.
        let reloaded = coordinating(Arc::clone(&partition));
        let offsets = reloaded.fetch_offsets("a", None);
        let latest: Vec<(String, i32, i64)> = offsets
            .iter()
            .map(|(t, p, o)| (t.clone(), *p, o.as_ref().map_or(-1, |o| o.offset)))
            .collect();
        assert_eq!(
            latest,
            vec![("t".to_string(), 0, 199), ("t".to_string(), 1, 398)]
        );
        assert_eq!(
            offsets[0].2.as_ref().and_then(|o| o.metadata.clone()),
            Some("m199".to_string())
        );
        assert!(
            reloaded.fetch_offsets("b", None).is_empty(),
            "the deleted group stays deleted"
        );
        // Commits after the cleaning replay too.
        reloaded
            .commit("a", "", None, -1, vec![commit_of("t", 0, 500)])
            .await?;
        let again = coordinating(partition);
        assert_eq!(
            again.fetch_offsets("a", Some(&[("t".to_string(), vec![0])]))[0]
                .2
                .as_ref()
                .map(|o| o.offset),
            Some(500)
        );
        Ok(())
    }
}
