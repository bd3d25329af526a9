//! One partition replica: its log, its durability and the wake-ups of long-polling
//! fetchers. The log sits behind a short, synchronous lock; nothing slow (disk flush,
//! waiting) happens while it is held.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;
use uuid::Uuid;

use crate::log::{AppendError, AppendInfo, Log, LogConfig, OffsetOutOfRange};
use crate::model::TopicPartition;

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error(transparent)]
    Append(#[from] AppendError),
    #[error("partition {0} has failed storage and takes no writes")]
    StorageFailed(TopicPartition),
    #[error(transparent)]
    OutOfRange(#[from] OffsetOutOfRange),
}

/// What a fetch found in one partition.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Whole batches, a zero-copy view of a segment; `None` at the log end.
    pub records: Option<Bytes>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

#[derive(Debug)]
pub struct Partition {
    id: TopicPartition,
    topic_id: Uuid,
    log: Mutex<Log>,
    /// The log end offset, published after each append for waiting fetchers.
    log_end: watch::Sender<i64>,
    /// Everything below this offset is on disk.
    durable_offset: AtomicI64,
    /// Serialises flushes; waiters queue here and find their data already flushed.
    flush_lock: tokio::sync::Mutex<()>,
    /// Set after an fsync error: Linux may have dropped the pages, so we stop writing.
    failed: AtomicBool,
    min_insync_replicas: AtomicI32,
}

impl Partition {
    pub fn new(id: TopicPartition, topic_id: Uuid, log: Log, min_insync_replicas: i32) -> Self {
        let (log_end, _) = watch::channel(log.log_end_offset());
        let durable = log.recovery_point();
        Self {
            id,
            topic_id,
            log: Mutex::new(log),
            log_end,
            durable_offset: AtomicI64::new(durable),
            flush_lock: tokio::sync::Mutex::new(()),
            failed: AtomicBool::new(false),
            min_insync_replicas: AtomicI32::new(min_insync_replicas),
        }
    }

    pub fn id(&self) -> &TopicPartition {
        &self.id
    }
    pub fn topic_id(&self) -> Uuid {
        self.topic_id
    }
    pub fn min_insync_replicas(&self) -> i32 {
        self.min_insync_replicas.load(Ordering::Relaxed)
    }
    /// Replicas in sync: this broker alone until replication lands.
    pub fn isr_size(&self) -> i32 {
        1
    }

    pub fn set_config(&self, config: LogConfig, min_insync_replicas: i32) {
        self.log.lock().set_config(config);
        self.min_insync_replicas
            .store(min_insync_replicas, Ordering::Relaxed);
    }

    /// Validates and appends a producer's record set.
    pub fn append(&self, records: &[u8], now_ms: i64) -> Result<AppendInfo, PartitionError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let (info, log_end) = {
            let mut log = self.log.lock();
            let info = log.append(records, now_ms)?;
            (info, log.log_end_offset())
        };
        self.log_end.send_replace(log_end);
        Ok(info)
    }

    /// Returns once every offset up to and including `offset` is on disk. Concurrent
    /// callers share flushes: whoever holds the flush lock writes everything appended
    /// so far, and the others find their offsets covered (group commit).
    pub async fn wait_durable(&self, offset: i64) -> Result<(), PartitionError> {
        if self.durable_offset.load(Ordering::Acquire) > offset {
            return Ok(());
        }
        let _turn = self.flush_lock.lock().await;
        if self.durable_offset.load(Ordering::Acquire) > offset {
            return Ok(());
        }
        self.flush().await
    }

    /// Writes everything appended so far to disk, off the log lock and off the runtime.
    pub async fn flush(&self) -> Result<(), PartitionError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let plan = self.log.lock().flush_plan();
        let up_to = plan.up_to_offset();
        let outcome = tokio::task::spawn_blocking(move || plan.run().map(|()| plan)).await;
        match outcome {
            Ok(Ok(plan)) => {
                self.log.lock().mark_flushed(&plan);
                self.durable_offset.fetch_max(up_to, Ordering::AcqRel);
                Ok(())
            }
            Ok(Err(error)) => {
                tracing::error!(partition = %self.id, %error, "flush failed; partition taken offline");
                self.failed.store(true, Ordering::Release);
                Err(PartitionError::StorageFailed(self.id.clone()))
            }
            Err(join_error) => {
                tracing::error!(partition = %self.id, %join_error, "flush task failed");
                Err(PartitionError::StorageFailed(self.id.clone()))
            }
        }
    }

    pub fn durable_offset(&self) -> i64 {
        self.durable_offset.load(Ordering::Acquire)
    }

    pub fn unflushed_bytes(&self) -> u64 {
        self.log.lock().unflushed_bytes()
    }

    pub fn read(
        &self,
        offset: i64,
        max_bytes: u64,
        min_one: bool,
    ) -> Result<ReadResult, PartitionError> {
        let log = self.log.lock();
        let records = log.read(offset, max_bytes, min_one)?;
        Ok(ReadResult {
            records,
            high_watermark: log.log_end_offset(),
            log_start_offset: log.log_start_offset(),
        })
    }

    /// `(log start, high watermark, log end)`. With a single replica the high
    /// watermark is the log end.
    pub fn offsets(&self) -> (i64, i64, i64) {
        let log = self.log.lock();
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.log_end_offset(),
        )
    }

    /// Starts leading under `epoch`: batches appended from now on carry it.
    pub fn become_leader(&self, epoch: i32) {
        let mut log = self.log.lock();
        if log.leader_epoch() != epoch {
            tracing::debug!(partition = %self.id, epoch, "leading partition");
            log.set_leader_epoch(epoch);
        }
    }

    pub fn leader_epoch(&self) -> i32 {
        self.log.lock().leader_epoch()
    }

    pub fn offset_for_timestamp(&self, timestamp: i64) -> Option<(i64, i64)> {
        self.log.lock().offset_for_timestamp(timestamp)
    }

    /// See `Log::legacy_offset_points` (ListOffsets v0).
    pub fn legacy_offset_points(&self, now_ms: i64) -> Vec<(i64, i64)> {
        self.log.lock().legacy_offset_points(now_ms)
    }

    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        self.log.lock().max_timestamp()
    }

    /// Moves the log start to `offset`, which must lie within `[log start, high watermark]`.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64, PartitionError> {
        let mut log = self.log.lock();
        let (log_start, log_end) = (log.log_start_offset(), log.log_end_offset());
        if offset < 0 || offset > log_end {
            return Err(OffsetOutOfRange {
                offset,
                log_start,
                log_end,
            }
            .into());
        }
        Ok(log.delete_records_before(offset)?)
    }

    pub fn apply_retention(&self, now_ms: i64) -> std::io::Result<usize> {
        self.log.lock().apply_retention(now_ms)
    }

    pub fn size_bytes(&self) -> u64 {
        self.log.lock().size_bytes()
    }

    /// `(bytes, segments)` of the log, read under one lock.
    pub fn size_and_segments(&self) -> (u64, usize) {
        let log = self.log.lock();
        (log.size_bytes(), log.segment_count())
    }

    /// A receiver that changes whenever the log end moves.
    pub fn watch_log_end(&self) -> watch::Receiver<i64> {
        self.log_end.subscribe()
    }

    /// Flushes and seals the log for a clean restart.
    pub fn close(&self) -> std::io::Result<()> {
        self.log.lock().close()
    }
}
