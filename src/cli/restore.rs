//! `tern archive restore`: archived records produced back to each partition's leader,
//! `acks=all`, exactly once.
//!
//! Each record goes to the partition number it came from, in offset order, one batch in
//! flight per partition, from an idempotent producer (InitProducerId, then sequence
//! numbers): a batch retried after a lost answer or a leader change is answered with
//! its first append's offsets instead of written again (Kafka's idempotence).
//!
//! A second run of the same restore (same topic, target and selection) must not write
//! again what the first one wrote. The progress is committed, after every acknowledged
//! batch, as the offsets of the group `tern-restore.<target>.<hash of the selection>`
//! on the target topic: the committed offset is the next *archived* offset to restore
//! to that partition, and the metadata names the producer (id, epoch), its next
//! sequence and the target offset the next batch will land at or after. So the commit
//! says: everything before the offset is in place, and at most one batch after it may
//! be too (the one in flight when a run ended), written by that producer with that
//! sequence. A run first looks for that batch among the target's batches from the
//! committed target offset on, by producer id, epoch and base sequence; if it is there
//! its records are skipped. A run commits its own producer before its first batch, so
//! the one batch in question is always named by the last commit. The same check runs
//! when the leader forgot the producer in the middle of a run (an out-of-order or
//! unknown-producer answer: restored records carry old timestamps, and producer state
//! expires by record time, as in Kafka).
//!
//! Restoring into the archived source topic itself is refused: the restored records
//! would get new offsets there and be archived a second time.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    DescribeConfigsRequest, FetchRequest, FindCoordinatorRequest, GroupId, InitProducerIdRequest,
    OffsetCommitRequest, OffsetFetchRequest, ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;

use super::client::Client;
use super::commands::Connection;
use super::output;
use crate::archive::manifest::Manifest;
use crate::archive::parquet::{read_object, ArchivedRecord};
use crate::archive::Archive;
use crate::log::batch::BatchHeader;
use crate::log::records::BatchBuilder;

/// Which archived records a restore takes.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    pub from_offset: i64,
    pub from_time: Option<i64>,
    /// Inclusive.
    pub to_offset: i64,
}

impl Range {
    fn takes(&self, record: &ArchivedRecord) -> bool {
        record.offset >= self.from_offset
            && record.offset <= self.to_offset
            && self.from_time.is_none_or(|t| record.timestamp >= t)
    }
}

/// Records per produced batch, and its most bytes of keys and values.
const BATCH_RECORDS: usize = 500;
const BATCH_BYTES: usize = 512 * 1024;

/// Kafka's retriable errors a restore waits out: NOT_LEADER_OR_FOLLOWER,
/// LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT,
/// UNKNOWN_TOPIC_OR_PARTITION (metadata still spreading), and the coordinator's
/// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR.
const RETRIABLE: &[i16] = &[6, 5, 19, 20, 7, 3, 14, 15, 16];
/// OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID: the leader has no state (left)
/// for this producer.
const PRODUCER_FORGOTTEN: &[i16] = &[45, 59];
const ATTEMPTS: u32 = 20;
const RETRY_PAUSE: Duration = Duration::from_millis(250);

