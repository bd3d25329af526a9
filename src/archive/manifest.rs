//! The manifest of one partition's archive, and the names of its objects. Pure: the
//! store reads and writes the JSON.
//!
//! The manifest is the archive's truth: an object counts as archived once the
//! manifest lists it, and retention deletes a segment only below the manifest's
//! `next_offset`. An export writes its object first and the manifest second, each
//! write atomic; a crash between the two leaves an object the manifest does not list
//! (an orphan), which the next export of that partition — on whichever broker then
//! leads it — deletes before it writes the same records again. So at every moment
//! each archived offset is in exactly one listed object, and after any crash or
//! leader change the archive converges to one row per record.

use serde::{Deserialize, Serialize};

/// One archived object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The object's path in the store, from the archive's root.
    pub path: String,
    /// Its first and last record offsets (compaction or aborted data may leave
    /// offsets in between without a record).
    pub first_offset: i64,
    pub last_offset: i64,
    /// Where the next object starts: every offset below it is in this object or an
    /// earlier one (past `last_offset` when the section ended in control batches).
    pub end_offset: i64,
    pub records: u64,
    /// Size of the Parquet object.
    pub bytes: u64,
    /// Bytes of log (record batches as stored) it was made from.
    pub log_bytes: u64,
    pub min_timestamp: i64,
    pub max_timestamp: i64,
    /// Leader epoch of the broker that archived it.
    pub leader_epoch: i32,
    /// When it was archived, ms since the epoch.
    pub archived_at: i64,
}

/// A section the archive was told to skip: retention deleted it without an export
/// (disk pressure, `archive.on.failure=delete`), or it was gone (DeleteRecords)
/// before it expired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub from_offset: i64,
    pub end_offset: i64,
}

/// The manifest of one partition.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Manifest {
    pub topic: String,
    pub partition: i32,
    /// Every offset below it is archived or skipped.
    pub next_offset: i64,
    pub entries: Vec<Entry>,
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    /// The store's version (ETag) of the manifest this was read as or last written as;
    /// `None`: there was none. The next write replaces only that version, so a write
    /// that reaches the store late (its client gave up on it) cannot replace a newer
    /// manifest with an older one.
    #[serde(skip)]
    pub version: Option<String>,
}

impl Manifest {
    pub fn new(topic: &str, partition: i32) -> Self {
        Self {
            topic: topic.to_string(),
            partition,
            ..Self::default()
        }
    }

    /// Adds an object that continues the archive; refuses one that does not start at
    /// or after `next_offset` (it would duplicate rows).
    pub fn push(&mut self, entry: Entry) -> Result<(), Overlap> {
        if entry.first_offset < self.next_offset || entry.end_offset <= entry.last_offset {
            return Err(Overlap {
                next_offset: self.next_offset,
                first_offset: entry.first_offset,
            });
        }
        self.next_offset = entry.end_offset;
        self.entries.push(entry);
        Ok(())
    }

    /// Records that `[next_offset, log_start)` will never be archived: the log no
    /// longer has it.
    pub fn skip_to(&mut self, log_start: i64) {
        if log_start > self.next_offset {
            self.skipped.push(Skipped {
                from_offset: self.next_offset,
                end_offset: log_start,
            });
            self.next_offset = log_start;
        }
    }

    /// Moves past `[next_offset, end)`, which holds nothing to archive (control
    /// batches only).
    pub fn advance_to(&mut self, end: i64) {
        self.next_offset = self.next_offset.max(end);
    }

    /// The object holding `offset`, if it was archived.
    pub fn locate(&self, offset: i64) -> Option<&Entry> {
        let at = self.entries.partition_point(|e| e.end_offset <= offset);
        self.entries
            .get(at)
            .filter(|e| e.first_offset <= offset && offset <= e.last_offset)
    }

    /// The objects with any record at or after `offset`, or with a record at or
    /// after `timestamp` (a restore's start), oldest first.
    pub fn from(&self, offset: i64, timestamp: Option<i64>) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(move |e| {
            e.last_offset >= offset && timestamp.is_none_or(|t| e.max_timestamp >= t)
        })
    }

    /// Whether `path` is an object this manifest lists.
    pub fn lists(&self, path: &str) -> bool {
        self.entries.iter().any(|e| e.path == path)
    }
}

/// An object that would archive offsets the manifest already has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an object from offset {first_offset} would overlap the archive, which has every offset below {next_offset}")]
pub struct Overlap {
    pub next_offset: i64,
    pub first_offset: i64,
}

