//! KIP-848 consumer groups: the coordinator assigns, members reconcile.
//!
//! A member heartbeats (ConsumerGroupHeartbeat) with its subscription and the
//! partitions it owns; the group answers with its member epoch and, when it changed,
//! its assignment. Three epochs order everything:
//!
//! - the **group epoch** is bumped whenever the membership or what the members
//!   subscribe to (topics, their partition counts) changes;
//! - the **assignment epoch** is the group epoch the target assignment was computed
//!   for (by the [`assignor`]), at the first heartbeat after a bump;
//! - each **member epoch** is the target epoch the member has reconciled to.
//!
//! Reconciliation follows Kafka's `CurrentAssignmentBuilder`: a partition moves from
//! one member to another only after the first has stopped owning it. A member whose
//! target drops partitions keeps its epoch, gets only the partitions it keeps, and must
//! report the others released (UNREVOKED_PARTITIONS) before it advances; a member whose
//! target adds partitions still owned by someone gets them once they are released
//! (UNRELEASED_PARTITIONS). So no partition is ever owned by two members at once.
//!
//! Pure: time comes in as `now_ms`, topics as a [`TopicsImage`]; the coordinator
//! (`group::coordinator`) does the I/O.

pub mod assignor;
pub mod classic;
pub mod embedded;
pub mod records;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use regex::Regex;
use uuid::Uuid;

pub use assignor::{Assignment, PartitionRacks};
pub use records::MemberState;

use super::state::GroupError;

/// A heartbeat's member epoch asking to join (or rejoin).
pub const JOIN_EPOCH: i32 = 0;
/// A heartbeat's member epoch asking to leave.
pub const LEAVE_EPOCH: i32 = -1;
/// A static member leaving for now: its assignment waits for its instance id to return.
pub const STATIC_LEAVE_EPOCH: i32 = -2;

/// Settings of consumer groups (broker-wide, `group.consumer.*`).
#[derive(Debug, Clone, Copy)]
pub struct ConsumerGroupConfig {
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub max_size: usize,
}

/// The topics a group may subscribe to: name -> (id, partition count).
pub type TopicsImage = BTreeMap<String, (Uuid, i32)>;

/// One member of a consumer group.
#[derive(Debug, Clone)]
pub struct ConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub state: MemberState,
    pub member_epoch: i32,
    pub previous_member_epoch: i32,
    /// What the member owns (or will own once told).
    pub assigned: Assignment,
    /// What it must release before advancing.
    pub pending_revocation: Assignment,
    /// Set while it speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat).
    pub classic: Option<records::ClassicMemberMetadata>,
    session_deadline_ms: u64,
    /// Set while it must release partitions: by then, or it is removed.
    revocation_deadline_ms: Option<u64>,
    /// A classic member told to rejoin, or that joined and must sync: by then, or it
    /// is removed.
    classic_deadline_ms: Option<u64>,
}

/// A ConsumerGroupHeartbeat, decoded. `None` fields are "unchanged since the last one".
#[derive(Debug, Clone, Default)]
pub struct Heartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub rebalance_timeout_ms: i32,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// What the member is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// Present when the request was a full one or the assignment changed.
    pub assignment: Option<Assignment>,
}

/// The group's state as ConsumerGroupDescribe and ListGroups name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerGroupState {
    Empty,
    Assigning,
    Reconciling,
    Stable,
}

impl ConsumerGroupState {
    pub fn name(self) -> &'static str {
        match self {
            ConsumerGroupState::Empty => "Empty",
            ConsumerGroupState::Assigning => "Assigning",
            ConsumerGroupState::Reconciling => "Reconciling",
            ConsumerGroupState::Stable => "Stable",
        }
    }
}

