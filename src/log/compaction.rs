//! A cleaning pass over a compacted log's files, run off the log's lock: map the
//! dirty section, rewrite the cleanable segments with what [`super::cleaner`] keeps,
//! then hand them to [`super::Log::install_cleaned`] to swap in.
//!
//! Crash safety: a crash at any point leaves the old segments or the new ones,
//! never a mix and never a loss.
//! 1. New segments are written into `<log>/cleaning/` and synced there; a crash
//!    leaves that directory, which the next open deletes.
//! 2. The cleaner checkpoint moves to the end of the cleaned section (synced) before
//!    any swap, so that a swapped segment, whose last batch may be gone (it ends
//!    before the next segment's base), is trusted at open rather than taken for a
//!    torn one, and the segments after it with it.
//! 3. Under the log's lock, per segment: the new files are renamed beside the old as
//!    `*.index.swap`, `*.timeindex.swap`, then `*.log.swap` (the commit point), then
//!    each over its old file, the log last. At open, a `*.log.swap` finishes its
//!    swap ([`complete_swaps`]); index swaps without one are an unfinished step 3 and go.

use std::io;
use std::path::{Path, PathBuf};

use bytes::Bytes;

use super::throttle::Throttle;

use super::batch::BatchHeader;
use super::cleaner::{self, CleanError, Cleaned, OffsetMap, TombstonePolicy};
use super::files::{write_atomically, CLEANER_CHECKPOINT_FILE};
use super::segment::{self, Segment, SegmentSizes};
use super::txn::{AbortedTxn, CommittedFilter, MarkerFate, TxnCleaning};

/// One segment of a [`CleaningJob`]: a view of its committed bytes.
#[derive(Debug)]
pub struct CleanableSegment {
    pub base: i64,
    /// The next segment's base: where this one's offsets end.
    pub end: i64,
    pub size: u64,
    pub data: Bytes,
}

/// A compacted log's cleanable section, handed out for a pass that runs off the
/// log's lock ([`super::Log::cleaning_job`], then [`super::Log::install_cleaned`]).
#[derive(Debug)]
pub struct CleaningJob {
    pub dir: PathBuf,
    pub(super) generation: u64,
    pub first_dirty: i64,
    pub segments: Vec<CleanableSegment>,
    pub sizes: SegmentSizes,
    /// The log's `delete.retention.ms` when the job was made.
    pub delete_retention_ms: i64,
    /// The aborted transactions with data in the cleanable section: their records
    /// are neither mapped nor kept (a read_committed reader never sees them, and an
    /// aborted record must not supersede a committed one of its key).
    pub aborted: Vec<AbortedTxn>,
}

const CLEANING_DIR: &str = "cleaning";
const SWAP_SUFFIX: &str = ".swap";

/// What a pass is allowed: memory for the key map, a read+write rate, the clock.
#[derive(Debug, Clone, Copy)]
pub struct PassSettings {
    /// `log.cleaner.dedupe.buffer.size` (per cleaner thread here).
    pub dedupe_buffer_bytes: u64,
    /// `log.cleaner.io.max.bytes.per.second`; `None` for no limit.
    pub io_max_bytes_per_second: Option<f64>,
    pub tombstones: TombstonePolicy,
}

/// What a pass did; `replaced` lists the segments to swap in, `(base, old size,
/// new size)`.
#[derive(Debug, Default, Clone)]
pub struct PassOutcome {
    /// The new cleaner checkpoint: the end of the section the map covered.
    pub end: i64,
    pub replaced: Vec<(i64, u64, u64)>,
    /// Bytes read, both to map the dirty section and to rewrite the cleanable one.
    pub bytes_read: u64,
    /// Bytes of log the pass cleaned: the cleanable section it went through.
    pub bytes_cleaned: u64,
    pub bytes_written: u64,
    pub records_dropped: u64,
    pub keys_mapped: usize,
    /// The earliest delete horizon left in the cleaned section: a pass is due then,
    /// dirty data or not, to drop the tombstones and markers.
    pub next_horizon: Option<i64>,
    /// Aborted transactions with no data left in the log: the aborted list (Fetch's
    /// `aborted_transactions`) must stop naming them before their markers go, or a
    /// reader would take the producer's later committed data for aborted.
    pub forget_aborted: Vec<AbortedTxn>,
}

