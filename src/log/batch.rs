//! A read-only view of a Kafka record batch (magic 2) header, and its validation.
//!
//! The broker never decodes individual records on the hot path: everything it needs
//! (offsets, timestamps, producer id and sequence, CRC) lives in the 61-byte header.
//!
//! ```text
//! offset  size  field
//!      0     8  base_offset              rewritten by the log on append (not under CRC)
//!      8     4  batch_length             bytes after this field
//!     12     4  partition_leader_epoch   rewritten by the log (not under CRC)
//!     16     1  magic                    must be 2
//!     17     4  crc                      CRC-32C of bytes 21..end
//!     21     2  attributes               bits 0-2 codec, 3 timestamp type, 4 txn, 5 control
//!     23     4  last_offset_delta
//!     27     8  base_timestamp
//!     35     8  max_timestamp
//!     43     8  producer_id
//!     51     2  producer_epoch
//!     53     4  base_sequence
//!     57     4  record_count
//!     61     …  records
//! ```

/// Size of the fixed batch header, in bytes.
pub const HEADER_BYTES: usize = 61;
/// Bytes before `batch_length` ends: `base_offset` + `batch_length`.
pub const LOG_OVERHEAD: usize = 12;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTRIBUTES_OFFSET: usize = 21;
const TIMESTAMP_TYPE_BIT: i16 = 1 << 3;

/// Why a batch was refused. Each maps to one Kafka error code in `api::errors`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("record set is truncated: {remaining} bytes left, batch needs {needed}")]
    Truncated { remaining: usize, needed: usize },
    #[error("batch length {length} is below the header size")]
    LengthTooSmall { length: i32 },
    #[error("batch magic is {magic}, only magic 2 is supported")]
    UnsupportedMagic { magic: i8 },
    #[error("batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("batch claims {record_count} records but last offset delta {last_offset_delta}")]
    InconsistentCount {
        record_count: i32,
        last_offset_delta: i32,
    },
    #[error("record set holds no batch")]
    Empty,
}

/// A validated batch inside some buffer: `bytes[..]` is exactly one whole batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchHeader<'a> {
    bytes: &'a [u8],
}

fn i16_at(bytes: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([bytes[at], bytes[at + 1]])
}
fn i32_at(bytes: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}
fn i64_at(bytes: &[u8], at: usize) -> i64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&bytes[at..at + 8]);
    i64::from_be_bytes(raw)
}

impl<'a> BatchHeader<'a> {
    /// Reads the batch at the start of `buf` and checks its framing and magic (not the CRC).
    pub fn parse(buf: &'a [u8]) -> Result<Self, BatchError> {
        if buf.len() < LOG_OVERHEAD {
            return Err(BatchError::Truncated {
                remaining: buf.len(),
                needed: LOG_OVERHEAD,
            });
        }
        let length = i32_at(buf, 8);
        if length < (HEADER_BYTES - LOG_OVERHEAD) as i32 {
            return Err(BatchError::LengthTooSmall { length });
        }
        let total = LOG_OVERHEAD + length as usize;
        if buf.len() < total {
            if buf.len() > MAGIC_OFFSET && buf[MAGIC_OFFSET] as i8 != 2 {
                return Err(BatchError::UnsupportedMagic {
                    magic: buf[MAGIC_OFFSET] as i8,
                });
            }
            return Err(BatchError::Truncated {
                remaining: buf.len(),
                needed: total,
            });
        }
        let header = Self {
            bytes: &buf[..total],
        };
        if header.magic() != 2 {
            return Err(BatchError::UnsupportedMagic {
                magic: header.magic(),
            });
        }
        Ok(header)
    }

    /// Like [`BatchHeader::parse`], and also verifies the CRC-32C and record count.
    pub fn parse_checked(buf: &'a [u8]) -> Result<Self, BatchError> {
        let header = Self::parse(buf)?;
        header.verify_crc()?;
        let (count, delta) = (header.record_count(), header.last_offset_delta());
        if count < 0 || delta < 0 || (count > 0 && delta < count - 1) {
            return Err(BatchError::InconsistentCount {
                record_count: count,
                last_offset_delta: delta,
            });
        }
        Ok(header)
    }

    pub fn verify_crc(&self) -> Result<(), BatchError> {
        let stored = self.crc();
        let computed = crc32c::crc32c(&self.bytes[ATTRIBUTES_OFFSET..]);
        if stored == computed {
            Ok(())
        } else {
            Err(BatchError::CrcMismatch { stored, computed })
        }
    }

