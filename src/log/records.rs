//! The records inside a batch (Kafka's record format v2): one decoder for every reader
//! that needs them — a compacted topic's key check on produce, recompression to a topic's
//! `compression.type`, the cleaner, group offsets replay, the HTTP API, the archive — and
//! one [`BatchBuilder`] for every batch the broker writes itself (committed offsets, HTTP
//! publishes, archive restores).
//!
//! ```text
//! record   length         varint   bytes after this field
//!          attributes     int8     unused (0)
//!          timestampDelta varint   from the batch's base timestamp
//!          offsetDelta    varint   from the batch's base offset
//!          key            varint length (-1 = null) + bytes
//!          value          varint length (-1 = null) + bytes
//!          headers        varint count, then per header: key (varint length + UTF-8),
//!                         value (varint length, -1 = null, + bytes)
//! ```
//!
//! Every length and delta comes from a client: each is checked (no addition that can
//! overflow, no slice past the buffer, no capacity from a claimed count), and a record
//! that does not parse makes the batch [`RecordError::Malformed`].

use std::borrow::Cow;

use super::batch::{BatchHeader, HEADER_BYTES, LOG_OVERHEAD};
use super::compression::{self, DecompressError};

/// Most bytes a batch's records may decompress to wherever the broker reads records (the
/// key check of a compacted topic's produce, the cleaner, the archive: the same limit, so
/// that whatever produce accepted the others can read).
pub const MAX_DECOMPRESSED_BATCH_BYTES: usize = 64 * 1024 * 1024;

const CODEC_MASK: i16 = 0x07;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Decompress(#[from] DecompressError),
    #[error("batch at offset {offset} holds a malformed record")]
    Malformed { offset: i64 },
}

/// One record of a batch, borrowed from the (decompressed) records section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    /// Header keys (UTF-8 by Kafka's contract, not checked here) and values.
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
    /// The record's attributes byte, as stored.
    pub attributes: u8,
    /// The record from its offset delta to its end (offset delta, key, value, headers),
    /// as stored: what a batch rebuilt with another base timestamp copies verbatim.
    pub tail: &'a [u8],
}

/// Reads a zig-zag varint (as Kafka records use); returns the value and bytes consumed.
pub fn read_varint(buf: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, byte) in buf.iter().enumerate().take(10) {
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1));
        }
    }
    None
}

/// Writes a zig-zag varint.
pub fn put_varint(out: &mut Vec<u8>, value: i64) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// Writes a varint length and the bytes, or `-1` for null.
pub fn put_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

/// A varint-length-prefixed byte string at `*at`: `Some(None)` for null (-1), `None` when
/// it does not fit in `buf`.
fn read_bytes<'a>(buf: &'a [u8], at: &mut usize) -> Option<Option<&'a [u8]>> {
    let (len, n) = read_varint(buf.get(*at..)?)?;
    *at = at.checked_add(n)?;
    if len < 0 {
        return Some(None);
    }
    let end = at.checked_add(usize::try_from(len).ok()?)?;
    let bytes = buf.get(*at..end)?;
    *at = end;
    Some(Some(bytes))
}

/// The batch's records section, decompressed when it is compressed (at most
/// [`MAX_DECOMPRESSED_BATCH_BYTES`]).
pub fn records_body<'a>(header: &BatchHeader<'a>) -> Result<Cow<'a, [u8]>, RecordError> {
    Ok(compression::decompress(
        header.compression(),
        header.records_section(),
        MAX_DECOMPRESSED_BATCH_BYTES,
    )?)
}

/// Every record of `header`'s batch from `body`, its records section as stored when the
/// batch is uncompressed, or decompressed ([`records_body`]).
pub fn decode<'b>(
    header: &BatchHeader<'_>,
    body: &'b [u8],
) -> Result<Vec<RecordView<'b>>, RecordError> {
    let malformed = || RecordError::Malformed {
        offset: header.base_offset(),
    };
    let count = usize::try_from(header.record_count()).map_err(|_| malformed())?;
    // No capacity from the claimed count beyond a small bound: every record takes at
    // least one byte, so the vector grows only as bytes are there.
    let mut out = Vec::with_capacity(count.min(4096));
    let mut at = 0usize;
    for _ in 0..count {
        let (record, end) = decode_one(header, body, at).ok_or_else(malformed)?;
        out.push(record);
        at = end;
    }
    Ok(out)
}

