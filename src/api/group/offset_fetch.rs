//! OffsetFetch (key 9, v0–9; v0 asks and is answered as v1, and reads the same store,
//! see `offset_commit`): committed offsets of one group (v0–7) or several (v8+);
//! null topics (v2+) means every partition the group has offsets for. A partition
//! without a commit answers offset -1.
//!
//! With an authorizer, as Kafka's `handleOffsetFetchRequestFromCoordinator`: a group
//! needs DESCRIBE (else GROUP_AUTHORIZATION_FAILED for the group: its top-level code
//! from v2; in v0–1, which have none, on every partition asked for, as Kafka's); of the
//! named topics, those without DESCRIBE answer TOPIC_AUTHORIZATION_FAILED per partition
//! (after the others); of all the group's topics (null), those without DESCRIBE are
//! left out.
//!
//! With `require_stable` (v7+), a partition whose offset was committed in a transaction
//! that has not ended yet answers UNSTABLE_OFFSET_COMMIT, and the client asks again.

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{str_bytes, topic_name};
use crate::group::offsets::CommittedOffset;
use crate::security::acl::{AclOperation, ResourceType};

type Fetched = Vec<(String, i32, Option<CommittedOffset>)>;
/// One partition's answer: its committed offset (if any), or why it is refused.
type PartitionOffset = (i32, Result<Option<CommittedOffset>, ResponseError>);
/// One topic's partitions and their answers.
type TopicOffsets = (String, Vec<PartitionOffset>);
/// What a request names: topics and their partitions, `None` for all of the group's.
type Wanted = Option<Vec<(String, Vec<i32>)>>;

/// Groups `(topic, partition, offset)` rows by topic, keeping first-seen order.
fn by_topic(rows: Fetched) -> Vec<TopicOffsets> {
    let mut out: Vec<TopicOffsets> = Vec::new();
    for (topic, partition, offset) in rows {
        match out.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, partitions)) => partitions.push((partition, Ok(offset))),
            None => out.push((topic, vec![(partition, Ok(offset))])),
        }
    }
    out
}

/// One group's answer before it is shaped for the version: the group's error, or its
/// topics, with the DESCRIBE checks on the group and on each topic applied.
fn group_offsets(
    ctx: &RequestContext,
    group: &str,
    wanted: Wanted,
    require_stable: bool,
) -> Result<Vec<TopicOffsets>, ResponseError> {
    let mut topics = authorized_offsets(ctx, group, wanted)?;
    if require_stable {
        let groups = &ctx.services.groups;
        for (topic, partitions) in &mut topics {
            for (partition, answer) in partitions.iter_mut() {
                if answer.is_ok() && groups.has_pending_offset(group, topic, *partition) {
                    *answer = Err(ResponseError::UnstableOffsetCommit);
                }
            }
        }
    }
    Ok(topics)
}

fn authorized_offsets(
    ctx: &RequestContext,
    group: &str,
    wanted: Wanted,
) -> Result<Vec<TopicOffsets>, ResponseError> {
    if !ctx.authorize_group(AclOperation::Describe, group) {
        return Err(ResponseError::GroupAuthorizationFailed);
    }
    if !ctx.services.groups.is_coordinator_for(group) {
        return Err(ResponseError::NotCoordinator);
    }
    let groups = &ctx.services.groups;
    match wanted {
        None => {
            let all = by_topic(groups.fetch_offsets(group, None));
            let (shown, _hidden) = ctx.partition_by_authorized(
                AclOperation::Describe,
                ResourceType::Topic,
                all,
                |(topic, _)| topic.as_str(),
            );
            Ok(shown)
        }
        Some(wanted) => {
            let (allowed, refused) = ctx.partition_by_authorized(
                AclOperation::Describe,
                ResourceType::Topic,
                wanted,
                |(topic, _)| topic.as_str(),
            );
            let mut topics = by_topic(groups.fetch_offsets(group, Some(&allowed)));
            topics.extend(refused.into_iter().map(|(topic, partitions)| {
                let refused = |p| (p, Err(ResponseError::TopicAuthorizationFailed));
                (topic, partitions.into_iter().map(refused).collect())
            }));
            Ok(topics)
        }
    }
}

fn named_topics<T>(topics: &Option<Vec<T>>, of: impl Fn(&T) -> (String, Vec<i32>)) -> Wanted {
    topics
        .as_ref()
        .map(|topics| topics.iter().map(of).collect())
}

