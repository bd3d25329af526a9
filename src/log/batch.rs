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
    /// Whether the producer asked for idempotent deduplication of this batch.
    pub fn has_producer_id(&self) -> bool {
        self.producer_id() >= 0
    }

    /// Offset and timestamp of each record, read without decompressing; `None` for a
    /// compressed batch (the broker never decompresses) or a malformed record.
    pub fn record_timestamps(&self) -> Option<Vec<(i64, i64)>> {
        Some(
            self.records()?
                .into_iter()
                .map(|r| (r.offset, r.timestamp))
                .collect(),
        )
    }
}

/// Reads a zig-zag varint (as Kafka records use); returns the value and bytes consumed.
pub(crate) fn read_varint(buf: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, byte) in buf.iter().enumerate().take(10) {
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1));
        }
    }
    None
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

/// One record of an uncompressed batch, as [`BatchHeader::records`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Header keys (UTF-8 by Kafka's contract, not checked here) and values.
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

fn read_bytes<'a>(buf: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    let (len, n) = read_varint(buf.get(*at..)?)?;
    *at += n;
    if len < 0 {
        return Some(None);
    }
    let len = usize::try_from(len).ok()?;
    let bytes = buf.get(*at..*at + len)?;
    *at += len;
    Some(Some(bytes))
}

impl<'a> BatchHeader<'a> {
    /// Every record's offset, timestamp, key and value; `None` for a compressed or
    /// malformed batch. Used for the broker's own internal logs, which it writes
    /// uncompressed; never on the produce path.
    pub fn records(&self) -> Option<Vec<RecordView<'a>>> {
        if self.compression() != 0 {
            return None;
        }
        let bytes: &'a [u8] = self.bytes;
        self.parse_records(bytes.get(HEADER_BYTES..)?)
    }

    /// The records section after the header, as stored (compressed or not).
    pub fn records_section(&self) -> &'a [u8] {
        self.bytes.get(HEADER_BYTES..).unwrap_or_default()
    }

    /// Parses this batch's records from `body`: the records section itself when the
    /// batch is uncompressed, or its decompressed form.
    pub fn parse_records<'b>(&self, body: &'b [u8]) -> Option<Vec<RecordView<'b>>> {
        let mut out = Vec::with_capacity(self.record_count().clamp(0, 4096) as usize);
        let mut at = 0;
        for _ in 0..self.record_count() {
            let (length, n) = read_varint(body.get(at..)?)?;
            at += n;
            let end = at + usize::try_from(length).ok()?;
            let record = body.get(..end)?;
            let mut cursor = at + 1; // attributes
            let (timestamp_delta, n) = read_varint(record.get(cursor..)?)?;
            cursor += n;
            let (offset_delta, n) = read_varint(record.get(cursor..)?)?;
            cursor += n;
            let key = read_bytes(record, &mut cursor)?;
            let value = read_bytes(record, &mut cursor)?;
            let (count, n) = read_varint(record.get(cursor..)?)?;
            cursor += n;
            // No capacity from the claimed count: each header takes at least two
            // bytes of the record, so the vector grows only as bytes are there.
            let mut headers = Vec::new();
            for _ in 0..count.max(0) {
                let name = read_bytes(record, &mut cursor)??;
                headers.push((name, read_bytes(record, &mut cursor)?));
            }
            out.push(RecordView {
                offset: self.base_offset() + offset_delta,
                timestamp: self.base_timestamp() + timestamp_delta,
                key,
                value,
                headers,
            });
            at = end;
        }
        Some(out)
    }
}

/// Builds uncompressed magic-2 batches: the broker's own writes (internal topics)
/// and the tests' reference encoder.
pub mod testing {
    /// One record: key, value, headers, timestamp delta from the batch base.
    #[derive(Debug, Clone, Default)]
    pub struct TestRecord {
        pub key: Option<Vec<u8>>,
        pub value: Option<Vec<u8>>,
        pub headers: Vec<(String, Option<Vec<u8>>)>,
        pub timestamp_delta: i64,
    }

