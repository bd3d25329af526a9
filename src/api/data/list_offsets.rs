//! ListOffsets (key 2, v0–10): earliest (-2) is the log start, latest (-1) the high
//! watermark (read_committed, v2+: the last stable offset), max timestamp (-3),
//! earliest local (-4), latest tiered (-5, none here: -1), or the first offset at or
//! after a timestamp (below the same bound).
//! v0 answers Kafka's older question instead (`handle_v0`): up to `max_num_offsets`
//! segment start offsets at or before a time, newest first.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;

use kafka_protocol::messages::TopicName;

use super::super::context::RequestContext;
use super::super::errors;
use crate::model::{now_ms, Isolation};
use crate::security::acl::AclOperation;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

pub async fn handle(ctx: &RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    let isolation = Isolation::from_wire(request.isolation_level);
    for topic in &request.topics {
        let replicas = ctx.services.replicas.topic(&topic.name);
        // DESCRIBE on the topic, before existence (Kafka's handleListOffsetRequest).
        let allowed = ctx.authorize_topic(AclOperation::Describe, &topic.name);
        let partitions = topic
            .partitions
            .iter()
            .map(|wanted| {
                let response = ListOffsetsPartitionResponse::default()
                    .with_partition_index(wanted.partition_index)
                    .with_timestamp(-1)
                    .with_offset(-1)
                    .with_leader_epoch(-1);
                if !allowed {
                    return response
                        .with_error_code(ResponseError::TopicAuthorizationFailed.code());
                }
                let partition = match replicas
                    .as_ref()
                    .map(|t| t.partition(wanted.partition_index))
                {
                    Some(Ok(partition)) => partition,
                    Some(Err(not_served)) => {
                        return response.with_error_code(errors::not_served(not_served).code())
                    }
                    None => {
                        return response
                            .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                    }
                };
                let epoch = partition.leader_epoch();
                if let Err(error) =
                    errors::check_current_leader_epoch(wanted.current_leader_epoch, epoch)
                {
                    return response.with_error_code(error.code());
                }
                let offsets = partition.offsets();
                let log_start = offsets.log_start().0;
                // Kafka's `fetchOffsetForTimestamp`: the last fetchable offset is the
                // last stable offset for read_committed (v2+), else the high watermark,
                // and a timestamp's answer must lie below it.
                let readable = offsets.readable_end(isolation).0;
                let below_readable = |(offset, timestamp): (i64, i64)| {
                    if offset < readable {
                        (offset, timestamp)
                    } else {
                        (-1, -1)
                    }
                };
                let (offset, timestamp) = match wanted.timestamp {
                    LATEST => (readable, -1),
                    EARLIEST | EARLIEST_LOCAL => (log_start, -1),
                    LATEST_TIERED => (-1, -1),
                    MAX_TIMESTAMP => partition.max_timestamp().map_or((-1, -1), below_readable),
                    ts if ts >= 0 => partition
                        .offset_for_timestamp(ts)
                        .map_or((-1, -1), below_readable),
                    _ => return response.with_error_code(ResponseError::InvalidRequest.code()),
                };
                let response = response.with_offset(offset).with_timestamp(timestamp);
                // The field exists from v4; the encoder refuses a non-default value below.
                if ctx.api_version >= 4 {
                    response.with_leader_epoch(epoch.0)
                } else {
                    response
                }
            })
            .collect();
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name.clone())
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}

