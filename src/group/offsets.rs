//! Committed offsets and group metadata as they are stored in the internal
//! `__consumer_offsets` topic, written through the same log code as user topics, in
//! Apache Kafka's record format, so tools that read the topic (lag exporters) work:
//!
//! ```text
//! offset key    i16 version=1, string group, string topic, i32 partition
//! offset value  i16 version=3, i64 offset, i32 leader_epoch, string metadata,
//!               i64 commit_timestamp                      (null value: deleted)
//! group key     i16 version=2, string group
//! group value   i16 version=3, string protocol_type, i32 generation,
//!               nullable string protocol, nullable string leader,
//!               i64 current_state_timestamp, array of members: string member_id,
//!               nullable string group_instance_id, string client_id,
//!               string client_host, i32 rebalance_timeout, i32 session_timeout,
//!               bytes subscription, bytes assignment      (null value: deleted)
//! ```
//! Strings are i16-length-prefixed, bytes i32-length-prefixed, arrays i32-counted.
//! KIP-848 consumer groups keep their state in record types 3 and 5–8
//! (`group::consumer::records`).
//! Older value versions (offset v0–v2, group v0–v2) are read too. Replaying a
//! partition from its log start rebuilds the state of its groups.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use crate::group::consumer::records as consumer_records;
use crate::group::share::records as share_records;
use crate::log::records::BatchBuilder;
use crate::wire::fields::{put_string, Reader};

pub use crate::model::OFFSETS_TOPIC;

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp: i64,
}

/// One member as a group record stores it: its subscription to the selected protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

/// A group's metadata after a rebalance: what a coordinator needs to carry on
/// without one after a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRecord {
    pub protocol_type: Option<String>,
    pub generation_id: i32,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub state_timestamp: i64,
    pub members: Vec<MemberRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
}

impl RecordKey {
    pub fn group(&self) -> &str {
        match self {
            RecordKey::Offset { group, .. } | RecordKey::Group { group } => group,
        }
    }
}

/// A change to write: a key with its new value, or `None` to delete.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    Offset {
        group: String,
        topic: String,
        partition: i32,
        value: Option<CommittedOffset>,
    },
    Group {
        group: String,
        value: Option<GroupRecord>,
    },
    /// A KIP-848 consumer group's record, encoded by `group::consumer::records`.
    Consumer {
        group: String,
        record: crate::group::consumer::records::Record,
    },
    /// A share-partition's state (`group::share::records`), or its deletion.
    ShareState {
        key: share_records::ShareKey,
        value: Option<share_records::ShareState>,
    },
}

fn put_nullable_string(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(out, s),
        None => out.put_i16(-1),
    }
}

fn put_bytes(out: &mut BytesMut, b: &[u8]) {
    out.put_i32(b.len() as i32);
    out.put_slice(b);
}

fn encode_key(key: &RecordKey) -> Vec<u8> {
    let mut out = BytesMut::new();
    match key {
        RecordKey::Offset {
            group,
            topic,
            partition,
        } => {
            out.put_i16(1);
            put_string(&mut out, group);
            put_string(&mut out, topic);
            out.put_i32(*partition);
        }
        RecordKey::Group { group } => {
            out.put_i16(2);
            put_string(&mut out, group);
        }
    }
    out.to_vec()
}

fn encode_offset(value: &CommittedOffset) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i16(3);
    out.put_i64(value.offset);
    out.put_i32(value.leader_epoch);
    put_string(&mut out, value.metadata.as_deref().unwrap_or(""));
    out.put_i64(value.commit_timestamp);
    out.to_vec()
}

fn encode_group(value: &GroupRecord) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i16(3);
    put_string(&mut out, value.protocol_type.as_deref().unwrap_or(""));
    out.put_i32(value.generation_id);
    put_nullable_string(&mut out, value.protocol_name.as_deref());
    put_nullable_string(&mut out, value.leader.as_deref());
    out.put_i64(value.state_timestamp);
    out.put_i32(value.members.len() as i32);
    for m in &value.members {
        put_string(&mut out, &m.member_id);
        put_nullable_string(&mut out, m.group_instance_id.as_deref());
        put_string(&mut out, &m.client_id);
        put_string(&mut out, &m.client_host);
        out.put_i32(m.rebalance_timeout_ms);
        out.put_i32(m.session_timeout_ms);
        put_bytes(&mut out, &m.subscription);
        put_bytes(&mut out, &m.assignment);
    }
    out.to_vec()
}

