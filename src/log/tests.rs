//! The log's tests across its files: open and recovery, append, reads, retention,
//! truncation, flush.

use super::files::{list_suffix, read_i64_file, LOG_START_FILE};
use super::records::testing::{encode_batch, simple_batch, TestRecord};
use super::*;
use crate::model::{LeaderEpoch, Offset};

fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1024,
        index_bytes: 1024,
        index_interval_bytes: 128,
        ..LogConfig::default()
    }
}

fn fresh(dir: &Path) -> io::Result<Log> {
    Log::open(
        dir,
        small_config(),
        OpenMode {
            clean: false,
            recovery_point: 0,
        },
    )
}

#[test]
fn appends_roll_segments_and_read_back_in_order() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..40 {
        let info = log.append(&simple_batch(2, 1000 + i), 0)?;
        assert_eq!(info.base_offset, i * 2);
    }
    assert!(log.segment_count() > 3, "rolled by size");
    let mut offset = 0;
    while let Some(bytes) = log.read(Offset(offset), 300, true)? {
        for header in batch::batches(&bytes) {
            let header = header?;
            assert_eq!(header.base_offset(), offset);
            offset = header.last_offset() + 1;
        }
    }
    assert_eq!(offset, 80);
    assert!(
        log.read(Offset(81), 100, true).is_err(),
        "past the end is out of range"
    );
    Ok(())
}

#[test]
fn clean_close_and_unclean_crash_both_reopen_every_batch() -> Result<(), Box<dyn std::error::Error>>
{
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..30 {
        log.append(&simple_batch(1, i), 0)?;
    }
    log.close()?;
    let log = Log::open(
        dir.path(),
        small_config(),
        OpenMode {
            clean: true,
            recovery_point: 0,
        },
    )?;
    assert_eq!(log.end(), 30);
    drop(log); // a crash: no close, the active segment stays preallocated
    let mut log = fresh(dir.path())?;
    assert_eq!(log.end(), 30);
    assert_eq!(log.append(&simple_batch(1, 0), 0)?.base_offset, 30);
    Ok(())
}

#[test]
fn unclean_open_rescans_only_what_lies_past_the_recovery_point(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..40 {
        log.append(&simple_batch(2, i), 0)?;
    }
    let bases = list_suffix(dir.path(), ".log")?;
    assert!(bases.len() >= 3);
    let recovery_point = bases[2];
    drop(log); // crash
               // Flip a byte inside the first (flushed, sealed) segment's records.
    let first = segment::log_path(dir.path(), bases[0]);
    let mut raw = std::fs::read(&first)?;
    let last = raw.len() - 2;
    raw[last] ^= 0xff;
    std::fs::write(&first, raw)?;
    let trusted = Log::open(
        dir.path(),
        small_config(),
        OpenMode {
            clean: false,
            recovery_point,
        },
    )?;
    assert_eq!(
        trusted.log_end_offset().0,
        80,
        "flushed segments are not rescanned"
    );
    drop(trusted);
    let full = Log::open(
        dir.path(),
        small_config(),
        OpenMode {
            clean: false,
            recovery_point: 0,
        },
    )?;
    assert!(
        full.log_end_offset().0 < bases[1],
        "a full scan finds the corrupt batch and truncates there"
    );
    assert_eq!(
        full.segment_count(),
        1,
        "segments after a truncated one are deleted"
    );
    Ok(())
}

fn flush(log: &mut Log) -> io::Result<()> {
    let plan = log.flush_plan();
    plan.run()?;
    log.mark_flushed(&plan);
    Ok(())
}

#[test]
fn a_roll_leaves_its_syncs_to_the_next_flush_and_the_checkpoint_waits_for_them(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    log.append(&simple_batch(2, 0), 0)?;
    flush(&mut log)?;
    assert_eq!(log.checkpoint_offset().0, 2);
    // Append until the log rolls: no snapshot is written under the caller's lock.
    let first_segments = log.segment_count();
    let mut i = 0;
    while log.segment_count() == first_segments {
        log.append(&simple_batch(2, i), 0)?;
        i += 1;
    }
    let retired_base = *log.segments.keys().next().ok_or("no segment")?;
    let new_base = *log.segments.keys().next_back().ok_or("no segment")?;
    assert!(
        list_suffix(dir.path(), ".snapshot")?.is_empty(),
        "the roll wrote no snapshot itself"
    );
    assert_eq!(
        log.checkpoint_offset().0,
        retired_base.min(2),
        "a retired segment whose length is not synced is not trusted"
    );
    // A plan taken now carries the roll's work; work deferred after it stays pending.
    let plan = log.flush_plan();
    assert_eq!(plan.seals.len(), 1);
    assert!(plan.snapshot.is_some() && plan.dir_changes.is_some());
    plan.run()?;
    log.mark_flushed(&plan);
    assert_eq!(list_suffix(dir.path(), ".snapshot")?, vec![new_base]);
    assert_eq!(log.checkpoint_offset().0, log.end());
    let after = log.flush_plan();
    assert!(after.seals.is_empty() && after.snapshot.is_none() && after.dir_changes.is_none());
    Ok(())
}

#[test]
fn work_deferred_after_a_plan_was_taken_survives_that_plan(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..20 {
        log.append(&simple_batch(2, i), 0)?;
    }
    let plan = log.flush_plan();
    let (_, doomed) = log.delete_records_before(Offset(7))?;
    doomed.delete()?;
    plan.run()?;
    log.mark_flushed(&plan);
    assert_eq!(
        log.flush_plan().log_start,
        Some(7),
        "the log start deferred after the plan is still to be written"
    );
    assert_eq!(read_i64_file(&dir.path().join(LOG_START_FILE))?, None);
    flush(&mut log)?;
    assert_eq!(read_i64_file(&dir.path().join(LOG_START_FILE))?, Some(7));
    Ok(())
}

