//! The Parquet archive of topics with `archive.enable`: what retention would delete is
//! written first, as Parquet objects in Hive-style folders, to a directory or an
//! S3-compatible store, for analysts' engines to read.
//!
//! - [`manifest`]: what a partition's archive holds (pure); the archive's truth.
//! - [`parquet`]: one object, built from stored batches, and read back.
//! - [`export`]: the background task: per partition, read the manifest, gate
//!   retention on it, and (on the leader) archive what expired.
//! - This file: the configuration and the store, one `object_store` client for a
//!   directory and for S3 alike, so the code path tests take is the one users get.

pub mod export;
pub mod manifest;
pub mod parquet;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as StorePath;
use object_store::prefix::PrefixStore;
use object_store::{
    ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
    UpdateVersion,
};

use manifest::Manifest;

/// Where the archive goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A local or mounted directory (`--archive-dir`).
    Dir(PathBuf),
    /// An S3-compatible store (`--archive-url s3://bucket/prefix`).
    S3(S3Target),
}

#[derive(Clone, PartialEq, Eq)]
pub struct S3Target {
    pub bucket: String,
    /// Key prefix inside the bucket, without leading or trailing `/`.
    pub prefix: String,
    /// `--archive-s3-endpoint`: another S3-compatible service than AWS.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub allow_http: bool,
    /// From flags; else the usual AWS environment variables and credential chain.
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

impl std::fmt::Debug for S3Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Target")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("allow_http", &self.allow_http)
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// `s3://bucket/prefix` as the S3 target it names (endpoint and credentials apart).
    pub fn parse_s3_url(url: &str) -> Result<S3Target, ArchiveError> {
        let rest = url
            .strip_prefix("s3://")
            .ok_or_else(|| ArchiveError::Config(format!("'{url}' is not an s3:// URL")))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(ArchiveError::Config(format!("'{url}' names no bucket")));
        }
        Ok(S3Target {
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
            endpoint: None,
            region: None,
            allow_http: false,
            access_key_id: None,
            secret_access_key: None,
        })
    }
}