fn decode_key(raw: &[u8]) -> Option<RecordKey> {
    let mut r = Reader(raw);
    match r.i16()? {
        0 | 1 => Some(RecordKey::Offset {
            group: r.string()?,
            topic: r.string()?,
            partition: r.i32()?,
        }),
        2 => Some(RecordKey::Group { group: r.string()? }),
        _ => None,
    }
}

fn decode_offset(raw: &[u8]) -> Option<CommittedOffset> {
    let mut r = Reader(raw);
    let version = r.i16()?;
    let offset = r.i64()?;
    let leader_epoch = if version >= 3 { r.i32()? } else { -1 };
    let metadata = Some(r.string()?);
    let commit_timestamp = r.i64()?;
    Some(CommittedOffset {
        offset,
        leader_epoch,
        metadata,
        commit_timestamp,
    })
}

fn decode_group(raw: &[u8]) -> Option<GroupRecord> {
    let mut r = Reader(raw);
    let version = r.i16()?;
    let protocol_type = Some(r.string()?).filter(|t| !t.is_empty());
    let generation_id = r.i32()?;
    let protocol_name = r.nullable_string()?;
    let leader = r.nullable_string()?;
    let state_timestamp = if version >= 2 { r.i64()? } else { -1 };
    let count = r.i32()?.max(0) as usize;
    let mut members = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        let member_id = r.string()?;
        let group_instance_id = if version >= 3 {
            r.nullable_string()?
        } else {
            None
        };
        let client_id = r.string()?;
        let client_host = r.string()?;
        let rebalance_timeout_ms = if version >= 1 { r.i32()? } else { -1 };
        let session_timeout_ms = r.i32()?;
        let rebalance_timeout_ms = if rebalance_timeout_ms < 0 {
            session_timeout_ms
        } else {
            rebalance_timeout_ms
        };
        members.push(MemberRecord {
            member_id,
            group_instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            subscription: r.bytes()?,
            assignment: r.bytes()?,
        });
    }
    Some(GroupRecord {
        protocol_type,
        generation_id,
        protocol_name,
        leader,
        state_timestamp,
        members,
    })
}

/// Encodes changes as one uncompressed record batch.
pub fn encode_changes(changes: &[Change], now_ms: i64) -> Vec<u8> {
    encode_with(BatchBuilder::new(), changes, now_ms)
}

/// Encodes offsets committed in producer `producer_id`'s transaction: a transactional
/// batch with the producer's id and epoch and no sequence, as Kafka writes them, so
/// that the partition's producer state opens the transaction and the marker ends it.
pub fn encode_transactional_changes(
    changes: &[Change],
    now_ms: i64,
    producer_id: i64,
    producer_epoch: i16,
) -> Vec<u8> {
    let builder = BatchBuilder::new()
        .idempotent(producer_id, producer_epoch, -1)
        .with_attributes(crate::log::txn::TRANSACTIONAL_BIT);
    encode_with(builder, changes, now_ms)
}

fn encode_with(mut batch: BatchBuilder, changes: &[Change], now_ms: i64) -> Vec<u8> {
    for change in changes {
        let (key, value) = match change {
            Change::Offset {
                group,
                topic,
                partition,
                value,
            } => (
                encode_key(&RecordKey::Offset {
                    group: group.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                }),
                value.as_ref().map(encode_offset),
            ),
            Change::Group { group, value } => (
                encode_key(&RecordKey::Group {
                    group: group.clone(),
                }),
                value.as_ref().map(encode_group),
            ),
            Change::Consumer { record, .. } => record.clone(),
            Change::ShareState { key, value } => (
                share_records::encode_key(key),
                value.as_ref().map(share_records::encode_value),
            ),
        };
        batch.push(now_ms, Some(&key), value.as_deref(), &[]);
    }
    batch.build()
}

