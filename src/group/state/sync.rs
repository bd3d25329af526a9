//! The sync phase: SyncGroup's checks, the leader's assignment, and the answers to
//! the members waiting for it.

use super::*;

impl Group {
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
}
