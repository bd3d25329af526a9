//! ListOffsets (key 2, v1–10): earliest (-2) is the log start, latest (-1) the log end
//! offset (the next offset to be written), max timestamp (-3), earliest local (-4),
//! latest tiered (-5, none here: -1), or the first offset at or after a timestamp.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::errors;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

pub async fn handle(ctx: &RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in &request.topics {
        let replicas = ctx.services.replicas.topic(&topic.name);
        let partitions = topic
            .partitions
            .iter()
            .map(|wanted| {
                let response = ListOffsetsPartitionResponse::default()
                    .with_partition_index(wanted.partition_index)
                    .with_timestamp(-1)
                    .with_offset(-1)
                    .with_leader_epoch(-1);
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
                if wanted.current_leader_epoch >= 0 && wanted.current_leader_epoch != epoch {
                    let error = if wanted.current_leader_epoch < epoch {
                        ResponseError::FencedLeaderEpoch
                    } else {
                        ResponseError::UnknownLeaderEpoch
                    };
                    return response.with_error_code(error.code());
                }
                let (log_start, high_watermark, _) = partition.offsets();
                let (offset, timestamp) = match wanted.timestamp {
                    LATEST => (high_watermark, -1),
                    EARLIEST | EARLIEST_LOCAL => (log_start, -1),
                    LATEST_TIERED => (-1, -1),
                    MAX_TIMESTAMP => partition.max_timestamp().unwrap_or((-1, -1)),
                    ts if ts >= 0 => partition.offset_for_timestamp(ts).unwrap_or((-1, -1)),
                    _ => return response.with_error_code(ResponseError::InvalidRequest.code()),
                };
                let response = response.with_offset(offset).with_timestamp(timestamp);
                // The field exists from v4; the encoder refuses a non-default value below.
                if ctx.api_version >= 4 {
                    response.with_leader_epoch(epoch)
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