/// A KIP-848 consumer group.
#[derive(Debug, Clone)]
pub struct ConsumerGroup {
    group_epoch: i32,
    assignment_epoch: i32,
    members: BTreeMap<String, ConsumerMember>,
    /// instance id -> member id.
    static_members: BTreeMap<String, String>,
    /// The target assignment by member id, for `assignment_epoch`.
    target: BTreeMap<String, Assignment>,
    /// Who owns each partition now (assigned or pending revocation).
    owners: HashMap<(Uuid, i32), String>,
    /// The subscribed topics the target was computed from: id -> (name, partitions).
    subscribed: BTreeMap<Uuid, (String, i32)>,
    regexes: HashMap<String, Option<Regex>>,
    /// Where each partition's replicas are, for rack-aware assignment.
    partition_racks: PartitionRacks,
    /// Rebuilt from records: the first heartbeat adopts the subscribed topics it
    /// resolves instead of bumping the epoch (the records do not keep them).
    restored: bool,
    config: ConsumerGroupConfig,
}

impl ConsumerGroup {
    pub fn new(config: ConsumerGroupConfig) -> Self {
        Self {
            group_epoch: 0,
            assignment_epoch: 0,
            members: BTreeMap::new(),
            static_members: BTreeMap::new(),
            target: BTreeMap::new(),
            owners: HashMap::new(),
            subscribed: BTreeMap::new(),
            regexes: HashMap::new(),
            partition_racks: PartitionRacks::new(),
            restored: false,
            config,
        }
    }

    /// The group as records describe it (`records::Image`), for a new coordinator.
    /// Every member's session starts now; a member that must revoke gets its whole
    /// rebalance timeout again.
    pub fn restore(image: &records::Image, config: ConsumerGroupConfig, now_ms: u64) -> Self {
        let mut group = Self::new(config);
        group.group_epoch = image.epoch.unwrap_or(0);
        group.assignment_epoch = image.assignment_epoch.unwrap_or(0);
        group.target = image.targets.clone();
        group.restored = true;
        for (id, meta) in &image.members {
            let mut member = new_member(id, now_ms);
            member.instance_id.clone_from(&meta.instance_id);
            member.rack_id.clone_from(&meta.rack_id);
            member.client_id.clone_from(&meta.client_id);
            member.client_host.clone_from(&meta.client_host);
            member
                .subscribed_topic_names
                .clone_from(&meta.subscribed_topic_names);
            member
                .subscribed_topic_regex
                .clone_from(&meta.subscribed_topic_regex);
            member.rebalance_timeout_ms = meta.rebalance_timeout_ms;
            member.server_assignor.clone_from(&meta.server_assignor);
            member.classic.clone_from(&meta.classic);
            let session_ms = meta
                .classic
                .as_ref()
                .map_or(config.session_timeout_ms, |c| c.session_timeout_ms);
            member.session_deadline_ms = now_ms + session_ms.max(0) as u64;
            if let Some(current) = image.current.get(id) {
                member.member_epoch = current.member_epoch;
                member.previous_member_epoch = current.previous_member_epoch;
                member.state = current.state;
                member.assigned.clone_from(&current.assigned);
                member
                    .pending_revocation
                    .clone_from(&current.pending_revocation);
                if member.state == MemberState::UnrevokedPartitions {
                    member.revocation_deadline_ms =
                        Some(now_ms + member.rebalance_timeout_ms.max(0) as u64);
                }
            }
            for partitions in [&member.assigned, &member.pending_revocation] {
                for (topic, ps) in partitions {
                    for &p in ps {
                        group.owners.insert((*topic, p), id.clone());
                    }
                }
            }
            if let Some(instance) = &member.instance_id {
                group.static_members.insert(instance.clone(), id.clone());
            }
            group.members.insert(id.clone(), member);
        }
        group
    }

