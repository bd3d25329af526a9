//! One consumer group's membership, as a pure state machine (the classic protocol).
//! No clock, no I/O: callers pass `now_ms` and deliver the [`Delivery`]s it returns to
//! the members whose JoinGroup or SyncGroup requests are waiting.
//!
//! ```text
//!              join (new member / leader rejoin / changed metadata)
//!   Empty ───────────────────────────────┐
//!     ▲                                  ▼
//!     │ last member leaves     PreparingRebalance ◀──── member leaves, session expires,
//!     │                                  │                new member joins
//!     │        everyone rejoined, or     │
//!     │        rebalance timeout         ▼
//!     │                         CompletingRebalance ── leader's SyncGroup ──▶ Stable
//!     └──────────────────────────────────────────────────────────────────────┘
//!   Dead: deleted (DeleteGroups); no request succeeds on it any more.
//! ```
//!
//! The transitions are spread by phase: `join.rs` (JoinGroup and the rebalance it
//! starts), `sync.rs` (SyncGroup and the assignment), and here the group itself, its
//! record in `__consumer_offsets`, heartbeats, leaving and expiry.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use super::offsets::{GroupRecord, MemberRecord};

mod join;
mod sync;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The name Kafka uses in DescribeGroups and ListGroups.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// Group errors, each one Kafka error code (mapped in `api::errors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("unknown member id")]
    UnknownMemberId,
    #[error("illegal generation")]
    IllegalGeneration,
    #[error("rebalance in progress")]
    RebalanceInProgress,
    #[error("member id required")]
    MemberIdRequired,
    #[error("inconsistent group protocol")]
    InconsistentGroupProtocol,
    #[error("invalid session timeout")]
    InvalidSessionTimeout,
    #[error("static member fenced by a newer instance")]
    FencedInstanceId,
    #[error("coordinator not available")]
    CoordinatorNotAvailable,
    #[error("this broker does not coordinate the group")]
    NotCoordinator,
    #[error("group is not empty")]
    NonEmptyGroup,
    #[error("group id not found")]
    GroupIdNotFound,
    #[error("group has reached its maximum size")]
    GroupMaxSizeReached,
    #[error("the group subscribes to this topic")]
    GroupSubscribedToTopic,
    #[error("invalid group id")]
    InvalidGroupId,
    #[error("the member epoch is fenced; the member must rejoin")]
    FencedMemberEpoch,
    #[error("the member epoch is stale")]
    StaleMemberEpoch,
    #[error("the instance id is still used by another member")]
    UnreleasedInstanceId,
    #[error("unsupported server assignor")]
    UnsupportedAssignor,
    #[error("the subscribed topic regex is not a valid regular expression")]
    InvalidRegularExpression,
}

/// Limits that apply to every group (from the broker config).
#[derive(Debug, Clone, Copy)]
pub struct GroupLimits {
    pub min_session_timeout_ms: i32,
    pub max_session_timeout_ms: i32,
    /// How long a new group waits for more members before its first rebalance.
    pub initial_rebalance_delay_ms: i32,
    pub max_size: usize,
}

#[derive(Debug, Clone)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// `(protocol name, metadata)`, in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    awaiting_join: bool,
    awaiting_sync: bool,
    last_heartbeat_ms: u64,
}

impl Member {
    /// This member's metadata for `protocol` (its subscription, for consumers).
    pub fn metadata_for(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }
}

/// A JoinGroup request, as the state machine needs it.
#[derive(Debug, Clone)]
pub struct JoinRequest {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// v4+: a member without an id first gets MEMBER_ID_REQUIRED and a new id.
    pub require_known_member_id: bool,
    /// v9+: the answer can tell a returning static leader to skip the assignment.
    pub supports_skip_assignment: bool,
}

/// What a joining member is told.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinResult {
    pub error: Option<GroupError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// Only for the leader: every member with its metadata for the chosen protocol.
    pub members: Vec<(String, Option<String>, Bytes)>,
    /// The leader must not compute a new assignment (a static leader rejoined; v9+).
    pub skip_assignment: bool,
}

impl JoinResult {
    pub fn error(error: GroupError, member_id: &str) -> Self {
        Self {
            error: Some(error),
            generation_id: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_string(),
            members: Vec::new(),
            skip_assignment: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SyncResult {
    pub error: Option<GroupError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

impl SyncResult {
    fn error(error: GroupError) -> Self {
        Self {
            error: Some(error),
            protocol_type: None,
            protocol_name: None,
            assignment: Bytes::new(),
        }
    }
}

/// A response for a member whose request is parked in the coordinator.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    Join {
        member_id: String,
        result: JoinResult,
    },
    Sync {
        member_id: String,
        result: SyncResult,
    },
}

/// The answer to a JoinGroup or SyncGroup: now, or once a later event completes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply<T> {
    Now(T),
    /// Parked: a later `Delivery` for this member id carries the answer.
    Wait {
        member_id: String,
    },
}

#[derive(Debug, Clone)]
pub struct Group {
    pub group_id: String,
    state: GroupState,
    generation_id: i32,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Static members: group instance id → current member id.
    static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, and when.
    pending_members: HashMap<String, u64>,
    /// When a PreparingRebalance completes at the latest.
    rebalance_deadline_ms: u64,
    /// When the leader must have sent its SyncGroup.
    sync_deadline_ms: u64,
    /// The current rebalance started from an empty group: it waits out the initial
    /// delay for more members even when everyone known has joined.
    initial_rebalance: bool,
    limits: GroupLimits,
    new_member_counter: u64,
}

impl Group {
    pub fn new(group_id: &str, limits: GroupLimits) -> Self {
        Self {
            group_id: group_id.to_string(),
            state: GroupState::Empty,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            rebalance_deadline_ms: 0,
            sync_deadline_ms: 0,
            initial_rebalance: false,
            limits,
            new_member_counter: 0,
        }
    }

