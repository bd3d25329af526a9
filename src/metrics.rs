//! Every metric tern exports, each with its kind, unit and HELP text (Prometheus
//! conventions: `tern_` prefix, base units, `_total` counters; `promtool check metrics`
//! finds nothing to say), the recorder, and the side HTTP listener that serves
//! `/metrics`, `/health` (process alive) and `/ready` (started and serving).
//!
//! Subsystems record through the `metrics` facade with the names below; the sampler
//! task turns state that is cheaper to read than to track (log sizes, consumer lag,
//! disk) into gauges every few seconds.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics::Unit;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Declares every metric once: its constant (the name call sites use), its kind, its
/// unit and its description. The first paragraph of the doc comment is the HELP text
/// Prometheus shows (backticks dropped, lines joined); later paragraphs are notes for
/// code readers only. Nothing else in the crate spells a metric name, so a metric
/// cannot be added without a description.
macro_rules! define_metrics {
    ($(
        $(#[doc = $doc:literal])+
        $kind:ident($unit:ident) $constant:ident = $name:literal;
    )+) => {
        $(
            $(#[doc = $doc])+
            pub const $constant: &str = $name;
        )+

        /// Every metric tern exports, in declaration order.
        pub const ALL: &[Metric] = &[$(
            Metric {
                name: $name,
                kind: Kind::$kind,
                unit: Unit::$unit,
                doc: &[$($doc),+],
            },
        )+];
    };
}

define_metrics! {
    /// Kafka requests handled, by `api` (the Kafka API name).
    Counter(Count) REQUESTS_TOTAL = "tern_requests_total";
    /// Kafka request latency from decode to encoded response, by `api`.
    Histogram(Seconds) REQUEST_DURATION_SECONDS = "tern_request_duration_seconds";
    /// Where a Kafka request's time went, by `api` and `phase` (queue, local, remote).
    ///
    /// As Kafka splits it: `queue` (read, waiting for earlier requests on its
    /// connection), `local` (executing), `remote` (waiting: fsync for acks=all produce,
    /// data for a long-polling fetch).
    Histogram(Seconds) REQUEST_PHASE_SECONDS = "tern_request_phase_seconds";
    /// Times a partition led here had its in-sync replica set shrink (written to the store).
    Counter(Count) ISR_SHRINKS_TOTAL = "tern_isr_shrinks_total";
    /// Times a partition led here had its in-sync replica set expand (written to the store).
    Counter(Count) ISR_EXPANDS_TOTAL = "tern_isr_expands_total";
    /// Kafka requests slower than --slow-request-ms (waiting by design excluded), by `api`.
    Counter(Count) SLOW_REQUESTS_TOTAL = "tern_slow_requests_total";
    /// Per-partition error codes returned, by `api` and `error` (the Kafka error name).
    Counter(Count) PARTITION_ERRORS_TOTAL = "tern_partition_errors_total";
    /// Log segments retention deleted before the archive had them, by `topic`.
    ///
    /// Only for topics with `archive.enable`: the disk fell below
    /// --archive-min-free-bytes, or `archive.on.failure=delete` and the archive failed.
    Counter(Count) ARCHIVE_SKIPPED_SEGMENTS_TOTAL = "tern_archive_skipped_segments_total";
    /// Records written to the archive, by `topic`.
    Counter(Count) ARCHIVE_RECORDS_TOTAL = "tern_archive_records_total";
    /// Bytes of log (record batches as stored) archived, by `topic`.
    Counter(Bytes) ARCHIVE_BYTES_TOTAL = "tern_archive_bytes_total";
    /// Bytes of Parquet objects written to the archive, by `topic`.
    Counter(Bytes) ARCHIVE_OBJECT_BYTES_TOTAL = "tern_archive_object_bytes_total";
    /// Parquet objects written to the archive, by `topic`.
    Counter(Count) ARCHIVE_OBJECTS_TOTAL = "tern_archive_objects_total";
    /// Failed exports (the store unreachable or refusing, a log that would not read), by `topic`.
    Counter(Count) ARCHIVE_FAILURES_TOTAL = "tern_archive_failures_total";
    /// How long the oldest expired segment not yet archived has waited, by `topic` and
    /// `partition` (partitions led here; 0 when the archive has everything expired).
    Gauge(Seconds) ARCHIVE_LAG_SECONDS = "tern_archive_lag_seconds";
    /// Bytes of expired log waiting for the archive, by `topic` and `partition` (led here).
    Gauge(Bytes) ARCHIVE_PENDING_BYTES = "tern_archive_pending_bytes";
    /// Time one partition's export took (reading the log, encoding, writing objects and manifest).
    Histogram(Seconds) ARCHIVE_EXPORT_SECONDS = "tern_archive_export_seconds";
    /// Kafka client connections currently open.
    Gauge(Count) CONNECTIONS = "tern_connections";
    /// Kafka client connections accepted since start.
    Counter(Count) CONNECTIONS_ACCEPTED_TOTAL = "tern_connections_accepted_total";
    /// Connections closed as soon as they were accepted, by `reason` (`per_ip`:
    /// max_connections_per_ip reached; `ip_rate`: the address's connection_creation_rate
    /// quota exceeded, closed after its throttle time).
    Counter(Count) CONNECTIONS_REFUSED_TOTAL = "tern_connections_refused_total";
    /// What requests counted against a client quota, by `quota`, `user` and `client_id`
    /// (the entity's bucket): bytes for producer_byte_rate and consumer_byte_rate,
    /// microseconds of request time for request_percentage, partition mutations for
    /// controller_mutation_rate.
    Counter(Count) QUOTA_RECORDED_TOTAL = "tern_quota_recorded_total";
    /// Requests over a client quota (answered with a throttle time, their connection
    /// muted for it), by `quota`, `user` and `client_id`.
    Counter(Count) QUOTA_THROTTLED_TOTAL = "tern_quota_throttled_total";
    /// The throttle times given to requests over a client quota, by `quota`, `user` and
    /// `client_id`.
    Histogram(Seconds) QUOTA_THROTTLE_SECONDS = "tern_quota_throttle_seconds";
    /// Successful SASL authentications (re-authentications included), by `mechanism`.
    Counter(Count) SASL_AUTHENTICATIONS_TOTAL = "tern_sasl_authentications_total";
    /// Failed SASL and TLS authentications, by `listener` and `reason`.
    ///
    /// `reason`: `credentials` (wrong password, unknown user, bad proof), `mechanism`
    /// (not enabled), `protocol` (out-of-order or malformed exchange), `tls` (handshake
    /// or client certificate refused), `principal` (no principal mapping rule applies).
    Counter(Count) AUTHENTICATION_FAILURES_TOTAL = "tern_authentication_failures_total";
    /// Requests refused undecoded because the decoder's large-allocation reservations
    /// reached their high-water mark (the connection is closed).
    Counter(Count) DECODES_REFUSED_TOTAL = "tern_decodes_refused_total";
    /// Times the TLS certificate files changed and were reloaded, by `result` (ok, error).
    Counter(Count) TLS_RELOADS_TOTAL = "tern_tls_reloads_total";
    /// Record-batch bytes appended, by `topic`.
    Counter(Bytes) TOPIC_BYTES_IN_TOTAL = "tern_topic_bytes_in_total";
    /// Records appended, by `topic`.
    Counter(Count) TOPIC_MESSAGES_IN_TOTAL = "tern_topic_messages_in_total";
    /// Record-batch bytes returned by Fetch, by `topic`.
    Counter(Bytes) TOPIC_BYTES_OUT_TOTAL = "tern_topic_bytes_out_total";
    /// Record-batch bytes this broker's replica fetchers appended (Kafka's
    /// ReplicationBytesInPerSec): a follower's catch-up, which the topic counters leave out.
    Counter(Bytes) REPLICATION_BYTES_IN_TOTAL = "tern_replication_bytes_in_total";
    /// Record-batch bytes served to followers' fetches (Kafka's ReplicationBytesOutPerSec).
    Counter(Bytes) REPLICATION_BYTES_OUT_TOTAL = "tern_replication_bytes_out_total";
    /// Records in the batches returned by Fetch, by `topic` (whole batches).
    ///
    /// A fetch that starts inside a batch counts the records the client will skip too.
    Counter(Count) TOPIC_MESSAGES_OUT_TOTAL = "tern_topic_messages_out_total";
    /// Bytes of a partition's log on disk, by `topic` and `partition`.
    Gauge(Bytes) LOG_SIZE_BYTES = "tern_log_size_bytes";
    /// Segments of a partition's log, by `topic` and `partition`.
    Gauge(Count) LOG_SEGMENTS = "tern_log_segments";
    /// Log end offset (the next offset to be written) of a partition, by `topic` and
    /// `partition`.
    Gauge(Count) LOG_END_OFFSET = "tern_log_end_offset";
    /// Partitions led by this broker.
    Gauge(Count) LEADER_PARTITIONS = "tern_leader_partitions";
    /// Partitions led here whose in-sync replica set is smaller than their replica set.
    Gauge(Count) UNDER_REPLICATED_PARTITIONS = "tern_under_replicated_partitions";
    /// Partitions with no live leader.
    Gauge(Count) OFFLINE_PARTITIONS = "tern_offline_partitions";
    /// Partitions whose in-sync replica set is below min.insync.replicas.
    Gauge(Count) UNDER_MIN_ISR_PARTITIONS = "tern_under_min_isr_partitions";
    /// 1 when this broker is the active controller, else 0.
    Gauge(Count) CONTROLLER_ACTIVE = "tern_controller_active";
    /// HTTP API requests, by `route` and HTTP `status`.
    Counter(Count) HTTP_REQUESTS_TOTAL = "tern_http_requests_total";
    /// HTTP API request latency (a long poll's wait included), by `route`.
    Histogram(Seconds) HTTP_REQUEST_DURATION_SECONDS = "tern_http_request_duration_seconds";
    /// Live brokers in the cluster, as this broker sees them.
    Gauge(Count) CLUSTER_BROKERS = "tern_cluster_brokers";
    /// 1 while this broker's etcd session (its lease) is alive by its own clock, else 0.
    ///
    /// Only in cluster mode (`--etcd`).
    Gauge(Count) ETCD_SESSION_UP = "tern_etcd_session_up";
    /// Times this broker's etcd lease expired (it left the cluster and rejoined).
    Counter(Count) ETCD_SESSION_EXPIRATIONS_TOTAL = "tern_etcd_session_expirations_total";
    /// Times the etcd metadata watch was lost and everything re-read.
    Counter(Count) ETCD_WATCH_RESYNCS_TOTAL = "tern_etcd_watch_resyncs_total";
    /// Times this broker was elected controller.
    Counter(Count) CONTROLLER_ELECTIONS_TOTAL = "tern_controller_elections_total";
    /// Partition leaders moved by this broker as controller.
    Counter(Count) PARTITION_LEADER_CHANGES_TOTAL = "tern_partition_leader_changes_total";
    /// Leaders elected by this broker as controller from outside the ISR
    /// (`unclean.leader.election.enable`): each may have lost acknowledged writes.
    Counter(Count) UNCLEAN_LEADER_ELECTIONS_TOTAL = "tern_unclean_leader_elections_total";
    /// Transactions committed by the coordinators here (every marker written).
    Counter(Count) TXN_COMMITS_TOTAL = "tern_txn_commits_total";
    /// Transactions aborted by the coordinators here: by the producer, at its timeout,
    /// or when a new producer with its transactional id fenced it.
    Counter(Count) TXN_ABORTS_TOTAL = "tern_txn_aborts_total";
    /// Transactions aborted because they ran past their `transaction.timeout.ms`.
    Counter(Count) TXN_TIMEOUTS_TOTAL = "tern_txn_timeouts_total";
    /// Producers fenced by a new InitProducerId of their transactional id while their
    /// transaction was open (it is aborted).
    Counter(Count) TXN_FENCED_TOTAL = "tern_txn_fenced_total";
    /// Open transactions coordinated here.
    Gauge(Count) TXN_OPEN = "tern_txn_open";
    /// Age of the oldest open transaction coordinated here.
    Gauge(Seconds) TXN_OLDEST_OPEN_SECONDS = "tern_txn_oldest_open_seconds";
    /// Time from a commit or abort decision to the last marker acknowledged.
    Histogram(Seconds) TXN_MARKER_SECONDS = "tern_txn_marker_seconds";
    /// Time to load a `__transaction_state` partition when this broker comes to lead it.
    Histogram(Seconds) TXN_COORDINATOR_LOAD_SECONDS = "tern_txn_coordinator_load_seconds";
    /// Offsets between a partition's high watermark and its last stable offset (what
    /// open transactions hold back from read_committed consumers), by `topic` and
    /// `partition`.
    Gauge(Count) LOG_UNSTABLE_OFFSETS = "tern_log_unstable_offsets";
    /// Completed consumer group rebalances (each a new generation, or a new group epoch
    /// of a KIP-848 group), by `group` and `type` (`classic` or `consumer`).
    Counter(Count) GROUP_REBALANCES_TOTAL = "tern_group_rebalances_total";
    /// Members of a consumer group, by `group` and `type` (`classic` or `consumer`).
    Gauge(Count) GROUP_MEMBERS = "tern_group_members";
    /// Share-group records acquired by a consumer (first deliveries and redeliveries),
    /// by `group` and `topic`.
    Counter(Count) SHARE_RECORDS_ACQUIRED_TOTAL = "tern_share_records_acquired_total";
    /// Share-group records acknowledged, by `group`, `topic` and `type` (`accept`,
    /// `release`, `reject`; a GAP counts as `reject`).
    Counter(Count) SHARE_RECORDS_ACKNOWLEDGED_TOTAL = "tern_share_records_acknowledged_total";
    /// Share-group records delivered again after a release or a lock timeout, by
    /// `group` and `topic`.
    Counter(Count) SHARE_RECORDS_REDELIVERED_TOTAL = "tern_share_records_redelivered_total";
    /// Share-group records archived undelivered because they reached the delivery
    /// count limit, by `group` and `topic`.
    Counter(Count) SHARE_RECORDS_ARCHIVED_TOTAL = "tern_share_records_archived_total";
    /// Share-group acquisition locks that timed out (the consumer neither acknowledged
    /// nor released in time), by `group` and `topic`.
    Counter(Count) SHARE_LOCK_TIMEOUTS_TOTAL = "tern_share_lock_timeouts_total";
    /// Records of a share-partition not yet delivered and acknowledged: from its start
    /// offset to the high watermark, by `group`, `topic` and `partition`.
    Gauge(Count) SHARE_GROUP_LAG = "tern_share_group_lag";
    /// Records between a partition's high watermark and a group's committed offset, by
    /// `group`, `topic` and `partition`.
    Gauge(Count) CONSUMER_GROUP_LAG = "tern_consumer_group_lag";
    /// Bytes used on the filesystem holding the data directory (by anything).
    ///
    /// The logs' own size is `sum(tern_log_size_bytes)`.
    Gauge(Bytes) DATA_DIR_USED_BYTES = "tern_data_dir_used_bytes";
    /// Bytes free (to unprivileged users) on the filesystem holding the data directory.
    Gauge(Bytes) DATA_DIR_FREE_BYTES = "tern_data_dir_free_bytes";
    /// Produced batches recompressed to their topic's compression.type, by `topic`.
    Counter(Count) PRODUCE_RECOMPRESSED_BATCHES_TOTAL = "tern_produce_recompressed_batches_total";
    /// Time spent recompressing a produce request's batches to their topic's
    /// compression.type (its sum is the CPU recompression costs), by `topic`.
    Histogram(Seconds) PRODUCE_RECOMPRESSION_SECONDS = "tern_produce_recompression_seconds";
    /// Log cleaner passes finished (each logs a line naming its partition).
    Counter(Count) LOG_CLEANER_PASSES_TOTAL = "tern_log_cleaner_passes_total";
    /// Log cleaner passes that failed (the log is left as it was; the broker log says why).
    Counter(Count) LOG_CLEANER_ERRORS_TOTAL = "tern_log_cleaner_errors_total";
    /// Bytes of log the cleaner read (to map keys and to rewrite segments).
    Counter(Bytes) LOG_CLEANER_READ_BYTES_TOTAL = "tern_log_cleaner_read_bytes_total";
    /// Bytes of log the cleaner went through (the cleanable sections of its passes).
    Counter(Bytes) LOG_CLEANER_CLEANED_BYTES_TOTAL = "tern_log_cleaner_cleaned_bytes_total";
    /// Bytes of cleaned segments the cleaner wrote.
    Counter(Bytes) LOG_CLEANER_WRITTEN_BYTES_TOTAL = "tern_log_cleaner_written_bytes_total";
    /// Records the cleaner removed: superseded by a later record of their key, expired
    /// tombstones, or without a key.
    Counter(Count) LOG_CLEANER_REMOVED_RECORDS_TOTAL = "tern_log_cleaner_removed_records_total";
    /// How long cleaning passes took.
    Histogram(Seconds) LOG_CLEANER_PASS_SECONDS = "tern_log_cleaner_pass_seconds";
    /// When the log cleaner last finished a pass (Unix time).
    Gauge(Seconds) LOG_CLEANER_LAST_PASS_TIMESTAMP_SECONDS = "tern_log_cleaner_last_pass_timestamp_seconds";
    /// Bytes of a compacted partition's log written since it was last cleaned and
    /// cleanable now (the cleaner's lag), by `topic` and `partition`.
    Gauge(Bytes) LOG_CLEANER_DIRTY_BYTES = "tern_log_cleaner_dirty_bytes";
    /// The largest dirty ratio (dirty over cleanable bytes) of the compacted
    /// partitions here: Kafka's max-dirty-percent, as a fraction.
    Gauge(Count) LOG_CLEANER_MAX_DIRTY_RATIO = "tern_log_cleaner_max_dirty_ratio";
}

/// What kind of Prometheus metric a name is; the call sites must record it with the
/// matching macro (`counter!`, `gauge!`, `histogram!`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One exported metric, as declared in [`define_metrics!`].
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    /// Its unit (seconds, bytes, or a plain count). The exporter's unit suffixes stay
    /// off: names already end in their unit, as Prometheus's conventions ask.
    pub unit: Unit,
    /// The doc comment's lines, as the compiler hands them over (see [`Metric::help`]).
    doc: &'static [&'static str],
}

