//! A share group's membership (KIP-932's ShareGroupHeartbeat), as pure state.
//!
//! Unlike a consumer group there is nothing to reconcile: a partition may be shared by
//! several members, because every record is locked to one consumer when acquired (see
//! [`super::partition`]). So a member goes straight to its target: each heartbeat after
//! a change answers the new group epoch and the member's whole assignment, as Kafka's
//! `ShareGroupAssignmentBuilder` does.
//!
//! The assignment (Kafka's `simple` assignor's rules): per topic, members subscribing
//! to it in member-id order; with no more members than partitions each partition goes
//! to one member, round robin; with more members than partitions each member gets one
//! partition and partitions are shared as evenly as possible. Deterministic, so any
//! coordinator computes the same.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::super::consumer::{Assignment, TopicsImage};
use super::super::state::GroupError;

/// A heartbeat's member epoch asking to join.
pub const JOIN_EPOCH: i32 = 0;
/// A heartbeat's member epoch asking to leave.
pub const LEAVE_EPOCH: i32 = -1;

/// Settings of share groups (broker-wide, `group.share.*`).
#[derive(Debug, Clone, Copy)]
pub struct ShareGroupConfig {
    pub session_timeout_ms: i32,
    pub heartbeat_interval_ms: i32,
    pub max_size: usize,
}

/// One ShareGroupHeartbeat, decoded. `None` topics mean "unchanged".
#[derive(Debug, Clone, Default)]
pub struct ShareHeartbeat {
    pub member_id: String,
    pub member_epoch: i32,
    pub rack_id: Option<String>,
    pub subscribed_topic_names: Option<Vec<String>>,
    pub client_id: String,
    pub client_host: String,
}

/// What the member is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareAnswer {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// Present on join and whenever the member's partitions changed.
    pub assignment: Option<Assignment>,
}

/// One member of a share group.
#[derive(Debug, Clone)]
pub struct ShareMember {
    pub member_id: String,
    pub rack_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub member_epoch: i32,
    previous_member_epoch: i32,
    pub assigned: Assignment,
    session_deadline_ms: u64,
}

/// A share group: members, the group epoch and the assignment computed for it.
#[derive(Debug, Clone)]
pub struct ShareGroup {
    group_epoch: i32,
    members: BTreeMap<String, ShareMember>,
    /// The subscribed topics the assignment was computed from: id -> (name, partitions).
    subscribed: BTreeMap<Uuid, (String, i32)>,
    config: ShareGroupConfig,
}

impl ShareGroup {
    pub fn new(config: ShareGroupConfig) -> Self {
        Self {
            group_epoch: 0,
            members: BTreeMap::new(),
            subscribed: BTreeMap::new(),
            config,
        }
    }

    /// The group's settings from now on (its group configs may have changed): a
    /// member's next heartbeat is told the new interval and given the new session.
    pub fn set_config(&mut self, config: ShareGroupConfig) {
        self.config = config;
    }

    pub fn group_epoch(&self) -> i32 {
        self.group_epoch
    }

