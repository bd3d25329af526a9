//! One archive object: the records of a run of a partition's log as one Parquet file,
//! one row per record, in the columns analysts query (DuckDB, Spark, Trino, pandas and
//! polars read it with no tern code). Batches arrive as the log stores them; compressed
//! ones are decompressed here, control batches are left out.
//!
//! Written with the parquet crate's column writers, no Arrow: the columns are filled
//! straight from the batches, so an object costs its records' bytes once, plus the
//! encoded file. Pages are Snappy-compressed, which every Parquet reader supports.

use std::sync::Arc;

use bytes::Bytes;
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int32Type, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::writer::SerializedFileWriter;
use parquet::record::{Field, Row};
use parquet::schema::parser::parse_message_type;

use crate::log::batch::BatchHeader;
use crate::log::compression;
use crate::log::records::RecordView;

/// The file schema. `headers` is the standard three-level LIST of structs; a record's
/// `timestamp` is what a consumer sees (the batch's time for LogAppendTime topics).
///
/// `topic` and `partition` are not in the file: as in every Hive-style layout they are
/// the folder names (`topic=T/partition=P/`), which engines read as columns. A file
/// that repeated them would break Spark ("duplicate column") and pyarrow/pandas
/// dataset reads (the path's dictionary type against the file's int). A file read
/// alone names them in its key-value metadata (`tern.topic`, `tern.partition`).
const SCHEMA: &str = "
message kafka_record {
  REQUIRED INT64 offset;
  REQUIRED INT64 timestamp (TIMESTAMP(MILLIS,true));
  REQUIRED BYTE_ARRAY timestamp_type (STRING);
  OPTIONAL BYTE_ARRAY key;
  OPTIONAL BYTE_ARRAY value;
  REQUIRED GROUP headers (LIST) {
    REPEATED GROUP list {
      REQUIRED GROUP element {
        REQUIRED BYTE_ARRAY key (STRING);
        OPTIONAL BYTE_ARRAY value;
      }
    }
  }
  REQUIRED INT64 producer_id;
  REQUIRED INT32 producer_epoch;
  REQUIRED INT32 leader_epoch;
}
";

/// Kafka's attribute bit for LogAppendTime batches.
const LOG_APPEND_TIME: i16 = 0x08;

#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("batch at offset {0} does not decode")]
    Malformed(i64),
    #[error("batch at offset {offset}: {source}")]
    Decompress {
        offset: i64,
        source: compression::DecompressError,
    },
    #[error("parquet: {0}")]
    Parquet(#[from] ParquetError),
    #[error("archive object: {0}")]
    Schema(String),
}

/// One archived record, as [`read_object`] returns it: what `tern archive restore`
/// produces back, and what the tests compare with what was produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchivedRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub log_append_time: bool,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: Vec<(String, Option<Vec<u8>>)>,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub leader_epoch: i32,
}

/// An optional binary column: the present values and one definition level per row.
#[derive(Debug, Default)]
struct OptionalBytes {
    values: Vec<ByteArray>,
    defs: Vec<i16>,
}

impl OptionalBytes {
    fn push(&mut self, bytes: Option<&[u8]>, present: i16) {
        match bytes {
            Some(b) => {
                self.values.push(ByteArray::from(b.to_vec()));
                self.defs.push(present);
            }
            None => self.defs.push(present - 1),
        }
    }
}

/// The columns of one object, filled batch by batch.
#[derive(Debug, Default)]
pub struct ObjectBuilder {
    offsets: Vec<i64>,
    timestamps: Vec<i64>,
    timestamp_types: Vec<ByteArray>,
    keys: OptionalBytes,
    values: OptionalBytes,
    /// Header keys and values are leaves of the list: one entry per header, or one
    /// empty-list entry (definition 0) for a record without headers.
    header_keys: Vec<ByteArray>,
    header_key_defs: Vec<i16>,
    header_values: OptionalBytes,
    header_reps: Vec<i16>,
    producer_ids: Vec<i64>,
    producer_epochs: Vec<i32>,
    leader_epochs: Vec<i32>,
    /// Bytes of record data taken in (keys, values, headers), for the memory budget.
    data_bytes: usize,
}

