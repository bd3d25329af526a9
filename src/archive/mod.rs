//! The Parquet archive of topics with `archive.enable` (issue 14, in progress).
//!
//! Built so far: the manifest (what is archived, pure) and the retention gate in
//! `log` (a segment of an archived topic is deleted only below the manifest's
//! `next_offset`). Not yet: the Parquet writer, the store and the exporter task.

pub mod manifest;
