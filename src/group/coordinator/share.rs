//! The coordinator's share-group half: membership (ShareGroupHeartbeat) and the store
//! of the group's share-partition states, which partition leaders read when they take
//! a share-partition over and write after every acknowledgement (see
//! `group::share::persister`).
//!
//! Membership lives in memory only: a member has nothing to reconcile, so after a
//! coordinator failover it is told UNKNOWN_MEMBER_ID and joins again at once. The
//! share-partition states are what must survive, and they are records of the group's
//! offsets partition, written acks=all before the write is answered.

use uuid::Uuid;

use super::super::consumer::TopicsImage;
use super::super::share::{
    PersistError, ShareAnswer, ShareGroup, ShareHeartbeat, ShareKey, ShareState,
};
use super::super::state::GroupError;
use super::{entry_or_create, Change, GroupCoordinator};
use crate::model::monotonic_ms;

impl GroupCoordinator {
    /// ShareGroupHeartbeat. A join (epoch 0) creates the group; a group of another
    /// kind is GROUP_ID_NOT_FOUND, as Kafka answers ("not a share group").
    pub fn share_heartbeat(
        &self,
        group_id: &str,
        request: ShareHeartbeat,
        topics: &TopicsImage,
    ) -> Result<ShareAnswer, GroupError> {
        self.check_coordinator(group_id)?;
        let joining = request.member_epoch == super::super::share::JOIN_EPOCH;
        let config = self.share_config(group_id);
        let mut groups = self.groups.lock();
        let limits = self.config.limits;
        let entry = entry_or_create(
            &mut groups,
            group_id,
            limits,
            joining,
            GroupError::UnknownMemberId,
        )?;
        if entry.share.is_none() {
            if entry.consumer.is_some() || !entry.group.is_empty() || !entry.offsets.is_empty() {
                return Err(GroupError::GroupIdNotFound);
            }
            if !joining {
                return Err(GroupError::UnknownMemberId);
            }
            entry.share = Some(ShareGroup::new(config));
        }
        let share = entry
            .share
            .as_mut()
            .ok_or(GroupError::CoordinatorNotAvailable)?;
        share.set_config(config);
        let epoch_before = share.group_epoch();
        let answer = share.heartbeat(request, topics, monotonic_ms());
        if share.group_epoch() != epoch_before {
            count_rebalance(group_id);
        }
        entry.note_emptiness();
        answer
    }

    /// A share group's membership, for ShareGroupDescribe (`None`: no such share group).
    pub fn describe_share(&self, group_id: &str) -> Option<ShareGroup> {
        self.groups.lock().get(group_id)?.share.clone()
    }

    /// Removes share-group members whose session ran out.
    pub(super) fn expire_share_members(&self) {
        let now = monotonic_ms();
        let mut groups = self.groups.lock();
        for (group_id, entry) in groups.iter_mut() {
            let Some(share) = entry.share.as_mut() else {
                continue;
            };
            let gone = share.expire(now);
            if !gone.is_empty() {
                tracing::info!(group = %group_id, members = ?gone, "share group members removed: session timed out");
                count_rebalance(group_id);
                entry.note_emptiness();
            }
        }
    }

    /// The stored state of a share-partition, for its leader `leader_epoch` taking it
    /// over; from then on writes of older leaders are fenced. A negative epoch only
    /// looks.
    pub fn read_share_state(
        &self,
        key: &ShareKey,
        leader_epoch: i32,
    ) -> Result<Option<ShareState>, PersistError> {
        self.check_coordinator(&key.group)
            .map_err(|_| PersistError::NotCoordinator)?;
        let mut groups = self.groups.lock();
        let Some(entry) = groups.get_mut(&key.group) else {
            return Ok(None);
        };
        let slot = (key.topic_id, key.partition);
        let stored = entry.share_states.get(&slot).cloned();
        if leader_epoch < 0 {
            // An observer (the HTTP API's message status): no leader takes it over.
            return Ok(stored);
        }
        let seen = stored
            .as_ref()
            .map_or(leader_epoch, |s| s.leader_epoch)
            .max(entry.share_readers.get(&slot).copied().unwrap_or(i32::MIN));
        if leader_epoch < seen {
            return Err(PersistError::FencedLeaderEpoch);
        }
        entry.share_readers.insert(slot, leader_epoch);
        Ok(stored)
    }