    /// What the records of this group say now; a heartbeat writes the difference.
    pub fn image(&self) -> records::Image {
        let mut image = records::Image {
            epoch: Some(self.group_epoch),
            assignment_epoch: Some(self.assignment_epoch),
            targets: self.target.clone(),
            ..records::Image::default()
        };
        for (id, m) in &self.members {
            image.members.insert(
                id.clone(),
                records::MemberMetadata {
                    instance_id: m.instance_id.clone(),
                    rack_id: m.rack_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topic_names: m.subscribed_topic_names.clone(),
                    subscribed_topic_regex: m.subscribed_topic_regex.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    server_assignor: m.server_assignor.clone(),
                    classic: m.classic.clone(),
                },
            );
            image.current.insert(
                id.clone(),
                records::CurrentAssignment {
                    member_epoch: m.member_epoch,
                    previous_member_epoch: m.previous_member_epoch,
                    state: m.state,
                    assigned: m.assigned.clone(),
                    pending_revocation: m.pending_revocation.clone(),
                },
            );
        }
        image
    }

    pub fn set_config(&mut self, config: ConsumerGroupConfig) {
        self.config = config;
    }

    pub fn group_epoch(&self) -> i32 {
        self.group_epoch
    }

    pub fn assignment_epoch(&self) -> i32 {
        self.assignment_epoch
    }

    pub fn members(&self) -> impl Iterator<Item = &ConsumerMember> {
        self.members.values()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn target_of(&self, member_id: &str) -> Option<&Assignment> {
        self.target.get(member_id)
    }

    /// The name of the subscribed topic `id`, as last resolved.
    pub fn topic_name(&self, id: &Uuid) -> Option<&str> {
        self.subscribed.get(id).map(|(name, _)| name.as_str())
    }

    /// Every topic name some member subscribes to, as last resolved (OffsetDelete's
    /// "the group subscribes to this topic").
    pub fn subscribed_topic_names(&self) -> impl Iterator<Item = &str> {
        self.subscribed.values().map(|(name, _)| name.as_str())
    }

    pub fn state(&self) -> ConsumerGroupState {
        if self.members.is_empty() {
            ConsumerGroupState::Empty
        } else if self.group_epoch > self.assignment_epoch {
            ConsumerGroupState::Assigning
        } else if self
            .members
            .values()
            .any(|m| m.member_epoch != self.assignment_epoch || m.state != MemberState::Stable)
        {
            ConsumerGroupState::Reconciling
        } else {
            ConsumerGroupState::Stable
        }
    }

    /// The assignor the group uses: the one its members name, else `uniform`.
    pub fn assignor_name(&self) -> &'static str {
        let named = self
            .members
            .values()
            .filter_map(|m| m.server_assignor.as_deref())
            .next();
        match named {
            Some("range") => "range",
            _ => assignor::ASSIGNORS[0],
        }
    }

    /// The racks of the partitions' replicas as the cluster places them now; used the
    /// next time the target assignment is computed.
    pub fn set_partition_racks(&mut self, racks: PartitionRacks) {
        self.partition_racks = racks;
    }