    fn put_varint(out: &mut Vec<u8>, value: i64) {
        let mut raw = ((value << 1) ^ (value >> 63)) as u64;
        while raw >= 0x80 {
            out.push((raw as u8) | 0x80);
            raw >>= 7;
        }
        out.push(raw as u8);
    }

    fn put_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
        match bytes {
            None => put_varint(out, -1),
            Some(b) => {
                put_varint(out, b.len() as i64);
                out.extend_from_slice(b);
            }
        }
    }

    /// Encodes records into a batch with base offset 0 and the given producer fields.
    pub fn encode_batch(
        records: &[TestRecord],
        base_timestamp: i64,
        producer: (i64, i16, i32),
    ) -> Vec<u8> {
        let mut body = Vec::new();
        for (i, record) in records.iter().enumerate() {
            let mut r = vec![0u8];
            put_varint(&mut r, record.timestamp_delta);
            put_varint(&mut r, i as i64);
            put_bytes(&mut r, record.key.as_deref());
            put_bytes(&mut r, record.value.as_deref());
            put_varint(&mut r, record.headers.len() as i64);
            for (k, v) in &record.headers {
                put_bytes(&mut r, Some(k.as_bytes()));
                put_bytes(&mut r, v.as_deref());
            }
            put_varint(&mut body, r.len() as i64);
            body.extend_from_slice(&r);
        }
        let max_delta = records.iter().map(|r| r.timestamp_delta).max().unwrap_or(0);
        let mut after_crc = Vec::new();
        after_crc.extend_from_slice(&0i16.to_be_bytes());
        after_crc.extend_from_slice(&(records.len() as i32 - 1).max(0).to_be_bytes());
        after_crc.extend_from_slice(&base_timestamp.to_be_bytes());
        after_crc.extend_from_slice(&(base_timestamp + max_delta).to_be_bytes());
        after_crc.extend_from_slice(&producer.0.to_be_bytes());
        after_crc.extend_from_slice(&producer.1.to_be_bytes());
        after_crc.extend_from_slice(&producer.2.to_be_bytes());
        after_crc.extend_from_slice(&(records.len() as i32).to_be_bytes());
        after_crc.extend_from_slice(&body);
        let mut batch = Vec::new();
        batch.extend_from_slice(&0i64.to_be_bytes());
        batch.extend_from_slice(&((after_crc.len() + 9) as i32).to_be_bytes());
        batch.extend_from_slice(&0i32.to_be_bytes());
        batch.push(2);
        batch.extend_from_slice(&crc32c::crc32c(&after_crc).to_be_bytes());
        batch.extend_from_slice(&after_crc);
        batch
    }

    /// A batch of `count` small records with no producer id.
    pub fn simple_batch(count: usize, base_timestamp: i64) -> Vec<u8> {
        let records: Vec<TestRecord> = (0..count)
            .map(|i| TestRecord {
                key: Some(format!("k{i}").into_bytes()),
                value: Some(format!("value-{i}").into_bytes()),
                headers: vec![("h".into(), Some(b"v".to_vec()))],
                timestamp_delta: i as i64,
            })
            .collect();
        encode_batch(&records, base_timestamp, (-1, -1, -1))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
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
    use super::testing::{encode_batch, TestRecord};
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
        assert_eq!(
            read[0],
            RecordView {
                offset: 10,
                timestamp: 103,
                key: Some(b"k"),
                value: Some(b"v"),
                headers: Vec::new(),
            }
        );
        assert_eq!(
            read[1],
            RecordView {
                offset: 11,
                timestamp: 104,
                key: Some(b"gone"),
                value: None,
                headers: vec![(b"h".as_slice(), Some(b"x".as_slice()))],
            }
        );
    }
}
