//! The broker's configuration: command-line flags, `TERN_*` environment variables and
//! an optional TOML file, all with the same names. Precedence: flag, then environment,
//! then file, then the built-in default. Each subsystem receives only its slice.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;

use serde::Deserialize;

use crate::security::listener::{parse_endpoints, Endpoint, ListenerError, SecurityProtocol};
use crate::security::principal::SslPrincipalMapper;
use crate::security::sasl_client::SaslLogin;
use crate::security::session::{Mechanism, SaslPolicy};
use crate::security::tls::TlsFiles;

use crate::cluster::broker_config::StaticBrokerConfig;
use crate::cluster::topic_config::TopicDefaults;
use crate::replication::Durability;

macro_rules! serve_args {
    ($( $(#[doc = $doc:literal])* $field:ident : $ty:ty = $default:expr, $env:literal; )*) => {
        /// Options of `tern serve`. Every field is optional here so that the layers can
        /// be merged; `Config::resolve` fills in the defaults shown in `--help`.
        #[derive(Debug, Default, Clone, clap::Args, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct ServeArgs {
            /// TOML file with any of these options (same names, snake_case).
            #[arg(long, env = "TERN_CONFIG")]
            #[serde(skip)]
            pub config: Option<PathBuf>,
            $(
                $(#[doc = $doc])*
                #[arg(long, env = $env, help_heading = None)]
                pub $field: Option<$ty>,
            )*
        }

        impl ServeArgs {
            /// Fills unset fields from `lower`.
            fn or(self, lower: ServeArgs) -> ServeArgs {
                ServeArgs { config: self.config, $( $field: self.$field.or(lower.$field), )* }
            }

            /// The names of the fields that are set (by flag, environment or file).
            fn set_fields(&self) -> BTreeSet<&'static str> {
                let mut set = BTreeSet::new();
                $( if self.$field.is_some() { set.insert(stringify!($field)); } )*
                set
            }
        }

        /// Built-in defaults, in one place.
        pub mod defaults {
            #[allow(unused_imports)]
            use super::*;
            $( pub fn $field() -> $ty { $default } )*
        }
    };
}

serve_args! {
    /// Directory for partition logs and metadata [default: ./data]
    data_dir: PathBuf = PathBuf::from("./data"), "TERN_DATA_DIR";
    /// Kafka listener address: one PLAINTEXT listener (--listeners declares several) [default: 127.0.0.1:9092]
    listen: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9092)), "TERN_LISTEN";
    /// Kafka listeners, PROTOCOL://HOST:PORT,... with PROTOCOL one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL (listeners); replaces --listen [default: PLAINTEXT://<--listen>]
    listeners: String = String::new(), "TERN_LISTENERS";
    /// Addresses clients are told, per listener, PROTOCOL://HOST:PORT,... (advertised.listeners) [default: each listener's address]
    advertised_listeners: String = String::new(), "TERN_ADVERTISED_LISTENERS";
    /// The listener other brokers connect to, by protocol name (inter.broker.listener.name) [default: PLAINTEXT if declared, else the first listener]
    inter_broker_listener: String = String::new(), "TERN_INTER_BROKER_LISTENER";
    /// PEM certificate chain of the SSL and SASL_SSL listeners (and the HTTP API with --http-tls); reloaded when the file changes [default: none]
    tls_cert: PathBuf = PathBuf::new(), "TERN_TLS_CERT";
    /// PEM private key of --tls-cert [default: none]
    tls_key: PathBuf = PathBuf::new(), "TERN_TLS_KEY";
    /// PEM CA certificates: clients of the SSL listener must present a certificate signed by one (ssl.client.auth=required; SASL_SSL clients authenticate with SASL, as in Kafka); the principal is the certificate subject [default: none]
    tls_client_ca: PathBuf = PathBuf::new(), "TERN_TLS_CLIENT_CA";
    /// PEM CA certificates this broker trusts when it connects to a peer's TLS listener [default: --tls-client-ca]
    tls_peer_ca: PathBuf = PathBuf::new(), "TERN_TLS_PEER_CA";
    /// SASL mechanism this broker logs in to its peers with, when the inter-broker listener is SASL_PLAINTEXT or SASL_SSL (sasl.mechanism.inter.broker.protocol) [default: SCRAM-SHA-512]
    inter_broker_sasl_mechanism: String = "SCRAM-SHA-512".to_string(), "TERN_INTER_BROKER_SASL_MECHANISM";
    /// The user this broker logs in to its peers as (a SCRAM user; make User:NAME a super user) [default: none]
    inter_broker_sasl_username: String = String::new(), "TERN_INTER_BROKER_SASL_USERNAME";
    /// File holding that user's password (its first line), kept off the command line [default: none]
    inter_broker_sasl_password_file: PathBuf = PathBuf::new(), "TERN_INTER_BROKER_SASL_PASSWORD_FILE";
    /// Rules mapping a client certificate's subject to a principal name, as Kafka's ssl.principal.mapping.rules [default: DEFAULT]
    ssl_principal_mapping_rules: String = "DEFAULT".to_string(), "TERN_SSL_PRINCIPAL_MAPPING_RULES";
    /// SASL mechanisms the SASL listeners offer (sasl.enabled.mechanisms) [default: PLAIN,SCRAM-SHA-256,SCRAM-SHA-512]
    sasl_mechanisms: String = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512".to_string(), "TERN_SASL_MECHANISMS";
    /// A SASL authentication is good for this long; clients re-authenticate on the connection before it ends (KIP-368); 0 never expires (connections.max.reauth.ms) [default: 0]
    connections_max_reauth_ms: i64 = 0, "TERN_CONNECTIONS_MAX_REAUTH_MS";
    /// A failed authentication is answered and the connection closed after this long (connection.failed.authentication.delay.ms) [default: 100]
    connection_failed_authentication_delay_ms: u64 = 100, "TERN_CONNECTION_FAILED_AUTHENTICATION_DELAY_MS";
    /// HTTP publish/subscribe API listener; when not given and the default port is taken, an ephemeral port is used and logged [default: 127.0.0.1:8082]
    http: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 8082)), "TERN_HTTP";
    /// Serve the HTTP API at all; false opens no HTTP listener [default: true]
    http_enable: bool = true, "TERN_HTTP_ENABLE";
    /// Serve the HTTP API over TLS (HTTPS) with --tls-cert and --tls-key; with --tls-client-ca a client certificate is asked for, and one presented must verify and names the caller [default: false]
    http_tls: bool = false, "TERN_HTTP_TLS";
    /// HTTP API callers: optional (a call without credentials runs as User:ANONYMOUS) or required (every call needs HTTP Basic credentials or a client certificate, else 401) [default: optional]
    http_auth: String = "optional".to_string(), "TERN_HTTP_AUTH";
    /// Prometheus /metrics, /health and /ready listener; when not given and the default
    /// port is taken, an ephemeral port is used and logged [default: 127.0.0.1:9644]
    metrics: SocketAddr = SocketAddr::from(([127, 0, 0, 1], 9644)), "TERN_METRICS";
    /// Address clients are told to connect to, HOST:PORT [default: the listen address]
    advertise: String = String::new(), "TERN_ADVERTISE";
    /// Address the other brokers of a cluster reach this one's Kafka listener at, HOST:PORT, when it differs from what clients are told (e.g. a container's name while --advertise is a host address) [default: the advertised address]
    peer_advertise: String = String::new(), "TERN_PEER_ADVERTISE";
    /// This broker's rack (broker.rack): consumers with the same client.rack read from it when it holds an in-sync replica (KIP-392) [default: none]
    broker_rack: String = String::new(), "TERN_BROKER_RACK";
    /// This broker's id [default: 1]
    node_id: i32 = 1, "TERN_NODE_ID";
    /// Cluster id: with --etcd, names the cluster (its etcd key prefix); alone, the id of a new data directory [default: "tern" with --etcd, else random and kept in the data dir]
    cluster_id: String = String::new(), "TERN_CLUSTER_ID";
    /// etcd endpoints, comma-separated (http://HOST:PORT,...): run as one broker of a cluster; without it, a single node with the embedded store [default: none]
    etcd: String = String::new(), "TERN_ETCD";
    /// TTL of this broker's etcd lease, seconds: a broker silent this long leaves the cluster and its partitions move [default: 6]
    etcd_lease_ttl_secs: u64 = 6, "TERN_ETCD_LEASE_TTL_SECS";
    /// This broker's share of partitions on the placement ring, relative to the others (0 takes none) [default: 1]
    ring_weight: u32 = 1, "TERN_RING_WEIGHT";
    /// Largest request accepted; bigger frames close the connection (socket.request.max.bytes) [default: 104857600]
    max_request_bytes: u32 = 100 * 1024 * 1024, "TERN_MAX_REQUEST_BYTES";
    /// Requests read ahead of their responses on one connection [default: 64]
    max_in_flight_requests: usize = 64, "TERN_MAX_IN_FLIGHT_REQUESTS";
    /// Open client connections allowed at once [default: 10000]
    max_connections: usize = 10_000, "TERN_MAX_CONNECTIONS";
    /// Open connections allowed from one client address; more are closed at once (max.connections.per.ip) [default: 1000]
    max_connections_per_ip: usize = 1000, "TERN_MAX_CONNECTIONS_PER_IP";
    /// Bytes of requests read but not yet answered, across all connections; past it reading pauses until replies free some (queued.max.request.bytes); at least --max-request-bytes [default: 268435456]
    queued_max_request_bytes: u64 = 256 * 1024 * 1024, "TERN_QUEUED_MAX_REQUEST_BYTES";
    /// Bytes a client of a SASL listener may send before it has authenticated; more closes the connection (sasl.server.max.receive.size) [default: 524288]
    sasl_max_receive_bytes: u32 = 512 * 1024, "TERN_SASL_MAX_RECEIVE_BYTES";
    /// Longest a fetch may wait for data, whatever the client asks (ms) [default: 30000]
    fetch_max_wait_ms: u64 = 30_000, "TERN_FETCH_MAX_WAIT_MS";
    /// Create topics on first use by Metadata or Produce (auto.create.topics.enable) [default: true]
    auto_create_topics_enable: bool = true, "TERN_AUTO_CREATE_TOPICS_ENABLE";
    /// Partitions of an auto-created topic (num.partitions) [default: 1]
    num_partitions: i32 = 1, "TERN_NUM_PARTITIONS";
    /// Replication factor of an auto-created topic (default.replication.factor) [default: 1]
    default_replication_factor: i16 = 1, "TERN_DEFAULT_REPLICATION_FACTOR";
    /// Default retention by age, ms; -1 forever (log.retention.ms) [default: 604800000]
    log_retention_ms: i64 = 7 * 24 * 3600 * 1000, "TERN_LOG_RETENTION_MS";
    /// Default retention by size per partition; -1 unlimited (log.retention.bytes) [default: -1]
    log_retention_bytes: i64 = -1, "TERN_LOG_RETENTION_BYTES";
    /// Default segment size (log.segment.bytes) [default: 1073741824]
    log_segment_bytes: i64 = 1 << 30, "TERN_LOG_SEGMENT_BYTES";
    /// Default segment age before a roll, ms (log.roll.ms) [default: 604800000]
    log_roll_ms: i64 = 7 * 24 * 3600 * 1000, "TERN_LOG_ROLL_MS";
    /// Default largest batch (message.max.bytes) [default: 1048588]
    message_max_bytes: i64 = 1_048_588, "TERN_MESSAGE_MAX_BYTES";
    /// How often retention runs, ms (log.retention.check.interval.ms) [default: 300000]
    log_retention_check_interval_ms: u64 = 300_000, "TERN_LOG_RETENTION_CHECK_INTERVAL_MS";
    /// Run the log cleaner, which compacts topics with cleanup.policy=compact (log.cleaner.enable) [default: true]
    log_cleaner_enable: bool = true, "TERN_LOG_CLEANER_ENABLE";
    /// Cleaning passes that may run at once, each on a partition of its own (log.cleaner.threads) [default: 1]
    log_cleaner_threads: usize = 1, "TERN_LOG_CLEANER_THREADS";
    /// Memory for the cleaners' key maps, shared by the threads; a pass maps as many dirty segments as fit (log.cleaner.dedupe.buffer.size) [default: 134217728]
    log_cleaner_dedupe_buffer_size: u64 = 128 * 1024 * 1024, "TERN_LOG_CLEANER_DEDUPE_BUFFER_SIZE";
    /// Bytes per second the cleaners may read and write together; 0 for no limit (log.cleaner.io.max.bytes.per.second) [default: 0]
    log_cleaner_io_max_bytes_per_second: f64 = 0.0, "TERN_LOG_CLEANER_IO_MAX_BYTES_PER_SECOND";
    /// How long the cleaner waits before looking again when no log needs cleaning, ms (log.cleaner.backoff.ms) [default: 15000]
    log_cleaner_backoff_ms: u64 = 15_000, "TERN_LOG_CLEANER_BACKOFF_MS";
    /// Everything is flushed to disk at least this often, ms (log.flush.interval.ms) [default: 1000]
    log_flush_interval_ms: u64 = 1000, "TERN_LOG_FLUSH_INTERVAL_MS";
    /// A follower that has not caught up with its leader for this long leaves the ISR, ms (replica.lag.time.max.ms) [default: 30000]
    replica_lag_time_max_ms: u64 = 30_000, "TERN_REPLICA_LAG_TIME_MAX_MS";
    /// Default flush.messages: a write is fsynced before it is acknowledged (and a follower fsyncs before fetching on) once this many messages are unflushed; 1 fsyncs every write on every in-sync replica, the default leaves it to log.flush.interval.ms (log.flush.interval.messages) [default: 9223372036854775807]
    log_flush_interval_messages: i64 = i64::MAX, "TERN_LOG_FLUSH_INTERVAL_MESSAGES";
    /// Fault-injection tests only: after an unclean stop, drop every log's tail past its recovery checkpoint, as a machine losing power would lose what was not fsynced [default: false]
    test_drop_unflushed_on_start: bool = false, "TERN_TEST_DROP_UNFLUSHED_ON_START";
    /// Delay before a new group's first rebalance, ms (group.initial.rebalance.delay.ms) [default: 3000]
    group_initial_rebalance_delay_ms: i32 = 3000, "TERN_GROUP_INITIAL_REBALANCE_DELAY_MS";
    /// Shortest session timeout a member may ask for, ms (group.min.session.timeout.ms) [default: 6000]
    group_min_session_timeout_ms: i32 = 6000, "TERN_GROUP_MIN_SESSION_TIMEOUT_MS";
    /// Longest session timeout a member may ask for, ms (group.max.session.timeout.ms) [default: 1800000]
    group_max_session_timeout_ms: i32 = 1_800_000, "TERN_GROUP_MAX_SESSION_TIMEOUT_MS";
    /// Most members in one group (group.max.size) [default: 1000]
    group_max_size: usize = 1000, "TERN_GROUP_MAX_SIZE";
    /// Committed offsets of an empty group expire after this long (offsets.retention.minutes) [default: 10080]
    offsets_retention_minutes: i64 = 7 * 24 * 60, "TERN_OFFSETS_RETENTION_MINUTES";
    /// Partitions of the internal __consumer_offsets topic, fixed at its creation (offsets.topic.num.partitions) [default: 50]
    offsets_topic_num_partitions: i32 = 50, "TERN_OFFSETS_TOPIC_NUM_PARTITIONS";
    /// Replicas of each __consumer_offsets partition, placed on as many live brokers as there are up to this (offsets.topic.replication.factor) [default: 3]
    offsets_topic_replication_factor: i16 = 3, "TERN_OFFSETS_TOPIC_REPLICATION_FACTOR";
    /// Requests slower than this are logged at WARN with their span (ms; 0 disables) [default: 1000]
    slow_request_ms: u64 = 1000, "TERN_SLOW_REQUEST_MS";
    /// Authorizer: none (everything is allowed) or acl (Kafka's ACLs: what no ACL allows is denied) [default: none]
    authorizer: String = "none".to_string(), "TERN_AUTHORIZER";
    /// Principals that pass every ACL check, `User:A;User:B` (super.users); a PLAINTEXT connection is `User:ANONYMOUS` [default: none]
    super_users: String = String::new(), "TERN_SUPER_USERS";
    /// Broker default of the topic config archive.enable: write what retention would delete to the Parquet archive first [default: false]
    archive_enable: bool = false, "TERN_ARCHIVE_ENABLE";
    /// Broker default of the topic config archive.on.failure: wait (retention keeps what the archive lacks) or delete [default: wait]
    archive_on_failure: String = "wait".to_string(), "TERN_ARCHIVE_ON_FAILURE";
    /// Directory of the Parquet archive (topic=T/partition=P/date=D/*.parquet), when --archive-url is not given [default: <data-dir>/archive]
    archive_dir: PathBuf = PathBuf::new(), "TERN_ARCHIVE_DIR";
    /// S3-compatible archive instead of the directory, s3://BUCKET/PREFIX; credentials and region from the flags below or the usual AWS_* environment variables [default: none]
    archive_url: String = String::new(), "TERN_ARCHIVE_URL";
    /// Endpoint of an S3-compatible service other than AWS, http(s)://HOST:PORT (requests are path-style) [default: AWS, or AWS_ENDPOINT_URL]
    archive_s3_endpoint: String = String::new(), "TERN_ARCHIVE_S3_ENDPOINT";
    /// Region of the archive's bucket [default: AWS_REGION, else us-east-1]
    archive_s3_region: String = String::new(), "TERN_ARCHIVE_S3_REGION";
    /// Allow a plain-HTTP --archive-s3-endpoint [default: false]
    archive_s3_allow_http: bool = false, "TERN_ARCHIVE_S3_ALLOW_HTTP";
    /// Access key id for the archive's bucket [default: AWS_ACCESS_KEY_ID]
    archive_s3_access_key_id: String = String::new(), "TERN_ARCHIVE_S3_ACCESS_KEY_ID";
    /// Secret access key for the archive's bucket (prefer the environment variable to a flag) [default: AWS_SECRET_ACCESS_KEY]
    archive_s3_secret_access_key: String = String::new(), "TERN_ARCHIVE_S3_SECRET_ACCESS_KEY";
    /// How often the archiver looks for expired segments the archive lacks, ms [default: 10000]
    archive_interval_ms: u64 = 10_000, "TERN_ARCHIVE_INTERVAL_MS";
    /// Most bytes of record data one archive object is built from: the export's memory [default: 67108864]
    archive_memory_bytes: u64 = 64 * 1024 * 1024, "TERN_ARCHIVE_MEMORY_BYTES";
    /// Bytes of log per second the archiver may read; 0 for no limit [default: 0]
    archive_io_max_bytes_per_second: f64 = 0.0, "TERN_ARCHIVE_IO_MAX_BYTES_PER_SECOND";
    /// Below this many free bytes on the data directory's filesystem, retention deletes expired segments the archive lacks too (a full disk would stop every write) [default: 1073741824]
    archive_min_free_bytes: u64 = 1 << 30, "TERN_ARCHIVE_MIN_FREE_BYTES";
    /// Log format: text or json [default: text]
    log_format: String = "text".to_string(), "TERN_LOG_FORMAT";
}

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
    pub durability: Durability,
    pub retention_check_interval: Duration,
    pub cleaner: CleanerConfig,
    /// How long a follower may fail to catch up before it leaves the ISR.
    pub replica_lag_time_max: Duration,
    pub log_format: String,
    pub groups: GroupsConfig,
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
}

