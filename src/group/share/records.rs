//! A share-partition's durable state as the group's coordinator stores it in
//! `__consumer_offsets`, one record per share-partition (compaction keeps the last):
//!
//! ```text
//! key    i16 version=SHARE_STATE_KEY, string group, uuid topic_id, i32 partition
//! value  i16 version=0, i32 state_epoch, i32 leader_epoch, i64 start_offset,
//!        i32 count, count × (i64 first, i64 last, i8 delivery_state, i16 delivery_count)
//!        (null value: the state is deleted)
//! ```
//!
//! Kafka keeps this in its own `__share_group_state` topic behind a share
//! coordinator; tern keeps it with the group's other records, so the coordinator that
//! already replays the group after a failover replays its share state too. The value
//! carries what Kafka's `ShareSnapshotValue` carries. The key version is tern's own,
//! far from Kafka's record types (0–16), so the two never meet.

use bytes::{BufMut, BytesMut};
use uuid::Uuid;

use super::partition::{DeliveryState, Snapshot, StateBatch};
use crate::wire::fields::{put_string, Reader};

/// The key version of a share-state record.
pub const SHARE_STATE_KEY: i16 = 0x7E00;

/// The batches a value may hold: far more than a share-partition keeps in flight.
const MAX_BATCHES: usize = 1 << 20;

/// Which share-partition a record is about.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShareKey {
    pub group: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

/// One share-partition's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareState {
    /// Bumped when an operator resets or deletes the start offset.
    pub state_epoch: i32,
    /// The leader epoch of the partition leader that wrote it: an older leader's
    /// write is fenced.
    pub leader_epoch: i32,
    pub snapshot: Snapshot,
}

pub fn encode_key(key: &ShareKey) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i16(SHARE_STATE_KEY);
    put_string(&mut out, &key.group);
    out.put_slice(key.topic_id.as_bytes());
    out.put_i32(key.partition);
    out.to_vec()
}

pub fn encode_value(state: &ShareState) -> Vec<u8> {
    let batches = &state.snapshot.batches;
    let mut out = BytesMut::with_capacity(26 + batches.len() * 19);
    out.put_i16(0);
    out.put_i32(state.state_epoch);
    out.put_i32(state.leader_epoch);
    out.put_i64(state.snapshot.start_offset);
    out.put_i32(batches.len() as i32);
    for batch in batches {
        out.put_i64(batch.first);
        out.put_i64(batch.last);
        out.put_i8(batch.state.id());
        out.put_i16(batch.delivery_count);
    }
    out.to_vec()
}

/// The key of a share-state record; `None` for any other record.
pub fn decode_key(raw: &[u8]) -> Option<ShareKey> {
    let mut r = Reader(raw);
    if r.i16()? != SHARE_STATE_KEY {
        return None;
    }
    Some(ShareKey {
        group: r.string()?,
        topic_id: r.uuid()?,
        partition: r.i32()?,
    })
}

pub fn decode_value(raw: &[u8]) -> Option<ShareState> {
    let mut r = Reader(raw);
    if r.i16()? != 0 {
        return None;
    }
    let state_epoch = r.i32()?;
    let leader_epoch = r.i32()?;
    let start_offset = r.i64()?;
    let count = usize::try_from(r.i32()?).ok()?;
    if count > MAX_BATCHES {
        return None;
    }
    let mut batches = Vec::with_capacity(count.min(1024));
    for _ in 0..count {
        batches.push(StateBatch {
            first: r.i64()?,
            last: r.i64()?,
            state: DeliveryState::from_id(r.i8()?)?,
            delivery_count: r.i16()?,
        });
    }
    Some(ShareState {
        state_epoch,
        leader_epoch,
        snapshot: Snapshot {
            start_offset,
            batches,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_round_trips_and_other_keys_are_not_share_keys() {
        let key = ShareKey {
            group: "g".into(),
            topic_id: Uuid::from_u128(9),
            partition: 3,
        };
        assert_eq!(decode_key(&encode_key(&key)), Some(key));
        let state = ShareState {
            state_epoch: 2,
            leader_epoch: 7,
            snapshot: Snapshot {
                start_offset: 10,
                batches: vec![StateBatch {
                    first: 10,
                    last: 12,
                    state: DeliveryState::Available,
                    delivery_count: 2,
                }],
            },
        };
        assert_eq!(decode_value(&encode_value(&state)), Some(state.clone()));
        let encoded = encode_value(&state);
        assert_eq!(decode_value(&encoded[..encoded.len() - 1]), None);
        assert_eq!(decode_key(&[0, 1, 0, 1, b'g']), None);
    }
}
