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
//!     leader-epoch-checkpoint         epoch -> start offset, Kafka's format (epochs.rs)
//!     *.deleted                       taken out by a truncation, not unlinked yet
//!     cleaner-offset-checkpoint       a compacted log's clean/dirty boundary (compaction.rs)
//!     cleaning/, *.swap               a cleaning pass in progress (compaction.rs)
//! ```
//!
//! Invariants: offsets only grow from the first segment's base to the log end offset,
//! and each segment's offsets lie below the next segment's base (a compacted log has
//! gaps where the cleaner dropped records, never reordered or reused offsets); no reader is ever handed bytes past a segment's committed size; no
//! file is shortened, and no byte rewritten, under a view a reader may still hold.
//!
//! A leader appends producers' batches ([`Log::append`]: offsets and epoch assigned
//! here); a follower appends its leader's batches as they are
//! ([`Log::append_replicated`]) and cuts a divergent tail ([`Log::truncate_to`]), so
//! that replicas are byte-identical below the high watermark.

pub mod batch;
pub mod cleaner;
pub mod compaction;
pub mod compression;
pub mod epochs;
pub mod index;
mod mmap;
pub mod producer_state;
pub mod segment;
pub mod throttle;
pub mod time_index;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use self::batch::{BatchError, BatchHeader};
use self::epochs::LeaderEpochCache;
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
    /// Unflushed messages at which a write waits for an fsync before it counts
    /// (`flush.messages`; the partition acts on it, the log only carries it).
    pub flush_messages: i64,
    /// `cleanup.policy`: what happens to old data.
    pub cleanup: CleanupPolicy,
    /// How long a tombstone stays readable after the cleaner first passed it
    /// (`delete.retention.ms`).
    pub delete_retention_ms: i64,
    /// The dirty share of the cleanable log at which it is cleaned
    /// (`min.cleanable.dirty.ratio`).
    pub min_cleanable_dirty_ratio: f64,
    /// A segment is cleaned only once its newest record is this old
    /// (`min.compaction.lag.ms`).
    pub min_compaction_lag_ms: i64,
    /// Dirty data this old is cleaned whatever the ratio, and an active segment
    /// this old is rolled so that it can be (`max.compaction.lag.ms`, KIP-354).
    pub max_compaction_lag_ms: i64,
    /// The topic's `compression.type` when it is not `producer`: batches in another
    /// codec are recompressed to it on the way in. `(codec, level)`.
    pub compression: Option<(i16, Option<u32>)>,
    /// `archive.enable`: retention hands each segment to the archive before deleting
    /// it, and waits while the archive does not have it (see [`ArchiveGate`]).
    pub archive: bool,
    /// `archive.on.failure=delete`: after a failed export retention goes on without
    /// the archive instead of waiting for it.
    pub archive_failure_deletes: bool,
}

/// How far retention may go in a log whose topic archives (`archive.enable`). Set by
/// the archiver from the archive's manifest, which every replica reads: a follower
/// that became leader must still hold whatever the archive lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArchiveGate {
    /// The archive's progress is not known yet (just opened, the store not read):
    /// nothing may go.
    #[default]
    Unknown,
    /// Everything below this offset is in the archive.
    Below(i64),
    /// Everything below this offset is in the archive, and the last export failed:
    /// retention goes past it only if the topic says `archive.on.failure=delete`.
    Failed(i64),
}

/// What one retention pass did.
#[derive(Debug, Default)]
pub struct Retention {
    pub doomed: Doomed,
    /// Expired segments kept because the archive does not hold them yet.
    pub held: usize,
    /// Expired segments deleted without being archived (disk pressure, or
    /// `archive.on.failure=delete` after a failed export).
    pub unarchived: usize,
}

impl Retention {
    /// The pass in numbers, for logs and metrics.
    pub fn counts(&self) -> RetentionCounts {
        RetentionCounts {
            deleted: self.doomed.len(),
            held: self.held,
            unarchived: self.unarchived,
        }
    }
}

/// [`Retention`] without its segments.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetentionCounts {
    pub deleted: usize,
    pub held: usize,
    pub unarchived: usize,
}

/// The expired section of a log an archive has yet to take: `[from, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArchiveWork {
    pub from: i64,
    pub end: i64,
    /// When the oldest of its segments expired (its newest record's time plus
    /// `retention.ms`; the time retention would have deleted it), ms.
    pub expired_since_ms: i64,
    pub bytes: u64,
}

/// `cleanup.policy`: `delete` (retention by time and size), `compact` (keep the latest
/// record of each key), or both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

impl CleanupPolicy {
    pub const DELETE: Self = Self {
        delete: true,
        compact: false,
    };
    pub const COMPACT: Self = Self {
        delete: false,
        compact: true,
    };

    /// Kafka's list syntax: `delete`, `compact`, `compact,delete` (any order, spaces
    /// allowed); `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        let mut policy = Self {
            delete: false,
            compact: false,
        };
        for item in value.split(',').map(str::trim) {
            match item {
                "delete" => policy.delete = true,
                "compact" => policy.compact = true,
                _ => return None,
            }
        }
        Some(policy)
    }
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
            flush_messages: i64::MAX,
            cleanup: CleanupPolicy::DELETE,
            delete_retention_ms: 24 * 3600 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            compression: None,
            archive: false,
            archive_failure_deletes: false,
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
    /// A record without a key sent to a compacted log (Kafka's `validateKey`).
    #[error(
        "compacted topic cannot accept message without key (records {records:?} of the batch)"
    )]
    MissingKey { records: Vec<usize> },
    /// The records of a batch sent to a compacted log could not be read for their keys.
    #[error("records of a batch for a compacted topic are unreadable: {0}")]
    UnreadableRecords(String),
    /// Replicated batches that start below the log end (or below the batch before).
    #[error("replicated batch at offset {found} is below the log end {expected}")]
    NotContiguous { expected: i64, found: i64 },
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
    /// The leader epoch the log was in: a leader's write is acknowledged only while
    /// this replica still leads in it (`Partition::wait_acknowledged`).
    pub leader_epoch: i32,
    /// Batches recompressed to the topic's `compression.type`, and the time it took.
    pub recompressed: Option<(usize, std::time::Duration)>,
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
    cleaner_checkpoint: Option<i64>,
    /// The directory's change count to sync up to, when it changed since its last sync.
    dir_changes: Option<u64>,
    /// The leader-epoch checkpoint was rewritten since its last sync.
    sync_epochs: bool,
    /// The log's truncation count when the plan was made, and the log's shared count:
    /// a plan made before a truncation must not write its (older) snapshot after it,
    /// nor mark anything flushed (see [`Log::mark_flushed`]).
    generation: u64,
    shape: Arc<Mutex<u64>>,
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
        if let Some(offset) = self.cleaner_checkpoint {
            write_atomically(
                &self.dir.join(CLEANER_CHECKPOINT_FILE),
                offset.to_string().as_bytes(),
            )?;
        }
        if let Some((offset, raw)) = &self.snapshot {
            write_snapshot_file(
                &self.dir,
                *offset,
                raw,
                Some((&self.shape, self.generation)),
            )?;
        }
        if self.sync_epochs {
            epochs::sync(&self.dir)?;
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
    /// A lowered cleaner checkpoint (a truncation below it) not written yet.
    cleaner_checkpoint: Option<i64>,
    /// Segment files created in the directory, counted; `dir_synced` of them are durable.
    dir_changes: u64,
    dir_synced: u64,
    /// The leader-epoch checkpoint was rewritten (without fsync) since the last flush.
    epochs_unsynced: bool,
}

/// How much of a compacted log's cleanable section is clean and how much dirty.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dirtiness {
    /// Where the dirty section starts (the cleaner checkpoint, or the log's start).
    pub first_dirty: i64,
    pub clean_bytes: u64,
    pub dirty_bytes: u64,
    /// Timestamp of the oldest dirty batch, for `max.compaction.lag.ms`.
    pub oldest_dirty_ms: Option<i64>,
    /// A pass is due: the dirty ratio passed `min.cleanable.dirty.ratio`, dirty data
    /// passed `max.compaction.lag.ms`, or a delete horizon passed.
    pub due: bool,
}

impl Dirtiness {
    /// Kafka's dirty ratio: dirty bytes over all cleanable bytes.
    pub fn ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            0.0
        } else {
            self.dirty_bytes as f64 / total as f64
        }
    }
}

/// One segment of a [`CleaningJob`]: a view of its committed bytes.
#[derive(Debug)]
pub struct CleanableSegment {
    pub base: i64,
    /// The next segment's base: where this one's offsets end.
    pub end: i64,
    pub size: u64,
    pub data: Bytes,
}