/// Offsets committed in one producer's open transaction, by group.
pub type PendingOffsets = BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>;

/// The state of the groups in one offsets partition, rebuilt by replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayedState {
    pub offsets: BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>,
    pub groups: BTreeMap<String, GroupRecord>,
    /// KIP-848 consumer groups (a group is one kind or the other: the kind written
    /// last wins).
    pub consumer: BTreeMap<String, consumer_records::Image>,
    /// Offsets of transactions with no marker yet, by producer id.
    pub pending: BTreeMap<i64, PendingOffsets>,
    /// Share-partitions' states (the last record of each).
    pub share: BTreeMap<share_records::ShareKey, share_records::ShareState>,
}

impl ReplayedState {
    /// Applies one record of producer `producer_id`'s transactional batch: held until
    /// its marker. Returns false for a record it cannot read.
    pub fn apply_transactional(
        &mut self,
        producer_id: i64,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> bool {
        match (decode_key(key), value.map(decode_offset)) {
            (
                Some(RecordKey::Offset {
                    group,
                    topic,
                    partition,
                }),
                Some(Some(offset)),
            ) => {
                self.pending
                    .entry(producer_id)
                    .or_default()
                    .entry(group)
                    .or_default()
                    .insert((topic, partition), offset);
                true
            }
            _ => false,
        }
    }

    /// A transaction marker: a commit makes the producer's pending offsets committed,
    /// an abort drops them.
    pub fn apply_marker(&mut self, producer_id: i64, commit: bool) {
        let Some(pending) = self.pending.remove(&producer_id) else {
            return;
        };
        if commit {
            for (group, offsets) in pending {
                self.offsets.entry(group).or_default().extend(offsets);
            }
        }
    }

    /// Applies one stored record; returns false for a record it cannot read.
    pub fn apply(&mut self, key: &[u8], value: Option<&[u8]>) -> bool {
        let Some(key) = decode_key(key) else {
            if let Some(share_key) = share_records::decode_key(key) {
                return self.apply_share(share_key, value);
            }
            return self.apply_consumer(key, value);
        };
        match key {
            RecordKey::Offset {
                group,
                topic,
                partition,
            } => match value {
                Some(v) => match decode_offset(v) {
                    Some(offset) => {
                        self.offsets
                            .entry(group)
                            .or_default()
                            .insert((topic, partition), offset);
                    }
                    None => return false,
                },
                None => {
                    if let Some(offsets) = self.offsets.get_mut(&group) {
                        offsets.remove(&(topic, partition));
                    }
                }
            },
            RecordKey::Group { group } => match value {
                Some(v) => match decode_group(v) {
                    Some(record) => {
                        self.consumer.remove(&group);
                        self.groups.insert(group, record);
                    }
                    None => return false,
                },
                None => {
                    self.groups.remove(&group);
                    self.offsets.remove(&group);
                    self.consumer.remove(&group);
                }
            },
        }
        true
    }

    fn apply_share(&mut self, key: share_records::ShareKey, value: Option<&[u8]>) -> bool {
        match value.map(share_records::decode_value) {
            Some(Some(state)) => {
                self.share.insert(key, state);
            }
            Some(None) => return false,
            None => {
                self.share.remove(&key);
            }
        }
        true
    }

    fn apply_consumer(&mut self, key: &[u8], value: Option<&[u8]>) -> bool {
        let Some(key) = consumer_records::decode_key(key) else {
            return false;
        };
        if key.kind == consumer_records::GROUP_EPOCH_KEY && value.is_some() {
            self.groups.remove(&key.group);
        }
        let image = self.consumer.entry(key.group.clone()).or_default();
        let applied = image.apply(&key, value);
        if *image == consumer_records::Image::default() {
            self.consumer.remove(&key.group);
        }
        applied
    }
}

/// The offsets partition that owns `group_id`: Kafka's `abs(hashCode) % partitions`,
/// with Java's `String.hashCode` over UTF-16 code units, so a group lands on the same
/// partition number as in Apache Kafka.
/// The broker coordinating `group_id`: the leader of its `__consumer_offsets`
/// partition, as the metadata store places it; `None` while there is none.
pub async fn coordinator_of(
    store: &dyn crate::cluster::MetadataStore,
    group_id: &str,
) -> Option<i32> {
    let spec = store.topic(OFFSETS_TOPIC).await?;
    store.leader_of(&spec, partition_for(group_id, spec.partitions))
}

pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    crate::model::coordinator_partition(group_id, partitions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::BatchHeader;

    #[test]
    fn changes_replay_to_the_latest_state() -> Result<(), Box<dyn std::error::Error>> {
        let member = MemberRecord {
            member_id: "m-1".into(),
            group_instance_id: Some("i-1".into()),
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 30_000,
            session_timeout_ms: 10_000,
            subscription: Bytes::from_static(b"sub"),
            assignment: Bytes::from_static(b"asg"),
        };
        let offset = |o| {
            Some(CommittedOffset {
                offset: o,
                leader_epoch: 0,
                metadata: Some("m".into()),
                commit_timestamp: 1,
            })
        };
        let batch = encode_changes(
            &[
                Change::Offset {
                    group: "g".into(),
                    topic: "t".into(),
                    partition: 0,
                    value: offset(5),
                },
                Change::Offset {
                    group: "g".into(),
                    topic: "t".into(),
                    partition: 0,
                    value: offset(9),
                },
                Change::Offset {
                    group: "g".into(),
                    topic: "t".into(),
                    partition: 1,
                    value: offset(1),
                },
                Change::Offset {
                    group: "g".into(),
                    topic: "t".into(),
                    partition: 1,
                    value: None,
                },
                Change::Group {
                    group: "g".into(),
                    value: Some(GroupRecord {
                        protocol_type: Some("consumer".into()),
                        generation_id: 3,
                        protocol_name: Some("range".into()),
                        leader: Some("m-1".into()),
                        state_timestamp: 5,
                        members: vec![member.clone()],
                    }),
                },
            ],
            0,
        );
        let header = BatchHeader::parse_checked(&batch)?;
        let mut state = ReplayedState::default();
        for record in header.records().ok_or("uncompressed")? {
            assert!(state.apply(record.key.ok_or("key")?, record.value));
        }
        let g = &state.offsets["g"];
        assert_eq!(g.len(), 1);
        assert_eq!(g[&("t".to_string(), 0)].offset, 9);
        assert_eq!(state.groups["g"].generation_id, 3);
        assert_eq!(state.groups["g"].members, vec![member]);
        Ok(())
    }

    #[test]
    fn keys_and_values_use_kafkas_layout() {
        let key = encode_key(&RecordKey::Offset {
            group: "g".into(),
            topic: "t".into(),
            partition: 7,
        });
        assert_eq!(key, vec![0, 1, 0, 1, b'g', 0, 1, b't', 0, 0, 0, 7]);
        let value = encode_offset(&CommittedOffset {
            offset: 42,
            leader_epoch: 2,
            metadata: Some("m".into()),
            commit_timestamp: 9,
        });
        assert_eq!(&value[..2], &[0, 3], "offset value v3");
        assert_eq!(decode_offset(&value).map(|o| o.offset), Some(42));
        // An offset value v1 (with expire timestamp) written by older Kafka still reads.
        let mut v1 = vec![0, 1];
        v1.extend_from_slice(&5i64.to_be_bytes());
        v1.extend_from_slice(&[0, 0]);
        v1.extend_from_slice(&1i64.to_be_bytes());
        v1.extend_from_slice(&2i64.to_be_bytes());
        assert_eq!(
            decode_offset(&v1).map(|o| (o.offset, o.leader_epoch)),
            Some((5, -1))
        );
        assert!(
            decode_group(&[0, 3, 0x7f]).is_none(),
            "truncated input is refused, not panicked on"
        );
    }

    #[test]
    fn group_partitions_match_kafkas_hashing() {
        let h = "my-group"
            .encode_utf16()
            .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
        assert_eq!(partition_for("my-group", 50), h.abs() % 50);
        assert!((0..50).contains(&partition_for("\u{1F600}", 50)));
    }
}
