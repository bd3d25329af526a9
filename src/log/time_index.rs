//! Sparse time index of a segment: `(max timestamp so far: i64, relative offset: u32)`.
//!
//! An entry is added with an offset-index entry when the segment's max timestamp has
//! grown since the last one, so timestamps in the file never decrease. To find the
//! first offset with a timestamp `>= t`, take the last entry with timestamp `< t` and
//! scan the log from its offset: everything before it is known to be older.

use std::io;
use std::path::Path;

use super::index::IndexFile;

pub const TIME_ENTRY_BYTES: usize = 12;

#[derive(Debug)]
pub struct TimeIndex {
    file: IndexFile,
    base_offset: i64,
}

impl TimeIndex {
    pub fn open(path: &Path, base_offset: i64, max_bytes: u64, trust: bool) -> io::Result<Self> {
        Ok(Self {
            file: IndexFile::open(path, TIME_ENTRY_BYTES, max_bytes, trust)?,
            base_offset,
        })
    }

    fn decode(entry: &[u8]) -> (i64, u32) {
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&entry[..8]);
        (
            i64::from_be_bytes(ts),
            u32::from_be_bytes([entry[8], entry[9], entry[10], entry[11]]),
        )
    }

    /// The last entry's timestamp, if any.
    pub fn last_timestamp(&self) -> Option<i64> {
        let n = self.file.len();
        n.checked_sub(1)
            .and_then(|i| self.file.entry(i))
            .map(|e| Self::decode(e).0)
    }

    /// Adds `(timestamp, offset)` if `timestamp` is newer than the last entry.
    pub fn maybe_append(&mut self, timestamp: i64, offset: i64) -> io::Result<()> {
        if self.last_timestamp().is_some_and(|last| timestamp <= last) {
            return Ok(());
        }
        let relative = u32::try_from(offset - self.base_offset).map_err(io::Error::other)?;
        let mut entry = [0u8; TIME_ENTRY_BYTES];
        entry[..8].copy_from_slice(&timestamp.to_be_bytes());
        entry[8..].copy_from_slice(&relative.to_be_bytes());
        self.file.append(&entry)
    }

    /// Drops the entries of batches at or past `offset` (a log truncation).
    pub fn truncate_to_offset(&mut self, offset: i64) {
        let relative = offset - self.base_offset;
        let mut keep = self.file.len();
        while keep > 0
            && self
                .file
                .entry(keep - 1)
                .is_some_and(|e| i64::from(Self::decode(e).1) >= relative)
        {
            keep -= 1;
        }
        self.file.truncate_entries(keep);
    }

    /// An offset from which a scan finds the first batch with max timestamp `>= target`.
    pub fn scan_start(&self, target: i64) -> i64 {
        match self.file.floor(target - 1, |e| Self::decode(e).0) {
            Some(i) => self
                .file
                .entry(i)
                .map(|e| self.base_offset + i64::from(Self::decode(e).1))
                .unwrap_or(self.base_offset),
            None => self.base_offset,
        }
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
    fn keeps_timestamps_increasing_and_finds_scan_start() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut index = TimeIndex::open(&dir.path().join("t"), 50, 1200, false)?;
        index.maybe_append(1_000, 50)?;
        index.maybe_append(900, 60)?; // older: skipped
        index.maybe_append(2_000, 70)?;
        assert_eq!(index.inner().len(), 2);
        assert_eq!(index.scan_start(500), 50);
        assert_eq!(index.scan_start(1_000), 50);
        assert_eq!(index.scan_start(1_500), 50);
        assert_eq!(index.scan_start(2_500), 70);
        index.truncate_to_offset(70);
        assert_eq!(index.last_timestamp(), Some(1_000));
        index.truncate_to_offset(50);
        assert_eq!(index.last_timestamp(), None);
        Ok(())
    }
}