/// A compacted log's cleanable section, handed out for a pass that runs off the
/// log's lock ([`Log::cleaning_job`], then [`Log::install_cleaned`]).
#[derive(Debug)]
pub struct CleaningJob {
    pub dir: PathBuf,
    generation: u64,
    pub first_dirty: i64,
    pub segments: Vec<CleanableSegment>,
    pub sizes: SegmentSizes,
    /// The log's `delete.retention.ms` when the job was made.
    pub delete_retention_ms: i64,
}

/// Segments taken out of the log, whose files the caller deletes once it no longer
/// holds the log's lock (unlinking a large file can take a while). Readers holding
/// `Bytes` of them keep their mappings alive.
#[derive(Debug, Default)]
#[must_use = "the files of removed segments stay on disk until delete() is called"]
pub struct Doomed {
    segments: Vec<Segment>,
    /// Other files to unlink (producer snapshots above a truncation point).
    files: Vec<PathBuf>,
}

impl Doomed {
    /// Segments taken out.
    pub fn len(&self) -> usize {
        self.segments.len()
    }
    /// Nothing to delete.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty() && self.files.is_empty()
    }
    /// Removes the segments' files.
    pub fn delete(self) -> io::Result<()> {
        for segment in &self.segments {
            segment.delete_files()?;
        }
        for path in &self.files {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
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
    epochs: LeaderEpochCache,
    /// How many truncations and resets the log went through (see [`FlushPlan`]).
    shape: Arc<Mutex<u64>>,
    /// Where the dirty section of a compacted log starts: everything below was cleaned
    /// (Kafka's `cleaner-offset-checkpoint`). Segments ending at or below it are
    /// trusted at open without a scan: each was either flushed before its pass or
    /// written and synced by the cleaner, whose segments may end short of the next
    /// segment's base (their last batch was superseded) and so would look torn.
    cleaner_checkpoint: i64,
    /// The earliest delete horizon the last pass left (in memory only: after a restart
    /// the next pass for dirty data finds the tombstones).
    next_delete_horizon: Option<i64>,
    /// How far the archive has this log (used only when the topic archives).
    archive_gate: ArchiveGate,
}

const LOG_START_FILE: &str = "log-start-offset";
/// The cleaner checkpoint of this log (one offset, as `log-start-offset`).
pub(crate) const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

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
        compaction::complete_swaps(dir)?;
        remove_temporary_files(dir)?;
        let bases = list_suffix(dir, ".log")?;
        let stored_log_start = read_i64_file(&dir.join(LOG_START_FILE))?;
        let cleaner_checkpoint = read_i64_file(&dir.join(CLEANER_CHECKPOINT_FILE))?.unwrap_or(0);
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
            let limit = next_base.unwrap_or(i64::MAX);
            let below_recovery_point =
                next_base.is_some_and(|n| n <= mode.recovery_point || n <= cleaner_checkpoint);
            if mode.clean || below_recovery_point {
                segments.insert(base, Segment::open_bounded(dir, base, sizes, true, limit)?);
            } else {
                let mut segment = Segment::open_bounded(dir, base, sizes, false, limit)?;
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
            epochs: LeaderEpochCache::new(),
            shape: Arc::new(Mutex::new(0)),
            cleaner_checkpoint,
            next_delete_horizon: None,
            archive_gate: ArchiveGate::Unknown,
        };
        let log_end = log.log_end_offset();
        log.log_start_offset = log.log_start_offset.min(log_end);
        // After a crash, what lies past the checkpoint was found in files that may have
        // been only in the page cache of the crashed process: it stays unflushed (the
        // recovered segments count it so) until the next flush syncs it.
        log.recovery_point = if mode.clean {
            log_end
        } else {
            mode.recovery_point.clamp(first_base, log_end)
        };
        // Segments wholly below the log start are left by a deletion that a crash or a
        // failed unlink interrupted; they are not part of the log.
        if let Err(error) = log.take_segments_below_log_start()?.delete() {
            tracing::warn!(dir = %dir.display(), %error, "could not delete segments below the log start");
        }
        log.load_producer_state()?;
        log.load_epochs(mode)?;
        Ok(log)
    }

    /// Reads the leader-epoch checkpoint and brings it in line with the recovered log:
    /// entries past its end go, epochs of the batches past the recovery point (which
    /// the file may not have caught) are added. A missing or unreadable file is
    /// rebuilt from every batch header.
    fn load_epochs(&mut self, mode: OpenMode) -> io::Result<()> {
        let (mut cache, from) = match LeaderEpochCache::load(&self.dir)? {
            Some(cache) => (
                cache,
                if mode.clean {
                    i64::MAX
                } else {
                    self.recovery_point
                },
            ),
            None => (LeaderEpochCache::unwritten(), 0),
        };
        cache.truncate_from_end(self.log_end_offset());
        for segment in self.segments.values() {
            if segment.next_offset() <= from {
                continue;
            }
            segment.for_each_batch_from(from, |header| {
                cache.assign(header.partition_leader_epoch(), header.base_offset());
            });
        }
        cache.truncate_from_start(self.log_start_offset);
        self.epochs = cache;
        self.persist_epochs().map_err(|e| match e {
            AppendError::Io { source, .. } => source,
            other => io::Error::other(other),
        })
    }

    /// Writes the epoch cache's file if it changed; its fsync goes with the next flush.
    fn persist_epochs(&mut self) -> Result<(), AppendError> {
        if !self.epochs.is_dirty() {
            return Ok(());
        }
        self.epochs.write(&self.dir).map_err(io_error(&self.dir))?;
        self.deferred.epochs_unsynced = true;
        self.deferred.dir_changes += 1;
        Ok(())
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
    /// Every batch is checked (framing, magic, CRC-32C, size; in a compacted log,
    /// that every record has a key, which means decompressing) before anything is
    /// written; idempotent-producer sequences are then checked batch by batch, and a
    /// retried duplicate is answered with its original offsets instead of appended.
    pub fn append(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, AppendError> {
        let (converted, recompressed) = self.recompressed(records)?;
        let records: &[u8] = converted.as_deref().unwrap_or(records);
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
            if self.config.cleanup.compact {
                check_keys(&header)?;
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
            // Before the batch, as Kafka does: an entry starting at the log end with no
            // batch behind it (the write failed) is dropped at the next open.
            self.epochs.assign(epoch, base);
            self.persist_epochs()?;
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
            leader_epoch: self.leader_epoch,
            recompressed,
        })
    }

    /// `records` with every batch in another codec than the topic's recompressed to
    /// it; `None` when nothing needs it (`compression.type=producer`, or the producer
    /// used the topic's codec): the zero-copy path.
    #[allow(clippy::type_complexity)]
    fn recompressed(
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
            let batch = cleaner::recompress(&header, codec, level)
                .map_err(|e| AppendError::UnreadableRecords(e.to_string()))?;
            out.extend_from_slice(&batch);
            count += 1;
        }
        Ok((Some(out), Some((count, started.elapsed()))))
    }

    /// The latest leader epoch with an entry in the epoch cache (the epoch of the
    /// newest batch, or one started by [`Log::start_leader_epoch`]).
    pub fn latest_epoch(&self) -> Option<i32> {
        self.epochs.latest().map(|(epoch, _)| epoch)
    }

    /// OffsetForLeaderEpoch's answer for `epoch`, as Kafka's `endOffsetFor`: the
    /// largest epoch `<=` `epoch` this log knows and the offset where it ended, or
    /// `(-1, -1)` ([`LeaderEpochCache::end_offset_for`]).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// The epoch cache's `(epoch, start_offset)` entries, ascending.
    pub fn epoch_entries(&self) -> &[(i32, i64)] {
        self.epochs.entries()
    }

    /// Becoming the leader in `epoch`: batches appended from now on carry it, and the
    /// epoch cache records that it starts at the log end now, before any batch, as
    /// Kafka does at election (`maybeAssignEpochStartOffset`). Without that entry a
    /// follower whose divergent epoch lies between this leader's last written epoch
    /// and `epoch` would get an undefined answer instead of the truncation point.
    pub fn start_leader_epoch(&mut self, epoch: i32) -> Result<(), AppendError> {
        self.leader_epoch = epoch;
        self.epochs.assign(epoch, self.log_end_offset());
        self.persist_epochs()
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
        let log_end = self.log_end_offset();
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
    fn make_room(&mut self, bytes: u64) -> io::Result<()> {
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

    /// Removes every batch at or above `offset` (rounded down to the start of the
    /// batch holding it): a follower cutting the tail where its log diverged from its
    /// leader's. Nothing but epoch entries starting at the log end when `offset` is at
    /// or past it; below the log start,
    /// the whole log goes as with [`Log::reset_to`] (Kafka's `truncateFullyAndStartAt`).
    ///
    /// No file is shortened under a live view (a response may still be writing
    /// `Bytes` of the tail), and nothing slow happens here:
    /// - segments wholly above the cut are taken out and returned to be deleted off
    ///   the lock; their files are renamed to `*.deleted` at once, so that a crash
    ///   cannot bring them back;
    /// - the segment holding the cut is shortened logically (committed size and index
    ///   entries). If no reader holds a view past the cut, a zeroed batch length is
    ///   written there (so a scan at open stops) and it takes appends again; if one
    ///   may, its bytes are left alone and a new active segment starts at the cut,
    ///   whose base offset bounds the old one at the next open.
    ///
    /// The recovery point drops to the cut, so a crash rescans from there, and the
    /// next flush syncs the invalidation; producer state is rebuilt as of the cut
    /// (snapshots above it go) and the epoch cache is truncated from the end.
    pub fn truncate_to(&mut self, offset: i64) -> Result<Doomed, AppendError> {
        let log_end = self.log_end_offset();
        if offset < 0 {
            return Err(self.out_of_range(offset));
        }
        if offset >= log_end {
            // Nothing to cut from the log, but an epoch entry may start at its end: this
            // broker led in an epoch and was deposed before appending anything. Left in
            // place it is the last fetched epoch every fetch names, which the leader
            // never had: it answers the same divergence forever (Kafka's truncateTo
            // truncates the cache from the log end for this reason).
            self.epochs.truncate_from_end(log_end);
            self.persist_epochs()?;
            return Ok(Doomed::default());
        }
        if offset < self.log_start_offset {
            return self.reset_to(offset);
        }
        let dir = self.dir.clone();
        let target_base = self
            .segments
            .range(..=offset)
            .next_back()
            .map(|(&base, _)| base)
            .ok_or_else(|| self.out_of_range(offset))?;
        let above: Vec<i64> = self
            .segments
            .range(target_base + 1..)
            .map(|(&base, _)| base)
            .collect();
        let mut doomed = self.take_segments(&above);
        let target = self
            .segments
            .get_mut(&target_base)
            .ok_or_else(|| io_error(&dir)(io::Error::other("log has no segment")))?;
        let new_end = target.truncate_to(offset).map_err(io_error(&dir))?;
        let (mut roll, mut fresh) = (false, false);
        if target.is_empty() {
            // Nothing left in it: it goes too, and an empty one starts at the cut (not
            // the previous segment, whose file was trimmed and may hold a stale tail
            // that only the next segment's base offset bounds).
            let mut emptied = self.take_segments(&[target_base]);
            doomed.segments.append(&mut emptied.segments);
            fresh = true;
        } else if target.has_views_past_end() {
            roll = true;
        } else {
            target.invalidate_tail().map_err(io_error(&dir))?;
            self.deferred
                .seals
                .push((target_base, vec![target.file_syncer()]));
        }
        for segment in &mut doomed.segments {
            segment.mark_deleted().map_err(io_error(&dir))?;
        }
        if !doomed.segments.is_empty() {
            self.deferred.dir_changes += 1;
        }
        if fresh {
            self.segments.insert(
                new_end,
                Segment::create(&self.dir, new_end, self.config.sizes()).map_err(io_error(&dir))?,
            );
            self.deferred.dir_changes += 1;
        }
        self.bump_shape();
        self.recovery_point = self.recovery_point.min(new_end);
        self.lower_cleaner_checkpoint(new_end);
        if self
            .deferred
            .snapshot
            .as_ref()
            .is_some_and(|(at, _)| *at > new_end)
        {
            self.deferred.snapshot = None;
        }
        doomed
            .files
            .extend(self.take_snapshots_above(new_end).map_err(io_error(&dir))?);
        self.producers = ProducerStateTable::default();
        self.load_producer_state().map_err(io_error(&dir))?;
        self.epochs.truncate_from_end(new_end);
        self.persist_epochs()?;
        if roll {
            self.roll(0).map_err(io_error(&dir))?;
        }
        Ok(doomed)
    }

    /// Empties the log and starts it again at `offset`: a follower whose log ends below
    /// its leader's log start, or a new replica of a partition whose log does not start
    /// at 0. Every segment goes (to be deleted off the lock; renamed to `*.deleted` at
    /// once), one empty active segment starts at `offset`, which becomes the log start
    /// (written by the next flush, as DeleteRecords' is); producer state and the epoch
    /// cache are cleared.
    pub fn reset_to(&mut self, offset: i64) -> Result<Doomed, AppendError> {
        if offset < 0 {
            return Err(self.out_of_range(offset));
        }
        let dir = self.dir.clone();
        let all: Vec<i64> = self.segments.keys().copied().collect();
        let mut doomed = self.take_segments(&all);
        for segment in &mut doomed.segments {
            segment.mark_deleted().map_err(io_error(&dir))?;
        }
        self.segments.insert(
            offset,
            Segment::create(&self.dir, offset, self.config.sizes()).map_err(io_error(&dir))?,
        );
        self.deferred.dir_changes += 2;
        self.bump_shape();
        self.log_start_offset = offset;
        self.deferred.log_start = Some(offset);
        self.recovery_point = offset;
        self.lower_cleaner_checkpoint(offset);
        self.deferred.snapshot = None;
        doomed
            .files
            .extend(self.take_snapshots_above(-1).map_err(io_error(&dir))?);
        self.producers = ProducerStateTable::default();
        self.epochs.clear();
        self.persist_epochs()?;
        Ok(doomed)
    }

    fn out_of_range(&self, offset: i64) -> AppendError {
        AppendError::Io {
            dir: self.dir.clone(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                OffsetOutOfRange {
                    offset,
                    log_start: self.log_start_offset,
                    log_end: self.log_end_offset(),
                },
            ),
        }
    }

    /// A cut below the cleaner checkpoint takes it down to the cut: what is appended
    /// there next was not cleaned, nor synced by the cleaner. The file follows with
    /// the next flush, which is also the one that first makes those appends durable.
    fn lower_cleaner_checkpoint(&mut self, offset: i64) {
        if self.cleaner_checkpoint > offset {
            self.cleaner_checkpoint = offset;
            self.deferred.cleaner_checkpoint = Some(offset);
        }
    }

    /// Counts a change of the log's shape: flush plans made before it are stale.
    fn bump_shape(&mut self) {
        let mut generation = self.shape.lock().unwrap_or_else(|e| e.into_inner());
        *generation += 1;
    }

    fn generation(&self) -> u64 {
        *self.shape.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Renames the producer snapshots taken above `offset` to `*.deleted` (they
    /// describe batches that are gone) and returns their new paths, to unlink later.
    fn take_snapshots_above(&mut self, offset: i64) -> io::Result<Vec<PathBuf>> {
        let mut taken = Vec::new();
        for at in list_suffix(&self.dir, ".snapshot")? {
            if at > offset {
                let path = snapshot_path(&self.dir, at);
                let mut renamed = path.as_os_str().to_os_string();
                renamed.push(segment::DELETED_SUFFIX);
                std::fs::rename(&path, &renamed)?;
                taken.push(PathBuf::from(renamed));
            }
        }
        if !taken.is_empty() {
            self.deferred.dir_changes += 1;
        }
        Ok(taken)
    }

    fn maybe_roll(&mut self, incoming_bytes: u64, now_ms: i64) -> io::Result<()> {
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

    /// The active segment's age at which it rolls: `segment.ms`, and for a compacted
    /// log no later than `max.compaction.lag.ms`, since the active segment is never
    /// cleaned (KIP-354).
    fn roll_after_ms(&self) -> i64 {
        if self.config.cleanup.compact {
            self.config
                .segment_ms
                .min(self.config.max_compaction_lag_ms)
        } else {
            self.config.segment_ms
        }
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
        self.read_below(offset, max_bytes, min_one, self.log_end_offset())
    }

    /// [`Log::read`] of the whole batches whose base offset is below `upper` only: a
    /// consumer's fetch is bounded by the high watermark. `None` when nothing below
    /// `upper` starts at or after the batch holding `offset`. Whether `offset` is in
    /// range is judged against the log, not `upper`.
    pub fn read_below(
        &self,
        offset: i64,
        max_bytes: u64,
        min_one: bool,
        upper: i64,
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
            if segment.base_offset() >= upper {
                break;
            }
            if let Some(bytes) = segment.read_below(offset, max_bytes, min_one, upper) {
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
        self.epochs.truncate_from_start(offset);
        self.persist_epochs()?;
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
            // Wholly below: an empty segment based at the log start (a cleaned one
            // whose records were all superseded) holds the log start and stays.
            .filter(|(_, s)| {
                s.next_offset() <= self.log_start_offset && s.base_offset() < self.log_start_offset
            })
            .map(|(&base, _)| base)
            .collect();
        Ok(self.take_segments(&doomed))
    }

    fn take_segments(&mut self, bases: &[i64]) -> Doomed {
        self.deferred
            .seals
            .retain(|(base, _)| !bases.contains(base));
        Doomed {
            segments: bases
                .iter()
                .filter_map(|base| self.segments.remove(base))
                .collect(),
            files: Vec::new(),
        }
    }

    /// Takes out segments past `retention.ms` or beyond `retention.bytes`, oldest first;
    /// nothing unless `cleanup.policy` has `delete`. A topic that archives keeps each
    /// segment until the archive has it, unless `disk_low` (the data directory is
    /// nearly full: the disk wins over the archive).
    pub fn apply_retention(&mut self, now_ms: i64, disk_low: bool) -> io::Result<Retention> {
        self.producers
            .expire(now_ms, self.config.producer_id_expiration_ms);
        if !self.config.cleanup.delete {
            return Ok(Retention::default());
        }
        // An expired active segment is rolled so that it can go too.
        if self
            .active()
            .is_some_and(|a| !a.is_empty() && self.expired(a, now_ms))
        {
            self.roll(0)?;
        }
        let expired = self.expired_prefix(now_ms);
        let archived_below = match self.archive_gate {
            ArchiveGate::Below(next) | ArchiveGate::Failed(next) => next,
            ArchiveGate::Unknown => i64::MIN,
        };
        let may_skip_archive = disk_low
            || (self.config.archive_failure_deletes
                && matches!(self.archive_gate, ArchiveGate::Failed(_)));
        let mut retention = Retention::default();
        let mut doomed = Vec::new();
        for &(base, end) in &expired {
            let archived = !self.config.archive || end <= archived_below;
            if !archived && !may_skip_archive {
                // Oldest first: nothing after a held segment goes either.
                retention.held = expired.len() - doomed.len();
                break;
            }
            if !archived {
                retention.unarchived += 1;
            }
            doomed.push(base);
        }
        retention.doomed = self.take_segments(&doomed);
        if let Some(&first) = self.segments.keys().next() {
            self.log_start_offset = self.log_start_offset.max(first);
        }
        self.epochs.truncate_from_start(self.log_start_offset);
        self.persist_epochs().map_err(|e| match e {
            AppendError::Io { source, .. } => source,
            other => io::Error::other(other),
        })?;
        Ok(retention)
    }

    fn expired(&self, segment: &Segment, now_ms: i64) -> bool {
        let retention_ms = self.config.retention_ms;
        retention_ms >= 0
            && segment.max_timestamp() >= 0
            && segment.max_timestamp() < now_ms - retention_ms
    }

    /// The oldest sealed segments retention would take now, as `(base, end)`: past
    /// `retention.ms`, or beyond `retention.bytes`; the first one that is neither
    /// ends the prefix.
    fn expired_prefix(&self, now_ms: i64) -> Vec<(i64, i64)> {
        let mut excess = if self.config.retention_bytes >= 0 {
            self.size_bytes() as i64 - self.config.retention_bytes
        } else {
            0
        };
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        let mut out = Vec::new();
        for pair in bases.windows(2) {
            let Some(segment) = self.segments.get(&pair[0]) else {
                break;
            };
            let too_big = excess > 0 && excess - segment.size() as i64 >= 0;
            if !(self.expired(segment, now_ms) || too_big) {
                break;
            }
            excess -= segment.size() as i64;
            out.push((pair[0], pair[1]));
        }
        out
    }

    /// What the archive should take next: the expired segments from `archived_below`
    /// (the manifest's next offset) on, no further than `upper` (the high watermark:
    /// nothing a new leader could truncate is archived). `None` when there is nothing.
    pub fn archive_work(
        &self,
        now_ms: i64,
        archived_below: i64,
        upper: i64,
    ) -> Option<ArchiveWork> {
        if !self.config.cleanup.delete {
            return None;
        }
        let from = archived_below.max(self.log_start_offset);
        let pending: Vec<(i64, i64)> = self
            .expired_prefix(now_ms)
            .into_iter()
            .filter(|&(_, end)| end > from && end <= upper)
            .collect();
        let &(first, _) = pending.first()?;
        let &(_, end) = pending.last()?;
        let segment = self.segments.get(&first)?;
        let expired_since_ms = if self.config.retention_ms >= 0 && self.expired(segment, now_ms) {
            segment
                .max_timestamp()
                .saturating_add(self.config.retention_ms)
        } else {
            now_ms
        };
        let bytes = pending
            .iter()
            .filter_map(|(base, _)| self.segments.get(base))
            .map(|s| s.size())
            .sum();
        Some(ArchiveWork {
            from,
            end,
            expired_since_ms,
            bytes,
        })
    }

    /// Records how far the archive holds this log (the archiver's, after reading or
    /// writing the manifest).
    pub fn set_archive_gate(&mut self, gate: ArchiveGate) {
        self.archive_gate = gate;
    }

    pub fn archive_gate(&self) -> ArchiveGate {
        self.archive_gate
    }

    /// The segments a cleaning pass may rewrite, oldest first, each with the offset
    /// where the next segment starts: sealed segments (never the active one) wholly
    /// below `upper` (the high watermark: nothing a new leader could truncate), already
    /// flushed with their trimmed length synced (so that the cleaner checkpoint's trust
    /// at open holds), and, by `min.compaction.lag.ms`, old enough. The first one that
    /// fails a test ends the section.
    fn cleanable_segments(&self, upper: i64, now_ms: i64) -> Vec<(&Segment, i64)> {
        let lag = self.config.min_compaction_lag_ms;
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        let mut out = Vec::new();
        for pair in bases.windows(2) {
            let (base, end) = (pair[0], pair[1]);
            let Some(segment) = self.segments.get(&base) else {
                break;
            };
            let ready = end <= upper
                && end <= self.recovery_point
                && segment.unflushed_bytes() == 0
                && !self.deferred.seals.iter().any(|(b, _)| *b == base)
                && (lag <= 0 || segment.max_timestamp() <= now_ms.saturating_sub(lag));
            if !ready {
                break;
            }
            out.push((segment, end));
        }
        out
    }

    /// How dirty the cleanable section of a compacted log is (`None` for a log that
    /// is not compacted or has nothing cleanable): what the cleaner picks by.
    pub fn dirtiness(&self, upper: i64, now_ms: i64) -> Option<Dirtiness> {
        if !self.config.cleanup.compact {
            return None;
        }
        let cleanable = self.cleanable_segments(upper, now_ms);
        let first_base = cleanable.first()?.0.base_offset();
        let first_dirty = self.cleaner_checkpoint.max(first_base);
        let mut dirtiness = Dirtiness {
            first_dirty,
            clean_bytes: 0,
            dirty_bytes: 0,
            oldest_dirty_ms: None,
            due: false,
        };
        for (segment, end) in cleanable {
            if end <= first_dirty {
                dirtiness.clean_bytes += segment.size();
            } else {
                dirtiness.dirty_bytes += segment.size();
                if dirtiness.oldest_dirty_ms.is_none() {
                    dirtiness.oldest_dirty_ms = segment.first_timestamp();
                }
            }
        }
        let overdue = dirtiness
            .oldest_dirty_ms
            .is_some_and(|t| now_ms.saturating_sub(t) >= self.config.max_compaction_lag_ms);
        let tombstones_due = self.next_delete_horizon.is_some_and(|h| now_ms >= h);
        dirtiness.due = (dirtiness.dirty_bytes > 0
            && (dirtiness.ratio() > self.config.min_cleanable_dirty_ratio || overdue))
            || tombstones_due;
        Some(dirtiness)
    }

    /// Views of the cleanable section for a pass run off the lock
    /// ([`compaction::run_pass`]); `None` unless a pass is due.
    pub fn cleaning_job(&self, upper: i64, now_ms: i64) -> Option<CleaningJob> {
        let dirtiness = self.dirtiness(upper, now_ms)?;
        if !dirtiness.due {
            return None;
        }
        let segments = self
            .cleanable_segments(upper, now_ms)
            .into_iter()
            .map(|(segment, end)| CleanableSegment {
                base: segment.base_offset(),
                end,
                size: segment.size(),
                data: segment
                    .read(segment.base_offset(), segment.size(), true)
                    .unwrap_or_default(),
            })
            .collect();
        Some(CleaningJob {
            dir: self.dir.clone(),
            generation: self.generation(),
            first_dirty: dirtiness.first_dirty,
            segments,
            sizes: self.config.sizes(),
            delete_retention_ms: self.config.delete_retention_ms,
        })
    }

    /// Swaps the segments a pass rewrote into the log, if it still is the log the
    /// pass read: same shape count (no truncation or reset since) and, segment by
    /// segment, the same base and size (retention or DeleteRecords may have taken one
    /// out). Each swap is a few renames, committed by the last
    /// ([`compaction::swap_into_place`]); readers holding views of an old segment keep
    /// its mapping. A segment the pass emptied goes instead (unless it is the first,
    /// which holds the log start): its files to `*.deleted` at once, unlinked by the
    /// caller through the returned [`Doomed`]; the segment before it then ends short
    /// of the next one's base, as a cleaned segment may, trusted by the checkpoint.
    /// Returns how many segments were replaced or removed.
    pub fn install_cleaned(
        &mut self,
        job: &CleaningJob,
        pass: &compaction::PassOutcome,
    ) -> io::Result<(usize, Doomed)> {
        let cleaning = compaction::cleaning_dir(&self.dir);
        let mut doomed = Doomed::default();
        if job.generation != self.generation() {
            compaction::discard(&cleaning);
            return Ok((0, doomed));
        }
        let first = self.segments.keys().next().copied();
        let mut installed = 0;
        for &(base, old_size, new_size) in &pass.replaced {
            if self.segments.get(&base).map(Segment::size) != Some(old_size)
                || self.active().map(Segment::base_offset) == Some(base)
            {
                compaction::discard_segment(&cleaning, base);
                continue;
            }
            if new_size == 0 && Some(base) != first {
                compaction::discard_segment(&cleaning, base);
                let mut emptied = self.take_segments(&[base]);
                for segment in &mut emptied.segments {
                    segment.mark_deleted()?;
                }
                doomed.segments.append(&mut emptied.segments);
                installed += 1;
                continue;
            }
            compaction::swap_into_place(&self.dir, base)?;
            let end = self
                .segments
                .range(base + 1..)
                .next()
                .map_or(i64::MAX, |(&b, _)| b);
            let segment = Segment::open_bounded(&self.dir, base, self.config.sizes(), true, end)?;
            self.segments.insert(base, segment);
            installed += 1;
        }
        if installed > 0 {
            self.deferred.dir_changes += 1;
        }
        self.cleaner_checkpoint = self.cleaner_checkpoint.max(pass.end);
        self.next_delete_horizon = pass.next_horizon;
        Ok((installed, doomed))
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
            cleaner_checkpoint: deferred.cleaner_checkpoint,
            dir_changes: (deferred.dir_changes > deferred.dir_synced)
                .then_some(deferred.dir_changes),
            sync_epochs: deferred.epochs_unsynced,
            generation: self.generation(),
            shape: Arc::clone(&self.shape),
        }
    }

    /// Records that `plan` ran successfully. Work deferred after the plan was made
    /// stays pending for the next one. A plan made before a truncation or a reset
    /// marks nothing: what it synced may have been cut, and its offsets re-used.
    /// Returns whether the plan counted; when it did not, its `up_to_offset` is no
    /// durability promise (use [`Log::recovery_point`]).
    pub fn mark_flushed(&mut self, plan: &FlushPlan) -> bool {
        if plan.generation != self.generation() {
            return false;
        }
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
        if deferred.cleaner_checkpoint == plan.cleaner_checkpoint {
            deferred.cleaner_checkpoint = None;
        }
        if let Some(changes) = plan.dir_changes {
            deferred.dir_synced = deferred.dir_synced.max(changes);
        }
        if plan.sync_epochs && deferred.dir_synced >= deferred.dir_changes {
            // No rewrite since the plan was made (each one counts a directory change).
            deferred.epochs_unsynced = false;
        }
        self.recovery_point = self.recovery_point.max(plan.up_to_offset);
        true
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
        write_snapshot_file(
            &self.dir,
            self.log_end_offset(),
            &self.producer_snapshot()?,
            None,
        )
    }
}

/// Refuses a batch for a compacted log that holds a record without a key.
fn check_keys(header: &BatchHeader<'_>) -> Result<(), AppendError> {
    match cleaner::keyless_records(header) {
        Ok(records) if records.is_empty() => Ok(()),
        Ok(records) => Err(AppendError::MissingKey { records }),
        Err(error) => Err(AppendError::UnreadableRecords(error.to_string())),
    }
}

fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}.snapshot"))
}

/// Writes a producer-state snapshot and keeps only the two newest (older ones are
/// never read). With a `guard`, the snapshot is put in place only if the log's shape
/// count still is the one given: a snapshot of a log that was truncated since it was
/// taken would describe batches that are gone.
fn write_snapshot_file(
    dir: &Path,
    offset: i64,
    raw: &[u8],
    guard: Option<(&Mutex<u64>, u64)>,
) -> io::Result<()> {
    if !write_atomically_if(&snapshot_path(dir, offset), raw, guard)? {
        return Ok(());
    }
    let snapshots = list_suffix(dir, ".snapshot")?;
    if snapshots.len() > 2 {
        for old in &snapshots[..snapshots.len() - 2] {
            let _ = std::fs::remove_file(snapshot_path(dir, *old));
        }
    }
    Ok(())
}

/// Removes what a crash left of [`write_atomically`]'s temporary files, and files
/// taken out of the log but not unlinked yet.
fn remove_temporary_files(dir: &Path) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| n.ends_with(".tmp") || n.ends_with(segment::DELETED_SUFFIX))
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
    write_atomically_if(path, data, None).map(|_| ())
}

