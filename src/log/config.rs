//! A log's settings, from its topic's config: segment sizes and ages, retention,
//! cleanup policy, compaction and compression, the archive.

use super::segment::SegmentSizes;

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
    /// `flush.ms`: longest time written data of this log stays unflushed (the broker's
    /// flusher acts on it; the log only carries it).
    pub flush_ms: i64,
    /// `segment.jitter.ms`: the active segment rolls up to this much before
    /// `segment.ms`, so that logs created together do not all roll at once.
    pub segment_jitter_ms: i64,
    /// `message.timestamp.before.max.ms`: a CreateTime batch may be at most this much
    /// older than the broker's clock.
    pub timestamp_before_max_ms: i64,
    /// `message.timestamp.after.max.ms`: a CreateTime batch may be at most this much
    /// ahead of the broker's clock.
    pub timestamp_after_max_ms: i64,
}

/// `cleanup.policy`: `delete` (retention by time and size), `compact` (keep the latest
/// record of each key), both, or neither (an empty list, which Kafka 4.1 accepts: the
/// log keeps everything).
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
    /// allowed), or empty; `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        let mut policy = Self {
            delete: false,
            compact: false,
        };
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
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
            flush_ms: 1000,
            segment_jitter_ms: 0,
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: i64::MAX,
        }
    }
}

impl LogConfig {
    pub(super) fn sizes(&self) -> SegmentSizes {
        SegmentSizes {
            segment_bytes: self.segment_bytes,
            index_bytes: self.index_bytes,
            index_interval_bytes: self.index_interval_bytes,
        }
    }
}
