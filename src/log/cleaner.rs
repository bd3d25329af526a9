//! Log compaction's decisions, as Kafka's `LogCleaner` makes them: which records of a
//! compacted log survive a cleaning pass, and the batches that then hold them.
//!
//! A pass maps every key of the *dirty* section (from the cleaner checkpoint up to the
//! first uncleanable offset) to its latest offset ([`OffsetMap`]), then rewrites each
//! cleanable segment from the log start, keeping a record only if no later record of
//! its key is in the map. Offsets never change: a rewritten batch keeps its base and
//! last offsets, producer id, epoch and base sequence, partition leader epoch and
//! codec, so a consumer sees the same offsets with gaps. Aborted transactions' records
//! go; a transaction marker stays while data of its transaction is left before it,
//! then for `delete.retention.ms` as a tombstone does ([`clean_empty_marker`]).
//!
//! A tombstone (a null value) deletes its key, but is kept for `delete.retention.ms`
//! after the cleaner first passes it, so that a consumer that read the older value
//! sees the deletion too (KIP-534): the first pass stamps the batch with a delete
//! horizon (attribute bit 6; the base timestamp then holds the horizon and the
//! records' timestamp deltas are taken from it), a pass after the horizon drops it.
//!
//! Pure over byte slices: no files, no locks, no clock (`now_ms` is passed in).
//! `Log::cleaning_job` hands out the segments, `Log::install_cleaned` swaps the
//! result in, `replication::cleaner` chooses the partition and runs the pass.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::batch::BatchHeader;
use super::compression::{self, DecompressError};
use super::records::{self, put_varint, HeaderChanges, RecordError, RecordView};

/// Attribute bit 6: the batch's base timestamp is its delete horizon (KIP-534).
pub const DELETE_HORIZON_FLAG: i16 = 1 << 6;
const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;

/// Bytes one entry of the offset map is counted at against
/// `log.cleaner.dedupe.buffer.size`: a 16-byte key digest and an 8-byte offset, as
/// Kafka's `SkimpyOffsetMap` counts them, plus the hash table's own overhead.
pub const OFFSET_MAP_ENTRY_BYTES: u64 = 48;

