//! Memory-mapped files: the only module of the log that uses `unsafe`.
//!
//! A [`MappedFile`] maps a whole segment-sized range of a file up front but backs it
//! with disk blocks (`posix_fallocate`) only as far as writes have reached, in chunks.
//! Touching a mapped page that has no block behind it raises SIGBUS when the disk is
//! full; allocating ahead turns that into an `io::Error` at a point we can handle.
//!
//! Two write modes ([`WriteMode`]). Indexes write through their (small) maps. Segment
//! data is written with `pwrite` into the page cache, and mapped read-only: it is the
//! same single copy into the same pages that readers then see through the map, but
//! when writeback cleans a page that a *writable* shared map has dirtied, the kernel
//! must write-protect it and flush every CPU's TLB, page by page. Measured with perf
//! under acks=all load, that was about 30% of the broker's CPU; read-only mappings
//! have nothing to write-protect.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{MmapOptions, MmapRaw};

use crate::limits::SEGMENT_ALLOCATE_CHUNK_BYTES as ALLOCATE_CHUNK_BYTES;

/// How bytes get into a [`MappedFile`]; either way they land in the page cache and
/// survive a crash of the process (not of the machine) without any flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// `memcpy` into a writable `MAP_SHARED` mapping (small, rarely flushed files).
    Map,
    /// `pwrite` to the file; the mapping is read-only (segment data).
    File,
}

/// A file with a `MAP_SHARED` mapping of its whole capacity.
#[derive(Debug)]
pub struct MappedFile {
    file: Arc<File>,
    map: Arc<MmapRaw>,
    mode: WriteMode,
    /// Bytes of the mapping (the most the file may ever hold while mapped).
    capacity: u64,
    /// Bytes of the file backed by allocated blocks; writes stay below this.
    allocated: u64,
    /// The furthest end of any view [`MappedFile::slice`] handed out. While a view may
    /// be alive, the file is never shortened below it (SIGBUS) and a log truncation
    /// does not rewrite bytes below it.
    exposed: AtomicU64,
}

impl MappedFile {
    /// Maps `capacity` bytes of `file`, whose current length is kept as the allocated size.
    pub fn new(file: File, capacity: u64, mode: WriteMode) -> io::Result<Self> {
        let allocated = file.metadata()?.len();
        let capacity = capacity.max(allocated).max(1);
        let len = usize::try_from(capacity)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        let map = match mode {
            WriteMode::Map => MmapOptions::new().len(len).map_raw(&file)?,
            WriteMode::File => MmapOptions::new().len(len).map_raw_read_only(&file)?,
        };
        Ok(Self {
            file: Arc::new(file),
            map: Arc::new(map),
            mode,
            capacity,
            allocated,
            exposed: AtomicU64::new(0),
        })
    }

    /// Whether a view handed out by [`MappedFile::slice`] may still be alive and reach
    /// past `position`. Exact about "none alive": every view holds a reference to the
    /// map, so with none left only this file holds it (and no view can be made without
    /// `&self`, which a caller holding `&mut self` excludes).
    pub fn has_views_beyond(&self, position: u64) -> bool {
        Arc::strong_count(&self.map) > 1 && self.exposed.load(Ordering::Relaxed) > position
    }

    /// Forgets views that reached past `position` once none is alive any more.
    pub fn forget_views_beyond(&mut self, position: u64) {
        if Arc::strong_count(&self.map) == 1 {
            let exposed = self.exposed.get_mut();
            *exposed = (*exposed).min(position);
        }
    }

