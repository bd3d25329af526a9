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
use crate::log::txn::AbortedTxn;
use crate::metrics as m;
use crate::replication::{Acks, NotServed, Partition, TopicReplicas};

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
    /// OFFSET_OUT_OF_RANGE: the position lies below the log start (retention removed
    /// it) or past the log end (a log that moved without its data). Kafka's answer
    /// carries no offsets then, so the caller asks ListOffsets, as a Kafka client does.
    OutOfRange,
    Failed(ApiError),
}

/// Kafka's OFFSET_OUT_OF_RANGE error code.
const OFFSET_OUT_OF_RANGE: i16 = 1;
/// ListOffsets timestamps: the log end, and the log start.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;

use crate::limits::{
    HTTP_FORWARD_PRODUCE_TIMEOUT_MS as PRODUCE_TIMEOUT_MS, HTTP_READ_BYTES as READ_BYTES,
    HTTP_READ_BYTES_PER_MESSAGE, HTTP_READ_MIN_BYTES,
};

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
            Err(NotServed::NotLeader) => match self.services.store.leader_of(&topic.spec, index) {
                Some(leader) if leader != self.node_id() => Ok(Owner::Broker(leader)),
                _ => Err(ApiError::transient(format!(
                    "partition {index} of '{}' has no leader right now; retry",
                    topic.spec.name
                ))),
            },
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
                let offsets = partition.offsets();
                let log_start = offsets.log_start().0;
                let log_end = offsets.log_end().0;
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
    /// (retention removed it) is read again from the log start, as a local read does;
    /// one past the log end reads nothing yet.
    async fn fetch_from(
        &self,
        topic: &TopicReplicas,
        leader: i32,
        partitions: &[(i32, i64)],
        max: usize,
    ) -> Result<Vec<(i32, Result<PartitionRead, ApiError>)>, ApiError> {
        let mut found = self.fetch_once(topic, leader, partitions, max).await?;
        let out_of_range: Vec<i32> = found
            .iter()
            .filter(|(_, fetched)| matches!(fetched, Fetched::OutOfRange))
            .map(|&(index, _)| index)
            .collect();
        if !out_of_range.is_empty() {
            let starts = self
                .offsets_at(topic, leader, &out_of_range, EARLIEST)
                .await?;
            let expired: Vec<(i32, i64)> = partitions
                .iter()
                .filter_map(|&(index, from)| {
                    let start = *starts.get(&index)?;
                    (from < start).then_some((index, start))
                })
                .collect();
            found.retain(|(index, _)| !expired.iter().any(|(i, _)| i == index));
            found.extend(self.fetch_once(topic, leader, &expired, max).await?);
        }
        Ok(found
            .into_iter()
            .map(|(index, fetched)| {
                let from = partitions.iter().find(|p| p.0 == index).map_or(0, |p| p.1);
                let read = match fetched {
                    Fetched::Read(read) => Ok(read),
                    Fetched::Failed(error) => Err(error),
                    // Past the log end, or retention racing this read: nothing now.
                    Fetched::OutOfRange => Ok(PartitionRead {
                        read: Read {
                            messages: Vec::new(),
                            next: from,
                        },
                        log_start: -1,
                        log_end: -1,
                    }),
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
        let budget = (max.saturating_mul(HTTP_READ_BYTES_PER_MESSAGE))
            .clamp(HTTP_READ_MIN_BYTES, READ_BYTES as usize) as i32;
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(budget)
            .with_isolation_level(1)
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
                    // Sorted out by the caller.
                    if p.error_code == OFFSET_OUT_OF_RANGE {
                        0
                    } else {
                        p.error_code
                    }
                });
                let fetched = match answer {
                    Ok(p) if p.error_code == OFFSET_OUT_OF_RANGE => Fetched::OutOfRange,
                    Ok(p) => {
                        let from = from.max(p.log_start_offset);
                        let label = format!("{}-{index}", topic.spec.name);
                        let read = match &p.records {
                            Some(bytes) => {
                                let aborted = p
                                    .aborted_transactions
                                    .iter()
                                    .flatten()
                                    .map(|t| AbortedTxn {
                                        producer_id: t.producer_id.0,
                                        first_offset: t.first_offset,
                                        last_offset: i64::MAX,
                                    })
                                    .collect();
                                parse_messages(bytes, aborted, from, max, &label)
                            }
                            None => Read {
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
            Owner::Here(partition) => return Ok(partition.offsets().log_end().0),
            Owner::Broker(leader) => leader,
        };
        let found = self.offsets_at(topic, leader, &[index], LATEST).await?;
        found
            .get(&index)
            .copied()
            .ok_or_else(|| remote_error(leader, "ListOffsets", -1))
    }

    /// ListOffsets of `partitions` at `timestamp` ([`LATEST`] or [`EARLIEST`]) from
    /// broker `leader`; fails on the first partition it answers with an error.
    async fn offsets_at(
        &self,
        topic: &TopicReplicas,
        leader: i32,
        partitions: &[i32],
        timestamp: i64,
    ) -> Result<BTreeMap<i32, i64>, ApiError> {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(topic_name(&topic.spec.name))
                .with_partitions(
                    partitions
                        .iter()
                        .map(|&index| {
                            ListOffsetsPartition::default()
                                .with_partition_index(index)
                                .with_current_leader_epoch(-1)
                                .with_timestamp(timestamp)
                        })
                        .collect(),
                )]);
        let response = self.ask(leader, request, 7).await?;
        response
            .topics
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| {
                let p = partition_answer(leader, "ListOffsets", Some(p), |p| p.error_code)?;
                Ok((p.partition_index, p.offset))
            })
            .collect()
    }

    /// Appends one encoded batch to partition `index` and returns its base offset once
    /// it is acknowledged as acks=all (here through `Partition::write`, elsewhere by a
    /// Produce to the leader): the one write path, whichever broker answers.
    pub(in crate::http) async fn append(
        &self,
        topic: &TopicReplicas,
        index: i32,
        batch: Bytes,
        now: i64,
    ) -> Result<i64, ApiError> {
        let leader = match self.partition_owner(topic, index)? {
            Owner::Here(partition) => {
                let publish_timeout = std::time::Duration::from_millis(PRODUCE_TIMEOUT_MS as u64);
                let info = partition
                    .write(&batch, now, Acks::All, publish_timeout)
                    .await
                    .map_err(|e| ApiError::from(&e))?;
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