pub async fn restore(
    connection: &Connection,
    archive: &Archive,
    topic: &str,
    target: &str,
    only: Option<i32>,
    range: Range,
) -> anyhow::Result<()> {
    let mut bootstrap = super::client::connect(connection).await?;
    if target == topic && archive_enabled(&mut bootstrap, topic).await? {
        bail!(
            "{topic} has archive.enable=true: records restored into it would get new offsets and be archived a second time; restore into another topic (--to-topic)"
        );
    }
    let group = progress_group(topic, target, only, range);
    let mut producer = Producer::connect(bootstrap, target, &group).await?;
    let mut restored: BTreeMap<i32, u64> = BTreeMap::new();
    let mut skipped = 0u64;
    for manifest in manifests(archive, topic, only).await? {
        let partition = manifest.partition;
        let count = restored.entry(partition).or_default();
        // Where the last run of this restore got to, and the one batch it may have
        // written past its last commit.
        let mut at = producer.progress(partition).await?;
        let mut skip = 0;
        if let Some(progress) = at.as_mut() {
            if let Some((base, records)) = producer.find_batch(partition, progress).await? {
                skip = records;
                progress.target_offset = base + records as i64;
            }
        }
        let next = at.as_ref().map_or(range.from_offset, |p| p.next_offset);
        let mut committed_own = false;
        let mut skipped_here = 0;
        for entry in manifest.from(next.max(range.from_offset), range.from_time) {
            if entry.first_offset > range.to_offset {
                break;
            }
            let object = archive
                .get(&entry.path)
                .await
                .with_context(|| format!("reading {}", entry.path))?;
            let mut records: Vec<ArchivedRecord> = read_object(object)?
                .into_iter()
                .filter(|r| r.offset >= next && range.takes(r))
                .collect();
            let landed = skip.min(records.len());
            let last_landed = landed.checked_sub(1).and_then(|i| records.get(i));
            if let (Some(last), Some(progress)) = (last_landed, at.as_mut()) {
                progress.next_offset = last.offset + 1;
            }
            records.drain(..landed);
            skip -= landed;
            skipped_here += landed;
            for chunk in chunks(&records) {
                if !committed_own {
                    // Before this run's first batch: the commit must name the producer
                    // whose batch may be in flight, or a later run could not find it.
                    let mut progress = at.clone().unwrap_or(Progress {
                        next_offset: range.from_offset,
                        target_offset: -1,
                        ..Progress::default()
                    });
                    producer.adopt(partition, &mut progress).await?;
                    producer.commit(partition, &progress).await?;
                    at = Some(progress);
                    committed_own = true;
                }
                let Some(progress) = at.as_mut() else {
                    bail!("no progress for {target}-{partition}");
                };
                producer.produce(partition, chunk, progress).await?;
                producer.commit(partition, progress).await?;
                *count += chunk.len() as u64;
            }
        }
        skipped += skipped_here as u64;
        if let Some(progress) = at.as_mut().filter(|_| !committed_own && skipped_here > 0) {
            // Only records an earlier run wrote: record that they are in place.
            producer.adopt(partition, progress).await?;
            producer.commit(partition, progress).await?;
        }
    }
    let total: u64 = restored.values().sum();
    if connection.json {
        let partitions: BTreeMap<String, u64> =
            restored.iter().map(|(p, n)| (p.to_string(), *n)).collect();
        output::json(&json!({
            "restored": total,
            "partitions": partitions,
            "already_restored": skipped,
            "progress_group": group,
        }))
    } else {
        println!("restored {total} records into {target}");
        Ok(())
    }
}

/// The group whose offsets hold a restore's progress: named after the target and a
/// hash of what is restored (FNV-1a, stable across builds), so the same restore finds
/// it again and another selection does not.
fn progress_group(topic: &str, target: &str, only: Option<i32>, range: Range) -> String {
    let selection = format!(
        "{topic}\0{}\0{}\0{}\0{}",
        only.map_or(String::new(), |p| p.to_string()),
        range.from_offset,
        range.from_time.map_or(String::new(), |t| t.to_string()),
        range.to_offset
    );
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in selection.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("tern-restore.{target}.{hash:016x}")
}

/// Whether `topic` has `archive.enable=true`.
async fn archive_enabled(client: &mut Client, topic: &str) -> anyhow::Result<bool> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_string()))
            .with_configuration_keys(Some(vec![StrBytes::from_static_str("archive.enable")]))]);
    let (_, described) = client.send(request, 4).await?;
    Ok(described
        .results
        .iter()
        .flat_map(|r| r.configs.iter())
        .any(|c| c.name.as_str() == "archive.enable" && c.value.as_deref() == Some("true")))
}

/// One partition's committed progress (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Progress {
    /// The next archived offset to restore.
    next_offset: i64,
    producer_id: i64,
    producer_epoch: i16,
    /// The base sequence of the producer's next batch.
    sequence: i32,
    /// The target offset that batch lands at or after.
    target_offset: i64,
}

impl Progress {
    fn metadata(&self) -> String {
        format!(
            "tern-restore-v1 producer_id={} producer_epoch={} sequence={} target_offset={}",
            self.producer_id, self.producer_epoch, self.sequence, self.target_offset
        )
    }

    fn parse(next_offset: i64, metadata: &str) -> Option<Self> {
        // confluent-kafka (Python) commits metadata with its C string's terminating NUL:
        // an operator who moved the progress with it must not make it unreadable.
        let mut words = metadata.trim_end_matches('\0').split(' ');
        if words.next()? != "tern-restore-v1" {
            return None;
        }
        let mut field = |name: &str| -> Option<i64> {
            let (key, value) = words.next()?.split_once('=')?;
            (key == name).then(|| value.parse().ok()).flatten()
        };
        Some(Self {
            next_offset,
            producer_id: field("producer_id")?,
            producer_epoch: i16::try_from(field("producer_epoch")?).ok()?,
            sequence: i32::try_from(field("sequence")?).ok()?,
            target_offset: field("target_offset")?,
        })
    }
}