impl ObjectBuilder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn records(&self) -> usize {
        self.offsets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Bytes of record data held: what the exporter's memory budget counts.
    pub fn data_bytes(&self) -> usize {
        self.data_bytes
    }

    pub fn first_offset(&self) -> Option<i64> {
        self.offsets.first().copied()
    }

    pub fn last_offset(&self) -> Option<i64> {
        self.offsets.last().copied()
    }

    /// The first record's timestamp: it names the object's `date=` folder.
    pub fn first_timestamp(&self) -> Option<i64> {
        self.timestamps.first().copied()
    }

    pub fn timestamps(&self) -> (i64, i64) {
        let min = self.timestamps.iter().copied().min().unwrap_or(-1);
        let max = self.timestamps.iter().copied().max().unwrap_or(-1);
        (min, max)
    }

    /// Adds the records of one batch from offset `from` on (a batch may start before
    /// what is left to archive). A control batch adds nothing. `limit` bounds the
    /// decompressed size, as everywhere a batch is decompressed.
    pub fn push_batch(
        &mut self,
        header: &BatchHeader<'_>,
        from: i64,
        limit: usize,
    ) -> Result<(), ObjectError> {
        if header.is_control() {
            return Ok(());
        }
        let offset = header.base_offset();
        let body = compression::decompress(header.compression(), header.records_section(), limit)
            .map_err(|source| ObjectError::Decompress { offset, source })?;
        let records = header
            .parse_records(&body)
            .ok_or(ObjectError::Malformed(offset))?;
        let log_append_time = header.attributes() & LOG_APPEND_TIME != 0;
        for record in records.iter().filter(|r| r.offset >= from) {
            let timestamp = match log_append_time {
                true => header.max_timestamp(),
                false => record.timestamp,
            };
            self.push_record(record, timestamp, log_append_time, header);
        }
        Ok(())
    }

    fn push_record(
        &mut self,
        record: &RecordView<'_>,
        timestamp: i64,
        log_append_time: bool,
        batch: &BatchHeader<'_>,
    ) {
        self.offsets.push(record.offset);
        self.timestamps.push(timestamp);
        self.timestamp_types
            .push(ByteArray::from(timestamp_type(log_append_time)));
        self.keys.push(record.key, 1);
        self.values.push(record.value, 1);
        if record.headers.is_empty() {
            self.header_key_defs.push(0);
            self.header_values.defs.push(0);
            self.header_reps.push(0);
        }
        for (i, (name, value)) in record.headers.iter().enumerate() {
            self.header_keys.push(ByteArray::from(name.to_vec()));
            self.header_key_defs.push(1);
            self.header_values.push(*value, 2);
            self.header_reps.push(i16::from(i > 0));
            self.data_bytes += name.len() + value.map_or(0, <[u8]>::len);
        }
        self.producer_ids.push(batch.producer_id());
        self.producer_epochs.push(i32::from(batch.producer_epoch()));
        self.leader_epochs.push(batch.partition_leader_epoch());
        self.data_bytes += record.key.map_or(0, <[u8]>::len) + record.value.map_or(0, <[u8]>::len);
    }

