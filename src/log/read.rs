//! Reading: whole batches as zero-copy views from an offset (bounded by the high
//! watermark for consumers), offsets by timestamp, and the leader-epoch queries.

use bytes::Bytes;

use super::producer_state::ProducerStateTable;
use super::segment::{self, Segment};
use super::txn::AbortedTxn;
use super::{Log, OffsetOutOfRange};
use crate::model::{LeaderEpoch, Offset};

impl Log {
    /// Whole batches from the one holding `offset`, up to `max_bytes` (at least one
    /// batch when `min_one`); `None` at the log end. Zero-copy views of the segments.
    pub fn read(
        &self,
        offset: Offset,
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
        offset: Offset,
        max_bytes: u64,
        min_one: bool,
        upper: Offset,
    ) -> Result<Option<Bytes>, OffsetOutOfRange> {
        let (offset, upper) = (offset.0, upper.0);
        let log_end = self.end();
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

    /// See [`ProducerStateTable::first_unstable_offset`]; the last stable offset is
    /// this or the high watermark, whichever is lower.
    pub fn first_unstable_offset(&self, high_watermark: Offset) -> Option<Offset> {
        self.producers
            .first_unstable_offset(high_watermark.0)
            .map(Offset)
    }

    /// Forgets completed transactions below the high watermark (they are stable).
    pub fn forget_replicated_txns(&mut self, high_watermark: Offset) {
        self.producers.forget_replicated(high_watermark.0);
    }

    /// The aborted transactions with data in `[from, to)` (Fetch's
    /// `aborted_transactions` for read_committed consumers).
    pub fn aborted_between(&self, from: Offset, to: Offset) -> Vec<AbortedTxn> {
        self.producers.aborted_between(from.0, to.0)
    }

    /// See [`ProducerStateTable::begin_verification`].
    pub fn begin_verification(&mut self, producer_id: i64) -> u64 {
        self.producers.begin_verification(producer_id)
    }

    /// The producer state (DescribeProducers).
    pub fn producer_state(&self) -> &ProducerStateTable {
        &self.producers
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
            points.push((self.end(), now_ms));
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

    /// The latest leader epoch with an entry in the epoch cache (the epoch of the
    /// newest batch, or one started by [`Log::start_leader_epoch`]).
    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.epochs.latest().map(|(epoch, _)| LeaderEpoch(epoch))
    }

    /// OffsetForLeaderEpoch's answer for `epoch`, as Kafka's `endOffsetFor`: the
    /// largest epoch `<=` `epoch` this log knows and the offset where it ended, or
    /// `(-1, -1)` ([`LeaderEpochCache::end_offset_for`]).
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> (LeaderEpoch, Offset) {
        let (epoch, offset) = self.epochs.end_offset_for(epoch.0, self.end());
        (LeaderEpoch(epoch), Offset(offset))
    }

    /// The epoch cache's `(epoch, start_offset)` entries, ascending.
    pub fn epoch_entries(&self) -> &[(i32, i64)] {
        self.epochs.entries()
    }
}
