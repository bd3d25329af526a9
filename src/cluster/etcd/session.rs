//! This broker's session: a lease kept alive every third of its TTL, its registration
//! `brokers/<id>` attached to it, and the own-clock deadline past which it stops
//! acting as a leader (before etcd expires the lease and others take over).

use std::sync::atomic::Ordering;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio_util::sync::CancellationToken;

use super::{corrupt, etcd_error, EtcdStore};
use crate::cluster::store::{MetadataError, MetadataStore};
use crate::limits::ETCD_RETRY_PAUSE;
use crate::metrics as m;
use crate::model::monotonic_ms;

/// Whether etcd answered that a lease no longer exists (it expired).
fn lease_gone(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains("not found"),
        etcd_client::Error::GRpcStatus(status) => status.message().contains("not found"),
        _ => false,
    }
}

impl EtcdStore {
    /// Registers `brokers/<id>` under a fresh lease. With a `deadline`, gives up when
    /// another holder of this id (a previous incarnation) has not gone by then.
    pub(super) async fn register(
        &self,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<(), MetadataError> {
        let key = self.keys.broker(self.node.node_id);
        let value = serde_json::to_vec(&self.node).map_err(|e| corrupt(&key, e))?;
        let ttl_secs = self.lease_ttl.as_secs().max(1) as i64;
        let mut client = self.client.clone();
        let mut warned = false;
        loop {
            let granted_at = monotonic_ms();
            let lease = client
                .lease_grant(ttl_secs, None)
                .await
                .map_err(etcd_error)?
                .id();
            let txn = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    value.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            let response = match self.client.clone().txn(txn).await {
                Ok(response) => response,
                // The fresh lease expired before the put (a stalled process, a slow
                // etcd): grant another and try again rather than fail the start.
                Err(error) if lease_gone(&error) => {
                    tracing::warn!(node_id = self.node.node_id, %error, "lease expired before registering; retrying");
                    tokio::time::sleep(ETCD_RETRY_PAUSE).await;
                    continue;
                }
                Err(error) => return Err(etcd_error(error)),
            };
            if response.succeeded() {
                // No waiting for the watch here: at start-up it is not running yet,
                // and the lease is already ticking.
                self.lease.store(lease, Ordering::Release);
                // The put created the key: its create revision is the txn's revision.
                if let Some(header) = response.header() {
                    self.incarnation.store(header.revision(), Ordering::Release);
                }
                self.alive_until_ms.store(
                    granted_at + self.ttl_ms() - self.margin_ms(),
                    Ordering::Release,
                );
                tracing::info!(
                    node_id = self.node.node_id,
                    lease,
                    "registered in the cluster"
                );
                return Ok(());
            }
            let _ = client.lease_revoke(lease).await;
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                return Err(MetadataError::NodeIdTaken(self.node.node_id));
            }
            if !warned {
                tracing::warn!(
                    node_id = self.node.node_id,
                    "broker id still registered (a previous run?); waiting for its lease to expire"
                );
                warned = true;
            }
            tokio::time::sleep(ETCD_RETRY_PAUSE).await;
        }
    }

    /// Keeps the session alive until shutdown, re-registering under a new lease when
    /// the old one expired (the broker then rejoins the ring).
    pub async fn run_session(&self, shutdown: CancellationToken) {
        loop {
            let outcome = tokio::select! {
                _ = shutdown.cancelled() => return,
                outcome = self.keep_alive() => outcome,
            };
            if let Err(error) = outcome {
                tracing::warn!(%error, "etcd session trouble");
            }
            metrics::gauge!(m::ETCD_SESSION_UP).set(if self.may_lead() { 1.0 } else { 0.0 });
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(ETCD_RETRY_PAUSE) => {}
            }
        }
    }

    pub(super) async fn keep_alive(&self) -> Result<(), MetadataError> {
        if self.lease.load(Ordering::Acquire) == 0 {
            self.register(None).await?;
        }
        let lease = self.lease.load(Ordering::Acquire);
        match self.renew(lease).await {
            // etcd says the lease is gone either with a TTL of 0 or with an error.
            Err(error) if lease_gone(&error) => {
                self.lease.store(0, Ordering::Release);
                self.alive_until_ms.store(0, Ordering::Release);
                metrics::counter!(m::ETCD_SESSION_EXPIRATIONS_TOTAL).increment(1);
                metrics::gauge!(m::ETCD_SESSION_UP).set(0.0);
                Err(MetadataError::Etcd(format!(
                    "lease {lease} expired: this broker left the cluster and rejoins"
                )))
            }
            Err(error) => Err(etcd_error(error)),
            Ok(()) => Ok(()),
        }
    }

    /// Renews `lease` every third of its TTL until something fails.
    pub(super) async fn renew(&self, lease: i64) -> Result<(), etcd_client::Error> {
        let period = self.lease_ttl / 3;
        let (mut keeper, mut responses) = self.client.clone().lease_keep_alive(lease).await?;
        loop {
            let sent_at = monotonic_ms();
            keeper.keep_alive().await?;
            let response = tokio::time::timeout(period, responses.message())
                .await
                .map_err(|_| etcd_client::Error::LeaseKeepAliveError("unanswered".into()))?
                .and_then(|r| {
                    r.ok_or_else(|| etcd_client::Error::LeaseKeepAliveError("stream ended".into()))
                })?;
            if response.ttl() <= 0 {
                return Err(etcd_client::Error::LeaseKeepAliveError(
                    "lease not found".into(),
                ));
            }
            self.alive_until_ms.store(
                sent_at + self.ttl_ms() - self.margin_ms(),
                Ordering::Release,
            );
            metrics::gauge!(m::ETCD_SESSION_UP).set(1.0);
            tokio::time::sleep(period.saturating_sub(Duration::from_millis(
                monotonic_ms().saturating_sub(sent_at),
            )))
            .await;
        }
    }
}
