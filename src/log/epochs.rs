//! The leader-epoch cache of one log: which leader epoch started at which offset, as
//! Kafka's `LeaderEpochFileCache` keeps it (KIP-101). A follower asks its leader for
//! the end offset of its latest epoch (OffsetForLeaderEpoch) and truncates where the
//! two histories part; a leader answers from this cache.
//!
//! Kept in `leader-epoch-checkpoint` in the log directory, in Kafka's text format so
//! that Kafka's own tools can read it:
//!
//! ```text
//! 0          version
//! 2          number of entries
//! 0 0        epoch start-offset
//! 3 1042
//! ```
//!
//! The cache itself does no I/O: it marks itself dirty, and the log writes the file
//! (temporary file and rename, no fsync) while it holds its lock, leaving the fsync to
//! its next flush. A file lost or torn by a crash is rebuilt from the batch headers.

use std::io;
use std::path::{Path, PathBuf};

/// `UNDEFINED_EPOCH` and `UNDEFINED_EPOCH_OFFSET` of Kafka's OffsetForLeaderEpoch.
pub const UNDEFINED_EPOCH: i32 = crate::model::LeaderEpoch::UNDEFINED.0;
pub const UNDEFINED_EPOCH_OFFSET: i64 = crate::model::Offset::UNDEFINED.0;

/// Name of the checkpoint file in the log directory (Kafka's).
pub const CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";

const VERSION: i32 = 0;

/// Ascending `(epoch, start_offset)` entries: both strictly increase.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<(i32, i64)>,
    /// Changed since it was last written to its file.
    dirty: bool,
}

