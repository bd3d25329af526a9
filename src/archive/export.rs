//! The exporter: a background task that, every `--archive-interval-ms`, visits each
//! partition of an archived topic held here. Every replica reads the partition's
//! manifest and sets its log's retention gate from it (a follower that becomes leader
//! must still hold what the archive lacks). The leader then archives what expired:
//! it deletes orphans (objects a stopped export wrote but never listed), reads the
//! expired segments below the high watermark batch by batch within the memory budget
//! and the I/O rate, writes each Parquet object and then the manifest that lists it.
//!
//! Exactly once in effect: an object's name derives from its first and last offsets;
//! only listed objects count; the manifest is written after its object and only moves
//! forward from the offset it was read at. A crash between the two writes leaves an
//! orphan that the next export deletes before it rewrites those records.
//!
//! Never on the produce or fetch path: the log lock is held only to copy out a view
//! of a few batches; the encoding runs on a blocking thread.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use super::manifest::{self, Entry, Manifest};
use super::parquet::ObjectBuilder;
use super::{Archive, ArchiveError};
use crate::log::batch::batches;
use crate::log::records::MAX_DECOMPRESSED_BATCH_BYTES;
use crate::log::retention::ArchiveWork;
use crate::log::throttle::Throttle;
use crate::log::txn::{AbortedTxn, CommittedFilter};
use crate::log::ArchiveGate;
use crate::metrics as m;
use crate::model::now_ms;
use crate::replication::{Partition, ReplicaManager};

/// Largest read from the log at a time: a few batches' worth, so the log lock is
/// short and the budget is respected closely.
const READ_CHUNK_BYTES: u64 = 1 << 20;

/// Runs until `shutdown`.
pub async fn run(
    archive: Arc<Archive>,
    replicas: Arc<ReplicaManager>,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(archive.config().interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        for partition in replicas.all_partitions() {
            if shutdown.is_cancelled() {
                return;
            }
            let (archives, _) = partition.archive_settings();
            if archives {
                visit(&archive, &partition).await;
            }
        }
    }
}

/// One partition's turn: gate retention, and on the leader, export.
async fn visit(archive: &Archive, partition: &Partition) {
    let id = partition.id();
    let started = Instant::now();
    match export(archive, partition).await {
        Ok(Some(exported)) => {
            let elapsed = started.elapsed();
            metrics::histogram!(m::ARCHIVE_EXPORT_SECONDS).record(elapsed.as_secs_f64());
            tracing::info!(
                partition = %id,
                elapsed_ms = elapsed.as_millis() as u64,
                objects = exported.objects,
                records = exported.records,
                log_bytes = exported.log_bytes,
                next_offset = exported.next_offset,
                "archived"
            );
        }
        Ok(None) => {}
        Err(error) => {
            metrics::counter!(m::ARCHIVE_FAILURES_TOTAL, "topic" => id.topic.clone()).increment(1);
            tracing::warn!(
                partition = %id,
                %error,
                "archive export failed; retention waits for it unless archive.on.failure=delete"
            );
        }
    }
}

/// What one export wrote.
#[derive(Debug, Default)]
struct Exported {
    objects: u64,
    records: u64,
    log_bytes: u64,
    next_offset: i64,
}

