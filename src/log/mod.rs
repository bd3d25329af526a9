//! One partition's durable log: a directory of segments. Knows nothing of the Kafka
//! API, the network or the cluster; callers serialise access (one `&mut Log` writer).
//!
//! ```text
//! <data-dir>/<topic>-<partition>/
//!     00000000000000000000.log        record batches, as clients sent them but for
//!     00000000000000000000.index      the base offset and leader epoch we assign
//!     00000000000000000000.timeindex
//!     00000000000000004096.log        ... the active (last) segment is preallocated
//!     00000000000000004096.snapshot   producer state as of offset 4096 (taken at roll)
//!     log-start-offset                written by DeleteRecords
//! ```
//!
//! Invariants: offsets in the log are contiguous from the first segment's base to the
//! log end offset; no reader is ever handed bytes past a segment's committed size.

pub mod batch;
pub mod compression;
pub mod index;
mod mmap;
pub mod producer_state;
pub mod segment;
pub mod time_index;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use self::batch::BatchError;
use self::mmap::RangeFlusher;
use self::producer_state::{ProducerStateTable, SequenceCheck, SequenceError};
use self::segment::{Segment, SegmentSizes};

/// Per-log settings, from the topic config.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: i64,
    pub index_bytes: u64,
    pub index_interval_bytes: u64,
    /// `-1` keeps data forever.
    pub retention_ms: i64,
    /// `-1` means no size limit.
    pub retention_bytes: i64,
    /// Idempotent-producer state is dropped after this much inactivity
    /// (`producer.id.expiration.ms`).
    pub producer_id_expiration_ms: i64,
    /// Largest batch accepted (`max.message.bytes`).
    pub max_message_bytes: u64,
    /// Overwrite batch timestamps with the broker's clock (`LogAppendTime`).
    pub log_append_time: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_bytes: 10 << 20,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            producer_id_expiration_ms: 24 * 3600 * 1000,
            max_message_bytes: 1_048_588,
            log_append_time: false,
        }
    }
}