/// [`write_atomically`], renaming only if `guard`'s count (checked under its lock, so
/// that no truncation runs between the check and the rename) is the one given.
/// Returns whether the file was put in place.
fn write_atomically_if(
    path: &Path,
    data: &[u8],
    guard: Option<(&Mutex<u64>, u64)>,
) -> io::Result<bool> {
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
    match guard {
        None => std::fs::rename(&tmp, path)?,
        Some((shape, generation)) => {
            let current = shape.lock().unwrap_or_else(|e| e.into_inner());
            if *current != generation {
                drop(current);
                let _ = std::fs::remove_file(&tmp);
                return Ok(false);
            }
            std::fs::rename(&tmp, path)?;
        }
    }
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(true)
}

fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
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
    fn an_archived_topic_keeps_expired_segments_until_the_archive_has_them(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        let mut config = small_config();
        config.retention_ms = 10;
        config.archive = true;
        log.set_config(config.clone());
        for i in 0..40 {
            log.append(&simple_batch(2, 1_000 + i), 0)?;
        }
        let segments = log.segment_count();
        assert!(segments > 2);
        // Before the manifest was read, nothing goes.
        let r = log.apply_retention(1_000_000, false)?;
        assert_eq!((r.counts().deleted, r.counts().unarchived), (0, 0));
        assert!(r.held > 0);
        assert_eq!(log.log_start_offset(), 0);
        // Archived below an offset inside the log: exactly the segments ending at or
        // below it go, oldest first.
        let second_base = log.segments.keys().nth(1).copied().ok_or("segments")?;
        log.set_archive_gate(ArchiveGate::Below(second_base));
        let r = log.apply_retention(1_000_000, false)?;
        assert_eq!(r.counts().deleted, 1);
        assert_eq!(r.counts().unarchived, 0);
        r.doomed.delete()?;
        assert_eq!(log.log_start_offset(), second_base);
        // A failed archive holds the rest while `archive.on.failure=wait`...
        log.set_archive_gate(ArchiveGate::Failed(second_base));
        let r = log.apply_retention(1_000_000, false)?;
        assert_eq!(r.counts().deleted, 0);
        // ...but a nearly full disk wins, and says how much went unarchived.
        let r = log.apply_retention(1_000_000, true)?;
        assert!(r.counts().deleted > 0);
        assert_eq!(r.counts().unarchived, r.counts().deleted);
        r.doomed.delete()?;
        assert_eq!(log.log_start_offset(), log.log_end_offset());
        // `archive.on.failure=delete` lets a failed archive's segments go.
        config.archive_failure_deletes = true;
        log.set_config(config);
        for i in 0..40 {
            log.append(&simple_batch(2, 1_000 + i), 0)?;
        }
        let r = log.apply_retention(1_000_000, false)?;
        assert!(r.counts().unarchived > 0);
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
        let doomed = log.apply_retention(0, false)?.doomed;
        assert!(!doomed.is_empty());
        doomed.delete()?;
        assert!(log.size_bytes() <= 2048 + 1024);
        assert!(log.log_start_offset() > 0);
        assert!(log.read(0, 100, true).is_err());
        config.retention_bytes = -1;
        config.retention_ms = 10;
        log.set_config(config);
        log.apply_retention(1_000_000, false)?.doomed.delete()?;
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

    // ---- replication: follower appends, truncation, epochs ----

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn open_with(dir: &Path, clean: bool, recovery_point: i64) -> io::Result<Log> {
        Log::open(
            dir,
            small_config(),
            OpenMode {
                clean,
                recovery_point,
            },
        )
    }

    /// (base offset, last offset, leader epoch, max timestamp) of a batch.
    type BatchSummary = (i64, i64, i32, i64);

    /// Every batch of the log.
    fn batches_of(log: &Log) -> Result<Vec<BatchSummary>, Box<dyn std::error::Error>> {
        let mut out = Vec::new();
        let mut offset = log.log_start_offset();
        while let Some(bytes) = log.read(offset, 1 << 20, true)? {
            for header in batch::batches(&bytes) {
                let header = header?;
                out.push((
                    header.base_offset(),
                    header.last_offset(),
                    header.partition_leader_epoch(),
                    header.max_timestamp(),
                ));
                offset = header.last_offset() + 1;
            }
        }
        assert_eq!(offset, log.log_end_offset(), "reads reach the log end");
        Ok(out)
    }

    fn all_bytes(log: &Log) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let mut out = Vec::new();
        let mut offset = log.log_start_offset();
        while let Some(bytes) = log.read(offset, 1 << 20, true)? {
            out.extend_from_slice(&bytes);
            offset = batches_last(&bytes)? + 1;
        }
        Ok(out)
    }

    fn batches_last(bytes: &[u8]) -> Result<i64, BatchError> {
        let mut last = -1;
        for header in batch::batches(bytes) {
            last = header?.last_offset();
        }
        Ok(last)
    }

    /// A leader log: plain batches under epoch 0, idempotent ones under epoch 3,
    /// rolled over several segments.
    fn leader_log(dir: &Path) -> Result<Log, Box<dyn std::error::Error>> {
        let mut log = fresh(dir)?;
        log.start_leader_epoch(0)?;
        for i in 0..20 {
            log.append(&simple_batch(2, 1_000 + i), 0)?;
        }
        log.start_leader_epoch(3)?;
        let records = vec![TestRecord::default(); 3];
        for seq in 0..20 {
            log.append(
                &encode_batch(&records, 2_000 + i64::from(seq), (7, 1, seq * 3)),
                0,
            )?;
        }
        assert!(log.segment_count() >= 3, "the test spans segments");
        Ok(log)
    }

    #[test]
    fn a_follower_copies_its_leader_byte_for_byte() -> TestResult {
        let leader_dir = tempfile::tempdir()?;
        let follower_dir = tempfile::tempdir()?;
        let leader = leader_log(leader_dir.path())?;
        let mut follower = fresh(follower_dir.path())?;
        let mut offset = 0;
        while let Some(bytes) = leader.read(offset, 300, true)? {
            // A fetch response may end mid-batch: append it with half a batch more.
            let mut chunk = bytes.to_vec();
            if let Ok(Some(next)) = leader.read(batches_last(&bytes)? + 1, 1, true) {
                chunk.extend_from_slice(&next[..next.len() / 2]);
            }
            let info = follower.append_replicated(&chunk)?;
            assert_eq!(info.base_offset, offset);
            offset = info.last_offset + 1;
        }
        assert_eq!(follower.log_end_offset(), leader.log_end_offset());
        assert_eq!(all_bytes(&follower)?, all_bytes(&leader)?, "same bytes");
        assert_eq!(batches_of(&follower)?, batches_of(&leader)?);
        assert_eq!(
            follower.segments.keys().collect::<Vec<_>>(),
            leader.segments.keys().collect::<Vec<_>>(),
            "same segment boundaries"
        );
        for (&base, segment) in &follower.segments {
            let size = segment.size() as usize;
            let ours = std::fs::read(segment::log_path(follower_dir.path(), base))?;
            let theirs = std::fs::read(segment::log_path(leader_dir.path(), base))?;
            assert_eq!(ours[..size], theirs[..size], "segment {base} identical");
        }
        assert_eq!(follower.epoch_entries(), &[(0, 0), (3, 40)]);
        assert_eq!(follower.epoch_entries(), leader.epoch_entries());
        assert_eq!(follower.latest_epoch(), Some(3));
        assert_eq!(follower.end_offset_for_epoch(0), (0, 40));
        assert_eq!(follower.producers, leader.producers, "producer state");
        // Promoted, the follower knows the producer: a retry is a duplicate and the
        // next sequence is accepted.
        follower.start_leader_epoch(4)?;
        let records = vec![TestRecord::default(); 3];
        let retry = encode_batch(&records, 0, (7, 1, 57));
        assert_eq!(follower.append(&retry, 0)?.base_offset, 97);
        let next = encode_batch(&records, 0, (7, 1, 60));
        assert_eq!(follower.append(&next, 0)?.base_offset, 100);
        assert_eq!(follower.latest_epoch(), Some(4));
        // The epoch file came along too, and survives a restart.
        follower.close()?;
        let reopened = open_with(follower_dir.path(), true, 0)?;
        assert_eq!(reopened.epoch_entries(), &[(0, 0), (3, 40), (4, 100)]);
        Ok(())
    }

    #[test]
    fn a_set_going_backwards_an_overlap_or_a_corrupt_batch_is_refused_with_nothing_written(
    ) -> TestResult {
        // A gap is not refused: a compacted leader's log has them where the cleaner
        // dropped whole batches (compaction's tests append across one).
        let leader_dir = tempfile::tempdir()?;
        let follower_dir = tempfile::tempdir()?;
        let leader = leader_log(leader_dir.path())?;
        let mut follower = fresh(follower_dir.path())?;
        let first = leader.read(0, 1, true)?.ok_or("no batch")?;
        let second = leader.read(2, 1, true)?.ok_or("no batch")?;
        let third = leader.read(4, 1, true)?.ok_or("no batch")?;
        let backwards = [&third[..], &first[..]].concat();
        assert!(matches!(
            follower.append_replicated(&backwards),
            Err(AppendError::NotContiguous {
                expected: 6,
                found: 0
            })
        ));
        let mut corrupt = [&first[..], &second[..]].concat();
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        assert!(matches!(
            follower.append_replicated(&corrupt),
            Err(AppendError::Batch(BatchError::CrcMismatch { .. }))
        ));
        assert_eq!(follower.log_end_offset(), 0, "nothing of any refused set");
        assert!(follower.epoch_entries().is_empty());
        follower.append_replicated(&first)?;
        assert!(matches!(
            follower.append_replicated(&first),
            Err(AppendError::NotContiguous {
                expected: 2,
                found: 0
            })
        ));
        let nothing = follower.append_replicated(&second[..20])?;
        assert!(
            nothing.last_offset < nothing.base_offset,
            "only a partial batch"
        );
        assert_eq!(follower.log_end_offset(), 2);
        Ok(())
    }

    fn log_file_lengths(dir: &Path) -> io::Result<BTreeMap<String, u64>> {
        let mut lengths = BTreeMap::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains(".log") {
                lengths.insert(name, entry.metadata()?.len());
            }
        }
        Ok(lengths)
    }

    #[test]
    fn truncation_across_segments_then_appends_reads_only_the_new_batches() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..40 {
            log.append(&simple_batch(2, 1_000 + i), 0)?;
        }
        let segments = log.segment_count();
        assert!(segments > 3);
        // Into the middle of the second segment, an offset inside a batch: rounded
        // down to the batch's start.
        let second = *log.segments.keys().nth(1).ok_or("no segment")?;
        let cut = second + 5;
        let doomed = log.truncate_to(cut)?;
        assert_eq!(log.log_end_offset(), second + 4);
        assert_eq!(doomed.len(), segments - 2, "the segments above go");
        doomed.delete()?;
        assert_eq!(list_suffix(dir.path(), ".log")?.len(), 2);
        for i in 0..30 {
            log.append(&simple_batch(2, 5_000 + i), 0)?;
        }
        let batches = batches_of(&log)?;
        let mut expected = 0;
        for &(base, last, _, ts) in &batches {
            assert_eq!(base, expected, "contiguous");
            expected = last + 1;
            if base < second + 4 {
                assert!(ts < 5_000, "an old batch below the cut");
            } else {
                assert!(ts >= 5_000, "offset {base} holds a truncated batch");
            }
        }
        assert_eq!(expected, second + 4 + 60);
        assert!(
            log.segment_count() > 2,
            "the shortened segment rolled again"
        );
        assert!(log.truncate_to(1_000)?.is_empty(), "past the end: a no-op");
        // Back to the very start of a segment: it goes, an empty one starts there.
        let third = *log.segments.keys().nth(2).ok_or("no segment")?;
        log.truncate_to(third)?.delete()?;
        assert_eq!(log.log_end_offset(), third);
        assert_eq!(log.segments.keys().next_back(), Some(&third));
        assert_eq!(log.append(&simple_batch(1, 9_000), 0)?.base_offset, third);
        Ok(())
    }

    #[test]
    fn truncating_at_the_log_end_drops_an_epoch_that_never_got_a_batch() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        log.start_leader_epoch(3)?;
        log.append(&simple_batch(2, 1_000), 0)?;
        // Elected in epoch 5, deposed before appending: the entry (5, 2) has no batch.
        log.start_leader_epoch(5)?;
        assert_eq!(log.latest_epoch(), Some(5));
        assert!(log.truncate_to(2)?.is_empty());
        assert_eq!(log.log_end_offset(), 2, "no batch cut");
        assert_eq!(log.latest_epoch(), Some(3), "the empty epoch went");
        assert_eq!(log.epoch_entries(), &[(3, 0)]);
        // Past the end too, as Kafka: the cache is cut at the log end, not the target.
        log.start_leader_epoch(6)?;
        assert!(log.truncate_to(10)?.is_empty());
        assert_eq!(log.epoch_entries(), &[(3, 0)]);
        Ok(())
    }

    #[test]
    fn a_view_taken_before_a_truncation_stays_readable_and_no_file_shrinks_under_it() -> TestResult
    {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..40 {
            log.append(&simple_batch(2, 1_000 + i), 0)?;
        }
        let second = *log.segments.keys().nth(1).ok_or("no segment")?;
        let active = *log.segments.keys().next_back().ok_or("no segment")?;
        // Views of the tail of a retired segment and of the active one.
        let retired_view = log.read(second + 2, 1 << 20, true)?.ok_or("no data")?;
        let active_view = log.read(active, 1 << 20, true)?.ok_or("no data")?;
        let (retired_copy, active_copy) = (retired_view.to_vec(), active_view.to_vec());
        let before = log_file_lengths(dir.path())?;
        let doomed = log.truncate_to(second + 2)?;
        assert_eq!(log.log_end_offset(), second + 2);
        assert!(
            log.segments.contains_key(&(second + 2)),
            "a view reaches past the cut: a new segment starts there"
        );
        for i in 0..30 {
            log.append(&simple_batch(2, 5_000 + i), 0)?;
        }
        let flushed = log.flush_plan();
        flushed.run()?;
        log.mark_flushed(&flushed);
        doomed.delete()?; // unlinking a mapped file is safe
        assert_eq!(retired_view[..], retired_copy[..], "no byte rewritten");
        assert_eq!(active_view[..], active_copy[..]);
        let after = log_file_lengths(dir.path())?;
        for (name, length) in &before {
            if let Some(now) = after.get(name) {
                assert!(now >= length, "{name} shrank from {length} to {now}");
            }
        }
        let batches = batches_of(&log)?;
        assert!(batches
            .iter()
            .all(|&(base, _, _, ts)| (base < second + 2) == (ts < 5_000)));
        drop((retired_view, active_view));
        // The stale tail of the retired segment stays bounded after a crash and after
        // a clean restart alike.
        let end = log.log_end_offset();
        let checkpoint = log.checkpoint_offset();
        drop(log);
        for (clean, recovery_point) in [(false, checkpoint), (false, 0)] {
            let reopened = open_with(dir.path(), clean, recovery_point)?;
            assert_eq!(reopened.log_end_offset(), end);
            assert_eq!(batches_of(&reopened)?, batches);
        }
        let mut reopened = open_with(dir.path(), false, checkpoint)?;
        reopened.close()?;
        let reopened = open_with(dir.path(), true, 0)?;
        assert_eq!(batches_of(&reopened)?, batches);
        Ok(())
    }

    /// Truncates a flushed log, appends new batches, and crashes: whichever recovery
    /// checkpoint the restart uses (before or after the truncation), and whether or
    /// not the removed segments' files were deleted, no truncated batch comes back.
    #[test]
    fn truncated_batches_never_come_back_after_a_crash() -> TestResult {
        // (cut as a segment index and an offset within it, append afterwards, delete doomed)
        for (segment_index, within, append_after, delete) in [
            (usize::MAX, 2, false, false), // the active segment
            (usize::MAX, 2, true, true),
            (1, 4, true, false), // a retired segment
            (1, 4, false, true),
            (0, 6, true, true),
        ] {
            let dir = tempfile::tempdir()?;
            let mut log = fresh(dir.path())?;
            for i in 0..40 {
                log.append(&simple_batch(2, 1_000 + i), 0)?;
            }
            flush(&mut log)?;
            let old_checkpoint = log.checkpoint_offset();
            assert_eq!(old_checkpoint, 80);
            let bases: Vec<i64> = log.segments.keys().copied().collect();
            let base = *bases.get(segment_index).unwrap_or(&bases[bases.len() - 1]);
            let cut = base + within;
            let doomed = log.truncate_to(cut)?;
            assert!(log.checkpoint_offset() <= cut, "the recovery point dropped");
            if delete {
                doomed.delete()?;
            } else {
                drop(doomed); // crash before the unlink
            }
            if append_after {
                for i in 0..3 {
                    // Same size as the cut batches: a stale one right after them would parse.
                    log.append(&simple_batch(2, 7_000 + i), 0)?;
                }
            }
            let expected = batches_of(&log)?;
            let not_flushed_checkpoint = log.checkpoint_offset();
            let plan = log.flush_plan();
            plan.run()?;
            log.mark_flushed(&plan);
            let new_checkpoint = log.checkpoint_offset();
            assert_eq!(new_checkpoint, log.log_end_offset());
            drop(log); // crash
            for recovery_point in [old_checkpoint, not_flushed_checkpoint, new_checkpoint, 0] {
                let reopened = open_with(dir.path(), false, recovery_point)?;
                let case = format!("cut {cut}, recovery point {recovery_point}");
                assert_eq!(batches_of(&reopened)?, expected, "{case}");
                assert!(
                    list_suffix(dir.path(), ".log")?
                        .iter()
                        .all(|&b| b <= reopened.log_end_offset()),
                    "{case}: no segment file above the log end"
                );
                drop(reopened);
            }
        }
        Ok(())
    }

    #[test]
    fn a_clean_restart_after_truncation_keeps_the_cut() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..40 {
            log.append(&simple_batch(2, 1_000 + i), 0)?;
        }
        let second = *log.segments.keys().nth(1).ok_or("no segment")?;
        log.truncate_to(second + 2)?.delete()?;
        log.append(&simple_batch(1, 9_000), 0)?;
        let expected = batches_of(&log)?;
        log.close()?;
        let log = open_with(dir.path(), true, 0)?;
        assert_eq!(batches_of(&log)?, expected);
        assert_eq!(log.log_end_offset(), second + 3);
        Ok(())
    }

    #[test]
    fn producer_state_after_truncation_forgets_what_was_cut() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        let records = vec![TestRecord::default(); 2];
        // Enough batches to roll (and snapshot) a few times, all from producer 5.
        let mut seq = 0;
        while log.segment_count() < 4 {
            log.append(&encode_batch(&records, 0, (5, 0, seq)), 0)?;
            seq += 2;
            if log.segment_count() == 2 {
                flush(&mut log)?; // a snapshot file at the second segment's base
            }
        }
        flush(&mut log)?;
        let snapshots = list_suffix(dir.path(), ".snapshot")?;
        assert!(!snapshots.is_empty());
        let cut = *log.segments.keys().nth(1).ok_or("no segment")? + 4;
        log.truncate_to(cut)?.delete()?;
        assert!(
            list_suffix(dir.path(), ".snapshot")?
                .iter()
                .all(|&s| s <= cut),
            "snapshots above the cut go"
        );
        // The batch just below the cut is a duplicate; the one at the cut is new.
        let kept = encode_batch(&records, 0, (5, 0, (cut - 2) as i32));
        assert_eq!(log.append(&kept, 0)?.base_offset, cut - 2, "duplicate");
        assert_eq!(log.log_end_offset(), cut);
        let cut_away = encode_batch(&records, 0, (5, 0, cut as i32));
        assert_eq!(log.append(&cut_away, 0)?.base_offset, cut, "appended anew");
        let beyond = encode_batch(&records, 0, (5, 0, cut as i32 + 4));
        assert!(matches!(
            log.append(&beyond, 0),
            Err(AppendError::Sequence(_))
        ));
        // And so after a crash.
        drop(log);
        let mut log = fresh(dir.path())?;
        assert_eq!(log.append(&cut_away, 0)?.base_offset, cut, "duplicate now");
        Ok(())
    }

    #[test]
    fn a_flush_planned_before_a_truncation_marks_nothing_and_writes_no_snapshot() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        let mut i = 0;
        while log.segment_count() < 3 {
            log.append(&simple_batch(2, i), 0)?;
            i += 1;
        }
        let plan = log.flush_plan();
        let planned_snapshot = plan.snapshot.as_ref().map(|(at, _)| *at).ok_or("none")?;
        let first_end = log.segments.values().next().ok_or("none")?.next_offset();
        log.truncate_to(first_end - 2)?.delete()?;
        assert!(planned_snapshot > log.log_end_offset());
        plan.run()?;
        assert!(!log.mark_flushed(&plan), "a stale plan does not count");
        assert!(log.recovery_point() <= log.log_end_offset());
        assert!(
            !list_suffix(dir.path(), ".snapshot")?.contains(&planned_snapshot),
            "a stale plan wrote its snapshot above the cut"
        );
        assert!(log.unflushed_bytes() < u64::MAX);
        flush(&mut log)?;
        assert_eq!(log.checkpoint_offset(), log.log_end_offset());
        Ok(())
    }

    #[test]
    fn reset_starts_an_empty_log_at_an_offset() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        log.start_leader_epoch(2)?;
        let records = vec![TestRecord::default(); 2];
        for seq in 0..30 {
            log.append(&encode_batch(&records, 0, (9, 0, seq * 2)), 0)?;
        }
        let view = log.read(0, 1 << 20, true)?.ok_or("no data")?;
        let copy = view.to_vec();
        let doomed = log.reset_to(1_000)?;
        assert!(doomed.len() > 1);
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (1_000, 1_000)
        );
        assert!(log.epoch_entries().is_empty() && log.producers.is_empty());
        assert!(log.read(0, 100, true).is_err());
        doomed.delete()?;
        assert_eq!(view[..], copy[..], "a view of a reset log stays readable");
        // A replicated batch at 1000 continues it.
        let leader_dir = tempfile::tempdir()?;
        let mut leader = fresh(leader_dir.path())?;
        leader.reset_to(1_000)?.delete()?;
        leader.start_leader_epoch(5)?;
        leader.append(&encode_batch(&records, 0, (9, 0, 0)), 0)?;
        let batch = leader.read(1_000, 1 << 20, true)?.ok_or("no data")?;
        log.append_replicated(&batch)?;
        assert_eq!(log.epoch_entries(), &[(5, 1_000)]);
        flush(&mut log)?;
        drop(log);
        let log = fresh(dir.path())?;
        assert_eq!(
            (log.log_start_offset(), log.log_end_offset()),
            (1_000, 1_002)
        );
        assert_eq!(list_suffix(dir.path(), ".log")?, vec![1_000]);
        assert_eq!(log.epoch_entries(), &[(5, 1_000)]);
        Ok(())
    }

    #[test]
    fn a_replicated_batch_larger_than_this_replicas_segments_still_fits() -> TestResult {
        let leader_dir = tempfile::tempdir()?;
        let follower_dir = tempfile::tempdir()?;
        let mut config = small_config();
        config.segment_bytes = 1 << 20;
        let mut leader = Log::open(
            leader_dir.path(),
            config,
            OpenMode {
                clean: false,
                recovery_point: 0,
            },
        )?;
        leader.append(&simple_batch(100, 0), 0)?;
        leader.append(&simple_batch(100, 0), 0)?;
        let bytes = leader.read(0, 1 << 20, true)?.ok_or("no data")?;
        assert!(
            bytes.len() > 2 * 1024,
            "larger than the follower's segments"
        );
        let mut follower = fresh(follower_dir.path())?;
        assert_eq!(follower.append_replicated(&bytes)?.last_offset, 199);
        assert_eq!(all_bytes(&follower)?, all_bytes(&leader)?);
        drop(follower);
        assert_eq!(fresh(follower_dir.path())?.log_end_offset(), 200);
        Ok(())
    }

    #[test]
    fn read_below_stops_at_the_upper_bound() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..40 {
            log.append(&simple_batch(2, i), 0)?;
        }
        let bytes = log.read_below(0, 1 << 20, true, 5)?.ok_or("no data")?;
        assert_eq!(batches_last(&bytes)?, 5, "batches based at 0, 2, 4");
        assert_eq!(log.read_below(6, 1 << 20, true, 6)?, None, "at the bound");
        assert_eq!(
            log.read_below(70, 1 << 20, true, 80)?
                .map(|b| batches_last(&b)),
            Some(Ok(79))
        );
        // An upper bound past a segment boundary reads on from the segment holding it.
        let second = *log.segments.keys().nth(1).ok_or("no segment")?;
        let bytes = log
            .read_below(second, 1 << 20, true, second + 3)?
            .ok_or("none")?;
        assert_eq!(batches_last(&bytes)?, second + 3);
        assert!(log.read_below(81, 1, true, 100).is_err(), "out of range");
        assert_eq!(log.read_below(80, 1, true, 100)?, None, "the log end");
        Ok(())
    }

    #[test]
    fn the_epoch_checkpoint_is_rebuilt_when_missing_and_trimmed_to_the_recovered_log() -> TestResult
    {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for (epoch, count) in [(1, 5), (4, 5), (6, 5)] {
            log.set_leader_epoch(epoch);
            for i in 0..count {
                log.append(&simple_batch(2, i), 0)?;
            }
        }
        let expected = [(1, 0), (4, 10), (6, 20)];
        assert_eq!(log.epoch_entries(), &expected);
        assert_eq!(log.end_offset_for_epoch(4), (4, 20));
        assert_eq!(log.end_offset_for_epoch(5), (4, 20));
        assert_eq!(log.end_offset_for_epoch(6), (6, 30));
        assert_eq!(log.end_offset_for_epoch(7), (-1, -1));
        assert_eq!(log.end_offset_for_epoch(0), (0, 0));
        assert_eq!(
            std::fs::read_to_string(dir.path().join(epochs::CHECKPOINT_FILE))?,
            "0\n3\n1 0\n4 10\n6 20\n"
        );
        let plan = log.flush_plan();
        assert!(plan.sync_epochs, "the file's fsync waits for the flush");
        plan.run()?;
        log.mark_flushed(&plan);
        assert!(!log.flush_plan().sync_epochs);
        drop(log);
        std::fs::remove_file(dir.path().join(epochs::CHECKPOINT_FILE))?;
        let log = fresh(dir.path())?;
        assert_eq!(log.epoch_entries(), &expected, "rebuilt from batch headers");
        drop(log);
        std::fs::write(dir.path().join(epochs::CHECKPOINT_FILE), "garbage")?;
        let log = open_with(dir.path(), false, 30)?;
        assert_eq!(log.epoch_entries(), &expected, "rebuilt from a torn file");
        drop(log);
        // A file that knows epochs past the recovered log end (written before the
        // batches that a crash lost), and one that missed the tail's epochs.
        std::fs::write(
            dir.path().join(epochs::CHECKPOINT_FILE),
            "0\n4\n1 0\n4 10\n6 20\n8 30\n",
        )?;
        let log = open_with(dir.path(), false, 30)?;
        assert_eq!(
            log.epoch_entries(),
            &expected,
            "entries past the end dropped"
        );
        drop(log);
        // (The flush that moves the recovery point past a batch also syncs the file
        // with its epoch, so a file can only miss epochs starting past that point.)
        std::fs::write(dir.path().join(epochs::CHECKPOINT_FILE), "0\n1\n1 0\n")?;
        let log = open_with(dir.path(), false, 10)?;
        assert_eq!(
            log.epoch_entries(),
            &expected,
            "the recovered tail's epochs added"
        );
        Ok(())
    }

    #[test]
    fn the_tail_recovered_after_a_crash_is_not_durable_until_flushed() -> TestResult {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..10 {
            log.append(&simple_batch(2, i), 0)?;
        }
        flush(&mut log)?;
        for i in 0..10 {
            log.append(&simple_batch(2, 100 + i), 0)?;
        }
        drop(log); // crash: the last ten batches were never synced
        let mut log = open_with(dir.path(), false, 20)?;
        assert_eq!(log.log_end_offset(), 40);
        assert_eq!(log.recovery_point(), 20, "not reported durable");
        assert_eq!(log.checkpoint_offset(), 20);
        assert!(log.unflushed_bytes() > 0, "the next flush syncs it");
        let plan = log.flush_plan();
        assert!(!plan.segments.is_empty());
        plan.run()?;
        log.mark_flushed(&plan);
        assert_eq!(log.recovery_point(), 40);
        Ok(())
    }
}
