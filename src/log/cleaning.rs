//! The log's side of compaction: how dirty its cleanable section is, the job a pass
//! runs off the lock (`compaction::run_pass`), and installing what the pass wrote.

use std::io;

use std::sync::Arc;

use super::compaction::{self, CleanableSegment, CleaningJob};
use super::files::{list_suffix, snapshot_path, write_atomically};
use super::producer_state::ProducerStateTable;
use super::segment::Segment;
use super::truncate::Doomed;
use super::txn::AbortedTxn;
use super::Log;

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

impl Log {
    /// The segments a cleaning pass may rewrite, oldest first, each with the offset
    /// where the next segment starts: sealed segments (never the active one) wholly
    /// below `upper` (the high watermark: nothing a new leader could truncate), already
    /// flushed with their trimmed length synced (so that the cleaner checkpoint's trust
    /// at open holds), and, by `min.compaction.lag.ms`, old enough. The first one that
    /// fails a test ends the section.
    pub(super) fn cleanable_segments(&self, upper: i64, now_ms: i64) -> Vec<(&Segment, i64)> {
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
            aborted: self.producers.aborted_between(self.log_start_offset, upper),
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
        if !pass.forget_aborted.is_empty() {
            self.forget_aborted_txns(&pass.forget_aborted)?;
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

    /// Forgets aborted transactions whose data is gone, in memory, in the snapshot a
    /// flush has yet to write and in every snapshot on disk, before any of their
    /// markers can go: a restart must not bring back an entry whose marker is gone,
    /// which would make readers drop the producer's later committed data. Bumps the
    /// shape so that a flush planned before cannot write an older snapshot after this.
    fn forget_aborted_txns(&mut self, txns: &[AbortedTxn]) -> io::Result<()> {
        let forget = |raw: &[u8]| -> io::Result<Vec<u8>> {
            let mut table: ProducerStateTable =
                serde_json::from_slice(raw).map_err(io::Error::other)?;
            table.forget_aborted(txns);
            serde_json::to_vec(&table).map_err(io::Error::other)
        };
        self.producers.forget_aborted(txns);
        self.bump_shape();
        if let Some((offset, raw)) = &self.deferred.snapshot {
            let patched = Arc::new(forget(raw)?);
            self.deferred.snapshot = Some((*offset, patched));
        }
        for offset in list_suffix(&self.dir, ".snapshot")? {
            let path = snapshot_path(&self.dir, offset);
            let Ok(raw) = std::fs::read(&path) else {
                continue; // removed by a newer snapshot meanwhile
            };
            match forget(&raw) {
                Ok(patched) => write_atomically(&path, &patched)?,
                // An unreadable snapshot is never loaded (see `load_producer_state`).
                Err(_) => continue,
            }
        }
        Ok(())
    }
}