/// The records as produce batches: CreateTime, each batch's base timestamp its
/// earliest record's.
fn chunks(records: &[ArchivedRecord]) -> Vec<&[ArchivedRecord]> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < records.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < records.len()
            && end - start < BATCH_RECORDS
            && (bytes < BATCH_BYTES || end == start)
        {
            let r = &records[end];
            bytes += r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len);
            end += 1;
        }
        out.push(&records[start..end]);
        start = end;
    }
    out
}

/// One batch of archived records, as the original producer wrote them (key, value,
/// headers, timestamp), under the restore's idempotent producer.
fn encode(chunk: &[ArchivedRecord], producer: (i64, i16, i32)) -> Bytes {
    let base = chunk.iter().map(|r| r.timestamp).min().unwrap_or(0);
    let mut builder = BatchBuilder::new()
        .with_base_timestamp(base)
        .idempotent(producer.0, producer.1, producer.2);
    for record in chunk {
        builder.push_owned(
            record.timestamp,
            record.key.as_deref(),
            record.value.as_deref(),
            &record.headers,
        );
    }
    Bytes::from(builder.build())
}

/// An idempotent producer to the leaders of one topic's partitions (found again after
/// a leadership change), and the coordinator of the progress group.
struct Producer {
    bootstrap: Client,
    topic: String,
    group: String,
    producer_id: i64,
    producer_epoch: i16,
    leaders: HashMap<i32, Client>,
    coordinator: Option<Client>,
}

impl Producer {
    async fn connect(mut bootstrap: Client, topic: &str, group: &str) -> anyhow::Result<Self> {
        let (producer_id, producer_epoch) = init_producer_id(&mut bootstrap).await?;
        Ok(Self {
            bootstrap,
            topic: topic.to_string(),
            group: group.to_string(),
            producer_id,
            producer_epoch,
            leaders: HashMap::new(),
            coordinator: None,
        })
    }

    /// Makes `progress` name this producer for its next batch, which lands at or after
    /// `progress.target_offset` (or, for a first commit, the partition's high watermark).
    async fn adopt(&mut self, partition: i32, progress: &mut Progress) -> anyhow::Result<()> {
        progress.producer_id = self.producer_id;
        progress.producer_epoch = self.producer_epoch;
        progress.sequence = 0;
        if progress.target_offset < 0 {
            let ends = super::client::offsets_from_leaders(
                &mut self.bootstrap,
                &self.topic,
                &[partition],
                -1,
            )
            .await?;
            progress.target_offset = *ends
                .get(&partition)
                .with_context(|| format!("no offsets for {}-{partition}", self.topic))?;
        }
        Ok(())
    }

    async fn leader(&mut self, partition: i32) -> anyhow::Result<&mut Client> {
        if !self.leaders.contains_key(&partition) {
            let leaders = super::client::leaders(&mut self.bootstrap, &self.topic)
                .await?
                .with_context(|| format!("topic {} does not exist", self.topic))?;
            let address = leaders
                .get(&partition)
                .with_context(|| format!("{}-{partition} has no leader now", self.topic))?;
            let client = self.bootstrap.sibling(address).await?;
            self.leaders.insert(partition, client);
        }
        self.leaders
            .get_mut(&partition)
            .context("leader connection")
    }

