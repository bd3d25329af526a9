//! The slices of the configuration that the storage, cluster, group and security
//! subsystems receive, built from the options with their checks.

use std::collections::BTreeMap;
use std::time::Duration;

use super::args::{defaults, ServeArgs};
use super::error::ConfigError;
use crate::replication::log_cleaner::CleanerConfig;

/// `--authorizer` (`none` | `acl`) and `--super-users` (`User:A;User:B`).
pub(super) fn authorizer_config(
    authorizer: Option<&str>,
    super_users: Option<&str>,
) -> Result<crate::security::access::AuthorizerConfig, ConfigError> {
    let enabled = match authorizer.unwrap_or("none").trim() {
        "none" | "" => false,
        "acl" => true,
        other => {
            return Err(ConfigError::Invalid {
                name: "authorizer",
                reason: format!("'{other}' is not one of none, acl"),
            })
        }
    };
    let super_users = crate::security::acl::parse_super_users(super_users.unwrap_or(""));
    if let Some(bad) = super_users
        .iter()
        .find(|p| !crate::security::acl::valid_principal(p))
    {
        return Err(ConfigError::Invalid {
            name: "super_users",
            reason: format!("'{bad}' is not of the form Type:name (User:alice)"),
        });
    }
    Ok(crate::security::access::AuthorizerConfig {
        enabled,
        super_users,
    })
}

/// The etcd settings when `--etcd` names endpoints.
pub(super) fn etcd_config(
    endpoints: Option<&str>,
    ttl_secs: Option<u64>,
) -> Result<Option<crate::cluster::etcd::EtcdConfig>, ConfigError> {
    let endpoints: Vec<String> = endpoints
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect();
    if endpoints.is_empty() {
        return Ok(None);
    }
    let ttl = ttl_secs.unwrap_or_else(defaults::etcd_lease_ttl_secs);
    if !(2..=300).contains(&ttl) {
        return Err(ConfigError::Invalid {
            name: "etcd_lease_ttl_secs",
            reason: format!("{ttl} must be between 2 and 300"),
        });
    }
    Ok(Some(crate::cluster::etcd::EtcdConfig {
        endpoints,
        lease_ttl: Duration::from_secs(ttl),
    }))
}

pub(super) fn cleaner_config(a: &ServeArgs) -> Result<CleanerConfig, ConfigError> {
    let threads = a
        .log_cleaner_threads
        .unwrap_or_else(defaults::log_cleaner_threads);
    if threads == 0 {
        return Err(ConfigError::Invalid {
            name: "log_cleaner_threads",
            reason: "must be at least 1".into(),
        });
    }
    let buffer = a
        .log_cleaner_dedupe_buffer_size
        .unwrap_or_else(defaults::log_cleaner_dedupe_buffer_size);
    if buffer < 1024 * 1024 {
        return Err(ConfigError::Invalid {
            name: "log_cleaner_dedupe_buffer_size",
            reason: format!("{buffer} is below 1 MiB"),
        });
    }
    let rate = a
        .log_cleaner_io_max_bytes_per_second
        .unwrap_or_else(defaults::log_cleaner_io_max_bytes_per_second);
    if rate.is_nan() || rate < 0.0 {
        return Err(ConfigError::Invalid {
            name: "log_cleaner_io_max_bytes_per_second",
            reason: format!("{rate} is not a rate"),
        });
    }
    Ok(CleanerConfig {
        enable: a
            .log_cleaner_enable
            .unwrap_or_else(defaults::log_cleaner_enable),
        threads,
        dedupe_buffer_bytes: buffer / threads as u64,
        io_max_bytes_per_second: (rate > 0.0).then(|| rate / threads as f64),
        backoff: Duration::from_millis(
            a.log_cleaner_backoff_ms
                .unwrap_or_else(defaults::log_cleaner_backoff_ms)
                .max(10),
        ),
    })
}

/// `--archive-*`: the directory (under the data dir by default) or the S3 bucket.
pub(super) fn archive_config(a: &ServeArgs) -> Result<crate::archive::ArchiveConfig, ConfigError> {
    use crate::archive::{ArchiveConfig, Target};
    let set = |v: &Option<String>| v.clone().filter(|s| !s.trim().is_empty());
    let target = match set(&a.archive_url) {
        Some(url) => {
            let mut s3 = Target::parse_s3_url(url.trim()).map_err(|e| ConfigError::Invalid {
                name: "archive_url",
                reason: e.to_string(),
            })?;
            s3.endpoint = set(&a.archive_s3_endpoint);
            s3.region = set(&a.archive_s3_region);
            s3.allow_http = a.archive_s3_allow_http.unwrap_or(false);
            s3.access_key_id = set(&a.archive_s3_access_key_id);
            s3.secret_access_key = set(&a.archive_s3_secret_access_key);
            Target::S3(s3)
        }
        None => Target::Dir(
            a.archive_dir
                .clone()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or_else(|| {
                    a.data_dir
                        .clone()
                        .unwrap_or_else(defaults::data_dir)
                        .join("archive")
                }),
        ),
    };
    let rate = a
        .archive_io_max_bytes_per_second
        .unwrap_or_else(defaults::archive_io_max_bytes_per_second);
    Ok(ArchiveConfig {
        target,
        interval: Duration::from_millis(
            a.archive_interval_ms
                .unwrap_or_else(defaults::archive_interval_ms)
                .max(10),
        ),
        memory_bytes: a
            .archive_memory_bytes
            .unwrap_or_else(defaults::archive_memory_bytes)
            .max(1024),
        io_max_bytes_per_second: (rate > 0.0).then_some(rate),
        min_free_bytes: a
            .archive_min_free_bytes
            .unwrap_or_else(defaults::archive_min_free_bytes),
    })
}

/// Topic-config defaults the operator set explicitly, by topic config name.
pub(super) fn topic_overrides(a: &ServeArgs) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    let pairs: [(&'static str, Option<String>); 9] = [
        ("archive.enable", a.archive_enable.map(|v| v.to_string())),
        ("archive.on.failure", a.archive_on_failure.clone()),
        (
            "flush.messages",
            a.log_flush_interval_messages.map(|v| v.to_string()),
        ),
        ("flush.ms", a.log_flush_interval_ms.map(|v| v.to_string())),
        ("retention.ms", a.log_retention_ms.map(|v| v.to_string())),
        (
            "retention.bytes",
            a.log_retention_bytes.map(|v| v.to_string()),
        ),
        ("segment.bytes", a.log_segment_bytes.map(|v| v.to_string())),
        ("segment.ms", a.log_roll_ms.map(|v| v.to_string())),
        (
            "max.message.bytes",
            a.message_max_bytes.map(|v| v.to_string()),
        ),
    ];
    for (name, value) in pairs {
        if let Some(v) = value {
            out.insert(name, v);
        }
    }
    out
}