/// The record starting at `at` in `body`, and where the next one starts.
fn decode_one<'b>(
    header: &BatchHeader<'_>,
    body: &'b [u8],
    at: usize,
) -> Option<(RecordView<'b>, usize)> {
    let (length, n) = read_varint(body.get(at..)?)?;
    let start = at.checked_add(n)?;
    let end = start.checked_add(usize::try_from(length).ok()?)?;
    let bytes = body.get(start..end)?;
    let attributes = *bytes.first()?;
    let mut cursor = 1;
    let (timestamp_delta, n) = read_varint(bytes.get(cursor..)?)?;
    cursor += n;
    let tail_start = cursor;
    let (offset_delta, n) = read_varint(bytes.get(cursor..)?)?;
    cursor += n;
    let key = read_bytes(bytes, &mut cursor)?;
    let value = read_bytes(bytes, &mut cursor)?;
    let (count, n) = read_varint(bytes.get(cursor..)?)?;
    cursor += n;
    // No capacity from the claimed count: each header takes at least two bytes.
    let mut headers = Vec::new();
    for _ in 0..count.max(0) {
        let name = read_bytes(bytes, &mut cursor)??;
        headers.push((name, read_bytes(bytes, &mut cursor)?));
    }
    let record = RecordView {
        offset: header.base_offset().checked_add(offset_delta)?,
        timestamp: header.base_timestamp().checked_add(timestamp_delta)?,
        key,
        value,
        headers,
        attributes,
        tail: bytes.get(tail_start..)?,
    };
    Some((record, end))
}

impl<'a> BatchHeader<'a> {
    /// Every record of an uncompressed batch; `None` for a compressed or malformed one.
    /// For the broker's own internal logs, which it writes uncompressed.
    pub fn records(&self) -> Option<Vec<RecordView<'a>>> {
        if self.compression() != 0 {
            return None;
        }
        decode(self, self.records_section()).ok()
    }

    /// This batch's records from `body`: the records section itself when the batch is
    /// uncompressed, or its decompressed form; `None` when a record is malformed.
    pub fn parse_records<'b>(&self, body: &'b [u8]) -> Option<Vec<RecordView<'b>>> {
        decode(self, body).ok()
    }

    /// Offset and timestamp of each record, read without decompressing; `None` for a
    /// compressed batch (the broker never decompresses for this) or a malformed record.
    pub fn record_timestamps(&self) -> Option<Vec<(i64, i64)>> {
        Some(
            self.records()?
                .into_iter()
                .map(|r| (r.offset, r.timestamp))
                .collect(),
        )
    }
}

/// The positions in the batch of its records without a key: a compacted topic refuses a
/// batch that has any (Kafka's `LogValidator.validateKey`). Control batches have none.
pub fn keyless_records(header: &BatchHeader<'_>) -> Result<Vec<usize>, RecordError> {
    if header.is_control() {
        return Ok(Vec::new());
    }
    let body = records_body(header)?;
    Ok(decode(header, &body)?
        .iter()
        .enumerate()
        .filter(|(_, r)| r.key.is_none())
        .map(|(i, _)| i)
        .collect())
}

/// The batch with its records compressed with `codec` instead (a topic whose
/// `compression.type` is not `producer`, as Kafka's `LogValidator` recompresses): every
/// header field but the codec bits, the length and the CRC stays.
pub fn recompress(
    header: &BatchHeader<'_>,
    codec: i16,
    level: Option<u32>,
) -> Result<Vec<u8>, RecordError> {
    let body = records_body(header)?;
    let records = compression::compress(codec, &body, level)?;
    let attributes = (header.attributes() & !CODEC_MASK) | (codec & CODEC_MASK);
    Ok(with_records(
        header,
        &records,
        HeaderChanges {
            attributes,
            ..HeaderChanges::of(header)
        },
    ))
}

/// The header fields a rebuilt batch may change; the rest (offsets, epoch, producer id,
/// epoch and base sequence) are the original's.
#[derive(Debug, Clone, Copy)]
pub struct HeaderChanges {
    pub attributes: i16,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub record_count: i32,
}

impl HeaderChanges {
    /// No change.
    pub fn of(header: &BatchHeader<'_>) -> Self {
        Self {
            attributes: header.attributes(),
            base_timestamp: header.base_timestamp(),
            max_timestamp: header.max_timestamp(),
            record_count: header.record_count(),
        }
    }
}