/// How the HTTP API listener is secured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpSecurity {
    /// HTTPS with the broker's certificate (`--http-tls`).
    pub tls: bool,
    /// Calls without credentials are refused with 401 (`--http-auth required`).
    pub require_auth: bool,
}

/// How this broker logs in to its peers: nothing on a PLAINTEXT or SSL inter-broker
/// listener (SSL presents the broker's own certificate), the `--inter-broker-sasl-*`
/// user on a SASL one. A TLS inter-broker listener needs trust anchors for the peers.
fn inter_broker_login(
    a: &ServeArgs,
    protocol: SecurityProtocol,
    security: &SecurityConfig,
) -> Result<Option<SaslLogin>, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        name: "inter_broker_listener",
        reason,
    };
    if protocol.uses_tls() && security.peer_ca.is_none() {
        return Err(invalid(format!(
            "{protocol}: brokers verify each other's certificates; give --tls-peer-ca (or --tls-client-ca)"
        )));
    }
    if !protocol.uses_sasl() {
        return Ok(None);
    }
    let name = a
        .inter_broker_sasl_mechanism
        .clone()
        .unwrap_or_else(defaults::inter_broker_sasl_mechanism);
    let mechanism = Mechanism::from_name(name.trim())
        .filter(|m| security.sasl.mechanisms.contains(m))
        .ok_or_else(|| ConfigError::Invalid {
            name: "inter_broker_sasl_mechanism",
            reason: format!("{name:?} is not one of --sasl-mechanisms"),
        })?;
    let user = a
        .inter_broker_sasl_username
        .clone()
        .filter(|u| !u.is_empty())
        .ok_or_else(|| {
            invalid(format!(
                "{protocol}: brokers log in to each other; give --inter-broker-sasl-username and --inter-broker-sasl-password-file"
            ))
        })?;
    let file = a
        .inter_broker_sasl_password_file
        .clone()
        .filter(|p| !p.as_os_str().is_empty())
        .ok_or_else(|| {
            invalid(format!(
                "{protocol}: --inter-broker-sasl-password-file is needed"
            ))
        })?;
    let text = std::fs::read_to_string(&file).map_err(|source| ConfigError::Read {
        path: file.clone(),
        source,
    })?;
    let password = text.lines().next().unwrap_or_default().to_string();
    if password.is_empty() {
        return Err(ConfigError::Invalid {
            name: "inter_broker_sasl_password_file",
            reason: format!("{}: the first line (the password) is empty", file.display()),
        });
    }
    Ok(Some(SaslLogin {
        mechanism,
        user,
        password,
    }))
}