    pub fn members(&self) -> impl Iterator<Item = &ShareMember> {
        self.members.values()
    }

    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// `Empty` or `Stable`: a share group has no reconciling phase.
    pub fn state_name(&self) -> &'static str {
        match self.members.is_empty() {
            true => "Empty",
            false => "Stable",
        }
    }

    /// The name of subscribed topic `id`, as last resolved.
    pub fn topic_name(&self, id: &Uuid) -> Option<&str> {
        self.subscribed.get(id).map(|(name, _)| name.as_str())
    }

    /// One ShareGroupHeartbeat (the request already passed Kafka's syntactic checks).
    pub fn heartbeat(
        &mut self,
        request: ShareHeartbeat,
        topics: &TopicsImage,
        now_ms: u64,
    ) -> Result<ShareAnswer, GroupError> {
        match request.member_epoch {
            LEAVE_EPOCH => {
                if self.members.remove(&request.member_id).is_none() {
                    return Err(GroupError::UnknownMemberId);
                }
                self.bump(topics);
                Ok(ShareAnswer {
                    member_id: request.member_id,
                    member_epoch: LEAVE_EPOCH,
                    heartbeat_interval_ms: self.config.heartbeat_interval_ms,
                    assignment: None,
                })
            }
            JOIN_EPOCH => self.join(request, topics, now_ms),
            epoch => self.beat(request, epoch, topics, now_ms),
        }
    }

    fn join(
        &mut self,
        request: ShareHeartbeat,
        topics: &TopicsImage,
        now_ms: u64,
    ) -> Result<ShareAnswer, GroupError> {
        if !self.members.contains_key(&request.member_id)
            && self.members.len() >= self.config.max_size
        {
            return Err(GroupError::GroupMaxSizeReached);
        }
        let member = ShareMember {
            member_id: request.member_id.clone(),
            rack_id: request.rack_id,
            client_id: request.client_id,
            client_host: request.client_host,
            subscribed_topic_names: request.subscribed_topic_names.unwrap_or_default(),
            member_epoch: 0,
            previous_member_epoch: 0,
            assigned: Assignment::new(),
            session_deadline_ms: now_ms + self.session_ms(),
        };
        self.members.insert(request.member_id.clone(), member);
        self.bump(topics);
        Ok(self.answer(&request.member_id, true))
    }

    fn beat(
        &mut self,
        request: ShareHeartbeat,
        epoch: i32,
        topics: &TopicsImage,
        now_ms: u64,
    ) -> Result<ShareAnswer, GroupError> {
        let session_ms = self.session_ms();
        let member = self
            .members
            .get_mut(&request.member_id)
            .ok_or(GroupError::UnknownMemberId)?;
        // Kafka's `throwIfShareGroupMemberEpochIsInvalid`: ahead is fenced; behind only
        // when it is the epoch before (the answer that moved it on was lost).
        if epoch > member.member_epoch
            || (epoch < member.member_epoch && epoch != member.previous_member_epoch)
        {
            return Err(GroupError::FencedMemberEpoch);
        }
        member.session_deadline_ms = now_ms + session_ms;
        let lost_answer = epoch < member.member_epoch;
        let mut changed = false;
        if let Some(names) = request.subscribed_topic_names {
            if names != member.subscribed_topic_names {
                member.subscribed_topic_names = names;
                changed = true;
            }
        }
        if request.rack_id.is_some() {
            member.rack_id = request.rack_id;
        }
        if changed || self.subscribed != self.resolve(topics) {
            self.bump(topics);
        }
        Ok(self.answer(&request.member_id, lost_answer))
    }

    /// The answer for `member_id`, moving it to the group epoch; the assignment goes
    /// with it when it changed or `full` asks for it.
    fn answer(&mut self, member_id: &str, full: bool) -> ShareAnswer {
        let epoch = self.group_epoch;
        let interval = self.config.heartbeat_interval_ms;
        let (member_epoch, assignment) = match self.members.get_mut(member_id) {
            Some(member) => {
                let moved = member.member_epoch != epoch;
                if moved {
                    member.previous_member_epoch = member.member_epoch;
                    member.member_epoch = epoch;
                }
                let send = full || moved;
                (epoch, send.then(|| member.assigned.clone()))
            }
            None => (LEAVE_EPOCH, None),
        };
        ShareAnswer {
            member_id: member_id.to_string(),
            member_epoch,
            heartbeat_interval_ms: interval,
            assignment,
        }
    }

    /// Removes members whose session ran out; their ids, for the log.
    /// The assignment is recomputed from the topics as last resolved.
    pub fn expire(&mut self, now_ms: u64) -> Vec<String> {
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.session_deadline_ms <= now_ms)
            .map(|m| m.member_id.clone())
            .collect();
        for id in &expired {
            self.members.remove(id);
        }
        if !expired.is_empty() {
            self.group_epoch += 1;
            self.reassign();
        }
        expired
    }

    fn session_ms(&self) -> u64 {
        self.config.session_timeout_ms.max(0) as u64
    }

    /// The subscribed topics as the cluster has them now.
    fn resolve(&self, topics: &TopicsImage) -> BTreeMap<Uuid, (String, i32)> {
        self.members
            .values()
            .flat_map(|m| m.subscribed_topic_names.iter())
            .filter_map(|name| {
                let (id, partitions) = topics.get(name)?;
                Some((*id, (name.clone(), *partitions)))
            })
            .collect()
    }

    /// A new group epoch and the assignment for it.
    fn bump(&mut self, topics: &TopicsImage) {
        self.group_epoch += 1;
        self.subscribed = self.resolve(topics);
        self.reassign();
    }

    fn reassign(&mut self) {
        let targets = assign(&self.members, &self.subscribed);
        for (id, member) in self.members.iter_mut() {
            member.assigned = targets.get(id).cloned().unwrap_or_default();
        }
    }
}

