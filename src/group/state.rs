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

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

use super::offsets::{GroupRecord, MemberRecord};

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

    pub fn join(
        &mut self,
        request: JoinRequest,
        now_ms: u64,
    ) -> (Reply<JoinResult>, Vec<Delivery>) {
        let member_id = request.member_id.clone();
        let refuse = |e| (Reply::Now(JoinResult::error(e, &member_id)), Vec::new());
        if self.state == GroupState::Dead {
            return refuse(GroupError::CoordinatorNotAvailable);
        }
        if request.session_timeout_ms < self.limits.min_session_timeout_ms
            || request.session_timeout_ms > self.limits.max_session_timeout_ms
        {
            return refuse(GroupError::InvalidSessionTimeout);
        }
        if request.protocols.is_empty()
            || request.protocol_type.is_empty()
            || !self.supports(&request)
        {
            return refuse(GroupError::InconsistentGroupProtocol);
        }
        if request.member_id.is_empty() {
            return self.join_unknown_member(request, now_ms);
        }
        if let Err(e) = self.check_static(&request.member_id, request.group_instance_id.as_deref())
        {
            return refuse(e);
        }
        if self.pending_members.remove(&request.member_id).is_some() {
            return self.add_member_and_rebalance(request, now_ms);
        }
        if !self.members.contains_key(&request.member_id) {
            return refuse(GroupError::UnknownMemberId);
        }
        self.join_known_member(request, now_ms)
    }

    /// Whether `request`'s protocols fit the group's: same type, and at least one
    /// protocol every other member also supports.
    fn supports(&self, request: &JoinRequest) -> bool {
        if self.members.is_empty()
            || self.members.len() == 1 && self.members.contains_key(&request.member_id)
        {
            return true;
        }
        if self
            .protocol_type
            .as_deref()
            .is_some_and(|t| t != request.protocol_type)
        {
            return false;
        }
        request.protocols.iter().any(|(name, _)| {
            self.members
                .values()
                .filter(|m| m.member_id != request.member_id)
                .all(|m| m.protocols.iter().any(|(n, _)| n == name))
        })
    }

    fn join_unknown_member(
        &mut self,
        mut request: JoinRequest,
        now_ms: u64,
    ) -> (Reply<JoinResult>, Vec<Delivery>) {
        let new_id = self.new_member_id(&request.client_id);
        if let Some(instance) = request.group_instance_id.clone() {
            if let Some(old_id) = self.static_members.get(&instance).cloned() {
                return self.replace_static_member(&old_id, new_id, request, now_ms);
            }
            request.member_id = new_id;
            return self.add_member_and_rebalance(request, now_ms);
        }
        if request.require_known_member_id {
            if self.members.len() + self.pending_members.len() >= self.limits.max_size {
                return (
                    Reply::Now(JoinResult::error(GroupError::GroupMaxSizeReached, "")),
                    Vec::new(),
                );
            }
            self.pending_members.insert(new_id.clone(), now_ms);
            return (
                Reply::Now(JoinResult::error(GroupError::MemberIdRequired, &new_id)),
                Vec::new(),
            );
        }
        request.member_id = new_id;
        self.add_member_and_rebalance(request, now_ms)
    }

    /// A static member rejoining under a new member id: the old id is fenced. In a
    /// stable group with unchanged metadata the others are not disturbed.
    fn replace_static_member(
        &mut self,
        old_id: &str,
        new_id: String,
        request: JoinRequest,
        now_ms: u64,
    ) -> (Reply<JoinResult>, Vec<Delivery>) {
        let Some(mut member) = self.members.remove(old_id) else {
            let mut request = request;
            request.member_id = new_id;
            return self.add_member_and_rebalance(request, now_ms);
        };
        let mut deliveries = Vec::new();
        if member.awaiting_join {
            deliveries.push(Delivery::Join {
                member_id: old_id.to_string(),
                result: JoinResult::error(GroupError::FencedInstanceId, old_id),
            });
        }
        if member.awaiting_sync {
            deliveries.push(Delivery::Sync {
                member_id: old_id.to_string(),
                result: SyncResult::error(GroupError::FencedInstanceId),
            });
        }
        // Kafka's rule: no rebalance when the group's selected protocol stays possible.
        let keeps_protocol = self
            .protocol_name
            .as_ref()
            .is_some_and(|p| request.protocols.iter().any(|(name, _)| name == p));
        member.member_id = new_id.clone();
        member.protocols = request.protocols.clone();
        member.session_timeout_ms = request.session_timeout_ms;
        member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        member.client_id = request.client_id.clone();
        member.client_host = request.client_host.clone();
        member.last_heartbeat_ms = now_ms;
        member.awaiting_join = false;
        member.awaiting_sync = false;
        if let Some(instance) = &request.group_instance_id {
            self.static_members.insert(instance.clone(), new_id.clone());
        }
        let was_leader = self.leader.as_deref() == Some(old_id);
        let leader_before = self.leader.clone().unwrap_or_default();
        self.members.insert(new_id.clone(), member);
        if was_leader {
            self.leader = Some(new_id.clone());
        }
        if self.state == GroupState::Stable && keeps_protocol {
            // Kafka's updateStaticMemberThenRebalanceOrCompleteJoin. v9+: a returning
            // static leader gets the member list and skip_assignment. Below v9 there is
            // no such flag: the answer names the leader as it was before the
            // replacement (the old member id) and no members, so the returning client
            // follows and syncs for its assignment instead of computing a new one.
            let mut result = if request.supports_skip_assignment {
                let mut result = self.join_result_for(&new_id, was_leader);
                result.skip_assignment = was_leader;
                result
            } else {
                let mut result = self.join_result_for(&new_id, false);
                result.leader = leader_before;
                result
            };
            result.member_id = new_id;
            return (Reply::Now(result), deliveries);
        }
        let mut request = request;
        request.member_id = new_id;
        let (reply, more) = self.join_known_member(request, now_ms);
        deliveries.extend(more);
        (reply, deliveries)
    }

    fn add_member_and_rebalance(
        &mut self,
        request: JoinRequest,
        now_ms: u64,
    ) -> (Reply<JoinResult>, Vec<Delivery>) {
        if self.members.len() >= self.limits.max_size {
            return (
                Reply::Now(JoinResult::error(
                    GroupError::GroupMaxSizeReached,
                    &request.member_id,
                )),
                Vec::new(),
            );
        }
        let member_id = request.member_id.clone();
        if let Some(instance) = &request.group_instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        let was_empty = self.members.is_empty();
        self.members.insert(
            member_id.clone(),
            Member {
                member_id: member_id.clone(),
                group_instance_id: request.group_instance_id,
                client_id: request.client_id,
                client_host: request.client_host,
                session_timeout_ms: request.session_timeout_ms,
                rebalance_timeout_ms: request.rebalance_timeout_ms,
                protocol_type: request.protocol_type.clone(),
                protocols: request.protocols,
                assignment: Bytes::new(),
                awaiting_join: true,
                awaiting_sync: false,
                last_heartbeat_ms: now_ms,
            },
        );
        if self.protocol_type.is_none() || was_empty {
            self.protocol_type = Some(request.protocol_type);
        }
        let mut deliveries =
            self.prepare_rebalance(now_ms, was_empty && self.state == GroupState::Empty);
        deliveries.extend(self.maybe_complete_join(now_ms));
        (
            self.parked_or_delivered(&member_id, &mut deliveries),
            deliveries,
        )
    }

    fn join_known_member(
        &mut self,
        request: JoinRequest,
        now_ms: u64,
    ) -> (Reply<JoinResult>, Vec<Delivery>) {
        let member_id = request.member_id.clone();
        let is_leader = self.leader.as_deref() == Some(member_id.as_str());
        let Some(member) = self.members.get_mut(&member_id) else {
            return (
                Reply::Now(JoinResult::error(GroupError::UnknownMemberId, &member_id)),
                Vec::new(),
            );
        };
        let unchanged = member.protocols == request.protocols;
        member.protocols = request.protocols;
        member.session_timeout_ms = request.session_timeout_ms;
        member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        member.last_heartbeat_ms = now_ms;
        let mut deliveries = Vec::new();
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance if unchanged && !is_leader => {
                // It missed the join response or restarted quickly: tell it the current generation.
                return (
                    Reply::Now(self.join_result_for(&member_id, false)),
                    deliveries,
                );
            }
            GroupState::PreparingRebalance => {}
            _ => deliveries.extend(self.prepare_rebalance(now_ms, false)),
        }
        if let Some(member) = self.members.get_mut(&member_id) {
            member.awaiting_join = true;
        }
        deliveries.extend(self.maybe_complete_join(now_ms));
        (
            self.parked_or_delivered(&member_id, &mut deliveries),
            deliveries,
        )
    }

    /// If `deliveries` already holds this member's join answer, answer now instead.
    fn parked_or_delivered(
        &self,
        member_id: &str,
        deliveries: &mut Vec<Delivery>,
    ) -> Reply<JoinResult> {
        let found = deliveries
            .iter()
            .position(|d| matches!(d, Delivery::Join { member_id: m, .. } if m == member_id));
        match found.map(|i| deliveries.remove(i)) {
            Some(Delivery::Join { result, .. }) => Reply::Now(result),
            _ => Reply::Wait {
                member_id: member_id.to_string(),
            },
        }
    }

    /// Enters PreparingRebalance; members waiting for a sync are told to rejoin.
    fn prepare_rebalance(&mut self, now_ms: u64, initial: bool) -> Vec<Delivery> {
        let mut deliveries = Vec::new();
        for member in self.members.values_mut() {
            if member.awaiting_sync {
                member.awaiting_sync = false;
                deliveries.push(Delivery::Sync {
                    member_id: member.member_id.clone(),
                    result: SyncResult::error(GroupError::RebalanceInProgress),
                });
            }
        }
        let rebalance_timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
            .max(0) as u64;
        let delay = if initial {
            (self.limits.initial_rebalance_delay_ms.max(0) as u64).min(rebalance_timeout)
        } else {
            rebalance_timeout
        };
        if self.state != GroupState::PreparingRebalance {
            self.rebalance_deadline_ms = now_ms + delay;
            self.state = GroupState::PreparingRebalance;
            self.initial_rebalance = initial && delay > 0;
        } else if self.initial_rebalance {
            // Each new member extends the initial delay (Kafka's InitialDelayedJoin).
            let delay =
                (self.limits.initial_rebalance_delay_ms.max(0) as u64).min(rebalance_timeout);
            self.rebalance_deadline_ms = self.rebalance_deadline_ms.max(now_ms + delay);
        }
        deliveries
    }

    /// Completes the join phase once every member has rejoined (not during the
    /// initial delay of a new group, which waits for more members to arrive).
    fn maybe_complete_join(&mut self, now_ms: u64) -> Vec<Delivery> {
        let everyone = !self.members.is_empty() && self.members.values().all(|m| m.awaiting_join);
        let waiting_for_more = self.initial_rebalance && now_ms < self.rebalance_deadline_ms;
        if self.state == GroupState::PreparingRebalance && everyone && !waiting_for_more {
            return self.complete_join(now_ms);
        }
        Vec::new()
    }

    /// Ends PreparingRebalance: drops members that did not rejoin, starts the next
    /// generation, and answers every parked JoinGroup.
    fn complete_join(&mut self, now_ms: u64) -> Vec<Delivery> {
        let mut deliveries = Vec::new();
        self.initial_rebalance = false;
        let dropped: Vec<String> = self
            .members
            .values()
            .filter(|m| !m.awaiting_join)
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in dropped {
            self.remove_member(&member_id);
        }
        self.generation_id += 1;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.leader = None;
            self.protocol_name = None;
            return deliveries;
        }
        self.protocol_name = self.select_protocol();
        if !self
            .leader
            .as_ref()
            .is_some_and(|l| self.members.contains_key(l))
        {
            self.leader = self.members.keys().next().cloned();
        }
        self.state = GroupState::CompletingRebalance;
        let rebalance_timeout = self
            .members
            .values()
            .map(|m| m.rebalance_timeout_ms)
            .max()
            .unwrap_or(0)
            .max(0) as u64;
        self.sync_deadline_ms = now_ms + rebalance_timeout;
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for member_id in ids {
            let is_leader = self.leader.as_deref() == Some(member_id.as_str());
            let result = self.join_result_for(&member_id, is_leader);
            if let Some(member) = self.members.get_mut(&member_id) {
                member.awaiting_join = false;
                member.last_heartbeat_ms = now_ms;
                member.assignment = Bytes::new();
            }
            deliveries.push(Delivery::Join { member_id, result });
        }
        deliveries
    }

    fn join_result_for(&self, member_id: &str, with_members: bool) -> JoinResult {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let members = if with_members {
            self.members
                .values()
                .map(|m| {
                    (
                        m.member_id.clone(),
                        m.group_instance_id.clone(),
                        m.metadata_for(&protocol),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinResult {
            error: None,
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_string(),
            members,
            skip_assignment: false,
        }
    }

    /// The protocol most members prefer among those all members support (Kafka's vote).
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&String> = first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .filter(|name| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(p, _)| p == *name))
            })
            .collect();
        let mut votes: BTreeMap<&String, usize> = BTreeMap::new();
        for member in self.members.values() {
            if let Some((name, _)) = member
                .protocols
                .iter()
                .find(|(p, _)| candidates.contains(&p))
            {
                *votes.entry(name).or_default() += 1;
            }
        }
        candidates
            .iter()
            .max_by_key(|c| {
                (
                    votes.get(*c).copied().unwrap_or(0),
                    std::cmp::Reverse(candidates.iter().position(|x| x == *c)),
                )
            })
            .map(|c| (*c).clone())
    }

    /// A SyncGroup (v5+) from a current member naming another protocol type or name
    /// than the group's is INCONSISTENT_GROUP_PROTOCOL (checked after member and
    /// generation, in Kafka's order).
    pub fn check_sync_protocol(
        &self,
        member_id: &str,
        generation_id: i32,
        protocol_type: Option<&str>,
        protocol_name: Option<&str>,
    ) -> Result<(), GroupError> {
        if !self.members.contains_key(member_id) || generation_id != self.generation_id {
            return Ok(()); // `sync` reports those
        }
        let type_ok = protocol_type.is_none_or(|t| self.protocol_type.as_deref() == Some(t));
        let name_ok = protocol_name.is_none_or(|n| self.protocol_name.as_deref() == Some(n));
        if type_ok && name_ok {
            Ok(())
        } else {
            Err(GroupError::InconsistentGroupProtocol)
        }
    }

    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        assignments: Vec<(String, Bytes)>,
        now_ms: u64,
    ) -> (Reply<SyncResult>, Vec<Delivery>) {
        if self.state == GroupState::Dead {
            return (
                Reply::Now(SyncResult::error(GroupError::CoordinatorNotAvailable)),
                Vec::new(),
            );
        }
        if let Err(e) = self.check_static(member_id, instance_id) {
            return (Reply::Now(SyncResult::error(e)), Vec::new());
        }
        if !self.members.contains_key(member_id) {
            return (
                Reply::Now(SyncResult::error(GroupError::UnknownMemberId)),
                Vec::new(),
            );
        }
        if generation_id != self.generation_id {
            return (
                Reply::Now(SyncResult::error(GroupError::IllegalGeneration)),
                Vec::new(),
            );
        }
        match self.state {
            GroupState::PreparingRebalance => (
                Reply::Now(SyncResult::error(GroupError::RebalanceInProgress)),
                Vec::new(),
            ),
            GroupState::Stable => {
                let result = self.sync_result_for(member_id);
                (Reply::Now(result), Vec::new())
            }
            GroupState::CompletingRebalance => {
                if let Some(member) = self.members.get_mut(member_id) {
                    member.awaiting_sync = true;
                    member.last_heartbeat_ms = now_ms;
                }
                if self.leader.as_deref() != Some(member_id) {
                    return (
                        Reply::Wait {
                            member_id: member_id.to_string(),
                        },
                        Vec::new(),
                    );
                }
                let assignments: HashMap<String, Bytes> = assignments.into_iter().collect();
                for member in self.members.values_mut() {
                    member.assignment = assignments
                        .get(&member.member_id)
                        .cloned()
                        .unwrap_or_default();
                }
                self.state = GroupState::Stable;
                let mut deliveries = Vec::new();
                let mut own = None;
                let waiting: Vec<String> = self
                    .members
                    .values()
                    .filter(|m| m.awaiting_sync)
                    .map(|m| m.member_id.clone())
                    .collect();
                for id in waiting {
                    let result = self.sync_result_for(&id);
                    if let Some(m) = self.members.get_mut(&id) {
                        m.awaiting_sync = false;
                    }
                    if id == member_id {
                        own = Some(result);
                    } else {
                        deliveries.push(Delivery::Sync {
                            member_id: id,
                            result,
                        });
                    }
                }
                let result = own.unwrap_or_else(|| self.sync_result_for(member_id));
                (Reply::Now(result), deliveries)
            }
            GroupState::Empty | GroupState::Dead => (
                Reply::Now(SyncResult::error(GroupError::UnknownMemberId)),
                Vec::new(),
            ),
        }
    }

    fn sync_result_for(&self, member_id: &str) -> SyncResult {
        SyncResult {
            error: None,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment: self
                .members
                .get(member_id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
        }
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
mod tests {
    use super::*;

    fn limits() -> GroupLimits {
        GroupLimits {
            min_session_timeout_ms: 1000,
            max_session_timeout_ms: 60_000,
            initial_rebalance_delay_ms: 0,
            max_size: 100,
        }
    }

    fn request(member_id: &str, instance: Option<&str>) -> JoinRequest {
        JoinRequest {
            member_id: member_id.into(),
            group_instance_id: instance.map(String::from),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"m"))],
            require_known_member_id: true,
            supports_skip_assignment: true,
        }
    }

    fn joined(reply: Reply<JoinResult>) -> JoinResult {
        match reply {
            Reply::Now(r) => r,
            Reply::Wait { member_id } => panic!("{member_id} is waiting"),
        }
    }

    /// Runs the MEMBER_ID_REQUIRED round trip and returns the member id.
    fn first_join(group: &mut Group, now: u64) -> (String, Reply<JoinResult>, Vec<Delivery>) {
        let (reply, _) = group.join(request("", None), now);
        let id = joined(reply);
        assert_eq!(id.error, Some(GroupError::MemberIdRequired));
        let (reply, deliveries) = group.join(request(&id.member_id, None), now);
        (id.member_id, reply, deliveries)
    }

    #[test]
    fn a_lone_member_joins_syncs_and_becomes_stable() {
        let mut group = Group::new("g", limits());
        let (a, reply, _) = first_join(&mut group, 0);
        let result = joined(reply);
        assert_eq!(
            (result.generation_id, result.leader.as_str()),
            (1, a.as_str())
        );
        assert_eq!(result.members.len(), 1, "the leader gets the member list");
        assert_eq!(group.state(), GroupState::CompletingRebalance);
        let (reply, _) = group.sync(
            &a,
            None,
            1,
            vec![(a.clone(), Bytes::from_static(b"all"))],
            1,
        );
        assert!(
            matches!(reply, Reply::Now(SyncResult { error: None, ref assignment, .. }) if assignment == &Bytes::from_static(b"all"))
        );
        assert_eq!(group.state(), GroupState::Stable);
        assert_eq!(group.heartbeat(&a, None, 1, 2), Ok(()));
        assert_eq!(
            group.heartbeat(&a, None, 0, 2),
            Err(GroupError::IllegalGeneration)
        );
        assert_eq!(
            group.heartbeat("nobody", None, 1, 2),
            Err(GroupError::UnknownMemberId)
        );
    }

    #[test]
    fn a_second_member_triggers_a_rebalance_that_waits_for_the_first() {
        let mut group = Group::new("g", limits());
        let (a, _, _) = first_join(&mut group, 0);
        group.sync(&a, None, 1, vec![(a.clone(), Bytes::new())], 0);
        let (b, reply, _) = first_join(&mut group, 10);
        assert!(
            matches!(reply, Reply::Wait { .. }),
            "b waits for a to rejoin"
        );
        assert_eq!(
            group.heartbeat(&a, None, 1, 11),
            Err(GroupError::RebalanceInProgress)
        );
        let (reply, deliveries) = group.join(request(&a, None), 12);
        let leader_view = joined(reply);
        assert_eq!(leader_view.generation_id, 2);
        assert_eq!(leader_view.members.len(), 2);
        assert!(
            matches!(&deliveries[..], [Delivery::Join { member_id, result }] if *member_id == b && result.generation_id == 2)
        );
        // b syncs first and waits; the leader's sync releases it.
        let (reply, _) = group.sync(&b, None, 2, vec![], 13);
        assert!(matches!(reply, Reply::Wait { .. }));
        let (_, deliveries) = group.sync(
            &a,
            None,
            2,
            vec![(b.clone(), Bytes::from_static(b"p1"))],
            14,
        );
        assert!(
            matches!(&deliveries[..], [Delivery::Sync { result, .. }] if result.assignment == Bytes::from_static(b"p1"))
        );
    }

    #[test]
    fn an_expired_member_is_removed_and_the_rest_rebalance() {
        let mut group = Group::new("g", limits());
        let (a, _, _) = first_join(&mut group, 0);
        group.sync(&a, None, 1, vec![], 0);
        let (b, _, _) = first_join(&mut group, 0);
        group.join(request(&a, None), 0);
        group.sync(&a, None, 2, vec![], 0);
        group.heartbeat(&a, None, 2, 9_000).ok();
        assert!(group.tick(10_500).is_empty() || group.state() != GroupState::Stable);
        assert!(
            group.members().all(|m| m.member_id != b),
            "b's session expired"
        );
        assert_eq!(
            group.heartbeat(&a, None, 2, 10_600),
            Err(GroupError::RebalanceInProgress)
        );
        let (reply, _) = group.join(request(&a, None), 10_700);
        assert_eq!(joined(reply).generation_id, 3);
    }

    #[test]
    fn a_static_member_rejoins_without_disturbing_the_group_and_fences_its_old_id() {
        let mut group = Group::new("g", limits());
        let (reply, _) = group.join(request("", Some("i1")), 0);
        let a = joined(reply);
        assert_eq!(
            a.error, None,
            "static members need no MEMBER_ID_REQUIRED round trip"
        );
        group.sync(&a.member_id, Some("i1"), 1, vec![], 0);
        let (reply, _) = group.join(request("", Some("i2")), 1);
        let b = match reply {
            Reply::Wait { member_id } => member_id,
            Reply::Now(r) => r.member_id,
        };
        group.join(request(&a.member_id, Some("i1")), 2);
        group.sync(
            &a.member_id,
            Some("i1"),
            2,
            vec![(b.clone(), Bytes::from_static(b"x"))],
            3,
        );
        assert_eq!(group.state(), GroupState::Stable);
        // b restarts quickly with the same instance id.
        let (reply, _) = group.join(request("", Some("i2")), 4);
        let b2 = joined(reply);
        assert_eq!((b2.error, b2.generation_id), (None, 2), "no new generation");
        assert_eq!(group.state(), GroupState::Stable);
        assert_eq!(
            group.heartbeat(&b, Some("i2"), 2, 5),
            Err(GroupError::FencedInstanceId)
        );
        let (reply, _) = group.sync(&b2.member_id, Some("i2"), 2, vec![], 6);
        assert!(
            matches!(reply, Reply::Now(SyncResult { error: None, ref assignment, .. }) if assignment == &Bytes::from_static(b"x"))
        );
    }

    #[test]
    fn leaving_empties_the_group_and_commits_then_follow_simple_rules() {
        let mut group = Group::new("g", limits());
        let (a, _, _) = first_join(&mut group, 0);
        group.sync(&a, None, 1, vec![], 0);
        assert_eq!(group.validate_commit(&a, None, 1), Ok(()));
        assert_eq!(
            group.validate_commit("", None, -1),
            Err(GroupError::UnknownMemberId)
        );
        assert_eq!(group.delete(), Err(GroupError::NonEmptyGroup));
        let (result, _) = group.leave(&a, None, 1);
        assert_eq!(result, Ok(()));
        assert_eq!(group.state(), GroupState::Empty);
        assert_eq!(
            group.validate_commit("", None, -1),
            Ok(()),
            "simple consumers commit to empty groups"
        );
        assert_eq!(group.delete(), Ok(()));
        assert_eq!(group.state(), GroupState::Dead);
    }

    #[test]
    fn refuses_bad_timeouts_and_incompatible_protocols() {
        let mut group = Group::new("g", limits());
        let mut r = request("", None);
        r.session_timeout_ms = 10;
        assert_eq!(
            joined(group.join(r, 0).0).error,
            Some(GroupError::InvalidSessionTimeout)
        );
        let (a, _, _) = first_join(&mut group, 0);
        group.sync(&a, None, 1, vec![], 0);
        let mut other = request("", None);
        other.require_known_member_id = false;
        other.protocols = vec![("roundrobin".into(), Bytes::new())];
        assert_eq!(
            joined(group.join(other, 1).0).error,
            Some(GroupError::InconsistentGroupProtocol)
        );
    }

    #[test]
    fn the_initial_delay_waits_for_more_members() {
        let mut l = limits();
        l.initial_rebalance_delay_ms = 3000;
        let mut group = Group::new("g", l);
        let (_, reply, _) = first_join(&mut group, 0);
        assert!(matches!(reply, Reply::Wait { .. }));
        let (_, reply, _) = first_join(&mut group, 1000);
        assert!(matches!(reply, Reply::Wait { .. }));
        assert!(group.tick(2000).is_empty());
        let deliveries = group.tick(4001);
        assert_eq!(deliveries.len(), 2, "both joined in one generation");
        assert_eq!(group.generation_id(), 1);
    }

    #[test]
    fn a_restored_group_also_waits_the_initial_delay() {
        let mut l = limits();
        l.initial_rebalance_delay_ms = 3000;
        let mut group = Group::restored("g", l, 7, Some("consumer".into()));
        let (_, reply, _) = first_join(&mut group, 0);
        assert!(
            matches!(reply, Reply::Wait { .. }),
            "waits for more members"
        );
        assert_eq!(group.tick(3001).len(), 1);
        assert_eq!(group.generation_id(), 8);
    }

    #[test]
    fn a_restored_group_keeps_its_members_and_generation() {
        let mut group = Group::new("g", limits());
        let (a, _, _) = first_join(&mut group, 0);
        group.sync(
            &a,
            None,
            1,
            vec![(a.clone(), Bytes::from_static(b"asg"))],
            0,
        );
        let record = group.record(0);
        let mut restored = Group::restore("g", limits(), &record, 50_000);
        assert_eq!(restored.state(), GroupState::Stable);
        assert_eq!(
            restored.heartbeat(&a, None, 1, 50_001),
            Ok(()),
            "no rejoin needed"
        );
        let (reply, _) = restored.sync(&a, None, 1, vec![], 50_002);
        assert!(
            matches!(reply, Reply::Now(SyncResult { ref assignment, .. }) if assignment == &Bytes::from_static(b"asg"))
        );
        assert!(
            restored.tick(50_000 + 10_001).is_empty() || restored.members().count() == 0,
            "sessions restart at restore"
        );
    }

    #[test]
    fn a_static_leader_rejoining_keeps_the_generation_and_skips_assignment() {
        let mut group = Group::new("g", limits());
        let (reply, _) = group.join(request("", Some("i1")), 0);
        let leader = joined(reply);
        group.sync(&leader.member_id, Some("i1"), 1, vec![], 0);
        let (reply, _) = group.join(request("", Some("i1")), 5);
        let again = joined(reply);
        assert_eq!((again.error, again.generation_id), (None, 1));
        assert!(again.skip_assignment);
        assert_eq!(
            again.leader, again.member_id,
            "still the leader, under its new id"
        );
        assert_eq!(group.state(), GroupState::Stable);
    }

    /// Below JoinGroup v9 (no skip_assignment) Kafka answers a returning static leader
    /// with the old member id as leader and no members: the client follows, syncs and
    /// gets its old assignment back, and nobody rebalances.
    #[test]
    fn a_static_leader_rejoining_below_v9_is_told_the_old_leader_and_no_members() {
        let mut group = Group::new("g", limits());
        let (reply, _) = group.join(request("", Some("i1")), 0);
        let leader = joined(reply);
        group.sync(&leader.member_id, Some("i1"), 1, vec![], 0);
        let old_v8 = JoinRequest {
            supports_skip_assignment: false,
            ..request("", Some("i1"))
        };
        let (reply, deliveries) = group.join(old_v8, 5);
        let again = joined(reply);
        assert!(deliveries.is_empty());
        assert_eq!((again.error, again.generation_id), (None, 1));
        assert_ne!(again.member_id, leader.member_id, "a new member id");
        assert_eq!(again.leader, leader.member_id, "the leader as it was");
        assert!(again.members.is_empty() && !again.skip_assignment);
        assert_eq!(group.state(), GroupState::Stable, "no rebalance");
        assert_eq!(group.leader(), Some(again.member_id.as_str()));
    }
}