    /// Bytes the mapping can hold.
    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// The file length: bytes that may be read without SIGBUS.
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Makes sure disk blocks back `[0, end)`, growing the file in chunks.
    fn ensure_allocated(&mut self, end: u64) -> io::Result<()> {
        if end <= self.allocated {
            return Ok(());
        }
        if end > self.capacity {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("write to {end} past mapping capacity {}", self.capacity),
            ));
        }
        // Grow by a chunk, or by an eighth of the mapping for small ones (indexes).
        let chunk = ALLOCATE_CHUNK_BYTES.min((self.capacity / 8).max(4096));
        let target = (end + chunk).min(self.capacity);
        let offset = libc::off_t::try_from(self.allocated).map_err(io::Error::other)?;
        let len = libc::off_t::try_from(target - self.allocated).map_err(io::Error::other)?;
        // SAFETY: a plain syscall on a descriptor we own; no memory is passed.
        let rc = unsafe { libc::posix_fallocate(self.file.as_raw_fd(), offset, len) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        self.allocated = target;
        Ok(())
    }

    /// Copies `data` into the file at `position`.
    ///
    /// Callers serialise writes (one writer per partition) and never write a range
    /// that a reader was handed by [`MappedFile::slice`].
    pub fn write_at(&mut self, position: u64, data: &[u8]) -> io::Result<()> {
        let end = position + data.len() as u64;
        self.ensure_allocated(end)?;
        if self.mode == WriteMode::File {
            use std::os::unix::fs::FileExt;
            return self.file.write_all_at(data, position);
        }
        let start = usize::try_from(position).map_err(io::Error::other)?;
        // SAFETY: `[start, start + len)` lies inside the writable mapping (checked by
        // `ensure_allocated` against `capacity`) and is backed by allocated blocks.
        // Readers only ever see ranges below the committed end, which the writer
        // never touches again, so no `&[u8]` aliases the bytes written here.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.map.as_mut_ptr().add(start),
                data.len(),
            );
        }
        Ok(())
    }

    /// Makes `[position, file length)` read as zeros without changing the file's
    /// length (so no map view past it can fault): `fallocate(ZERO_RANGE)`, which keeps
    /// the blocks allocated, else a punched hole, else written zeros. A metadata
    /// operation on most file systems, not a copy. Callers make sure no live view
    /// covers the range (see [`MappedFile::has_views_beyond`]).
    pub fn zero_from(&mut self, position: u64) -> io::Result<()> {
        if position >= self.allocated {
            return Ok(());
        }
        let offset = libc::off_t::try_from(position).map_err(io::Error::other)?;
        let len = libc::off_t::try_from(self.allocated - position).map_err(io::Error::other)?;
        for mode in [
            libc::FALLOC_FL_ZERO_RANGE,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
        ] {
            // SAFETY: a plain syscall on a descriptor we own; no memory is passed.
            if unsafe { libc::fallocate(self.file.as_raw_fd(), mode, offset, len) } == 0 {
                return Ok(());
            }
        }
        use std::os::unix::fs::FileExt;
        let zeros = vec![0u8; 64 << 10];
        let mut at = position;
        while at < self.allocated {
            let n = (self.allocated - at).min(zeros.len() as u64) as usize;
            self.file.write_all_at(&zeros[..n], at)?;
            at += n as u64;
        }
        Ok(())
    }

    /// Borrows `len` bytes at `position`, or `None` past the file length.
    pub fn read_at(&self, position: u64, len: usize) -> Option<&[u8]> {
        let start = usize::try_from(position).ok()?;
        let end = start.checked_add(len)?;
        if end as u64 > self.allocated {
            return None;
        }
        // SAFETY: `[start, end)` is inside the mapping and below the file length, and
        // no writer touches bytes that were already written (see `write_at`).
        Some(unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start), len) })
    }

    /// A zero-copy view of `[position, position + len)` that keeps the mapping alive.
    pub fn slice(&self, position: u64, len: usize) -> Option<Bytes> {
        let start = usize::try_from(position).ok()?;
        let end = start.checked_add(len)?;
        if end as u64 > self.allocated {
            return None;
        }
        self.exposed.fetch_max(end as u64, Ordering::Relaxed);
        Some(Bytes::from_owner(MapSlice {
            map: Arc::clone(&self.map),
            start,
            end,
        }))
    }

    /// Writes `[position, position + len)` back to disk.
    pub fn flush_range(&self, position: u64, len: u64) -> io::Result<()> {
        self.range_flusher(position, len).flush()
    }

    /// A handle that can `msync` `[position, position + len)` without borrowing `self`,
    /// so a flush can run off the partition lock (see `Log::flush_plan`).
    pub fn range_flusher(&self, position: u64, len: u64) -> RangeFlusher {
        let target = match self.mode {
            WriteMode::Map => FlushTarget::Map(Arc::clone(&self.map)),
            WriteMode::File => FlushTarget::File(Arc::clone(&self.file)),
        };
        RangeFlusher {
            target,
            position,
            len,
        }
    }

    /// Shrinks the file to `len` bytes, releasing preallocated blocks past it — but
    /// never below the end of a view that may still be alive: touching a mapped page
    /// past the end of its file raises SIGBUS. [`MappedFile::allocated`] tells the
    /// length the file got.
    ///
    /// The mapping stays as large as before; nothing may read past `len` afterwards.
    pub fn truncate(&mut self, len: u64) -> io::Result<()> {
        let floor = if Arc::strong_count(&self.map) > 1 {
            self.exposed.load(Ordering::Relaxed)
        } else {
            0
        };
        let len = len.max(floor.min(self.allocated));
        self.file.set_len(len)?;
        self.allocated = len;
        Ok(())
    }

    /// Flushes file metadata (length) as well as data.
    pub fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    /// A handle that makes the file's data *and* length durable (`fsync`) without
    /// borrowing `self`: what a truncated (sealed) file needs before it can be trusted.
    pub fn file_syncer(&self) -> RangeFlusher {
        RangeFlusher {
            target: FlushTarget::WholeFile(Arc::clone(&self.file)),
            position: 0,
            len: 0,
        }
    }
}

