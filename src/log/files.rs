//! The log directory's small files and how they are written: the log start and
//! cleaner checkpoint (one offset each), producer-state snapshots, atomic replacement
//! (temporary file, fsync, rename, directory fsync), and listing files by base offset.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The log start offset, written by DeleteRecords and by a reset.
pub(super) const LOG_START_FILE: &str = "log-start-offset";
/// The cleaner checkpoint of this log (one offset, as `log-start-offset`).
pub(super) const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

pub(super) fn snapshot_path(dir: &Path, offset: i64) -> PathBuf {
    dir.join(format!("{offset:020}.snapshot"))
}

/// Writes a producer-state snapshot and keeps only the two newest (older ones are
/// never read). With a `guard`, the snapshot is put in place only if the log's shape
/// count still is the one given: a snapshot of a log that was truncated since it was
/// taken would describe batches that are gone.
pub(super) fn write_snapshot_file(
    dir: &Path,
    offset: i64,
    raw: &[u8],
    guard: Option<(&Mutex<u64>, u64)>,
) -> io::Result<()> {
    if !write_atomically_if(&snapshot_path(dir, offset), raw, guard)? {
        return Ok(());
    }
    let snapshots = list_suffix(dir, ".snapshot")?;
    if snapshots.len() > 2 {
        for old in &snapshots[..snapshots.len() - 2] {
            let _ = std::fs::remove_file(snapshot_path(dir, *old));
        }
    }
    Ok(())
}

pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Base offsets of the files in `dir` named `<20 digits><suffix>`, sorted.
pub(super) fn list_suffix(dir: &Path, suffix: &str) -> io::Result<Vec<i64>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(stem) = name.strip_suffix(suffix) {
            if stem.len() == 20 {
                if let Ok(offset) = stem.parse::<i64>() {
                    found.push(offset);
                }
            }
        }
    }
    found.sort_unstable();
    Ok(found)
}

pub(super) fn read_i64_file(path: &Path) -> io::Result<Option<i64>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text.trim().parse().ok()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes `data` to `path` so that a crash leaves either the old or the new file:
/// write a temporary file, fsync it, rename it over, fsync the directory.
pub fn write_atomically(path: &Path, data: &[u8]) -> io::Result<()> {
    write_atomically_if(path, data, None).map(|_| ())
}

/// [`write_atomically`], renaming only if `guard`'s count (checked under its lock, so
/// that no truncation runs between the check and the rename) is the one given.
/// Returns whether the file was put in place.
pub(super) fn write_atomically_if(
    path: &Path,
    data: &[u8],
    guard: Option<(&Mutex<u64>, u64)>,
) -> io::Result<bool> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    // A temporary name of its own per call: two writers of the same file must not
    // rename each other's temporary file away.
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let unique = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut tmp_name = path.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".{}.{unique}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(data)?;
        file.sync_all()?;
    }
    match guard {
        None => std::fs::rename(&tmp, path)?,
        Some((shape, generation)) => {
            let current = shape.lock().unwrap_or_else(|e| e.into_inner());
            if *current != generation {
                drop(current);
                let _ = std::fs::remove_file(&tmp);
                return Ok(false);
            }
            std::fs::rename(&tmp, path)?;
        }
    }
    if let Some(parent) = path.parent() {
        sync_dir(parent)?;
    }
    Ok(true)
}
