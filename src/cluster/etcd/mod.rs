//! The cluster's metadata store on etcd, and this broker's membership in it; the only
//! place that knows etcd exists.
//!
//! - `keys.rs`: the key layout under `/tern/<cluster-id>/` and its encoding;
//! - `cache.rs`: how a key's put or delete changes the local copy (`cluster::cache`);
//! - `watch.rs`: the range read and the watch that keep that copy current
//!   (read-your-writes on this broker);
//! - `txn.rs`: reads with their revisions and the compare-and-swap writes;
//! - `session.rs`: the lease, its keep-alive and this broker's registration;
//! - `controller_ops.rs`: `ControllerStore` (campaign, the writes fenced by the term);
//! - `store.rs`: the `MetadataStore` implementation.
//!
//! Every broker keeps the whole prefix in a local cache: one range read, then a watch
//! from the next revision, so that reads on the request path never touch etcd and
//! changes arrive as notifications. A lost watch (etcd restarted, history compacted)
//! re-reads everything and announces `Resynced`. A write returns once the cache has
//! seen it (read-your-writes on this broker).
//!
//! The session: a lease of `--etcd-lease-ttl-secs`, kept alive every third of it, with
//! `brokers/<id>` attached. Per etcd's advice, the broker stops acting as a leader by
//! its own clock — when the last acknowledged keep-alive is older than the TTL minus
//! a margin — before etcd expires the lease and others take over.

mod cache;
mod controller_ops;
mod keys;
mod session;
mod store;
mod txn;
mod watch;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use tokio::sync::{broadcast, watch as tokio_watch};
use tokio_util::sync::CancellationToken;

use self::keys::Keys;
use super::cache::MetadataCache;
use super::store::{BrokerInfo, MetadataError, MetadataEvent};
use crate::limits::{
    ETCD_CONNECT_TIMEOUT, ETCD_KEEP_ALIVE, ETCD_LEASE_MIN_MARGIN, ETCD_REGISTER_GRACE,
    ETCD_REQUEST_TIMEOUT, ETCD_RETRY_PAUSE, ETCD_STARTUP_RETRY,
};

/// How to reach etcd and how long this broker's session lasts.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    pub lease_ttl: Duration,
}

pub(super) fn etcd_error(error: etcd_client::Error) -> MetadataError {
    MetadataError::Etcd(error.to_string())
}

pub(super) fn corrupt(key: &str, error: serde_json::Error) -> MetadataError {
    MetadataError::Corrupt(format!("{key}: {error}"))
}

/// The etcd-backed metadata store; see the module docs.
pub struct EtcdStore {
    client: Client,
    keys: Keys,
    cluster_id: String,
    node: BrokerInfo,
    lease_ttl: Duration,
    cache: MetadataCache,
    /// The etcd revision the cache reflects.
    applied: tokio_watch::Sender<i64>,
    /// Cancelled when the watch stops for good (shutdown): nothing will apply a newer
    /// revision, so read-your-writes waits end at once instead of timing out.
    watch_ended: CancellationToken,
    events: broadcast::Sender<MetadataEvent>,
    /// This broker's lease; 0 while it has none.
    lease: AtomicI64,
    /// The create revision of this process's registration; 0 before it registered.
    incarnation: AtomicI64,
    /// Until when (monotonic ms) the lease is certainly alive, by this broker's clock.
    alive_until_ms: AtomicU64,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.keys.prefix)
            .field("node", &self.node)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects, loads the cache and registers this broker, waiting (up to a lease
    /// TTL and a bit) for a previous incarnation's registration to expire.
    pub async fn connect(
        config: &EtcdConfig,
        cluster_id: &str,
        node: BrokerInfo,
    ) -> Result<Self, MetadataError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(ETCD_CONNECT_TIMEOUT)
            .with_timeout(ETCD_REQUEST_TIMEOUT)
            .with_keep_alive(ETCD_KEEP_ALIVE.0, ETCD_KEEP_ALIVE.1);
        let client = Client::connect(&config.endpoints, Some(options))
            .await
            .map_err(etcd_error)?;
        let (applied, _) = tokio_watch::channel(0);
        let (events, _) = broadcast::channel(4096);
        let store = Self {
            client,
            keys: Keys {
                prefix: format!("/tern/{cluster_id}/"),
            },
            cluster_id: cluster_id.to_string(),
            node,
            lease_ttl: config.lease_ttl,
            cache: MetadataCache::default(),
            applied,
            watch_ended: CancellationToken::new(),
            events,
            lease: AtomicI64::new(0),
            incarnation: AtomicI64::new(0),
            alive_until_ms: AtomicU64::new(0),
        };
        let started = tokio::time::Instant::now();
        loop {
            match store.join(config.lease_ttl).await {
                Ok(()) => return Ok(store),
                Err(error @ MetadataError::NodeIdTaken(_)) => return Err(error),
                Err(error) if started.elapsed() < ETCD_STARTUP_RETRY => {
                    tracing::warn!(%error, "cannot join the cluster yet; retrying");
                    tokio::time::sleep(ETCD_RETRY_PAUSE).await;
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Registers, giving a previous run's registration of this broker id a lease TTL
    /// (and a grace) to expire, then loads the cache: so that it shows this broker's
    /// own registration when `connect` returns (read-your-writes, before any watch
    /// runs). A retry after a failed load keeps the registration it made.
    pub(super) async fn join(&self, lease_ttl: Duration) -> Result<(), MetadataError> {
        if self.lease.load(Ordering::Acquire) == 0 {
            let deadline = tokio::time::Instant::now() + lease_ttl + ETCD_REGISTER_GRACE;
            self.register(Some(deadline)).await?;
        }
        self.resync().await?;
        Ok(())
    }

    pub(super) fn ttl_ms(&self) -> u64 {
        self.lease_ttl.as_millis() as u64
    }

    /// Time before the TTL at which this broker considers itself out.
    pub(super) fn margin_ms(&self) -> u64 {
        (self.ttl_ms() / 6).max(ETCD_LEASE_MIN_MARGIN.as_millis() as u64)
    }

    pub(super) fn publish(&self, event: MetadataEvent) {
        let _ = self.events.send(event);
    }
}