/// `--http-tls` and `--http-auth` (`optional` | `required`).
fn http_security(a: &ServeArgs, security: &SecurityConfig) -> Result<HttpSecurity, ConfigError> {
    let tls = a.http_tls.unwrap_or_else(defaults::http_tls);
    if tls && security.tls.is_none() {
        return Err(ConfigError::Invalid {
            name: "http_tls",
            reason: "--http-tls needs --tls-cert and --tls-key".into(),
        });
    }
    let require_auth = match a.http_auth.as_deref().unwrap_or("optional").trim() {
        "optional" | "" => false,
        "required" => true,
        other => {
            return Err(ConfigError::Invalid {
                name: "http_auth",
                reason: format!("'{other}' is not one of optional, required"),
            })
        }
    };
    Ok(HttpSecurity { tls, require_auth })
}

/// Consumer-group coordinator settings.
#[derive(Debug, Clone, Copy)]
pub struct GroupsConfig {
    pub coordinator: crate::group::coordinator::CoordinatorConfig,
    pub offsets_topic_partitions: i32,
    /// Replicas per offsets partition; the ring places min(this, live brokers).
    pub offsets_topic_replication_factor: i16,
}

/// One Kafka listener: where it binds, what it tells clients, what it demands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub protocol: SecurityProtocol,
    pub bind: SocketAddr,
    pub advertised_host: String,
    /// 0 until the listener is bound to an ephemeral port, then that port.
    pub advertised_port: i32,
}