impl Metric {
    /// The HELP text: the doc comment's first paragraph on one line, without backticks.
    pub fn help(&self) -> String {
        let first_paragraph = self
            .doc
            .iter()
            .map(|line| line.trim())
            .take_while(|line| !line.is_empty());
        first_paragraph
            .collect::<Vec<_>>()
            .join(" ")
            .replace('`', "")
    }
}

/// Registers every metric's HELP text and unit with the current recorder. The
/// Prometheus exporter renders a HELP line for every described name, whether it was
/// described before or after its first sample (descriptions are looked up at render).
pub fn describe() {
    for metric in ALL {
        let (name, unit, help) = (metric.name, metric.unit, metric.help());
        match metric.kind {
            Kind::Counter => metrics::describe_counter!(name, unit, help),
            Kind::Gauge => metrics::describe_gauge!(name, unit, help),
            Kind::Histogram => metrics::describe_histogram!(name, unit, help),
        }
    }
}

/// Label values a broker knows when it starts, for [`export_broker_series`].
#[derive(Debug, Default)]
pub struct KnownLabels {
    /// Every Kafka API served (the API table's names).
    pub apis: Vec<&'static str>,
    /// The security protocol name of each Kafka listener.
    pub listeners: Vec<&'static str>,
    /// The SASL mechanisms enabled.
    pub mechanisms: Vec<&'static str>,
}