    /// One ConsumerGroupHeartbeat.
    pub fn heartbeat(
        &mut self,
        request: Heartbeat,
        topics: &TopicsImage,
        now_ms: u64,
    ) -> Result<HeartbeatAnswer, GroupError> {
        if let Some(name) = &request.server_assignor {
            if !assignor::ASSIGNORS.contains(&name.as_str()) {
                return Err(GroupError::UnsupportedAssignor);
            }
        }
        if let Some(pattern) = &request.subscribed_topic_regex {
            let valid = self.compiled(pattern).is_some();
            self.forget_unused_regexes();
            if !valid {
                return Err(GroupError::InvalidRegularExpression);
            }
        }
        match request.member_epoch {
            LEAVE_EPOCH => return self.leave(&request.member_id, false),
            STATIC_LEAVE_EPOCH => return self.leave(&request.member_id, true),
            _ => {}
        }
        let full = request.member_epoch == JOIN_EPOCH
            || (request.rebalance_timeout_ms != -1
                && request.subscribed_topic_names.is_some()
                && request.owned.is_some());
        let member_id = self.admit(&request, now_ms)?;
        let Some(before) = self.members.get(&member_id).cloned() else {
            return Err(GroupError::UnknownMemberId);
        };
        let mut member = before.clone();
        update_member(&mut member, &request);
        member.session_deadline_ms = now_ms + self.config.session_timeout_ms.max(0) as u64;
        let subscription_changed = member.subscribed_topic_names != before.subscribed_topic_names
            || member.subscribed_topic_regex != before.subscribed_topic_regex
            || member.server_assignor != before.server_assignor;
        self.members.insert(member_id.clone(), member);
        self.settle(
            &member_id,
            subscription_changed,
            request.owned.as_ref(),
            topics,
            now_ms,
        );
        let member = self
            .members
            .get(&member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        let changed = member.assigned != before.assigned;
        Ok(HeartbeatAnswer {
            member_id: member.member_id.clone(),
            member_epoch: member.member_epoch,
            heartbeat_interval_ms: self.config.heartbeat_interval_ms,
            assignment: (full || changed).then(|| member.assigned.clone()),
        })
    }

    /// After a member changed: bumps the group epoch if what the group subscribes to
    /// changed, computes the target for a new epoch, and moves the member towards it.
    fn settle(
        &mut self,
        member_id: &str,
        subscription_changed: bool,
        owned: Option<&Assignment>,
        topics: &TopicsImage,
        now_ms: u64,
    ) {
        let subscribed = self.resolve_subscriptions(topics);
        // Rebuilt from records, the group adopts the topics as they are now; but if
        // they changed while it was down (a topic grew), its target no longer
        // covers them and must be computed again.
        let adopted = std::mem::take(&mut self.restored);
        let stale = adopted && !self.target_covers(&subscribed);
        if subscription_changed || (subscribed != self.subscribed && !adopted) || stale {
            self.group_epoch += 1;
        }
        self.subscribed = subscribed;
        if self.group_epoch > self.assignment_epoch {
            self.compute_target(topics);
        }
        self.reconcile(member_id, owned, now_ms);
        self.forget_unused_regexes();
    }

    /// Whether the target assignment gives out exactly the partitions of `subscribed`
    /// (it always does once computed: every subscribed topic has a subscriber).
    fn target_covers(&self, subscribed: &BTreeMap<Uuid, (String, i32)>) -> bool {
        let given: BTreeSet<(Uuid, i32)> = self
            .target
            .values()
            .flat_map(|a| a.iter().flat_map(|(t, ps)| ps.iter().map(|p| (*t, *p))))
            .collect();
        let wanted: BTreeSet<(Uuid, i32)> = subscribed
            .iter()
            .flat_map(|(id, (_, n))| (0..*n).map(|p| (*id, p)))
            .collect();
        given == wanted
    }

    /// Finds or creates the heartbeat's member, checking its epoch; returns its id.
    fn admit(&mut self, request: &Heartbeat, now_ms: u64) -> Result<String, GroupError> {
        let id = request.member_id.clone();
        if request.member_epoch != JOIN_EPOCH {
            let member = self.members.get(&id).ok_or(GroupError::UnknownMemberId)?;
            check_epoch(member, request.member_epoch, request.owned.as_ref())?;
            return Ok(id);
        }
        if let Some(instance) = &request.instance_id {
            if let Some(current) = self.static_members.get(instance).cloned() {
                if current != id {
                    return self.replace_static(&current, &id, now_ms);
                }
            }
        }
        if !self.members.contains_key(&id) {
            if self.members.len() >= self.config.max_size {
                return Err(GroupError::GroupMaxSizeReached);
            }
            self.members.insert(id.clone(), new_member(&id, now_ms));
        }
        if let Some(instance) = &request.instance_id {
            self.static_members.insert(instance.clone(), id.clone());
        }
        Ok(id)
    }

    /// A static member returning under a new member id takes over its predecessor's
    /// assignment and epoch, without a rebalance, if the predecessor left (epoch -2).
    fn replace_static(&mut self, old: &str, new: &str, now_ms: u64) -> Result<String, GroupError> {
        let Some(mut member) = self.members.remove(old) else {
            return Err(GroupError::UnknownMemberId);
        };
        if member.member_epoch != STATIC_LEAVE_EPOCH {
            self.members.insert(old.to_string(), member);
            return Err(GroupError::UnreleasedInstanceId);
        }
        member.member_id = new.to_string();
        member.member_epoch = member.previous_member_epoch;
        member.session_deadline_ms = now_ms + self.config.session_timeout_ms.max(0) as u64;
        self.rename(old, member);
        Ok(new.to_string())
    }

    /// Puts `member` (renamed) where the member `old` was: its partitions, target and
    /// instance id follow it.
    fn rename(&mut self, old: &str, member: ConsumerMember) {
        let new = member.member_id.clone();
        for partitions in [&member.assigned, &member.pending_revocation] {
            for (topic, ps) in partitions {
                for &p in ps {
                    self.owners.insert((*topic, p), new.to_string());
                }
            }
        }
        if let Some(target) = self.target.remove(old) {
            self.target.insert(new.to_string(), target);
        }
        if let Some(instance) = &member.instance_id {
            self.static_members
                .insert(instance.clone(), new.to_string());
        }
        self.members.insert(new.to_string(), member);
    }

    fn leave(
        &mut self,
        member_id: &str,
        static_leave: bool,
    ) -> Result<HeartbeatAnswer, GroupError> {
        let member = self
            .members
            .get_mut(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if static_leave && member.instance_id.is_some() {
            // Kept, assignment and all, until its session times out or it returns.
            if member.member_epoch != STATIC_LEAVE_EPOCH {
                member.previous_member_epoch = member.member_epoch;
                member.member_epoch = STATIC_LEAVE_EPOCH;
            }
        } else {
            self.remove(member_id);
        }
        Ok(HeartbeatAnswer {
            member_id: member_id.to_string(),
            member_epoch: if static_leave {
                STATIC_LEAVE_EPOCH
            } else {
                LEAVE_EPOCH
            },
            heartbeat_interval_ms: 0,
            assignment: None,
        })
    }

    /// Removes a member (left, fenced or timed out): its partitions are free and the
    /// group must be assigned again.
    pub fn remove(&mut self, member_id: &str) {
        let Some(member) = self.members.remove(member_id) else {
            return;
        };
        self.release(&member);
        self.target.remove(member_id);
        if let Some(instance) = &member.instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        self.group_epoch += 1;
    }

    fn release(&mut self, member: &ConsumerMember) {
        for partitions in [&member.assigned, &member.pending_revocation] {
            for (topic, ps) in partitions {
                for &p in ps {
                    if self.owners.get(&(*topic, p)) == Some(&member.member_id) {
                        self.owners.remove(&(*topic, p));
                    }
                }
            }
        }
    }

    /// Members whose session or revocation deadline passed; they are removed.
    pub fn expire(&mut self, now_ms: u64) -> Vec<String> {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                m.session_deadline_ms <= now_ms
                    || m.revocation_deadline_ms.is_some_and(|d| d <= now_ms)
                    || m.classic_deadline_ms.is_some_and(|d| d <= now_ms)
            })
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in &expired {
            self.remove(member_id);
        }
        expired
    }

