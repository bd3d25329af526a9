//! Cutting the log: a follower's truncation to where it diverged from its leader, and a
//! reset to an empty log at an offset. No file shortens under a live view; removed
//! files are renamed `*.deleted` at once and unlinked off the lock ([`Doomed`]).

use std::io;
use std::path::PathBuf;

use super::files::{list_suffix, snapshot_path};
use super::producer_state::ProducerStateTable;
use super::segment::{self, Segment};
use super::{io_error, AppendError, Log, OffsetOutOfRange};
use crate::model::Offset;

/// Segments taken out of the log, whose files the caller deletes once it no longer
/// holds the log's lock (unlinking a large file can take a while). Readers holding
/// `Bytes` of them keep their mappings alive.
#[derive(Debug, Default)]
#[must_use = "the files of removed segments stay on disk until delete() is called"]
pub struct Doomed {
    pub(super) segments: Vec<Segment>,
    /// Other files to unlink (producer snapshots above a truncation point).
    pub(super) files: Vec<PathBuf>,
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

impl Log {
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
    pub fn truncate_to(&mut self, offset: Offset) -> Result<Doomed, AppendError> {
        let offset = offset.0;
        let log_end = self.end();
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
            return self.reset_to(Offset(offset));
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
    pub fn reset_to(&mut self, offset: Offset) -> Result<Doomed, AppendError> {
        let offset = offset.0;
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

    pub(super) fn out_of_range(&self, offset: i64) -> AppendError {
        AppendError::Io {
            dir: self.dir.clone(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                OffsetOutOfRange {
                    offset,
                    log_start: self.log_start_offset,
                    log_end: self.end(),
                },
            ),
        }
    }

    /// A cut below the cleaner checkpoint takes it down to the cut: what is appended
    /// there next was not cleaned, nor synced by the cleaner. The file follows with
    /// the next flush, which is also the one that first makes those appends durable.
    pub(super) fn lower_cleaner_checkpoint(&mut self, offset: i64) {
        if self.cleaner_checkpoint > offset {
            self.cleaner_checkpoint = offset;
            self.deferred.cleaner_checkpoint = Some(offset);
        }
    }

    /// Renames the producer snapshots taken above `offset` to `*.deleted` (they
    /// describe batches that are gone) and returns their new paths, to unlink later.
    pub(super) fn take_snapshots_above(&mut self, offset: i64) -> io::Result<Vec<PathBuf>> {
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

    pub(super) fn take_segments(&mut self, bases: &[i64]) -> Doomed {
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
}
