//! Committed offsets and group records as they are stored in the internal
//! `__consumer_offsets` topic, written through the same log code as user topics.
//!
//! Each record's key says what it is about and its value holds the latest state; a
//! null value (tombstone) deletes. Both are small JSON documents, e.g.
//! key `{"offset":{"group":"g","topic":"orders","partition":3}}`,
//! value `{"offset":42,"leader_epoch":0,"metadata":"","commit_timestamp":1700000000000}`;
//! key `{"group":{"group":"g"}}`, value `{"protocol_type":"consumer","generation_id":7}`.
//! Replaying a partition from its log start rebuilds the state of its groups.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::log::batch::testing::{encode_batch, TestRecord};

/// The internal topic holding committed offsets and group metadata.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub commit_timestamp: i64,
}

/// What survives of a group across restarts besides its offsets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    pub protocol_type: Option<String>,
    pub generation_id: i32,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
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
}

/// Encodes changes as one uncompressed record batch.
pub fn encode_changes(changes: &[Change], now_ms: i64) -> Result<Vec<u8>, serde_json::Error> {
    let mut records = Vec::with_capacity(changes.len());
    for change in changes {
        let (key, value) = match change {
            Change::Offset {
                group,
                topic,
                partition,
                value,
            } => (
                serde_json::to_vec(&RecordKey::Offset {
                    group: group.clone(),
                    topic: topic.clone(),
                    partition: *partition,
                })?,
                value.as_ref().map(serde_json::to_vec).transpose()?,
            ),
            Change::Group { group, value } => (
                serde_json::to_vec(&RecordKey::Group {
                    group: group.clone(),
                })?,
                value.as_ref().map(serde_json::to_vec).transpose()?,
            ),
        };
        records.push(TestRecord {
            key: Some(key),
            value,
            headers: Vec::new(),
            timestamp_delta: 0,
        });
    }
    Ok(encode_batch(&records, now_ms, (-1, -1, -1)))
}

/// The state of the groups in one offsets partition, rebuilt by replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplayedState {
    pub offsets: BTreeMap<String, BTreeMap<(String, i32), CommittedOffset>>,
    pub groups: BTreeMap<String, GroupRecord>,
}

impl ReplayedState {
    /// Applies one stored record; unreadable records are skipped (and counted).
    pub fn apply(&mut self, key: &[u8], value: Option<&[u8]>) -> bool {
        let Ok(key) = serde_json::from_slice::<RecordKey>(key) else {
            return false;
        };
        match key {
            RecordKey::Offset {
                group,
                topic,
                partition,
            } => match value {
                Some(v) => match serde_json::from_slice::<CommittedOffset>(v) {
                    Ok(offset) => {
                        self.offsets
                            .entry(group)
                            .or_default()
                            .insert((topic, partition), offset);
                    }
                    Err(_) => return false,
                },
                None => {
                    if let Some(offsets) = self.offsets.get_mut(&group) {
                        offsets.remove(&(topic, partition));
                    }
                }
            },
            RecordKey::Group { group } => match value {
                Some(v) => match serde_json::from_slice::<GroupRecord>(v) {
                    Ok(record) => {
                        self.groups.insert(group, record);
                    }
                    Err(_) => return false,
                },
                None => {
                    self.groups.remove(&group);
                    self.offsets.remove(&group);
                }
            },
        }
        true
    }
}

/// The offsets partition that owns `group_id`: Kafka's `abs(hashCode) % partitions`,
/// with Java's `String.hashCode` over UTF-16 code units, so a group lands on the same
/// partition number as in Apache Kafka.
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    let mut hash: i32 = 0;
    for unit in group_id.encode_utf16() {
        hash = hash.wrapping_mul(31).wrapping_add(i32::from(unit));
    }
    let positive = if hash == i32::MIN { 0 } else { hash.abs() };
    positive % partitions.max(1)
}

/// Topics a consumer-protocol member subscribes to, read from its JoinGroup metadata
/// (`ConsumerProtocolSubscription`: version i16, then an array of topic strings).
pub fn subscribed_topics(metadata: &[u8]) -> Vec<String> {
    let mut topics = Vec::new();
    let Some(count) = metadata
        .get(2..6)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    else {
        return topics;
    };
    let mut at = 6usize;
    for _ in 0..count.max(0) {
        let Some(len) = metadata
            .get(at..at + 2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
        else {
            break;
        };
        at += 2;
        let Ok(len) = usize::try_from(len) else { break };
        let Some(name) = metadata.get(at..at + len) else {
            break;
        };
        topics.push(String::from_utf8_lossy(name).into_owned());
        at += len;
    }
    topics
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::BatchHeader;

    #[test]
    fn changes_replay_to_the_latest_state() -> Result<(), Box<dyn std::error::Error>> {
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
                    }),
                },
            ],
            0,
        )?;
        let header = BatchHeader::parse_checked(&batch)?;
        let mut state = ReplayedState::default();
        for record in header.records().ok_or("uncompressed")? {
            assert!(state.apply(record.key.ok_or("key")?, record.value));
        }
        let g = &state.offsets["g"];
        assert_eq!(g.len(), 1);
        assert_eq!(g[&("t".to_string(), 0)].offset, 9);
        assert_eq!(state.groups["g"].generation_id, 3);
        Ok(())
    }

    #[test]
    fn group_partitions_match_kafkas_hashing() {
        let h = "my-group"
            .encode_utf16()
            .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32));
        assert_eq!(partition_for("my-group", 50), h.abs() % 50);
        assert!((0..50).contains(&partition_for("\u{1F600}", 50)));
    }

    #[test]
    fn reads_subscriptions_from_consumer_metadata() {
        let mut m = vec![0, 1, 0, 0, 0, 2];
        for t in ["a", "orders"] {
            m.extend_from_slice(&(t.len() as i16).to_be_bytes());
            m.extend_from_slice(t.as_bytes());
        }
        m.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(
            subscribed_topics(&m),
            vec!["a".to_string(), "orders".to_string()]
        );
        assert!(
            subscribed_topics(&[0, 1, 0x7f, 0xff, 0xff, 0xff]).is_empty(),
            "hostile count stops at the data"
        );
    }
}