#[test]
fn a_crash_after_rolls_that_were_never_flushed_recovers_every_batch(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..40 {
        log.append(&simple_batch(2, i), 0)?;
    }
    assert!(log.segment_count() > 3);
    let checkpoint = log.checkpoint_offset().0;
    drop(log); // crash: no flush ran, so no deferred sync or snapshot either
    let log = Log::open(
        dir.path(),
        small_config(),
        OpenMode {
            clean: false,
            recovery_point: checkpoint,
        },
    )?;
    assert_eq!(log.end(), 80);
    Ok(())
}

#[test]
fn segments_left_below_the_log_start_are_deleted_at_open() -> Result<(), Box<dyn std::error::Error>>
{
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..40 {
        log.append(&simple_batch(2, i), 0)?;
    }
    let segments = log.segment_count();
    let (_, doomed) = log.delete_records_before(Offset(60))?;
    assert!(!doomed.is_empty());
    flush(&mut log)?;
    drop(doomed); // as if the unlink had failed: the files stay
    log.close()?;
    assert_eq!(list_suffix(dir.path(), ".log")?.len(), segments);
    let log = Log::open(
        dir.path(),
        small_config(),
        OpenMode {
            clean: true,
            recovery_point: 0,
        },
    )?;
    assert_eq!(log.log_start_offset().0, 60);
    assert_eq!(list_suffix(dir.path(), ".log")?.len(), log.segment_count());
    assert!(log.segment_count() < segments);
    Ok(())
}

#[test]
fn a_lowered_segment_size_rolls_the_active_segment_at_the_next_append(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut config = small_config();
    config.segment_bytes = 1 << 20;
    let mut log = Log::open(
        dir.path(),
        config.clone(),
        OpenMode {
            clean: false,
            recovery_point: 0,
        },
    )?;
    for i in 0..20 {
        log.append(&simple_batch(2, 1000 + i), 0)?;
    }
    assert_eq!(log.segment_count(), 1);
    config.segment_bytes = 1024;
    log.set_config(config);
    for i in 0..20 {
        log.append(&simple_batch(2, 2000 + i), 0)?;
    }
    assert!(
        log.segment_count() > 2,
        "{} segments: the new size must apply to the segment created with the old one",
        log.segment_count()
    );
    Ok(())
}

#[test]
fn an_archived_topic_keeps_expired_segments_until_the_archive_has_them(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    let mut config = small_config();
    config.retention_ms = 10;
    config.archive = true;
    log.set_config(config.clone());
    for i in 0..40 {
        log.append(&simple_batch(2, 1_000 + i), 0)?;
    }
    let segments = log.segment_count();
    assert!(segments > 2);
    // Before the manifest was read, nothing goes.
    let r = log.apply_retention(1_000_000, false)?;
    assert_eq!((r.counts().deleted, r.counts().unarchived), (0, 0));
    assert!(r.held > 0);
    assert_eq!(log.log_start_offset().0, 0);
    // Archived below an offset inside the log: exactly the segments ending at or
    // below it go, oldest first.
    let second_base = log.segments.keys().nth(1).copied().ok_or("segments")?;
    log.set_archive_gate(ArchiveGate::Below(second_base));
    let r = log.apply_retention(1_000_000, false)?;
    assert_eq!(r.counts().deleted, 1);
    assert_eq!(r.counts().unarchived, 0);
    r.doomed.delete()?;
    assert_eq!(log.log_start_offset().0, second_base);
    // A failed archive holds the rest while `archive.on.failure=wait`...
    log.set_archive_gate(ArchiveGate::Failed(second_base));
    let r = log.apply_retention(1_000_000, false)?;
    assert_eq!(r.counts().deleted, 0);
    // ...but a nearly full disk wins, and says how much went unarchived.
    let r = log.apply_retention(1_000_000, true)?;
    assert!(r.counts().deleted > 0);
    assert_eq!(r.counts().unarchived, r.counts().deleted);
    r.doomed.delete()?;
    assert_eq!(log.log_start_offset().0, log.end());
    // `archive.on.failure=delete` lets a failed archive's segments go.
    config.archive_failure_deletes = true;
    log.set_config(config);
    for i in 0..40 {
        log.append(&simple_batch(2, 1_000 + i), 0)?;
    }
    let r = log.apply_retention(1_000_000, false)?;
    assert!(r.counts().unarchived > 0);
    Ok(())
}

#[test]
fn retention_by_size_and_time_advances_log_start() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..40 {
        log.append(&simple_batch(2, 1_000 + i), 0)?;
    }
    let mut config = small_config();
    config.retention_bytes = 2048;
    log.set_config(config.clone());
    let doomed = log.apply_retention(0, false)?.doomed;
    assert!(!doomed.is_empty());
    doomed.delete()?;
    assert!(log.size_bytes() <= 2048 + 1024);
    assert!(log.log_start_offset().0 > 0);
    assert!(log.read(Offset(0), 100, true).is_err());
    config.retention_bytes = -1;
    config.retention_ms = 10;
    log.set_config(config);
    log.apply_retention(1_000_000, false)?.doomed.delete()?;
    assert_eq!(log.log_start_offset().0, log.end(), "everything expired");
    assert_eq!(log.append(&simple_batch(1, 0), 0)?.base_offset, 80);
    Ok(())
}

#[test]
fn delete_records_moves_log_start_and_survives_reopen() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..20 {
        log.append(&simple_batch(2, i), 0)?;
    }
    let (log_start, doomed) = log.delete_records_before(Offset(13))?;
    assert_eq!(log_start, Offset(13));
    doomed.delete()?;
    assert!(log.read(Offset(12), 100, true).is_err());
    log.close()?;
    let log = Log::open(
        dir.path(),
        small_config(),
        OpenMode {
            clean: true,
            recovery_point: 0,
        },
    )?;
    assert_eq!(log.log_start_offset().0, 13);
    Ok(())
}