/// A ListOffsets v0 request (decoded by `server::legacy`): v1's minus the leader
/// epoch, plus how many offsets to list per partition.
#[derive(Debug, Clone, PartialEq)]
pub struct LegacyRequest {
    pub replica_id: i32,
    pub topics: Vec<LegacyTopic>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LegacyTopic {
    pub name: TopicName,
    pub partitions: Vec<LegacyPartition>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegacyPartition {
    pub partition_index: i32,
    /// -1 latest, -2 earliest, else a time in ms.
    pub timestamp: i64,
    pub max_num_offsets: i32,
}

/// A ListOffsets v0 response: per topic, per partition an error and offsets, newest first.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LegacyResponse {
    pub topics: Vec<(TopicName, Vec<LegacyPartitionResponse>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyPartitionResponse {
    pub partition_index: i32,
    pub error_code: i16,
    pub offsets: Vec<i64>,
}

/// ListOffsets v0, as Kafka 3.9's `handleListOffsetRequestV0`: times below -2 are
/// UNSUPPORTED_VERSION, a negative `max_num_offsets` fails the partition (Kafka's
/// array allocation throws: UNKNOWN_SERVER_ERROR), and a consumer's list is capped
/// at the high watermark.
pub async fn handle_v0(ctx: &RequestContext, request: LegacyRequest) -> LegacyResponse {
    let from_consumer = request.replica_id == -1;
    let now = now_ms();
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let replicas = ctx.services.replicas.topic(&topic.name);
        let partitions = topic
            .partitions
            .iter()
            .map(|wanted| {
                let answer = |error: ResponseError, offsets| LegacyPartitionResponse {
                    partition_index: wanted.partition_index,
                    error_code: error.code(),
                    offsets,
                };
                if !ctx.authorize_topic(AclOperation::Describe, &topic.name) {
                    return answer(ResponseError::TopicAuthorizationFailed, Vec::new());
                }
                if wanted.timestamp < EARLIEST {
                    return answer(ResponseError::UnsupportedVersion, Vec::new());
                }
                let partition = match replicas
                    .as_ref()
                    .map(|t| t.partition(wanted.partition_index))
                {
                    Some(Ok(partition)) => partition,
                    Some(Err(not_served)) => {
                        return answer(errors::not_served(not_served), Vec::new())
                    }
                    None => return answer(ResponseError::UnknownTopicOrPartition, Vec::new()),
                };
                let Ok(max) = usize::try_from(wanted.max_num_offsets) else {
                    return answer(ResponseError::UnknownServerError, Vec::new());
                };
                let points = partition.legacy_offset_points(now);
                let offsets = legacy_offsets(&points, wanted.timestamp, max);
                let high_watermark = partition.offsets().high_watermark().0;
                let offsets = if from_consumer {
                    cap_at_high_watermark(offsets, high_watermark)
                } else {
                    offsets
                };
                LegacyPartitionResponse {
                    partition_index: wanted.partition_index,
                    error_code: 0,
                    offsets,
                }
            })
            .collect();
        topics.push((topic.name.clone(), partitions));
    }
    LegacyResponse { topics }
}

/// Kafka's `legacyFetchOffsetsBefore` over `points` (`(offset, modified_ms)` ascending,
/// from `Log::legacy_offset_points`): start at the last point (latest), the first
/// (earliest) or the last one modified at or before `timestamp`, and list up to
/// `max` offsets from there towards the start, newest first. Nothing when no point
/// is old enough.
pub fn legacy_offsets(points: &[(i64, i64)], timestamp: i64, max: usize) -> Vec<i64> {
    let start = match timestamp {
        LATEST => points.len().checked_sub(1),
        EARLIEST => (!points.is_empty()).then_some(0),
        at => points.iter().rposition(|&(_, modified)| modified <= at),
    };
    let Some(start) = start else {
        return Vec::new();
    };
    let mut offsets: Vec<i64> = points[..=start]
        .iter()
        .rev()
        .take(max)
        .map(|&(offset, _)| offset)
        .collect();
    offsets.sort_unstable_by(|a, b| b.cmp(a));
    offsets
}

/// A consumer never learns of offsets past the high watermark: they become the high
/// watermark itself (Kafka's `Partition.legacyFetchOffsetsForTimestamp`).
fn cap_at_high_watermark(offsets: Vec<i64>, high_watermark: i64) -> Vec<i64> {
    if !offsets.iter().any(|&o| o > high_watermark) {
        return offsets;
    }
    std::iter::once(high_watermark)
        .chain(offsets.into_iter().skip_while(|&o| o > high_watermark))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Two segments starting at 0 (modified at 100) and 50 (at 200), log end 80 (now 300).
    const POINTS: [(i64, i64); 3] = [(0, 100), (50, 200), (80, 300)];

    #[test]
    fn latest_lists_the_log_end_then_segment_starts() {
        assert_eq!(legacy_offsets(&POINTS, LATEST, 1), vec![80]);
        assert_eq!(legacy_offsets(&POINTS, LATEST, 10), vec![80, 50, 0]);
        assert_eq!(legacy_offsets(&POINTS, LATEST, 0), Vec::<i64>::new());
    }

    #[test]
    fn earliest_is_only_the_log_start() {
        assert_eq!(legacy_offsets(&POINTS, EARLIEST, 10), vec![0]);
    }

    #[test]
    fn a_time_picks_segments_modified_by_then() {
        assert_eq!(legacy_offsets(&POINTS, 250, 10), vec![50, 0]);
        assert_eq!(legacy_offsets(&POINTS, 200, 1), vec![50]);
        assert_eq!(legacy_offsets(&POINTS, 99, 10), Vec::<i64>::new());
        assert_eq!(legacy_offsets(&POINTS, 1_000, 2), vec![80, 50]);
    }

    #[test]
    fn an_empty_log_lists_its_start() {
        assert_eq!(legacy_offsets(&[(7, 100)], LATEST, 5), vec![7]);
        assert_eq!(legacy_offsets(&[], LATEST, 5), Vec::<i64>::new());
    }

    #[test]
    fn consumers_see_the_high_watermark_instead_of_later_offsets() {
        assert_eq!(cap_at_high_watermark(vec![80, 50, 0], 60), vec![60, 50, 0]);
        assert_eq!(cap_at_high_watermark(vec![80, 50, 0], 80), vec![80, 50, 0]);
    }
}
