//! The `__transaction_state` record format, Kafka's (`TransactionLogKey` v0 and
//! `TransactionLogValue` v0): one record per transactional id, keyed by the id, so that
//! compaction keeps each id's newest state; a null value (a tombstone) forgets an
//! expired id.
//!
//! ```text
//! key   version: i16 = 0, transactional_id: string
//! value version: i16 = 0, producer_id: i64, producer_epoch: i16, timeout_ms: i32,
//!       state: i8, partitions: [topic: string, partition_ids: [i32]] (nullable),
//!       last_update_ms: i64, start_ms: i64
//! ```
//!
//! Kafka 4 writes value v1 (flexible, with tagged fields for transaction version 2);
//! tern writes v0, which Kafka reads too, and reads both.

use std::collections::{BTreeMap, BTreeSet};

use super::state::{TxnMetadata, TxnState, NO_EPOCH};
use crate::model::{ProducerEpoch, ProducerId, TopicPartition};

pub fn encode_key(transactional_id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + transactional_id.len());
    out.extend_from_slice(&0i16.to_be_bytes());
    put_string(&mut out, transactional_id);
    out
}

pub fn encode_value(meta: &TxnMetadata) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&0i16.to_be_bytes());
    out.extend_from_slice(&meta.producer_id.0.to_be_bytes());
    out.extend_from_slice(&meta.producer_epoch.0.to_be_bytes());
    out.extend_from_slice(&meta.timeout_ms.to_be_bytes());
    out.push(meta.state.wire() as u8);
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in &meta.partitions {
        by_topic.entry(&tp.topic).or_default().push(tp.partition);
    }
    out.extend_from_slice(&(by_topic.len() as i32).to_be_bytes());
    for (topic, partitions) in by_topic {
        put_string(&mut out, topic);
        out.extend_from_slice(&(partitions.len() as i32).to_be_bytes());
        for p in partitions {
            out.extend_from_slice(&p.to_be_bytes());
        }
    }
    out.extend_from_slice(&meta.last_update_ms.to_be_bytes());
    out.extend_from_slice(&meta.start_ms.to_be_bytes());
    out
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.extend_from_slice(&(bytes.len().min(i16::MAX as usize) as i16).to_be_bytes());
    out.extend_from_slice(&bytes[..bytes.len().min(i16::MAX as usize)]);
}

/// The transactional id of a key; `None` for a key tern does not know.
pub fn decode_key(key: &[u8]) -> Option<String> {
    let mut r = Reader(key);
    if r.i16()? != 0 {
        return None;
    }
    r.string()
}

/// A value (v0 or v1); `None` when it is malformed.
pub fn decode_value(value: &[u8]) -> Option<TxnMetadata> {
    let mut r = Reader(value);
    let version = r.i16()?;
    let flexible = match version {
        0 => false,
        1 => true,
        _ => return None,
    };
    let producer_id = ProducerId(r.i64()?);
    let producer_epoch = ProducerEpoch(r.i16()?);
    let timeout_ms = r.i32()?;
    let state = TxnState::from_wire(r.i8()?)?;
    let mut partitions = BTreeSet::new();
    let topics = if flexible { r.compact_len()? } else { r.len()? };
    for _ in 0..topics {
        let topic = if flexible {
            r.compact_string()?
        } else {
            r.string()?
        };
        let count = if flexible { r.compact_len()? } else { r.len()? };
        for _ in 0..count {
            partitions.insert(TopicPartition::new(topic.clone(), r.i32()?));
        }
        if flexible {
            r.skip_tags()?;
        }
    }
    let last_update_ms = r.i64()?;
    let start_ms = r.i64()?;
    Some(TxnMetadata {
        producer_id,
        producer_epoch,
        last_producer_epoch: NO_EPOCH,
        timeout_ms,
        state,
        partitions,
        start_ms,
        last_update_ms,
    })
}

/// A bounds-checked reader: a malformed record yields `None`, never a panic.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn i8(&mut self) -> Option<i8> {
        Some(self.take(1)?[0] as i8)
    }
    fn i16(&mut self) -> Option<i16> {
        Some(i16::from_be_bytes(self.take(2)?.try_into().ok()?))
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    /// A non-flexible array length: -1 (null) reads as empty.
    fn len(&mut self) -> Option<usize> {
        let n = self.i32()?;
        if n < 0 {
            return Some(0);
        }
        let n = n as usize;
        // Each element takes at least 2 bytes: a length past that is malformed.
        (n <= self.0.len()).then_some(n)
    }
    fn uvarint(&mut self) -> Option<u64> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.take(1)?[0];
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    fn compact_len(&mut self) -> Option<usize> {
        let n = self.uvarint()?;
        let n = usize::try_from(n.saturating_sub(1)).ok()?;
        (n <= self.0.len()).then_some(n)
    }
    fn string(&mut self) -> Option<String> {
        let n = usize::try_from(self.i16()?).ok()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
    fn compact_string(&mut self) -> Option<String> {
        let n = self.compact_len()?;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
    fn skip_tags(&mut self) -> Option<()> {
        let count = self.uvarint()?;
        for _ in 0..count {
            self.uvarint()?;
            let size = usize::try_from(self.uvarint()?).ok()?;
            self.take(size)?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips_and_garbage_is_refused() {
        let meta = TxnMetadata {
            producer_id: ProducerId(77),
            producer_epoch: ProducerEpoch(3),
            last_producer_epoch: NO_EPOCH,
            timeout_ms: 60_000,
            state: TxnState::PrepareCommit,
            partitions: [
                TopicPartition::new("a", 1),
                TopicPartition::new("a", 0),
                TopicPartition::new("__consumer_offsets", 7),
            ]
            .into_iter()
            .collect(),
            start_ms: 10,
            last_update_ms: 20,
        };
        assert_eq!(
            decode_key(&encode_key("copier-1")).as_deref(),
            Some("copier-1")
        );
        let value = encode_value(&meta);
        assert_eq!(decode_value(&value), Some(meta));
        for cut in 0..value.len() {
            assert_eq!(decode_value(&value[..cut]), None, "cut at {cut}");
        }
        assert_eq!(decode_value(&[0, 9, 1, 2]), None);
    }
}
