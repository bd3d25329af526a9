//! Sparse, memory-mapped indexes of a segment: fixed-width entries appended in order.
//!
//! The offset index maps a batch's offset (relative to the segment base) to its byte
//! position in the `.log` file; one entry is added every `index.interval.bytes` of
//! log. Example, a segment based at 1000: entry `(0x0000002a, 0x00001000)` says the
//! batch with base offset 1042 starts at byte 4096 of `00000000000000001000.log`.
//! A lookup finds the last entry at or below the target and the log is scanned from
//! there, so an entry never has to point at the exact batch wanted.

use std::fs::OpenOptions;
use std::io;
use std::path::{Path, PathBuf};

use super::mmap::{MappedFile, WriteMode};

/// A file of fixed-width entries, mapped up to `max_bytes` and appended in order.
#[derive(Debug)]
pub struct IndexFile {
    path: PathBuf,
    file: MappedFile,
    entry_bytes: usize,
    entries: usize,
    max_entries: usize,
}

impl IndexFile {
    /// Opens (or creates) an index. With `trust_length`, the file length says how many
    /// entries it holds (a sealed or cleanly closed index); otherwise it starts empty
    /// and the caller rebuilds it from the log.
    pub fn open(
        path: &Path,
        entry_bytes: usize,
        max_bytes: u64,
        trust_length: bool,
    ) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let length = file.metadata()?.len();
        let max_entries = (max_bytes as usize / entry_bytes).max(2);
        let capacity = (max_entries * entry_bytes) as u64;
        let mut mapped = MappedFile::new(file, capacity.max(length), WriteMode::Map)?;
        let entries = if trust_length && length % entry_bytes as u64 == 0 {
            (length / entry_bytes as u64) as usize
        } else {
            mapped.truncate(0)?;
            0
        };
        Ok(Self {
            path: path.to_path_buf(),
            file: mapped,
            entry_bytes,
            entries,
            max_entries: max_entries.max(entries),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn len(&self) -> usize {
        self.entries
    }
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
    pub fn is_full(&self) -> bool {
        self.entries >= self.max_entries
    }

    pub fn entry(&self, i: usize) -> Option<&[u8]> {
        if i >= self.entries {
            return None;
        }
        self.file
            .read_at((i * self.entry_bytes) as u64, self.entry_bytes)
    }

    pub fn append(&mut self, entry: &[u8]) -> io::Result<()> {
        debug_assert_eq!(entry.len(), self.entry_bytes);
        if self.is_full() {
            return Err(io::Error::other("index is full"));
        }
        self.file
            .write_at((self.entries * self.entry_bytes) as u64, entry)?;
        self.entries += 1;
        Ok(())
    }

    /// Drops entries from `keep` on.
    pub fn truncate_entries(&mut self, keep: usize) {
        self.entries = self.entries.min(keep);
    }

    /// Shrinks the file to exactly its entries, so its length is trusted on reopen.
    pub fn seal(&mut self) -> io::Result<()> {
        self.file.truncate((self.entries * self.entry_bytes) as u64)
    }

    pub fn flusher(&self) -> super::mmap::RangeFlusher {
        self.file
            .range_flusher(0, (self.entries * self.entry_bytes) as u64)
    }

    pub fn flush(&self) -> io::Result<()> {
        self.file
            .flush_range(0, (self.entries * self.entry_bytes) as u64)
    }

    /// Index of the last entry whose key (as read by `key`) is `<= target`.
    pub fn floor(&self, target: i64, key: impl Fn(&[u8]) -> i64) -> Option<usize> {
        let (mut lo, mut hi) = (0usize, self.entries);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let k = self.entry(mid).map(&key).unwrap_or(i64::MAX);
            if k <= target {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }
}

/// Offset index entry: relative offset (u32) and file position (u32), big-endian.
#[derive(Debug)]
pub struct OffsetIndex {
    file: IndexFile,
    base_offset: i64,
}

pub const OFFSET_ENTRY_BYTES: usize = 8;

impl OffsetIndex {
    pub fn open(path: &Path, base_offset: i64, max_bytes: u64, trust: bool) -> io::Result<Self> {
        Ok(Self {
            file: IndexFile::open(path, OFFSET_ENTRY_BYTES, max_bytes, trust)?,
            base_offset,
        })
    }

    fn decode(entry: &[u8]) -> (u32, u32) {
        (
            u32::from_be_bytes([entry[0], entry[1], entry[2], entry[3]]),
            u32::from_be_bytes([entry[4], entry[5], entry[6], entry[7]]),
        )
    }

    /// Records that the batch with base `offset` starts at byte `position`.
    pub fn append(&mut self, offset: i64, position: u64) -> io::Result<()> {
        let relative = u32::try_from(offset - self.base_offset).map_err(io::Error::other)?;
        let position = u32::try_from(position).map_err(io::Error::other)?;
        let mut entry = [0u8; OFFSET_ENTRY_BYTES];
        entry[..4].copy_from_slice(&relative.to_be_bytes());
        entry[4..].copy_from_slice(&position.to_be_bytes());
        self.file.append(&entry)
    }

    /// The last indexed `(offset, position)` at or below `offset`, or the segment start.
    pub fn lookup(&self, offset: i64) -> (i64, u64) {
        let target = offset - self.base_offset;
        match self.file.floor(target, |e| i64::from(Self::decode(e).0)) {
            Some(i) => {
                let (relative, position) = self.file.entry(i).map(Self::decode).unwrap_or((0, 0));
                (self.base_offset + i64::from(relative), u64::from(position))
            }
            None => (self.base_offset, 0),
        }
    }

    /// Drops the entries of batches at or past byte `position` (a log truncation).
    pub fn truncate_to_position(&mut self, position: u64) {
        let keep = self
            .file
            .floor(position as i64 - 1, |e| i64::from(Self::decode(e).1))
            .map_or(0, |i| i + 1);
        self.file.truncate_entries(keep);
    }

    /// Checks entries are increasing and point inside a log of `log_bytes`.
    pub fn is_consistent(&self, log_bytes: u64) -> bool {
        let mut previous: Option<(u32, u32)> = None;
        for i in 0..self.file.len() {
            let Some(entry) = self.file.entry(i).map(Self::decode) else {
                return false;
            };
            if u64::from(entry.1) >= log_bytes.max(1) {
                return false;
            }
            if let Some(p) = previous {
                if entry.0 <= p.0 || entry.1 <= p.1 {
                    return false;
                }
            }
            previous = Some(entry);
        }
        true
    }

    pub fn inner(&self) -> &IndexFile {
        &self.file
    }
    pub fn inner_mut(&mut self) -> &mut IndexFile {
        &mut self.file
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_finds_the_floor_entry() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut index = OffsetIndex::open(&dir.path().join("i"), 100, 1024, false)?;
        assert_eq!(index.lookup(150), (100, 0));
        index.append(110, 4096)?;
        index.append(130, 8192)?;
        assert_eq!(index.lookup(105), (100, 0));
        assert_eq!(index.lookup(110), (110, 4096));
        assert_eq!(index.lookup(129), (110, 4096));
        assert_eq!(index.lookup(1_000), (130, 8192));
        assert!(index.is_consistent(10_000));
        assert!(!index.is_consistent(5_000), "entry points past the log");
        index.truncate_to_position(8192);
        assert_eq!(index.inner().len(), 1, "the entry at the cut goes");
        assert_eq!(index.lookup(1_000), (110, 4096));
        index.truncate_to_position(4097);
        assert_eq!(index.inner().len(), 1);
        index.truncate_to_position(0);
        assert!(index.inner().is_empty());
        Ok(())
    }

    #[test]
    fn sealed_index_reopens_with_its_entries() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("i");
        let mut index = OffsetIndex::open(&path, 0, 1024, false)?;
        index.append(5, 100)?;
        index.append(9, 200)?;
        index.inner_mut().seal()?;
        drop(index);
        let reopened = OffsetIndex::open(&path, 0, 1024, true)?;
        assert_eq!(reopened.inner().len(), 2);
        assert_eq!(reopened.lookup(9), (9, 200));
        let untrusted = OffsetIndex::open(&path, 0, 1024, false)?;
        assert_eq!(
            untrusted.inner().len(),
            0,
            "an untrusted index starts empty"
        );
        Ok(())
    }

    #[test]
    fn a_full_index_refuses_appends() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut index = OffsetIndex::open(&dir.path().join("i"), 0, 16, false)?;
        index.append(1, 10)?;
        index.append(2, 20)?;
        assert!(index.inner().is_full());
        assert!(index.append(3, 30).is_err());
        Ok(())
    }
}
