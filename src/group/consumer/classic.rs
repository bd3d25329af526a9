//! Classic members inside a consumer group: online migration (KIP-848's upgrade path).
//!
//! A live classic group whose members use the `consumer` embedded protocol becomes a
//! consumer group when the first member joins it with ConsumerGroupHeartbeat
//! ([`ConsumerGroup::from_classic`]): every classic member becomes a member at the
//! group's generation, owning what its last SyncGroup gave it. Members still speaking
//! the classic protocol keep being served, as Kafka's `GroupMetadataManager` serves them:
//!
//! - JoinGroup ([`ConsumerGroup::classic_join`]) updates the member from its
//!   subscription (topics, rack, the partitions it still owns) and reconciles it like a
//!   heartbeat; the answer's generation is the member epoch, and nobody is leader (the
//!   coordinator assigns).
//! - SyncGroup ([`ConsumerGroup::classic_sync`]) hands over the member's current
//!   assignment in the embedded format.
//! - Heartbeat ([`ConsumerGroup::classic_heartbeat`]) answers REBALANCE_IN_PROGRESS
//!   when the member must rejoin: the group moved past its epoch, it must revoke, or
//!   what it waits for has been released. That rejoin is how a classic member revokes,
//!   so no partition is owned twice here either.
//! - LeaveGroup ([`ConsumerGroup::classic_leave`]) removes it.
//!
//! A member told to rejoin must do so within its rebalance timeout, and one that
//! joined must sync within it, or it is removed ([`ConsumerGroup::expire`]).
//!
//! When the last member speaking the consumer protocol is gone and classic members
//! remain, the group becomes classic again ([`ConsumerGroup::classic_record`], Kafka's
//! `ClassicGroup.fromConsumerGroup`): each member keeps its assignment, encoded for the
//! classic protocol, and a rebalance starts.

use bytes::Bytes;
use uuid::Uuid;

use super::embedded::{self, NamedPartitions};
use super::records::ClassicMemberMetadata;
use super::{new_member, Assignment, ConsumerGroup, ConsumerGroupConfig, MemberState, TopicsImage};
use crate::group::offsets::{GroupRecord, MemberRecord};
use crate::group::state::{Group, GroupError, JoinRequest};

/// The protocol type every member of a consumer group speaks.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// Which way a live group may change kind (`group.consumer.migration.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MigrationPolicy {
    /// Both ways (Kafka's default).
    #[default]
    Bidirectional,
    /// A live classic group may become a consumer group.
    Upgrade,
    /// A live consumer group may become classic again.
    Downgrade,
    /// Neither: a live group keeps its kind.
    Disabled,
}

impl MigrationPolicy {
    pub fn upgrades(self) -> bool {
        matches!(self, Self::Bidirectional | Self::Upgrade)
    }

    pub fn downgrades(self) -> bool {
        matches!(self, Self::Bidirectional | Self::Downgrade)
    }
}

impl std::str::FromStr for MigrationPolicy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "bidirectional" => Ok(Self::Bidirectional),
            "upgrade" => Ok(Self::Upgrade),
            "downgrade" => Ok(Self::Downgrade),
            "disabled" => Ok(Self::Disabled),
            other => Err(format!(
                "must be bidirectional, upgrade, downgrade or disabled, not '{other}'"
            )),
        }
    }
}

/// What a classic member's JoinGroup is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClassicJoinAnswer {
    /// Rejoin with this id (MEMBER_ID_REQUIRED).
    MemberIdRequired(String),
    Joined {
        member_id: String,
        /// The member's epoch.
        generation_id: i32,
        protocol_name: String,
    },
}

/// What a classic member's SyncGroup is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassicSyncAnswer {
    pub protocol_name: String,
    /// A `ConsumerProtocolAssignment`, in the version of the member's subscription.
    pub assignment: Bytes,
}

