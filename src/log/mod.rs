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
pub mod records;
pub mod segment;
pub mod throttle;
pub mod time_index;
pub mod txn;

mod append;
pub mod cleaning;
mod config;
mod files;
pub mod flush;
mod open;
mod read;
pub mod retention;
pub mod truncate;

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use self::batch::BatchError;
use self::epochs::LeaderEpochCache;
use self::mmap::RangeFlusher;
use self::producer_state::{ProducerStateTable, SequenceError};
use self::segment::Segment;
use crate::model::{LeaderEpoch, Offset};

pub use self::compaction::{CleanableSegment, CleaningJob};
pub use self::config::{CleanupPolicy, LogConfig};
pub use self::files::write_atomically;

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
    /// A control batch (attribute bit 5) offered to the leader's append path: only a
    /// transaction coordinator writes markers (Kafka's `LogValidator.validateBatch`).
    #[error("clients are not allowed to write control records")]
    ControlBatch,
    /// A CreateTime batch stamped too far from the broker's clock
    /// (`message.timestamp.before.max.ms` / `message.timestamp.after.max.ms`).
    #[error("Timestamp {timestamp} of message is out of range. The timestamp should be within [{earliest}, {latest}]")]
    TimestampOutOfRange {
        timestamp: i64,
        earliest: i64,
        latest: i64,
    },
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

fn io_error(dir: &Path) -> impl FnOnce(io::Error) -> AppendError + '_ {
    move |source| AppendError::Io {
        dir: dir.to_path_buf(),
        source,
    }
}

impl Log {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    pub fn log_start_offset(&self) -> Offset {
        Offset(self.log_start_offset)
    }

    pub fn log_end_offset(&self) -> Offset {
        Offset(self.end())
    }

    /// The log end as the files count it (the next offset of the active segment).
    pub(super) fn end(&self) -> i64 {
        self.active().map_or(0, Segment::next_offset)
    }

    pub fn recovery_point(&self) -> Offset {
        Offset(self.recovery_point)
    }

    /// The offset a recovery checkpoint may record: the recovery point, but never past
    /// a retired segment whose trimmed length is not durable yet, since a segment below
    /// the checkpoint is trusted (not rescanned) at the next start.
    pub fn checkpoint_offset(&self) -> Offset {
        Offset(
            self.deferred
                .seals
                .iter()
                .map(|(base, _)| *base)
                .fold(self.recovery_point, i64::min),
        )
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        LeaderEpoch(self.leader_epoch)
    }

    /// The epoch stamped on batches appended from now on.
    pub fn set_leader_epoch(&mut self, epoch: LeaderEpoch) {
        self.leader_epoch = epoch.0;
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size).sum()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    pub(super) fn active(&self) -> Option<&Segment> {
        self.segments.values().next_back()
    }

    pub(super) fn active_mut(&mut self) -> io::Result<&mut Segment> {
        self.segments
            .values_mut()
            .next_back()
            .ok_or_else(|| io::Error::other("log has no segment"))
    }
}

#[cfg(test)]
mod tests;