#[test]
fn idempotent_retry_is_not_appended_twice_even_after_restart(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    let records = vec![TestRecord::default(); 2];
    let b0 = encode_batch(&records, 0, (5, 0, 0));
    let b1 = encode_batch(&records, 0, (5, 0, 2));
    assert_eq!(log.append(&b0, 0)?.base_offset, 0);
    assert_eq!(log.append(&b1, 0)?.base_offset, 2);
    assert_eq!(
        log.append(&b1, 0)?.base_offset,
        2,
        "duplicate answered with its offset"
    );
    assert_eq!(log.end(), 4);
    drop(log); // crash
    let mut log = fresh(dir.path())?;
    assert_eq!(
        log.append(&b1, 0)?.base_offset,
        2,
        "state rebuilt from the log"
    );
    let gap = encode_batch(&records, 0, (5, 0, 9));
    assert!(matches!(log.append(&gap, 0), Err(AppendError::Sequence(_))));
    Ok(())
}

#[test]
fn refuses_oversized_and_corrupt_batches_without_writing() -> Result<(), Box<dyn std::error::Error>>
{
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    let mut config = small_config();
    config.max_message_bytes = 100;
    log.set_config(config);
    assert!(matches!(
        log.append(&simple_batch(10, 0), 0),
        Err(AppendError::TooLarge { .. })
    ));
    let mut config = small_config();
    config.max_message_bytes = 1 << 20;
    log.set_config(config);
    assert!(matches!(
        log.append(&simple_batch(100, 0), 0),
        Err(AppendError::LargerThanSegment { .. })
    ));
    let mut config = small_config();
    config.max_message_bytes = 100;
    log.set_config(config);
    let mut bad = simple_batch(1, 0);
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(
        log.append(&bad, 0),
        Err(AppendError::Batch(BatchError::CrcMismatch { .. }))
    ));
    assert_eq!(log.end(), 0);
    Ok(())
}

#[test]
fn timestamps_find_offsets() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..10 {
        log.append(&simple_batch(1, 100 * i), 0)?;
    }
    assert_eq!(log.offset_for_timestamp(250), Some((3, 300)));
    assert_eq!(log.offset_for_timestamp(10_000), None);
    assert_eq!(log.max_timestamp(), Some((9, 900)));
    // Inside one uncompressed batch the exact record is found, not the batch end.
    let records: Vec<TestRecord> = [5, 9_000, 7]
        .iter()
        .map(|&d| TestRecord {
            timestamp_delta: d,
            ..TestRecord::default()
        })
        .collect();
    log.append(&encode_batch(&records, 1_000, (-1, -1, -1)), 0)?;
    assert_eq!(log.max_timestamp(), Some((11, 10_000)));
    Ok(())
}

// ---- replication: follower appends, truncation, epochs ----

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn open_with(dir: &Path, clean: bool, recovery_point: i64) -> io::Result<Log> {
    Log::open(
        dir,
        small_config(),
        OpenMode {
            clean,
            recovery_point,
        },
    )
}

/// (base offset, last offset, leader epoch, max timestamp) of a batch.
type BatchSummary = (i64, i64, i32, i64);

/// Every batch of the log.
fn batches_of(log: &Log) -> Result<Vec<BatchSummary>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset().0;
    while let Some(bytes) = log.read(Offset(offset), 1 << 20, true)? {
        for header in batch::batches(&bytes) {
            let header = header?;
            out.push((
                header.base_offset(),
                header.last_offset(),
                header.partition_leader_epoch(),
                header.max_timestamp(),
            ));
            offset = header.last_offset() + 1;
        }
    }
    assert_eq!(offset, log.end(), "reads reach the log end");
    Ok(out)
}

fn all_bytes(log: &Log) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset().0;
    while let Some(bytes) = log.read(Offset(offset), 1 << 20, true)? {
        out.extend_from_slice(&bytes);
        offset = batches_last(&bytes)? + 1;
    }
    Ok(out)
}

fn batches_last(bytes: &[u8]) -> Result<i64, BatchError> {
    let mut last = -1;
    for header in batch::batches(bytes) {
        last = header?.last_offset();
    }
    Ok(last)
}

/// A leader log: plain batches under epoch 0, idempotent ones under epoch 3,
/// rolled over several segments.
fn leader_log(dir: &Path) -> Result<Log, Box<dyn std::error::Error>> {
    let mut log = fresh(dir)?;
    log.start_leader_epoch(LeaderEpoch(0))?;
    for i in 0..20 {
        log.append(&simple_batch(2, 1_000 + i), 0)?;
    }
    log.start_leader_epoch(LeaderEpoch(3))?;
    let records = vec![TestRecord::default(); 3];
    for seq in 0..20 {
        log.append(
            &encode_batch(&records, 2_000 + i64::from(seq), (7, 1, seq * 3)),
            0,
        )?;
    }
    assert!(log.segment_count() >= 3, "the test spans segments");
    Ok(log)
}

#[test]
fn a_follower_copies_its_leader_byte_for_byte() -> TestResult {
    let leader_dir = tempfile::tempdir()?;
    let follower_dir = tempfile::tempdir()?;
    let leader = leader_log(leader_dir.path())?;
    let mut follower = fresh(follower_dir.path())?;
    let mut offset = 0;
    while let Some(bytes) = leader.read(Offset(offset), 300, true)? {
        // A fetch response may end mid-batch: append it with half a batch more.
        let mut chunk = bytes.to_vec();
        if let Ok(Some(next)) = leader.read(Offset(batches_last(&bytes)? + 1), 1, true) {
            chunk.extend_from_slice(&next[..next.len() / 2]);
        }
        let info = follower.append_replicated(&chunk)?;
        assert_eq!(info.base_offset, offset);
        offset = info.last_offset + 1;
    }
    assert_eq!(follower.log_end_offset().0, leader.log_end_offset().0);
    assert_eq!(all_bytes(&follower)?, all_bytes(&leader)?, "same bytes");
    assert_eq!(batches_of(&follower)?, batches_of(&leader)?);
    assert_eq!(
        follower.segments.keys().collect::<Vec<_>>(),
        leader.segments.keys().collect::<Vec<_>>(),
        "same segment boundaries"
    );
    for (&base, segment) in &follower.segments {
        let size = segment.size() as usize;
        let ours = std::fs::read(segment::log_path(follower_dir.path(), base))?;
        let theirs = std::fs::read(segment::log_path(leader_dir.path(), base))?;
        assert_eq!(ours[..size], theirs[..size], "segment {base} identical");
    }
    assert_eq!(follower.epoch_entries(), &[(0, 0), (3, 40)]);
    assert_eq!(follower.epoch_entries(), leader.epoch_entries());
    assert_eq!(follower.latest_epoch().map(|e| e.0), Some(3));
    assert_eq!(
        follower.end_offset_for_epoch(LeaderEpoch(0)),
        (LeaderEpoch(0), Offset(40))
    );
    assert_eq!(follower.producers, leader.producers, "producer state");
    // Promoted, the follower knows the producer: a retry is a duplicate and the
    // next sequence is accepted.
    follower.start_leader_epoch(LeaderEpoch(4))?;
    let records = vec![TestRecord::default(); 3];
    let retry = encode_batch(&records, 0, (7, 1, 57));
    assert_eq!(follower.append(&retry, 0)?.base_offset, 97);
    let next = encode_batch(&records, 0, (7, 1, 60));
    assert_eq!(follower.append(&next, 0)?.base_offset, 100);
    assert_eq!(follower.latest_epoch().map(|e| e.0), Some(4));
    // The epoch file came along too, and survives a restart.
    follower.close()?;
    let reopened = open_with(follower_dir.path(), true, 0)?;
    assert_eq!(reopened.epoch_entries(), &[(0, 0), (3, 40), (4, 100)]);
    Ok(())
}