impl ConsumerGroup {
    /// The consumer group a live classic group becomes (Kafka's
    /// `ConsumerGroup.fromClassicGroup`). Every member keeps, at the group's
    /// generation, what its last SyncGroup gave it; a partition named by two members
    /// (which one generation's assignment never does) stays with the first.
    pub fn from_classic(
        classic: &Group,
        topics: &TopicsImage,
        config: ConsumerGroupConfig,
        now_ms: u64,
    ) -> Result<Self, embedded::Malformed> {
        let mut group = Self::new(config);
        let generation = classic.generation_id();
        group.group_epoch = generation;
        group.assignment_epoch = generation;
        let protocol = classic.protocol_name().unwrap_or_default().to_string();
        for old in classic.members() {
            let subscription = embedded::decode_subscription(&old.metadata_for(&protocol))?;
            let given = match old.assignment.is_empty() {
                true => NamedPartitions::new(),
                false => embedded::decode_assignment(&old.assignment)?,
            };
            let mut member = new_member(&old.member_id, now_ms);
            member.instance_id.clone_from(&old.group_instance_id);
            member.rack_id = subscription.rack_id.clone();
            member.client_id.clone_from(&old.client_id);
            member.client_host.clone_from(&old.client_host);
            member.rebalance_timeout_ms = old.rebalance_timeout_ms;
            member.subscribed_topic_names = sorted(subscription.topics);
            member.member_epoch = generation;
            member.previous_member_epoch = generation;
            member.classic = Some(ClassicMemberMetadata {
                session_timeout_ms: old.session_timeout_ms,
                protocols: old.protocols.clone(),
            });
            member.session_deadline_ms = now_ms + old.session_timeout_ms.max(0) as u64;
            let mut assigned = Assignment::new();
            for (topic, partitions) in by_id(&given, topics) {
                for p in partitions {
                    if group.owners.contains_key(&(topic, p)) {
                        continue;
                    }
                    group.owners.insert((topic, p), old.member_id.clone());
                    assigned.entry(topic).or_default().insert(p);
                }
            }
            group.target.insert(old.member_id.clone(), assigned.clone());
            member.assigned = assigned;
            if let Some(instance) = &member.instance_id {
                group
                    .static_members
                    .insert(instance.clone(), old.member_id.clone());
            }
            group.members.insert(old.member_id.clone(), member);
        }
        group.subscribed = group.resolve_subscriptions(topics);
        Ok(group)
    }

    /// Whether a classic member with these protocols can join (Kafka's
    /// `supportsClassicProtocols`): the consumer protocol type, and a protocol every
    /// classic member already in the group supports.
    pub fn supports_classic_protocols(&self, protocol_type: &str, names: &[&str]) -> bool {
        if protocol_type != CONSUMER_PROTOCOL_TYPE || names.is_empty() {
            return false;
        }
        let classic: Vec<&ClassicMemberMetadata> = self
            .members
            .values()
            .filter_map(|m| m.classic.as_ref())
            .collect();
        names.iter().any(|name| {
            classic
                .iter()
                .all(|c| c.protocols.iter().any(|(n, _)| n == name))
        })
    }