/// Why a connection is refused (`reason` of [`CONNECTIONS_REFUSED_TOTAL`]).
pub const CONNECTION_REFUSAL_REASONS: &[&str] = &[REFUSED_PER_IP, REFUSED_IP_RATE];
/// `max.connections.per.ip` reached.
pub const REFUSED_PER_IP: &str = "per_ip";
/// The address's `connection_creation_rate` quota exceeded (KIP-612).
pub const REFUSED_IP_RATE: &str = "ip_rate";

/// Why an authentication fails (`reason` of [`AUTHENTICATION_FAILURES_TOTAL`]): one type
/// for the call sites and the series exported at 0, so that no reason is counted that
/// the start-up export does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// Wrong user or password (SASL, HTTP Basic).
    Credentials,
    /// An HTTP Authorization header that is not valid Basic.
    Malformed,
    /// A SASL mechanism the listener does not enable.
    Mechanism,
    /// SASL messages out of order.
    Protocol,
    /// The TLS handshake failed.
    Tls,
    /// No principal mapping rule applies to the client certificate.
    Principal,
}

impl AuthFailure {
    pub const ALL: [AuthFailure; 6] = [
        AuthFailure::Credentials,
        AuthFailure::Malformed,
        AuthFailure::Mechanism,
        AuthFailure::Protocol,
        AuthFailure::Tls,
        AuthFailure::Principal,
    ];