/// The folder of one partition's objects: Hive-style, so that query engines read
/// `topic` and `partition` from the path.
pub fn partition_prefix(topic: &str, partition: i32) -> String {
    format!("topic={topic}/partition={partition}")
}

/// Where the manifest of a partition lives. Not `*.parquet`, and `_`-prefixed (as
/// Spark's `_SUCCESS`): globs over the data and directory readers (pyarrow, pandas,
/// Spark skip `_` and `.` files) never read it.
pub fn manifest_path(topic: &str, partition: i32) -> String {
    format!("{}/_manifest.json", partition_prefix(topic, partition))
}

/// The object for records `first..=last` whose first record is of `date`
/// (`YYYY-MM-DD`, UTC). The name derives from the records alone, so writing the same
/// section again overwrites rather than duplicates; zero-padded offsets sort as
/// numbers do.
pub fn object_path(topic: &str, partition: i32, date: &str, first: i64, last: i64) -> String {
    format!(
        "{}/date={date}/{first:020}-{last:020}.parquet",
        partition_prefix(topic, partition)
    )
}

/// The first and last offsets an object's name says it holds; `None` for anything
/// that is not an archive object.
pub fn object_range(path: &str) -> Option<(i64, i64)> {
    let name = path.rsplit('/').next()?.strip_suffix(".parquet")?;
    let (first, last) = name.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// `YYYY-MM-DD` of a Unix time in ms (UTC; before 1970 counts as 1970-01-01).
pub fn utc_date(ms: i64) -> String {
    // Howard Hinnant's days-to-civil, for the proleptic Gregorian calendar.
    let days = ms.max(0) / 86_400_000;
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(first: i64, last: i64, end: i64) -> Entry {
        Entry {
            path: object_path("t", 0, "2026-12-03", first, last),
            first_offset: first,
            last_offset: last,
            end_offset: end,
            records: (last - first + 1) as u64,
            bytes: 10,
            log_bytes: 20,
            min_timestamp: first * 10,
            max_timestamp: last * 10,
            leader_epoch: 0,
            archived_at: 0,
        }
    }

    #[test]
    fn objects_continue_the_archive_and_never_overlap() {
        let mut m = Manifest::new("t", 0);
        m.push(entry(0, 9, 10)).expect("first");
        m.push(entry(12, 19, 20))
            .expect("a gap left by compaction is fine");
        assert_eq!(m.next_offset, 20);
        let overlap = m.push(entry(15, 30, 31)).expect_err("overlaps");
        assert_eq!(overlap.next_offset, 20);
        assert_eq!(m.entries.len(), 2);
    }

    #[test]
    fn locate_finds_the_object_of_an_offset() {
        let mut m = Manifest::new("t", 0);
        m.push(entry(0, 9, 10)).expect("push");
        m.push(entry(12, 19, 20)).expect("push");
        assert_eq!(m.locate(0).map(|e| e.first_offset), Some(0));
        assert_eq!(m.locate(9).map(|e| e.first_offset), Some(0));
        assert_eq!(m.locate(10), None, "no record there");
        assert_eq!(m.locate(15).map(|e| e.first_offset), Some(12));
        assert_eq!(m.locate(20), None);
        assert_eq!(m.from(10, None).count(), 1);
        assert_eq!(m.from(0, Some(150)).count(), 1, "by time");
    }

    #[test]
    fn skipping_moves_next_offset_and_is_recorded() {
        let mut m = Manifest::new("t", 0);
        m.skip_to(100);
        m.skip_to(50);
        assert_eq!(m.next_offset, 100);
        assert_eq!(m.skipped.len(), 1);
        let raw = serde_json::to_string(&m).expect("json");
        assert_eq!(serde_json::from_str::<Manifest>(&raw).expect("parse"), m);
    }

    #[test]
    fn object_names_sort_and_parse_back() {
        let a = object_path("orders", 3, "2026-12-03", 5, 99);
        assert_eq!(
            a,
            "topic=orders/partition=3/date=2026-12-03/00000000000000000005-00000000000000000099.parquet"
        );
        assert_eq!(object_range(&a), Some((5, 99)));
        assert_eq!(
            object_range("topic=orders/partition=3/_manifest.json"),
            None
        );
        assert!(object_path("t", 0, "d", 9, 9) < object_path("t", 0, "d", 10, 10));
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400_000), "2000-02-29");
        assert_eq!(utc_date(1_796_256_000_000), "2026-12-03");
        assert_eq!(utc_date(-5), "1970-01-01");
    }
}