impl LeaderEpochCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty cache whose file is still to be written (it was missing).
    pub fn unwritten() -> Self {
        Self {
            entries: Vec::new(),
            dirty: true,
        }
    }

    /// A cache holding `entries` as they are (from a checkpoint file), not dirty.
    fn from_entries(entries: Vec<(i32, i64)>) -> Self {
        let mut cache = Self::default();
        for (epoch, start) in entries {
            cache.assign(epoch, start);
        }
        cache.dirty = false;
        cache
    }

    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Whether the cache changed since [`LeaderEpochCache::mark_written`].
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }
    pub fn mark_written(&mut self) {
        self.dirty = false;
    }

    /// Records that `epoch` starts at `start_offset`, as Kafka's `assign`: nothing
    /// changes when `epoch` is the latest and starts no later than `start_offset` (the
    /// common case, called for every batch). Otherwise, entries that the new one would
    /// make non-monotonic (epoch `>=` or start `>=` the new one's) are removed from the
    /// end first, so that the cache always describes the log as it now is. Negative
    /// epochs or offsets (batches from before leader epochs) are ignored.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) {
        if epoch < 0 || start_offset < 0 {
            return;
        }
        if let Some(&(latest_epoch, latest_start)) = self.entries.last() {
            if latest_epoch == epoch && latest_start <= start_offset {
                return;
            }
        }
        let removed_before = self.entries.len();
        while self
            .entries
            .last()
            .is_some_and(|&(e, s)| e >= epoch || s >= start_offset)
        {
            self.entries.pop();
        }
        let removed = removed_before - self.entries.len();
        if removed > 0 {
            tracing::debug!(
                epoch,
                start_offset,
                removed,
                "new leader epoch entry truncated conflicting ones"
            );
        }
        self.entries.push((epoch, start_offset));
        self.dirty = true;
    }

    pub fn latest(&self) -> Option<(i32, i64)> {
        self.entries.last().copied()
    }

    /// Kafka's `endOffsetFor`: the largest epoch `<=` `epoch` and the offset where it
    /// ended (the start of the next epoch), or `(epoch, log_end)` for the latest epoch.
    /// `(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)` for an undefined epoch, an empty
    /// cache or an epoch newer than any known; `(epoch, first start)` for an epoch
    /// older than every entry (its data is gone: replicate from the first epoch).
    pub fn end_offset_for(&self, epoch: i32, log_end: i64) -> (i32, i64) {
        const UNDEFINED: (i32, i64) = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        if epoch == UNDEFINED_EPOCH {
            return UNDEFINED;
        }
        if self.latest().is_some_and(|(latest, _)| latest == epoch) {
            return (epoch, log_end);
        }
        let Some(higher) = self.entries.iter().position(|&(e, _)| e > epoch) else {
            return UNDEFINED;
        };
        let higher_start = self.entries[higher].1;
        match higher.checked_sub(1).map(|i| self.entries[i]) {
            None => (epoch, higher_start),
            Some((floor_epoch, _)) => (floor_epoch, higher_start),
        }
    }

    /// Removes entries starting at or after `end_offset` (the log was truncated to
    /// it). A negative offset changes nothing, as in Kafka.
    pub fn truncate_from_end(&mut self, end_offset: i64) {
        if end_offset < 0 {
            return;
        }
        let keep = self.entries.partition_point(|&(_, s)| s < end_offset);
        if keep < self.entries.len() {
            self.entries.truncate(keep);
            self.dirty = true;
        }
    }

    /// The log now starts at `start_offset`: entries wholly below it go and the last
    /// one at or below it is moved up to start there (so an entry at exactly
    /// `start_offset` stays as it is).
    pub fn truncate_from_start(&mut self, start_offset: i64) {
        let at_or_below = self.entries.partition_point(|&(_, s)| s <= start_offset);
        let Some(last) = at_or_below.checked_sub(1) else {
            return;
        };
        let moved = (self.entries[last].0, start_offset);
        if last == 0 && self.entries[0] == moved {
            return;
        }
        self.entries.drain(..last);
        self.entries[0] = moved;
        self.dirty = true;
    }

    pub fn clear(&mut self) {
        if !self.entries.is_empty() {
            self.entries.clear();
            self.dirty = true;
        }
    }

    /// The file's contents, in Kafka's format.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut text = format!("{VERSION}\n{}\n", self.entries.len());
        for (epoch, start) in &self.entries {
            let _ = writeln!(text, "{epoch} {start}");
        }
        text
    }

    /// Parses a checkpoint file's contents; `None` when anything is off (wrong version,
    /// count, a bad line, entries out of order), so that the caller rebuilds instead.
    pub fn parse(text: &str) -> Option<Self> {
        let mut lines = text.lines();
        if lines.next()?.trim().parse::<i32>().ok()? != VERSION {
            return None;
        }
        let count: usize = lines.next()?.trim().parse().ok()?;
        let mut entries = Vec::with_capacity(count.min(1024));
        for line in lines {
            if line.trim().is_empty() {
                continue;
            }
            let mut fields = line.split_whitespace();
            let epoch: i32 = fields.next()?.parse().ok()?;
            let start: i64 = fields.next()?.parse().ok()?;
            if fields.next().is_some() || epoch < 0 || start < 0 {
                return None;
            }
            if entries
                .last()
                .is_some_and(|&(e, s): &(i32, i64)| e >= epoch || s >= start)
            {
                return None;
            }
            entries.push((epoch, start));
        }
        (entries.len() == count).then(|| Self::from_entries(entries))
    }

    /// Reads `dir`'s checkpoint file: `Ok(None)` when it is missing or unreadable.
    pub fn load(dir: &Path) -> io::Result<Option<Self>> {
        match std::fs::read_to_string(path(dir)) {
            Ok(text) => {
                let parsed = Self::parse(&text);
                if parsed.is_none() {
                    tracing::warn!(dir = %dir.display(), "unreadable leader-epoch checkpoint, rebuilding it");
                }
                Ok(parsed)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Replaces `dir`'s checkpoint file with the cache's contents: a temporary file
    /// renamed over it, so a reader sees the old or the new file. No fsync: the file
    /// and the directory are synced by the log's next flush ([`sync`]).
    pub fn write(&mut self, dir: &Path) -> io::Result<()> {
        let target = path(dir);
        let tmp = dir.join(format!("{CHECKPOINT_FILE}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, self.to_text())?;
        std::fs::rename(&tmp, &target)?;
        self.dirty = false;
        Ok(())
    }
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join(CHECKPOINT_FILE)
}

/// Makes `dir`'s checkpoint file durable (its contents; the caller syncs the directory
/// for the rename). A missing file is not an error: nothing was written yet.
pub fn sync(dir: &Path) -> io::Result<()> {
    match std::fs::File::open(path(dir)) {
        Ok(file) => file.sync_all(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut cache = LeaderEpochCache::new();
        for &(e, s) in entries {
            cache.assign(e, s);
        }
        cache
    }

    const U: (i32, i64) = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);

    type Entries = &'static [(i32, i64)];
    /// (assigned, requested epoch, log end, expected answer, name)
    type EndOffsetCase = (Entries, i32, i64, (i32, i64), &'static str);

    /// Cases of Kafka's LeaderEpochFileCacheTest: assignments, then a query.
    #[test]
    fn end_offset_for_answers_as_kafka_does() {
        let cases: &[EndOffsetCase] = &[
            (&[(2, 10)], 2, 11, (2, 11), "latest epoch: the log end"),
            (
                &[(2, 11), (2, 12)],
                2,
                14,
                (2, 14),
                "latest epoch assigned twice",
            ),
            (&[(2, 11), (3, 12)], -1, 0, U, "undefined epoch requested"),
            (&[], 0, 0, U, "no epoch recorded"),
            (&[], -1, 73, U, "empty cache, undefined epoch"),
            (
                &[(5, 11), (6, 12), (7, 13)],
                4,
                0,
                (4, 11),
                "older than the first",
            ),
            (
                &[(5, 11), (6, 12), (7, 13), (7, 12)],
                5,
                0,
                (5, 12),
                "same epoch, earlier start truncates",
            ),
            (
                &[(5, 11), (6, 12), (7, 13), (7, 12)],
                6,
                0,
                (5, 12),
                "dropped epoch 6",
            ),
            (
                &[(1, 11), (1, 12), (2, 13), (2, 14), (3, 15), (3, 16)],
                2,
                17,
                (2, 15),
                "previous epoch ends where the next starts",
            ),
            (
                &[(0, 10), (2, 13), (4, 17)],
                1,
                0,
                (0, 13),
                "no exact epoch",
            ),
            (
                &[(0, 10), (2, 13), (4, 17)],
                2,
                0,
                (2, 17),
                "exact, not latest",
            ),
            (
                &[(0, 10), (2, 13), (4, 17)],
                3,
                0,
                (2, 17),
                "between two epochs",
            ),
            (&[(2, 100)], 3, 100, U, "newer than any known"),
            (&[(2, 6)], 2, 7, (2, 7), "epochs need not start at zero"),
            (
                &[(1, 5), (2, 6), (1, 7)],
                1,
                8,
                (1, 8),
                "older epoch truncates newer",
            ),
            (
                &[(1, 5), (2, 6), (1, 7)],
                2,
                8,
                U,
                "truncated epoch is gone",
            ),
            (&[(0, 0), (1, 0)], 1, 0, (1, 0), "many leaders, none wrote"),
            (
                &[(0, 0), (1, 0)],
                0,
                5,
                (0, 0),
                "epoch replaced at the same start",
            ),
            (&[(0, 0), (1, 0), (2, 5)], 1, 10, (1, 5), "leader changes"),
            (&[], 7, 0, U, "empty cache"),
        ];
        for (assigned, epoch, log_end, expected, name) in cases {
            assert_eq!(
                cache(assigned).end_offset_for(*epoch, *log_end),
                *expected,
                "{name}"
            );
        }
    }

    #[test]
    fn assign_keeps_entries_monotonic() {
        assert_eq!(cache(&[(2, 9), (2, 10)]).entries(), &[(2, 9)]);
        assert_eq!(cache(&[(2, 9), (3, 9)]).entries(), &[(3, 9)]);
        assert_eq!(cache(&[(2, 6), (3, 5)]).entries(), &[(3, 5)]);
        assert_eq!(cache(&[(1, 5), (2, 6), (1, 7)]).entries(), &[(1, 7)]);
        assert_eq!(cache(&[(0, 0), (1, 7), (2, 10)]).latest(), Some((2, 10)));
        assert_eq!(cache(&[(-1, 0), (3, -1)]).entries(), &[]);
        let mut c = cache(&[(2, 6)]);
        c.mark_written();
        c.assign(2, 7);
        assert!(!c.is_dirty(), "no change, nothing to write");
        c.assign(3, 7);
        assert!(c.is_dirty());
    }

    #[test]
    fn truncation_from_either_end_as_kafka() {
        const BASE: [(i32, i64); 3] = [(2, 6), (3, 8), (4, 11)];
        let base = BASE;
        let cases: &[(bool, i64, Entries)] = &[
            (false, 8, &[(2, 6)]),
            (false, 9, &[(2, 6), (3, 8)]),
            (false, -1, &BASE),
            (false, 12, &BASE),
            (true, 8, &[(3, 8), (4, 11)]),
            (true, 1, &BASE),
            (true, 6, &BASE),
            (true, 11, &[(4, 11)]),
            (true, 9, &[(3, 9), (4, 11)]),
            (true, 15, &[(4, 15)]),
            (true, -1, &BASE),
        ];
        for &(from_start, offset, expected) in cases {
            let mut c = cache(&base);
            c.mark_written();
            if from_start {
                c.truncate_from_start(offset);
            } else {
                c.truncate_from_end(offset);
            }
            assert_eq!(c.entries(), expected, "from_start={from_start} {offset}");
            assert_eq!(c.is_dirty(), expected != base, "{from_start} {offset}");
        }
        let mut c = cache(&[(0, 0), (1, 7), (2, 10)]);
        c.truncate_from_start(5);
        assert_eq!(c.entries(), &[(0, 5), (1, 7), (2, 10)]);
        let mut empty = LeaderEpochCache::new();
        empty.truncate_from_start(7);
        empty.truncate_from_end(7);
        assert!(empty.is_empty() && !empty.is_dirty());
        let mut c = cache(&base);
        c.clear();
        assert!(c.is_empty() && c.is_dirty());
    }

    #[test]
    fn file_round_trip_in_kafkas_format() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        assert_eq!(LeaderEpochCache::load(dir.path())?, None, "missing file");
        let mut c = cache(&[(0, 0), (3, 1042)]);
        c.write(dir.path())?;
        assert!(!c.is_dirty());
        let text = std::fs::read_to_string(path(dir.path()))?;
        assert_eq!(text, "0\n2\n0 0\n3 1042\n");
        assert_eq!(LeaderEpochCache::load(dir.path())?, Some(c));
        sync(dir.path())?;
        for bad in [
            "",
            "1\n0\n",
            "0\n2\n0 0\n",
            "0\n1\n0 x\n",
            "0\n2\n3 5\n2 9\n",
            "0\n1\n1 2 3\n",
        ] {
            std::fs::write(path(dir.path()), bad)?;
            assert_eq!(LeaderEpochCache::load(dir.path())?, None, "{bad:?}");
        }
        Ok(())
    }
}