    /// The whole batch.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }
    /// Total size on disk, including the 12-byte log overhead.
    pub fn total_bytes(&self) -> usize {
        self.bytes.len()
    }
    pub fn base_offset(&self) -> i64 {
        i64_at(self.bytes, 0)
    }
    pub fn last_offset(&self) -> i64 {
        self.base_offset() + i64::from(self.last_offset_delta())
    }
    pub fn partition_leader_epoch(&self) -> i32 {
        i32_at(self.bytes, 12)
    }
    pub fn magic(&self) -> i8 {
        self.bytes[MAGIC_OFFSET] as i8
    }
    pub fn crc(&self) -> u32 {
        i32_at(self.bytes, CRC_OFFSET) as u32
    }
    pub fn attributes(&self) -> i16 {
        i16_at(self.bytes, ATTRIBUTES_OFFSET)
    }
    /// Compression codec id: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
    pub fn compression(&self) -> i16 {
        self.attributes() & 0x7
    }
    pub fn is_transactional(&self) -> bool {
        self.attributes() & (1 << 4) != 0
    }
    pub fn is_control(&self) -> bool {
        self.attributes() & (1 << 5) != 0
    }
    pub fn last_offset_delta(&self) -> i32 {
        i32_at(self.bytes, 23)
    }
    pub fn base_timestamp(&self) -> i64 {
        i64_at(self.bytes, 27)
    }
    pub fn max_timestamp(&self) -> i64 {
        i64_at(self.bytes, 35)
    }
    pub fn producer_id(&self) -> i64 {
        i64_at(self.bytes, 43)
    }
    pub fn producer_epoch(&self) -> i16 {
        i16_at(self.bytes, 51)
    }
    pub fn base_sequence(&self) -> i32 {
        i32_at(self.bytes, 53)
    }
    /// Sequence of the last record; sequences wrap from `i32::MAX` to 0.
    pub fn last_sequence(&self) -> i32 {
        let base = self.base_sequence();
        if base < 0 {
            return base;
        }
        ((i64::from(base) + i64::from(self.last_offset_delta())) % (i64::from(i32::MAX) + 1)) as i32
    }
    pub fn record_count(&self) -> i32 {
        i32_at(self.bytes, 57)
    }
    /// The records section after the header, as stored (compressed or not).
    pub fn records_section(&self) -> &'a [u8] {
        self.bytes.get(HEADER_BYTES..).unwrap_or_default()
    }

    /// Whether the producer asked for idempotent deduplication of this batch.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id() >= 0
    }
}

