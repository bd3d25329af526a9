//! The broker's configuration: command-line flags, `TERN_*` environment variables and
//! an optional TOML file, all with the same names (`args`). Precedence: flag, then
//! environment, then file, then the built-in default. `Config::resolve` checks them and
//! hands each subsystem only its slice, a type the subsystem owns (`TopicsConfig` in
//! `topics`, `CleanerConfig` in `replication::log_cleaner`, `SecurityConfig` in
//! `security`, `ServerConfig` in `api::context`, ...). Nothing below `broker` imports
//! this module.

mod args;
mod described;
mod error;
mod listeners;
mod subsystems;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use self::args::{defaults, ServeArgs};
pub use self::error::ConfigError;
use self::listeners::{
    http_security, inter_broker_listener, inter_broker_login, listener_configs, security_config,
    split_host_port,
};
use self::subsystems::{
    archive_config, authorizer_config, cleaner_config, etcd_config, topic_overrides,
};
pub use crate::api::context::ServerConfig;
use crate::cluster::topic_config::TopicDefaults;
use crate::group::GroupsConfig;
use crate::http::HttpSecurity;
use crate::replication::log_cleaner::CleanerConfig;
use crate::topics::TopicsConfig;

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub data_dir: PathBuf,
    pub server: ServerConfig,
    pub node_id: i32,
    pub cluster_id: Option<String>,
    /// Cluster mode: where etcd is. `None` runs a single node on the embedded store.
    pub etcd: Option<crate::cluster::etcd::EtcdConfig>,
    pub ring_weight: u32,
    pub topics: TopicsConfig,
    pub retention_check_interval: Duration,
    pub cleaner: CleanerConfig,
    /// How long a follower may fail to catch up before it leaves the ISR.
    pub replica_lag_time_max: Duration,
    pub log_format: String,
    pub groups: GroupsConfig,
    /// Share-partitions led here (`group.share.*`).
    pub shares: crate::group::share::leader::ShareLeaderConfig,
    /// The transaction coordinator and its `__transaction_state` topic.
    pub txn: crate::txn::TxnConfig,
    /// The metrics listener, and whether the operator chose it (no fallback then).
    pub metrics: (SocketAddr, bool),
    /// The HTTP API listener, and whether the operator chose it; `None` when the API is
    /// turned off (`--http-enable false`). On by default, on loopback only, like the
    /// metrics listener: reachable by what runs on this machine, nothing else, until an
    /// operator gives it an address.
    pub http: Option<(SocketAddr, bool)>,
    /// `--http-tls` and `--http-auth`.
    pub http_security: HttpSecurity,
    /// The options the operator set (flag, environment or file), by field name: what
    /// DescribeConfigs reports as STATIC_BROKER_CONFIG rather than DEFAULT_CONFIG.
    pub operator_set: BTreeSet<&'static str>,
    /// `--authorizer` and `--super-users`.
    pub authorizer: crate::security::access::AuthorizerConfig,
    /// `--archive-*`: where the Parquet archive goes and how the export runs.
    pub archive: crate::archive::ArchiveConfig,
    /// `--quota-window-*`: the samples client quota rates are measured over.
    pub quota_window: crate::quota::rate::Window,
    /// Runtime worker threads; `None`: one per core (tokio's default).
    pub worker_threads: Option<usize>,
}