    async fn coordinator(&mut self) -> anyhow::Result<&mut Client> {
        if self.coordinator.is_none() {
            let request = FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(self.group.clone()))
                .with_key_type(0);
            let (_, found) = self.bootstrap.send(request, 3).await?;
            if found.error_code != 0 {
                bail!(
                    "finding the coordinator of {} failed with Kafka error {}",
                    self.group,
                    found.error_code
                );
            }
            let address = format!("{}:{}", found.host, found.port);
            self.coordinator = Some(self.bootstrap.sibling(&address).await?);
        }
        self.coordinator.as_mut().context("coordinator connection")
    }

    /// The committed progress of `partition`, if a run of this restore committed one.
    async fn progress(&mut self, partition: i32) -> anyhow::Result<Option<Progress>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = OffsetFetchRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
                .with_topics(Some(vec![OffsetFetchRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_string(self.topic.clone())))
                    .with_partition_indexes(vec![partition])]));
            let answer = self.coordinator().await?.send(request, 7).await;
            let (code, found) = match answer {
                Ok((_, response)) => {
                    let found = response
                        .topics
                        .iter()
                        .flat_map(|t| t.partitions.iter())
                        .find(|p| p.partition_index == partition)
                        .map(|p| {
                            (
                                p.error_code,
                                p.committed_offset,
                                p.metadata.as_deref().unwrap_or("").to_string(),
                            )
                        });
                    match found {
                        Some((0, offset, metadata)) if response.error_code == 0 => {
                            (0, (offset >= 0).then_some((offset, metadata)))
                        }
                        Some((code, ..)) if code != 0 => (code, None),
                        _ => (response.error_code, None),
                    }
                }
                Err(_) => (15, None),
            };
            match code {
                0 => {
                    return match found {
                        None => Ok(None),
                        Some((offset, metadata)) => Progress::parse(offset, &metadata)
                            .map(Some)
                            .with_context(|| {
                                format!(
                                    "group {} holds no restore progress: {metadata:?}",
                                    self.group
                                )
                            }),
                    }
                }
                c if RETRIABLE.contains(&c) && attempt < ATTEMPTS => {
                    self.coordinator = None;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                c => bail!(
                    "fetching the progress of {} failed with Kafka error {c}",
                    self.group
                ),
            }
        }
    }

    async fn commit(&mut self, partition: i32, progress: &Progress) -> anyhow::Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = OffsetCommitRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(self.group.clone())))
                .with_generation_id_or_member_epoch(-1)
                .with_member_id(StrBytes::default())
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(TopicName(StrBytes::from_string(self.topic.clone())))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(partition)
                        .with_committed_offset(progress.next_offset)
                        .with_committed_metadata(Some(StrBytes::from_string(
                            progress.metadata(),
                        )))])]);
            let answer = self.coordinator().await?.send(request, 8).await;
            let code = match answer {
                Ok((_, response)) => response
                    .topics
                    .iter()
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| p.partition_index == partition)
                    .map_or(-1, |p| p.error_code),
                Err(_) => 15,
            };
            match code {
                0 => return Ok(()),
                c if RETRIABLE.contains(&c) && attempt < ATTEMPTS => {
                    self.coordinator = None;
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                c => bail!(
                    "committing the progress of {} failed with Kafka error {c}",
                    self.group
                ),
            }
        }
    }

    /// Produces `chunk` as the next batch of `progress`'s producer and advances
    /// `progress` past it (not yet committed).
    async fn produce(
        &mut self,
        partition: i32,
        chunk: &[ArchivedRecord],
        progress: &mut Progress,
    ) -> anyhow::Result<()> {
        let count = i32::try_from(chunk.len()).context("batch too large")?;
        let Some(last) = chunk.last() else {
            return Ok(());
        };
        let mut attempt = 0;
        let base_offset = loop {
            attempt += 1;
            let batch = encode(
                chunk,
                (
                    progress.producer_id,
                    progress.producer_epoch,
                    progress.sequence,
                ),
            );
            let request = ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(self.topic.clone())))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(batch))])]);
            let answer = self.leader(partition).await?.send(request, 9).await;
            let (code, base_offset) = match answer {
                Ok((_, response)) => response
                    .responses
                    .iter()
                    .flat_map(|t| t.partition_responses.iter())
                    .find(|p| p.index == partition)
                    .map_or((-1, -1), |p| (p.error_code, p.base_offset)),
                Err(_) => (6, -1),
            };
            match code {
                0 => break base_offset,
                c if PRODUCER_FORGOTTEN.contains(&c) && attempt < ATTEMPTS => {
                    // The leader forgot this producer: whether an earlier attempt of
                    // this batch landed is read from the target itself; if not, a new
                    // producer (committed first) sends it again.
                    if let Some((base, _)) = self.find_batch(partition, progress).await? {
                        break base;
                    }
                    let (id, epoch) = init_producer_id(&mut self.bootstrap).await?;
                    (self.producer_id, self.producer_epoch) = (id, epoch);
                    self.adopt(partition, progress).await?;
                    self.commit(partition, progress).await?;
                }
                c if RETRIABLE.contains(&c) && attempt < ATTEMPTS => {
                    self.leaders.remove(&partition);
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                c => bail!(
                    "producing to {}-{partition} failed with Kafka error {c}",
                    self.topic
                ),
            }
        };
        progress.next_offset = last.offset + 1;
        progress.sequence = progress.sequence.wrapping_add(count) & i32::MAX;
        progress.target_offset = base_offset + i64::from(count);
        Ok(())
    }

    /// The base offset and record count of the batch with `progress`'s producer id,
    /// epoch and base sequence in the target partition, read from `progress`'s target
    /// offset to the high watermark.
    async fn find_batch(
        &mut self,
        partition: i32,
        progress: &Progress,
    ) -> anyhow::Result<Option<(i64, usize)>> {
        if progress.producer_id < 0 {
            return Ok(None);
        }
        let mut offset = progress.target_offset;
        let mut attempt = 0;
        loop {
            let request = FetchRequest::default()
                .with_max_wait_ms(0)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(self.topic.clone())))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20)])]);
            let answer = self.leader(partition).await?.send(request, 12).await;
            let data = match answer {
                Ok((_, response)) => response
                    .responses
                    .into_iter()
                    .flat_map(|t| t.partitions)
                    .find(|p| p.partition_index == partition),
                Err(_) => None,
            };
            let Some(data) = data.filter(|d| d.error_code == 0) else {
                attempt += 1;
                if attempt >= ATTEMPTS {
                    bail!(
                        "reading {}-{partition} from offset {offset} to find the last batch of an earlier restore failed",
                        self.topic
                    );
                }
                self.leaders.remove(&partition);
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            };
            if offset >= data.high_watermark {
                return Ok(None);
            }
            let records = data.records.unwrap_or_default();
            let mut rest: &[u8] = &records;
            let mut progressed = false;
            while let Ok(header) = BatchHeader::parse(rest) {
                if header.producer_id() == progress.producer_id
                    && header.producer_epoch() == progress.producer_epoch
                    && header.base_sequence() == progress.sequence
                {
                    let count = usize::try_from(header.record_count()).unwrap_or(0);
                    return Ok(Some((header.base_offset(), count)));
                }
                offset = offset.max(header.last_offset() + 1);
                progressed = true;
                rest = &rest[header.total_bytes()..];
            }
            if !progressed {
                bail!(
                    "{}-{partition}: no whole batch at offset {offset} below the high watermark {}",
                    self.topic,
                    data.high_watermark
                );
            }
        }
    }
}