#[test]
fn a_set_going_backwards_an_overlap_or_a_corrupt_batch_is_refused_with_nothing_written(
) -> TestResult {
    // A gap is not refused: a compacted leader's log has them where the cleaner
    // dropped whole batches (compaction's tests append across one).
    let leader_dir = tempfile::tempdir()?;
    let follower_dir = tempfile::tempdir()?;
    let leader = leader_log(leader_dir.path())?;
    let mut follower = fresh(follower_dir.path())?;
    let first = leader.read(Offset(0), 1, true)?.ok_or("no batch")?;
    let second = leader.read(Offset(2), 1, true)?.ok_or("no batch")?;
    let third = leader.read(Offset(4), 1, true)?.ok_or("no batch")?;
    let backwards = [&third[..], &first[..]].concat();
    assert!(matches!(
        follower.append_replicated(&backwards),
        Err(AppendError::NotContiguous {
            expected: 6,
            found: 0
        })
    ));
    let mut corrupt = [&first[..], &second[..]].concat();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    assert!(matches!(
        follower.append_replicated(&corrupt),
        Err(AppendError::Batch(BatchError::CrcMismatch { .. }))
    ));
    assert_eq!(follower.log_end_offset().0, 0, "nothing of any refused set");
    assert!(follower.epoch_entries().is_empty());
    follower.append_replicated(&first)?;
    assert!(matches!(
        follower.append_replicated(&first),
        Err(AppendError::NotContiguous {
            expected: 2,
            found: 0
        })
    ));
    let nothing = follower.append_replicated(&second[..20])?;
    assert!(
        nothing.last_offset < nothing.base_offset,
        "only a partial batch"
    );
    assert_eq!(follower.log_end_offset().0, 2);
    Ok(())
}

fn log_file_lengths(dir: &Path) -> io::Result<BTreeMap<String, u64>> {
    let mut lengths = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.contains(".log") {
            lengths.insert(name, entry.metadata()?.len());
        }
    }
    Ok(lengths)
}

#[test]
fn truncation_across_segments_then_appends_reads_only_the_new_batches() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..40 {
        log.append(&simple_batch(2, 1_000 + i), 0)?;
    }
    let segments = log.segment_count();
    assert!(segments > 3);
    // Into the middle of the second segment, an offset inside a batch: rounded
    // down to the batch's start.
    let second = *log.segments.keys().nth(1).ok_or("no segment")?;
    let cut = second + 5;
    let doomed = log.truncate_to(Offset(cut))?;
    assert_eq!(log.end(), second + 4);
    assert_eq!(doomed.len(), segments - 2, "the segments above go");
    doomed.delete()?;
    assert_eq!(list_suffix(dir.path(), ".log")?.len(), 2);
    for i in 0..30 {
        log.append(&simple_batch(2, 5_000 + i), 0)?;
    }
    let batches = batches_of(&log)?;
    let mut expected = 0;
    for &(base, last, _, ts) in &batches {
        assert_eq!(base, expected, "contiguous");
        expected = last + 1;
        if base < second + 4 {
            assert!(ts < 5_000, "an old batch below the cut");
        } else {
            assert!(ts >= 5_000, "offset {base} holds a truncated batch");
        }
    }
    assert_eq!(expected, second + 4 + 60);
    assert!(
        log.segment_count() > 2,
        "the shortened segment rolled again"
    );
    assert!(
        log.truncate_to(Offset(1_000))?.is_empty(),
        "past the end: a no-op"
    );
    // Back to the very start of a segment: it goes, an empty one starts there.
    let third = *log.segments.keys().nth(2).ok_or("no segment")?;
    log.truncate_to(Offset(third))?.delete()?;
    assert_eq!(log.end(), third);
    assert_eq!(log.segments.keys().next_back(), Some(&third));
    assert_eq!(log.append(&simple_batch(1, 9_000), 0)?.base_offset, third);
    Ok(())
}

#[test]
fn truncating_at_the_log_end_drops_an_epoch_that_never_got_a_batch() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    log.start_leader_epoch(LeaderEpoch(3))?;
    log.append(&simple_batch(2, 1_000), 0)?;
    // Elected in epoch 5, deposed before appending: the entry (5, 2) has no batch.
    log.start_leader_epoch(LeaderEpoch(5))?;
    assert_eq!(log.latest_epoch().map(|e| e.0), Some(5));
    assert!(log.truncate_to(Offset(2))?.is_empty());
    assert_eq!(log.end(), 2, "no batch cut");
    assert_eq!(
        log.latest_epoch().map(|e| e.0),
        Some(3),
        "the empty epoch went"
    );
    assert_eq!(log.epoch_entries(), &[(3, 0)]);
    // Past the end too, as Kafka: the cache is cut at the log end, not the target.
    log.start_leader_epoch(LeaderEpoch(6))?;
    assert!(log.truncate_to(Offset(10))?.is_empty());
    assert_eq!(log.epoch_entries(), &[(3, 0)]);
    Ok(())
}