impl Config {
    /// Merges the flags (which clap already merged with the environment) over the file.
    pub fn resolve(args: ServeArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?;
                toml::from_str::<ServeArgs>(&text).map_err(|source| ConfigError::Parse {
                    path: path.clone(),
                    source,
                })?
            }
            None => ServeArgs::default(),
        };
        let operator_set = topic_overrides(&args.clone().or(file.clone()));
        let a = args.or(file);
        let set_fields = a.set_fields();
        let cleaner = cleaner_config(&a)?;
        let archive = archive_config(&a)?;
        let shares = share_leader_config(&a)?;
        let listen = a.listen.unwrap_or_else(defaults::listen);
        let advertise = a.advertise.clone().filter(|s| !s.is_empty());
        let mut listeners = listener_configs(&a, listen)?;
        let inter_broker = inter_broker_listener(a.inter_broker_listener.as_deref(), &listeners)?;
        let mut security = security_config(&a, &listeners)?;
        security.inter_broker_login = inter_broker_login(&a, inter_broker, &security)?;
        let authorizer = authorizer_config(a.authorizer.as_deref(), a.super_users.as_deref())?;
        let http_security = http_security(&a, &security, authorizer.enabled)?;
        let primary = listeners
            .iter()
            .find(|l| l.protocol == inter_broker)
            .cloned()
            .ok_or(ConfigError::Invalid {
                name: "inter_broker_listener",
                reason: "no such listener".into(),
            })?;
        let listen = primary.bind;
        let (advertised_host, advertised_port) = match &advertise {
            Some(address) => split_host_port(address)?,
            None => (primary.advertised_host.clone(), primary.advertised_port),
        };
        if advertise.is_some() {
            for l in listeners.iter_mut().filter(|l| l.protocol == inter_broker) {
                l.advertised_host.clone_from(&advertised_host);
                l.advertised_port = advertised_port;
            }
        }
        let peer_address = a.peer_advertise.filter(|s| !s.is_empty());
        let rack = a.broker_rack.filter(|s| !s.is_empty());
        if let Some(address) = &peer_address {
            split_host_port(address)?;
        }
        let positive = |name: &'static str, v: i64| {
            if v > 0 {
                Ok(v)
            } else {
                Err(ConfigError::Invalid {
                    name,
                    reason: format!("{v} must be positive"),
                })
            }
        };
        let max_request_bytes = a
            .max_request_bytes
            .unwrap_or_else(defaults::max_request_bytes);
        let queued_bytes = a
            .queued_max_request_bytes
            .unwrap_or_else(defaults::queued_max_request_bytes);
        if queued_bytes < u64::from(max_request_bytes) {
            return Err(ConfigError::Invalid {
                name: "queued_max_request_bytes",
                reason: format!(
                    "{queued_bytes} must be at least --max-request-bytes ({max_request_bytes}): one request of that size must fit"
                ),
            });
        }
        let num_partitions = a.num_partitions.unwrap_or_else(defaults::num_partitions);
        positive("num_partitions", i64::from(num_partitions))?;
        let max_in_flight = a
            .max_in_flight_requests
            .unwrap_or_else(defaults::max_in_flight_requests);
        positive("max_in_flight_requests", max_in_flight as i64)?;
        let builtin = vec![
            ("cleanup.policy", "delete".to_string()),
            ("compression.type", "producer".to_string()),
            ("compression.gzip.level", "-1".to_string()),
            ("delete.retention.ms", "86400000".to_string()),
            ("max.compaction.lag.ms", i64::MAX.to_string()),
            ("min.cleanable.dirty.ratio", "0.5".to_string()),
            ("min.compaction.lag.ms", "0".to_string()),
            (
                "flush.messages",
                defaults::log_flush_interval_messages().to_string(),
            ),
            ("index.interval.bytes", "4096".to_string()),
            ("flush.ms", defaults::log_flush_interval_ms().to_string()),
            (
                "max.message.bytes",
                defaults::message_max_bytes().to_string(),
            ),
            ("message.timestamp.type", "CreateTime".to_string()),
            ("min.insync.replicas", "1".to_string()),
            (
                "retention.bytes",
                defaults::log_retention_bytes().to_string(),
            ),
            ("retention.ms", defaults::log_retention_ms().to_string()),
            ("segment.bytes", defaults::log_segment_bytes().to_string()),
            ("segment.index.bytes", (10 * 1024 * 1024).to_string()),
            ("segment.ms", defaults::log_roll_ms().to_string()),
            ("unclean.leader.election.enable", "false".to_string()),
            ("archive.enable", "false".to_string()),
            ("archive.on.failure", "wait".to_string()),
        ];
        let overrides: BTreeMap<String, String> = operator_set
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        crate::cluster::topic_config::validate(&overrides).map_err(|e| ConfigError::Invalid {
            name: "topic default",
            reason: e.to_string(),
        })?;
        Ok(Self {
            data_dir: a.data_dir.unwrap_or_else(defaults::data_dir),
            server: ServerConfig {
                listen,
                advertised_host,
                advertised_port,
                listeners,
                inter_broker,
                security,
                peer_address,
                rack,
                max_request_bytes: a
                    .max_request_bytes
                    .unwrap_or_else(defaults::max_request_bytes),
                max_in_flight_requests: max_in_flight,
                max_connections: a.max_connections.unwrap_or_else(defaults::max_connections),
                max_connections_per_ip: a
                    .max_connections_per_ip
                    .unwrap_or_else(defaults::max_connections_per_ip),
                queued_max_request_bytes: queued_bytes,
                sasl_max_receive_bytes: a
                    .sasl_max_receive_bytes
                    .unwrap_or_else(defaults::sasl_max_receive_bytes),
                fetch_max_wait: Duration::from_millis(
                    a.fetch_max_wait_ms
                        .unwrap_or_else(defaults::fetch_max_wait_ms),
                ),
                slow_request: Some(a.slow_request_ms.unwrap_or_else(defaults::slow_request_ms))
                    .filter(|ms| *ms > 0)
                    .map(Duration::from_millis),
            },
            quota_window: crate::quota::rate::Window {
                samples: a
                    .quota_window_num
                    .unwrap_or_else(defaults::quota_window_num)
                    .max(1),
                sample_ms: a
                    .quota_window_size_seconds
                    .unwrap_or_else(defaults::quota_window_size_seconds)
                    .clamp(1, 3_600)
                    * 1_000,
            },
            worker_threads: Some(a.worker_threads.unwrap_or_else(defaults::worker_threads))
                .filter(|threads| *threads > 0),
            node_id: a.node_id.unwrap_or_else(defaults::node_id),
            cluster_id: a.cluster_id.filter(|s| !s.is_empty()),
            etcd: etcd_config(a.etcd.as_deref(), a.etcd_lease_ttl_secs)?,
            ring_weight: a.ring_weight.unwrap_or_else(defaults::ring_weight),
            topics: TopicsConfig {
                auto_create: a
                    .auto_create_topics_enable
                    .unwrap_or_else(defaults::auto_create_topics_enable),
                num_partitions,
                default_replication_factor: a
                    .default_replication_factor
                    .unwrap_or_else(defaults::default_replication_factor),
                defaults: TopicDefaults::new(&builtin, &operator_set),
            },
            retention_check_interval: Duration::from_millis(
                a.log_retention_check_interval_ms
                    .unwrap_or_else(defaults::log_retention_check_interval_ms)
                    .max(10),
            ),
            cleaner,
            replica_lag_time_max: Duration::from_millis(
                a.replica_lag_time_max_ms
                    .unwrap_or_else(defaults::replica_lag_time_max_ms)
                    .max(100),
            ),
            log_format: a.log_format.unwrap_or_else(defaults::log_format),
            metrics: (
                a.metrics.unwrap_or_else(defaults::metrics),
                a.metrics.is_some(),
            ),
            http: a
                .http_enable
                .unwrap_or_else(defaults::http_enable)
                .then(|| (a.http.unwrap_or_else(defaults::http), a.http.is_some())),
            http_security,
            operator_set: set_fields,
            authorizer,
            archive,
            txn: crate::txn::TxnConfig {
                topic_partitions: positive(
                    "transaction_state_log_num_partitions",
                    i64::from(
                        a.transaction_state_log_num_partitions
                            .unwrap_or_else(defaults::transaction_state_log_num_partitions),
                    ),
                )? as i32,
                topic_replication_factor: positive(
                    "transaction_state_log_replication_factor",
                    i64::from(
                        a.transaction_state_log_replication_factor
                            .unwrap_or_else(defaults::transaction_state_log_replication_factor),
                    ),
                )? as i16,
                max_timeout_ms: positive(
                    "transaction_max_timeout_ms",
                    i64::from(
                        a.transaction_max_timeout_ms
                            .unwrap_or_else(defaults::transaction_max_timeout_ms),
                    ),
                )? as i32,
                id_expiration_ms: positive(
                    "transactional_id_expiration_ms",
                    a.transactional_id_expiration_ms
                        .unwrap_or_else(defaults::transactional_id_expiration_ms),
                )?,
                abort_check_interval: Duration::from_millis(
                    a.transaction_abort_timed_out_transaction_cleanup_interval_ms
                        .unwrap_or_else(
                            defaults::transaction_abort_timed_out_transaction_cleanup_interval_ms,
                        )
                        .max(10),
                ),
            },
            shares,
            groups: GroupsConfig {
                coordinator: crate::group::coordinator::CoordinatorConfig {
                    limits: crate::group::state::GroupLimits {
                        min_session_timeout_ms: a
                            .group_min_session_timeout_ms
                            .unwrap_or_else(defaults::group_min_session_timeout_ms),
                        max_session_timeout_ms: a
                            .group_max_session_timeout_ms
                            .unwrap_or_else(defaults::group_max_session_timeout_ms),
                        initial_rebalance_delay_ms: a
                            .group_initial_rebalance_delay_ms
                            .unwrap_or_else(defaults::group_initial_rebalance_delay_ms),
                        max_size: a.group_max_size.unwrap_or_else(defaults::group_max_size),
                    },
                    consumer: crate::group::consumer::ConsumerGroupConfig {
                        session_timeout_ms: positive(
                            "group_consumer_session_timeout_ms",
                            i64::from(
                                a.group_consumer_session_timeout_ms
                                    .unwrap_or_else(defaults::group_consumer_session_timeout_ms),
                            ),
                        )? as i32,
                        heartbeat_interval_ms: positive(
                            "group_consumer_heartbeat_interval_ms",
                            i64::from(
                                a.group_consumer_heartbeat_interval_ms
                                    .unwrap_or_else(defaults::group_consumer_heartbeat_interval_ms),
                            ),
                        )? as i32,
                        max_size: a
                            .group_consumer_max_size
                            .unwrap_or_else(defaults::group_consumer_max_size),
                    },
                    migration: a
                        .group_consumer_migration_policy
                        .clone()
                        .unwrap_or_else(defaults::group_consumer_migration_policy)
                        .parse()
                        .map_err(|reason| ConfigError::Invalid {
                            name: "group_consumer_migration_policy",
                            reason,
                        })?,
                    share: crate::group::share::ShareGroupConfig {
                        session_timeout_ms: positive(
                            "group_share_session_timeout_ms",
                            i64::from(
                                a.group_share_session_timeout_ms
                                    .unwrap_or_else(defaults::group_share_session_timeout_ms),
                            ),
                        )? as i32,
                        heartbeat_interval_ms: positive(
                            "group_share_heartbeat_interval_ms",
                            i64::from(
                                a.group_share_heartbeat_interval_ms
                                    .unwrap_or_else(defaults::group_share_heartbeat_interval_ms),
                            ),
                        )? as i32,
                        max_size: a
                            .group_share_max_size
                            .unwrap_or_else(defaults::group_share_max_size),
                    },
                    offsets_retention_ms: a
                        .offsets_retention_minutes
                        .unwrap_or_else(defaults::offsets_retention_minutes)
                        .saturating_mul(60_000),
                },
                offsets_topic_partitions: positive(
                    "offsets_topic_num_partitions",
                    i64::from(
                        a.offsets_topic_num_partitions
                            .unwrap_or_else(defaults::offsets_topic_num_partitions),
                    ),
                )? as i32,
                offsets_topic_replication_factor: positive(
                    "offsets_topic_replication_factor",
                    i64::from(
                        a.offsets_topic_replication_factor
                            .unwrap_or_else(defaults::offsets_topic_replication_factor),
                    ),
                )? as i16,
            },
        })
    }
}