pub async fn handle(ctx: &RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse {
    if ctx.api_version >= 8 {
        let groups = request
            .groups
            .iter()
            .map(|g| {
                let wanted = named_topics(&g.topics, |t| {
                    (t.name.to_string(), t.partition_indexes.clone())
                });
                let answer = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
                // v9 (KIP-848): a member names itself and its epoch, which must be current.
                let member = g.member_id.as_deref().unwrap_or_default();
                if ctx.api_version >= 9 && (!member.is_empty() || g.member_epoch >= 0) {
                    let checked = ctx.services.groups.validate_offset_fetch(
                        &g.group_id,
                        member,
                        g.member_epoch,
                    );
                    if let Err(error) = checked {
                        return answer
                            .with_error_code(crate::api::errors::group_error(&error).code());
                    }
                }
                match group_offsets(ctx, &g.group_id, wanted, request.require_stable) {
                    Err(error) => answer.with_error_code(error.code()),
                    Ok(topics) => {
                        answer.with_topics(topics.into_iter().map(groups_topic).collect())
                    }
                }
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let wanted = named_topics(&request.topics, |t| {
        (t.name.to_string(), t.partition_indexes.clone())
    });
    let require_stable = ctx.api_version >= 7 && request.require_stable;
    let topics = match group_offsets(ctx, &request.group_id, wanted.clone(), require_stable) {
        Ok(topics) => topics,
        // v0–1 have no top-level code: as Kafka's `getErrorResponse`, the group's error
        // goes on every partition asked for.
        Err(error) if ctx.api_version < 2 => every_partition_refused(wanted, error),
        Err(error) => return OffsetFetchResponse::default().with_error_code(error.code()),
    };
    let topics = topics
        .into_iter()
        .map(|topic| single_group_topic(ctx.api_version, topic))
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

/// Each partition `wanted` names, answered with `error`.
fn every_partition_refused(wanted: Wanted, error: ResponseError) -> Vec<TopicOffsets> {
    wanted
        .unwrap_or_default()
        .into_iter()
        .map(|(topic, partitions)| {
            (
                topic,
                partitions.into_iter().map(|p| (p, Err(error))).collect(),
            )
        })
        .collect()
}

/// A topic of one group in the v8+ shape.
fn groups_topic((topic, partitions): TopicOffsets) -> OffsetFetchResponseTopics {
    let partitions = partitions
        .into_iter()
        .map(|(p, o)| {
            let (offset, epoch, metadata, error) = fields(o);
            OffsetFetchResponsePartitions::default()
                .with_partition_index(p)
                .with_committed_offset(offset)
                .with_committed_leader_epoch(epoch)
                .with_metadata(metadata)
                .with_error_code(error)
        })
        .collect();
    OffsetFetchResponseTopics::default()
        .with_name(topic_name(topic))
        .with_partitions(partitions)
}

/// A topic in the v0–7 shape (the committed leader epoch from v5).
fn single_group_topic(version: i16, (topic, partitions): TopicOffsets) -> OffsetFetchResponseTopic {
    let partitions = partitions
        .into_iter()
        .map(|(p, o)| {
            let (offset, epoch, metadata, error) = fields(o);
            let partition = OffsetFetchResponsePartition::default()
                .with_partition_index(p)
                .with_committed_offset(offset)
                .with_metadata(metadata)
                .with_error_code(error);
            if version >= 5 {
                partition.with_committed_leader_epoch(epoch)
            } else {
                partition
            }
        })
        .collect();
    OffsetFetchResponseTopic::default()
        .with_name(topic_name(topic))
        .with_partitions(partitions)
}

/// `(offset, leader epoch, metadata, error code)` on the wire; -1 and empty metadata
/// when there is no commit or the partition is refused.
fn fields(
    offset: Result<Option<CommittedOffset>, ResponseError>,
) -> (i64, i32, Option<kafka_protocol::protocol::StrBytes>, i16) {
    match offset {
        Ok(Some(o)) => (
            o.offset,
            o.leader_epoch,
            Some(str_bytes(o.metadata.unwrap_or_default())),
            0,
        ),
        Ok(None) => (-1, -1, Some(str_bytes("")), 0),
        Err(error) => (-1, -1, Some(str_bytes("")), error.code()),
    }
}
