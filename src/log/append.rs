//! Appending: a leader's producer batches (validated, deduplicated by producer
//! sequence, stamped with offsets and the leader epoch, recompressed to the topic's
//! codec when it has one) and a follower's replicated batches (written unchanged);
//! rolling to a new segment; the epoch a leader stamps.

use std::io;
use std::sync::Arc;

use super::batch::{self, BatchError, BatchHeader};
use super::producer_state::SequenceCheck;
use super::records;
use super::segment::Segment;
use super::txn::TxnMarker;
use super::{io_error, AppendError, AppendInfo, Log};
use crate::model::LeaderEpoch;

impl Log {
    /// Validates and appends a record set (one or more batches) from a producer.
    ///
    /// Every batch is checked (framing, magic, CRC-32C, not control, size; in a
    /// compacted log, that every record has a key, which means decompressing) before
    /// anything is written; producer sequences (and that a producer with an open
    /// transaction writes transactionally) are then checked batch by batch, and a
    /// retried duplicate is answered with its original offsets instead of appended. A
    /// transactional batch opens its producer's transaction here; whether the
    /// coordinator knows of it is the Produce handler's question.
    pub fn append(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, AppendError> {
        let (converted, recompressed) = self.recompressed(records)?;
        let records: &[u8] = converted.as_deref().unwrap_or(records);
        let mut headers = Vec::new();
        for header in batch::batches(records) {
            let header = header?;
            // Here, not only in the Produce handler, so that no writer of the leader's
            // log can leave a marker no coordinator wrote (recompression keeps the bit).
            if header.is_control() {
                return Err(AppendError::ControlBatch);
            }
            let bytes = header.total_bytes() as u64;
            if bytes > self.config.max_message_bytes {
                return Err(AppendError::TooLarge {
                    bytes,
                    max: self.config.max_message_bytes,
                });
            }
            if bytes > self.config.segment_bytes {
                return Err(AppendError::LargerThanSegment {
                    bytes,
                    segment_bytes: self.config.segment_bytes,
                });
            }
            if self.config.cleanup.compact {
                check_keys(&header)?;
            }
            if !self.config.log_append_time {
                self.check_timestamps(&header, now_ms)?;
            }
            headers.push(header);
        }
        if headers.is_empty() {
            return Err(BatchError::Empty.into());
        }
        let log_append_time = self.config.log_append_time.then_some(now_ms);
        let mut first: Option<i64> = None;
        let mut last = -1;
        for header in headers {
            if header.has_producer_id()
                && (header.base_sequence() >= 0 || header.is_transactional())
            {
                if let SequenceCheck::Duplicate {
                    base_offset,
                    last_offset,
                } = self.producers.check(&header)?
                {
                    first.get_or_insert(base_offset);
                    last = last_offset;
                    continue;
                }
            }
            let base = self.end();
            last = self.write_leader_batch(&header, log_append_time, now_ms)?;
            first.get_or_insert(base);
        }
        Ok(AppendInfo {
            base_offset: first.unwrap_or(last),
            last_offset: last,
            log_append_time,
            leader_epoch: self.leader_epoch,
            recompressed,
        })
    }

    /// Appends a transaction marker as the leader (the coordinator's WriteTxnMarkers):
    /// refused when the producer's epoch or the coordinator's is older than the one
    /// this partition last saw.
    pub fn append_marker(
        &mut self,
        marker: &TxnMarker,
        now_ms: i64,
    ) -> Result<AppendInfo, AppendError> {
        self.producers.check_marker(marker)?;
        let batch = marker.encode(now_ms);
        let header = BatchHeader::parse(&batch)?;
        let base = self.end();
        let last = self.write_leader_batch(&header, None, now_ms)?;
        Ok(AppendInfo {
            base_offset: base,
            last_offset: last,
            log_append_time: None,
            leader_epoch: self.leader_epoch,
            recompressed: None,
        })
    }

    /// Writes one checked batch at the log end as the leader: rolls when due, stamps
    /// offsets and the leader epoch, records producer state. Returns its last offset.
    fn write_leader_batch(
        &mut self,
        header: &BatchHeader<'_>,
        log_append_time: Option<i64>,
        now_ms: i64,
    ) -> Result<i64, AppendError> {
        let base = self.end();
        self.maybe_roll(header.total_bytes() as u64, now_ms)
            .map_err(io_error(&self.dir))?;
        let epoch = self.leader_epoch;
        // Before the batch, as Kafka does: an entry starting at the log end with no
        // batch behind it (the write failed) is dropped at the next open.
        self.epochs.assign(epoch, base);
        self.persist_epochs()?;
        let appended = self.active_mut().and_then(|segment| {
            segment.append(header.bytes(), base, epoch, log_append_time, now_ms)
        });
        let last_offset = appended.map_err(io_error(&self.dir))?;
        self.producers.record(header, base);
        Ok(last_offset)
    }

    /// `records` with every batch in another codec than the topic's recompressed to
    /// it; `None` when nothing needs it (`compression.type=producer`, or the producer
    /// used the topic's codec): the zero-copy path.
    #[allow(clippy::type_complexity)]
    pub(super) fn recompressed(
        &self,
        records: &[u8],
    ) -> Result<(Option<Vec<u8>>, Option<(usize, std::time::Duration)>), AppendError> {
        let Some((codec, level)) = self.config.compression else {
            return Ok((None, None));
        };
        let needs = batch::batches(records)
            .any(|h| h.is_ok_and(|h| !h.is_control() && h.compression() != codec));
        if !needs {
            return Ok((None, None));
        }
        let started = std::time::Instant::now();
        let mut out = Vec::with_capacity(records.len());
        let mut count = 0;
        for header in batch::batches(records) {
            let header = header?;
            if header.is_control() || header.compression() == codec {
                out.extend_from_slice(header.bytes());
                continue;
            }
            let batch = records::recompress(&header, codec, level)
                .map_err(|e| AppendError::UnreadableRecords(e.to_string()))?;
            out.extend_from_slice(&batch);
            count += 1;
        }
        Ok((Some(out), Some((count, started.elapsed()))))
    }

    /// Becoming the leader in `epoch`: batches appended from now on carry it, and the
    /// epoch cache records that it starts at the log end now, before any batch, as
    /// Kafka does at election (`maybeAssignEpochStartOffset`). Without that entry a
    /// follower whose divergent epoch lies between this leader's last written epoch
    /// and `epoch` would get an undefined answer instead of the truncation point.
    pub fn start_leader_epoch(&mut self, epoch: LeaderEpoch) -> Result<(), AppendError> {
        self.leader_epoch = epoch.0;
        self.epochs.assign(epoch.0, self.end());
        self.persist_epochs()
    }

    /// Writes the epoch cache's file if it changed; its fsync goes with the next flush.
    pub(super) fn persist_epochs(&mut self) -> Result<(), AppendError> {
        if !self.epochs.is_dirty() {
            return Ok(());
        }
        self.epochs.write(&self.dir).map_err(io_error(&self.dir))?;
        self.deferred.epochs_unsynced = true;
        self.deferred.dir_changes += 1;
        Ok(())
    }

    /// Appends batches a follower fetched from its leader, byte for byte as they came
    /// (offsets, leader epochs, timestamps, producer ids, CRC), so that the replica is
    /// identical to the leader's log.
    ///
    /// Every whole batch's framing and CRC-32C are checked before anything is written,
    /// and the batches must start at or past the log end, each after the one before
    /// ([`AppendError::NotContiguous`] otherwise: nothing written). Past, not only at:
    /// a compacted leader's log has gaps where the cleaner dropped whole batches. A trailing partial
    /// batch (a fetch response may end in one) is ignored; when nothing whole is left,
    /// nothing is appended and the answer's `last_offset` is below its `base_offset`.
    /// Producer state is recorded from each batch without sequence checks (the leader
    /// made them), so that it is there if this replica becomes the leader.
    pub fn append_replicated(&mut self, records: &[u8]) -> Result<AppendInfo, AppendError> {
        let log_end = self.end();
        let mut headers = Vec::new();
        let mut rest = records;
        let mut expected = log_end;
        while !rest.is_empty() {
            let header = match BatchHeader::parse_checked(rest) {
                Ok(header) => header,
                Err(BatchError::Truncated { .. }) => break,
                Err(error) => return Err(error.into()),
            };
            if header.base_offset() < expected {
                return Err(AppendError::NotContiguous {
                    expected,
                    found: header.base_offset(),
                });
            }
            expected = header.last_offset() + 1;
            rest = &rest[header.total_bytes()..];
            headers.push(header);
        }
        let now_ms = wall_clock_ms();
        for header in &headers {
            self.maybe_roll(header.total_bytes() as u64, now_ms)
                .map_err(io_error(&self.dir))?;
            self.make_room(header.total_bytes() as u64)
                .map_err(io_error(&self.dir))?;
            self.epochs
                .assign(header.partition_leader_epoch(), header.base_offset());
            self.persist_epochs()?;
            self.active_mut()
                .and_then(|segment| segment.append_raw(header, now_ms))
                .map_err(io_error(&self.dir))?;
            self.producers.record(header, header.base_offset());
        }
        Ok(AppendInfo {
            base_offset: log_end,
            last_offset: expected - 1,
            log_append_time: None,
            leader_epoch: self.leader_epoch,
            recompressed: None,
        })
    }

    /// An empty active segment too small for a batch the leader accepted (its
    /// `segment.bytes` was lowered since, or this replica's differs) is made again
    /// with room for it, as a roll sizes a new segment for its first batch. Nothing
    /// was read from an empty segment, so no view of its file exists.
    pub(super) fn make_room(&mut self, bytes: u64) -> io::Result<()> {
        let Some((&base, active)) = self.segments.iter().next_back() else {
            return Ok(());
        };
        if !active.is_empty() || active.capacity() >= bytes {
            return Ok(());
        }
        let mut sizes = self.config.sizes();
        sizes.segment_bytes = sizes.segment_bytes.max(bytes);
        self.segments.remove(&base);
        self.segments
            .insert(base, Segment::create(&self.dir, base, sizes)?);
        Ok(())
    }

    pub(super) fn maybe_roll(&mut self, incoming_bytes: u64, now_ms: i64) -> io::Result<()> {
        let needs_roll = self.active().is_some_and(|s| {
            s.should_roll(
                incoming_bytes,
                now_ms,
                self.config.segment_bytes,
                self.roll_after_ms(),
            )
        });
        if needs_roll {
            self.roll(incoming_bytes)?;
        }
        Ok(())
    }

    /// The active segment's age at which it rolls: `segment.ms` less this segment's
    /// jitter, and for a compacted log no later than `max.compaction.lag.ms`, since the
    /// active segment is never cleaned (KIP-354).
    pub(super) fn roll_after_ms(&self) -> i64 {
        let segment_ms = self.config.segment_ms - self.roll_jitter_ms();
        if self.config.cleanup.compact {
            segment_ms.min(self.config.max_compaction_lag_ms)
        } else {
            segment_ms
        }
    }

    /// The active segment's share of `segment.jitter.ms`: below `min(segment.jitter.ms,
    /// segment.ms)` as Kafka's `randomSegmentJitter`, drawn from the log's directory and
    /// the segment's base offset rather than a random number, so that it differs between
    /// logs and segments yet stays the same across a restart.
    fn roll_jitter_ms(&self) -> i64 {
        let bound = self.config.segment_jitter_ms.min(self.config.segment_ms);
        if bound <= 0 {
            return 0;
        }
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        self.dir.hash(&mut hasher);
        self.segments.keys().next_back().hash(&mut hasher);
        (hasher.finish() % bound as u64) as i64
    }

    /// Kafka's `LogValidator.validateTimestamp` for a CreateTime log, on the batch's first
    /// and largest timestamps (the records' own are not decoded on this path): neither
    /// may be older than `message.timestamp.before.max.ms` nor ahead of the clock by more
    /// than `message.timestamp.after.max.ms`. A batch without timestamps (-1) passes.
    fn check_timestamps(&self, header: &BatchHeader<'_>, now_ms: i64) -> Result<(), AppendError> {
        let earliest = now_ms.saturating_sub(self.config.timestamp_before_max_ms);
        let latest = now_ms.saturating_add(self.config.timestamp_after_max_ms);
        for timestamp in [header.base_timestamp(), header.max_timestamp()] {
            if timestamp >= 0 && (timestamp < earliest || timestamp > latest) {
                return Err(AppendError::TimestampOutOfRange {
                    timestamp,
                    earliest,
                    latest,
                });
            }
        }
        Ok(())
    }

    /// Retires the active segment and starts a new one at the log end offset. Nothing
    /// here waits for the disk: the retired segment's sync, the new file's directory
    /// entry and the producer snapshot go with the next flush ([`Deferred`]).
    pub(super) fn roll(&mut self, first_batch_bytes: u64) -> io::Result<()> {
        let base = self.end();
        let snapshot = self.producer_snapshot()?;
        let retired = self.active_mut()?;
        let retired_base = retired.base_offset();
        let syncs = retired.retire()?;
        self.deferred.seals.push((retired_base, syncs));
        let mut sizes = self.config.sizes();
        sizes.segment_bytes = sizes.segment_bytes.max(first_batch_bytes);
        self.segments
            .insert(base, Segment::create(&self.dir, base, sizes)?);
        self.deferred.dir_changes += 1;
        self.deferred.snapshot = Some((base, Arc::new(snapshot)));
        Ok(())
    }
}

/// Refuses a batch for a compacted log that holds a record without a key.
pub(super) fn check_keys(header: &BatchHeader<'_>) -> Result<(), AppendError> {
    match records::keyless_records(header) {
        Ok(records) if records.is_empty() => Ok(()),
        Ok(records) => Err(AppendError::MissingKey { records }),
        Err(error) => Err(AppendError::UnreadableRecords(error.to_string())),
    }
}

pub(super) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
