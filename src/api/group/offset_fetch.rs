//! OffsetFetch (key 9, v0–9; v0 asks and is answered as v1, and reads the same store,
//! see `offset_commit`): committed offsets of one group (v0–7) or several (v8+);
//! null topics (v2+) means every partition the group has offsets for. A partition
//! without a commit answers offset -1.

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{OffsetFetchRequest, OffsetFetchResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{str_bytes, topic_name};
use crate::group::offsets::CommittedOffset;

type Fetched = Vec<(String, i32, Option<CommittedOffset>)>;
/// One topic's partitions and their committed offsets (if any).
type TopicOffsets = (String, Vec<(i32, Option<CommittedOffset>)>);

fn fetch(ctx: &RequestContext, group: &str, wanted: Option<Vec<(String, Vec<i32>)>>) -> Fetched {
    ctx.services.groups.fetch_offsets(group, wanted.as_deref())
}

/// Groups `(topic, partition, offset)` rows by topic, keeping first-seen order.
fn by_topic(rows: Fetched) -> Vec<TopicOffsets> {
    let mut out: Vec<TopicOffsets> = Vec::new();
    for (topic, partition, offset) in rows {
        match out.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, partitions)) => partitions.push((partition, offset)),
            None => out.push((topic, vec![(partition, offset)])),
        }
    }
    out
}

pub async fn handle(ctx: &RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse {
    if ctx.api_version >= 8 {
        let groups = request
            .groups
            .iter()
            .map(|g| {
                if !ctx.services.groups.is_coordinator_for(&g.group_id) {
                    return OffsetFetchResponseGroup::default()
                        .with_group_id(g.group_id.clone())
                        .with_error_code(ResponseError::NotCoordinator.code());
                }
                let wanted = g.topics.as_ref().map(|topics| {
                    topics
                        .iter()
                        .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
                        .collect()
                });
                let topics = by_topic(fetch(ctx, &g.group_id, wanted))
                    .into_iter()
                    .map(|(topic, partitions)| {
                        OffsetFetchResponseTopics::default()
                            .with_name(topic_name(topic))
                            .with_partitions(
                                partitions
                                    .into_iter()
                                    .map(|(p, o)| {
                                        let (offset, epoch, metadata) = fields(o);
                                        OffsetFetchResponsePartitions::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(offset)
                                            .with_committed_leader_epoch(epoch)
                                            .with_metadata(metadata)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                OffsetFetchResponseGroup::default()
                    .with_group_id(g.group_id.clone())
                    .with_topics(topics)
            })
            .collect();
        return OffsetFetchResponse::default().with_groups(groups);
    }
    if !ctx.services.groups.is_coordinator_for(&request.group_id) {
        return OffsetFetchResponse::default()
            .with_error_code(ResponseError::NotCoordinator.code());
    }
    let wanted = request.topics.as_ref().map(|topics| {
        topics
            .iter()
            .map(|t| (t.name.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    let topics = by_topic(fetch(ctx, &request.group_id, wanted))
        .into_iter()
        .map(|(topic, partitions)| {
            OffsetFetchResponseTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|(p, o)| {
                            let (offset, epoch, metadata) = fields(o);
                            let partition = OffsetFetchResponsePartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(offset)
                                .with_metadata(metadata);
                            if ctx.api_version >= 5 {
                                partition.with_committed_leader_epoch(epoch)
                            } else {
                                partition
                            }
                        })
                        .collect(),
                )
        })
        .collect();
    OffsetFetchResponse::default().with_topics(topics)
}

/// `(offset, leader epoch, metadata)` on the wire; -1 and empty metadata when none.
fn fields(
    offset: Option<CommittedOffset>,
) -> (i64, i32, Option<kafka_protocol::protocol::StrBytes>) {
    match offset {
        Some(o) => (
            o.offset,
            o.leader_epoch,
            Some(str_bytes(o.metadata.unwrap_or_default())),
        ),
        None => (-1, -1, Some(str_bytes(""))),
    }
}