    /// The Parquet file of everything pushed, for `topic`'s `partition`: one row group.
    pub fn finish(self, topic: &str, partition: i32) -> Result<Vec<u8>, ObjectError> {
        let schema = Arc::new(parse_message_type(SCHEMA)?);
        let properties = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_created_by(format!("tern {}", env!("CARGO_PKG_VERSION")))
            .set_max_row_group_row_count(None)
            .build();
        let mut writer = SerializedFileWriter::new(Vec::new(), schema, Arc::new(properties))?;
        writer.append_key_value_metadata(KeyValue::new("tern.topic".into(), topic.to_string()));
        writer.append_key_value_metadata(KeyValue::new(
            "tern.partition".into(),
            partition.to_string(),
        ));
        let mut group = writer.next_row_group()?;
        let mut column = 0;
        while let Some(mut out) = group.next_column()? {
            match column {
                0 => {
                    out.typed::<Int64Type>()
                        .write_batch(&self.offsets, None, None)?;
                }
                1 => {
                    out.typed::<Int64Type>()
                        .write_batch(&self.timestamps, None, None)?;
                }
                2 => {
                    out.typed::<ByteArrayType>()
                        .write_batch(&self.timestamp_types, None, None)?;
                }
                3 => {
                    out.typed::<ByteArrayType>().write_batch(
                        &self.keys.values,
                        Some(&self.keys.defs),
                        None,
                    )?;
                }
                4 => {
                    out.typed::<ByteArrayType>().write_batch(
                        &self.values.values,
                        Some(&self.values.defs),
                        None,
                    )?;
                }
                5 => {
                    out.typed::<ByteArrayType>().write_batch(
                        &self.header_keys,
                        Some(&self.header_key_defs),
                        Some(&self.header_reps),
                    )?;
                }
                6 => {
                    out.typed::<ByteArrayType>().write_batch(
                        &self.header_values.values,
                        Some(&self.header_values.defs),
                        Some(&self.header_reps),
                    )?;
                }
                7 => {
                    out.typed::<Int64Type>()
                        .write_batch(&self.producer_ids, None, None)?;
                }
                8 => {
                    out.typed::<Int32Type>()
                        .write_batch(&self.producer_epochs, None, None)?;
                }
                9 => {
                    out.typed::<Int32Type>()
                        .write_batch(&self.leader_epochs, None, None)?;
                }
                n => return Err(ObjectError::Schema(format!("unexpected column {n}"))),
            }
            out.close()?;
            column += 1;
        }
        group.close()?;
        Ok(writer.into_inner()?)
    }
}

fn timestamp_type(log_append_time: bool) -> &'static str {
    match log_append_time {
        true => "LogAppendTime",
        false => "CreateTime",
    }
}

/// The records of an archive object, in file order (offset order, as written).
pub fn read_object(bytes: Bytes) -> Result<Vec<ArchivedRecord>, ObjectError> {
    let reader = SerializedFileReader::new(bytes)?;
    let mut out = Vec::new();
    for row in reader.get_row_iter(None)? {
        out.push(record_of(row?)?);
    }
    Ok(out)
}

fn record_of(row: Row) -> Result<ArchivedRecord, ObjectError> {
    let mut record = ArchivedRecord {
        offset: -1,
        timestamp: -1,
        log_append_time: false,
        key: None,
        value: None,
        headers: Vec::new(),
        producer_id: -1,
        producer_epoch: -1,
        leader_epoch: -1,
    };
    let wrong =
        |name: &str, field: &Field| ObjectError::Schema(format!("column {name}: {field:?}"));
    for (name, field) in row.into_columns() {
        match (name.as_str(), field) {
            ("offset", Field::Long(v)) => record.offset = v,
            ("timestamp", Field::TimestampMillis(v)) => record.timestamp = v,
            ("timestamp_type", Field::Str(s)) => record.log_append_time = s == "LogAppendTime",
            ("key", field) => record.key = optional_bytes(&name, field)?,
            ("value", field) => record.value = optional_bytes(&name, field)?,
            ("headers", Field::ListInternal(list)) => {
                for element in list.elements() {
                    record.headers.push(header_of(element)?);
                }
            }
            ("producer_id", Field::Long(v)) => record.producer_id = v,
            ("producer_epoch", Field::Int(v)) => {
                record.producer_epoch =
                    i16::try_from(v).map_err(|_| wrong(&name, &Field::Int(v)))?
            }
            ("leader_epoch", Field::Int(v)) => record.leader_epoch = v,
            (_, field) => return Err(wrong(&name, &field)),
        }
    }
    Ok(record)
}

fn optional_bytes(name: &str, field: Field) -> Result<Option<Vec<u8>>, ObjectError> {
    match field {
        Field::Null => Ok(None),
        Field::Bytes(b) => Ok(Some(b.data().to_vec())),
        other => Err(ObjectError::Schema(format!("column {name}: {other:?}"))),
    }
}