    /// Validates a commit's member and epoch (Kafka's `ConsumerGroup.validateOffsetCommit`):
    /// an epoch ahead of the member's is fenced, one behind is stale (OffsetCommit before
    /// v9 answers both ILLEGAL_GENERATION: `api::errors::offset_commit_error`).
    pub fn validate_commit(&self, member_id: &str, epoch: i32) -> Result<(), GroupError> {
        if epoch < 0 && member_id.is_empty() {
            // A group-less ("simple") commit: only while nobody is in the group.
            return match self.members.is_empty() {
                true => Ok(()),
                false => Err(GroupError::UnknownMemberId),
            };
        }
        if self.is_classic_member(member_id) {
            // Kafka's `validateMemberEpoch` for a classic member: its generation.
            let member = self.members.get(member_id);
            return match member.is_some_and(|m| m.member_epoch == epoch) {
                true => Ok(()),
                false => Err(GroupError::IllegalGeneration),
            };
        }
        self.validate_fetch(member_id, epoch)
    }

    /// Validates an OffsetFetch naming a member (v9+): it must exist with that epoch.
    pub fn validate_fetch(&self, member_id: &str, epoch: i32) -> Result<(), GroupError> {
        if epoch < 0 && member_id.is_empty() {
            return Ok(());
        }
        let member = self
            .members
            .get(member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        match epoch.cmp(&member.member_epoch) {
            std::cmp::Ordering::Equal => Ok(()),
            std::cmp::Ordering::Greater => Err(GroupError::FencedMemberEpoch),
            std::cmp::Ordering::Less => Err(GroupError::StaleMemberEpoch),
        }
    }

    /// Keeps only the compiled patterns some member subscribes with: a client sending a
    /// new pattern with every heartbeat must not grow the cache.
    fn forget_unused_regexes(&mut self) {
        let members = &self.members;
        self.regexes.retain(|pattern, _| {
            members
                .values()
                .any(|m| m.subscribed_topic_regex.as_deref() == Some(pattern.as_str()))
        });
    }

    fn compiled(&mut self, pattern: &str) -> Option<&Regex> {
        self.regexes
            .entry(pattern.to_string())
            .or_insert_with(|| Regex::new(&format!("^(?:{pattern})$")).ok())
            .as_ref()
    }

    fn member_topics(&mut self, member_id: &str, topics: &TopicsImage) -> BTreeSet<Uuid> {
        let Some(member) = self.members.get(member_id) else {
            return BTreeSet::new();
        };
        let names = member.subscribed_topic_names.clone();
        let pattern = member.subscribed_topic_regex.clone();
        let mut ids: BTreeSet<Uuid> = names
            .iter()
            .filter_map(|name| topics.get(name).map(|(id, _)| *id))
            .collect();
        if let Some(regex) = pattern.and_then(|p| self.compiled(&p).cloned()) {
            ids.extend(
                topics
                    .iter()
                    .filter(|(name, _)| !crate::topics::is_internal(name) && regex.is_match(name))
                    .map(|(_, (id, _))| *id),
            );
        }
        ids
    }

    fn resolve_subscriptions(&mut self, topics: &TopicsImage) -> BTreeMap<Uuid, (String, i32)> {
        let ids: Vec<String> = self.members.keys().cloned().collect();
        let mut wanted = BTreeSet::new();
        for id in ids {
            wanted.extend(self.member_topics(&id, topics));
        }
        topics
            .iter()
            .filter(|(_, (id, _))| wanted.contains(id))
            .map(|(name, (id, count))| (*id, (name.clone(), *count)))
            .collect()
    }

    fn compute_target(&mut self, topics: &TopicsImage) {
        let ids: Vec<String> = self.members.keys().cloned().collect();
        let subscriptions: Vec<(String, BTreeSet<Uuid>)> = ids
            .into_iter()
            .map(|id| {
                let topics = self.member_topics(&id, topics);
                (id, topics)
            })
            .collect();
        let members: Vec<assignor::AssignMember<'_>> = subscriptions
            .iter()
            .map(|(id, topics)| assignor::AssignMember {
                member_id: id,
                rack: self.members.get(id).and_then(|m| m.rack_id.as_deref()),
                topics: topics.clone(),
            })
            .collect();
        let counts: BTreeMap<Uuid, i32> = self
            .subscribed
            .iter()
            .map(|(id, (_, n))| (*id, *n))
            .collect();
        let target = assignor::assign(
            self.assignor_name(),
            &members,
            &counts,
            &self.target,
            &self.partition_racks,
        );
        self.target = target;
        self.assignment_epoch = self.group_epoch;
    }

    /// Moves the member towards its target (Kafka's `CurrentAssignmentBuilder`).
    fn reconcile(&mut self, member_id: &str, owned: Option<&Assignment>, now_ms: u64) {
        let Some(member) = self.members.get(member_id).cloned() else {
            return;
        };
        let next = match member.state {
            MemberState::Stable if member.member_epoch == self.assignment_epoch => return,
            MemberState::Stable | MemberState::UnreleasedPartitions => {
                self.next_assignment(&member, member.member_epoch, owned)
            }
            MemberState::UnrevokedPartitions => {
                if owns_any(owned, &member.pending_revocation) {
                    return;
                }
                self.next_assignment(&member, member.member_epoch + 1, owned)
            }
        };
        self.release(&member);
        for partitions in [&next.assigned, &next.pending_revocation] {
            for (topic, ps) in partitions {
                for &p in ps {
                    self.owners.insert((*topic, p), member_id.to_string());
                }
            }
        }
        let mut next = next;
        next.revocation_deadline_ms = match next.state {
            MemberState::UnrevokedPartitions => Some(
                member
                    .revocation_deadline_ms
                    .unwrap_or(now_ms + next.rebalance_timeout_ms.max(0) as u64),
            ),
            _ => None,
        };
        self.members.insert(member_id.to_string(), next);
    }

    fn next_assignment(
        &self,
        member: &ConsumerMember,
        epoch: i32,
        owned: Option<&Assignment>,
    ) -> ConsumerMember {
        let empty = Assignment::new();
        let target = self.target.get(&member.member_id).unwrap_or(&empty);
        let mut assigned = Assignment::new();
        let mut revoking = Assignment::new();
        let mut adding = Assignment::new();
        let mut unreleased = false;
        let topics: BTreeSet<Uuid> = target
            .keys()
            .chain(member.assigned.keys())
            .copied()
            .collect();
        for topic in topics {
            let wanted = target.get(&topic).cloned().unwrap_or_default();
            let current = member.assigned.get(&topic).cloned().unwrap_or_default();
            let keep: BTreeSet<i32> = current.intersection(&wanted).copied().collect();
            let drop: BTreeSet<i32> = current.difference(&keep).copied().collect();
            let mut add: BTreeSet<i32> = wanted.difference(&keep).copied().collect();
            let before = add.len();
            add.retain(|p| !self.owners.contains_key(&(topic, *p)));
            unreleased |= add.len() != before;
            if !keep.is_empty() {
                assigned.insert(topic, keep);
            }
            if !drop.is_empty() {
                revoking.insert(topic, drop);
            }
            if !add.is_empty() {
                adding.insert(topic, add);
            }
        }
        let mut next = member.clone();
        let advance = |next: &mut ConsumerMember, to: i32| {
            if next.member_epoch != to {
                next.previous_member_epoch = next.member_epoch;
                next.member_epoch = to;
            }
        };
        if !revoking.is_empty() && owns_any(owned, &revoking) {
            advance(&mut next, epoch);
            next.state = MemberState::UnrevokedPartitions;
            next.assigned = assigned;
            next.pending_revocation = revoking;
            return next;
        }
        for (topic, partitions) in adding {
            assigned.entry(topic).or_default().extend(partitions);
        }
        advance(&mut next, self.assignment_epoch);
        next.state = match unreleased {
            true => MemberState::UnreleasedPartitions,
            false => MemberState::Stable,
        };
        next.assigned = assigned;
        next.pending_revocation = Assignment::new();
        next
    }

    #[cfg(test)]
    fn cached_regexes(&self) -> usize {
        self.regexes.len()
    }

    /// Every partition's owner, for invariant checks.
    #[cfg(test)]
    fn owners(&self) -> &HashMap<(Uuid, i32), String> {
        &self.owners
    }
}

fn new_member(member_id: &str, now_ms: u64) -> ConsumerMember {
    ConsumerMember {
        member_id: member_id.to_string(),
        instance_id: None,
        rack_id: None,
        client_id: String::new(),
        client_host: String::new(),
        rebalance_timeout_ms: 0,
        subscribed_topic_names: Vec::new(),
        subscribed_topic_regex: None,
        server_assignor: None,
        state: MemberState::Stable,
        member_epoch: JOIN_EPOCH,
        previous_member_epoch: JOIN_EPOCH,
        assigned: Assignment::new(),
        pending_revocation: Assignment::new(),
        session_deadline_ms: now_ms,
        revocation_deadline_ms: None,
        classic: None,
        classic_deadline_ms: None,
    }
}

fn update_member(member: &mut ConsumerMember, request: &Heartbeat) {
    if let Some(instance) = &request.instance_id {
        member.instance_id = Some(instance.clone());
    }
    if let Some(rack) = &request.rack_id {
        member.rack_id = Some(rack.clone());
    }
    if request.rebalance_timeout_ms != -1 {
        member.rebalance_timeout_ms = request.rebalance_timeout_ms;
    }
    if let Some(names) = &request.subscribed_topic_names {
        let mut names = names.clone();
        names.sort();
        names.dedup();
        member.subscribed_topic_names = names;
    }
    if let Some(pattern) = &request.subscribed_topic_regex {
        member.subscribed_topic_regex = (!pattern.is_empty()).then(|| pattern.clone());
    }
    if let Some(assignor) = &request.server_assignor {
        member.server_assignor = Some(assignor.clone());
    }
    member.client_id.clone_from(&request.client_id);
    member.client_host.clone_from(&request.client_host);
    // It speaks the consumer protocol now.
    member.classic = None;
    member.classic_deadline_ms = None;
}

/// The checks a heartbeat must pass before it may change anything (its assignor and
/// regular expression): an online upgrade runs them before converting the classic group,
/// so a refused heartbeat leaves it classic.
pub fn check_heartbeat(request: &Heartbeat) -> Result<(), GroupError> {
    if let Some(name) = &request.server_assignor {
        if !assignor::ASSIGNORS.contains(&name.as_str()) {
            return Err(GroupError::UnsupportedAssignor);
        }
    }
    if let Some(pattern) = &request.subscribed_topic_regex {
        if Regex::new(&format!("^(?:{pattern})$")).is_err() {
            return Err(GroupError::InvalidRegularExpression);
        }
    }
    Ok(())
}

/// Kafka's `throwIfConsumerGroupMemberEpochIsInvalid`: an epoch ahead of the member's
/// is fenced; one behind is fenced unless it is the previous epoch and the member owns
/// no more than it was given (the answer that bumped it may have been lost).
fn check_epoch(
    member: &ConsumerMember,
    epoch: i32,
    owned: Option<&Assignment>,
) -> Result<(), GroupError> {
    if member.member_epoch == STATIC_LEAVE_EPOCH {
        return Err(GroupError::FencedMemberEpoch);
    }
    match epoch.cmp(&member.member_epoch) {
        std::cmp::Ordering::Equal => Ok(()),
        std::cmp::Ordering::Greater => Err(GroupError::FencedMemberEpoch),
        std::cmp::Ordering::Less => {
            let subset = owned.is_some_and(|owned| {
                owned.iter().all(|(topic, ps)| {
                    let given = member.assigned.get(topic);
                    ps.iter().all(|p| given.is_some_and(|g| g.contains(p)))
                })
            });
            if epoch == member.previous_member_epoch && subset {
                Ok(())
            } else {
                Err(GroupError::FencedMemberEpoch)
            }
        }
    }
}

/// Whether the member still reports owning any of `partitions`; a heartbeat that does
/// not say what it owns counts as still owning them.
fn owns_any(owned: Option<&Assignment>, partitions: &Assignment) -> bool {
    let Some(owned) = owned else {
        return true;
    };
    owned.iter().any(|(topic, ps)| {
        partitions
            .get(topic)
            .is_some_and(|pending| ps.iter().any(|p| pending.contains(p)))
    })
}