async fn export(
    archive: &Archive,
    partition: &Partition,
) -> Result<Option<Exported>, ArchiveError> {
    let id = partition.id();
    let mut manifest = match archive.manifest(&id.topic, id.partition).await {
        Ok(manifest) => manifest,
        Err(error) => {
            fail_gate(partition);
            if partition.is_leader() {
                let work = partition.archive_work(now_ms(), gate_offset(partition));
                report_pending(partition, work.as_ref());
            }
            return Err(error);
        }
    };
    partition.set_archive_gate(ArchiveGate::Below(manifest.next_offset));
    if !partition.is_leader() {
        return Ok(None);
    }
    let leader_epoch = partition.leader_epoch().0;
    let log_start = partition.offsets().log_start().0;
    let mut changed = false;
    if manifest.next_offset < log_start {
        // Gone before the archive had it: DeleteRecords, or retention that did not
        // wait (a low disk, archive.on.failure=delete). Say so, and go on from there.
        manifest.skip_to(log_start);
        changed = true;
    }
    let now = now_ms();
    let work = partition.archive_work(now, manifest.next_offset);
    report_pending(partition, work.as_ref());
    let Some(work) = work else {
        if changed {
            write_manifest(archive, partition, leader_epoch, &mut manifest).await?;
        }
        return Ok(None);
    };
    for orphan in archive.orphans(&manifest).await? {
        tracing::info!(partition = %id, object = %orphan, "deleting an object no manifest lists");
        archive.delete(&orphan).await?;
    }
    let result = export_work(archive, partition, &mut manifest, &work, leader_epoch).await;
    if let Err(error) = &result {
        // What was listed before the failure stays archived; retention may go that far.
        tracing::debug!(partition = %id, %error, "export stopped");
        fail_gate(partition);
    }
    let left = partition.archive_work(now_ms(), gate_offset(partition));
    report_pending(partition, left.as_ref());
    result.map(Some)
}

/// The archive lag and pending bytes of a partition led here: how long its oldest
/// expired, unarchived segment has waited, and how much expired log waits.
fn report_pending(partition: &Partition, work: Option<&ArchiveWork>) {
    let id = partition.id();
    let labels = [
        ("topic", id.topic.clone()),
        ("partition", id.partition.to_string()),
    ];
    let (lag_ms, bytes) = work.map_or((0, 0), |w| {
        (now_ms().saturating_sub(w.expired_since_ms).max(0), w.bytes)
    });
    metrics::gauge!(m::ARCHIVE_LAG_SECONDS, &labels).set(lag_ms as f64 / 1000.0);
    metrics::gauge!(m::ARCHIVE_PENDING_BYTES, &labels).set(bytes as f64);
}

/// Everything below this is archived, as far as this broker last knew.
fn gate_offset(partition: &Partition) -> i64 {
    match partition.archive_gate() {
        ArchiveGate::Below(next) | ArchiveGate::Failed(next) => next,
        ArchiveGate::Unknown => i64::MIN,
    }
}

/// An export failed: retention keeps waiting at what is known to be archived, or, if
/// the topic says `archive.on.failure=delete`, goes on without the archive.
fn fail_gate(partition: &Partition) {
    partition.set_archive_gate(ArchiveGate::Failed(gate_offset(partition)));
}

/// Archives `work` object by object, each listed in the manifest as soon as written.
async fn export_work(
    archive: &Archive,
    partition: &Partition,
    manifest: &mut Manifest,
    work: &ArchiveWork,
    leader_epoch: i32,
) -> Result<Exported, ArchiveError> {
    let id = partition.id();
    let config = archive.config();
    let budget = usize::try_from(config.memory_bytes)
        .unwrap_or(usize::MAX)
        .max(1);
    let mut throttle = Throttle::new(config.io_max_bytes_per_second);
    let mut exported = Exported::default();
    let mut position = manifest.next_offset.max(work.from);
    while position < work.end {
        let mut builder = ObjectBuilder::new();
        let mut log_bytes = 0u64;
        while position < work.end && builder.data_bytes() < budget {
            let before = position;
            let (chunk, aborted) = read_chunk(partition, position)?;
            let read = chunk.len() as u64;
            let mut committed = CommittedFilter::new(aborted);
            for header in batches(&chunk) {
                let header =
                    header.map_err(|e| ArchiveError::Log(format!("{id} at {position}: {e}")))?;
                if header.base_offset() >= work.end {
                    break;
                }
                // Aborted transactions' records stay out, as a read_committed consumer
                // never sees them; markers add nothing.
                if committed.keep(&header) {
                    builder.push_batch(&header, position, MAX_DECOMPRESSED_BATCH_BYTES)?;
                }
                log_bytes += header.total_bytes() as u64;
                position = position.max(header.last_offset() + 1);
                if builder.data_bytes() >= budget {
                    break;
                }
            }
            throttle.pay(read).await;
            if position == before {
                // A read always starts at the batch holding `position`; one that does not
                // move on would spin here for ever.
                return Err(ArchiveError::Log(format!("{id}: no batch at {position}")));
            }
        }
        if builder.is_empty() {
            // Only control batches: nothing to archive, nothing missing.
            manifest.advance_to(position);
            write_manifest(archive, partition, leader_epoch, manifest).await?;
            continue;
        }
        let entry = write_object(archive, id, builder, position, log_bytes, leader_epoch).await?;
        exported.objects += 1;
        exported.records += entry.records;
        exported.log_bytes += entry.log_bytes;
        let (records, bytes) = (entry.records, entry.bytes);
        manifest.push(entry)?;
        write_manifest(archive, partition, leader_epoch, manifest).await?;
        let topic = id.topic.clone();
        metrics::counter!(m::ARCHIVE_OBJECTS_TOTAL, "topic" => topic.clone()).increment(1);
        metrics::counter!(m::ARCHIVE_RECORDS_TOTAL, "topic" => topic.clone()).increment(records);
        metrics::counter!(m::ARCHIVE_BYTES_TOTAL, "topic" => topic.clone()).increment(log_bytes);
        metrics::counter!(m::ARCHIVE_OBJECT_BYTES_TOTAL, "topic" => topic).increment(bytes);
    }
    exported.next_offset = manifest.next_offset;
    Ok(exported)
}