    /// Stores a share-partition's state, durably (acks=all) before answering. A write
    /// the offsets partition cannot take now (its leadership moving, a timeout) is
    /// `Unavailable`, COORDINATOR_NOT_AVAILABLE on the wire, which the leader retries.
    pub async fn write_share_state(
        &self,
        key: &ShareKey,
        state: &ShareState,
    ) -> Result<(), PersistError> {
        self.check_coordinator(&key.group)
            .map_err(|_| PersistError::NotCoordinator)?;
        let slot = (key.topic_id, key.partition);
        {
            let mut groups = self.groups.lock();
            let limits = self.config.limits;
            let entry = entry_or_create(
                &mut groups,
                &key.group,
                limits,
                true,
                GroupError::GroupIdNotFound,
            )
            .map_err(|_| PersistError::NotCoordinator)?;
            let stored = entry.share_states.get(&slot);
            let newest = stored
                .map(|s| s.leader_epoch)
                .into_iter()
                .chain(entry.share_readers.get(&slot).copied())
                .max();
            if newest.is_some_and(|newest| state.leader_epoch < newest) {
                return Err(PersistError::FencedLeaderEpoch);
            }
            // An operator reset (AlterShareGroupOffsets) bumped the state epoch: the
            // leader's state is older than it.
            if stored.is_some_and(|s| state.state_epoch < s.state_epoch) {
                return Err(PersistError::FencedStateEpoch);
            }
            if entry.share.is_none() && entry.consumer.is_none() && entry.group.is_empty() {
                entry.share = Some(ShareGroup::new(self.config.share));
            }
        }
        let change = Change::ShareState {
            key: key.clone(),
            value: Some(state.clone()),
        };
        self.write(&key.group, std::slice::from_ref(&change))
            .await
            .map_err(|error| PersistError::Unavailable(error.to_string()))?;
        if let (
            Some(entry),
            Change::ShareState {
                value: Some(state), ..
            },
        ) = (self.groups.lock().get_mut(&key.group), change)
        {
            entry.share_states.insert(slot, state);
        }
        Ok(())
    }

    /// AlterShareGroupOffsets / DeleteShareGroupOffsets: sets (or, with `None`,
    /// deletes) the start offset of share-partitions of an empty share group, dropping
    /// their in-flight state; a new state epoch makes their leaders load it again.
    pub async fn reset_share_starts(
        &self,
        group_id: &str,
        starts: &[((Uuid, i32), Option<i64>)],
    ) -> Result<(), GroupError> {
        self.check_coordinator(group_id)?;
        let changes: Vec<Change> = {
            let mut groups = self.groups.lock();
            let limits = self.config.limits;
            let entry = entry_or_create(
                &mut groups,
                group_id,
                limits,
                true,
                GroupError::GroupIdNotFound,
            )?;
            if entry.share.is_none() {
                if entry.consumer.is_some() || !entry.group.is_empty() || !entry.offsets.is_empty()
                {
                    return Err(GroupError::GroupIdNotFound);
                }
                entry.share = Some(ShareGroup::new(self.config.share));
            }
            if !entry.is_empty() {
                return Err(GroupError::NonEmptyGroup);
            }
            starts
                .iter()
                .map(|&(slot, start)| {
                    let stored = entry.share_states.get(&slot);
                    let value = start.map(|start_offset| ShareState {
                        state_epoch: stored.map_or(0, |s| s.state_epoch) + 1,
                        leader_epoch: stored.map_or(0, |s| s.leader_epoch),
                        snapshot: super::super::share::partition::Snapshot {
                            start_offset,
                            batches: Vec::new(),
                        },
                    });
                    Change::ShareState {
                        key: ShareKey {
                            group: group_id.to_string(),
                            topic_id: slot.0,
                            partition: slot.1,
                        },
                        value,
                    }
                })
                .collect()
        };
        self.write(group_id, &changes).await.map_err(|error| {
            tracing::warn!(group = group_id, %error, "could not store share offsets");
            GroupError::CoordinatorNotAvailable
        })?;
        if let Some(entry) = self.groups.lock().get_mut(group_id) {
            for change in changes {
                if let Change::ShareState { key, value } = change {
                    let slot = (key.topic_id, key.partition);
                    match value {
                        Some(state) => entry.share_states.insert(slot, state),
                        None => entry.share_states.remove(&slot),
                    };
                }
            }
        }
        Ok(())
    }

    /// Every stored share-partition state of `group_id` (DescribeShareGroupOffsets,
    /// lag); `None` unless it is a share group coordinated here.
    pub fn share_states(&self, group_id: &str) -> Option<Vec<(Uuid, i32, ShareState)>> {
        let groups = self.groups.lock();
        let entry = groups.get(group_id).filter(|e| e.share.is_some())?;
        Some(
            entry
                .share_states
                .iter()
                .map(|((topic, partition), state)| (*topic, *partition, state.clone()))
                .collect(),
        )
    }

    /// Whether `group_id` is some other kind of group than a share group.
    pub fn is_other_kind_than_share(&self, group_id: &str) -> bool {
        let groups = self.groups.lock();
        groups.get(group_id).is_some_and(|e| {
            e.share.is_none()
                && (e.consumer.is_some() || !e.group.is_empty() || !e.offsets.is_empty())
        })
    }
}

fn count_rebalance(group_id: &str) {
    let labels = [
        ("group", group_id.to_string()),
        ("type", "share".to_string()),
    ];
    metrics::counter!(crate::metrics::GROUP_REBALANCES_TOTAL, &labels).increment(1);
}