/// The share-partition settings, checked against Kafka's ranges.
fn share_leader_config(
    a: &ServeArgs,
) -> Result<crate::group::share::leader::ShareLeaderConfig, ConfigError> {
    let invalid = |name: &'static str, reason: String| ConfigError::Invalid { name, reason };
    let lock_duration_ms = a
        .group_share_record_lock_duration_ms
        .unwrap_or_else(defaults::group_share_record_lock_duration_ms);
    if lock_duration_ms < 1_000 {
        return Err(invalid(
            "group_share_record_lock_duration_ms",
            format!("{lock_duration_ms} is below 1000"),
        ));
    }
    let delivery_limit = a
        .group_share_delivery_count_limit
        .unwrap_or_else(defaults::group_share_delivery_count_limit);
    if !(2..=10).contains(&delivery_limit) {
        return Err(invalid(
            "group_share_delivery_count_limit",
            format!("{delivery_limit} is not within 2..=10"),
        ));
    }
    let max_in_flight = a
        .group_share_partition_max_record_locks
        .unwrap_or_else(defaults::group_share_partition_max_record_locks);
    if !(100..=10_000).contains(&max_in_flight) {
        return Err(invalid(
            "group_share_partition_max_record_locks",
            format!("{max_in_flight} is not within 100..=10000"),
        ));
    }
    let auto_offset_reset = a
        .group_share_auto_offset_reset
        .clone()
        .unwrap_or_else(defaults::group_share_auto_offset_reset)
        .parse()
        .map_err(|reason| invalid("group_share_auto_offset_reset", reason))?;
    Ok(crate::group::share::leader::ShareLeaderConfig {
        partition: crate::group::share::partition::ShareConfig {
            lock_duration_ms,
            delivery_limit,
            max_in_flight,
        },
        auto_offset_reset,
        max_sessions: a
            .group_share_max_share_sessions
            .unwrap_or_else(defaults::group_share_max_share_sessions)
            .max(1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::security::listener::SecurityProtocol;

    #[test]
    fn flags_win_over_the_file_and_defaults_fill_the_rest() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("tern.toml");
        std::fs::write(
            &path,
            "node_id = 7\nlisten = \"127.0.0.1:9999\"\nlog_retention_ms = 5000\n",
        )?;
        let args = ServeArgs {
            config: Some(path),
            node_id: Some(3),
            ..ServeArgs::default()
        };
        let config = Config::resolve(args)?;
        assert_eq!(config.node_id, 3);
        assert_eq!(config.server.listen.port(), 9999);
        assert_eq!(
            (
                config.server.advertised_host.as_str(),
                config.server.advertised_port
            ),
            ("127.0.0.1", 9999)
        );
        assert_eq!(config.server.max_request_bytes, 100 * 1024 * 1024);
        let empty = BTreeMap::new();
        assert_eq!(
            config.topics.defaults.resolve(&empty, "retention.ms"),
            Some((
                "5000".to_string(),
                crate::cluster::topic_config::ConfigSource::StaticBroker
            ))
        );
        // What the operator set is described as static, the rest as defaults.
        let described = config.static_broker_configs(&config.server.listeners);
        let source = |name: &str| {
            described
                .iter()
                .find(|c| c.name == name)
                .map(|c| (c.value.clone(), c.set_by_operator))
        };
        assert_eq!(source("node.id"), Some(("3".to_string(), true)));
        assert_eq!(source("num.partitions"), Some(("1".to_string(), false)));
        assert_eq!(
            source("listeners"),
            Some(("PLAINTEXT://127.0.0.1:9999".to_string(), true))
        );
        Ok(())
    }

    #[test]
    fn listeners_name_their_protocols_and_the_inter_broker_one_is_plaintext(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        let args = ServeArgs {
            listeners: Some("SASL_SSL://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092".into()),
            advertised_listeners: Some("SASL_SSL://broker.example:19093".into()),
            tls_cert: Some(cert.clone()),
            tls_key: Some(key.clone()),
            ..ServeArgs::default()
        };
        let config = Config::resolve(args.clone())?;
        let server = &config.server;
        assert_eq!(server.inter_broker, SecurityProtocol::Plaintext);
        assert_eq!(server.listen.port(), 9092);
        assert_eq!(server.listeners.len(), 2);
        assert_eq!(server.listeners[0].advertised_host, "broker.example");
        assert_eq!(server.listeners[0].advertised_port, 19093);
        assert_eq!(server.listeners[1].advertised_port, 9092);
        let tls = server.security.tls.clone().ok_or("tls")?;
        assert_eq!((tls.cert, tls.key, tls.client_ca), (cert, key, None));
        // A TLS listener without a certificate, SASL between brokers, an advertised
        // listener that names no listener: refused with the reason.
        for bad in [
            ServeArgs {
                tls_cert: None,
                tls_key: None,
                ..args.clone()
            },
            ServeArgs {
                inter_broker_listener: Some("SASL_SSL".into()),
                etcd: Some("http://127.0.0.1:2379".into()),
                ..args.clone()
            },
            ServeArgs {
                advertised_listeners: Some("SSL://x:1".into()),
                ..args.clone()
            },
            ServeArgs {
                sasl_mechanisms: Some("GSSAPI".into()),
                ..args.clone()
            },
        ] {
            assert!(Config::resolve(bad).is_err());
        }
        Ok(())
    }

    #[test]
    fn unknown_file_keys_are_errors() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("tern.toml");
        std::fs::write(&path, "nod_id = 7\n")?;
        assert!(Config::resolve(ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        })
        .is_err());
        Ok(())
    }
}