fn header_of(element: &Field) -> Result<(String, Option<Vec<u8>>), ObjectError> {
    let Field::Group(row) = element else {
        return Err(ObjectError::Schema(format!("header: {element:?}")));
    };
    let mut key = None;
    let mut value = None;
    for (name, field) in row.get_column_iter() {
        match (name.as_str(), field) {
            ("key", Field::Str(s)) => key = Some(s.clone()),
            ("value", field) => value = optional_bytes(name, field.clone())?,
            (_, field) => return Err(ObjectError::Schema(format!("header {name}: {field:?}"))),
        }
    }
    let key = key.ok_or_else(|| ObjectError::Schema("header without a key".into()))?;
    Ok((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::assign_offsets;
    use crate::log::records::testing::{encode_batch, TestRecord};

    fn batch_at(base: i64, records: &[TestRecord], timestamp: i64, codec: i16) -> Vec<u8> {
        let mut batch = encode_batch(records, timestamp, (7, 3, 0));
        if codec != 0 {
            let header = BatchHeader::parse_checked(&batch).expect("valid batch");
            batch = crate::log::records::recompress(&header, codec, None).expect("recompressed");
        }
        assign_offsets(&mut batch, base, 4, None);
        batch
    }

    fn sample() -> Vec<TestRecord> {
        vec![
            TestRecord {
                key: Some(b"k0".to_vec()),
                value: Some(b"v0".to_vec()),
                headers: vec![],
                timestamp_delta: 0,
            },
            TestRecord {
                key: None,
                value: Some(vec![0, 255, 1]),
                headers: vec![("a".into(), Some(b"1".to_vec())), ("b".into(), None)],
                timestamp_delta: 5,
            },
            TestRecord {
                key: Some(b"k2".to_vec()),
                value: None,
                headers: vec![("only".into(), Some(Vec::new()))],
                timestamp_delta: 9,
            },
        ]
    }

    #[test]
    fn an_object_reads_back_every_field_of_every_record() {
        for codec in [0, 1, 2, 3, 4] {
            let batch = batch_at(10, &sample(), 1_000, codec);
            let header = BatchHeader::parse_checked(&batch).expect("valid batch");
            let mut builder = ObjectBuilder::new();
            builder.push_batch(&header, 0, 1 << 20).expect("pushed");
            assert_eq!(
                (builder.first_offset(), builder.last_offset()),
                (Some(10), Some(12))
            );
            let file = builder.finish("orders", 3).expect("encoded");
            let back = read_object(Bytes::from(file)).expect("decoded");
            let expected: Vec<ArchivedRecord> = sample()
                .into_iter()
                .enumerate()
                .map(|(i, r)| ArchivedRecord {
                    offset: 10 + i as i64,
                    timestamp: 1_000 + r.timestamp_delta,
                    log_append_time: false,
                    key: r.key,
                    value: r.value,
                    headers: r.headers,
                    producer_id: 7,
                    producer_epoch: 3,
                    leader_epoch: 4,
                })
                .collect();
            assert_eq!(back, expected, "codec {codec}");
        }
    }

    #[test]
    fn records_before_the_start_and_control_batches_are_left_out() {
        let batch = batch_at(10, &sample(), 1_000, 0);
        let header = BatchHeader::parse_checked(&batch).expect("valid batch");
        let mut builder = ObjectBuilder::new();
        builder.push_batch(&header, 11, 1 << 20).expect("pushed");
        let mut control = batch_at(13, &sample()[..1], 1_000, 0);
        control[22] |= 0x20; // the control bit of the attributes' low byte
        let crc = crc32c::crc32c(&control[21..]);
        control[17..21].copy_from_slice(&crc.to_be_bytes());
        let control_header = BatchHeader::parse_checked(&control).expect("valid batch");
        assert!(control_header.is_control());
        builder
            .push_batch(&control_header, 0, 1 << 20)
            .expect("pushed");
        let back =
            read_object(Bytes::from(builder.finish("t", 0).expect("encoded"))).expect("decoded");
        assert_eq!(
            back.iter().map(|r| r.offset).collect::<Vec<_>>(),
            vec![11, 12]
        );
    }
}
