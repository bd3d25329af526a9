//! The coordinator's half of online migration between classic and consumer groups
//! (the decisions are `group::consumer::classic`'s): a ConsumerGroupHeartbeat that
//! joins a live classic group converts it ([`GroupCoordinator::upgrade`]), and the
//! classic requests of members not yet restarted (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup) are served by the consumer group; when the last consumer-protocol
//! member is gone, the group becomes classic again ([`GroupCoordinator::downgrade`]).
//! Every change is written before it is answered, as a heartbeat's is.

use super::super::consumer::classic::{ClassicJoinAnswer, CONSUMER_PROTOCOL_TYPE};
use super::super::consumer::records::Image;
use super::super::consumer::{ConsumerGroup, ConsumerGroupConfig, PartitionRacks, TopicsImage};
use super::super::state::{Group, GroupError, JoinRequest, JoinResult, SyncResult};
use super::{
    consumer_changes, deliver, rebalancing, sync_error, Change, GroupCoordinator, GroupEntry,
    Waiter,
};
use crate::model::{monotonic_ms, now_ms};

impl GroupCoordinator {
    /// Whether `group_id` is a consumer group with members: its classic requests are
    /// the consumer group's to answer.
    pub fn is_live_consumer_group(&self, group_id: &str) -> bool {
        self.groups
            .lock()
            .get(group_id)
            .and_then(|entry| entry.consumer.as_ref())
            .is_some_and(|consumer| !consumer.is_empty())
    }

    /// Turns the live classic group of `entry` into a consumer group, if the policy,
    /// its protocol and its size allow (Kafka's `validateOnlineUpgrade` and
    /// `convertToConsumerGroup`); otherwise GROUP_ID_NOT_FOUND, as Kafka answers.
    /// Parked joins and syncs are told to rejoin, which they then do as classic
    /// members of the consumer group. Returns the record that drops the classic group.
    pub(super) fn upgrade(
        &self,
        group_id: &str,
        entry: &mut GroupEntry,
        topics: &TopicsImage,
        config: ConsumerGroupConfig,
    ) -> Result<Change, GroupError> {
        let classic = &entry.group;
        let allowed = self.config.migration.upgrades()
            && classic.protocol_type() == Some(CONSUMER_PROTOCOL_TYPE)
            && classic.members().count() <= config.max_size;
        if !allowed {
            return Err(GroupError::GroupIdNotFound);
        }
        let consumer = ConsumerGroup::from_classic(classic, topics, config, monotonic_ms())
            .map_err(|error| {
                tracing::warn!(group = group_id, %error, "classic group not upgraded");
                GroupError::GroupIdNotFound
            })?;
        for (member_id, waiter) in entry.waiters.drain() {
            match waiter {
                Waiter::Join(tx) => {
                    let _ = tx.send(rebalancing(&member_id));
                }
                Waiter::Sync(tx) => {
                    let _ = tx.send(sync_error(GroupError::RebalanceInProgress));
                }
            }
        }
        tracing::info!(
            group = group_id,
            generation = classic.generation_id(),
            members = classic.members().count(),
            "classic group upgraded to a consumer group"
        );
        entry.group = Group::new(group_id, self.config.limits);
        entry.persisted = Some(entry.group.fingerprint());
        entry.consumer = Some(consumer);
        Ok(Change::Group {
            group: group_id.to_string(),
            value: None,
        })
    }

    /// Turns the consumer group of `entry` back into a classic group when only classic
    /// members are left and the policy allows (Kafka's `convertToClassicGroup`): they
    /// keep their assignments and a rebalance starts, which they learn of from their
    /// next heartbeat. Returns the records that drop the consumer group and store the
    /// classic one.
    pub(super) fn downgrade(&self, group_id: &str, entry: &mut GroupEntry) -> Option<Vec<Change>> {
        let consumer = entry.consumer.as_ref()?;
        let limits = self.config.limits;
        let allowed = self.config.migration.downgrades()
            && consumer.only_classic_members()
            && consumer.members().count() <= limits.max_size;
        if !allowed {
            return None;
        }
        let record = consumer.classic_record(now_ms())?;
        let mut changes = consumer_changes(group_id, &consumer.image(), &Image::default());
        let mut group = Group::restore(group_id, limits, &record, monotonic_ms());
        entry.persisted = Some(group.fingerprint());
        let deliveries = group.rebalance(monotonic_ms());
        tracing::info!(
            group = group_id,
            generation = record.generation_id,
            members = record.members.len(),
            "consumer group downgraded to a classic group"
        );
        entry.group = group;
        entry.consumer = None;
        deliver(entry, deliveries);
        changes.push(Change::Group {
            group: group_id.to_string(),
            value: Some(record),
        });
        Some(changes)
    }