#[test]
fn a_view_taken_before_a_truncation_stays_readable_and_no_file_shrinks_under_it() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..40 {
        log.append(&simple_batch(2, 1_000 + i), 0)?;
    }
    let second = *log.segments.keys().nth(1).ok_or("no segment")?;
    let active = *log.segments.keys().next_back().ok_or("no segment")?;
    // Views of the tail of a retired segment and of the active one.
    let retired_view = log
        .read(Offset(second + 2), 1 << 20, true)?
        .ok_or("no data")?;
    let active_view = log.read(Offset(active), 1 << 20, true)?.ok_or("no data")?;
    let (retired_copy, active_copy) = (retired_view.to_vec(), active_view.to_vec());
    let before = log_file_lengths(dir.path())?;
    let doomed = log.truncate_to(Offset(second + 2))?;
    assert_eq!(log.end(), second + 2);
    assert!(
        log.segments.contains_key(&(second + 2)),
        "a view reaches past the cut: a new segment starts there"
    );
    for i in 0..30 {
        log.append(&simple_batch(2, 5_000 + i), 0)?;
    }
    let flushed = log.flush_plan();
    flushed.run()?;
    log.mark_flushed(&flushed);
    doomed.delete()?; // unlinking a mapped file is safe
    assert_eq!(retired_view[..], retired_copy[..], "no byte rewritten");
    assert_eq!(active_view[..], active_copy[..]);
    let after = log_file_lengths(dir.path())?;
    for (name, length) in &before {
        if let Some(now) = after.get(name) {
            assert!(now >= length, "{name} shrank from {length} to {now}");
        }
    }
    let batches = batches_of(&log)?;
    assert!(batches
        .iter()
        .all(|&(base, _, _, ts)| (base < second + 2) == (ts < 5_000)));
    drop((retired_view, active_view));
    // The stale tail of the retired segment stays bounded after a crash and after
    // a clean restart alike.
    let end = log.end();
    let checkpoint = log.checkpoint_offset().0;
    drop(log);
    for (clean, recovery_point) in [(false, checkpoint), (false, 0)] {
        let reopened = open_with(dir.path(), clean, recovery_point)?;
        assert_eq!(reopened.log_end_offset().0, end);
        assert_eq!(batches_of(&reopened)?, batches);
    }
    let mut reopened = open_with(dir.path(), false, checkpoint)?;
    reopened.close()?;
    let reopened = open_with(dir.path(), true, 0)?;
    assert_eq!(batches_of(&reopened)?, batches);
    Ok(())
}

/// Truncates a flushed log, appends new batches, and crashes: whichever recovery
/// checkpoint the restart uses (before or after the truncation), and whether or
/// not the removed segments' files were deleted, no truncated batch comes back.
#[test]
fn truncated_batches_never_come_back_after_a_crash() -> TestResult {
    // (cut as a segment index and an offset within it, append afterwards, delete doomed)
    for (segment_index, within, append_after, delete) in [
        (usize::MAX, 2, false, false), // the active segment
        (usize::MAX, 2, true, true),
        (1, 4, true, false), // a retired segment
        (1, 4, false, true),
        (0, 6, true, true),
    ] {
        let dir = tempfile::tempdir()?;
        let mut log = fresh(dir.path())?;
        for i in 0..40 {
            log.append(&simple_batch(2, 1_000 + i), 0)?;
        }
        flush(&mut log)?;
        let old_checkpoint = log.checkpoint_offset().0;
        assert_eq!(old_checkpoint, 80);
        let bases: Vec<i64> = log.segments.keys().copied().collect();
        let base = *bases.get(segment_index).unwrap_or(&bases[bases.len() - 1]);
        let cut = base + within;
        let doomed = log.truncate_to(Offset(cut))?;
        assert!(
            log.checkpoint_offset().0 <= cut,
            "the recovery point dropped"
        );
        if delete {
            doomed.delete()?;
        } else {
            drop(doomed); // crash before the unlink
        }
        if append_after {
            for i in 0..3 {
                // Same size as the cut batches: a stale one right after them would parse.
                log.append(&simple_batch(2, 7_000 + i), 0)?;
            }
        }
        let expected = batches_of(&log)?;
        let not_flushed_checkpoint = log.checkpoint_offset().0;
        let plan = log.flush_plan();
        plan.run()?;
        log.mark_flushed(&plan);
        let new_checkpoint = log.checkpoint_offset().0;
        assert_eq!(new_checkpoint, log.end());
        drop(log); // crash
        for recovery_point in [old_checkpoint, not_flushed_checkpoint, new_checkpoint, 0] {
            let reopened = open_with(dir.path(), false, recovery_point)?;
            let case = format!("cut {cut}, recovery point {recovery_point}");
            assert_eq!(batches_of(&reopened)?, expected, "{case}");
            assert!(
                list_suffix(dir.path(), ".log")?
                    .iter()
                    .all(|&b| b <= reopened.log_end_offset().0),
                "{case}: no segment file above the log end"
            );
            drop(reopened);
        }
    }
    Ok(())
}

#[test]
fn a_clean_restart_after_truncation_keeps_the_cut() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..40 {
        log.append(&simple_batch(2, 1_000 + i), 0)?;
    }
    let second = *log.segments.keys().nth(1).ok_or("no segment")?;
    log.truncate_to(Offset(second + 2))?.delete()?;
    log.append(&simple_batch(1, 9_000), 0)?;
    let expected = batches_of(&log)?;
    log.close()?;
    let log = open_with(dir.path(), true, 0)?;
    assert_eq!(batches_of(&log)?, expected);
    assert_eq!(log.end(), second + 3);
    Ok(())
}

