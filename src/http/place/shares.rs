//! A queue subscription's share-partitions wherever they are led, and its share
//! group's start offsets wherever it is coordinated.
//!
//! Here, through the same `group::share::leader` code ShareFetch and ShareAcknowledge
//! run; elsewhere, through those requests to the partition's leader (and
//! Describe/Alter/DeleteShareGroupOffsets to the coordinator). A remote acknowledgement
//! needs a share session at the leader: one ShareFetch opens it (epoch 0, nothing
//! fetched) and a ShareAcknowledge at epoch 1 carries it, under one lock so that two
//! calls of this broker do not interleave their epochs.

use kafka_protocol::messages::{
    alter_share_group_offsets_request, delete_share_group_offsets_request,
    describe_share_group_offsets_request, share_acknowledge_request, share_fetch_request,
    AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsRequest, GroupId, ShareAcknowledgeRequest, ShareFetchRequest,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::super::subscribe::{parse_messages, Stored};
use super::{remote_error, topic_name, Owner};
use crate::api::share::persister::Persister;
use crate::cluster::TopicSpec;
use crate::group::offsets;
use crate::group::share::partition::{AckBatch, AckError, AckType, OffsetStatus};
use crate::group::share::{PersistError, ShareKey, StateStore};
use crate::http::{ApiError, HttpApi};
use crate::replication::TopicReplicas;

/// Bytes one acquisition reads from a partition at most.
const ACQUIRE_BYTES: u64 = 1 << 20;

/// A message acquired for a queue consumer, with its delivery count.
pub(in crate::http) type Acquired = (Stored, i16);

fn group_id(group: &str) -> GroupId {
    GroupId(StrBytes::from_string(group.to_string()))
}

fn persist_error(error: PersistError) -> ApiError {
    if error.is_transient() {
        ApiError::transient(format!("the share group's state is not reachable: {error}"))
    } else {
        ApiError::unavailable(error.to_string())
    }
}

fn ack_error(error: AckError, offset: i64) -> ApiError {
    match error {
        AckError::InvalidRecordState => ApiError::kafka(
            kafka_protocol::ResponseError::InvalidRecordState.code(),
            format!("message at offset {offset} is not held by this consumer (not acquired, or its lock ran out)"),
        ),
        AckError::InvalidRequest => ApiError::bad("message_id", "not a message this consumer was given"),
    }
}

impl HttpApi {
    fn share_persister(&self) -> Persister<'_> {
        Persister::for_request(&self.services)
    }

    /// Acquires for `member` up to `max` messages of partition `index`.
    pub(in crate::http) async fn acquire(
        &self,
        topic: &TopicReplicas,
        group: &str,
        member: &str,
        index: i32,
        max: usize,
    ) -> Result<Vec<Acquired>, ApiError> {
        let key = ShareKey {
            group: group.to_string(),
            topic_id: topic.spec.topic_id,
            partition: index,
        };
        let (records, ranges) = match self.partition_owner(topic, index)? {
            Owner::Here(partition) => {
                let persister = self.share_persister();
                let mut held = self
                    .services
                    .shares
                    .hold_checked(&key, &partition, &persister, true)
                    .await
                    .map_err(|e| persist_error(e.into_persist_error()))?;
                let taken = held.acquire(&partition, member, max, ACQUIRE_BYTES);
                let ranges: Vec<(i64, i64, i16)> = taken
                    .ranges
                    .iter()
                    .map(|r| (r.first, r.last, r.delivery_count))
                    .collect();
                (taken.records, ranges)
            }
            Owner::Broker(leader) => {
                let request = ShareFetchRequest::default()
                    .with_group_id(Some(group_id(group)))
                    .with_member_id(Some(StrBytes::from_string(member.to_string())))
                    .with_share_session_epoch(0)
                    .with_max_wait_ms(0)
                    .with_max_bytes(ACQUIRE_BYTES as i32)
                    .with_max_records(i32::try_from(max).unwrap_or(i32::MAX))
                    .with_batch_size(i32::try_from(max).unwrap_or(i32::MAX))
                    .with_topics(vec![share_fetch_request::FetchTopic::default()
                        .with_topic_id(topic.spec.topic_id)
                        .with_partitions(vec![
                            share_fetch_request::FetchPartition::default()
                                .with_partition_index(index),
                        ])]);
                let _turn = self.queue_sessions.lock().await;
                let response = self.ask(leader, request, 1).await?;
                if response.error_code != 0 {
                    return Err(remote_error(leader, "ShareFetch", response.error_code));
                }
                let Some(p) = response
                    .responses
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .find(|p| p.partition_index == index)
                else {
                    return Ok(Vec::new());
                };
                if p.error_code != 0 {
                    return Err(remote_error(leader, "ShareFetch", p.error_code));
                }
                let ranges = p
                    .acquired_records
                    .iter()
                    .map(|r| (r.first_offset, r.last_offset, r.delivery_count))
                    .collect();
                (p.records.unwrap_or_default(), ranges)
            }
        };
        let Some(&(first, _, _)) = ranges.first() else {
            return Ok(Vec::new());
        };
        let name = format!("{}-{index}", topic.spec.name);
        let read = parse_messages(&records, Vec::new(), first, usize::MAX, &name);
        Ok(read
            .messages
            .into_iter()
            .filter_map(|m| {
                let count = ranges
                    .iter()
                    .find(|(f, l, _)| (*f..=*l).contains(&m.offset))
                    .map(|r| r.2)?;
                Some((m, count))
            })
            .collect())
    }

    /// Acknowledges one message `member` holds: accepted, released or rejected.
    pub(in crate::http) async fn acknowledge_one(
        &self,
        topic: &TopicReplicas,
        group: &str,
        member: &str,
        index: i32,
        offset: i64,
        kind: AckType,
    ) -> Result<(), ApiError> {
        let key = ShareKey {
            group: group.to_string(),
            topic_id: topic.spec.topic_id,
            partition: index,
        };
        match self.partition_owner(topic, index)? {
            Owner::Here(partition) => {
                let persister = self.share_persister();
                let mut held = self
                    .services
                    .shares
                    .hold(&key, &partition, &persister)
                    .await
                    .map_err(|e| persist_error(e.into_persist_error()))?;
                let batch = AckBatch {
                    first: offset,
                    last: offset,
                    types: vec![kind],
                };
                held.acknowledge(&key, &persister, member, &[batch])
                    .await
                    .map_err(persist_error)?
                    .map_err(|e| ack_error(e, offset))
            }
            Owner::Broker(leader) => {
                let _turn = self.queue_sessions.lock().await;
                let open = ShareFetchRequest::default()
                    .with_group_id(Some(group_id(group)))
                    .with_member_id(Some(StrBytes::from_string(member.to_string())))
                    .with_share_session_epoch(0)
                    .with_max_wait_ms(0)
                    .with_max_records(1)
                    .with_batch_size(1)
                    .with_max_bytes(1);
                let opened = self.ask(leader, open, 1).await?;
                if opened.error_code != 0 {
                    return Err(remote_error(leader, "ShareFetch", opened.error_code));
                }
                let request = ShareAcknowledgeRequest::default()
                    .with_group_id(Some(group_id(group)))
                    .with_member_id(Some(StrBytes::from_string(member.to_string())))
                    .with_share_session_epoch(1)
                    .with_topics(vec![share_acknowledge_request::AcknowledgeTopic::default()
                        .with_topic_id(topic.spec.topic_id)
                        .with_partitions(vec![
                            share_acknowledge_request::AcknowledgePartition::default()
                                .with_partition_index(index)
                                .with_acknowledgement_batches(vec![
                                    share_acknowledge_request::AcknowledgementBatch::default()
                                        .with_first_offset(offset)
                                        .with_last_offset(offset)
                                        .with_acknowledge_types(vec![kind as i8]),
                                ]),
                        ])]);
                let response = self.ask(leader, request, 1).await?;
                let code = response
                    .responses
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .map(|p| p.error_code)
                    .find(|&c| c != 0)
                    .unwrap_or(response.error_code);
                match code {
                    0 => Ok(()),
                    c if c == kafka_protocol::ResponseError::InvalidRecordState.code() => {
                        Err(ack_error(AckError::InvalidRecordState, offset))
                    }
                    c => Err(remote_error(leader, "ShareAcknowledge", c)),
                }
            }
        }
    }

    /// One message's delivery state in a queue: exact at a leader here (acquisitions
    /// included), else as the group's coordinator stores it (an acquired message shows
    /// as available there until it is acknowledged).
    pub(in crate::http) async fn queue_status(
        &self,
        topic: &TopicReplicas,
        group: &str,
        index: i32,
        offset: i64,
    ) -> Result<OffsetStatus, ApiError> {
        let key = ShareKey {
            group: group.to_string(),
            topic_id: topic.spec.topic_id,
            partition: index,
        };
        if let Some(status) = self.services.shares.status_of(&key, offset) {
            return Ok(status);
        }
        let stored = self
            .share_persister()
            .read(&key, -1)
            .await
            .map_err(persist_error)?;
        let Some(stored) = stored else {
            return Ok(OffsetStatus::NotYetDelivered);
        };
        if offset < stored.snapshot.start_offset {
            return Ok(OffsetStatus::Finished);
        }
        Ok(stored
            .snapshot
            .batches
            .iter()
            .find(|b| (b.first..=b.last).contains(&offset))
            .map_or(OffsetStatus::NotYetDelivered, |b| {
                OffsetStatus::InFlight(b.state, b.delivery_count)
            }))
    }

    /// Whether the share group holds state for `spec` (a queue subscription exists).
    pub(in crate::http) async fn queue_subscribed(
        &self,
        group: &str,
        spec: &TopicSpec,
    ) -> Result<bool, ApiError> {
        if self.services.groups.is_coordinator_for(group) {
            let states = self.services.groups.share_states(group).unwrap_or_default();
            return Ok(states.iter().any(|(id, _, _)| *id == spec.topic_id));
        }
        let node = self.share_coordinator(group).await?;
        let request = DescribeShareGroupOffsetsRequest::default().with_groups(vec![
            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(group_id(group))
                .with_topics(None),
        ]);
        let response = self.ask(node, request, 0).await?;
        Ok(response.groups.iter().any(|g| {
            g.error_code == 0
                && g.topics.iter().any(|t| {
                    t.topic_id == spec.topic_id && t.partitions.iter().any(|p| p.start_offset >= 0)
                })
        }))
    }

    /// Sets (`Some`) or deletes (`None`) the share group's start offsets on `spec`.
    pub(in crate::http) async fn reset_queue(
        &self,
        group: &str,
        spec: &TopicSpec,
        starts: &[(i32, Option<i64>)],
    ) -> Result<(), ApiError> {
        if self.services.groups.is_coordinator_for(group) {
            let slots: Vec<((Uuid, i32), Option<i64>)> = starts
                .iter()
                .map(|&(p, start)| ((spec.topic_id, p), start))
                .collect();
            return self
                .services
                .groups
                .reset_share_starts(group, &slots)
                .await
                .map_err(|e| ApiError::transient(format!("storing the queue's start: {e}")));
        }
        let node = self.share_coordinator(group).await?;
        let code = if starts.iter().all(|(_, s)| s.is_none()) {
            let request = DeleteShareGroupOffsetsRequest::default()
                .with_group_id(group_id(group))
                .with_topics(vec![
                    delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                        .with_topic_name(topic_name(&spec.name)),
                ]);
            self.ask(node, request, 0).await?.error_code
        } else {
            let partitions = starts
                .iter()
                .filter_map(|&(p, start)| {
                    Some(
                        alter_share_group_offsets_request::AlterShareGroupOffsetsRequestPartition::default()
                            .with_partition_index(p)
                            .with_start_offset(start?),
                    )
                })
                .collect();
            let request = AlterShareGroupOffsetsRequest::default()
                .with_group_id(group_id(group))
                .with_topics(vec![
                    alter_share_group_offsets_request::AlterShareGroupOffsetsRequestTopic::default(
                    )
                    .with_topic_name(topic_name(&spec.name))
                    .with_partitions(partitions),
                ]);
            self.ask(node, request, 0).await?.error_code
        };
        match code {
            0 => Ok(()),
            c => Err(remote_error(node, "the queue's start offsets", c)),
        }
    }

    async fn share_coordinator(&self, group: &str) -> Result<i32, ApiError> {
        offsets::coordinator_of(self.services.store.as_ref(), group)
            .await
            .ok_or_else(|| ApiError::transient(format!("no coordinator for '{group}' right now")))
    }
}