    /// JoinGroup from a classic member of a live consumer group.
    pub async fn classic_join_to_consumer(
        &self,
        group_id: &str,
        request: JoinRequest,
        topics: &TopicsImage,
        racks: PartitionRacks,
    ) -> JoinResult {
        let asked_id = request.member_id.clone();
        if let Err(error) = self.check_coordinator(group_id) {
            return JoinResult::error(error, &asked_id);
        }
        let limits = self.config.limits;
        if !(limits.min_session_timeout_ms..=limits.max_session_timeout_ms)
            .contains(&request.session_timeout_ms)
        {
            return JoinResult::error(GroupError::InvalidSessionTimeout, &asked_id);
        }
        let config = self.consumer_config(group_id);
        let _turn = self.persist_lock.lock().await;
        let (answer, records) = {
            let mut groups = self.groups.lock();
            let live = groups
                .get_mut(group_id)
                .filter(|entry| entry.consumer.as_ref().is_some_and(|c| !c.is_empty()));
            let joined = live.and_then(|entry| {
                changing(group_id, entry, |consumer| {
                    consumer.set_config(config);
                    consumer.set_partition_racks(racks);
                    consumer.classic_join(request, topics, monotonic_ms())
                })
            });
            match joined {
                Some(joined) => joined,
                // It changed kind meanwhile: join again.
                None => return rebalancing(&asked_id),
            }
        };
        if let Err(error) = self.write(group_id, &records).await {
            tracing::warn!(group = group_id, %error, "could not store consumer group state");
            return JoinResult::error(GroupError::CoordinatorNotAvailable, &asked_id);
        }
        match answer {
            Ok(ClassicJoinAnswer::Joined {
                member_id,
                generation_id,
                protocol_name,
            }) => JoinResult {
                error: None,
                generation_id,
                protocol_type: Some(CONSUMER_PROTOCOL_TYPE.to_string()),
                protocol_name: Some(protocol_name),
                // Nobody leads: the coordinator assigns.
                leader: String::new(),
                member_id,
                members: Vec::new(),
                skip_assignment: false,
            },
            Ok(ClassicJoinAnswer::MemberIdRequired(member_id)) => {
                JoinResult::error(GroupError::MemberIdRequired, &member_id)
            }
            Err(error) => JoinResult::error(error, &asked_id),
        }
    }

    /// SyncGroup from a classic member of a consumer group (`None`: not a consumer group).
    pub(super) fn classic_sync_to_consumer(
        entry: &mut GroupEntry,
        member_id: &str,
        instance_id: Option<&str>,
        generation_id: i32,
        protocol: (Option<&str>, Option<&str>),
    ) -> Option<SyncResult> {
        let consumer = entry.consumer.as_mut()?;
        let answer = consumer.classic_sync(
            member_id,
            instance_id,
            generation_id,
            protocol,
            monotonic_ms(),
        );
        Some(match answer {
            Ok(answer) => SyncResult {
                error: None,
                protocol_type: Some(CONSUMER_PROTOCOL_TYPE.to_string()),
                protocol_name: Some(answer.protocol_name),
                assignment: answer.assignment,
            },
            Err(error) => sync_error(error),
        })
    }

    /// LeaveGroup of classic members of a consumer group; the change is stored
    /// before it is answered.
    pub(super) async fn classic_leave_consumer(
        &self,
        group_id: &str,
        members: &[(String, Option<String>)],
    ) -> Vec<Result<(), GroupError>> {
        let _turn = self.persist_lock.lock().await;
        let (results, records) = {
            let mut groups = self.groups.lock();
            let left = groups.get_mut(group_id).and_then(|entry| {
                changing(group_id, entry, |consumer| {
                    members
                        .iter()
                        .map(|(member_id, instance_id)| {
                            consumer
                                .classic_leave(member_id, instance_id.as_deref())
                                .map(|_| ())
                        })
                        .collect::<Vec<_>>()
                })
            });
            match left {
                Some(left) => left,
                None => {
                    return members
                        .iter()
                        .map(|_| Err(GroupError::UnknownMemberId))
                        .collect()
                }
            }
        };
        if let Err(error) = self.write(group_id, &records).await {
            tracing::warn!(group = group_id, %error, "could not store consumer group state");
            return members
                .iter()
                .map(|_| Err(GroupError::CoordinatorNotAvailable))
                .collect();
        }
        results
    }
}

/// Runs `step` on the consumer group of `entry` and returns its result with the
/// records of what it changed, counting a new group epoch (`None`: not a consumer group).
fn changing<T>(
    group_id: &str,
    entry: &mut GroupEntry,
    step: impl FnOnce(&mut ConsumerGroup) -> T,
) -> Option<(T, Vec<Change>)> {
    let consumer = entry.consumer.as_mut()?;
    let before = consumer.image();
    let out = step(consumer);
    let after = consumer.image();
    count_rebalance(group_id, &before, &after);
    entry.note_emptiness();
    Some((out, consumer_changes(group_id, &before, &after)))
}

/// Counts a consumer group's rebalance (a new group epoch) in the metrics.
pub(super) fn count_rebalance(
    group_id: &str,
    before: &super::super::consumer::records::Image,
    after: &super::super::consumer::records::Image,
) {
    if after.epoch != before.epoch {
        let labels = [
            ("group", group_id.to_string()),
            ("type", "consumer".to_string()),
        ];
        metrics::counter!(crate::metrics::GROUP_REBALANCES_TOTAL, &labels).increment(1);
    }
}