/// `original`'s header with `changes`, followed by `records` (already encoded and
/// compressed with the codec `changes.attributes` names), length and CRC recomputed.
pub fn with_records(original: &BatchHeader<'_>, records: &[u8], changes: HeaderChanges) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + records.len());
    out.extend_from_slice(&original.bytes()[..HEADER_BYTES]);
    out.extend_from_slice(records);
    let length = (out.len() - LOG_OVERHEAD) as i32;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    out[21..23].copy_from_slice(&changes.attributes.to_be_bytes());
    out[27..35].copy_from_slice(&changes.base_timestamp.to_be_bytes());
    out[35..43].copy_from_slice(&changes.max_timestamp.to_be_bytes());
    out[57..61].copy_from_slice(&changes.record_count.to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Builds an uncompressed magic-2 batch of records the broker writes itself: committed
/// offsets and group metadata, HTTP publishes, archive restores. Base offset and leader
/// epoch are 0: the log assigns both on append. Timestamps are absolute; the batch's base
/// timestamp is the first record's.
#[derive(Debug, Clone)]
pub struct BatchBuilder {
    base_timestamp: Option<i64>,
    max_timestamp: i64,
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
    attributes: i16,
    body: Vec<u8>,
    count: i32,
    record: Vec<u8>,
}

impl Default for BatchBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchBuilder {
    /// An empty batch with no producer id (not idempotent).
    pub fn new() -> Self {
        Self {
            base_timestamp: None,
            max_timestamp: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            attributes: 0,
            body: Vec::new(),
            count: 0,
            record: Vec::new(),
        }
    }

    /// Fixes the batch's base timestamp (records' deltas are taken from it) instead of
    /// taking the first record's.
    pub fn with_base_timestamp(mut self, base_timestamp: i64) -> Self {
        self.base_timestamp = Some(base_timestamp);
        self
    }

    /// The batch as an idempotent producer's: the log deduplicates a retry of it by
    /// `(producer_id, producer_epoch, base_sequence)`.
    pub fn idempotent(mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) -> Self {
        self.producer_id = producer_id;
        self.producer_epoch = producer_epoch;
        self.base_sequence = base_sequence;
        self
    }

    /// Sets the batch's attribute bits (uncompressed always: the transactional and
    /// control bits of [`super::txn`]).
    pub fn with_attributes(mut self, attributes: i16) -> Self {
        self.attributes = attributes & !0x7;
        self
    }

    /// [`Self::push`] with headers as a record owns them (an archived record, a test's).
    pub fn push_owned(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(String, Option<Vec<u8>>)],
    ) {
        let headers: Vec<(&[u8], Option<&[u8]>)> = headers
            .iter()
            .map(|(k, v)| (k.as_bytes(), v.as_deref()))
            .collect();
        self.push(timestamp, key, value, &headers);
    }

    /// Appends one record.
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) {
        let base = *self.base_timestamp.get_or_insert(timestamp);
        self.max_timestamp = self.max_timestamp.max(timestamp);
        let record = &mut self.record;
        record.clear();
        record.push(0);
        put_varint(record, timestamp.saturating_sub(base));
        put_varint(record, i64::from(self.count));
        put_bytes(record, key);
        put_bytes(record, value);
        put_varint(record, headers.len() as i64);
        for (name, value) in headers {
            put_bytes(record, Some(name));
            put_bytes(record, *value);
        }
        put_varint(&mut self.body, record.len() as i64);
        self.body.extend_from_slice(record);
        self.count += 1;
    }

    /// Records pushed so far.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The encoded batch (an empty one holds no record and is refused by the log).
    pub fn build(self) -> Vec<u8> {
        let base_timestamp = self.base_timestamp.unwrap_or(-1);
        let max_timestamp = if self.count == 0 {
            base_timestamp
        } else {
            self.max_timestamp
        };
        let mut after_crc = Vec::with_capacity(HEADER_BYTES - 21 + self.body.len());
        after_crc.extend_from_slice(&self.attributes.to_be_bytes());
        after_crc.extend_from_slice(&(self.count - 1).max(0).to_be_bytes());
        after_crc.extend_from_slice(&base_timestamp.to_be_bytes());
        after_crc.extend_from_slice(&max_timestamp.to_be_bytes());
        after_crc.extend_from_slice(&self.producer_id.to_be_bytes());
        after_crc.extend_from_slice(&self.producer_epoch.to_be_bytes());
        after_crc.extend_from_slice(&self.base_sequence.to_be_bytes());
        after_crc.extend_from_slice(&self.count.to_be_bytes());
        after_crc.extend_from_slice(&self.body);
        let mut batch = Vec::with_capacity(21 + after_crc.len());
        batch.extend_from_slice(&0i64.to_be_bytes());
        batch.extend_from_slice(&((after_crc.len() + 9) as i32).to_be_bytes());
        batch.extend_from_slice(&0i32.to_be_bytes());
        batch.push(2);
        batch.extend_from_slice(&crc32c::crc32c(&after_crc).to_be_bytes());
        batch.extend_from_slice(&after_crc);
        batch
    }
}

/// The tests' reference encoder, on [`BatchBuilder`].
#[doc(hidden)]
pub mod testing {
    use super::BatchBuilder;

    /// One record: key, value, headers, timestamp delta from the batch base.
    #[derive(Debug, Clone, Default)]
    pub struct TestRecord {
        pub key: Option<Vec<u8>>,
        pub value: Option<Vec<u8>>,
        pub headers: Vec<(String, Option<Vec<u8>>)>,
        pub timestamp_delta: i64,
    }

