//! The join phase of a classic group: JoinGroup from new, known and static members,
//! the rebalance it starts, and its completion (the protocol vote, the leader's
//! members list).

use super::*;

impl Group {
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
    pub(super) fn prepare_rebalance(&mut self, now_ms: u64, initial: bool) -> Vec<Delivery> {
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
    pub(super) fn maybe_complete_join(&mut self, now_ms: u64) -> Vec<Delivery> {
        let everyone = !self.members.is_empty() && self.members.values().all(|m| m.awaiting_join);
        let waiting_for_more = self.initial_rebalance && now_ms < self.rebalance_deadline_ms;
        if self.state == GroupState::PreparingRebalance && everyone && !waiting_for_more {
            return self.complete_join(now_ms);
        }
        Vec::new()
    }

    /// Ends PreparingRebalance: drops members that did not rejoin, starts the next
    /// generation, and answers every parked JoinGroup.
    pub(super) fn complete_join(&mut self, now_ms: u64) -> Vec<Delivery> {
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
}