/// Rewrites the fields the log owns in a batch about to be appended: the base offset
/// and leader epoch (outside the CRC) and, for `LogAppendTime` topics, the timestamp
/// type and max timestamp (inside it, so the CRC is recomputed).
pub fn assign_offsets(
    batch: &mut [u8],
    base_offset: i64,
    leader_epoch: i32,
    log_append_time: Option<i64>,
) {
    batch[0..8].copy_from_slice(&base_offset.to_be_bytes());
    batch[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
    if let Some(now) = log_append_time {
        let attributes = i16_at(batch, ATTRIBUTES_OFFSET) | TIMESTAMP_TYPE_BIT;
        batch[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
        batch[35..43].copy_from_slice(&now.to_be_bytes());
        let crc = crc32c::crc32c(&batch[ATTRIBUTES_OFFSET..]);
        batch[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Like [`assign_offsets`] for a header held apart from its records (`rest`), so the
/// batch can be written without first being copied into one buffer.
pub fn patch_header(
    head: &mut [u8; HEADER_BYTES],
    rest: &[u8],
    base_offset: i64,
    leader_epoch: i32,
    log_append_time: Option<i64>,
) {
    head[0..8].copy_from_slice(&base_offset.to_be_bytes());
    head[12..16].copy_from_slice(&leader_epoch.to_be_bytes());
    if let Some(now) = log_append_time {
        let attributes = i16_at(head, ATTRIBUTES_OFFSET) | TIMESTAMP_TYPE_BIT;
        head[ATTRIBUTES_OFFSET..ATTRIBUTES_OFFSET + 2].copy_from_slice(&attributes.to_be_bytes());
        head[35..43].copy_from_slice(&now.to_be_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&head[ATTRIBUTES_OFFSET..]), rest);
        head[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    }
}

/// Iterates the whole batches in a record set, stopping at the first error.
pub fn batches(mut buf: &[u8]) -> impl Iterator<Item = Result<BatchHeader<'_>, BatchError>> {
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || buf.is_empty() {
            return None;
        }
        match BatchHeader::parse_checked(buf) {
            Ok(header) => {
                buf = &buf[header.total_bytes()..];
                Some(Ok(header))
            }
            Err(error) => {
                failed = true;
                Some(Err(error))
            }
        }
    })
}

/// Records in the whole batches of a record set, from the batch headers alone: what
/// the fetch metrics count. No CRC is computed: what is served was checked when it was
/// appended (produce, follower append), and a consumer checks it again; a trailing
/// partial or unparsable batch ends the count.
pub fn record_count(mut buf: &[u8]) -> u64 {
    let mut count = 0u64;
    while let Ok(header) = BatchHeader::parse(buf) {
        count += header.record_count().max(0) as u64;
        buf = &buf[header.total_bytes()..];
    }
    count
}

/// The offset after the last whole batch of a record set, from the batch headers
/// alone (no CRC, as [`record_count`]); `None` for a set without a whole batch.
pub fn end_offset(mut buf: &[u8]) -> Option<i64> {
    let mut end = None;
    while let Ok(header) = BatchHeader::parse(buf) {
        end = Some(header.last_offset() + 1);
        buf = &buf[header.total_bytes()..];
    }
    end
}

#[cfg(test)]
mod tests {
    use super::super::records::testing::*;
    use super::*;

    #[test]
    fn parses_a_batch_built_by_the_reference_encoder() {
        let batch = simple_batch(3, 1_000);
        let header = BatchHeader::parse_checked(&batch).expect("valid");
        assert_eq!(header.record_count(), 3);
        assert_eq!(header.last_offset_delta(), 2);
        assert_eq!(header.max_timestamp(), 1_002);
        assert_eq!(header.total_bytes(), batch.len());
        assert_eq!(
            header.record_timestamps(),
            Some(vec![(0, 1_000), (1, 1_001), (2, 1_002)])
        );
    }

    #[test]
    fn record_count_reads_headers_only_and_stops_at_a_partial_batch() {
        let mut set = simple_batch(2, 0);
        set.extend_from_slice(&simple_batch(1, 0));
        assert_eq!(record_count(&set), 3);
        let mut corrupt = set.clone();
        corrupt[30] ^= 0xff; // inside the first batch's CRC-covered bytes
        assert_eq!(record_count(&corrupt), 3, "no CRC walk");
        assert_eq!(record_count(&set[..set.len() - 1]), 2);
        assert_eq!(record_count(&[]), 0);
    }

    #[test]
    fn flipped_byte_fails_the_crc() {
        let mut batch = simple_batch(2, 0);
        let last = batch.len() - 1;
        batch[last] ^= 0x40;
        assert!(matches!(
            BatchHeader::parse_checked(&batch),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn assigning_offsets_keeps_the_crc_valid() {
        let mut batch = simple_batch(2, 0);
        assign_offsets(&mut batch, 42, 7, None);
        let header = BatchHeader::parse_checked(&batch).expect("crc does not cover offset");
        assert_eq!((header.base_offset(), header.last_offset()), (42, 43));
        assign_offsets(&mut batch, 42, 7, Some(99_000));
        let header = BatchHeader::parse_checked(&batch).expect("crc recomputed");
        assert_eq!(header.max_timestamp(), 99_000);
        let mut original = simple_batch(2, 0);
        let mut head = [0u8; HEADER_BYTES];
        head.copy_from_slice(&original[..HEADER_BYTES]);
        patch_header(&mut head, &original[HEADER_BYTES..], 42, 7, Some(99_000));
        original[..HEADER_BYTES].copy_from_slice(&head);
        assert_eq!(original, batch, "split patch equals whole-buffer patch");
    }

    #[test]
    fn rejects_truncated_and_old_magic() {
        let batch = simple_batch(1, 0);
        assert!(matches!(
            BatchHeader::parse(&batch[..batch.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        let mut old = batch.clone();
        old[16] = 1;
        assert_eq!(
            BatchHeader::parse(&old).err(),
            Some(BatchError::UnsupportedMagic { magic: 1 })
        );
        assert!(matches!(
            BatchHeader::parse(&[0u8; 4]),
            Err(BatchError::Truncated { .. })
        ));
    }
}

#[cfg(test)]
mod record_tests {
    use super::super::records::testing::{encode_batch, TestRecord};
    use super::*;

    #[test]
    fn records_round_trip_keys_values_and_nulls() {
        let records = vec![
            TestRecord {
                key: Some(b"k".to_vec()),
                value: Some(b"v".to_vec()),
                headers: vec![],
                timestamp_delta: 3,
            },
            TestRecord {
                key: Some(b"gone".to_vec()),
                value: None,
                headers: vec![("h".into(), Some(b"x".to_vec()))],
                timestamp_delta: 4,
            },
        ];
        let mut batch = encode_batch(&records, 100, (-1, -1, -1));
        assign_offsets(&mut batch, 10, 0, None);
        let header = BatchHeader::parse_checked(&batch).expect("valid");
        let read = header.records().expect("uncompressed");
        let summary = |r: &super::super::records::RecordView<'_>| {
            (
                r.offset,
                r.timestamp,
                r.key.map(<[u8]>::to_vec),
                r.value.map(<[u8]>::to_vec),
            )
        };
        assert_eq!(
            summary(&read[0]),
            (10, 103, Some(b"k".to_vec()), Some(b"v".to_vec()))
        );
        assert_eq!(summary(&read[1]), (11, 104, Some(b"gone".to_vec()), None));
        assert!(read[0].headers.is_empty());
        assert_eq!(
            read[1].headers,
            vec![(b"h".as_slice(), Some(b"x".as_slice()))]
        );
    }
}