/// A new idempotent producer id and epoch.
async fn init_producer_id(client: &mut Client) -> anyhow::Result<(i64, i16)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let request = InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(-1);
        let (_, response) = client.send(request, 4).await?;
        match response.error_code {
            0 => return Ok((response.producer_id.0, response.producer_epoch)),
            c if RETRIABLE.contains(&c) && attempt < ATTEMPTS => {
                tokio::time::sleep(RETRY_PAUSE).await
            }
            c => bail!("InitProducerId failed with Kafka error {c}"),
        }
    }
}

/// The manifests of `topic`'s archived partitions (all, or only `only`).
pub(super) async fn manifests(
    archive: &Archive,
    topic: &str,
    only: Option<i32>,
) -> anyhow::Result<Vec<Manifest>> {
    let mut out = Vec::new();
    for partition in archive.partitions(topic).await? {
        if only.is_none_or(|p| p == partition) {
            out.push(archive.manifest(topic, partition).await?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_round_trips_through_commit_metadata() {
        let progress = Progress {
            next_offset: 42,
            producer_id: 7,
            producer_epoch: 1,
            sequence: 500,
            target_offset: 1000,
        };
        assert_eq!(
            Progress::parse(42, &progress.metadata()),
            Some(progress.clone())
        );
        let with_nul = format!("{}\0", progress.metadata());
        assert_eq!(Progress::parse(42, &with_nul), Some(progress));
        assert_eq!(Progress::parse(42, ""), None);
        assert_eq!(Progress::parse(42, "tern-restore-v1 producer_id=x"), None);
    }

    #[test]
    fn the_progress_group_names_the_selection() {
        let range = Range {
            from_offset: 0,
            from_time: None,
            to_offset: i64::MAX,
        };
        let group = progress_group("t", "u", None, range);
        assert_eq!(group, progress_group("t", "u", None, range));
        assert!(group.starts_with("tern-restore.u."));
        assert_ne!(group, progress_group("t", "u", Some(0), range));
        let later = Range {
            from_offset: 1,
            ..range
        };
        assert_ne!(group, progress_group("t", "u", None, later));
    }
}