#[test]
fn producer_state_after_truncation_forgets_what_was_cut() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    let records = vec![TestRecord::default(); 2];
    // Enough batches to roll (and snapshot) a few times, all from producer 5.
    let mut seq = 0;
    while log.segment_count() < 4 {
        log.append(&encode_batch(&records, 0, (5, 0, seq)), 0)?;
        seq += 2;
        if log.segment_count() == 2 {
            flush(&mut log)?; // a snapshot file at the second segment's base
        }
    }
    flush(&mut log)?;
    let snapshots = list_suffix(dir.path(), ".snapshot")?;
    assert!(!snapshots.is_empty());
    let cut = *log.segments.keys().nth(1).ok_or("no segment")? + 4;
    log.truncate_to(Offset(cut))?.delete()?;
    assert!(
        list_suffix(dir.path(), ".snapshot")?
            .iter()
            .all(|&s| s <= cut),
        "snapshots above the cut go"
    );
    // The batch just below the cut is a duplicate; the one at the cut is new.
    let kept = encode_batch(&records, 0, (5, 0, (cut - 2) as i32));
    assert_eq!(log.append(&kept, 0)?.base_offset, cut - 2, "duplicate");
    assert_eq!(log.end(), cut);
    let cut_away = encode_batch(&records, 0, (5, 0, cut as i32));
    assert_eq!(log.append(&cut_away, 0)?.base_offset, cut, "appended anew");
    let beyond = encode_batch(&records, 0, (5, 0, cut as i32 + 4));
    assert!(matches!(
        log.append(&beyond, 0),
        Err(AppendError::Sequence(_))
    ));
    // And so after a crash.
    drop(log);
    let mut log = fresh(dir.path())?;
    assert_eq!(log.append(&cut_away, 0)?.base_offset, cut, "duplicate now");
    Ok(())
}

#[test]
fn a_flush_planned_before_a_truncation_marks_nothing_and_writes_no_snapshot() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    let mut i = 0;
    while log.segment_count() < 3 {
        log.append(&simple_batch(2, i), 0)?;
        i += 1;
    }
    let plan = log.flush_plan();
    let planned_snapshot = plan.snapshot.as_ref().map(|(at, _)| *at).ok_or("none")?;
    let first_end = log.segments.values().next().ok_or("none")?.next_offset();
    log.truncate_to(Offset(first_end - 2))?.delete()?;
    assert!(planned_snapshot > log.end());
    plan.run()?;
    assert!(!log.mark_flushed(&plan), "a stale plan does not count");
    assert!(log.recovery_point().0 <= log.end());
    assert!(
        !list_suffix(dir.path(), ".snapshot")?.contains(&planned_snapshot),
        "a stale plan wrote its snapshot above the cut"
    );
    assert!(log.unflushed_bytes() < u64::MAX);
    flush(&mut log)?;
    assert_eq!(log.checkpoint_offset().0, log.end());
    Ok(())
}

#[test]
fn reset_starts_an_empty_log_at_an_offset() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    log.start_leader_epoch(LeaderEpoch(2))?;
    let records = vec![TestRecord::default(); 2];
    for seq in 0..30 {
        log.append(&encode_batch(&records, 0, (9, 0, seq * 2)), 0)?;
    }
    let view = log.read(Offset(0), 1 << 20, true)?.ok_or("no data")?;
    let copy = view.to_vec();
    let doomed = log.reset_to(Offset(1_000))?;
    assert!(doomed.len() > 1);
    assert_eq!((log.log_start_offset().0, log.end()), (1_000, 1_000));
    assert!(log.epoch_entries().is_empty() && log.producers.is_empty());
    assert!(log.read(Offset(0), 100, true).is_err());
    doomed.delete()?;
    assert_eq!(view[..], copy[..], "a view of a reset log stays readable");
    // A replicated batch at 1000 continues it.
    let leader_dir = tempfile::tempdir()?;
    let mut leader = fresh(leader_dir.path())?;
    leader.reset_to(Offset(1_000))?.delete()?;
    leader.start_leader_epoch(LeaderEpoch(5))?;
    leader.append(&encode_batch(&records, 0, (9, 0, 0)), 0)?;
    let batch = leader
        .read(Offset(1_000), 1 << 20, true)?
        .ok_or("no data")?;
    log.append_replicated(&batch)?;
    assert_eq!(log.epoch_entries(), &[(5, 1_000)]);
    flush(&mut log)?;
    drop(log);
    let log = fresh(dir.path())?;
    assert_eq!((log.log_start_offset().0, log.end()), (1_000, 1_002));
    assert_eq!(list_suffix(dir.path(), ".log")?, vec![1_000]);
    assert_eq!(log.epoch_entries(), &[(5, 1_000)]);
    Ok(())
}

#[test]
fn a_replicated_batch_larger_than_this_replicas_segments_still_fits() -> TestResult {
    let leader_dir = tempfile::tempdir()?;
    let follower_dir = tempfile::tempdir()?;
    let mut config = small_config();
    config.segment_bytes = 1 << 20;
    let mut leader = Log::open(
        leader_dir.path(),
        config,
        OpenMode {
            clean: false,
            recovery_point: 0,
        },
    )?;
    leader.append(&simple_batch(100, 0), 0)?;
    leader.append(&simple_batch(100, 0), 0)?;
    let bytes = leader.read(Offset(0), 1 << 20, true)?.ok_or("no data")?;
    assert!(
        bytes.len() > 2 * 1024,
        "larger than the follower's segments"
    );
    let mut follower = fresh(follower_dir.path())?;
    assert_eq!(follower.append_replicated(&bytes)?.last_offset, 199);
    assert_eq!(all_bytes(&follower)?, all_bytes(&leader)?);
    drop(follower);
    assert_eq!(fresh(follower_dir.path())?.log_end_offset().0, 200);
    Ok(())
}