    pub fn label(self) -> &'static str {
        match self {
            AuthFailure::Credentials => "credentials",
            AuthFailure::Malformed => "malformed",
            AuthFailure::Mechanism => "mechanism",
            AuthFailure::Protocol => "protocol",
            AuthFailure::Tls => "tls",
            AuthFailure::Principal => "principal",
        }
    }
}

/// Counts one failed authentication on `listener`.
pub fn authentication_failed(listener: &'static str, reason: AuthFailure) {
    metrics::counter!(AUTHENTICATION_FAILURES_TOTAL, "listener" => listener, "reason" => reason.label())
        .increment(1);
}

/// Counters whose every series is known at start-up, created at 0 by
/// [`export_broker_series`]: a first event is then an increase Prometheus sees, and an
/// alert on it can fire (Prometheus's instrumentation guide: "avoid missing metrics").
const BROKER_COUNTERS: &[&str] = &[
    TXN_COMMITS_TOTAL,
    TXN_ABORTS_TOTAL,
    TXN_TIMEOUTS_TOTAL,
    TXN_FENCED_TOTAL,
    ISR_SHRINKS_TOTAL,
    ISR_EXPANDS_TOTAL,
    REPLICATION_BYTES_IN_TOTAL,
    REPLICATION_BYTES_OUT_TOTAL,
    CONNECTIONS_ACCEPTED_TOTAL,
    DECODES_REFUSED_TOTAL,
    ETCD_SESSION_EXPIRATIONS_TOTAL,
    ETCD_WATCH_RESYNCS_TOTAL,
    CONTROLLER_ELECTIONS_TOTAL,
    PARTITION_LEADER_CHANGES_TOTAL,
    UNCLEAN_LEADER_ELECTIONS_TOTAL,
    LOG_CLEANER_PASSES_TOTAL,
    LOG_CLEANER_ERRORS_TOTAL,
    LOG_CLEANER_READ_BYTES_TOTAL,
    LOG_CLEANER_CLEANED_BYTES_TOTAL,
    LOG_CLEANER_WRITTEN_BYTES_TOTAL,
    LOG_CLEANER_REMOVED_RECORDS_TOTAL,
];

