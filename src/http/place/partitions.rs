//! A partition, wherever it is led: read and appended to directly when this broker
//! leads it, through Fetch, Produce (acks=all) and ListOffsets to its leader otherwise.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchRequest, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{
    ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic,
};
use kafka_protocol::messages::produce_request::{
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use kafka_protocol::messages::BrokerId;

use super::{remote_error, topic_name, Owner};
use crate::http::subscribe::{parse_messages, read_from, Read};
use crate::http::{ApiError, HttpApi};
use crate::metrics as m;
use crate::replication::{NotServed, Partition, TopicReplicas};

/// One read of a partition, wherever it is led.
#[derive(Debug, Default)]
pub struct PartitionRead {
    pub read: Read,
    pub log_start: i64,
    pub log_end: i64,
}

/// What one Fetch found for one partition.
#[derive(Debug)]
enum Fetched {
    Read(PartitionRead),
    /// The position lies below the partition's log start (retention removed it): the
    /// offset it starts at now.
    Expired(i64),
    Failed(ApiError),
}

/// Kafka's OFFSET_OUT_OF_RANGE error code.
const OFFSET_OUT_OF_RANGE: i16 = 1;

/// How long one Produce to a leader may wait for its acknowledgement.
const PRODUCE_TIMEOUT_MS: i32 = 30_000;
/// Bytes asked of a remote leader per partition read (as a local read takes).
const READ_BYTES: i32 = 1024 * 1024;

/// A broker's answer for one partition, unless it left the partition out or answered
/// it with an error.
fn partition_answer<P>(
    node: i32,
    what: &str,
    found: Option<P>,
    error_code: impl Fn(&P) -> i16,
) -> Result<P, ApiError> {
    let found = found.ok_or_else(|| {
        ApiError::unavailable(format!(
            "broker {node} left the partition out of its {what} answer"
        ))
    })?;
    match error_code(&found) {
        0 => Ok(found),
        code => Err(remote_error(node, what, code)),
    }
}

impl HttpApi {
    /// The leader of `index` of `topic`: here, another broker, or a 503 when there is
    /// none right now (or the store says here but this broker has not caught up yet).
    pub(in crate::http) fn partition_owner(
        &self,
        topic: &TopicReplicas,
        index: i32,
    ) -> Result<Owner<Arc<Partition>>, ApiError> {
        match topic.partition(index) {
            Ok(partition) => Ok(Owner::Here(Arc::clone(partition))),
            Err(NotServed::Unknown) => Err(ApiError::not_found(format!(
                "topic '{}' has no partition {index}",
                topic.spec.name
            ))),
            Err(NotServed::NotLeader) => {
                let leader = self
                    .services
                    .store
                    .assignment(&topic.spec)
                    .and_then(|a| a.partition(index).map(|p| p.leader))
                    .unwrap_or(-1);
                if leader < 0 || leader == self.node_id() {
                    return Err(ApiError::transient(format!(
                        "partition {index} of '{}' has no leader right now; retry",
                        topic.spec.name
                    )));
                }
                Ok(Owner::Broker(leader))
            }
        }
    }

    /// Up to `max` messages of partition `index` from offset `from`, and its offsets.
    pub(in crate::http) async fn read_partition(
        &self,
        topic: &TopicReplicas,
        index: i32,
        from: i64,
        max: usize,
    ) -> Result<PartitionRead, ApiError> {
        let leader = match self.partition_owner(topic, index)? {
            Owner::Here(partition) => {
                let (log_start, _, log_end) = partition.offsets();
                let read = read_from(&partition, from, max);
                return Ok(PartitionRead {
                    read,
                    log_start,
                    log_end,
                });
            }
            Owner::Broker(leader) => leader,
        };
        let mut found = self
            .fetch_from(topic, leader, &[(index, from)], max)
            .await?;
        match found.pop() {
            Some((_, read)) => read,
            None => Err(remote_error(leader, "Fetch", -1)),
        }
    }

    /// Reads of those of `wanted` (partition, from offset) that other brokers lead, each
    /// up to `max` messages, in one Fetch per leader: per partition, its read or why it
    /// could not be read now. Partitions led here are left to [`Self::read_partition`],
    /// which reads only as much as is still wanted.
    pub(in crate::http) async fn read_remote_partitions(
        &self,
        topic: &TopicReplicas,
        wanted: &[(i32, i64)],
        max: usize,
    ) -> BTreeMap<i32, Result<PartitionRead, ApiError>> {
        let mut by_leader: BTreeMap<i32, Vec<(i32, i64)>> = BTreeMap::new();
        for &(index, from) in wanted {
            if let Ok(Owner::Broker(leader)) = self.partition_owner(topic, index) {
                by_leader.entry(leader).or_default().push((index, from));
            }
        }
        let mut reads = BTreeMap::new();
        for (leader, partitions) in by_leader {
            match self.fetch_from(topic, leader, &partitions, max).await {
                Ok(found) => reads.extend(found),
                Err(error) => {
                    reads.extend(partitions.iter().map(|&(i, _)| (i, Err(error.clone()))))
                }
            }
        }
        reads
    }

    /// One Fetch of `partitions` (partition, from offset) from broker `leader`, each
    /// parsed into up to `max` messages. A position below a partition's log start
    /// (retention removed it) is read again from the log start, as a local read does.
    async fn fetch_from(
        &self,
        topic: &TopicReplicas,
        leader: i32,
        partitions: &[(i32, i64)],
        max: usize,
    ) -> Result<Vec<(i32, Result<PartitionRead, ApiError>)>, ApiError> {
        let mut found = self.fetch_once(topic, leader, partitions, max).await?;
        let expired: Vec<(i32, i64)> = found
            .iter()
            .filter_map(|(index, fetched)| match fetched {
                Fetched::Expired(log_start) => Some((*index, *log_start)),
                _ => None,
            })
            .collect();
        if !expired.is_empty() {
            let again = self.fetch_once(topic, leader, &expired, max).await?;
            found.retain(|(_, fetched)| !matches!(fetched, Fetched::Expired(_)));
            found.extend(again);
        }
        Ok(found
            .into_iter()
            .map(|(index, fetched)| {
                let read = match fetched {
                    Fetched::Read(read) => Ok(read),
                    Fetched::Failed(error) => Err(error),
                    // Expired again at once: retention is racing this read.
                    Fetched::Expired(_) => Err(remote_error(leader, "Fetch", OFFSET_OUT_OF_RANGE)),
                };
                (index, read)
            })
            .collect())
    }

    /// One Fetch of `partitions` from broker `leader`.
    async fn fetch_once(
        &self,
        topic: &TopicReplicas,
        leader: i32,
        partitions: &[(i32, i64)],
        max: usize,
    ) -> Result<Vec<(i32, Fetched)>, ApiError> {
        // About `max` small messages (what is read but not handed out is read again next
        // time), bounded; the first batch comes whole anyway.
        let budget = (max.saturating_mul(2 * 1024)).clamp(64 * 1024, READ_BYTES as usize) as i32;
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(budget)
            .with_session_epoch(-1)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic_name(&topic.spec.name))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&(index, from)| {
                            FetchPartition::default()
                                .with_partition(index)
                                .with_current_leader_epoch(-1)
                                .with_fetch_offset(from)
                                .with_log_start_offset(-1)
                                .with_partition_max_bytes(budget)
                        })
                        .collect(),
                )]);
        let response = self.ask(leader, request, 12).await?;
        if response.error_code != 0 {
            return Err(remote_error(leader, "Fetch", response.error_code));
        }
        let mut answers: BTreeMap<i32, _> = response
            .responses
            .into_iter()
            .flat_map(|t| t.partitions)
            .map(|p| (p.partition_index, p))
            .collect();
        Ok(partitions
            .iter()
            .map(|&(index, from)| {
                let answer = partition_answer(leader, "Fetch", answers.remove(&index), |p| {
                    // Sorted out below: below the log start it is Expired; above the
                    // log end (a log that moved without its data) there is nothing yet.
                    if p.error_code == OFFSET_OUT_OF_RANGE {
                        0
                    } else {
                        p.error_code
                    }
                });
                let fetched = match answer {
                    Ok(p) if p.error_code == OFFSET_OUT_OF_RANGE && from < p.log_start_offset => {
                        Fetched::Expired(p.log_start_offset)
                    }
                    Ok(p) => {
                        let from = from.max(p.log_start_offset);
                        let label = format!("{}-{index}", topic.spec.name);
                        let read = match &p.records {
                            Some(bytes) if p.error_code == 0 => {
                                parse_messages(bytes, from, max, &label)
                            }
                            _ => Read {
                                messages: Vec::new(),
                                next: from,
                            },
                        };
                        Fetched::Read(PartitionRead {
                            read,
                            log_start: p.log_start_offset,
                            log_end: p.high_watermark,
                        })
                    }
                    Err(error) => Fetched::Failed(error),
                };
                (index, fetched)
            })
            .collect())
    }

    /// The next offset partition `index` will give out.
    pub(in crate::http) async fn log_end(
        &self,
        topic: &TopicReplicas,
        index: i32,
    ) -> Result<i64, ApiError> {
        let leader = match self.partition_owner(topic, index)? {
            Owner::Here(partition) => return Ok(partition.offsets().2),
            Owner::Broker(leader) => leader,
        };
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(&topic.spec.name))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(index)
                    .with_current_leader_epoch(-1)
                    .with_timestamp(-1)])]);
        let response = self.ask(leader, request, 7).await?;
        let found = response
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .find(|p| p.partition_index == index);
        let found = partition_answer(leader, "ListOffsets", found, |p| p.error_code)?;
        Ok(found.offset)
    }

    /// Appends one encoded batch to partition `index` once it is durable (here: fsynced;
    /// elsewhere: acks=all): its base offset.
    pub(in crate::http) async fn append(
        &self,
        topic: &TopicReplicas,
        index: i32,
        batch: Bytes,
        now: i64,
    ) -> Result<i64, ApiError> {
        let leader = match self.partition_owner(topic, index)? {
            Owner::Here(partition) => {
                if !self.services.store.may_lead() {
                    return Err(ApiError::unavailable(
                        "this broker's cluster session has lapsed; retry",
                    ));
                }
                let unavailable =
                    |e: crate::replication::PartitionError| ApiError::unavailable(e.to_string());
                let info = partition.append(&batch, now).map_err(unavailable)?;
                partition
                    .wait_durable(info.last_offset)
                    .await
                    .map_err(unavailable)?;
                // (A leader elsewhere counts what it is sent, as for any producer.)
                let name = topic.spec.name.clone();
                metrics::counter!(m::TOPIC_BYTES_IN_TOTAL, "topic" => name.clone())
                    .increment(batch.len() as u64);
                metrics::counter!(m::TOPIC_MESSAGES_IN_TOTAL, "topic" => name).increment(1);
                return Ok(info.base_offset);
            }
            Owner::Broker(leader) => leader,
        };
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(PRODUCE_TIMEOUT_MS)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(topic_name(&topic.spec.name))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(index)
                    .with_records(Some(batch))])]);
        let response = self.ask(leader, request, 9).await?;
        let answer = response
            .responses
            .iter()
            .flat_map(|t| &t.partition_responses)
            .find(|p| p.index == index);
        let answer = partition_answer(leader, "Produce", answer, |p| p.error_code)?;
        Ok(answer.base_offset)
    }
}