#[derive(Debug, thiserror::Error)]
pub enum PassError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Clean(#[from] CleanError),
    #[error("segment {base}: a rewritten batch does not parse: {reason}")]
    Rebuilt { base: i64, reason: String },
}

/// Runs one pass over `job`. Writes only under `<log>/cleaning/` and the cleaner
/// checkpoint; the swap is [`super::Log::install_cleaned`]'s.
pub fn run_pass(job: &CleaningJob, settings: &PassSettings) -> Result<PassOutcome, PassError> {
    let mut throttle = Throttle::new(settings.io_max_bytes_per_second);
    let mut outcome = PassOutcome::default();
    let (map, mapped_to) = build_map(job, settings, &mut throttle, &mut outcome)?;
    // With nothing dirty the pass is one for expired tombstones: the clean section
    // against an empty map.
    let end = mapped_to.unwrap_or(job.first_dirty);
    outcome.end = end;
    outcome.keys_mapped = map.len();
    let cleaning = cleaning_dir(&job.dir);
    discard(&cleaning);
    std::fs::create_dir_all(&cleaning)?;
    let result = rewrite_segments(
        job,
        &map,
        end,
        settings,
        &cleaning,
        &mut throttle,
        &mut outcome,
    );
    if let Err(error) = result {
        discard(&cleaning);
        return Err(error);
    }
    write_atomically(
        &job.dir.join(CLEANER_CHECKPOINT_FILE),
        end.to_string().as_bytes(),
    )?;
    Ok(outcome)
}

/// Maps the dirty section's keys, segment by segment, while the map has room for a
/// whole segment's records (always for the first). Returns the map and where the
/// mapped section ends (`None`: nothing dirty).
fn build_map(
    job: &CleaningJob,
    settings: &PassSettings,
    throttle: &mut Throttle,
    outcome: &mut PassOutcome,
) -> Result<(OffsetMap, Option<i64>), PassError> {
    let mut map = OffsetMap::with_memory(settings.dedupe_buffer_bytes);
    let mut end = None;
    let mut committed = CommittedFilter::new(job.aborted.clone());
    for segment in job.segments.iter().filter(|s| s.end > job.first_dirty) {
        let records: usize = super::batch::batches(&segment.data)
            .filter_map(Result::ok)
            .map(|h| h.record_count().max(0) as usize)
            .sum();
        if end.is_some() && !map.has_room_for(records) {
            break;
        }
        for header in super::batch::batches(&segment.data) {
            let Ok(header) = header else { break };
            if !committed.keep(&header) {
                continue; // aborted data and markers map nothing
            }
            if let Err(error) = map.add_batch(&header) {
                tracing::warn!(dir = %job.dir.display(), offset = header.base_offset(), %error,
                    "cleaner left an unreadable batch out of its key map");
            }
        }
        throttle.pay_blocking(segment.size);
        outcome.bytes_read += segment.size;
        end = Some(segment.end);
    }
    Ok((map, end))
}