/// Counters labelled by `api`, one series per served API from the start.
const PER_API_COUNTERS: &[&str] = &[REQUESTS_TOTAL, SLOW_REQUESTS_TOTAL];

/// Counters labelled by `topic`, created at 0 when a topic's partitions open here
/// ([`export_topic_series`]); the archive's only for topics it archives.
const PER_TOPIC_COUNTERS: &[&str] = &[
    TOPIC_BYTES_IN_TOTAL,
    TOPIC_MESSAGES_IN_TOTAL,
    TOPIC_BYTES_OUT_TOTAL,
    TOPIC_MESSAGES_OUT_TOTAL,
    PRODUCE_RECOMPRESSED_BATCHES_TOTAL,
];
const PER_ARCHIVED_TOPIC_COUNTERS: &[&str] = &[
    ARCHIVE_SKIPPED_SEGMENTS_TOTAL,
    ARCHIVE_RECORDS_TOTAL,
    ARCHIVE_BYTES_TOTAL,
    ARCHIVE_OBJECT_BYTES_TOTAL,
    ARCHIVE_OBJECTS_TOTAL,
    ARCHIVE_FAILURES_TOTAL,
];

/// Counters with a label whose values are not known in advance, so no series exists
/// before the first event: a partition error's `error` (any Kafka error code), an
/// HTTP call's `status`, a group's name (the share-group counters too), a quota's client.
/// Alerts on them
/// use `or vector(0)`.
pub const EVENT_LABELLED_COUNTERS: &[&str] = &[
    PARTITION_ERRORS_TOTAL,
    HTTP_REQUESTS_TOTAL,
    GROUP_REBALANCES_TOTAL,
    SHARE_RECORDS_ACQUIRED_TOTAL,
    SHARE_RECORDS_ACKNOWLEDGED_TOTAL,
    SHARE_RECORDS_REDELIVERED_TOTAL,
    SHARE_RECORDS_ARCHIVED_TOTAL,
    SHARE_LOCK_TIMEOUTS_TOTAL,
    QUOTA_RECORDED_TOTAL,
    QUOTA_THROTTLED_TOTAL,
];

