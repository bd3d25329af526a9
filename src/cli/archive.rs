//! `tern archive ls|restore`: the archive read straight from its store (the same
//! `--archive-dir` / `--archive-url` flags as the broker), and restored records
//! produced back through the Kafka protocol to each partition's leader, `acks=all`.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::{Args, Subcommand};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;

use super::commands::Connection;
use super::output;
use crate::archive::manifest::Manifest;
use crate::archive::parquet::{read_object, ArchivedRecord};
use crate::archive::{Archive, ArchiveConfig, Target};
use crate::log::batch::testing::{encode_batch, TestRecord};

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
    /// kept; each record to the partition it came from), acks=all
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

async fn manifests(
    archive: &Archive,
    topic: &str,
    only: Option<i32>,
) -> anyhow::Result<Vec<Manifest>> {
    let mut out = Vec::new();
    for partition in archive.partitions(topic).await? {
        if only.is_none_or(|p| p == partition) {
            out.push(archive.manifest(topic, partition).await?);
        }
    }
    Ok(out)
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

/// Which archived records a restore takes.
#[derive(Debug, Clone, Copy)]
struct Range {
    from_offset: i64,
    from_time: Option<i64>,
    to_offset: i64,
}

impl Range {
    fn takes(&self, record: &ArchivedRecord) -> bool {
        record.offset >= self.from_offset
            && record.offset <= self.to_offset
            && self.from_time.is_none_or(|t| record.timestamp >= t)
    }
}

/// Records per produced batch, and its most bytes of keys and values.
const BATCH_RECORDS: usize = 500;
const BATCH_BYTES: usize = 512 * 1024;

async fn restore(
    connection: &Connection,
    archive: &Archive,
    topic: &str,
    target: &str,
    only: Option<i32>,
    range: Range,
) -> anyhow::Result<()> {
    let mut producer = Producer::connect(connection, target).await?;
    let mut restored: BTreeMap<i32, u64> = BTreeMap::new();
    for manifest in manifests(archive, topic, only).await? {
        let partition = manifest.partition;
        let count = restored.entry(partition).or_default();
        for entry in manifest.from(range.from_offset, range.from_time) {
            if entry.first_offset > range.to_offset {
                break;
            }
            let object = archive
                .get(&entry.path)
                .await
                .with_context(|| format!("reading {}", entry.path))?;
            let records: Vec<ArchivedRecord> = read_object(object)?
                .into_iter()
                .filter(|r| range.takes(r))
                .collect();
            for batch in batches_of(&records) {
                producer.produce(partition, batch).await?;
            }
            *count += records.len() as u64;
        }
    }
    let total: u64 = restored.values().sum();
    if connection.json {
        let partitions: BTreeMap<String, u64> =
            restored.iter().map(|(p, n)| (p.to_string(), *n)).collect();
        output::json(&json!({"restored": total, "partitions": partitions}))
    } else {
        println!("restored {total} records into {target}");
        Ok(())
    }
}

/// The records as produce batches: CreateTime, each batch's base timestamp its
/// earliest record's.
fn batches_of(records: &[ArchivedRecord]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < records.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < records.len()
            && end - start < BATCH_RECORDS
            && (bytes < BATCH_BYTES || end == start)
        {
            let r = &records[end];
            bytes += r.key.as_ref().map_or(0, Vec::len) + r.value.as_ref().map_or(0, Vec::len);
            end += 1;
        }
        let chunk = &records[start..end];
        let base = chunk.iter().map(|r| r.timestamp).min().unwrap_or(0);
        let encoded: Vec<TestRecord> = chunk
            .iter()
            .map(|r| TestRecord {
                key: r.key.clone(),
                value: r.value.clone(),
                headers: r.headers.clone(),
                timestamp_delta: r.timestamp - base,
            })
            .collect();
        out.push(Bytes::from(encode_batch(&encoded, base, (-1, -1, -1))));
        start = end;
    }
    out
}

/// Produces to the leaders of one topic's partitions, finding them again after a
/// leadership change.
struct Producer {
    bootstrap: super::client::Client,
    topic: String,
    leaders: HashMap<i32, super::client::Client>,
}

/// Kafka's retriable produce errors a restore waits out: NOT_LEADER_OR_FOLLOWER,
/// LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT,
/// UNKNOWN_TOPIC_OR_PARTITION (metadata still spreading).
const RETRIABLE: &[i16] = &[6, 5, 19, 20, 7, 3];

impl Producer {
    async fn connect(connection: &Connection, topic: &str) -> anyhow::Result<Self> {
        Ok(Self {
            bootstrap: super::client::connect(connection).await?,
            topic: topic.to_string(),
            leaders: HashMap::new(),
        })
    }

    async fn leader(&mut self, partition: i32) -> anyhow::Result<&mut super::client::Client> {
        if !self.leaders.contains_key(&partition) {
            let leaders = super::client::leaders(&mut self.bootstrap, &self.topic)
                .await?
                .with_context(|| format!("topic {} does not exist", self.topic))?;
            let address = leaders
                .get(&partition)
                .with_context(|| format!("{}-{partition} has no leader now", self.topic))?;
            let client = self.bootstrap.sibling(address).await?;
            self.leaders.insert(partition, client);
        }
        self.leaders
            .get_mut(&partition)
            .context("leader connection")
    }

    async fn produce(&mut self, partition: i32, batch: Bytes) -> anyhow::Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(30_000)
                .with_topic_data(vec![TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(self.topic.clone())))
                    .with_partition_data(vec![PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(batch.clone()))])]);
            let answer = self.leader(partition).await?.send(request, 9).await;
            let code = match answer {
                Ok((_, response)) => response
                    .responses
                    .iter()
                    .flat_map(|t| t.partition_responses.iter())
                    .find(|p| p.index == partition)
                    .map_or(-1, |p| p.error_code),
                Err(_) => 6,
            };
            match code {
                0 => return Ok(()),
                c if RETRIABLE.contains(&c) && attempt < 20 => {
                    self.leaders.remove(&partition);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                c => bail!(
                    "producing to {}-{partition} failed with Kafka error {c}",
                    self.topic
                ),
            }
        }
    }
}