/// Rewrites every cleanable segment below `end` into `cleaning`, keeping only those
/// that changed.
fn rewrite_segments(
    job: &CleaningJob,
    map: &OffsetMap,
    end: i64,
    settings: &PassSettings,
    cleaning: &Path,
    throttle: &mut Throttle,
    outcome: &mut PassOutcome,
) -> Result<(), PassError> {
    let mut txns = TxnCleaning::new(job.aborted.clone());
    for source in job.segments.iter().filter(|s| s.end <= end) {
        // A rebuilt batch can be a little larger than its original (re-encoded
        // timestamp deltas, another encoder of the same codec).
        let capacity = source.size + source.size / 4 + 64 * 1024;
        let sizes = SegmentSizes {
            segment_bytes: capacity,
            ..job.sizes
        };
        let mut target = Segment::create(cleaning, source.base, sizes)?;
        let mut changed = false;
        let now = settings.tombstones.now_ms;
        for header in super::batch::batches(&source.data) {
            let Ok(header) = header else { break };
            let verdict = if header.is_control() {
                match txns.on_marker(&header) {
                    MarkerFate::Keep => Ok(Cleaned::Unchanged),
                    MarkerFate::Empty { forget } => {
                        outcome.forget_aborted.extend(forget);
                        cleaner::clean_empty_marker(&header, settings.tombstones)
                    }
                }
            } else if txns.is_aborted_data(&header) {
                Ok(Cleaned::Dropped {
                    records: header.record_count().max(0) as usize,
                })
            } else {
                cleaner::clean_batch(&header, map, settings.tombstones)
            };
            match verdict {
                Ok(Cleaned::Unchanged) | Err(_) => {
                    note_horizon(&mut outcome.next_horizon, &header);
                    target.append_raw(&header, now)?;
                }
                Ok(Cleaned::Dropped { records }) => {
                    changed = true;
                    outcome.records_dropped += records as u64;
                }
                Ok(Cleaned::Rewritten { batch, dropped }) => {
                    changed = true;
                    outcome.records_dropped += dropped as u64;
                    let rebuilt =
                        BatchHeader::parse_checked(&batch).map_err(|e| PassError::Rebuilt {
                            base: source.base,
                            reason: e.to_string(),
                        })?;
                    note_horizon(&mut outcome.next_horizon, &rebuilt);
                    target.append_raw(&rebuilt, now)?;
                }
            }
        }
        if changed {
            target.seal()?;
            throttle.pay_blocking(target.size());
            outcome.bytes_written += target.size();
            outcome
                .replaced
                .push((source.base, source.size, target.size()));
        } else {
            target.delete_files()?;
        }
        throttle.pay_blocking(source.size);
        outcome.bytes_read += source.size;
        outcome.bytes_cleaned += source.size;
    }
    Ok(())
}

fn note_horizon(next: &mut Option<i64>, header: &BatchHeader<'_>) {
    if let Some(horizon) = cleaner::delete_horizon(header) {
        *next = Some(next.map_or(horizon, |n| n.min(horizon)));
    }
}

/// Where a log's pass writes its new segments.
pub fn cleaning_dir(log_dir: &Path) -> PathBuf {
    log_dir.join(CLEANING_DIR)
}

/// Removes what a pass left in `cleaning` (all of it).
pub fn discard(cleaning: &Path) {
    match std::fs::remove_dir_all(cleaning) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(dir = %cleaning.display(), %error, "could not remove the cleaner's files")
        }
    }
}

/// Removes one segment's new files from `cleaning` (it is not swapped in).
pub fn discard_segment(cleaning: &Path, base: i64) {
    for path in segment_files(cleaning, base) {
        let _ = std::fs::remove_file(path);
    }
}

fn segment_files(dir: &Path, base: i64) -> [PathBuf; 3] {
    [
        segment::index_path(dir, base),
        segment::time_index_path(dir, base),
        segment::log_path(dir, base),
    ]
}

fn with_swap_suffix(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(SWAP_SUFFIX);
    PathBuf::from(name)
}

/// Step 3 of the module doc for segment `base`: the new files from `cleaning/` beside
/// the old as `*.swap` (the log's last: the commit point), then over the old ones.
pub fn swap_into_place(log_dir: &Path, base: i64) -> io::Result<()> {
    let cleaning = cleaning_dir(log_dir);
    for (new, old) in segment_files(&cleaning, base)
        .into_iter()
        .zip(segment_files(log_dir, base))
    {
        std::fs::rename(new, with_swap_suffix(&old))?;
    }
    finish_swap(log_dir, base)
}