/// Whole batches from `position` on, below the last stable offset, with the aborted
/// transactions among them.
fn read_chunk(
    partition: &Partition,
    position: i64,
) -> Result<(Bytes, Vec<AbortedTxn>), ArchiveError> {
    let read = partition
        .read(
            crate::model::Offset(position),
            READ_CHUNK_BYTES,
            true,
            crate::model::Isolation::ReadCommitted,
        )
        .map_err(|e| ArchiveError::Log(format!("{} at {position}: {e}", partition.id())))?;
    let aborted = read.aborted;
    read.records.map(|r| (r, aborted)).ok_or_else(|| {
        ArchiveError::Log(format!("{}: nothing to read at {position}", partition.id()))
    })
}

/// Encodes the object (on a blocking thread: it is CPU work) and writes it.
async fn write_object(
    archive: &Archive,
    id: &crate::model::TopicPartition,
    builder: ObjectBuilder,
    end_offset: i64,
    log_bytes: u64,
    leader_epoch: i32,
) -> Result<Entry, ArchiveError> {
    let (first, last) = match (builder.first_offset(), builder.last_offset()) {
        (Some(first), Some(last)) => (first, last),
        _ => return Err(ArchiveError::Log(format!("{id}: an empty object"))),
    };
    let (min_timestamp, max_timestamp) = builder.timestamps();
    let first_timestamp = builder.first_timestamp().unwrap_or(min_timestamp);
    let records = builder.records() as u64;
    let (topic, index) = (id.topic.clone(), id.partition);
    let file = tokio::task::spawn_blocking(move || builder.finish(&topic, index))
        .await
        .map_err(|e| ArchiveError::Log(format!("encoding task: {e}")))??;
    let path = manifest::object_path(
        &id.topic,
        id.partition,
        &manifest::utc_date(first_timestamp),
        first,
        last,
    );
    let bytes = file.len() as u64;
    archive.put(&path, Bytes::from(file)).await?;
    Ok(Entry {
        path,
        first_offset: first,
        last_offset: last,
        end_offset: end_offset.max(last + 1),
        records,
        bytes,
        log_bytes,
        min_timestamp,
        max_timestamp,
        leader_epoch,
        archived_at: now_ms(),
    })
}

/// Writes the manifest and moves the retention gate to it, unless this broker lost
/// the partition's leadership meanwhile (the new leader owns the manifest now; what
/// this one wrote without listing is an orphan it will delete).
async fn write_manifest(
    archive: &Archive,
    partition: &Partition,
    leader_epoch: i32,
    manifest: &mut Manifest,
) -> Result<(), ArchiveError> {
    if !partition.is_leader() || partition.leader_epoch().0 != leader_epoch {
        return Err(ArchiveError::Log(format!(
            "{}: no longer the leader of epoch {leader_epoch}",
            partition.id()
        )));
    }
    archive.write_manifest(manifest).await?;
    partition.set_archive_gate(ArchiveGate::Below(manifest.next_offset));
    Ok(())
}