/// TLS, principals and SASL, for every listener.
#[derive(Debug, Clone)]
pub struct SecurityConfig {
    /// Certificate, key and (mTLS) client CA; required when a listener uses TLS.
    pub tls: Option<TlsFiles>,
    /// Trust anchors for a peer's TLS listener.
    pub peer_ca: Option<PathBuf>,
    /// Who this broker logs in to its peers as, when the inter-broker listener is SASL.
    pub inter_broker_login: Option<SaslLogin>,
    pub principal_mapper: SslPrincipalMapper,
    pub sasl: Arc<SaslPolicy>,
    pub failed_authentication_delay: Duration,
}

/// The Kafka listeners and their limits. `listen` and `advertised_*` are the
/// inter-broker listener's (the address peers and the CLI's defaults use).
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: i32,
    /// Every listener, the inter-broker one among them.
    pub listeners: Vec<ListenerConfig>,
    /// The protocol (= name) of the listener peers connect to.
    pub inter_broker: SecurityProtocol,
    pub security: SecurityConfig,
    /// Where other brokers reach this one (`--peer-advertise`), when not the advertised
    /// address.
    pub peer_address: Option<String>,
    /// `broker.rack`, if set.
    pub rack: Option<String>,
    pub max_request_bytes: u32,
    pub max_in_flight_requests: usize,
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// Request bytes held (read, not yet answered) across all connections.
    pub queued_max_request_bytes: u64,
    /// Bytes a SASL client may send before authenticating.
    pub sasl_max_receive_bytes: u32,
    pub fetch_max_wait: Duration,
    /// Requests slower than this are logged (`None`: never).
    pub slow_request: Option<Duration>,
}