impl LogConfig {
    fn sizes(&self) -> SegmentSizes {
        SegmentSizes {
            segment_bytes: self.segment_bytes,
            index_bytes: self.index_bytes,
            index_interval_bytes: self.index_interval_bytes,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("batch of {bytes} bytes exceeds max.message.bytes {max}")]
    TooLarge { bytes: u64, max: u64 },
    #[error("batch of {bytes} bytes does not fit in a segment of segment.bytes {segment_bytes}")]
    LargerThanSegment { bytes: u64, segment_bytes: u64 },
    #[error(transparent)]
    Sequence(#[from] SequenceError),
    #[error("writing log {dir}: {source}")]
    Io {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("offset {offset} is outside the log [{log_start}, {log_end}]")]
pub struct OffsetOutOfRange {
    pub offset: i64,
    pub log_start: i64,
    pub log_end: i64,
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The broker time written into the batches, for `LogAppendTime` topics.
    pub log_append_time: Option<i64>,
}

/// How to open a log directory after a restart.
#[derive(Debug, Clone, Copy)]
pub struct OpenMode {
    /// The broker shut down cleanly: file lengths and indexes are exact.
    pub clean: bool,
    /// Offset below which everything was flushed to disk (from the checkpoint).
    pub recovery_point: i64,
}

/// A flush to run without holding the log: every dirty range, plus the durability
/// work that rolls, DeleteRecords and retention left behind ([`Deferred`]).
#[derive(Debug)]
pub struct FlushPlan {
    dir: PathBuf,
    up_to_offset: i64,
    segments: Vec<(i64, u64, Vec<RangeFlusher>)>,
    seals: Vec<(i64, Vec<RangeFlusher>)>,
    snapshot: Option<(i64, Arc<Vec<u8>>)>,
    log_start: Option<i64>,
    /// The directory's change count to sync up to, when it changed since its last sync.
    dir_changes: Option<u64>,
}

impl FlushPlan {
    /// Performs the writes to disk. An error here is not retryable: the kernel may have
    /// dropped the dirty pages, so the caller must stop using the log.
    pub fn run(&self) -> io::Result<()> {
        for (_, _, flushers) in &self.segments {
            for flusher in flushers {
                flusher.flush()?;
            }
        }
        for (_, syncs) in &self.seals {
            for sync in syncs {
                sync.flush()?;
            }
        }
        if let Some(offset) = self.log_start {
            write_atomically(
                &self.dir.join(LOG_START_FILE),
                offset.to_string().as_bytes(),
            )?;
        }
        if let Some((offset, raw)) = &self.snapshot {
            write_snapshot_file(&self.dir, *offset, raw)?;
        }
        if self.dir_changes.is_some() {
            sync_dir(&self.dir)?;
        }
        Ok(())
    }
    pub fn up_to_offset(&self) -> i64 {
        self.up_to_offset
    }
}

/// Durability work that changes of the log's shape leave for its next flush, so that
/// no fsync happens under the caller's lock. Until the flush that carries it has run,
/// the log's data is not reported durable: acks=all and the recovery checkpoint wait.
#[derive(Debug, Default)]
struct Deferred {
    /// Retired segments whose trimmed lengths are not on disk yet, by base offset.
    seals: Vec<(i64, Vec<RangeFlusher>)>,
    /// The newest producer-state snapshot not written yet: (offset, contents).
    snapshot: Option<(i64, Arc<Vec<u8>>)>,
    /// A log start offset (DeleteRecords) not written yet.
    log_start: Option<i64>,
    /// Segment files created in the directory, counted; `dir_synced` of them are durable.
    dir_changes: u64,
    dir_synced: u64,
}

/// Segments taken out of the log, whose files the caller deletes once it no longer
/// holds the log's lock (unlinking a large file can take a while). Readers holding
/// `Bytes` of them keep their mappings alive.
#[derive(Debug, Default)]
#[must_use = "the files of removed segments stay on disk until delete() is called"]
pub struct Doomed(Vec<Segment>);

impl Doomed {
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Removes the segments' files.
    pub fn delete(self) -> io::Result<()> {
        for segment in &self.0 {
            segment.delete_files()?;
        }
        Ok(())
    }
}

#[derive(Debug)]
pub struct Log {
    dir: PathBuf,
    config: LogConfig,
    segments: BTreeMap<i64, Segment>,
    log_start_offset: i64,
    producers: ProducerStateTable,
    leader_epoch: i32,
    /// Everything below this offset is on disk.
    recovery_point: i64,
    deferred: Deferred,
}

const LOG_START_FILE: &str = "log-start-offset";

fn io_error(dir: &Path) -> impl FnOnce(io::Error) -> AppendError + '_ {
    move |source| AppendError::Io {
        dir: dir.to_path_buf(),
        source,
    }
}

impl Log {
    /// Opens or creates the log in `dir`, recovering the unflushed tail if the last
    /// shutdown was not clean.
    pub fn open(dir: &Path, config: LogConfig, mode: OpenMode) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        remove_temporary_files(dir)?;
        let bases = list_suffix(dir, ".log")?;
        let stored_log_start = read_i64_file(&dir.join(LOG_START_FILE))?;
        let mut segments = BTreeMap::new();
        let sizes = config.sizes();
        let mut truncated_at: Option<i64> = None;
        for (i, &base) in bases.iter().enumerate() {
            if truncated_at.is_some() {
                // Kafka keeps the log gap-free: after a torn segment, later ones go.
                tracing::warn!(dir = %dir.display(), base, "deleting segment after a truncated one");
                Segment::open(dir, base, sizes, false)?.delete_files()?;
                continue;
            }
            let next_base = bases.get(i + 1).copied();
            let below_recovery_point = next_base.is_some_and(|n| n <= mode.recovery_point);
            if mode.clean || below_recovery_point {
                segments.insert(base, Segment::open(dir, base, sizes, true)?);
            } else {
                let mut segment = Segment::open(dir, base, sizes, false)?;
                let report = segment.recover(mode.recovery_point)?;
                if report.truncated_bytes > 0 {
                    tracing::info!(dir = %dir.display(), base, truncated = report.truncated_bytes, "recovered segment tail");
                }
                if next_base.is_some_and(|n| segment.next_offset() < n) {
                    truncated_at = Some(segment.next_offset());
                }
                segments.insert(base, segment);
            }
        }
        let mut deferred = Deferred::default();
        if segments.is_empty() {
            let base = stored_log_start.unwrap_or(0).max(0);
            segments.insert(base, Segment::create(dir, base, sizes)?);
            deferred.dir_changes = 1;
        }
        let first_base = segments.keys().next().copied().unwrap_or(0);
        let mut log = Self {
            dir: dir.to_path_buf(),
            config,
            segments,
            log_start_offset: stored_log_start.unwrap_or(first_base).max(first_base),
            producers: ProducerStateTable::default(),
            leader_epoch: 0,
            recovery_point: 0,
            deferred,
        };
        log.log_start_offset = log.log_start_offset.min(log.log_end_offset());
        log.recovery_point = log.log_end_offset();
        // Segments wholly below the log start are left by a deletion that a crash or a
        // failed unlink interrupted; they are not part of the log.
        if let Err(error) = log.take_segments_below_log_start()?.delete() {
            tracing::warn!(dir = %dir.display(), %error, "could not delete segments below the log start");
        }
        log.load_producer_state()?;
        Ok(log)
    }

    /// Loads the newest usable producer-state snapshot and replays batches after it.
    fn load_producer_state(&mut self) -> io::Result<()> {
        let log_end = self.log_end_offset();
        let snapshots = list_suffix(&self.dir, ".snapshot")?;
        let mut from = self.segments.keys().next().copied().unwrap_or(0);
        for &offset in snapshots.iter().rev() {
            if offset > log_end {
                continue;
            }
            let path = snapshot_path(&self.dir, offset);
            match std::fs::read(&path).map(|raw| serde_json::from_slice::<ProducerStateTable>(&raw))
            {
                Ok(Ok(table)) => {
                    self.producers = table;
                    from = offset;
                    break;
                }
                _ => {
                    tracing::warn!(path = %path.display(), "ignoring unreadable producer snapshot")
                }
            }
        }
        let producers = &mut self.producers;
        for segment in self.segments.values() {
            if segment.next_offset() <= from {
                continue;
            }
            segment.for_each_batch_from(from, |header| {
                if header.base_offset() >= from {
                    producers.record(header, header.base_offset());
                }
            });
        }
        Ok(())
    }

    fn producer_snapshot(&self) -> io::Result<Vec<u8>> {
        serde_json::to_vec(&self.producers).map_err(io::Error::other)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> &LogConfig {
        &self.config
    }
    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }
    pub fn log_end_offset(&self) -> i64 {
        self.active().map_or(0, Segment::next_offset)
    }
    pub fn recovery_point(&self) -> i64 {
        self.recovery_point
    }
    /// The offset a recovery checkpoint may record: the recovery point, but never past
    /// a retired segment whose trimmed length is not durable yet, since a segment below
    /// the checkpoint is trusted (not rescanned) at the next start.
    pub fn checkpoint_offset(&self) -> i64 {
        self.deferred
            .seals
            .iter()
            .map(|(base, _)| *base)
            .fold(self.recovery_point, i64::min)
    }
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }
    /// The epoch stamped on batches appended from now on.
    pub fn set_leader_epoch(&mut self, epoch: i32) {
        self.leader_epoch = epoch;
    }
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size).sum()
    }
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn active(&self) -> Option<&Segment> {
        self.segments.values().next_back()
    }

    fn active_mut(&mut self) -> io::Result<&mut Segment> {
        self.segments
            .values_mut()
            .next_back()
            .ok_or_else(|| io::Error::other("log has no segment"))
    }

    /// Validates and appends a record set (one or more batches) from a producer.
    ///
    /// Every batch is checked (framing, magic, CRC-32C, size) before anything is
    /// written; idempotent-producer sequences are then checked batch by batch, and a
    /// retried duplicate is answered with its original offsets instead of appended.
    pub fn append(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, AppendError> {
        let mut headers = Vec::new();
        for header in batch::batches(records) {
            let header = header?;
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
            headers.push(header);
        }
        if headers.is_empty() {
            return Err(BatchError::Empty.into());
        }
        let log_append_time = self.config.log_append_time.then_some(now_ms);
        let mut first: Option<i64> = None;
        let mut last = -1;
        for header in headers {
            if header.has_producer_id() && header.base_sequence() >= 0 {
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
            let base = self.log_end_offset();
            self.maybe_roll(header.total_bytes() as u64, now_ms)
                .map_err(io_error(&self.dir))?;
            let epoch = self.leader_epoch;
            let appended = self.active_mut().and_then(|segment| {
                segment.append(header.bytes(), base, epoch, log_append_time, now_ms)
            });
            let last_offset = appended.map_err(io_error(&self.dir))?;
            self.producers.record(&header, base);
            first.get_or_insert(base);
            last = last_offset;
        }
        Ok(AppendInfo {
            base_offset: first.unwrap_or(last),
            last_offset: last,
            log_append_time,
        })
    }

    fn maybe_roll(&mut self, incoming_bytes: u64, now_ms: i64) -> io::Result<()> {
        let needs_roll = self.active().is_some_and(|s| {
            s.should_roll(
                incoming_bytes,
                now_ms,
                self.config.segment_bytes,
                self.config.segment_ms,
            )
        });
        if needs_roll {
            self.roll(incoming_bytes)?;
        }
        Ok(())
    }

    /// Retires the active segment and starts a new one at the log end offset. Nothing
    /// here waits for the disk: the retired segment's sync, the new file's directory
    /// entry and the producer snapshot go with the next flush ([`Deferred`]).
    fn roll(&mut self, first_batch_bytes: u64) -> io::Result<()> {
        let base = self.log_end_offset();
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

    /// Whole batches from the one holding `offset`, up to `max_bytes` (at least one
    /// batch when `min_one`); `None` at the log end. Zero-copy views of the segments.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: u64,
        min_one: bool,
    ) -> Result<Option<Bytes>, OffsetOutOfRange> {
        let log_end = self.log_end_offset();
        if offset < self.log_start_offset || offset > log_end {
            return Err(OffsetOutOfRange {
                offset,
                log_start: self.log_start_offset,
                log_end,
            });
        }
        for segment in self
            .segments
            .range(..=offset)
            .next_back()
            .into_iter()
            .map(|(_, s)| s)
            .chain(
                self.segments
                    .range(offset.saturating_add(1)..)
                    .map(|(_, s)| s),
            )
        {
            if segment.next_offset() <= offset {
                continue;
            }
            if let Some(bytes) = segment.read(offset, max_bytes, min_one) {
                return Ok(Some(bytes));
            }
        }
        Ok(None)
    }

    /// First `(offset, timestamp)` whose timestamp is `>= target` (ListOffsets).
    pub fn offset_for_timestamp(&self, target: i64) -> Option<(i64, i64)> {
        self.segments
            .values()
            .filter(|s| s.max_timestamp() >= target)
            .find_map(|s| s.offset_for_timestamp(target))
            .map(|(offset, ts)| (offset.max(self.log_start_offset), ts))
    }

    /// The points Kafka's ListOffsets v0 chooses from (`legacyFetchOffsetsBefore`): each
    /// segment's first offset (not below the log start) with the segment file's last
    /// modification time in ms, then `(log end, now_ms)` when the active segment holds
    /// data. Ascending by offset. A file whose time cannot be read counts as modified at
    /// 0, as Java's `File.lastModified` reports it.
    pub fn legacy_offset_points(&self, now_ms: i64) -> Vec<(i64, i64)> {
        let mut points: Vec<(i64, i64)> = self
            .segments
            .keys()
            .map(|&base| {
                let modified_ms = std::fs::metadata(segment::log_path(&self.dir, base))
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_millis() as i64);
                (base.max(self.log_start_offset), modified_ms)
            })
            .collect();
        if self.active().is_some_and(|s| !s.is_empty()) {
            points.push((self.log_end_offset(), now_ms));
        }
        points
    }

    /// `(offset, timestamp)` of the first record carrying the log's largest timestamp,
    /// as Kafka answers ListOffsets(-3). Exact for uncompressed batches; for a compressed
    /// one, the batch's last offset, since the broker does not decompress.
    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        let segment = self
            .segments
            .values()
            .filter(|s| s.max_timestamp() >= 0)
            .fold(None, |best: Option<&Segment>, s| match best {
                Some(b) if s.max_timestamp() <= b.max_timestamp() => best,
                _ => Some(s),
            })?;
        Some(segment.exact_max_timestamp())
    }

    /// Moves the log start to `offset` (DeleteRecords) and takes out whole segments below
    /// it. The new log start is written to disk by the next flush.
    pub fn delete_records_before(&mut self, offset: i64) -> Result<(i64, Doomed), AppendError> {
        let log_end = self.log_end_offset();
        if offset > log_end || offset < 0 {
            return Err(AppendError::Io {
                dir: self.dir.clone(),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    OffsetOutOfRange {
                        offset,
                        log_start: self.log_start_offset,
                        log_end,
                    },
                ),
            });
        }
        if offset <= self.log_start_offset {
            return Ok((self.log_start_offset, Doomed::default()));
        }
        self.log_start_offset = offset;
        self.deferred.log_start = Some(offset);
        let doomed = self
            .take_segments_below_log_start()
            .map_err(io_error(&self.dir))?;
        Ok((self.log_start_offset, doomed))
    }

    fn take_segments_below_log_start(&mut self) -> io::Result<Doomed> {
        if self
            .active()
            .is_some_and(|a| !a.is_empty() && a.next_offset() <= self.log_start_offset)
        {
            self.roll(0)?;
        }
        let doomed: Vec<i64> = self
            .segments
            .iter()
            .rev()
            .skip(1)
            .filter(|(_, s)| s.next_offset() <= self.log_start_offset)
            .map(|(&base, _)| base)
            .collect();
        Ok(self.take_segments(&doomed))
    }

    fn take_segments(&mut self, bases: &[i64]) -> Doomed {
        self.deferred
            .seals
            .retain(|(base, _)| !bases.contains(base));
        Doomed(
            bases
                .iter()
                .filter_map(|base| self.segments.remove(base))
                .collect(),
        )
    }

    /// Takes out segments past `retention.ms` or beyond `retention.bytes`, oldest first.
    pub fn apply_retention(&mut self, now_ms: i64) -> io::Result<Doomed> {
        self.producers
            .expire(now_ms, self.config.producer_id_expiration_ms);
        let retention_ms = self.config.retention_ms;
        let expired = |s: &Segment| {
            retention_ms >= 0 && s.max_timestamp() >= 0 && s.max_timestamp() < now_ms - retention_ms
        };
        // An expired active segment is rolled so that it can go too.
        if self.active().is_some_and(|a| !a.is_empty() && expired(a)) {
            self.roll(0)?;
        }
        let mut excess = if self.config.retention_bytes >= 0 {
            self.size_bytes() as i64 - self.config.retention_bytes
        } else {
            0
        };
        let mut doomed = Vec::new();
        for (&base, segment) in self
            .segments
            .iter()
            .rev()
            .skip(1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            let too_big = excess > 0 && excess - segment.size() as i64 >= 0;
            if expired(segment) || too_big {
                excess -= segment.size() as i64;
                doomed.push(base);
            } else {
                break;
            }
        }
        let doomed = self.take_segments(&doomed);
        if let Some(&first) = self.segments.keys().next() {
            self.log_start_offset = self.log_start_offset.max(first);
        }
        Ok(doomed)
    }

    /// Collects what must be written to disk for everything appended so far.
    pub fn flush_plan(&self) -> FlushPlan {
        let deferred = &self.deferred;
        FlushPlan {
            dir: self.dir.clone(),
            up_to_offset: self.log_end_offset(),
            segments: self
                .segments
                .iter()
                .filter_map(|(&base, s)| s.flush_plan().map(|(to, f)| (base, to, f)))
                .collect(),
            seals: deferred.seals.clone(),
            snapshot: deferred.snapshot.clone(),
            log_start: deferred.log_start,
            dir_changes: (deferred.dir_changes > deferred.dir_synced)
                .then_some(deferred.dir_changes),
        }
    }

    /// Records that `plan` ran successfully. Work deferred after the plan was made
    /// stays pending for the next one.
    pub fn mark_flushed(&mut self, plan: &FlushPlan) {
        for (base, to, _) in &plan.segments {
            if let Some(segment) = self.segments.get_mut(base) {
                segment.mark_flushed(*to);
            }
        }
        let deferred = &mut self.deferred;
        deferred
            .seals
            .retain(|(base, _)| !plan.seals.iter().any(|(done, _)| done == base));
        if deferred.snapshot.as_ref().map(|(offset, _)| *offset)
            == plan.snapshot.as_ref().map(|(offset, _)| *offset)
        {
            deferred.snapshot = None;
        }
        if deferred.log_start == plan.log_start {
            deferred.log_start = None;
        }
        if let Some(changes) = plan.dir_changes {
            deferred.dir_synced = deferred.dir_synced.max(changes);
        }
        self.recovery_point = self.recovery_point.max(plan.up_to_offset);
    }

    pub fn unflushed_bytes(&self) -> u64 {
        self.segments.values().map(Segment::unflushed_bytes).sum()
    }

    /// Flushes, seals the active segment's files to their length and snapshots the
    /// producer state, so that the next open can trust everything without a scan.
    pub fn close(&mut self) -> io::Result<()> {
        let plan = self.flush_plan();
        plan.run()?;
        self.mark_flushed(&plan);
        self.active_mut()?.seal()?;
        write_snapshot_file(&self.dir, self.log_end_offset(), &self.producer_snapshot()?)
    }
}

fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}.snapshot"))
}

/// Writes a producer-state snapshot and keeps only the two newest (older ones are
/// never read).
fn write_snapshot_file(dir: &Path, offset: i64, raw: &[u8]) -> io::Result<()> {
    write_atomically(&snapshot_path(dir, offset), raw)?;
    let snapshots = list_suffix(dir, ".snapshot")?;
    if snapshots.len() > 2 {
        for old in &snapshots[..snapshots.len() - 2] {
            let _ = std::fs::remove_file(snapshot_path(dir, *old));
        }
    }
    Ok(())
}

/// Removes what a crash left of [`write_atomically`]'s temporary files.
fn remove_temporary_files(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.ends_with(".tmp"))
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Base offsets of the files in `dir` named `<20 digits><suffix>`, sorted.
fn list_suffix(dir: &Path, suffix: &str) -> io::Result<Vec<i64>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(suffix) {
            if stem.len() == 20 {
                if let Ok(offset) = stem.parse::<i64>() {
                    found.push(offset);
                }
            }
        }
    }
    found.sort_unstable();
    Ok(found)
}

fn read_i64_file(path: &Path) -> io::Result<Option<i64>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text.trim().parse().ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `data` to `path` so that a crash leaves either the old or the new file:
/// write a temporary file, fsync it, rename it over, fsync the directory.
pub fn write_atomically(path: &Path, data: &[u8]) -> io::Result<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    // A temporary name of its own per call: two writers of the same file must not
    // rename each other's temporary file away.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let unique = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".{}.{unique}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::batch::testing::{encode_batch, simple_batch, TestRecord};
    use super::*;

    fn small_config() -> LogConfig {
        LogConfig {
            segment_bytes: 1024,
            index_bytes: 1024,
            index_interval_bytes: 128,
            ..LogConfig::default()
        }
    }

    fn fresh(dir: &Path) -> io::Result<Log> {
        Log::open(
            dir,
            small_config(),
            OpenMode {
                clean: false,
                recovery_point: 0,
            },
        )
    }

    #[test]
    fn appends_roll_segments_and_read_back_in_order() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..40 {
            let info = log.append(&simple_batch(2, 1000 + i), 0)?;
            assert_eq!(info.base_offset, i * 2);
        }
        assert!(log.segment_count() > 3, "rolled by size");
        let mut offset = 0;
        while let Some(bytes) = log.read(offset, 300, true)? {
            for header in batch::batches(&bytes) {
                let header = header?;
                assert_eq!(header.base_offset(), offset);
                offset = header.last_offset() + 1;
            }
        }
        assert_eq!(offset, 80);
        assert!(
            log.read(81, 100, true).is_err(),
            "past the end is out of range"
        );
        Ok(())
    }

    #[test]
    fn clean_close_and_unclean_crash_both_reopen_every_batch(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..30 {
            log.append(&simple_batch(1, i), 0)?;
        }
        log.close()?;
        let log = Log::open(
            dir.path(),
            small_config(),
            OpenMode {
                clean: true,
                recovery_point: 0,
            },
        )?;
        assert_eq!(log.log_end_offset(), 30);
        drop(log); // a crash: no close, the active segment stays preallocated
        let mut log = fresh(dir.path())?;
        assert_eq!(log.log_end_offset(), 30);
        assert_eq!(log.append(&simple_batch(1, 0), 0)?.base_offset, 30);
        Ok(())
    }

    #[test]
    fn unclean_open_rescans_only_what_lies_past_the_recovery_point(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..40 {
            log.append(&simple_batch(2, i), 0)?;
        }
        let bases = list_suffix(dir.path(), ".log")?;
        assert!(bases.len() >= 3);
        let recovery_point = bases[2];
        drop(log); // crash
                   // Flip a byte inside the first (flushed, sealed) segment's records.
        let first = segment::log_path(dir.path(), bases[0]);
        let mut raw = std::fs::read(&first)?;
        let last = raw.len() - 2;
        raw[last] ^= 0xff;
        std::fs::write(&first, raw)?;
        let trusted = Log::open(
            dir.path(),
            small_config(),
            OpenMode {
                clean: false,
                recovery_point,
            },
        )?;
        assert_eq!(
            trusted.log_end_offset(),
            80,
            "flushed segments are not rescanned"
        );
        drop(trusted);
        let full = Log::open(
            dir.path(),
            small_config(),
            OpenMode {
                clean: false,
                recovery_point: 0,
            },
        )?;
        assert!(
            full.log_end_offset() < bases[1],
            "a full scan finds the corrupt batch and truncates there"
        );
        assert_eq!(
            full.segment_count(),
            1,
            "segments after a truncated one are deleted"
        );
        Ok(())
    }

    fn flush(log: &mut Log) -> io::Result<()> {
        let plan = log.flush_plan();
        plan.run()?;
        log.mark_flushed(&plan);
        Ok(())
    }

    #[test]
    fn a_roll_leaves_its_syncs_to_the_next_flush_and_the_checkpoint_waits_for_them(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        log.append(&simple_batch(2, 0), 0)?;
        flush(&mut log)?;
        assert_eq!(log.checkpoint_offset(), 2);
        // Append until the log rolls: no snapshot is written under the caller's lock.
        let first_segments = log.segment_count();
        let mut i = 0;
        while log.segment_count() == first_segments {
            log.append(&simple_batch(2, i), 0)?;
            i += 1;
        }
        let retired_base = *log.segments.keys().next().ok_or("no segment")?;
        let new_base = *log.segments.keys().next_back().ok_or("no segment")?;
        assert!(
            list_suffix(dir.path(), ".snapshot")?.is_empty(),
            "the roll wrote no snapshot itself"
        );
        assert_eq!(
            log.checkpoint_offset(),
            retired_base.min(2),
            "a retired segment whose length is not synced is not trusted"
        );
        // A plan taken now carries the roll's work; work deferred after it stays pending.
        let plan = log.flush_plan();
        assert_eq!(plan.seals.len(), 1);
        assert!(plan.snapshot.is_some() && plan.dir_changes.is_some());
        plan.run()?;
        log.mark_flushed(&plan);
        assert_eq!(list_suffix(dir.path(), ".snapshot")?, vec![new_base]);
        assert_eq!(log.checkpoint_offset(), log.log_end_offset());
        let after = log.flush_plan();
        assert!(after.seals.is_empty() && after.snapshot.is_none() && after.dir_changes.is_none());
        Ok(())
    }

    #[test]
    fn work_deferred_after_a_plan_was_taken_survives_that_plan(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..20 {
            log.append(&simple_batch(2, i), 0)?;
        }
        let plan = log.flush_plan();
        let (_, doomed) = log.delete_records_before(7)?;
        doomed.delete()?;
        plan.run()?;
        log.mark_flushed(&plan);
        assert_eq!(
            log.flush_plan().log_start,
            Some(7),
            "the log start deferred after the plan is still to be written"
        );
        assert_eq!(read_i64_file(&dir.path().join(LOG_START_FILE))?, None);
        flush(&mut log)?;
        assert_eq!(read_i64_file(&dir.path().join(LOG_START_FILE))?, Some(7));
        Ok(())
    }

    #[test]
    fn a_crash_after_rolls_that_were_never_flushed_recovers_every_batch(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..40 {
            log.append(&simple_batch(2, i), 0)?;
        }
        assert!(log.segment_count() > 3);
        let checkpoint = log.checkpoint_offset();
        drop(log); // crash: no flush ran, so no deferred sync or snapshot either
        let log = Log::open(
            dir.path(),
            small_config(),
            OpenMode {
                clean: false,
                recovery_point: checkpoint,
            },
        )?;
        assert_eq!(log.log_end_offset(), 80);
        Ok(())
    }

    #[test]
    fn segments_left_below_the_log_start_are_deleted_at_open(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..40 {
            log.append(&simple_batch(2, i), 0)?;
        }
        let segments = log.segment_count();
        let (_, doomed) = log.delete_records_before(60)?;
        assert!(!doomed.is_empty());
        flush(&mut log)?;
        drop(doomed); // as if the unlink had failed: the files stay
        log.close()?;
        assert_eq!(list_suffix(dir.path(), ".log")?.len(), segments);
        let log = Log::open(
            dir.path(),
            small_config(),
            OpenMode {
                clean: true,
                recovery_point: 0,
            },
        )?;
        assert_eq!(log.log_start_offset(), 60);
        assert_eq!(list_suffix(dir.path(), ".log")?.len(), log.segment_count());
        assert!(log.segment_count() < segments);
        Ok(())
    }

    #[test]
    fn a_lowered_segment_size_rolls_the_active_segment_at_the_next_append(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut config = small_config();
        config.segment_bytes = 1 << 20;
        let mut log = Log::open(
            dir.path(),
            config.clone(),
            OpenMode {
                clean: false,
                recovery_point: 0,
            },
        )?;
        for i in 0..20 {
            log.append(&simple_batch(2, 1000 + i), 0)?;
        }
        assert_eq!(log.segment_count(), 1);
        config.segment_bytes = 1024;
        log.set_config(config);
        for i in 0..20 {
            log.append(&simple_batch(2, 2000 + i), 0)?;
        }
        assert!(
            log.segment_count() > 2,
            "{} segments: the new size must apply to the segment created with the old one",
            log.segment_count()
        );
        Ok(())
    }

    #[test]
    fn retention_by_size_and_time_advances_log_start() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..40 {
            log.append(&simple_batch(2, 1_000 + i), 0)?;
        }
        let mut config = small_config();
        config.retention_bytes = 2048;
        log.set_config(config.clone());
        let doomed = log.apply_retention(0)?;
        assert!(!doomed.is_empty());
        doomed.delete()?;
        assert!(log.size_bytes() <= 2048 + 1024);
        assert!(log.log_start_offset() > 0);
        assert!(log.read(0, 100, true).is_err());
        config.retention_bytes = -1;
        config.retention_ms = 10;
        log.set_config(config);
        log.apply_retention(1_000_000)?.delete()?;
        assert_eq!(
            log.log_start_offset(),
            log.log_end_offset(),
            "everything expired"
        );
        assert_eq!(log.append(&simple_batch(1, 0), 0)?.base_offset, 80);
        Ok(())
    }

    #[test]
    fn delete_records_moves_log_start_and_survives_reopen() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..20 {
            log.append(&simple_batch(2, i), 0)?;
        }
        let (log_start, doomed) = log.delete_records_before(13)?;
        assert_eq!(log_start, 13);
        doomed.delete()?;
        assert!(log.read(12, 100, true).is_err());
        log.close()?;
        let log = Log::open(
            dir.path(),
            small_config(),
            OpenMode {
                clean: true,
                recovery_point: 0,
            },
        )?;
        assert_eq!(log.log_start_offset(), 13);
        Ok(())
    }

    #[test]
    fn idempotent_retry_is_not_appended_twice_even_after_restart(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        let records = vec![TestRecord::default(); 2];
        let b0 = encode_batch(&records, 0, (5, 0, 0));
        let b1 = encode_batch(&records, 0, (5, 0, 2));
        assert_eq!(log.append(&b0, 0)?.base_offset, 0);
        assert_eq!(log.append(&b1, 0)?.base_offset, 2);
        assert_eq!(
            log.append(&b1, 0)?.base_offset,
            2,
            "duplicate answered with its offset"
        );
        assert_eq!(log.log_end_offset(), 4);
        drop(log); // crash
        let mut log = fresh(dir.path())?;
        assert_eq!(
            log.append(&b1, 0)?.base_offset,
            2,
            "state rebuilt from the log"
        );
        let gap = encode_batch(&records, 0, (5, 0, 9));
        assert!(matches!(log.append(&gap, 0), Err(AppendError::Sequence(_))));
        Ok(())
    }

    #[test]
    fn refuses_oversized_and_corrupt_batches_without_writing(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        let mut config = small_config();
        config.max_message_bytes = 100;
        log.set_config(config);
        assert!(matches!(
            log.append(&simple_batch(10, 0), 0),
            Err(AppendError::TooLarge { .. })
        ));
        let mut config = small_config();
        config.max_message_bytes = 1 << 20;
        log.set_config(config);
        assert!(matches!(
            log.append(&simple_batch(100, 0), 0),
            Err(AppendError::LargerThanSegment { .. })
        ));
        let mut config = small_config();
        config.max_message_bytes = 100;
        log.set_config(config);
        let mut bad = simple_batch(1, 0);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            log.append(&bad, 0),
            Err(AppendError::Batch(BatchError::CrcMismatch { .. }))
        ));
        assert_eq!(log.log_end_offset(), 0);
        Ok(())
    }

    #[test]
    fn timestamps_find_offsets() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..10 {
            log.append(&simple_batch(1, 100 * i), 0)?;
        }
        assert_eq!(log.offset_for_timestamp(250), Some((3, 300)));
        assert_eq!(log.offset_for_timestamp(10_000), None);
        assert_eq!(log.max_timestamp(), Some((9, 900)));
        // Inside one uncompressed batch the exact record is found, not the batch end.
        let records: Vec<TestRecord> = [5, 9_000, 7]
            .iter()
            .map(|&d| TestRecord {
                timestamp_delta: d,
                ..TestRecord::default()
            })
            .collect();
        log.append(&encode_batch(&records, 1_000, (-1, -1, -1)), 0)?;
        assert_eq!(log.max_timestamp(), Some((11, 10_000)));
        Ok(())
    }
}

// Temporary stand-ins until the repl-log branch lands.
mod stubs;