/// The archive's settings (`--archive-*`); which topics archive is their config.
#[derive(Debug, Clone)]
pub struct ArchiveConfig {
    pub target: Target,
    /// How often the exporter looks for expired segments the archive lacks.
    pub interval: Duration,
    /// Most bytes of record data one object is built from (the export's memory).
    pub memory_bytes: u64,
    /// Log bytes per second an export may read; `None`: no limit.
    pub io_max_bytes_per_second: Option<f64>,
    /// Below this many free bytes on the data directory's filesystem, retention
    /// deletes what the archive lacks too: a full disk stops every write.
    pub min_free_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    #[error("archive configuration: {0}")]
    Config(String),
    #[error("archive store: {0}")]
    Store(#[from] object_store::Error),
    #[error("archive manifest {path}: {source}")]
    Manifest {
        path: String,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Object(#[from] parquet::ObjectError),
    #[error(transparent)]
    Overlap(#[from] manifest::Overlap),
    #[error("log: {0}")]
    Log(String),
}

/// The archive's store: objects by their path from the archive's root.
#[derive(Debug, Clone)]
pub struct Archive {
    store: Arc<dyn ObjectStore>,
    /// The root as users name it: `file:///abs/dir` or `s3://bucket/prefix`.
    root: String,
    config: ArchiveConfig,
}

impl Archive {
    /// Opens the store; a directory is created if missing.
    pub fn open(config: ArchiveConfig) -> Result<Self, ArchiveError> {
        let (store, root): (Arc<dyn ObjectStore>, String) = match &config.target {
            Target::Dir(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| {
                    ArchiveError::Config(format!("cannot create {}: {e}", dir.display()))
                })?;
                let absolute = std::fs::canonicalize(dir).map_err(|e| {
                    ArchiveError::Config(format!("cannot resolve {}: {e}", dir.display()))
                })?;
                let store = LocalFileSystem::new_with_prefix(&absolute)?;
                (Arc::new(store), format!("file://{}", absolute.display()))
            }
            Target::S3(s3) => {
                let store = s3_store(s3)?;
                let root = match s3.prefix.is_empty() {
                    true => format!("s3://{}", s3.bucket),
                    false => format!("s3://{}/{}", s3.bucket, s3.prefix),
                };
                match s3.prefix.is_empty() {
                    true => (Arc::new(store), root),
                    false => (Arc::new(PrefixStore::new(store, s3.prefix.as_str())), root),
                }
            }
        };
        Ok(Self {
            store,
            root,
            config,
        })
    }

    pub fn config(&self) -> &ArchiveConfig {
        &self.config
    }

    /// Where an object is, as a URL a user can hand to a query engine.
    pub fn location(&self, path: &str) -> String {
        format!("{}/{path}", self.root)
    }

    pub fn root(&self) -> &str {
        &self.root
    }

    /// The manifest of a partition; an empty one when the archive has none yet.
    pub async fn manifest(&self, topic: &str, partition: i32) -> Result<Manifest, ArchiveError> {
        let path = manifest::manifest_path(topic, partition);
        match self.store.get(&StorePath::from(path.as_str())).await {
            Ok(found) => {
                let version = found.meta.e_tag.clone();
                let raw = found.bytes().await?;
                let mut manifest: Manifest = serde_json::from_slice(&raw)
                    .map_err(|source| ArchiveError::Manifest { path, source })?;
                manifest.version = version;
                Ok(manifest)
            }
            Err(object_store::Error::NotFound { .. }) => Ok(Manifest::new(topic, partition)),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces a partition's manifest (one atomic PUT, or write-then-rename on a
    /// directory). On S3 the PUT is conditional on the version `manifest` was read or
    /// last written as (If-Match its ETag; If-None-Match when there was none), and
    /// `manifest.version` becomes the new one: a write the store applies after its
    /// client gave up on it (a timeout) finds a newer manifest and is refused (412)
    /// rather than putting the archive back to what it listed then.
    pub async fn write_manifest(&self, manifest: &mut Manifest) -> Result<(), ArchiveError> {
        let path = manifest::manifest_path(&manifest.topic, manifest.partition);
        let raw =
            serde_json::to_vec_pretty(&*manifest).map_err(|source| ArchiveError::Manifest {
                path: path.clone(),
                source,
            })?;
        let mode = match (&self.config.target, &manifest.version) {
            (Target::Dir(_), _) => PutMode::Overwrite,
            (Target::S3(_), None) => PutMode::Create,
            (Target::S3(_), Some(e_tag)) => PutMode::Update(UpdateVersion {
                e_tag: Some(e_tag.clone()),
                version: None,
            }),
        };
        let written = self
            .store
            .put_opts(
                &StorePath::from(path.as_str()),
                PutPayload::from_bytes(Bytes::from(raw)),
                PutOptions::from(mode),
            )
            .await?;
        manifest.version = written.e_tag;
        Ok(())
    }

    /// Writes one object whole (atomic, as [`Self::write_manifest`]).
    pub async fn put(&self, path: &str, bytes: Bytes) -> Result<(), ArchiveError> {
        self.store
            .put(&StorePath::from(path), PutPayload::from_bytes(bytes))
            .await?;
        Ok(())
    }

    pub async fn get(&self, path: &str) -> Result<Bytes, ArchiveError> {
        Ok(self
            .store
            .get(&StorePath::from(path))
            .await?
            .bytes()
            .await?)
    }

    /// The Parquet objects under a partition's folder that its manifest does not list:
    /// left by an export that stopped between its object and its manifest.
    pub async fn orphans(&self, manifest: &Manifest) -> Result<Vec<String>, ArchiveError> {
        let prefix = StorePath::from(manifest::partition_prefix(
            &manifest.topic,
            manifest.partition,
        ));
        let objects: Vec<_> = self.store.list(Some(&prefix)).try_collect().await?;
        Ok(objects
            .into_iter()
            .map(|meta| meta.location.to_string())
            .filter(|path| path.ends_with(".parquet") && !manifest.lists(path))
            .collect())
    }

    pub async fn delete(&self, path: &str) -> Result<(), ArchiveError> {
        match self.store.delete(&StorePath::from(path)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The partitions of `topic` that have a manifest, in order.
    pub async fn partitions(&self, topic: &str) -> Result<Vec<i32>, ArchiveError> {
        let prefix = StorePath::from(format!("topic={topic}"));
        let listed = self.store.list_with_delimiter(Some(&prefix)).await?;
        let mut out: Vec<i32> = listed
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename()?.strip_prefix("partition=")?.parse().ok())
            .collect();
        out.sort_unstable();
        Ok(out)
    }
}

/// The S3 client: path-style requests (what S3-compatible servers expect), credentials
/// and region from the flags or the AWS environment, bounded retries (an export that
/// cannot reach the store fails within seconds, and retention waits for the next).
fn s3_store(s3: &S3Target) -> Result<object_store::aws::AmazonS3, ArchiveError> {
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(&s3.bucket)
        .with_virtual_hosted_style_request(false)
        .with_retry(RetryConfig {
            max_retries: 3,
            retry_timeout: Duration::from_secs(10),
            ..RetryConfig::default()
        })
        .with_client_options(
            ClientOptions::new()
                .with_connect_timeout(Duration::from_secs(5))
                .with_timeout(Duration::from_secs(60)),
        );
    if let Some(endpoint) = &s3.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = &s3.region {
        builder = builder.with_region(region);
    }
    if s3.allow_http {
        builder = builder.with_allow_http(true);
    }
    if let Some(id) = &s3.access_key_id {
        builder = builder.with_access_key_id(id);
    }
    if let Some(secret) = &s3.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    Ok(builder.build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_s3_url_names_the_bucket_and_the_prefix() {
        let t = Target::parse_s3_url("s3://lake/tern/archive/").expect("valid");
        assert_eq!(
            (t.bucket.as_str(), t.prefix.as_str()),
            ("lake", "tern/archive")
        );
        let t = Target::parse_s3_url("s3://lake").expect("valid");
        assert_eq!((t.bucket.as_str(), t.prefix.as_str()), ("lake", ""));
        assert!(Target::parse_s3_url("s3:///x").is_err());
        assert!(Target::parse_s3_url("/tmp/x").is_err());
    }
}