/// Creates, at 0, every counter series whose labels the broker knows at start-up.
pub fn export_broker_series(known: &KnownLabels) {
    for &name in BROKER_COUNTERS {
        metrics::counter!(name).increment(0);
    }
    for &name in PER_API_COUNTERS {
        for &api in &known.apis {
            metrics::counter!(name, "api" => api).increment(0);
        }
    }
    for &reason in CONNECTION_REFUSAL_REASONS {
        metrics::counter!(CONNECTIONS_REFUSED_TOTAL, "reason" => reason).increment(0);
    }
    for &listener in &known.listeners {
        for reason in AuthFailure::ALL {
            metrics::counter!(AUTHENTICATION_FAILURES_TOTAL, "listener" => listener, "reason" => reason.label())
                .increment(0);
        }
    }
    for &mechanism in &known.mechanisms {
        metrics::counter!(SASL_AUTHENTICATIONS_TOTAL, "mechanism" => mechanism).increment(0);
    }
    for result in ["ok", "error"] {
        metrics::counter!(TLS_RELOADS_TOTAL, "result" => result).increment(0);
    }
    // Adding 0, not setting 0: a connection accepted before this runs (a readiness
    // probe) would otherwise be decremented below zero when it closes.
    metrics::gauge!(CONNECTIONS).increment(0.0);
}

/// Creates, at 0, the per-topic counter series of a topic whose partitions open here.
/// Adding 0 leaves a series that already counts unchanged.
pub fn export_topic_series(topic: &str, archived: bool) {
    let archive: &[&str] = if archived {
        PER_ARCHIVED_TOPIC_COUNTERS
    } else {
        &[]
    };
    for &name in PER_TOPIC_COUNTERS.iter().chain(archive) {
        metrics::counter!(name, "topic" => topic.to_string()).increment(0);
    }
}

/// Latency buckets (seconds): 50 µs to 30 s, dense where produce and fetch live.
const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
];

/// The exporter as tern configures it: histograms (with [`LATENCY_BUCKETS`]) for
/// every `_seconds` metric, no unit suffixes added to names.
fn builder() -> Result<PrometheusBuilder, metrics_exporter_prometheus::BuildError> {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
}

/// Installs the global recorder (once per process) and returns its handle.
pub fn install() -> Option<PrometheusHandle> {
    static HANDLE: std::sync::OnceLock<Option<PrometheusHandle>> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| match builder().ok()?.install_recorder() {
            Ok(handle) => {
                describe();
                Some(handle)
            }
            Err(error) => {
                tracing::warn!(%error, "metrics recorder not installed");
                None
            }
        })
        .clone()
}