#[test]
fn read_below_stops_at_the_upper_bound() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..40 {
        log.append(&simple_batch(2, i), 0)?;
    }
    let bytes = log
        .read_below(Offset(0), 1 << 20, true, Offset(5))?
        .ok_or("no data")?;
    assert_eq!(batches_last(&bytes)?, 5, "batches based at 0, 2, 4");
    assert_eq!(
        log.read_below(Offset(6), 1 << 20, true, Offset(6))?,
        None,
        "at the bound"
    );
    assert_eq!(
        log.read_below(Offset(70), 1 << 20, true, Offset(80))?
            .map(|b| batches_last(&b)),
        Some(Ok(79))
    );
    // An upper bound past a segment boundary reads on from the segment holding it.
    let second = *log.segments.keys().nth(1).ok_or("no segment")?;
    let bytes = log
        .read_below(Offset(second), 1 << 20, true, Offset(second + 3))?
        .ok_or("none")?;
    assert_eq!(batches_last(&bytes)?, second + 3);
    assert!(
        log.read_below(Offset(81), 1, true, Offset(100)).is_err(),
        "out of range"
    );
    assert_eq!(
        log.read_below(Offset(80), 1, true, Offset(100))?,
        None,
        "the log end"
    );
    Ok(())
}

#[test]
fn the_epoch_checkpoint_is_rebuilt_when_missing_and_trimmed_to_the_recovered_log() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for (epoch, count) in [(1, 5), (4, 5), (6, 5)] {
        log.set_leader_epoch(LeaderEpoch(epoch));
        for i in 0..count {
            log.append(&simple_batch(2, i), 0)?;
        }
    }
    let expected = [(1, 0), (4, 10), (6, 20)];
    assert_eq!(log.epoch_entries(), &expected);
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(4)),
        (LeaderEpoch(4), Offset(20))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(5)),
        (LeaderEpoch(4), Offset(20))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(6)),
        (LeaderEpoch(6), Offset(30))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(7)),
        (LeaderEpoch(-1), Offset(-1))
    );
    assert_eq!(
        log.end_offset_for_epoch(LeaderEpoch(0)),
        (LeaderEpoch(0), Offset(0))
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join(epochs::CHECKPOINT_FILE))?,
        "0\n3\n1 0\n4 10\n6 20\n"
    );
    let plan = log.flush_plan();
    assert!(plan.sync_epochs, "the file's fsync waits for the flush");
    plan.run()?;
    log.mark_flushed(&plan);
    assert!(!log.flush_plan().sync_epochs);
    drop(log);
    std::fs::remove_file(dir.path().join(epochs::CHECKPOINT_FILE))?;
    let log = fresh(dir.path())?;
    assert_eq!(log.epoch_entries(), &expected, "rebuilt from batch headers");
    drop(log);
    std::fs::write(dir.path().join(epochs::CHECKPOINT_FILE), "garbage")?;
    let log = open_with(dir.path(), false, 30)?;
    assert_eq!(log.epoch_entries(), &expected, "rebuilt from a torn file");
    drop(log);
    // A file that knows epochs past the recovered log end (written before the
    // batches that a crash lost), and one that missed the tail's epochs.
    std::fs::write(
        dir.path().join(epochs::CHECKPOINT_FILE),
        "0\n4\n1 0\n4 10\n6 20\n8 30\n",
    )?;
    let log = open_with(dir.path(), false, 30)?;
    assert_eq!(
        log.epoch_entries(),
        &expected,
        "entries past the end dropped"
    );
    drop(log);
    // (The flush that moves the recovery point past a batch also syncs the file
    // with its epoch, so a file can only miss epochs starting past that point.)
    std::fs::write(dir.path().join(epochs::CHECKPOINT_FILE), "0\n1\n1 0\n")?;
    let log = open_with(dir.path(), false, 10)?;
    assert_eq!(
        log.epoch_entries(),
        &expected,
        "the recovered tail's epochs added"
    );
    Ok(())
}

/// The recovered tail is synced before the log serves: nothing else would flush a
/// partition that takes no new writes, and under `flush.messages` its leader's high
/// watermark waits for its own log to be durable (found by the power-loss shim: a
/// restarted broker served an empty topic until the flush interval).
#[test]
fn the_tail_recovered_after_a_crash_is_synced_before_the_log_serves() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    for i in 0..10 {
        log.append(&simple_batch(2, i), 0)?;
    }
    flush(&mut log)?;
    for i in 0..10 {
        log.append(&simple_batch(2, 100 + i), 0)?;
    }
    drop(log); // crash: the last ten batches were never synced
    let log = open_with(dir.path(), false, 20)?;
    assert_eq!(log.end(), 40);
    assert_eq!(log.recovery_point().0, 40, "synced at open");
    assert_eq!(log.checkpoint_offset().0, 40);
    assert_eq!(log.unflushed_bytes(), 0);
    Ok(())
}

#[test]
fn refuses_control_batches_but_replicates_them() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    let mut control = simple_batch(1, 0);
    control[21..23].copy_from_slice(&(1i16 << 5).to_be_bytes());
    let crc = crc32c::crc32c(&control[21..]);
    control[17..21].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        log.append(&control, 0),
        Err(AppendError::ControlBatch)
    ));
    assert_eq!(log.log_end_offset().0, 0, "nothing written");
    // A follower copies whatever its leader wrote.
    let info = log.append_replicated(&control)?;
    assert_eq!((info.base_offset, info.last_offset), (0, 0));
    Ok(())
}

// ---- transactions: producer state, last stable offset, aborted transactions ----

/// A transactional batch of `count` records from producer `pid` at sequence `seq`.
fn txn_batch(pid: i64, seq: i32, count: usize) -> Vec<u8> {
    let mut builder = records::BatchBuilder::new()
        .idempotent(pid, 0, seq)
        .with_attributes(txn::TRANSACTIONAL_BIT);
    for i in 0..count {
        builder.push(1_000 + i as i64, Some(b"k"), Some(&[7u8; 40]), &[]);
    }
    builder.build()
}

fn marker(pid: i64, coordinator_epoch: i32, kind: txn::MarkerKind) -> txn::TxnMarker {
    txn::TxnMarker {
        producer_id: crate::model::ProducerId(pid),
        producer_epoch: crate::model::ProducerEpoch(0),
        coordinator_epoch,
        kind,
    }
}

