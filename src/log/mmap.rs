//! Memory-mapped files: the only module of the log that uses `unsafe`.
//!
//! A [`MappedFile`] maps a whole segment-sized range of a file up front but backs it
//! with disk blocks (`posix_fallocate`) only as far as writes have reached, in chunks.
//! Writing into a mapped page that has no block behind it raises SIGBUS when the disk
//! is full; allocating ahead turns that into an `io::Error` at a point we can handle.
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use bytes::Bytes;
use memmap2::{MmapOptions, MmapRaw};

/// How far ahead of the write position disk blocks are allocated: large enough that
/// `posix_fallocate` is rare, small enough that idle partitions don't hoard disk.
const ALLOCATE_CHUNK_BYTES: u64 = 4 * 1024 * 1024;

/// A file mapped read-write with `MAP_SHARED`: writes land in the page cache and
/// survive a crash of the process (not of the machine) without any flush.
#[derive(Debug)]
pub struct MappedFile {
    file: File,
    map: Arc<MmapRaw>,
    /// Bytes of the mapping (the most the file may ever hold while mapped).
    capacity: u64,
    /// Bytes of the file backed by allocated blocks; writes stay below this.
    allocated: u64,
}

impl MappedFile {
    /// Maps `capacity` bytes of `file`, whose current length is kept as the allocated size.
    pub fn new(file: File, capacity: u64) -> io::Result<Self> {
        let allocated = file.metadata()?.len();
        let capacity = capacity.max(allocated).max(1);
        let len = usize::try_from(capacity)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "mapping too large"))?;
        let map = MmapOptions::new().len(len).map_raw(&file)?;
        Ok(Self {
            file,
            map: Arc::new(map),
            capacity,
            allocated,
        })
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
        let start = usize::try_from(position).map_err(io::Error::other)?;
        // SAFETY: `[start, start + len)` lies inside the mapping (checked by
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
        Some(Bytes::from_owner(MapSlice {
            map: Arc::clone(&self.map),
            start,
            end,
        }))
    }

    /// Writes `[position, position + len)` back to disk (`msync(MS_SYNC)`).
    pub fn flush_range(&self, position: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let start = usize::try_from(position).map_err(io::Error::other)?;
        let len = usize::try_from(len).map_err(io::Error::other)?;
        self.map.flush_range(start, len)
    }

    /// A handle that can `msync` `[position, position + len)` without borrowing `self`,
    /// so a flush can run off the partition lock (see `Log::flush_plan`).
    pub fn range_flusher(&self, position: u64, len: u64) -> RangeFlusher {
        RangeFlusher {
            map: Arc::clone(&self.map),
            position,
            len,
        }
    }

    /// Shrinks the file to `len` bytes, releasing preallocated blocks past it.
    ///
    /// The mapping stays as large as before; nothing may read past `len` afterwards.
    pub fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.file.set_len(len)?;
        self.allocated = len;
        Ok(())
    }

    /// Flushes file metadata (length) as well as data.
    pub fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }
}

/// A pending `msync` of part of a mapping; see [`MappedFile::range_flusher`].
#[derive(Debug, Clone)]
pub struct RangeFlusher {
    map: Arc<MmapRaw>,
    position: u64,
    len: u64,
}

impl RangeFlusher {
    pub fn flush(&self) -> io::Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let start = usize::try_from(self.position).map_err(io::Error::other)?;
        let len = usize::try_from(self.len).map_err(io::Error::other)?;
        self.map.flush_range(start, len)
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
        // it made this owner; the mapping lives as long as `self.map`, and the log
        // never rewrites or truncates bytes below the committed end it handed out.
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
        let mut map = MappedFile::new(file, 1 << 20)?;
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
}