/// Whether the broker has finished starting (for `/ready`).
#[derive(Debug, Default)]
pub struct Readiness(AtomicBool);

impl Readiness {
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Clone)]
struct AppState {
    handle: Option<PrometheusHandle>,
    readiness: Arc<Readiness>,
}

async fn render(State(state): State<AppState>) -> impl IntoResponse {
    match &state.handle {
        Some(handle) => (StatusCode::OK, handle.render()),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics recorder unavailable\n".to_string(),
        ),
    }
}

async fn health() -> &'static str {
    "ok\n"
}

async fn ready(State(state): State<AppState>) -> impl IntoResponse {
    if state.readiness.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n")
    }
}

/// Binds a side listener. An address the operator chose must be free; the default
/// one falls back to an ephemeral port on the same host when taken, so that several
/// brokers started with only `--listen` can share a host. The bound address is logged.
pub async fn bind_side_listener(
    address: SocketAddr,
    explicit: bool,
    what: &str,
) -> std::io::Result<TcpListener> {
    match TcpListener::bind(address).await {
        Ok(listener) => Ok(listener),
        Err(error) if !explicit && error.kind() == std::io::ErrorKind::AddrInUse => {
            let fallback = SocketAddr::new(address.ip(), 0);
            let listener = TcpListener::bind(fallback).await?;
            tracing::warn!(
                wanted = %address,
                bound = %listener.local_addr()?,
                "default {what} port is taken; using an ephemeral port"
            );
            Ok(listener)
        }
        Err(error) => Err(error),
    }
}

/// Serves `/metrics`, `/health` and `/ready` until `shutdown`.
pub async fn serve(listener: TcpListener, readiness: Arc<Readiness>, shutdown: CancellationToken) {
    let state = AppState {
        handle: install(),
        readiness,
    };
    let app = Router::new()
        .route("/metrics", get(render))
        .route("/health", get(health))
        .route("/ready", get(ready))
        .with_state(state.clone());
    if let Some(handle) = state.handle.clone() {
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(crate::limits::SAMPLE_INTERVAL);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = ticker.tick() => handle.run_upkeep(),
                }
            }
        });
    }
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(error) = served {
        tracing::warn!(%error, "metrics listener stopped");
    }
}

/// `(used, free)` bytes of the filesystem holding `path`.
pub fn filesystem_usage(path: &std::path::Path) -> Option<(u64, u64)> {
    filesystem_space(path).map(|s| (s.total.saturating_sub(s.free), s.usable))
}

/// The size of a filesystem, in bytes: all of it, what is free, and what of that an
/// unprivileged process may use (Java's `FileStore` total and usable space).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilesystemSpace {
    pub total: u64,
    pub free: u64,
    pub usable: u64,
}