/// Topic creation defaults and the static defaults of every topic config (built-in and
/// operator-set); `ReplicaManager` puts the dynamic broker configs on top of them.
#[derive(Debug, Clone)]
pub struct TopicsConfig {
    pub auto_create: bool,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub defaults: TopicDefaults,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("invalid option {name}: {reason}")]
    Invalid { name: &'static str, reason: String },
}

/// `--authorizer` (`none` | `acl`) and `--super-users` (`User:A;User:B`).
fn authorizer_config(
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
        let listen = a.listen.unwrap_or_else(defaults::listen);
        let advertise = a.advertise.clone().filter(|s| !s.is_empty());
        let mut listeners = listener_configs(&a, listen)?;
        let inter_broker = inter_broker_listener(a.inter_broker_listener.as_deref(), &listeners)?;
        let mut security = security_config(&a, &listeners)?;
        security.inter_broker_login = inter_broker_login(&a, inter_broker, &security)?;
        let http_security = http_security(&a, &security)?;
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
            durability: Durability {
                flush_interval: Duration::from_millis(
                    a.log_flush_interval_ms
                        .unwrap_or_else(defaults::log_flush_interval_ms)
                        .max(1),
                ),
                drop_unflushed_on_start: a
                    .test_drop_unflushed_on_start
                    .unwrap_or_else(defaults::test_drop_unflushed_on_start),
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
            authorizer: authorizer_config(a.authorizer.as_deref(), a.super_users.as_deref())?,
            archive,
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

impl Config {
    /// The read-only broker configs this broker describes (DescribeConfigs of a BROKER),
    /// by their Kafka names, with the values it runs with; `log.flush.interval.ms` is
    /// among them for its static value, though it may be changed at run time.
    /// `listen` and `advertised` are the bound addresses (an ephemeral port resolved).
    pub fn static_broker_configs(&self, listeners: &[ListenerConfig]) -> Vec<StaticBrokerConfig> {
        let bound = listeners
            .iter()
            .map(|l| format!("{}://{}", l.protocol, l.bind))
            .collect::<Vec<_>>()
            .join(",");
        let advertised = listeners
            .iter()
            .map(|l| {
                format!(
                    "{}://{}:{}",
                    l.protocol, l.advertised_host, l.advertised_port
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        use crate::cluster::topic_config::ConfigType::{Boolean, Int, Long, String as Str};
        let set = |field: &str| self.operator_set.contains(field);
        let groups = &self.groups.coordinator.limits;
        let entry = |name, field: &str, value: String, default: Option<String>, kind, doc| {
            StaticBrokerConfig {
                name,
                value,
                default,
                set_by_operator: set(field),
                kind,
                documentation: doc,
            }
        };
        vec![
            entry(
                "broker.id",
                "node_id",
                self.node_id.to_string(),
                Some(defaults::node_id().to_string()),
                Int,
                "This broker's id (same as node.id).",
            ),
            entry(
                "node.id",
                "node_id",
                self.node_id.to_string(),
                Some(defaults::node_id().to_string()),
                Int,
                "This broker's id.",
            ),
            entry(
                "listeners",
                if set("listeners") { "listeners" } else { "listen" },
                bound,
                Some(format!("PLAINTEXT://{}", defaults::listen())),
                Str,
                "Addresses the Kafka listeners are bound to (--listeners, or --listen).",
            ),
            entry(
                "advertised.listeners",
                if set("advertised_listeners") { "advertised_listeners" } else { "advertise" },
                advertised,
                None,
                Str,
                "Addresses clients are told to connect to (--advertised-listeners; the listeners when unset).",
            ),
            entry(
                "inter.broker.listener.name",
                "inter_broker_listener",
                self.server.inter_broker.to_string(),
                None,
                Str,
                "The listener other brokers connect to (--inter-broker-listener).",
            ),
            entry(
                "sasl.enabled.mechanisms",
                "sasl_mechanisms",
                self.server
                    .security
                    .sasl
                    .mechanisms
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(","),
                Some(defaults::sasl_mechanisms()),
                Str,
                "SASL mechanisms the SASL listeners offer (--sasl-mechanisms).",
            ),
            entry(
                "connections.max.reauth.ms",
                "connections_max_reauth_ms",
                self.server
                    .security
                    .sasl
                    .session_lifetime_ms
                    .unwrap_or(0)
                    .to_string(),
                Some(defaults::connections_max_reauth_ms().to_string()),
                Long,
                "How long a SASL authentication is good for; 0 forever (--connections-max-reauth-ms).",
            ),
            entry(
                "log.dirs",
                "data_dir",
                self.data_dir.display().to_string(),
                Some(defaults::data_dir().display().to_string()),
                Str,
                "Directory holding partition logs and metadata (--data-dir).",
            ),
            entry(
                "auto.create.topics.enable",
                "auto_create_topics_enable",
                self.topics.auto_create.to_string(),
                Some(defaults::auto_create_topics_enable().to_string()),
                Boolean,
                "Create topics on first use by Metadata or Produce.",
            ),
            entry(
                "num.partitions",
                "num_partitions",
                self.topics.num_partitions.to_string(),
                Some(defaults::num_partitions().to_string()),
                Int,
                "Partitions of a topic created without a count.",
            ),
            entry(
                "default.replication.factor",
                "default_replication_factor",
                self.topics.default_replication_factor.to_string(),
                Some(defaults::default_replication_factor().to_string()),
                Int,
                "Replication factor of a topic created without one.",
            ),
            entry(
                "socket.request.max.bytes",
                "max_request_bytes",
                self.server.max_request_bytes.to_string(),
                Some(defaults::max_request_bytes().to_string()),
                Int,
                "Largest request accepted; a bigger frame closes the connection.",
            ),
            entry(
                "max.connections",
                "max_connections",
                self.server.max_connections.to_string(),
                Some(defaults::max_connections().to_string()),
                Int,
                "Client connections allowed at once (static in tern).",
            ),
            entry(
                crate::cluster::broker_config::LOG_FLUSH_INTERVAL_MS,
                "log_flush_interval_ms",
                self.durability.flush_interval.as_millis().to_string(),
                Some(defaults::log_flush_interval_ms().to_string()),
                Long,
                "Longest time data stays unflushed: every log is flushed at least this often.",
            ),
            entry(
                "log.retention.check.interval.ms",
                "log_retention_check_interval_ms",
                self.retention_check_interval.as_millis().to_string(),
                Some(defaults::log_retention_check_interval_ms().to_string()),
                Long,
                "How often retention runs.",
            ),
            entry(
                "offsets.topic.num.partitions",
                "offsets_topic_num_partitions",
                self.groups.offsets_topic_partitions.to_string(),
                Some(defaults::offsets_topic_num_partitions().to_string()),
                Int,
                "Partitions of __consumer_offsets, fixed when it is created.",
            ),
            entry(
                "offsets.topic.replication.factor",
                "offsets_topic_replication_factor",
                self.groups.offsets_topic_replication_factor.to_string(),
                Some(defaults::offsets_topic_replication_factor().to_string()),
                Int,
                "Replicas of each __consumer_offsets partition (at most the live brokers).",
            ),
            entry(
                "replica.lag.time.max.ms",
                "replica_lag_time_max_ms",
                self.replica_lag_time_max.as_millis().to_string(),
                Some(defaults::replica_lag_time_max_ms().to_string()),
                Long,
                "A follower that has not caught up for this long leaves the ISR.",
            ),
            entry(
                "offsets.retention.minutes",
                "offsets_retention_minutes",
                (self.groups.coordinator.offsets_retention_ms / 60_000).to_string(),
                Some(defaults::offsets_retention_minutes().to_string()),
                Int,
                "Committed offsets of an empty group expire after this long.",
            ),
            entry(
                "group.initial.rebalance.delay.ms",
                "group_initial_rebalance_delay_ms",
                groups.initial_rebalance_delay_ms.to_string(),
                Some(defaults::group_initial_rebalance_delay_ms().to_string()),
                Int,
                "Delay before a new group's first rebalance.",
            ),
            entry(
                "group.min.session.timeout.ms",
                "group_min_session_timeout_ms",
                groups.min_session_timeout_ms.to_string(),
                Some(defaults::group_min_session_timeout_ms().to_string()),
                Int,
                "Shortest session timeout a member may ask for.",
            ),
            entry(
                "group.max.session.timeout.ms",
                "group_max_session_timeout_ms",
                groups.max_session_timeout_ms.to_string(),
                Some(defaults::group_max_session_timeout_ms().to_string()),
                Int,
                "Longest session timeout a member may ask for.",
            ),
            entry(
                "group.max.size",
                "group_max_size",
                groups.max_size.to_string(),
                Some(defaults::group_max_size().to_string()),
                Int,
                "Most members in one group.",
            ),
        ]
    }
}

/// The etcd settings when `--etcd` names endpoints.
fn etcd_config(
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

/// The log cleaner's settings: Kafka's `log.cleaner.*` broker configs.
#[derive(Debug, Clone, PartialEq)]
pub struct CleanerConfig {
    pub enable: bool,
    pub threads: usize,
    /// Per thread: the shared buffer divided among them, as Kafka divides it.
    pub dedupe_buffer_bytes: u64,
    /// Per thread, likewise; `None` for no limit.
    pub io_max_bytes_per_second: Option<f64>,
    pub backoff: Duration,
}

fn cleaner_config(a: &ServeArgs) -> Result<CleanerConfig, ConfigError> {
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
fn archive_config(a: &ServeArgs) -> Result<crate::archive::ArchiveConfig, ConfigError> {
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
fn topic_overrides(a: &ServeArgs) -> BTreeMap<&'static str, String> {
    let mut out = BTreeMap::new();
    let pairs: [(&'static str, Option<String>); 8] = [
        ("archive.enable", a.archive_enable.map(|v| v.to_string())),
        ("archive.on.failure", a.archive_on_failure.clone()),
        (
            "flush.messages",
            a.log_flush_interval_messages.map(|v| v.to_string()),
        ),
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

/// `--listeners` (or one PLAINTEXT listener on `--listen`), each with its advertised
/// address from `--advertised-listeners` (or `--advertise` for a lone listener).
fn listener_configs(a: &ServeArgs, listen: SocketAddr) -> Result<Vec<ListenerConfig>, ConfigError> {
    let invalid = |name: &'static str| {
        move |e: ListenerError| ConfigError::Invalid {
            name,
            reason: e.to_string(),
        }
    };
    let declared = match a.listeners.as_deref().filter(|s| !s.trim().is_empty()) {
        Some(list) => parse_endpoints(list).map_err(invalid("listeners"))?,
        None => vec![Endpoint {
            protocol: SecurityProtocol::Plaintext,
            host: listen.ip().to_string(),
            port: listen.port(),
        }],
    };
    if declared.is_empty() {
        return Err(ConfigError::Invalid {
            name: "listeners",
            reason: "no listener declared".into(),
        });
    }
    let advertised = match a.advertised_listeners.as_deref() {
        Some(list) if !list.trim().is_empty() => {
            parse_endpoints(list).map_err(invalid("advertised_listeners"))?
        }
        _ => Vec::new(),
    };
    if let Some(extra) = advertised
        .iter()
        .find(|e| !declared.iter().any(|d| d.protocol == e.protocol))
    {
        return Err(ConfigError::Invalid {
            name: "advertised_listeners",
            reason: format!("{extra} names no listener of --listeners"),
        });
    }
    declared
        .iter()
        .map(|d| {
            let bind = d.bind_address().map_err(invalid("listeners"))?;
            let told = advertised.iter().find(|e| e.protocol == d.protocol);
            let (host, port) = match told {
                Some(e) => (e.host.clone(), i32::from(e.port)),
                None if d.host.is_empty() => (bind.ip().to_string(), i32::from(d.port)),
                None => (d.host.clone(), i32::from(d.port)),
            };
            Ok(ListenerConfig {
                protocol: d.protocol,
                bind,
                advertised_host: host,
                advertised_port: port,
            })
        })
        .collect()
}

fn inter_broker_listener(
    named: Option<&str>,
    listeners: &[ListenerConfig],
) -> Result<SecurityProtocol, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        name: "inter_broker_listener",
        reason,
    };
    match named.filter(|s| !s.is_empty()) {
        Some(name) => {
            let protocol: SecurityProtocol = name
                .parse()
                .map_err(|e: ListenerError| invalid(e.to_string()))?;
            if !listeners.iter().any(|l| l.protocol == protocol) {
                return Err(invalid(format!("{protocol} is not among --listeners")));
            }
            Ok(protocol)
        }
        None => Ok(listeners
            .iter()
            .map(|l| l.protocol)
            .find(|p| *p == SecurityProtocol::Plaintext)
            .or_else(|| {
                listeners
                    .iter()
                    .map(|l| l.protocol)
                    .find(|p| !p.uses_sasl())
            })
            .unwrap_or(listeners[0].protocol)),
    }
}

fn security_config(
    a: &ServeArgs,
    listeners: &[ListenerConfig],
) -> Result<SecurityConfig, ConfigError> {
    let path = |p: &Option<PathBuf>| p.clone().filter(|p| !p.as_os_str().is_empty());
    let tls = match (path(&a.tls_cert), path(&a.tls_key)) {
        (Some(cert), Some(key)) => Some(TlsFiles {
            cert,
            key,
            client_ca: path(&a.tls_client_ca),
            client_certificate_optional: false,
        }),
        (None, None) => None,
        _ => {
            return Err(ConfigError::Invalid {
                name: "tls_cert",
                reason: "--tls-cert and --tls-key go together".into(),
            })
        }
    };
    if tls.is_none() {
        if let Some(l) = listeners.iter().find(|l| l.protocol.uses_tls()) {
            return Err(ConfigError::Invalid {
                name: "listeners",
                reason: format!("the {} listener needs --tls-cert and --tls-key", l.protocol),
            });
        }
    }
    let rules = a
        .ssl_principal_mapping_rules
        .clone()
        .unwrap_or_else(defaults::ssl_principal_mapping_rules);
    let principal_mapper = SslPrincipalMapper::parse(&rules).map_err(|e| ConfigError::Invalid {
        name: "ssl_principal_mapping_rules",
        reason: e.to_string(),
    })?;
    let names = a
        .sasl_mechanisms
        .clone()
        .unwrap_or_else(defaults::sasl_mechanisms);
    let mut mechanisms = Vec::new();
    for name in names.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let mechanism = Mechanism::from_name(name).ok_or_else(|| ConfigError::Invalid {
            name: "sasl_mechanisms",
            reason: format!("unknown mechanism {name:?} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"),
        })?;
        if !mechanisms.contains(&mechanism) {
            mechanisms.push(mechanism);
        }
    }
    if mechanisms.is_empty() && listeners.iter().any(|l| l.protocol.uses_sasl()) {
        return Err(ConfigError::Invalid {
            name: "sasl_mechanisms",
            reason: "a SASL listener needs at least one mechanism".into(),
        });
    }
    let reauth = a
        .connections_max_reauth_ms
        .unwrap_or_else(defaults::connections_max_reauth_ms);
    if reauth < 0 {
        return Err(ConfigError::Invalid {
            name: "connections_max_reauth_ms",
            reason: format!("{reauth} is negative"),
        });
    }
    Ok(SecurityConfig {
        peer_ca: path(&a.tls_peer_ca).or_else(|| path(&a.tls_client_ca)),
        inter_broker_login: None,
        tls,
        principal_mapper,
        sasl: Arc::new(SaslPolicy {
            mechanisms,
            session_lifetime_ms: (reauth > 0).then_some(reauth),
        }),
        failed_authentication_delay: Duration::from_millis(
            a.connection_failed_authentication_delay_ms
                .unwrap_or_else(defaults::connection_failed_authentication_delay_ms),
        ),
    })
}

fn split_host_port(address: &str) -> Result<(String, i32), ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        name: "advertise",
        reason,
    };
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| invalid(format!("'{address}' is not HOST:PORT")))?;
    let port: u16 = port
        .parse()
        .map_err(|_| invalid(format!("'{port}' is not a port")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok((host.to_string(), i32::from(port)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