/// The `simple` assignment: see the module doc.
fn assign(
    members: &BTreeMap<String, ShareMember>,
    subscribed: &BTreeMap<Uuid, (String, i32)>,
) -> BTreeMap<String, Assignment> {
    let mut targets: BTreeMap<String, Assignment> = BTreeMap::new();
    for (topic_id, (name, partitions)) in subscribed {
        let subscribers: Vec<&str> = members
            .values()
            .filter(|m| m.subscribed_topic_names.iter().any(|n| n == name))
            .map(|m| m.member_id.as_str())
            .collect();
        if subscribers.is_empty() || *partitions <= 0 {
            continue;
        }
        let count = *partitions as usize;
        let mut give = |member: &str, partition: usize| {
            targets
                .entry(member.to_string())
                .or_default()
                .entry(*topic_id)
                .or_default()
                .insert(partition as i32);
        };
        if subscribers.len() <= count {
            for partition in 0..count {
                give(subscribers[partition % subscribers.len()], partition);
            }
        } else {
            for (index, member) in subscribers.iter().enumerate() {
                give(member, index % count);
            }
        }
    }
    targets
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const CONFIG: ShareGroupConfig = ShareGroupConfig {
        session_timeout_ms: 45_000,
        heartbeat_interval_ms: 5_000,
        max_size: 10,
    };

    fn topics(partitions: i32) -> TopicsImage {
        [("t".to_string(), (Uuid::from_u128(7), partitions))].into()
    }

    fn join(group: &mut ShareGroup, id: &str, topics: &TopicsImage, now: u64) -> ShareAnswer {
        group
            .heartbeat(
                ShareHeartbeat {
                    member_id: id.into(),
                    member_epoch: JOIN_EPOCH,
                    subscribed_topic_names: Some(vec!["t".into()]),
                    ..ShareHeartbeat::default()
                },
                topics,
                now,
            )
            .expect("join")
    }

    fn beat(group: &mut ShareGroup, id: &str, epoch: i32, topics: &TopicsImage) -> ShareAnswer {
        group
            .heartbeat(
                ShareHeartbeat {
                    member_id: id.into(),
                    member_epoch: epoch,
                    ..ShareHeartbeat::default()
                },
                topics,
                1,
            )
            .expect("heartbeat")
    }

    fn partitions(answer: &ShareAnswer) -> Vec<i32> {
        let assignment = answer.assignment.as_ref().expect("an assignment");
        assignment.values().flatten().copied().collect()
    }

    #[test]
    fn members_up_to_the_partition_count_get_disjoint_partitions() {
        let image = topics(4);
        let mut group = ShareGroup::new(CONFIG);
        let a = join(&mut group, "a", &image, 0);
        assert_eq!(partitions(&a), vec![0, 1, 2, 3]);
        join(&mut group, "b", &image, 0);
        let a = beat(&mut group, "a", a.member_epoch, &image);
        let epoch = group.group_epoch();
        let b = beat(&mut group, "b", epoch, &image);
        assert_eq!(partitions(&a), vec![0, 2]);
        assert_eq!(b.assignment, None, "b already has the current epoch");
        let assigned: BTreeSet<i32> = group
            .members()
            .flat_map(|m| m.assigned.values().flatten().copied())
            .collect();
        assert_eq!(assigned.len(), 4);
    }

    #[test]
    fn more_members_than_partitions_share_them_evenly() {
        let image = topics(2);
        let mut group = ShareGroup::new(CONFIG);
        for id in ["a", "b", "c", "d", "e"] {
            join(&mut group, id, &image, 0);
        }
        let mut per_partition = BTreeMap::new();
        for member in group.members() {
            let ps: Vec<i32> = member.assigned.values().flatten().copied().collect();
            assert_eq!(ps.len(), 1, "each member gets one partition");
            *per_partition.entry(ps[0]).or_insert(0) += 1;
        }
        assert_eq!(per_partition, BTreeMap::from([(0, 3), (1, 2)]));
    }

    #[test]
    fn epochs_ahead_or_older_than_the_previous_are_fenced() {
        let image = topics(1);
        let mut group = ShareGroup::new(CONFIG);
        let a = join(&mut group, "a", &image, 0);
        join(&mut group, "b", &image, 0);
        let moved = beat(&mut group, "a", a.member_epoch, &image);
        assert_eq!(moved.member_epoch, 2);
        // The answer was lost: the previous epoch is still accepted, with the assignment.
        let again = beat(&mut group, "a", a.member_epoch, &image);
        assert!(again.assignment.is_some());
        let ahead = group.heartbeat(
            ShareHeartbeat {
                member_id: "a".into(),
                member_epoch: 9,
                ..ShareHeartbeat::default()
            },
            &image,
            1,
        );
        assert_eq!(ahead, Err(GroupError::FencedMemberEpoch));
        let unknown = group.heartbeat(
            ShareHeartbeat {
                member_id: "z".into(),
                member_epoch: 1,
                ..ShareHeartbeat::default()
            },
            &image,
            1,
        );
        assert_eq!(unknown, Err(GroupError::UnknownMemberId));
    }

    #[test]
    fn leaving_and_expiring_reassign_the_partitions() {
        let image = topics(2);
        let mut group = ShareGroup::new(CONFIG);
        join(&mut group, "a", &image, 0);
        join(&mut group, "b", &image, 100_000);
        let expired = group.expire(50_000);
        assert_eq!(expired, vec!["a".to_string()]);
        let b = beat(&mut group, "b", 2, &image);
        assert_eq!(partitions(&b), vec![0, 1]);
        let left = group
            .heartbeat(
                ShareHeartbeat {
                    member_id: "b".into(),
                    member_epoch: LEAVE_EPOCH,
                    ..ShareHeartbeat::default()
                },
                &image,
                1,
            )
            .expect("leave");
        assert_eq!(left.member_epoch, LEAVE_EPOCH);
        assert!(group.is_empty());
    }

    #[test]
    fn more_partitions_bump_the_epoch() {
        let mut group = ShareGroup::new(CONFIG);
        let a = join(&mut group, "a", &topics(1), 0);
        let grown = beat(&mut group, "a", a.member_epoch, &topics(3));
        assert_eq!(grown.member_epoch, a.member_epoch + 1);
        assert_eq!(partitions(&grown), vec![0, 1, 2]);
    }
}