fn aborted(log: &Log, from: i64, to: i64) -> Vec<(i64, i64, i64)> {
    log.aborted_between(Offset(from), Offset(to))
        .iter()
        .map(|t| (t.producer_id, t.first_offset, t.last_offset))
        .collect()
}

#[test]
fn open_transactions_hold_the_last_stable_offset_and_aborts_are_listed() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    log.append(&txn_batch(7, 0, 2), 0)?; // 0..=1
    log.append(&simple_batch(1, 0), 0)?; // 2
    log.append(&txn_batch(8, 0, 1), 0)?; // 3
    assert_eq!(log.first_unstable_offset(Offset(4)), Some(Offset(0)));
    let abort = log.append_marker(&marker(7, 1, txn::MarkerKind::Abort), 0)?;
    assert_eq!(abort.base_offset, 4);
    assert_eq!(
        log.first_unstable_offset(Offset(4)),
        Some(Offset(0)),
        "a marker the high watermark has not passed leaves its transaction unstable"
    );
    assert_eq!(log.first_unstable_offset(Offset(5)), Some(Offset(3)));
    log.append_marker(&marker(8, 1, txn::MarkerKind::Commit), 0)?; // 5
    log.forget_replicated_txns(Offset(6));
    assert_eq!(log.first_unstable_offset(Offset(6)), None);
    assert_eq!(aborted(&log, 0, 6), vec![(7, 0, 4)]);
    assert_eq!(
        aborted(&log, 5, 6),
        vec![],
        "nothing aborted past the marker"
    );
    // A producer with an open transaction may not write outside it.
    log.append(&txn_batch(9, 0, 1), 0)?;
    let mut plain = records::BatchBuilder::new().idempotent(9, 0, 1);
    plain.push(1, Some(b"k"), None, &[]);
    assert!(matches!(
        log.append(&plain.build(), 0),
        Err(AppendError::Sequence(
            SequenceError::NotTransactional { .. }
        ))
    ));
    Ok(())
}

#[test]
fn a_marker_from_an_older_coordinator_is_fenced() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    log.append(&txn_batch(7, 0, 1), 0)?;
    log.append_marker(&marker(7, 5, txn::MarkerKind::Commit), 0)?;
    log.append(&txn_batch(7, 1, 1), 0)?;
    assert!(matches!(
        log.append_marker(&marker(7, 4, txn::MarkerKind::Abort), 0),
        Err(AppendError::Sequence(
            SequenceError::CoordinatorFenced { .. }
        ))
    ));
    assert!(
        log.first_unstable_offset(Offset(10)).is_some(),
        "still open"
    );
    Ok(())
}

#[test]
fn an_open_transaction_survives_rolls_and_a_restart_then_commits() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    log.append(&txn_batch(7, 0, 1), 0)?; // 0
    log.append(&txn_batch(8, 0, 1), 0)?; // 1
    log.append_marker(&marker(8, 1, txn::MarkerKind::Abort), 0)?; // 2
    for i in 0..30 {
        log.append(&simple_batch(2, i), 0)?;
    }
    assert!(log.segment_count() > 3, "rolled past the open transaction");
    flush(&mut log)?;
    drop(log);
    let mut log = open_with(dir.path(), true, 0)?;
    let end = log.log_end_offset();
    assert_eq!(log.first_unstable_offset(end), Some(Offset(0)));
    assert_eq!(aborted(&log, 0, end.0), vec![(8, 1, 2)]);
    log.append(&txn_batch(7, 1, 1), 0)?;
    log.append_marker(&marker(7, 1, txn::MarkerKind::Commit), 0)?;
    let end = log.log_end_offset();
    assert_eq!(log.first_unstable_offset(end), None);
    Ok(())
}

#[test]
fn truncating_a_marker_away_reopens_its_transaction() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    log.append(&txn_batch(7, 0, 1), 0)?; // 0
    log.append_marker(&marker(7, 1, txn::MarkerKind::Abort), 0)?; // 1
    assert_eq!(aborted(&log, 0, 2), vec![(7, 0, 1)]);
    log.truncate_to(Offset(1))?.delete()?;
    assert_eq!(aborted(&log, 0, 2), vec![]);
    assert_eq!(log.first_unstable_offset(Offset(1)), Some(Offset(0)));
    Ok(())
}

#[test]
fn segment_jitter_rolls_a_segment_early_by_a_share_that_stays_put() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    assert_eq!(log.roll_after_ms(), LogConfig::default().segment_ms);
    log.set_config(LogConfig {
        segment_ms: 10_000,
        segment_jitter_ms: 60_000,
        ..small_config()
    });
    // Below min(segment.jitter.ms, segment.ms), as Kafka's randomSegmentJitter.
    let first = log.roll_after_ms();
    assert!((1..=10_000).contains(&first), "{first}");
    assert_eq!(log.roll_after_ms(), first, "the same for the same segment");
    Ok(())
}

#[test]
fn create_time_batches_too_far_from_the_clock_are_refused() -> io::Result<()> {
    let dir = tempfile::tempdir()?;
    let mut log = fresh(dir.path())?;
    log.set_config(LogConfig {
        timestamp_before_max_ms: 1_000,
        timestamp_after_max_ms: 500,
        ..small_config()
    });
    let now = 1_000_000;
    let at = |ts: i64| simple_batch(1, ts);
    assert!(log.append(&at(now - 1_000), now).is_ok());
    assert!(log.append(&at(now + 500), now).is_ok());
    for ts in [now - 1_001, now + 501] {
        assert!(
            matches!(
                log.append(&at(ts), now),
                Err(AppendError::TimestampOutOfRange { .. })
            ),
            "{ts}"
        );
    }
    // LogAppendTime stamps the broker's clock: nothing to refuse.
    log.set_config(LogConfig {
        log_append_time: true,
        timestamp_after_max_ms: 0,
        ..small_config()
    });
    assert!(log.append(&at(now + 10_000), now).is_ok());
    Ok(())
}
