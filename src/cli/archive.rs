//! `tern archive ls|restore`: the archive read straight from its store (the same
//! `--archive-dir` / `--archive-url` flags as the broker); restoring is
//! `super::restore`'s.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use clap::{Args, Subcommand};
use serde_json::json;

use super::commands::Connection;
use super::output;
use super::restore::{manifests, restore, Range};
use crate::archive::{Archive, ArchiveConfig, Target};

/// Where the archive is: the broker's flags, same names and environment variables.
#[derive(Debug, Clone, Args)]
pub struct ArchiveLocation {
    /// The archive directory (the broker's --archive-dir)
    #[arg(
        long,
        global = true,
        env = "TERN_ARCHIVE_DIR",
        default_value = "./data/archive"
    )]
    pub archive_dir: PathBuf,
    /// An S3 archive, s3://BUCKET/PREFIX (the broker's --archive-url); replaces --archive-dir
    #[arg(long, global = true, env = "TERN_ARCHIVE_URL")]
    pub archive_url: Option<String>,
    /// Endpoint of an S3-compatible service other than AWS
    #[arg(long, global = true, env = "TERN_ARCHIVE_S3_ENDPOINT")]
    pub archive_s3_endpoint: Option<String>,
    #[arg(long, global = true, env = "TERN_ARCHIVE_S3_REGION")]
    pub archive_s3_region: Option<String>,
    /// Allow a plain-HTTP endpoint (true or false, as the broker's flag)
    #[arg(long, global = true, env = "TERN_ARCHIVE_S3_ALLOW_HTTP", default_value_t = false, action = clap::ArgAction::Set)]
    pub archive_s3_allow_http: bool,
    #[arg(long, global = true, env = "TERN_ARCHIVE_S3_ACCESS_KEY_ID")]
    pub archive_s3_access_key_id: Option<String>,
    #[arg(
        long,
        global = true,
        env = "TERN_ARCHIVE_S3_SECRET_ACCESS_KEY",
        hide_env_values = true
    )]
    pub archive_s3_secret_access_key: Option<String>,
}

impl ArchiveLocation {
    fn open(&self) -> anyhow::Result<Archive> {
        let target = match &self.archive_url {
            Some(url) => {
                let mut s3 = Target::parse_s3_url(url)?;
                s3.endpoint = self.archive_s3_endpoint.clone();
                s3.region = self.archive_s3_region.clone();
                s3.allow_http = self.archive_s3_allow_http;
                s3.access_key_id = self.archive_s3_access_key_id.clone();
                s3.secret_access_key = self.archive_s3_secret_access_key.clone();
                Target::S3(s3)
            }
            None => {
                if !self.archive_dir.is_dir() {
                    bail!("no archive at {}", self.archive_dir.display());
                }
                Target::Dir(self.archive_dir.clone())
            }
        };
        Ok(Archive::open(ArchiveConfig {
            target,
            interval: Duration::from_secs(10),
            memory_bytes: 64 << 20,
            io_max_bytes_per_second: None,
            min_free_bytes: 0,
        })?)
    }
}

#[derive(Debug, Subcommand)]
pub enum ArchiveCommand {
    /// What the archive holds of a topic: objects, offset ranges, records, bytes
    Ls { topic: String },
    /// Produce archived records back into a topic (keys, values, headers, timestamps
    /// kept; each record to the partition it came from), acks=all, exactly once: a
    /// second run of the same restore adds nothing (its progress is kept as the offsets
    /// of the group tern-restore.TARGET.<selection>)
    Restore {
        topic: String,
        /// First offset to restore, in every partition
        #[arg(
            long,
            conflicts_with = "from_time",
            required_unless_present = "from_time"
        )]
        from_offset: Option<i64>,
        /// Restore records with a timestamp at or after this, ms since the epoch
        #[arg(long)]
        from_time: Option<i64>,
        /// Last offset to restore (inclusive)
        #[arg(long)]
        to_offset: Option<i64>,
        /// Only this partition
        #[arg(long)]
        partition: Option<i32>,
        /// The topic to produce to [default: TOPIC]; it must exist with enough partitions
        #[arg(long)]
        to_topic: Option<String>,
    },
}

pub async fn run(
    connection: &Connection,
    location: &ArchiveLocation,
    command: ArchiveCommand,
) -> anyhow::Result<()> {
    let archive = location.open()?;
    match command {
        ArchiveCommand::Ls { topic } => ls(&archive, &topic, connection.json).await,
        ArchiveCommand::Restore {
            topic,
            from_offset,
            from_time,
            to_offset,
            partition,
            to_topic,
        } => {
            let range = Range {
                from_offset: from_offset.unwrap_or(0),
                from_time,
                to_offset: to_offset.unwrap_or(i64::MAX),
            };
            let target = to_topic.unwrap_or_else(|| topic.clone());
            restore(connection, &archive, &topic, &target, partition, range).await
        }
    }
}

async fn ls(archive: &Archive, topic: &str, as_json: bool) -> anyhow::Result<()> {
    let manifests = manifests(archive, topic, None).await?;
    if as_json {
        let partitions: Vec<_> = manifests
            .iter()
            .map(|m| {
                json!({
                    "partition": m.partition,
                    "next_offset": m.next_offset,
                    "objects": m.entries.iter().map(|e| json!({
                        "path": e.path,
                        "first_offset": e.first_offset,
                        "last_offset": e.last_offset,
                        "records": e.records,
                        "bytes": e.bytes,
                        "log_bytes": e.log_bytes,
                        "min_timestamp": e.min_timestamp,
                        "max_timestamp": e.max_timestamp,
                    })).collect::<Vec<_>>(),
                    "skipped": m.skipped,
                })
            })
            .collect();
        return output::json(&json!({
            "topic": topic,
            "location": archive.root(),
            "partitions": partitions,
        }));
    }
    let rows: Vec<Vec<String>> = manifests
        .iter()
        .flat_map(|m| {
            m.entries.iter().map(move |e| {
                vec![
                    m.partition.to_string(),
                    e.first_offset.to_string(),
                    e.last_offset.to_string(),
                    e.records.to_string(),
                    e.bytes.to_string(),
                    e.log_bytes.to_string(),
                    e.path.clone(),
                ]
            })
        })
        .collect();
    output::table(
        &[
            "PARTITION",
            "FIRST",
            "LAST",
            "RECORDS",
            "BYTES",
            "LOG_BYTES",
            "OBJECT",
        ],
        &rows,
    );
    for m in &manifests {
        for s in &m.skipped {
            println!(
                "partition {}: offsets {}..{} were deleted before they were archived",
                m.partition, s.from_offset, s.end_offset
            );
        }
    }
    Ok(())
}
