//! Opening a log directory: finishing or discarding a crash's leftovers, trusting what
//! lies below the recovery point (or a clean shutdown), rescanning the rest, and
//! rebuilding producer state and the leader-epoch cache from the recovered log.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::epochs::LeaderEpochCache;
use super::files::{
    list_suffix, read_i64_file, snapshot_path, CLEANER_CHECKPOINT_FILE, LOG_START_FILE,
};
use super::producer_state::ProducerStateTable;
use super::segment::{self, Segment};
use super::Deferred;
use super::{compaction, AppendError, ArchiveGate, Log, LogConfig, OpenMode};

impl Log {
    /// Opens or creates the log in `dir`, recovering the unflushed tail if the last
    /// shutdown was not clean.
    pub fn open(dir: &Path, config: LogConfig, mode: OpenMode) -> io::Result<Self> {
        if !dir.is_dir() {
            // A new partition directory exists after a power loss only once its parent's
            // entry for it is synced: otherwise every fsync inside it is for nothing.
            std::fs::create_dir_all(dir)?;
            if let Some(parent) = dir.parent() {
                super::files::sync_dir(parent)?;
            }
        }
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
        let log_end = log.end();
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
        // What recovery kept past the checkpoint is synced now, before the log serves:
        // under `flush.messages` the leader's high watermark waits for its own log to be
        // durable, and nothing else would flush a partition that takes no new writes
        // until the flush interval — its consumers would not see the recovered records.
        if log.recovery_point < log.end() {
            let plan = log.flush_plan();
            plan.run()?;
            log.mark_flushed(&plan);
        }
        Ok(log)
    }

    /// Reads the leader-epoch checkpoint and brings it in line with the recovered log:
    /// entries past its end go, epochs of the batches past the recovery point (which
    /// the file may not have caught) are added. A missing or unreadable file is
    /// rebuilt from every batch header.
    pub(super) fn load_epochs(&mut self, mode: OpenMode) -> io::Result<()> {
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
        cache.truncate_from_end(self.end());
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

    /// Loads the newest usable producer-state snapshot and replays batches after it.
    pub(super) fn load_producer_state(&mut self) -> io::Result<()> {
        let log_end = self.end();
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
}

/// Removes what a crash left of [`write_atomically`]'s temporary files, and files
/// taken out of the log but not unlinked yet.
pub(super) fn remove_temporary_files(dir: &Path) -> io::Result<()> {
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
