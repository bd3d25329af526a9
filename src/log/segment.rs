//! One slice of a partition log on disk: `<base_offset:020>.log` with its sparse
//! `.index` (offset -> position) and `.timeindex` (timestamp -> offset).
//!
//! A segment is appended to ([`Segment::append`], or [`Segment::append_raw`] for a
//! follower's copy of its leader's batches) past the committed size, so the `Bytes`
//! views that [`Segment::read`] hands out stay valid. A follower may cut its tail
//! ([`Segment::truncate_to`]): only logically (committed size, index entries); the
//! bytes past the cut are zeroed for re-use only once no view reaches them
//! ([`Segment::invalidate_tail`]), and no file is ever shortened below a live view.
//! The active segment is preallocated and mapped whole; sealing trims the files to
//! their contents so that their lengths can be trusted after a clean restart.

use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::batch::{self, BatchHeader, LOG_OVERHEAD};
use super::index::OffsetIndex;
use super::mmap::{MappedFile, WriteMode};
use super::time_index::TimeIndex;

/// Sizes that shape a segment's files; from the topic config.
#[derive(Debug, Clone, Copy)]
pub struct SegmentSizes {
    /// Roll when the log file would pass this (`segment.bytes`).
    pub segment_bytes: u64,
    /// Most bytes of each index file (`segment.index.bytes`).
    pub index_bytes: u64,
    /// Log bytes between two index entries (`index.interval.bytes`).
    pub index_interval_bytes: u64,
}

pub fn log_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.log"))
}
pub fn index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.index"))
}
pub fn time_index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.timeindex"))
}

/// What a scan of a segment's batches found; see [`Segment::recover`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryReport {
    pub valid_bytes: u64,
    pub truncated_bytes: u64,
}

#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    dir: PathBuf,
    log: MappedFile,
    index: OffsetIndex,
    time_index: TimeIndex,
    /// Committed bytes of the log file: readers see `[0, size)`.
    size: u64,
    /// Offset after the last batch (the segment's log end).
    next_offset: i64,
    /// Largest batch max-timestamp seen, and the last offset of that batch.
    max_timestamp: i64,
    offset_of_max_timestamp: i64,
    bytes_since_index_entry: u64,
    /// Bytes known to be on disk (fdatasync'd).
    flushed: u64,
    sizes: SegmentSizes,
    /// Wall-clock ms when the first batch was written, for roll by age.
    first_append_ms: Option<i64>,
    /// Offsets from here on belong to the next segment: a scan at open stops at a batch
    /// based there (the stale tail of a segment truncated under a live view).
    end_limit: i64,
    /// The files were renamed to `*.deleted` ([`Segment::mark_deleted`]).
    deleted: bool,
}

/// Suffix of the files of a segment (or snapshot) taken out of the log but not yet
/// unlinked; removed at the next open.
pub const DELETED_SUFFIX: &str = ".deleted";

fn deleted_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(DELETED_SUFFIX);
    PathBuf::from(name)
}

