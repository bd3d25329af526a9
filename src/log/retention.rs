//! Retention by time and size (a topic with `cleanup.policy=delete`), DeleteRecords'
//! log start, and the archive's gate: an archived topic's expired segment goes only once
//! the archive holds it.

use std::io;

use super::segment::Segment;
use super::truncate::Doomed;
use super::{io_error, AppendError, ArchiveGate, Log, OffsetOutOfRange};
use crate::model::Offset;

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

impl Log {
    /// Moves the log start to `offset` (DeleteRecords) and takes out whole segments below
    /// it. The new log start is written to disk by the next flush.
    pub fn delete_records_before(
        &mut self,
        offset: Offset,
    ) -> Result<(Offset, Doomed), AppendError> {
        let offset = offset.0;
        let log_end = self.end();
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
            return Ok((Offset(self.log_start_offset), Doomed::default()));
        }
        self.log_start_offset = offset;
        self.deferred.log_start = Some(offset);
        let doomed = self
            .take_segments_below_log_start()
            .map_err(io_error(&self.dir))?;
        self.epochs.truncate_from_start(offset);
        self.producers.forget_below(self.log_start_offset);
        self.persist_epochs()?;
        Ok((Offset(self.log_start_offset), doomed))
    }

    pub(super) fn take_segments_below_log_start(&mut self) -> io::Result<Doomed> {
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
        self.producers.forget_below(self.log_start_offset);
        self.persist_epochs().map_err(|e| match e {
            AppendError::Io { source, .. } => source,
            other => io::Error::other(other),
        })?;
        Ok(retention)
    }

    pub(super) fn expired(&self, segment: &Segment, now_ms: i64) -> bool {
        let retention_ms = self.config.retention_ms;
        retention_ms >= 0
            && segment.max_timestamp() >= 0
            && segment.max_timestamp() < now_ms - retention_ms
    }

    /// The oldest sealed segments retention would take now, as `(base, end)`: past
    /// `retention.ms`, or beyond `retention.bytes`; the first one that is neither
    /// ends the prefix.
    pub(super) fn expired_prefix(&self, now_ms: i64) -> Vec<(i64, i64)> {
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
}