fn finish_swap(log_dir: &Path, base: i64) -> io::Result<()> {
    for old in segment_files(log_dir, base) {
        let swap = with_swap_suffix(&old);
        match std::fs::rename(&swap, &old) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// At open: finishes every swap whose commit point (`*.log.swap`) was reached, drops
/// the swap files of any that was not, and the `cleaning/` directory of a pass that
/// did not finish.
pub fn complete_swaps(log_dir: &Path) -> io::Result<()> {
    discard(&cleaning_dir(log_dir));
    let mut committed = Vec::new();
    let mut stray = Vec::new();
    for entry in std::fs::read_dir(log_dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(SWAP_SUFFIX) else {
            continue;
        };
        let base = stem.get(..20).and_then(|digits| digits.parse::<i64>().ok());
        match (base, stem.ends_with(".log")) {
            (Some(base), true) => committed.push(base),
            _ => stray.push(log_dir.join(name)),
        }
    }
    for base in &committed {
        tracing::info!(dir = %log_dir.display(), base, "finishing a cleaned segment's swap");
        finish_swap(log_dir, *base)?;
    }
    for path in stray {
        let done = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.get(..20))
            .and_then(|digits| digits.parse::<i64>().ok())
            .is_some_and(|base| committed.contains(&base));
        if !done {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::records::testing::{encode_batch, TestRecord};
    use super::super::{compression, AppendError, CleanupPolicy, Log, LogConfig, OpenMode};
    use super::*;
    use crate::model::Offset;

    const NOW: i64 = 1_000_000;

    fn compacted() -> LogConfig {
        LogConfig {
            segment_bytes: 1024,
            index_bytes: 1024,
            index_interval_bytes: 128,
            cleanup: CleanupPolicy::COMPACT,
            ..LogConfig::default()
        }
    }

    fn open(dir: &Path, clean: bool) -> io::Result<Log> {
        Log::open(
            dir,
            compacted(),
            OpenMode {
                clean,
                recovery_point: 0,
            },
        )
    }

    fn record(key: Option<&str>, value: Option<&str>) -> TestRecord {
        TestRecord {
            key: key.map(|k| k.as_bytes().to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
            headers: vec![("h".into(), Some(b"x".to_vec()))],
            timestamp_delta: 0,
        }
    }

    fn flush(log: &mut Log) -> io::Result<()> {
        let plan = log.flush_plan();
        plan.run()?;
        log.mark_flushed(&plan);
        Ok(())
    }

    /// Every record of the log, in order: `(offset, key, value)`.
    fn everything(log: &Log) -> Vec<(i64, String, Option<String>)> {
        let mut out = Vec::new();
        let mut offset = log.log_start_offset();
        while let Ok(Some(bytes)) = log.read(offset, 1 << 20, true) {
            for header in super::super::batch::batches(&bytes) {
                let header = header.expect("valid batches");
                let body = compression::decompress(
                    header.compression(),
                    header.records_section(),
                    1 << 20,
                )
                .expect("readable");
                for r in header.parse_records(&body).expect("well-formed") {
                    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                    out.push((
                        r.offset,
                        r.key.map(text).unwrap_or_default(),
                        r.value.map(text),
                    ));
                }
                offset = Offset(header.last_offset() + 1);
            }
        }
        out
    }

    fn pass(log: &mut Log) -> Result<PassOutcome, Box<dyn std::error::Error>> {
        pass_at(log, NOW)
    }

    fn pass_at(log: &mut Log, now: i64) -> Result<PassOutcome, Box<dyn std::error::Error>> {
        let job = log.cleaning_job(log.end(), now).ok_or("a pass is due")?;
        let settings = PassSettings {
            dedupe_buffer_bytes: 1 << 20,
            io_max_bytes_per_second: None,
            tombstones: TombstonePolicy {
                now_ms: now,
                delete_retention_ms: job.delete_retention_ms,
            },
        };
        let outcome = run_pass(&job, &settings)?;
        log.install_cleaned(&job, &outcome)?.1.delete()?;
        Ok(outcome)
    }

    #[test]
    fn aborted_records_are_neither_mapped_nor_kept() -> Result<(), Box<dyn std::error::Error>> {
        use super::super::txn::{MarkerKind, TxnMarker, TRANSACTIONAL_BIT};
        use crate::model::{ProducerEpoch, ProducerId};
        let dir = tempfile::tempdir()?;
        let mut log = open(dir.path(), false)?;
        let plain = |key: &str, value: &str| {
            encode_batch(
                &[record(Some(key), Some(value))],
                NOW - 10_000,
                (-1, -1, -1),
            )
        };
        log.append(&plain("k", "committed"), NOW)?;
        let mut aborted = super::super::records::BatchBuilder::new()
            .idempotent(7, 0, 0)
            .with_attributes(TRANSACTIONAL_BIT);
        aborted.push(NOW - 10_000, Some(b"k"), Some(b"aborted"), &[]);
        log.append(&aborted.build(), NOW)?;
        let marker = TxnMarker {
            producer_id: ProducerId(7),
            producer_epoch: ProducerEpoch(0),
            coordinator_epoch: 0,
            kind: MarkerKind::Abort,
        };
        log.append_marker(&marker, NOW)?;
        for i in 0..30 {
            log.append(&plain(&format!("other{}", i % 3), "x"), NOW)?;
        }
        flush(&mut log)?;
        pass(&mut log)?;
        let kept = everything(&log);
        let k: Vec<_> = kept.iter().filter(|(_, key, _)| key == "k").collect();
        assert_eq!(k.len(), 1, "{kept:?}");
        assert_eq!(
            k[0].2.as_deref(),
            Some("committed"),
            "the aborted write superseded nothing"
        );
        Ok(())
    }

    /// Kafka's marker retention: a marker stays while data of its transaction is left,
    /// is stamped with a delete horizon by the first pass that finds none, and goes
    /// with the first pass after it; the aborted list forgets the emptied abort first,
    /// on disk too, so that the producer's later committed data still reaches
    /// read_committed readers after a restart.
    #[test]
    fn markers_go_after_their_data_and_delete_retention() -> Result<(), Box<dyn std::error::Error>>
    {
        use super::super::txn::{MarkerKind, TxnMarker, TRANSACTIONAL_BIT};
        use crate::model::{ProducerEpoch, ProducerId};
        let dir = tempfile::tempdir()?;
        let mut log = open(dir.path(), false)?;
        let txn = |pid: i64, seq: i32, key: &str, value: &str| {
            let mut b = super::super::records::BatchBuilder::new()
                .idempotent(pid, 0, seq)
                .with_attributes(TRANSACTIONAL_BIT);
            b.push(
                NOW - 10_000,
                Some(key.as_bytes()),
                Some(value.as_bytes()),
                &[],
            );
            b.build()
        };
        let marker = |pid: i64, kind| TxnMarker {
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(0),
            coordinator_epoch: 0,
            kind,
        };
        let filler = |log: &mut Log, n: usize| -> Result<(), AppendError> {
            for i in 0..n {
                let batch = encode_batch(
                    &[record(Some(&format!("f{}", i % 3)), Some("x"))],
                    NOW - 10_000,
                    (-1, -1, -1),
                );
                log.append(&batch, NOW)?;
            }
            Ok(())
        };
        log.append(&txn(7, 0, "k", "aborted"), NOW)?;
        log.append_marker(&marker(7, MarkerKind::Abort), NOW)?;
        log.append(&txn(8, 0, "j", "old"), NOW)?;
        log.append_marker(&marker(8, MarkerKind::Commit), NOW)?;
        let plain = encode_batch(&[record(Some("j"), Some("new"))], NOW, (-1, -1, -1));
        log.append(&plain, NOW)?;
        log.append(&txn(7, 1, "m", "later"), NOW)?;
        log.append_marker(&marker(7, MarkerKind::Commit), NOW)?;
        filler(&mut log, 30)?;
        flush(&mut log)?;
        let markers = |log: &Log| -> Vec<i64> {
            let mut out = Vec::new();
            let mut offset = log.log_start_offset();
            while let Ok(Some(bytes)) = log.read(offset, 1 << 20, true) {
                for header in super::super::batch::batches(&bytes) {
                    let header = header.expect("valid batches");
                    if header.is_control() {
                        out.push(header.producer_id());
                    }
                    offset = Offset(header.last_offset() + 1);
                }
            }
            out
        };
        let aborted = |log: &Log| log.aborted_between(Offset(0), Offset(log.end())).len();

        // Pass 1 drops the aborted data and pid 8's superseded record: every marker
        // still had data of its transaction before it.
        pass(&mut log)?;
        assert_eq!(markers(&log), vec![7, 8, 7]);
        assert_eq!(aborted(&log), 1);
        // Pass 2 (new dirty data) finds pid 7's abort and pid 8's commit empty: stamped,
        // and the abort forgotten. Pid 7's commit keeps its data ("m").
        filler(&mut log, 30)?;
        flush(&mut log)?;
        let outcome = pass_at(&mut log, NOW + 1)?;
        assert_eq!(outcome.forget_aborted.len(), 1);
        assert_eq!(aborted(&log), 0, "the emptied abort is forgotten");
        assert_eq!(markers(&log), vec![7, 8, 7], "kept for delete.retention.ms");
        let horizon = outcome
            .next_horizon
            .ok_or("the stamped markers set a horizon")?;
        assert_eq!(horizon, NOW + 1 + compacted().delete_retention_ms);
        // After the horizon a pass is due with nothing dirty, and the two go.
        pass_at(&mut log, horizon)?;
        assert_eq!(
            markers(&log),
            vec![7],
            "only the marker with data left stays"
        );
        let survivors: Vec<_> = everything(&log)
            .into_iter()
            .filter(|(_, key, _)| key == "m" || key == "j" || key == "k")
            .map(|(_, key, value)| (key, value.unwrap_or_default()))
            .collect();
        assert_eq!(
            survivors,
            vec![("j".into(), "new".into()), ("m".into(), "later".into())]
        );
        // A restart reads the snapshots: the abort must not come back.
        drop(log);
        let log = open(dir.path(), false)?;
        assert_eq!(aborted(&log), 0, "no snapshot brings the abort back");
        Ok(())
    }

    /// 60 single-record batches over 5 keys, then flushed: several sealed segments.
    fn five_keys_twelve_times(log: &mut Log) -> Result<(), Box<dyn std::error::Error>> {
        for i in 0..60 {
            let key = format!("k{}", i % 5);
            let value = format!("v{i}");
            log.append(
                &encode_batch(
                    &[record(Some(&key), Some(&value))],
                    NOW - 10_000,
                    (-1, -1, -1),
                ),
                NOW,
            )?;
        }
        flush(log)?;
        Ok(())
    }

    /// The latest `(offset, value)` per key of `records`.
    fn latest(
        records: &[(i64, String, Option<String>)],
    ) -> BTreeMap<String, (i64, Option<String>)> {
        records
            .iter()
            .map(|(o, k, v)| (k.clone(), (*o, v.clone())))
            .collect()
    }

    #[test]
    fn a_pass_keeps_the_latest_value_of_every_key_at_its_offset_across_restarts(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = open(dir.path(), false)?;
        five_keys_twelve_times(&mut log)?;
        let before = everything(&log);
        let active_base = *log.segments.keys().next_back().ok_or("segments")?;
        let outcome = pass(&mut log)?;
        assert!(
            outcome.records_dropped > 0 && !outcome.replaced.is_empty(),
            "{outcome:?}"
        );
        let after = everything(&log);
        assert_eq!(
            latest(&after),
            latest(&before),
            "every key keeps its latest value and offset"
        );
        let cleaned: Vec<_> = after.iter().filter(|(o, _, _)| *o < active_base).collect();
        let keys: std::collections::BTreeSet<_> = cleaned.iter().map(|(_, k, _)| k).collect();
        assert_eq!(
            keys.len(),
            cleaned.len(),
            "one record per key below the active segment: {cleaned:?}"
        );
        assert!(
            after.windows(2).all(|w| w[0].0 < w[1].0),
            "offsets increase"
        );
        assert_eq!(log.end(), 60, "offsets are not reassigned");
        assert!(
            log.append(
                &encode_batch(&[record(Some("k0"), Some("new"))], NOW, (-1, -1, -1)),
                NOW
            )?
            .base_offset
                == 60
        );
        let after = everything(&log);
        drop(log); // a crash, with no recovery checkpoint at all
        let log = open(dir.path(), false)?;
        assert_eq!(
            everything(&log),
            after,
            "an unclean open trusts the cleaned segments"
        );
        drop(log);
        let mut log = open(dir.path(), false)?;
        log.close()?;
        let log = open(dir.path(), true)?;
        assert_eq!(everything(&log), after, "a clean open too");
        assert_eq!(
            log.segments.values().next().map(|s| s.size()),
            Some(0),
            "the first segment was emptied"
        );
        assert_eq!(
            log.log_start_offset(),
            Offset(0),
            "and still holds the log start, restart after restart"
        );
        Ok(())
    }

    #[test]
    fn a_crash_before_the_swap_leaves_the_old_segments() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = open(dir.path(), false)?;
        five_keys_twelve_times(&mut log)?;
        let before = everything(&log);
        let job = log.cleaning_job(60, NOW).ok_or("due")?;
        let settings = PassSettings {
            dedupe_buffer_bytes: 1 << 20,
            io_max_bytes_per_second: None,
            tombstones: TombstonePolicy {
                now_ms: NOW,
                delete_retention_ms: 0,
            },
        };
        let outcome = run_pass(&job, &settings)?;
        assert!(!outcome.replaced.is_empty());
        drop(log); // crash: cleaned files written, checkpoint moved, nothing swapped
        let log = open(dir.path(), false)?;
        assert_eq!(everything(&log), before);
        assert!(
            !cleaning_dir(dir.path()).exists(),
            "the unfinished pass's files are gone"
        );
        Ok(())
    }

    #[test]
    fn a_swap_past_its_commit_point_is_finished_at_open_and_one_before_it_undone(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = open(dir.path(), false)?;
        five_keys_twelve_times(&mut log)?;
        let before = everything(&log);
        let job = log.cleaning_job(60, NOW).ok_or("due")?;
        let settings = PassSettings {
            dedupe_buffer_bytes: 1 << 20,
            io_max_bytes_per_second: None,
            tombstones: TombstonePolicy {
                now_ms: NOW,
                delete_retention_ms: 0,
            },
        };
        let outcome = run_pass(&job, &settings)?;
        let (first, second) = (outcome.replaced[0].0, outcome.replaced[1].0);
        let cleaning = cleaning_dir(dir.path());
        // The first segment reached its commit point (log renamed last), the second
        // only got its index across.
        for (new, old) in segment_files(&cleaning, first)
            .into_iter()
            .zip(segment_files(dir.path(), first))
        {
            std::fs::rename(new, with_swap_suffix(&old))?;
        }
        let [index, _, _] = segment_files(&cleaning, second);
        std::fs::rename(
            index,
            with_swap_suffix(&segment::index_path(dir.path(), second)),
        )?;
        drop(log);
        let log = open(dir.path(), false)?;
        let after = everything(&log);
        assert_eq!(latest(&after), latest(&before));
        let in_first: Vec<_> = after
            .iter()
            .filter(|(o, _, _)| *o >= first && *o < second)
            .collect();
        let kept_before: Vec<_> = before
            .iter()
            .filter(|(o, _, _)| *o >= first && *o < second)
            .collect();
        assert!(
            in_first.len() < kept_before.len(),
            "the committed swap took effect"
        );
        let in_second = |r: &&(i64, String, Option<String>)| {
            r.0 >= second && r.0 < outcome.replaced.get(2).map_or(i64::MAX, |s| s.0)
        };
        assert_eq!(
            after.iter().filter(in_second).count(),
            before.iter().filter(in_second).count(),
            "the uncommitted one did not"
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(SWAP_SUFFIX))
            .collect();
        assert!(leftovers.is_empty(), "no swap file is left: {leftovers:?}");
        Ok(())
    }

    #[test]
    fn a_keyless_record_is_refused_and_nothing_of_its_batch_appended(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = open(dir.path(), false)?;
        let mixed = encode_batch(
            &[record(Some("a"), Some("1")), record(None, Some("2"))],
            NOW,
            (-1, -1, -1),
        );
        match log.append(&mixed, NOW) {
            Err(AppendError::MissingKey { records }) => assert_eq!(records, vec![1]),
            other => panic!("expected MissingKey, got {other:?}"),
        }
        assert_eq!(log.end(), 0);
        Ok(())
    }

    #[test]
    fn tombstones_stay_for_delete_retention_then_go() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = open(dir.path(), false)?;
        log.set_config(LogConfig {
            delete_retention_ms: 5_000,
            ..compacted()
        });
        for i in 0..20 {
            let value = format!("v{i}");
            log.append(
                &encode_batch(&[record(Some("gone"), Some(&value))], NOW, (-1, -1, -1)),
                NOW,
            )?;
        }
        log.append(
            &encode_batch(&[record(Some("gone"), None)], NOW, (-1, -1, -1)),
            NOW,
        )?;
        for i in 0..20 {
            let key = format!("filler{i}");
            log.append(
                &encode_batch(&[record(Some(&key), Some("f"))], NOW, (-1, -1, -1)),
                NOW,
            )?;
        }
        flush(&mut log)?;
        pass(&mut log)?;
        let gone: Vec<_> = everything(&log)
            .into_iter()
            .filter(|(_, k, _)| k == "gone")
            .collect();
        assert_eq!(
            gone,
            vec![(20, "gone".to_string(), None)],
            "only the tombstone is left"
        );
        // Before the horizon nothing is due; after it, a pass drops the tombstone.
        assert!(log
            .dirtiness(log.end(), NOW + 4_999)
            .is_some_and(|d| !d.due));
        let job = log
            .cleaning_job(log.end(), NOW + 5_000)
            .ok_or("the horizon makes a pass due")?;
        let settings = PassSettings {
            dedupe_buffer_bytes: 1 << 20,
            io_max_bytes_per_second: None,
            tombstones: TombstonePolicy {
                now_ms: NOW + 5_000,
                delete_retention_ms: 5_000,
            },
        };
        let outcome = run_pass(&job, &settings)?;
        log.install_cleaned(&job, &outcome)?.1.delete()?;
        assert!(
            everything(&log).iter().all(|(_, k, _)| k != "gone"),
            "the tombstone is gone"
        );
        assert_eq!(outcome.next_horizon, None);
        Ok(())
    }

    #[test]
    fn a_topic_codec_recompresses_other_codecs_on_the_way_in(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = open(dir.path(), false)?;
        log.set_config(LogConfig {
            compression: Some((4, None)),
            ..compacted()
        });
        let plain = encode_batch(
            &[record(Some("a"), Some("1")), record(Some("b"), Some("2"))],
            NOW,
            (7, 0, 0),
        );
        let info = log.append(&plain, NOW)?;
        assert_eq!(info.recompressed.map(|(n, _)| n), Some(1));
        let stored = log.read(Offset(0), 1 << 20, true)?.ok_or("a batch")?;
        let header = super::super::batch::BatchHeader::parse_checked(&stored)?;
        assert_eq!(header.compression(), 4, "stored as zstd");
        assert_eq!(
            (header.producer_id(), header.base_sequence()),
            (7, 0),
            "producer fields kept"
        );
        assert_eq!(
            everything(&log),
            vec![
                (0, "a".into(), Some("1".into())),
                (1, "b".into(), Some("2".into()))
            ]
        );
        let mut zstd = stored.to_vec();
        zstd[0..8].copy_from_slice(&0i64.to_be_bytes());
        let again = log.append(&zstd, NOW)?;
        assert!(
            again.recompressed.is_none(),
            "a batch already in the codec is taken as is"
        );
        Ok(())
    }

    #[test]
    fn a_follower_appends_a_compacted_leaders_batches_across_gaps(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let mut log = open(dir.path(), false)?;
        let mut batch = encode_batch(&[record(Some("a"), Some("1"))], NOW, (-1, -1, -1));
        batch[0..8].copy_from_slice(&7i64.to_be_bytes());
        let info = log.append_replicated(&batch)?;
        assert_eq!((info.last_offset, log.end()), (7, 8));
        let mut below = batch.clone();
        below[0..8].copy_from_slice(&5i64.to_be_bytes());
        assert!(matches!(
            log.append_replicated(&below),
            Err(AppendError::NotContiguous { .. })
        ));
        Ok(())
    }
}
