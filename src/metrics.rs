//! Every metric name tern exports (Prometheus conventions: `tern_` prefix, base
//! units, `_total` counters), the recorder, and the side HTTP listener that serves
//! `/metrics`, `/health` (process alive) and `/ready` (started and serving).
//!
//! Subsystems record through the `metrics` facade with the names below; the sampler
//! task turns state that is cheaper to read than to track (log sizes, consumer lag,
//! disk) into gauges every few seconds.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Requests handled, by `api` (Kafka API name).
pub const REQUESTS_TOTAL: &str = "tern_requests_total";
/// Request latency from decode to encoded response, by `api`.
pub const REQUEST_DURATION_SECONDS: &str = "tern_request_duration_seconds";
/// Where a request's time went, by `api` and `phase`, as Kafka splits it: `queue`
/// (read, waiting for earlier requests on its connection), `local` (executing),
/// `remote` (waiting: fsync for acks=all produce, data for a long-polling fetch).
pub const REQUEST_PHASE_SECONDS: &str = "tern_request_phase_seconds";
/// ISR shrinks and expands (always 0 until replication lands).
pub const ISR_SHRINKS_TOTAL: &str = "tern_isr_shrinks_total";
pub const ISR_EXPANDS_TOTAL: &str = "tern_isr_expands_total";
/// Requests slower than `--slow-request-ms`, by `api`.
pub const SLOW_REQUESTS_TOTAL: &str = "tern_slow_requests_total";
/// Per-partition error codes returned, by `api` and `error`.
pub const PARTITION_ERRORS_TOTAL: &str = "tern_partition_errors_total";
/// Connections currently open.
pub const CONNECTIONS: &str = "tern_connections";
/// Connections accepted since start.
pub const CONNECTIONS_ACCEPTED_TOTAL: &str = "tern_connections_accepted_total";
/// Record-batch bytes appended, by `topic`.
pub const TOPIC_BYTES_IN_TOTAL: &str = "tern_topic_bytes_in_total";
/// Records appended, by `topic`.
pub const TOPIC_MESSAGES_IN_TOTAL: &str = "tern_topic_messages_in_total";
/// Record-batch bytes returned by Fetch, by `topic`.
pub const TOPIC_BYTES_OUT_TOTAL: &str = "tern_topic_bytes_out_total";
/// Records in the batches returned by Fetch, by `topic` (whole batches: a fetch
/// that starts inside a batch counts the records the client will skip too).
pub const TOPIC_MESSAGES_OUT_TOTAL: &str = "tern_topic_messages_out_total";
/// Bytes of a partition's log, by `topic` and `partition`.
pub const LOG_SIZE_BYTES: &str = "tern_log_size_bytes";
/// Segments of a partition's log, by `topic` and `partition`.
pub const LOG_SEGMENTS: &str = "tern_log_segments";
/// Log end offset of a partition, by `topic` and `partition`.
pub const LOG_END_OFFSET: &str = "tern_log_end_offset";
/// Partitions led by this broker.
pub const LEADER_PARTITIONS: &str = "tern_leader_partitions";
/// Partitions whose ISR is smaller than their replica set (0 until replication).
pub const UNDER_REPLICATED_PARTITIONS: &str = "tern_under_replicated_partitions";
/// Partitions with no leader.
pub const OFFLINE_PARTITIONS: &str = "tern_offline_partitions";
/// Partitions whose ISR is below min.insync.replicas.
pub const UNDER_MIN_ISR_PARTITIONS: &str = "tern_under_min_isr_partitions";
/// 1 when this broker is the active controller.
pub const CONTROLLER_ACTIVE: &str = "tern_controller_active";
/// HTTP API requests, by `route` and HTTP `status`.
pub const HTTP_REQUESTS_TOTAL: &str = "tern_http_requests_total";
/// HTTP API request latency (a long poll's wait included), by `route`.
pub const HTTP_REQUEST_DURATION_SECONDS: &str = "tern_http_request_duration_seconds";
/// Live brokers in the cluster, as this broker sees them.
pub const CLUSTER_BROKERS: &str = "tern_cluster_brokers";
/// 1 while this broker's etcd session (its lease) is alive by its own clock; only in
/// cluster mode (`--etcd`).
pub const ETCD_SESSION_UP: &str = "tern_etcd_session_up";
/// Times this broker's lease expired (it left the cluster and rejoined).
pub const ETCD_SESSION_EXPIRATIONS_TOTAL: &str = "tern_etcd_session_expirations_total";
/// Times the metadata watch was lost and everything re-read from etcd.
pub const ETCD_WATCH_RESYNCS_TOTAL: &str = "tern_etcd_watch_resyncs_total";
/// Times this broker was elected controller.
pub const CONTROLLER_ELECTIONS_TOTAL: &str = "tern_controller_elections_total";
/// Partition leaders moved by this broker as controller.
pub const PARTITION_LEADER_CHANGES_TOTAL: &str = "tern_partition_leader_changes_total";
/// Completed group rebalances (a new generation), by `group`.
pub const GROUP_REBALANCES_TOTAL: &str = "tern_group_rebalances_total";
/// Members in a group, by `group`.
pub const GROUP_MEMBERS: &str = "tern_group_members";
/// High watermark minus committed offset, by `group`, `topic`, `partition`.
pub const CONSUMER_GROUP_LAG: &str = "tern_consumer_group_lag";
/// Bytes used and free on the filesystem holding the data directory (the logs'
/// own size is `sum(tern_log_size_bytes)`).
pub const DATA_DIR_USED_BYTES: &str = "tern_data_dir_used_bytes";
pub const DATA_DIR_FREE_BYTES: &str = "tern_data_dir_free_bytes";

/// Latency buckets (seconds): 50 µs to 30 s, dense where produce and fetch live.
const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0,
];

/// Installs the global recorder (once per process) and returns its handle.
pub fn install() -> Option<PrometheusHandle> {
    static HANDLE: std::sync::OnceLock<Option<PrometheusHandle>> = std::sync::OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .ok()?;
            match builder.install_recorder() {
                Ok(handle) => Some(handle),
                Err(error) => {
                    tracing::warn!(%error, "metrics recorder not installed");
                    None
                }
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
            let mut ticker = tokio::time::interval(Duration::from_secs(5));
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
    let total = stat.f_blocks as u64 * block;
    let free = stat.f_bavail as u64 * block;
    Some((total.saturating_sub(stat.f_bfree as u64 * block), free))
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

    #[test]
    fn filesystem_usage_reads_the_data_dir() {
        let (used, free) = filesystem_usage(std::path::Path::new("/")).expect("statvfs");
        assert!(used > 0 && free > 0);
    }
}