impl Segment {
    /// Creates a new, empty active segment.
    pub fn create(dir: &Path, base_offset: i64, sizes: SegmentSizes) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(log_path(dir, base_offset))?;
        let log = MappedFile::new(file, sizes.segment_bytes, WriteMode::File)?;
        Self::assemble(dir, base_offset, log, sizes, false)
    }

    /// Opens an existing segment. `trusted` means it was sealed or closed cleanly, so
    /// its file lengths are exact and its indexes usable; otherwise call `recover`.
    pub fn open(
        dir: &Path,
        base_offset: i64,
        sizes: SegmentSizes,
        trusted: bool,
    ) -> io::Result<Self> {
        Self::open_bounded(dir, base_offset, sizes, trusted, i64::MAX)
    }

    /// [`Segment::open`] of a segment followed by one based at `end_limit`: batches at
    /// or past it are not part of this one. They exist when a follower truncated into
    /// this segment while a reader still had a view of its tail, so that the tail
    /// could be neither shortened nor overwritten (see `Log::truncate_to`).
    pub fn open_bounded(
        dir: &Path,
        base_offset: i64,
        sizes: SegmentSizes,
        trusted: bool,
        end_limit: i64,
    ) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(log_path(dir, base_offset))?;
        let length = file.metadata()?.len();
        let log = MappedFile::new(file, sizes.segment_bytes.max(length), WriteMode::File)?;
        let mut segment = Self::assemble(dir, base_offset, log, sizes, trusted)?;
        segment.end_limit = end_limit;
        if trusted {
            segment.size = length;
            segment.flushed = length;
            if !segment.index.is_consistent(length) {
                segment.rebuild_from(i64::MAX)?;
            } else {
                segment.load_tail_metadata()?;
            }
        }
        Ok(segment)
    }

    fn assemble(
        dir: &Path,
        base_offset: i64,
        log: MappedFile,
        sizes: SegmentSizes,
        trust_indexes: bool,
    ) -> io::Result<Self> {
        let index = OffsetIndex::open(
            &index_path(dir, base_offset),
            base_offset,
            sizes.index_bytes,
            trust_indexes,
        )?;
        let time_index = TimeIndex::open(
            &time_index_path(dir, base_offset),
            base_offset,
            sizes.index_bytes,
            trust_indexes,
        )?;
        Ok(Self {
            base_offset,
            dir: dir.to_path_buf(),
            log,
            index,
            time_index,
            size: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            offset_of_max_timestamp: -1,
            bytes_since_index_entry: 0,
            flushed: 0,
            sizes,
            first_append_ms: None,
            end_limit: i64::MAX,
            deleted: false,
        })
    }

    /// After a trusted open: walks from the last index entry to find the log end and
    /// the max timestamp without scanning the whole segment.
    fn load_tail_metadata(&mut self) -> io::Result<()> {
        let last_entry = self.index.inner().len().checked_sub(1);
        let (start_offset, start_position) = match last_entry {
            Some(_) => self.index.lookup(i64::MAX),
            None => (self.base_offset, 0),
        };
        self.next_offset = start_offset;
        let mut position = start_position;
        while let Some((last, max_ts, total)) = self
            .header_at(position)
            .filter(|h| h.base_offset() < self.end_limit)
            .map(|h| (h.last_offset(), h.max_timestamp(), h.total_bytes() as u64))
        {
            self.next_offset = last + 1;
            self.note_timestamp(max_ts, last);
            position += total;
        }
        self.bytes_since_index_entry = position - start_position;
        // The time index holds the running max timestamp.
        if let Some(ts) = self.time_index.last_timestamp() {
            if ts > self.max_timestamp {
                self.max_timestamp = ts;
                self.offset_of_max_timestamp = self.time_index.scan_start(ts + 1);
            }
        }
        if position < self.size && self.ends_at(position) {
            // A truncated tail kept for a reader's sake: the segment ends here.
            self.size = position;
            self.flushed = self.flushed.min(position);
        }
        if position != self.size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "segment {} ends mid-batch at {position} of {}",
                    self.base_offset, self.size
                ),
            ));
        }
        Ok(())
    }

    /// Whether the bytes at `position` end the segment although the file goes on:
    /// zeros (preallocated space, or a truncation's invalidation) or a batch that
    /// belongs to the next segment.
    fn ends_at(&self, position: u64) -> bool {
        let Some(head) = self.log.read_at(position, LOG_OVERHEAD) else {
            return true;
        };
        let mut base = [0u8; 8];
        base.copy_from_slice(&head[..8]);
        let length = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
        length == 0 || i64::from_be_bytes(base) >= self.end_limit
    }

    /// Scans batches from `position`, checking CRCs, re-indexing and truncating the log
    /// at the first invalid batch. Used after an unclean shutdown.
    pub fn recover(&mut self, crc_from_offset: i64) -> io::Result<RecoveryReport> {
        let allocated = self.log.allocated();
        self.rebuild_from(crc_from_offset)?;
        let truncated = allocated - self.size;
        self.log.truncate(self.size)?;
        // What the scan found past the last flush may have been in the page cache of a
        // crashed process only: not durable until the log's next flush syncs it.
        self.flushed = 0;
        Ok(RecoveryReport {
            valid_bytes: self.size,
            truncated_bytes: truncated,
        })
    }

    /// Rebuilds indexes and metadata by walking every batch; batches at or past
    /// `crc_from_offset` (not yet known to be on disk) have their CRC checked. Sets
    /// `size` to the end of the last good batch.
    fn rebuild_from(&mut self, crc_from_offset: i64) -> io::Result<()> {
        self.index.inner_mut().truncate_entries(0);
        self.time_index.inner_mut().truncate_entries(0);
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = -1;
        self.bytes_since_index_entry = 0;
        let limit = self.log.allocated();
        let mut position = 0u64;
        while let Some(length_bytes) = self.log.read_at(position, LOG_OVERHEAD) {
            let length = i32::from_be_bytes([
                length_bytes[8],
                length_bytes[9],
                length_bytes[10],
                length_bytes[11],
            ]);
            if length <= 0 {
                break;
            }
            let total = LOG_OVERHEAD as u64 + length as u64;
            if position + total > limit {
                break;
            }
            let Some(bytes) = self.log.read_at(position, total as usize) else {
                break;
            };
            let Ok(header) = BatchHeader::parse(bytes) else {
                break;
            };
            if header.last_offset() >= crc_from_offset && BatchHeader::parse_checked(bytes).is_err()
            {
                break;
            }
            if header.base_offset() < self.next_offset && position > 0 {
                break; // offsets must grow; anything else is garbage
            }
            if header.base_offset() >= self.end_limit {
                break; // the next segment's offsets: a truncated tail
            }
            let (base, last, max_ts) = (
                header.base_offset(),
                header.last_offset(),
                header.max_timestamp(),
            );
            self.index_batch(base, last, max_ts, position, total)?;
            self.next_offset = last + 1;
            position += total;
        }
        self.size = position;
        Ok(())
    }

    fn header_at(&self, position: u64) -> Option<BatchHeader<'_>> {
        if position + LOG_OVERHEAD as u64 > self.size {
            return None;
        }
        let head = self.log.read_at(position, LOG_OVERHEAD)?;
        let length = i32::from_be_bytes([head[8], head[9], head[10], head[11]]);
        let total = LOG_OVERHEAD as u64 + u64::try_from(length).ok()?;
        if position + total > self.size {
            return None;
        }
        BatchHeader::parse(self.log.read_at(position, total as usize)?).ok()
    }

    fn note_timestamp(&mut self, max_timestamp: i64, last_offset: i64) {
        if max_timestamp > self.max_timestamp {
            self.max_timestamp = max_timestamp;
            self.offset_of_max_timestamp = last_offset;
        }
    }

    fn index_batch(
        &mut self,
        base: i64,
        last: i64,
        max_ts: i64,
        position: u64,
        total: u64,
    ) -> io::Result<()> {
        if position == 0 || self.bytes_since_index_entry >= self.sizes.index_interval_bytes {
            if !self.index.inner().is_full() && !self.time_index.inner().is_full() {
                self.index.append(base, position)?;
                self.time_index
                    .maybe_append(max_ts.max(self.max_timestamp), last)?;
            }
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += total;
        self.note_timestamp(max_ts, last);
        Ok(())
    }

    /// Whether a batch of `bytes` should go to a new segment instead of this one.
    pub fn should_roll(
        &self,
        bytes: u64,
        now_ms: i64,
        segment_bytes: u64,
        segment_ms: i64,
    ) -> bool {
        if self.size == 0 {
            return false;
        }
        // The topic's current segment.bytes, not only the one this segment was created
        // with: a lowered setting (AlterConfigs, a dynamic broker default) takes effect at
        // the next append, as in Kafka.
        let too_big = self.size + bytes > self.sizes.segment_bytes.min(segment_bytes)
            || self.size + bytes > self.log.capacity();
        let too_old = self
            .first_append_ms
            .is_some_and(|first| now_ms - first >= segment_ms);
        // Relative offsets and positions are u32 in the index.
        let offsets_overflow = self.next_offset - self.base_offset > i64::from(u32::MAX) / 2;
        too_big
            || too_old
            || offsets_overflow
            || self.index.inner().is_full()
            || self.time_index.inner().is_full()
    }

    /// Appends one validated batch and rewrites its base offset (and, if given, its
    /// timestamp) in place. Returns the batch's last offset.
    pub fn append(
        &mut self,
        batch: &[u8],
        base_offset: i64,
        leader_epoch: i32,
        log_append_time: Option<i64>,
        now_ms: i64,
    ) -> io::Result<i64> {
        let position = self.size;
        let header = BatchHeader::parse(batch).map_err(io::Error::other)?;
        let total = header.total_bytes() as u64;
        let last = base_offset + i64::from(header.last_offset_delta());
        // The one copy of the batch is the one written here: its header as the log
        // owns it (offsets, epoch, maybe timestamp and CRC), then the records as sent.
        let mut head = [0u8; batch::HEADER_BYTES];
        head.copy_from_slice(&batch[..batch::HEADER_BYTES]);
        let rest = &batch[batch::HEADER_BYTES..header.total_bytes()];
        batch::patch_header(&mut head, rest, base_offset, leader_epoch, log_append_time);
        let max_ts = log_append_time.unwrap_or_else(|| header.max_timestamp());
        self.log.write_at(position, &head)?;
        self.log
            .write_at(position + batch::HEADER_BYTES as u64, rest)?;
        self.committed(base_offset, last, max_ts, position, total, now_ms)
    }

    /// Appends one validated batch exactly as it is (a follower copying its leader's
    /// log: the batch already carries its offsets, epoch and CRC). Returns its last
    /// offset. The caller checked that it starts at [`Segment::next_offset`].
    pub fn append_raw(&mut self, batch: &BatchHeader<'_>, now_ms: i64) -> io::Result<i64> {
        let position = self.size;
        let total = batch.total_bytes() as u64;
        self.log.write_at(position, batch.bytes())?;
        self.committed(
            batch.base_offset(),
            batch.last_offset(),
            batch.max_timestamp(),
            position,
            total,
            now_ms,
        )
    }

    fn committed(
        &mut self,
        base: i64,
        last: i64,
        max_ts: i64,
        position: u64,
        total: u64,
        now_ms: i64,
    ) -> io::Result<i64> {
        self.index_batch(base, last, max_ts, position, total)?;
        self.size += total;
        self.next_offset = last + 1;
        self.first_append_ms.get_or_insert(now_ms);
        Ok(last)
    }

    /// Shortens the segment, logically, to end before the batch holding `offset`
    /// (rounded down to a batch boundary); returns the new end offset. The committed
    /// size, the indexes and the tail metadata go back; the file keeps its length and
    /// its bytes: a view handed out before may still be read (see `Log::truncate_to`).
    pub fn truncate_to(&mut self, offset: i64) -> io::Result<i64> {
        let Some(position) = self.position_of(offset) else {
            return Ok(self.next_offset);
        };
        self.index.truncate_to_position(position);
        let new_end = self
            .header_at(position)
            .map_or(self.next_offset, |h| h.base_offset());
        self.time_index.truncate_to_offset(new_end);
        self.size = position;
        self.flushed = self.flushed.min(position);
        self.max_timestamp = -1;
        self.offset_of_max_timestamp = -1;
        self.load_tail_metadata()?;
        if self.size == 0 {
            self.first_append_ms = None;
        }
        Ok(self.next_offset)
    }

    /// Whether a reader may still hold a view of bytes past the committed size.
    pub fn has_views_past_end(&self) -> bool {
        self.log.has_views_beyond(self.size)
    }

    /// Makes the bytes past the committed size read as zeros (as preallocated space
    /// does), so that a scan at open stops there and truncated batches never come
    /// back — also once new appends have covered part of them. Not a shrink: the file
    /// keeps its length. Only when no view reaches past the committed size
    /// ([`Segment::has_views_past_end`]).
    pub fn invalidate_tail(&mut self) -> io::Result<()> {
        self.log.forget_views_beyond(self.size);
        self.log.zero_from(self.size)
    }

    /// A handle that makes the file's data and length durable (`fsync`), off the lock.
    pub fn file_syncer(&self) -> super::mmap::RangeFlusher {
        self.log.file_syncer()
    }

    /// Position of the first batch whose last offset is `>= offset`, if any.
    pub fn position_of(&self, offset: i64) -> Option<u64> {
        let (_, mut position) = self.index.lookup(offset);
        while let Some(header) = self.header_at(position) {
            if header.last_offset() >= offset {
                return Some(position);
            }
            position += header.total_bytes() as u64;
        }
        None
    }

    /// Whole batches starting with the one that holds `offset`, up to `max_bytes`
    /// (but at least one batch when `min_one`). Zero-copy: a view of the map.
    pub fn read(&self, offset: i64, max_bytes: u64, min_one: bool) -> Option<Bytes> {
        self.read_below(offset, max_bytes, min_one, i64::MAX)
    }

    /// [`Segment::read`] of the batches whose base offset is below `upper` only.
    pub fn read_below(
        &self,
        offset: i64,
        max_bytes: u64,
        min_one: bool,
        upper: i64,
    ) -> Option<Bytes> {
        let start = self.position_of(offset)?;
        let mut end = start;
        while let Some(header) = self.header_at(end).filter(|h| h.base_offset() < upper) {
            let next = end + header.total_bytes() as u64;
            if next - start > max_bytes && !(min_one && end == start) {
                break;
            }
            end = next;
        }
        if end == start {
            return None;
        }
        self.log.slice(start, (end - start) as usize)
    }

    /// First `(offset, timestamp)` with timestamp `>= target`, at batch granularity for
    /// compressed batches (the broker does not decompress) and exact otherwise.
    pub fn offset_for_timestamp(&self, target: i64) -> Option<(i64, i64)> {
        if self.max_timestamp < target {
            return None;
        }
        let start_offset = self.time_index.scan_start(target);
        let mut position = self.position_of(start_offset)?;
        while let Some(header) = self.header_at(position) {
            if header.max_timestamp() >= target {
                if let Some(records) = header.record_timestamps() {
                    if let Some(found) = records.into_iter().find(|&(_, ts)| ts >= target) {
                        return Some(found);
                    }
                }
                return Some((header.base_offset(), header.max_timestamp()));
            }
            position += header.total_bytes() as u64;
        }
        None
    }

    /// `(offset, timestamp)` of the first record carrying the segment's max timestamp:
    /// exact for an uncompressed batch, its last offset for a compressed one.
    pub fn exact_max_timestamp(&self) -> (i64, i64) {
        let (offset, ts) = (self.offset_of_max_timestamp, self.max_timestamp);
        let exact = self
            .position_of(offset)
            .and_then(|position| self.header_at(position))
            .filter(|h| h.max_timestamp() == ts)
            .and_then(|h| h.record_timestamps())
            .and_then(|records| records.into_iter().find(|&(_, t)| t == ts));
        exact.unwrap_or((offset, ts))
    }

    /// Walks every batch header, oldest first (for producer-state rebuild).
    pub fn for_each_batch_from(&self, offset: i64, mut f: impl FnMut(&BatchHeader<'_>)) {
        let Some(mut position) = self.position_of(offset) else {
            return;
        };
        while let Some(header) = self.header_at(position) {
            f(&header);
            position += header.total_bytes() as u64;
        }
    }

    /// What must be synced (`fdatasync` of the data, `msync` of the index maps) to make
    /// everything appended so far durable; run it off the lock, then report back with
    /// [`Segment::mark_flushed`].
    pub fn flush_plan(&self) -> Option<(u64, Vec<super::mmap::RangeFlusher>)> {
        if self.size <= self.flushed {
            return None;
        }
        Some((
            self.size,
            vec![
                self.log
                    .range_flusher(self.flushed, self.size - self.flushed),
                self.index.inner().flusher(),
                self.time_index.inner().flusher(),
            ],
        ))
    }

    pub fn mark_flushed(&mut self, up_to: u64) {
        self.flushed = self.flushed.max(up_to.min(self.size));
    }

    /// Writes everything appended so far to disk. Returns bytes newly flushed.
    pub fn flush(&mut self) -> io::Result<u64> {
        let (from, to) = (self.flushed, self.size);
        if to > from {
            self.log.flush_range(from, to - from)?;
            self.index.inner().flush()?;
            self.time_index.inner().flush()?;
            self.flushed = to;
        }
        Ok(to - from)
    }

    /// Trims the files of a segment that takes no more appends to their contents,
    /// without waiting for the disk (`ftruncate` only). Returns the syncs that make the
    /// trimmed length durable; the log runs them with its next flush, off its lock, so
    /// that a roll does not stall every producer of the partition for several fsyncs.
    ///
    /// The file is not shortened below a view that may still be alive (after a
    /// truncation under a reader): its stale tail stays, bounded at the next open by
    /// the next segment's base offset.
    pub fn retire(&mut self) -> io::Result<Vec<super::mmap::RangeFlusher>> {
        self.log.truncate(self.size)?;
        self.index.inner_mut().seal()?;
        self.time_index.inner_mut().seal()?;
        Ok(vec![self.log.file_syncer()])
    }

    /// Trims the files to their contents and flushes them: the segment is now read-only.
    pub fn seal(&mut self) -> io::Result<()> {
        self.flush()?;
        self.log.truncate(self.size)?;
        // Kept longer for a live view? Nothing bounds the last segment at open.
        self.log.zero_from(self.size)?;
        self.index.inner_mut().seal()?;
        self.time_index.inner_mut().seal()?;
        self.log.sync_all()
    }

    fn paths(&self) -> [PathBuf; 3] {
        [
            log_path(&self.dir, self.base_offset),
            index_path(&self.dir, self.base_offset),
            time_index_path(&self.dir, self.base_offset),
        ]
    }

    /// Renames the segment's files to `*.deleted` (a rename, not an unlink: quick, and
    /// safe under live maps), so that a crash before [`Segment::delete_files`] cannot
    /// bring a segment taken out by a truncation back into the log.
    pub fn mark_deleted(&mut self) -> io::Result<()> {
        if self.deleted {
            return Ok(());
        }
        for path in self.paths() {
            match std::fs::rename(&path, deleted_path(&path)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        self.deleted = true;
        Ok(())
    }

    /// Removes the segment's files. Readers holding `Bytes` keep the mapping alive.
    pub fn delete_files(&self) -> io::Result<()> {
        for mut path in self.paths() {
            if self.deleted {
                path = deleted_path(&path);
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }
    pub fn size(&self) -> u64 {
        self.size
    }
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }
    pub fn unflushed_bytes(&self) -> u64 {
        self.size - self.flushed
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp
    }
    /// The first batch's max timestamp: when the segment's data began.
    pub fn first_timestamp(&self) -> Option<i64> {
        self.header_at(0).map(|h| h.max_timestamp())
    }
    pub fn offset_of_max_timestamp(&self) -> i64 {
        self.offset_of_max_timestamp
    }
    /// Most bytes the segment's mapping can hold.
    pub fn capacity(&self) -> u64 {
        self.log.capacity()
    }
    pub fn index_entries(&self) -> usize {
        self.index.inner().len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::records::testing::simple_batch;
    use super::*;

    fn sizes() -> SegmentSizes {
        SegmentSizes {
            segment_bytes: 1 << 20,
            index_bytes: 4096,
            index_interval_bytes: 256,
        }
    }

    #[test]
    fn append_read_and_index() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut segment = Segment::create(dir.path(), 0, sizes())?;
        let mut offset = 0;
        for _ in 0..50 {
            let batch = simple_batch(3, 1_000 + offset);
            offset = segment.append(&batch, offset, 0, None, 0)? + 1;
        }
        assert_eq!(segment.next_offset(), 150);
        assert!(segment.index_entries() > 5, "sparse index has entries");
        // An offset inside a batch returns that whole batch.
        let bytes = segment.read(4, 1, true).expect("data");
        let header = BatchHeader::parse_checked(&bytes).expect("valid");
        assert_eq!((header.base_offset(), header.last_offset()), (3, 5));
        assert_eq!(
            bytes.len(),
            header.total_bytes(),
            "max_bytes 1 still gives one batch"
        );
        assert!(segment.read(150, 1 << 20, true).is_none());
        assert_eq!(
            segment.offset_for_timestamp(1_000 + 30 + 1),
            Some((31, 1_031))
        );
        Ok(())
    }

    #[test]
    fn sealed_segment_reopens_trusted() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut segment = Segment::create(dir.path(), 10, sizes())?;
        segment.append(&simple_batch(2, 5), 10, 0, None, 0)?;
        segment.append(&simple_batch(2, 9), 12, 0, None, 0)?;
        segment.seal()?;
        let size = segment.size();
        drop(segment);
        let reopened = Segment::open(dir.path(), 10, sizes(), true)?;
        assert_eq!((reopened.size(), reopened.next_offset()), (size, 14));
        assert_eq!(reopened.max_timestamp(), 10);
        Ok(())
    }

    #[test]
    fn recovery_truncates_a_torn_tail() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut segment = Segment::create(dir.path(), 0, sizes())?;
        segment.append(&simple_batch(2, 0), 0, 0, None, 0)?;
        let good = segment.size();
        let batch = simple_batch(2, 0);
        segment.append(&batch, 2, 0, None, 0)?;
        drop(segment);
        // Tear the second batch: keep only half of it on disk.
        let file = OpenOptions::new()
            .write(true)
            .open(log_path(dir.path(), 0))?;
        file.set_len(good + batch.len() as u64 / 2)?;
        let mut reopened = Segment::open(dir.path(), 0, sizes(), false)?;
        let report = reopened.recover(0)?;
        assert_eq!(report.valid_bytes, good);
        assert_eq!(reopened.next_offset(), 2);
        assert_eq!(std::fs::metadata(log_path(dir.path(), 0))?.len(), good);
        Ok(())
    }

    #[test]
    fn recovery_stops_at_a_flipped_byte() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut segment = Segment::create(dir.path(), 0, sizes())?;
        for i in 0..4 {
            segment.append(&simple_batch(1, 0), i, 0, None, 0)?;
        }
        let one = simple_batch(1, 0).len() as u64;
        drop(segment);
        let path = log_path(dir.path(), 0);
        let mut raw = std::fs::read(&path)?;
        raw[(2 * one + 70) as usize] ^= 0x01; // inside the third batch's records
        std::fs::write(&path, raw)?;
        let mut reopened = Segment::open(dir.path(), 0, sizes(), false)?;
        reopened.recover(0)?;
        assert_eq!(
            reopened.next_offset(),
            2,
            "kept only the batches before the corrupt one"
        );
        assert_eq!(reopened.size(), 2 * one);
        Ok(())
    }
}