    /// Encodes records into a batch with base offset 0 and the given producer fields.
    pub fn encode_batch(
        records: &[TestRecord],
        base_timestamp: i64,
        producer: (i64, i16, i32),
    ) -> Vec<u8> {
        let mut builder = BatchBuilder::new()
            .with_base_timestamp(base_timestamp)
            .idempotent(producer.0, producer.1, producer.2);
        for record in records {
            builder.push_owned(
                base_timestamp + record.timestamp_delta,
                record.key.as_deref(),
                record.value.as_deref(),
                &record.headers,
            );
        }
        builder.build()
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
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn records_round_trip_keys_values_headers_and_nulls() -> TestResult {
        let mut builder = BatchBuilder::new();
        builder.push(1_000, Some(b"k"), Some(b"v"), &[(b"h", Some(b"x"))]);
        builder.push(1_007, None, None, &[(b"n", None)]);
        let batch = builder.build();
        let header = BatchHeader::parse_checked(&batch)?;
        assert_eq!(header.record_count(), 2);
        assert_eq!(header.base_timestamp(), 1_000);
        assert_eq!(header.max_timestamp(), 1_007);
        let records = header.records().ok_or("records")?;
        assert_eq!(records[0].key, Some(&b"k"[..]));
        assert_eq!(records[0].value, Some(&b"v"[..]));
        assert_eq!(records[0].headers, vec![(&b"h"[..], Some(&b"x"[..]))]);
        assert_eq!((records[1].offset, records[1].timestamp), (1, 1_007));
        assert_eq!((records[1].key, records[1].value), (None, None));
        assert_eq!(records[1].headers, vec![(&b"n"[..], None)]);
        Ok(())
    }

    #[test]
    fn an_idempotent_batch_carries_its_producer_fields() -> TestResult {
        let mut builder = BatchBuilder::new().idempotent(7, 2, 40);
        builder.push(5, None, Some(b"a"), &[]);
        builder.push(5, None, Some(b"b"), &[]);
        let batch = builder.build();
        let header = BatchHeader::parse_checked(&batch)?;
        assert_eq!(
            (
                header.producer_id(),
                header.producer_epoch(),
                header.base_sequence()
            ),
            (7, 2, 40)
        );
        assert_eq!(header.last_sequence(), 41);
        Ok(())
    }

    /// A client-supplied offset or timestamp delta that would overflow the batch's base
    /// makes the batch malformed instead of wrapping around.
    #[test]
    fn deltas_that_overflow_the_base_are_malformed() -> TestResult {
        let mut builder = BatchBuilder::new();
        builder.push(i64::MAX - 1, None, Some(b"a"), &[]);
        let mut batch = builder.build();
        // Base timestamp i64::MAX - 1; make the record's timestamp delta +2 (zig-zag 4).
        let at = HEADER_BYTES + 2;
        assert_eq!(batch[at], 0, "the first record's timestamp delta");
        batch[at] = 4;
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        let header = BatchHeader::parse_checked(&batch)?;
        assert!(matches!(
            decode(&header, header.records_section()),
            Err(RecordError::Malformed { .. })
        ));
        Ok(())
    }

    #[test]
    fn a_length_past_the_buffer_is_malformed_not_a_panic() -> TestResult {
        let mut builder = BatchBuilder::new();
        builder.push(0, Some(b"key"), Some(b"value"), &[]);
        let batch = builder.build();
        let header = BatchHeader::parse_checked(&batch)?;
        let body = header.records_section();
        for cut in 0..body.len() {
            assert!(decode(&header, &body[..cut]).is_err(), "cut at {cut}");
        }
        let mut long = body.to_vec();
        long[0] = 0x7e; // the record claims 63 bytes
        assert!(decode(&header, &long).is_err());
        Ok(())
    }

    #[test]
    fn recompression_keeps_everything_but_the_codec() -> TestResult {
        let mut builder = BatchBuilder::new().idempotent(3, 1, 0);
        for i in 0..10u8 {
            builder.push(100 + i64::from(i), Some(&[i]), Some(&[i; 100]), &[]);
        }
        let batch = builder.build();
        let header = BatchHeader::parse_checked(&batch)?;
        let gzip = recompress(&header, 1, None)?;
        let again = BatchHeader::parse_checked(&gzip)?;
        assert_eq!(again.compression(), 1);
        assert_eq!(again.record_count(), 10);
        assert_eq!(again.producer_id(), 3);
        let body = records_body(&again)?;
        assert_eq!(decode(&again, &body)?, header.records().ok_or("records")?);
        Ok(())
    }
}