#[derive(Debug, thiserror::Error)]
pub enum CleanError {
    #[error(transparent)]
    Decompress(#[from] DecompressError),
    #[error("batch at offset {offset} holds a malformed record")]
    Malformed { offset: i64 },
}

impl From<RecordError> for CleanError {
    fn from(error: RecordError) -> Self {
        match error {
            RecordError::Decompress(e) => Self::Decompress(e),
            RecordError::Malformed { offset } => Self::Malformed { offset },
        }
    }
}

/// A key's identity in the map: the first 16 bytes of its SHA-256. A collision would
/// make one key's record supersede another's; at 2^-64 per pair within one pass it is
/// the risk Kafka takes with MD5.
type KeyDigest = [u8; 16];

fn digest(key: &[u8]) -> KeyDigest {
    let full = Sha256::digest(key);
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

/// Key → latest offset over the dirty section, bounded by the dedupe buffer.
#[derive(Debug)]
pub struct OffsetMap {
    latest: HashMap<KeyDigest, i64>,
    capacity: usize,
}

impl OffsetMap {
    /// A map of at most `memory_bytes` worth of entries (at least one).
    pub fn with_memory(memory_bytes: u64) -> Self {
        Self {
            latest: HashMap::new(),
            capacity: (memory_bytes / OFFSET_MAP_ENTRY_BYTES).max(1) as usize,
        }
    }
    pub fn len(&self) -> usize {
        self.latest.len()
    }
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }
    /// Whether `records` more distinct keys could still go in.
    pub fn has_room_for(&self, records: usize) -> bool {
        self.latest.len().saturating_add(records) <= self.capacity
    }
    fn put(&mut self, key: &[u8], offset: i64) {
        let slot = self.latest.entry(digest(key)).or_insert(offset);
        *slot = (*slot).max(offset);
    }
    fn latest(&self, key: &[u8]) -> Option<i64> {
        self.latest.get(&digest(key)).copied()
    }

    /// Records every keyed record of one batch. A batch the cleaner cannot read is
    /// left out of the map: its records then supersede nothing, which keeps more than
    /// needed but never loses a key's latest value.
    pub fn add_batch(&mut self, header: &BatchHeader<'_>) -> Result<(), CleanError> {
        if header.is_control() {
            return Ok(());
        }
        let body = records::records_body(header)?;
        for record in records::decode(header, &body)? {
            if let Some(key) = record.key {
                self.put(key, record.offset);
            }
        }
        Ok(())
    }
}

/// What the cleaner settings say about tombstones at the time of a pass.
#[derive(Debug, Clone, Copy)]
pub struct TombstonePolicy {
    pub now_ms: i64,
    /// `delete.retention.ms`.
    pub delete_retention_ms: i64,
}

/// The delete horizon a batch carries, if any: when its tombstones may go.
pub fn delete_horizon(header: &BatchHeader<'_>) -> Option<i64> {
    (header.attributes() & DELETE_HORIZON_FLAG != 0).then(|| header.base_timestamp())
}

/// The cleaner's verdict on one batch.
#[derive(Debug, PartialEq, Eq)]
pub enum Cleaned {
    /// Every record stays and nothing about the batch changes: copy it as is.
    Unchanged,
    /// No record stays.
    Dropped { records: usize },
    /// Some records stay (or a delete horizon was stamped): the rebuilt batch.
    Rewritten { batch: Vec<u8>, dropped: usize },
}

/// Decides one batch of a cleanable segment against the map of the dirty section.
pub fn clean_batch(
    header: &BatchHeader<'_>,
    map: &OffsetMap,
    tombstones: TombstonePolicy,
) -> Result<Cleaned, CleanError> {
    if header.is_control() {
        return Ok(Cleaned::Unchanged);
    }
    let body = records::records_body(header)?;
    let records = records::decode(header, &body)?;
    let horizon = delete_horizon(header);
    let tombstones_expired = horizon.is_some_and(|h| tombstones.now_ms >= h);
    let mut kept = Vec::with_capacity(records.len());
    for record in &records {
        let Some(key) = record.key else {
            continue; // a compacted log has no use for a record without a key
        };
        if map.latest(key).is_some_and(|latest| latest > record.offset) {
            continue;
        }
        if record.value.is_none() && tombstones_expired {
            continue;
        }
        kept.push(record);
    }
    let dropped = records.len() - kept.len();
    if kept.is_empty() {
        return Ok(Cleaned::Dropped { records: dropped });
    }
    let keeps_tombstones = kept.iter().any(|r| r.value.is_none());
    let stamp_horizon = horizon.is_none() && keeps_tombstones;
    if dropped == 0 && !stamp_horizon {
        return Ok(Cleaned::Unchanged);
    }
    // A rebuilt batch carries a horizon only while it holds tombstones: once they
    // are gone it is a plain batch again, and no later pass is due for it.
    let horizon = if stamp_horizon {
        Some(
            tombstones
                .now_ms
                .saturating_add(tombstones.delete_retention_ms),
        )
    } else {
        horizon.filter(|_| keeps_tombstones)
    };
    let batch = rebuild(header, &kept, horizon)?;
    Ok(Cleaned::Rewritten { batch, dropped })
}

/// Decides one control batch whose transaction has no data left before it
/// ([`super::txn::MarkerFate::Empty`]): as a tombstone, it is stamped with a delete
/// horizon on the first pass and dropped by the first pass after the horizon, so that a
/// reader that saw the transaction's data also sees it end (Kafka piggy-backs marker
/// removal on tombstone retention the same way). A marker whose transaction still has
/// data is never handed here and stays unchanged.
pub fn clean_empty_marker(
    header: &BatchHeader<'_>,
    tombstones: TombstonePolicy,
) -> Result<Cleaned, CleanError> {
    match delete_horizon(header) {
        Some(horizon) if tombstones.now_ms >= horizon => Ok(Cleaned::Dropped {
            records: header.record_count().max(0) as usize,
        }),
        Some(_) => Ok(Cleaned::Unchanged),
        None => {
            let body = records::records_body(header)?;
            let records = records::decode(header, &body)?;
            let kept: Vec<&RecordView<'_>> = records.iter().collect();
            let horizon = tombstones
                .now_ms
                .saturating_add(tombstones.delete_retention_ms);
            let batch = rebuild(header, &kept, Some(horizon))?;
            Ok(Cleaned::Rewritten { batch, dropped: 0 })
        }
    }
}

/// A batch holding `kept` of `original`'s records: the original header's offsets,
/// producer fields, epoch and codec; the count, timestamps and CRC of what stays.
fn rebuild(
    original: &BatchHeader<'_>,
    kept: &[&RecordView<'_>],
    horizon: Option<i64>,
) -> Result<Vec<u8>, CleanError> {
    let first_timestamp = kept
        .first()
        .map_or(original.base_timestamp(), |r| r.timestamp);
    let base_timestamp = horizon.unwrap_or(first_timestamp);
    let mut body = Vec::new();
    let mut record = Vec::new();
    for r in kept {
        record.clear();
        record.push(r.attributes);
        put_varint(&mut record, r.timestamp - base_timestamp);
        record.extend_from_slice(r.tail);
        put_varint(&mut body, record.len() as i64);
        body.extend_from_slice(&record);
    }
    let codec = original.compression();
    let records = compression::compress(codec, &body, None)?;
    let log_append_time = original.attributes() & TIMESTAMP_TYPE_BIT != 0;
    let max_timestamp = if log_append_time {
        original.max_timestamp()
    } else {
        kept.iter().map(|r| r.timestamp).max().unwrap_or(-1)
    };
    let mut attributes = original.attributes() & !DELETE_HORIZON_FLAG;
    if horizon.is_some() {
        attributes |= DELETE_HORIZON_FLAG;
    }
    Ok(records::with_records(
        original,
        &records,
        HeaderChanges {
            attributes,
            base_timestamp,
            max_timestamp,
            record_count: kept.len() as i32,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::super::batch::HEADER_BYTES;
    use super::super::records::testing::{encode_batch, TestRecord};
    use super::super::records::{keyless_records, records_body};
    use super::*;

    /// A batch of `records` at base offset `base` (outside the CRC, as the log assigns it).
    fn batch_at(base: i64, base_timestamp: i64, records: &[TestRecord]) -> Vec<u8> {
        let mut batch = encode_batch(records, base_timestamp, (-1, -1, -1));
        batch[0..8].copy_from_slice(&base.to_be_bytes());
        batch
    }

    fn keyed(key: &str, value: Option<&str>, ts: i64) -> TestRecord {
        TestRecord {
            key: Some(key.as_bytes().to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
            headers: vec![("h".into(), Some(key.as_bytes().to_vec()))],
            timestamp_delta: ts,
        }
    }

    /// `(offset, key, value, timestamp)` of every record of a batch.
    fn contents(batch: &[u8]) -> Vec<(i64, String, Option<String>, i64)> {
        let header = BatchHeader::parse_checked(batch).expect("a valid batch");
        let body = records_body(&header).expect("readable");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        header
            .parse_records(&body)
            .expect("well-formed")
            .into_iter()
            .map(|r| {
                (
                    r.offset,
                    r.key.map(text).unwrap_or_default(),
                    r.value.map(text),
                    r.timestamp,
                )
            })
            .collect()
    }

    fn map_of(batches: &[&[u8]]) -> OffsetMap {
        let mut map = OffsetMap::with_memory(1 << 20);
        for b in batches {
            map.add_batch(&BatchHeader::parse_checked(b).expect("valid"))
                .expect("mapped");
        }
        map
    }

    const NO_TOMBSTONE_EXPIRY: TombstonePolicy = TombstonePolicy {
        now_ms: 5_000,
        delete_retention_ms: 86_400_000,
    };

    #[test]
    fn only_the_latest_record_of_each_key_stays_at_its_offset() {
        let old = batch_at(
            100,
            1_000,
            &[
                keyed("a", Some("a1"), 0),
                keyed("b", Some("b1"), 1),
                keyed("c", Some("c1"), 2),
            ],
        );
        let new = batch_at(
            200,
            2_000,
            &[keyed("a", Some("a2"), 0), keyed("c", Some("c2"), 5)],
        );
        let map = map_of(&[&old, &new]);
        let header = BatchHeader::parse_checked(&old).expect("valid");
        let Cleaned::Rewritten { batch, dropped } =
            clean_batch(&header, &map, NO_TOMBSTONE_EXPIRY).expect("cleaned")
        else {
            panic!("b1 must stay")
        };
        assert_eq!(dropped, 2);
        assert_eq!(
            contents(&batch),
            vec![(101, "b".into(), Some("b1".into()), 1_001)]
        );
        let rebuilt = BatchHeader::parse_checked(&batch).expect("CRC and count valid");
        assert_eq!(
            (rebuilt.base_offset(), rebuilt.last_offset()),
            (100, 102),
            "offsets kept"
        );
        assert_eq!(rebuilt.record_count(), 1);
        assert_eq!(rebuilt.max_timestamp(), 1_001);
        let latest = BatchHeader::parse_checked(&new).expect("valid");
        assert_eq!(
            clean_batch(&latest, &map, NO_TOMBSTONE_EXPIRY).expect("ok"),
            Cleaned::Unchanged
        );
    }

    #[test]
    fn a_wholly_superseded_batch_is_dropped() {
        let old = batch_at(0, 1_000, &[keyed("a", Some("1"), 0)]);
        let new = batch_at(1, 1_000, &[keyed("a", Some("2"), 0)]);
        let map = map_of(&[&old, &new]);
        let header = BatchHeader::parse_checked(&old).expect("valid");
        assert_eq!(
            clean_batch(&header, &map, NO_TOMBSTONE_EXPIRY).expect("ok"),
            Cleaned::Dropped { records: 1 }
        );
    }

    #[test]
    fn a_tombstone_is_stamped_with_a_horizon_then_dropped_after_it() {
        let value = batch_at(0, 1_000, &[keyed("k", Some("v"), 0)]);
        let tombstone = batch_at(1, 1_500, &[keyed("k", None, 0), keyed("x", Some("x"), 3)]);
        let map = map_of(&[&value, &tombstone]);
        let first_pass = TombstonePolicy {
            now_ms: 10_000,
            delete_retention_ms: 2_000,
        };
        let header = BatchHeader::parse_checked(&tombstone).expect("valid");
        let Cleaned::Rewritten { batch, dropped: 0 } =
            clean_batch(&header, &map, first_pass).expect("ok")
        else {
            panic!("the first pass stamps the horizon and keeps the tombstone")
        };
        let stamped = BatchHeader::parse_checked(&batch).expect("valid");
        assert_ne!(stamped.attributes() & DELETE_HORIZON_FLAG, 0);
        assert_eq!(stamped.base_timestamp(), 12_000);
        assert_eq!(
            contents(&batch),
            vec![
                (1, "k".into(), None, 1_500),
                (2, "x".into(), Some("x".into()), 1_503)
            ],
            "record timestamps survive the new base"
        );
        let before = TombstonePolicy {
            now_ms: 11_999,
            ..first_pass
        };
        assert_eq!(
            clean_batch(&stamped, &map, before).expect("ok"),
            Cleaned::Unchanged
        );
        let after = TombstonePolicy {
            now_ms: 12_000,
            ..first_pass
        };
        let Cleaned::Rewritten { batch, dropped: 1 } =
            clean_batch(&stamped, &map, after).expect("ok")
        else {
            panic!("the tombstone goes after its horizon")
        };
        assert_eq!(
            contents(&batch),
            vec![(2, "x".into(), Some("x".into()), 1_503)]
        );
        let plain = BatchHeader::parse_checked(&batch).expect("valid");
        assert_eq!(
            delete_horizon(&plain),
            None,
            "no tombstone left, no horizon"
        );
        assert_eq!(plain.base_timestamp(), 1_503);
    }

    #[test]
    fn compressed_batches_are_cleaned_and_stay_compressed() {
        let plain = batch_at(
            0,
            1_000,
            &[keyed("a", Some("1"), 0), keyed("b", Some("1"), 1)],
        );
        let header = BatchHeader::parse_checked(&plain).expect("valid");
        for codec in 1..=4i16 {
            let packed =
                compression::compress(codec, header.records_section(), None).expect("packed");
            let mut batch = plain[..HEADER_BYTES].to_vec();
            batch.extend_from_slice(&packed);
            let len = (batch.len() - 12) as i32;
            batch[8..12].copy_from_slice(&len.to_be_bytes());
            batch[21..23].copy_from_slice(&codec.to_be_bytes());
            let crc = crc32c::crc32c(&batch[21..]);
            batch[17..21].copy_from_slice(&crc.to_be_bytes());
            let newer = batch_at(2, 2_000, &[keyed("a", Some("2"), 0)]);
            let map = map_of(&[&batch, &newer]);
            let Cleaned::Rewritten {
                batch: out,
                dropped: 1,
            } = clean_batch(
                &BatchHeader::parse_checked(&batch).expect("valid"),
                &map,
                NO_TOMBSTONE_EXPIRY,
            )
            .expect("ok")
            else {
                panic!("codec {codec}: a1 goes")
            };
            assert_eq!(
                BatchHeader::parse_checked(&out)
                    .expect("valid")
                    .compression(),
                codec
            );
            assert_eq!(
                contents(&out),
                vec![(1, "b".into(), Some("1".into()), 1_001)],
                "codec {codec}"
            );
        }
    }

    #[test]
    fn keyless_records_are_found_and_dropped() {
        let batch = batch_at(
            0,
            1_000,
            &[
                keyed("a", Some("1"), 0),
                TestRecord {
                    value: Some(b"no key".to_vec()),
                    ..Default::default()
                },
            ],
        );
        let header = BatchHeader::parse_checked(&batch).expect("valid");
        assert_eq!(keyless_records(&header).expect("ok"), vec![1]);
        let map = map_of(&[&batch]);
        let Cleaned::Rewritten { batch, dropped: 1 } =
            clean_batch(&header, &map, NO_TOMBSTONE_EXPIRY).expect("ok")
        else {
            panic!("the keyless record goes")
        };
        assert_eq!(contents(&batch).len(), 1);
    }

    #[test]
    fn control_batches_are_kept_and_map_nothing() {
        let mut control = batch_at(5, 1_000, &[keyed("marker", Some("commit"), 0)]);
        let attributes = 1i16 << 5;
        control[21..23].copy_from_slice(&attributes.to_be_bytes());
        let crc = crc32c::crc32c(&control[21..]);
        control[17..21].copy_from_slice(&crc.to_be_bytes());
        let header = BatchHeader::parse_checked(&control).expect("valid");
        assert!(header.is_control());
        let later = batch_at(9, 2_000, &[keyed("marker", Some("data"), 0)]);
        let map = map_of(&[&control, &later]);
        assert_eq!(map.len(), 1, "only the data batch's key is mapped");
        assert_eq!(
            clean_batch(&header, &map, NO_TOMBSTONE_EXPIRY).expect("ok"),
            Cleaned::Unchanged
        );
        assert_eq!(keyless_records(&header).expect("ok"), Vec::<usize>::new());
    }

    #[test]
    fn the_map_counts_its_room() {
        let map = OffsetMap::with_memory(OFFSET_MAP_ENTRY_BYTES * 3);
        assert!(map.has_room_for(3));
        assert!(!map.has_room_for(4));
    }
}
