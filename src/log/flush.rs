//! Durability: the flush plan that runs without the log's lock (segment data, index
//! maps, and the work that rolls, truncations, DeleteRecords and retention deferred),
//! what a plan that ran marks durable, and a clean close.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::epochs;
use super::files::{
    sync_dir, write_atomically, write_snapshot_file, CLEANER_CHECKPOINT_FILE, LOG_START_FILE,
};
use super::mmap::RangeFlusher;
use super::segment::Segment;
use super::Log;

/// A flush to run without holding the log: every dirty range, plus the durability
/// work that rolls, DeleteRecords and retention left behind ([`Deferred`]).
#[derive(Debug)]
pub struct FlushPlan {
    pub(super) dir: PathBuf,
    pub(super) up_to_offset: i64,
    pub(super) segments: Vec<(i64, u64, Vec<RangeFlusher>)>,
    pub(super) seals: Vec<(i64, Vec<RangeFlusher>)>,
    pub(super) snapshot: Option<(i64, Arc<Vec<u8>>)>,
    pub(super) log_start: Option<i64>,
    pub(super) cleaner_checkpoint: Option<i64>,
    /// The directory's change count to sync up to, when it changed since its last sync.
    pub(super) dir_changes: Option<u64>,
    /// The leader-epoch checkpoint was rewritten since its last sync.
    pub(super) sync_epochs: bool,
    /// The log's truncation count when the plan was made, and the log's shared count:
    /// a plan made before a truncation must not write its (older) snapshot after it,
    /// nor mark anything flushed (see [`Log::mark_flushed`]).
    pub(super) generation: u64,
    pub(super) shape: Arc<Mutex<u64>>,
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

impl Log {
    /// Collects what must be written to disk for everything appended so far.
    pub fn flush_plan(&self) -> FlushPlan {
        let deferred = &self.deferred;
        FlushPlan {
            dir: self.dir.clone(),
            up_to_offset: self.end(),
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
        write_snapshot_file(&self.dir, self.end(), &self.producer_snapshot()?, None)
    }

    /// Counts a change of the log's shape: flush plans made before it are stale.
    pub(super) fn bump_shape(&mut self) {
        let mut generation = self.shape.lock().unwrap_or_else(|e| e.into_inner());
        *generation += 1;
    }

    pub(super) fn generation(&self) -> u64 {
        *self.shape.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn producer_snapshot(&self) -> io::Result<Vec<u8>> {
        serde_json::to_vec(&self.producers).map_err(io::Error::other)
    }
}
