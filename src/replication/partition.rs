//! One partition replica: its log, its durability and the wake-ups of long-polling
//! fetchers. The log sits behind a short, synchronous lock; nothing slow happens while
//! it is held: no fsync (a roll, DeleteRecords and retention leave theirs to the next
//! flush, see `log::FlushPlan`), no unlink of a removed segment, no waiting.
//!
//! Every durability failure (an fsync of data, of a retired segment, of a snapshot, of
//! the log start or of the directory) takes the partition offline for writes, as Kafka
//! takes a log directory offline: Linux may have dropped the dirty pages and reports
//! the error once, so a retry could "succeed" over lost data. A failed `pwrite` or
//! block allocation (a full disk) is not such a failure: nothing was acknowledged and
//! nothing dropped, so that produce gets KAFKA_STORAGE_ERROR and the next may succeed.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;
use uuid::Uuid;

use crate::log::{AppendError, AppendInfo, Doomed, Log, LogConfig, OffsetOutOfRange};
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
        self.flush_in_turn().await
    }

    /// Writes everything appended so far to disk, off the log lock and off the runtime.
    pub async fn flush(&self) -> Result<(), PartitionError> {
        let _turn = self.flush_lock.lock().await;
        self.flush_in_turn().await
    }

    /// One flush plan at a time: two plans carrying the same deferred snapshot or log
    /// start would write the same files at once.
    async fn flush_in_turn(&self) -> Result<(), PartitionError> {
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
                tracing::error!(partition = %self.id, %join_error, "flush task failed; partition taken offline");
                self.failed.store(true, Ordering::Release);
                Err(PartitionError::StorageFailed(self.id.clone()))
            }
        }
    }

    pub fn durable_offset(&self) -> i64 {
        self.durable_offset.load(Ordering::Acquire)
    }

    /// What the recovery checkpoint may record for this partition (see
    /// `Log::checkpoint_offset`).
    pub fn checkpoint_offset(&self) -> i64 {
        self.log
            .lock()
            .checkpoint_offset()
            .min(self.durable_offset())
    }

    /// Whether an fsync failed, so the partition takes no writes.
    pub fn is_offline(&self) -> bool {
        self.failed.load(Ordering::Acquire)
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

    /// Moves the log start to `offset`, which must lie within `[log start, high
    /// watermark]`, and returns once the new log start is on disk. The lock is held
    /// only to move it in memory; removed segments are unlinked and the log start
    /// written after it is released.
    pub async fn delete_records_before(&self, offset: i64) -> Result<i64, PartitionError> {
        if self.is_offline() {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let (log_start, doomed) = {
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
            log.delete_records_before(offset)?
        };
        let id = self.id.clone();
        let _ = tokio::task::spawn_blocking(move || delete_segments(&id, doomed)).await;
        self.flush().await?;
        Ok(log_start)
    }

    /// Removes segments past retention; returns how many. Blocking (file deletion):
    /// call it off the async runtime.
    pub fn apply_retention(&self, now_ms: i64) -> std::io::Result<usize> {
        let doomed = self.log.lock().apply_retention(now_ms)?;
        let count = doomed.len();
        doomed.delete()?;
        Ok(count)
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

/// Unlinks removed segments. A failure leaves stray files, not lost data: it is logged,
/// and the next start deletes segments that lie below the log start.
fn delete_segments(id: &TopicPartition, doomed: Doomed) {
    if let Err(error) = doomed.delete() {
        tracing::warn!(partition = %id, %error, "could not delete removed segment files");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::testing::simple_batch;
    use crate::log::OpenMode;

    fn partition_in(dir: &std::path::Path) -> std::io::Result<Partition> {
        let config = LogConfig {
            segment_bytes: 1024,
            index_bytes: 1024,
            index_interval_bytes: 128,
            ..LogConfig::default()
        };
        let mode = OpenMode {
            clean: false,
            recovery_point: 0,
        };
        let log = Log::open(dir, config, mode)?;
        Ok(Partition::new(
            TopicPartition::new("t", 0),
            Uuid::nil(),
            log,
            1,
        ))
    }

    #[tokio::test]
    async fn a_failed_sync_of_a_rolls_deferred_work_takes_the_partition_offline(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let log_dir = dir.path().join("t-0");
        let partition = partition_in(&log_dir)?;
        let mut last = 0;
        for i in 0..20 {
            last = partition.append(&simple_batch(2, i), 0)?.last_offset;
        }
        partition.wait_durable(last).await?;
        assert!(!partition.is_offline());
        // Roll again, then take the directory away: the roll's snapshot cannot be written.
        let (_, segments) = partition.size_and_segments();
        while partition.size_and_segments().1 == segments {
            last = partition.append(&simple_batch(2, 0), 0)?.last_offset;
        }
        std::fs::remove_dir_all(&log_dir)?;
        assert!(matches!(
            partition.wait_durable(last).await,
            Err(PartitionError::StorageFailed(_))
        ));
        assert!(partition.is_offline());
        assert!(
            partition.durable_offset() <= last,
            "nothing reported durable"
        );
        assert!(matches!(
            partition.append(&simple_batch(1, 0), 0),
            Err(PartitionError::StorageFailed(_))
        ));
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_flushes_across_rolls_never_fail() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let partition = std::sync::Arc::new(partition_in(dir.path())?);
        let flusher = {
            let partition = std::sync::Arc::clone(&partition);
            tokio::spawn(async move {
                for _ in 0..300 {
                    partition.flush().await?;
                }
                Ok::<_, PartitionError>(())
            })
        };
        for i in 0..300 {
            let info = partition.append(&simple_batch(2, i), 0)?;
            partition.wait_durable(info.last_offset).await?;
        }
        flusher.await??;
        assert!(!partition.is_offline());
        assert!(partition.size_and_segments().1 > 10, "it rolled often");
        Ok(())
    }

    #[tokio::test]
    async fn delete_records_returns_once_the_log_start_is_on_disk(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let partition = partition_in(dir.path())?;
        for i in 0..20 {
            partition.append(&simple_batch(2, i), 0)?;
        }
        assert_eq!(partition.delete_records_before(11).await?, 11);
        let stored = std::fs::read_to_string(dir.path().join("log-start-offset"))?;
        assert_eq!(stored.trim(), "11");
        assert!(partition.delete_records_before(99).await.is_err());
        Ok(())
    }
}