#[derive(Debug, Clone)]
enum FlushTarget {
    Map(Arc<MmapRaw>),
    File(Arc<File>),
    /// `fsync`: data and metadata, whatever the range.
    WholeFile(Arc<File>),
}

/// A pending flush of part of a file; see [`MappedFile::range_flusher`].
#[derive(Debug, Clone)]
pub struct RangeFlusher {
    target: FlushTarget,
    position: u64,
    len: u64,
}

impl RangeFlusher {
    /// `msync(MS_SYNC)` of the range for a written-through map; `fdatasync` for a file
    /// written with `pwrite` (which also covers any earlier unflushed bytes); `fsync`
    /// for a [`MappedFile::file_syncer`].
    pub fn flush(&self) -> io::Result<()> {
        if let FlushTarget::WholeFile(file) = &self.target {
            return file.sync_all();
        }
        if self.len == 0 {
            return Ok(());
        }
        match &self.target {
            FlushTarget::WholeFile(file) => file.sync_all(),
            FlushTarget::Map(map) => {
                let start = usize::try_from(self.position).map_err(io::Error::other)?;
                let len = usize::try_from(self.len).map_err(io::Error::other)?;
                map.flush_range(start, len)
            }
            FlushTarget::File(file) => file.sync_data(),
        }
    }
}

/// Owner of a slice of a mapping, so that a `Bytes` can point into it.
struct MapSlice {
    map: Arc<MmapRaw>,
    start: usize,
    end: usize,
}

impl AsRef<[u8]> for MapSlice {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `MappedFile::slice` checked the range against the file length when
        // it made this owner; the mapping lives as long as `self.map`; the file is
        // never shortened below a live view (`truncate`), and the log never rewrites
        // bytes a live view covers (a log truncation checks `has_views_beyond`).
        unsafe {
            std::slice::from_raw_parts(self.map.as_ptr().add(self.start), self.end - self.start)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_slice_round_trips_and_grows_the_file() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))?;
        let mut map = MappedFile::new(file, 1 << 20, WriteMode::Map)?;
        assert_eq!(map.allocated(), 0);
        map.write_at(0, b"hello")?;
        map.write_at(5, b" world")?;
        assert!(map.allocated() >= 11);
        assert_eq!(map.slice(0, 11).as_deref(), Some(&b"hello world"[..]));
        assert!(
            map.write_at((1 << 20) - 2, b"xyz").is_err(),
            "past capacity"
        );
        map.truncate(11)?;
        assert_eq!(std::fs::metadata(dir.path().join("f"))?.len(), 11);
        assert!(map.slice(5, 7).is_none());
        Ok(())
    }

    #[test]
    fn views_are_tracked_and_keep_the_file_from_shrinking_under_them() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("f");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)?;
        let mut map = MappedFile::new(file, 1 << 20, WriteMode::File)?;
        map.write_at(0, &[7u8; 10_000])?;
        let view = map.slice(4_000, 4_000).ok_or(io::Error::other("no view"))?;
        assert!(map.has_views_beyond(7_999) && !map.has_views_beyond(8_000));
        map.truncate(5_000)?;
        assert_eq!(std::fs::metadata(&path)?.len(), 8_000, "kept for the view");
        assert!(view.iter().all(|&b| b == 7));
        drop(view);
        assert!(!map.has_views_beyond(0));
        map.zero_from(6_000)?;
        assert_eq!(
            std::fs::metadata(&path)?.len(),
            8_000,
            "zeroing keeps the length"
        );
        assert_eq!(map.read_at(5_999, 2), Some(&[7u8, 0][..]));
        map.truncate(5_000)?;
        assert_eq!(std::fs::metadata(&path)?.len(), 5_000, "no view: trimmed");
        Ok(())
    }

    #[test]
    fn pwrite_mode_is_visible_through_the_read_only_map() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("f"))?;
        let mut map = MappedFile::new(file, 1 << 20, WriteMode::File)?;
        map.write_at(0, b"abc")?;
        map.write_at(3, b"def")?;
        assert_eq!(map.read_at(1, 4), Some(&b"bcde"[..]));
        map.flush_range(0, 6)?;
        Ok(())
    }
}