    /// A group as its last stored record left it: Stable with its members (their
    /// session timers start again now), or Empty. Members keep their ids, so after a
    /// coordinator restart they carry on without a rebalance.
    pub fn restore(group_id: &str, limits: GroupLimits, record: &GroupRecord, now_ms: u64) -> Self {
        let mut group = Self::new(group_id, limits);
        group.generation_id = record.generation_id;
        group.protocol_type = record.protocol_type.clone();
        group.protocol_name = record.protocol_name.clone();
        group.leader = record.leader.clone();
        let protocol = record.protocol_name.clone().unwrap_or_default();
        for m in &record.members {
            if let Some(instance) = &m.group_instance_id {
                group
                    .static_members
                    .insert(instance.clone(), m.member_id.clone());
            }
            group.members.insert(
                m.member_id.clone(),
                Member {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocol_type: record.protocol_type.clone().unwrap_or_default(),
                    protocols: vec![(protocol.clone(), m.subscription.clone())],
                    assignment: m.assignment.clone(),
                    awaiting_join: false,
                    awaiting_sync: false,
                    last_heartbeat_ms: now_ms,
                },
            );
        }
        group.state = if group.members.is_empty() || group.protocol_name.is_none() {
            group.members.clear();
            group.static_members.clear();
            group.leader = None;
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        group
    }

    /// A classic group taken over from a consumer group (online downgrade) starts a
    /// rebalance, so its members rejoin and its leader assigns again.
    pub fn rebalance(&mut self, now_ms: u64) -> Vec<Delivery> {
        self.prepare_rebalance(now_ms, false)
    }

    /// The record that [`Group::restore`] reads back.
    pub fn record(&self, now_ms: i64) -> GroupRecord {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        GroupRecord {
            protocol_type: self.protocol_type.clone(),
            generation_id: self.generation_id,
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone(),
            state_timestamp: now_ms,
            members: self
                .members
                .values()
                .map(|m| MemberRecord {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: m.session_timeout_ms,
                    subscription: m.metadata_for(&protocol),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        }
    }

    /// What identifies the group's settled membership: generation and member ids.
    pub fn fingerprint(&self) -> (i32, Vec<String>) {
        (self.generation_id, self.members.keys().cloned().collect())
    }

    /// A group known only from stored offsets or metadata (after a restart).
    pub fn restored(
        group_id: &str,
        limits: GroupLimits,
        generation_id: i32,
        protocol_type: Option<String>,
    ) -> Self {
        let mut group = Self::new(group_id, limits);
        group.generation_id = generation_id;
        group.protocol_type = protocol_type;
        group
    }

    pub fn state(&self) -> GroupState {
        self.state
    }
    pub fn generation_id(&self) -> i32 {
        self.generation_id
    }
    pub fn protocol_type(&self) -> Option<&str> {
        self.protocol_type.as_deref()
    }
    pub fn protocol_name(&self) -> Option<&str> {
        self.protocol_name.as_deref()
    }
    pub fn leader(&self) -> Option<&str> {
        self.leader.as_deref()
    }
    pub fn members(&self) -> impl Iterator<Item = &Member> {
        self.members.values()
    }
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
    pub fn set_limits(&mut self, limits: GroupLimits) {
        self.limits = limits;
    }

    /// Whether `member_id` is a member with a subscription covering `protocol`'s
    /// metadata mentions (used by OffsetDelete: offsets of subscribed topics stay).
    pub fn member_metadata(&self) -> Vec<Bytes> {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        self.members
            .values()
            .map(|m| m.metadata_for(&protocol))
            .collect()
    }

    fn new_member_id(&mut self, client_id: &str) -> String {
        self.new_member_counter += 1;
        format!("{client_id}-{}", uuid::Uuid::new_v4())
    }

    /// Validates an OffsetCommit's member and generation.
    pub fn validate_commit(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        if generation_id < 0 && member_id.is_empty() {
            // A commit from a simple (group-less) consumer: only while nobody is in the group.
            return if self.members.is_empty() {
                Ok(())
            } else {
                Err(GroupError::UnknownMemberId)
            };
        }
        self.check_static(member_id, instance_id)?;
        if !self.members.contains_key(member_id) {
            return Err(GroupError::UnknownMemberId);
        }
        if generation_id != self.generation_id {
            return Err(GroupError::IllegalGeneration);
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress);
        }
        Ok(())
    }

    fn check_static(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), GroupError> {
        if let Some(instance) = instance_id {
            match self.static_members.get(instance) {
                Some(current) if current != member_id => return Err(GroupError::FencedInstanceId),
                // A member naming an instance id the group does not know.
                None if !member_id.is_empty() => return Err(GroupError::UnknownMemberId),
                _ => {}
            }
        }
        Ok(())
    }

    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        now_ms: u64,
    ) -> Result<(), GroupError> {
        if self.state == GroupState::Dead {
            return Err(GroupError::CoordinatorNotAvailable);
        }
        self.check_static(member_id, instance_id)?;
        let Some(member) = self.members.get_mut(member_id) else {
            return Err(GroupError::UnknownMemberId);
        };
        member.last_heartbeat_ms = now_ms;
        if generation_id != self.generation_id {
            return Err(GroupError::IllegalGeneration);
        }
        match self.state {
            GroupState::PreparingRebalance => Err(GroupError::RebalanceInProgress),
            _ => Ok(()),
        }
    }

    /// LeaveGroup for one member, by member id or (static) instance id.
    pub fn leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        now_ms: u64,
    ) -> (Result<(), GroupError>, Vec<Delivery>) {
        let target = match instance_id {
            Some(instance) => match self.static_members.get(instance) {
                Some(current) if member_id.is_empty() || current == member_id => current.clone(),
                Some(_) => return (Err(GroupError::FencedInstanceId), Vec::new()),
                None => return (Err(GroupError::UnknownMemberId), Vec::new()),
            },
            None => member_id.to_string(),
        };
        if self.pending_members.remove(&target).is_some() {
            return (Ok(()), Vec::new());
        }
        if !self.members.contains_key(&target) {
            return (Err(GroupError::UnknownMemberId), Vec::new());
        }
        let deliveries = self.remove_and_rebalance(&target, now_ms);
        (Ok(()), deliveries)
    }

    fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let member = self.members.remove(member_id)?;
        if let Some(instance) = &member.group_instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.members.keys().next().cloned();
        }
        Some(member)
    }

    /// Removes a member (left or expired) and rebalances the rest.
    fn remove_and_rebalance(&mut self, member_id: &str, now_ms: u64) -> Vec<Delivery> {
        let mut deliveries = Vec::new();
        if let Some(member) = self.remove_member(member_id) {
            if member.awaiting_join {
                deliveries.push(Delivery::Join {
                    member_id: member_id.to_string(),
                    result: JoinResult::error(GroupError::UnknownMemberId, member_id),
                });
            }
            if member.awaiting_sync {
                deliveries.push(Delivery::Sync {
                    member_id: member_id.to_string(),
                    result: SyncResult::error(GroupError::UnknownMemberId),
                });
            }
        }
        match self.state {
            GroupState::Empty | GroupState::Dead => {}
            _ if self.members.is_empty() => {
                self.state = GroupState::Empty;
                self.generation_id += 1;
                self.leader = None;
                self.protocol_name = None;
            }
            GroupState::PreparingRebalance => deliveries.extend(self.maybe_complete_join(now_ms)),
            _ => {
                deliveries.extend(self.prepare_rebalance(now_ms, false));
                deliveries.extend(self.maybe_complete_join(now_ms));
            }
        }
        deliveries
    }

    /// Advances timers: completes overdue rebalances, expires members whose sessions
    /// lapsed and member ids handed out but never used. Returns what to deliver.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Delivery> {
        let mut deliveries = Vec::new();
        self.pending_members
            .retain(|_, issued| now_ms < *issued + 5 * 60_000);
        if self.state == GroupState::PreparingRebalance && now_ms >= self.rebalance_deadline_ms {
            deliveries.extend(self.complete_join(now_ms));
        }
        if self.state == GroupState::CompletingRebalance && now_ms >= self.sync_deadline_ms {
            // The leader never sent assignments: drop the members that did not sync.
            let stragglers: Vec<String> = self
                .members
                .values()
                .filter(|m| !m.awaiting_sync)
                .map(|m| m.member_id.clone())
                .collect();
            for id in stragglers {
                deliveries.extend(self.remove_and_rebalance(&id, now_ms));
            }
        }
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                !m.awaiting_join
                    && now_ms > m.last_heartbeat_ms + m.session_timeout_ms.max(0) as u64
            })
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in expired {
            deliveries.extend(self.remove_and_rebalance(&member_id, now_ms));
        }
        deliveries
    }

    /// Marks the group deleted (DeleteGroups); only an empty group may be deleted.
    pub fn delete(&mut self) -> Result<(), GroupError> {
        if !self.members.is_empty() || !matches!(self.state, GroupState::Empty | GroupState::Dead) {
            return Err(GroupError::NonEmptyGroup);
        }
        self.state = GroupState::Dead;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