    /// A classic member's JoinGroup.
    pub fn classic_join(
        &mut self,
        request: JoinRequest,
        topics: &TopicsImage,
        now_ms: u64,
    ) -> Result<ClassicJoinAnswer, GroupError> {
        let unknown = request.member_id.is_empty();
        let member_id = match unknown {
            true => Uuid::new_v4().to_string(),
            false => request.member_id.clone(),
        };
        if !self.members.contains_key(&member_id) && self.members.len() >= self.config.max_size {
            return Err(GroupError::GroupMaxSizeReached);
        }
        let names: Vec<&str> = request.protocols.iter().map(|(n, _)| n.as_str()).collect();
        if !self.supports_classic_protocols(&request.protocol_type, &names) {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        if unknown && request.group_instance_id.is_none() && request.require_known_member_id {
            return Ok(ClassicJoinAnswer::MemberIdRequired(member_id));
        }
        // Every protocol carries the same subscription: Kafka reads the first.
        let subscription = request
            .protocols
            .first()
            .map(|(_, metadata)| embedded::decode_subscription(metadata))
            .ok_or(GroupError::InconsistentGroupProtocol)?
            .map_err(|_| GroupError::InconsistentGroupProtocol)?;
        let member_id = self.admit_classic(
            &member_id,
            request.group_instance_id.as_deref(),
            unknown,
            now_ms,
        )?;
        let Some(before) = self.members.get(&member_id).cloned() else {
            return Err(GroupError::UnknownMemberId);
        };
        let mut member = before.clone();
        if let Some(instance) = &request.group_instance_id {
            member.instance_id = Some(instance.clone());
        }
        if subscription.rack_id.is_some() {
            member.rack_id.clone_from(&subscription.rack_id);
        }
        if request.rebalance_timeout_ms != -1 {
            member.rebalance_timeout_ms = request.rebalance_timeout_ms;
        }
        member.subscribed_topic_names = sorted(subscription.topics);
        member.client_id.clone_from(&request.client_id);
        member.client_host.clone_from(&request.client_host);
        member.classic = Some(ClassicMemberMetadata {
            session_timeout_ms: request.session_timeout_ms,
            protocols: request.protocols.clone(),
        });
        member.session_deadline_ms = now_ms + request.session_timeout_ms.max(0) as u64;
        // It must now sync within its rebalance timeout.
        member.classic_deadline_ms = Some(now_ms + member.rebalance_timeout_ms.max(0) as u64);
        let subscription_changed = member.subscribed_topic_names != before.subscribed_topic_names;
        self.members.insert(member_id.clone(), member);
        let owned = by_id(&subscription.owned, topics);
        self.settle(
            &member_id,
            subscription_changed,
            Some(&owned),
            topics,
            now_ms,
        );
        let member = self
            .members
            .get(&member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        Ok(ClassicJoinAnswer::Joined {
            member_id: member_id.clone(),
            generation_id: member.member_epoch,
            protocol_name: first_protocol(member),
        })
    }

    /// Finds or creates a classic joiner (Kafka's `getOrMaybeSubscribe*ConsumerGroupMember`
    /// with the classic protocol): a static member joining without an id replaces the
    /// one holding its instance id, keeping its assignment at epoch 0; with an id, it
    /// must be that member.
    fn admit_classic(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        unknown: bool,
        now_ms: u64,
    ) -> Result<String, GroupError> {
        let Some(instance) = instance_id else {
            if !self.members.contains_key(member_id) {
                self.members
                    .insert(member_id.to_string(), new_member(member_id, now_ms));
            }
            return Ok(member_id.to_string());
        };
        match self.static_members.get(instance).cloned() {
            None if unknown => {
                self.members
                    .insert(member_id.to_string(), new_member(member_id, now_ms));
                self.static_members
                    .insert(instance.to_string(), member_id.to_string());
                Ok(member_id.to_string())
            }
            None => Err(GroupError::UnknownMemberId),
            Some(current) if current == member_id => Ok(current),
            Some(_) if !unknown => Err(GroupError::FencedInstanceId),
            Some(current) => {
                let mut member = self
                    .members
                    .remove(&current)
                    .ok_or(GroupError::UnknownMemberId)?;
                member.member_id = member_id.to_string();
                member.member_epoch = 0;
                member.previous_member_epoch = 0;
                self.rename(&current, member);
                Ok(member_id.to_string())
            }
        }
    }

    /// A classic member's SyncGroup: its current assignment.
    pub fn classic_sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        protocol: (Option<&str>, Option<&str>),
        now_ms: u64,
    ) -> Result<ClassicSyncAnswer, GroupError> {
        let member_id = self.classic_member(Some(member_id), instance_id)?;
        let group_epoch = self.group_epoch;
        let member = self
            .members
            .get_mut(&member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if member.member_epoch != generation_id {
            return Err(GroupError::IllegalGeneration);
        }
        let protocol_name = first_protocol(member);
        if protocol.0.is_some_and(|t| t != CONSUMER_PROTOCOL_TYPE)
            || protocol.1.is_some_and(|n| n != protocol_name)
        {
            return Err(GroupError::InconsistentGroupProtocol);
        }
        let session = classic_session_ms(member);
        if group_epoch > member.member_epoch && member.state != MemberState::UnrevokedPartitions {
            // A new rebalance began: it must rejoin to catch up, in time.
            let deadline = now_ms + member.rebalance_timeout_ms.max(0) as u64;
            member.classic_deadline_ms.get_or_insert(deadline);
            return Err(GroupError::RebalanceInProgress);
        }
        member.classic_deadline_ms = None;
        member.session_deadline_ms = now_ms + session;
        let version = member
            .classic
            .as_ref()
            .and_then(|c| c.protocols.first())
            .and_then(|(_, metadata)| embedded::version_of(metadata).ok())
            .unwrap_or(0);
        let assigned = member.assigned.clone();
        let named = self.by_name(&assigned);
        Ok(ClassicSyncAnswer {
            protocol_name,
            assignment: Bytes::from(embedded::encode_assignment(&named, version)),
        })
    }

    /// A classic member's Heartbeat: `RebalanceInProgress` tells it to rejoin.
    pub fn classic_heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        now_ms: u64,
    ) -> Result<(), GroupError> {
        let member_id = self.classic_member(Some(member_id), instance_id)?;
        let waiting = self.waits_on_owned_partitions(&member_id);
        let group_epoch = self.group_epoch;
        let member = self
            .members
            .get_mut(&member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        if member.member_epoch != generation_id {
            return Err(GroupError::IllegalGeneration);
        }
        member.session_deadline_ms = now_ms + classic_session_ms(member);
        let rejoin = member.member_epoch < group_epoch
            || member.state == MemberState::UnrevokedPartitions
            || (member.state == MemberState::UnreleasedPartitions && !waiting);
        if rejoin {
            if member.classic_deadline_ms.is_none() {
                member.classic_deadline_ms =
                    Some(now_ms + member.rebalance_timeout_ms.max(0) as u64);
            }
            return Err(GroupError::RebalanceInProgress);
        }
        Ok(())
    }

    /// A classic member's LeaveGroup (by member id, or by instance id for an
    /// administrative removal); returns the id of the member removed.
    pub fn classic_leave(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<String, GroupError> {
        // By instance id alone (an empty member id) is an administrative removal.
        let named = (!member_id.is_empty() || instance_id.is_none()).then_some(member_id);
        let member_id = self.classic_member(named, instance_id)?;
        self.remove(&member_id);
        Ok(member_id)
    }

    /// Whether only classic members are left (and some are): the group can become
    /// classic again (Kafka's `validateOnlineDowngradeWithFencedMember`).
    pub fn only_classic_members(&self) -> bool {
        !self.members.is_empty() && self.members.values().all(|m| m.classic.is_some())
    }

    /// The classic group this one becomes (online downgrade), as the record a classic
    /// group is restored from: at the group epoch, with the first protocol every member
    /// supports, each member keeping its assignment. `None` if the members share no
    /// protocol.
    pub fn classic_record(&self, now_ms: i64) -> Option<GroupRecord> {
        let classic: Vec<(&super::ConsumerMember, &ClassicMemberMetadata)> = self
            .members
            .values()
            .filter_map(|m| Some((m, m.classic.as_ref()?)))
            .collect();
        let (_, first) = classic.first()?;
        let protocol = first.protocols.iter().map(|(n, _)| n).find(|name| {
            classic
                .iter()
                .all(|(_, c)| c.protocols.iter().any(|(n, _)| n == *name))
        })?;
        let members = classic
            .iter()
            .map(|(m, c)| {
                let subscription = c
                    .protocols
                    .iter()
                    .find(|(n, _)| n == protocol)
                    .map(|(_, metadata)| metadata.clone())
                    .unwrap_or_default();
                let version = embedded::version_of(&subscription).unwrap_or(0);
                let assigned = self.by_name(&m.assigned);
                MemberRecord {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    session_timeout_ms: c.session_timeout_ms,
                    subscription,
                    assignment: Bytes::from(embedded::encode_assignment(&assigned, version)),
                }
            })
            .collect::<Vec<_>>();
        Some(GroupRecord {
            protocol_type: Some(CONSUMER_PROTOCOL_TYPE.to_string()),
            generation_id: self.group_epoch,
            protocol_name: Some(protocol.clone()),
            leader: members.first().map(|m| m.member_id.clone()),
            state_timestamp: now_ms,
            members,
        })
    }

    /// Whether `member_id` is a member speaking the classic protocol.
    pub fn is_classic_member(&self, member_id: &str) -> bool {
        self.members
            .get(member_id)
            .is_some_and(|m| m.classic.is_some())
    }

    /// The member a classic request names (Kafka's `validateConsumerGroupMember` and
    /// `throwIfMemberDoesNotUseClassicProtocol`).
    fn classic_member(
        &self,
        member_id: Option<&str>,
        instance_id: Option<&str>,
    ) -> Result<String, GroupError> {
        let found = self.named_member(member_id, instance_id)?;
        match self.members.get(&found) {
            Some(m) if m.classic.is_some() => Ok(found),
            _ => Err(GroupError::UnknownMemberId),
        }
    }

    /// The id of the member a classic request names: `member_id`, or the member
    /// holding `instance_id`, which must then be `member_id` if one is given
    /// (FENCED_INSTANCE_ID otherwise).
    fn named_member(
        &self,
        member_id: Option<&str>,
        instance_id: Option<&str>,
    ) -> Result<String, GroupError> {
        let Some(instance) = instance_id else {
            return Ok(member_id.unwrap_or_default().to_string());
        };
        let current = self
            .static_members
            .get(instance)
            .ok_or(GroupError::UnknownMemberId)?;
        match member_id {
            Some(id) if id != current => Err(GroupError::FencedInstanceId),
            _ => Ok(current.clone()),
        }
    }

    /// Whether some partition of the member's target is still owned by another member.
    fn waits_on_owned_partitions(&self, member_id: &str) -> bool {
        let Some(target) = self.target.get(member_id) else {
            return false;
        };
        target.iter().any(|(topic, ps)| {
            ps.iter().any(|p| {
                self.owners
                    .get(&(*topic, *p))
                    .is_some_and(|owner| owner != member_id)
            })
        })
    }

    /// `assignment` by topic name, as last resolved (a topic no longer known is left out).
    fn by_name(&self, assignment: &Assignment) -> NamedPartitions {
        assignment
            .iter()
            .filter_map(|(id, ps)| Some((self.topic_name(id)?.to_string(), ps.clone())))
            .collect()
    }
}

/// Partitions by topic id, for the topics `topics` knows.
fn by_id(named: &NamedPartitions, topics: &TopicsImage) -> Assignment {
    named
        .iter()
        .filter_map(|(name, ps)| Some((topics.get(name)?.0, ps.clone())))
        .filter(|(_, ps)| !ps.is_empty())
        .collect()
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names.dedup();
    names
}

fn first_protocol(member: &super::ConsumerMember) -> String {
    member
        .classic
        .as_ref()
        .and_then(|c| c.protocols.first())
        .map(|(name, _)| name.clone())
        .unwrap_or_default()
}

fn classic_session_ms(member: &super::ConsumerMember) -> u64 {
    member
        .classic
        .as_ref()
        .map_or(0, |c| c.session_timeout_ms.max(0) as u64)
}