/// The space of the filesystem holding `path` (statvfs).
pub fn filesystem_space(path: &std::path::Path) -> Option<FilesystemSpace> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    #[allow(unsafe_code)]
    // SAFETY: `c_path` is a valid NUL-terminated string and `stat` is a properly sized,
    // writable `statvfs` that the call fills in; it is read only if the call succeeds.
    let stat = unsafe {
        if libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) != 0 {
            return None;
        }
        stat.assume_init()
    };
    let block = stat.f_frsize as u64;
    Some(FilesystemSpace {
        total: (stat.f_blocks as u64).saturating_mul(block),
        free: (stat.f_bfree as u64).saturating_mul(block),
        usable: (stat.f_bavail as u64).saturating_mul(block),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_taken_default_port_falls_back_but_an_explicit_one_fails() -> std::io::Result<()> {
        let holder = TcpListener::bind("127.0.0.1:0").await?;
        let taken = holder.local_addr()?;
        let fallback = bind_side_listener(taken, false, "metrics").await?;
        assert_ne!(fallback.local_addr()?.port(), taken.port());
        assert!(bind_side_listener(taken, true, "metrics").await.is_err());
        Ok(())
    }

    /// The source of this file outside its tests: where metric names may be spelled.
    fn declarations() -> &'static str {
        let source = include_str!("metrics.rs");
        source.split("#[cfg(test)]").next().unwrap_or(source)
    }

    #[test]
    fn every_metric_name_in_this_file_is_declared_in_the_table() {
        // A `pub const X: &str = "tern_..."` written outside `define_metrics!` (or a
        // name spelled anywhere else here) would be exported with no HELP text.
        let mut spelled: Vec<&str> = declarations()
            .split('"')
            .filter(|s| s.starts_with("tern_"))
            .collect();
        spelled.sort_unstable();
        let mut declared: Vec<&str> = ALL.iter().map(|m| m.name).collect();
        declared.sort_unstable();
        assert_eq!(spelled, declared);
        assert!(
            !declarations().contains(": &str = \"tern_"),
            "metric constants are declared through define_metrics!, never by hand"
        );
        let mut unique = declared.clone();
        unique.dedup();
        assert_eq!(unique, declared, "a metric name is declared twice");
    }

    #[test]
    fn names_follow_prometheus_conventions() {
        for m in ALL {
            let name = m.name;
            assert!(name.starts_with("tern_"), "{name}: tern_ prefix");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{name}: snake_case"
            );
            assert_eq!(
                m.kind == Kind::Counter,
                name.ends_with("_total"),
                "{name}: counters, and only counters, end in _total"
            );
            let base = name.strip_suffix("_total").unwrap_or(name);
            // The unit is a word of the name (last, except `bytes_in`/`bytes_out`,
            // which Kafka operators know by those names).
            let has_word = |word: &str| {
                base.ends_with(&format!("_{word}")) || base.contains(&format!("_{word}_"))
            };
            match m.unit {
                Unit::Seconds => assert!(base.ends_with("_seconds"), "{name}: unit last"),
                Unit::Bytes => assert!(has_word("bytes"), "{name}: unit in the name"),
                Unit::Count => assert!(
                    !has_word("seconds") && !has_word("bytes"),
                    "{name}: a count named like a unit"
                ),
                other => panic!("{name}: {other:?} is not a base unit"),
            }
            for reserved in ["_count", "_sum", "_bucket"] {
                assert!(
                    !name.ends_with(reserved),
                    "{name}: {reserved} is the exporter's"
                );
            }
            for kind in ["counter", "gauge", "histogram", "summary"] {
                assert!(
                    !name.contains(kind),
                    "{name}: the type is not part of the name"
                );
            }
        }
    }

    #[test]
    fn help_texts_are_one_plain_sentence() {
        for m in ALL {
            let help = m.help();
            assert!(help.len() >= 10, "{}: help {help:?}", m.name);
            assert!(!help.contains(['\n', '`']), "{}: help {help:?}", m.name);
            assert!(
                help.trim() == help && !help.contains("  "),
                "{}: {help:?}",
                m.name
            );
            assert!(
                help.ends_with('.'),
                "{}: help ends a sentence: {help:?}",
                m.name
            );
        }
        let phase = ALL.iter().find(|m| m.name == REQUEST_PHASE_SECONDS);
        let phase = phase.map(Metric::help).unwrap_or_default();
        assert!(
            phase.ends_with("(queue, local, remote)."),
            "first paragraph only: {phase}"
        );
    }

    #[test]
    fn every_counter_exists_from_start_up_or_says_why_it_cannot() {
        let recorder = builder().expect("valid buckets").build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            export_broker_series(&KnownLabels {
                apis: vec!["Produce", "Fetch"],
                listeners: vec!["PLAINTEXT"],
                mechanisms: vec!["PLAIN"],
            });
            export_topic_series("orders", true);
        });
        let text = handle.render();
        for m in ALL.iter().filter(|m| m.kind == Kind::Counter) {
            let exported = text.contains(&format!("\n{} ", m.name))
                || text.contains(&format!("\n{}{{", m.name));
            let exempt = EVENT_LABELLED_COUNTERS.contains(&m.name);
            assert!(
                exported != exempt,
                "{}: exported at start {exported}, listed as event-labelled {exempt}",
                m.name
            );
        }
        assert!(
            text.contains("tern_requests_total{api=\"Fetch\"} 0"),
            "{text}"
        );
        assert!(text.contains("tern_archive_failures_total{topic=\"orders\"} 0"));
    }

    #[test]
    fn the_exporter_renders_help_and_the_declared_type_for_every_metric() {
        let recorder = builder().expect("valid buckets").build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            // One sample of each before describing, the rest after: the HELP text is
            // rendered either way.
            let (before, after) = ALL.split_at(ALL.len() / 2);
            let record = |m: &Metric| match m.kind {
                Kind::Counter => metrics::counter!(m.name, "api" => "Produce").increment(1),
                Kind::Gauge => metrics::gauge!(m.name).set(1.0),
                Kind::Histogram => metrics::histogram!(m.name).record(0.001),
            };
            before.iter().for_each(record);
            describe();
            after.iter().for_each(record);
        });
        let text = handle.render();
        for m in ALL {
            let kind = match m.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let help = format!("# HELP {} {}\n# TYPE {} {kind}\n", m.name, m.help(), m.name);
            assert!(
                text.contains(&help),
                "{} not rendered as\n{help}in\n{text}",
                m.name
            );
        }
    }

    #[test]
    fn filesystem_usage_reads_the_data_dir() {
        let (used, free) = filesystem_usage(std::path::Path::new("/")).expect("statvfs");
        assert!(used > 0 && free > 0);
    }
}
