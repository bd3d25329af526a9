//! `tern serve`'s options, in one list: each is a flag, a `TERN_*` environment variable
//! and a key of the TOML file, with its built-in default (`defaults`) and its help text.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

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
            pub(super) fn or(self, lower: ServeArgs) -> ServeArgs {
                ServeArgs { config: self.config, $( $field: self.$field.or(lower.$field), )* }
            }

            /// The names of the fields that are set (by flag, environment or file).
            pub(super) fn set_fields(&self) -> BTreeSet<&'static str> {
                let mut set = BTreeSet::new();
                $( if self.$field.is_some() { set.insert(stringify!($field)); } )*
                set
            }
        }

        /// Built-in defaults, in one place.
        pub mod defaults {
            #[allow(unused_imports)]
            use crate::config::args::*;
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
    /// HTTP API callers: required (every call needs HTTP Basic credentials or a client certificate, else 401) or optional (a call without credentials runs as User:ANONYMOUS) [default: required with --authorizer acl, else optional]
    http_auth: String = String::new(), "TERN_HTTP_AUTH";
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
    /// Threads of the async runtime that serves every connection; 0 takes one per core. Several brokers sharing a host's cores run better with fewer each [default: 0]
    worker_threads: usize = 0, "TERN_WORKER_THREADS";
    /// Samples each client quota rate is measured over (quota.window.num) [default: 11]
    quota_window_num: usize = 11, "TERN_QUOTA_WINDOW_NUM";
    /// Length of each client quota sample, seconds (quota.window.size.seconds) [default: 1]
    quota_window_size_seconds: u64 = 1, "TERN_QUOTA_WINDOW_SIZE_SECONDS";
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
    /// Delay before a new group's first rebalance, ms (group.initial.rebalance.delay.ms) [default: 3000]
    group_initial_rebalance_delay_ms: i32 = 3000, "TERN_GROUP_INITIAL_REBALANCE_DELAY_MS";
    /// Shortest session timeout a member may ask for, ms (group.min.session.timeout.ms) [default: 6000]
    group_min_session_timeout_ms: i32 = 6000, "TERN_GROUP_MIN_SESSION_TIMEOUT_MS";
    /// Longest session timeout a member may ask for, ms (group.max.session.timeout.ms) [default: 1800000]
    group_max_session_timeout_ms: i32 = 1_800_000, "TERN_GROUP_MAX_SESSION_TIMEOUT_MS";
    /// Most members in one group (group.max.size) [default: 1000]
    group_max_size: usize = 1000, "TERN_GROUP_MAX_SIZE";
    /// A KIP-848 consumer-group member that has not heartbeated for this long is removed, ms (group.consumer.session.timeout.ms) [default: 45000]
    group_consumer_session_timeout_ms: i32 = 45_000, "TERN_GROUP_CONSUMER_SESSION_TIMEOUT_MS";
    /// How often KIP-848 consumer-group members are told to heartbeat, ms (group.consumer.heartbeat.interval.ms) [default: 5000]
    group_consumer_heartbeat_interval_ms: i32 = 5_000, "TERN_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS";
    /// Most members in one KIP-848 consumer group (group.consumer.max.size; Kafka's default is unbounded, tern's bounds the memory one group may take, as --group-max-size does for classic groups) [default: 1000]
    group_consumer_max_size: usize = 1000, "TERN_GROUP_CONSUMER_MAX_SIZE";
    /// Which way a live group may change kind when its members change protocol: bidirectional, upgrade (classic to consumer), downgrade (consumer to classic) or disabled (group.consumer.migration.policy) [default: bidirectional]
    group_consumer_migration_policy: String = "bidirectional".to_string(), "TERN_GROUP_CONSUMER_MIGRATION_POLICY";
    /// A share-group member that has not heartbeated for this long is removed, ms (group.share.session.timeout.ms) [default: 45000]
    group_share_session_timeout_ms: i32 = 45_000, "TERN_GROUP_SHARE_SESSION_TIMEOUT_MS";
    /// How often share-group members are told to heartbeat, ms (group.share.heartbeat.interval.ms) [default: 5000]
    group_share_heartbeat_interval_ms: i32 = 5_000, "TERN_GROUP_SHARE_HEARTBEAT_INTERVAL_MS";
    /// Most members in one share group (group.share.max.size) [default: 200]
    group_share_max_size: usize = 200, "TERN_GROUP_SHARE_MAX_SIZE";
    /// How long a share-group record stays locked to the consumer that acquired it, ms (group.share.record.lock.duration.ms) [default: 30000]
    group_share_record_lock_duration_ms: i64 = 30_000, "TERN_GROUP_SHARE_RECORD_LOCK_DURATION_MS";
    /// Deliveries of one share-group record before it is archived undelivered (group.share.delivery.count.limit, 2-10) [default: 5]
    group_share_delivery_count_limit: i16 = 5, "TERN_GROUP_SHARE_DELIVERY_COUNT_LIMIT";
    /// Records of one share-partition in flight (acquired or awaiting redelivery) at most (group.share.partition.max.record.locks) [default: 2000]
    group_share_partition_max_record_locks: i64 = 2_000, "TERN_GROUP_SHARE_PARTITION_MAX_RECORD_LOCKS";
    /// Share sessions one broker holds at most (group.share.max.share.sessions) [default: 2000]
    group_share_max_share_sessions: usize = 2_000, "TERN_GROUP_SHARE_MAX_SHARE_SESSIONS";
    /// Where a share group starts reading a partition it has no state for: latest (the high watermark when it first reads it, Kafka's default) or earliest (share.auto.offset.reset's default for every share group) [default: latest]
    group_share_auto_offset_reset: String = "latest".to_string(), "TERN_GROUP_SHARE_AUTO_OFFSET_RESET";
    /// Committed offsets of an empty group expire after this long (offsets.retention.minutes) [default: 10080]
    offsets_retention_minutes: i64 = 7 * 24 * 60, "TERN_OFFSETS_RETENTION_MINUTES";
    /// Partitions of the internal __consumer_offsets topic, fixed at its creation (offsets.topic.num.partitions) [default: 50]
    offsets_topic_num_partitions: i32 = 50, "TERN_OFFSETS_TOPIC_NUM_PARTITIONS";
    /// Replicas of each __consumer_offsets partition, placed on as many live brokers as there are up to this (offsets.topic.replication.factor) [default: 3]
    offsets_topic_replication_factor: i16 = 3, "TERN_OFFSETS_TOPIC_REPLICATION_FACTOR";
    /// Partitions of the internal __transaction_state topic, fixed when it is created on the first transactional request (transaction.state.log.num.partitions) [default: 50]
    transaction_state_log_num_partitions: i32 = 50, "TERN_TRANSACTION_STATE_LOG_NUM_PARTITIONS";
    /// Replicas of each __transaction_state partition, placed on as many live brokers as there are up to this (transaction.state.log.replication.factor) [default: 3]
    transaction_state_log_replication_factor: i16 = 3, "TERN_TRANSACTION_STATE_LOG_REPLICATION_FACTOR";
    /// Longest transaction timeout a producer may ask for, ms (transaction.max.timeout.ms) [default: 900000]
    transaction_max_timeout_ms: i32 = 900_000, "TERN_TRANSACTION_MAX_TIMEOUT_MS";
    /// A transactional id idle this long (no transaction open) is forgotten, ms (transactional.id.expiration.ms) [default: 604800000]
    transactional_id_expiration_ms: i64 = 604_800_000, "TERN_TRANSACTIONAL_ID_EXPIRATION_MS";
    /// How often the coordinator aborts transactions past their timeout and expires idle ids, ms (transaction.abort.timed.out.transaction.cleanup.interval.ms) [default: 10000]
    transaction_abort_timed_out_transaction_cleanup_interval_ms: u64 = 10_000, "TERN_TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS";
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
