//! Keeping the cache current: one range read of the prefix, then a watch from the
//! next revision; a lost watch re-reads everything. Writers wait here until the cache
//! has seen their write (read-your-writes).

use etcd_client::{EventType, GetOptions, WatchOptions};
use tokio_util::sync::CancellationToken;

use super::cache::apply;
use super::{etcd_error, EtcdStore};
use crate::cluster::cache::Snapshot;
use crate::cluster::store::{MetadataError, MetadataEvent};
use crate::limits::{ETCD_READ_YOUR_WRITES_WAIT as READ_YOUR_WRITES_WAIT, ETCD_RETRY_PAUSE};
use crate::metrics as m;

impl EtcdStore {
    /// Re-reads everything under the prefix and replaces the cache; returns the revision.
    pub(super) async fn resync(&self) -> Result<i64, MetadataError> {
        let response = self
            .client
            .clone()
            .get(
                self.keys.prefix.clone(),
                Some(GetOptions::new().with_prefix()),
            )
            .await
            .map_err(etcd_error)?;
        let revision = response.header().map_or(0, |h| h.revision());
        let mut fresh = Snapshot::default();
        for kv in response.kvs() {
            apply(&mut fresh, &self.keys.prefix, kv, true);
        }
        self.cache.replace(fresh);
        self.applied.send_replace(revision);
        self.publish(MetadataEvent::Resynced);
        Ok(revision)
    }

    /// Waits (bounded) until the cache reflects `revision`.
    pub(super) async fn wait_applied(&self, revision: i64) {
        let mut applied = self.applied.subscribe();
        let caught_up = tokio::select! {
            _ = self.watch_ended.cancelled() => return,
            caught_up = tokio::time::timeout(READ_YOUR_WRITES_WAIT, applied.wait_for(|r| *r >= revision)) => caught_up,
        };
        if caught_up.is_err() {
            tracing::warn!(
                revision,
                "metadata cache is behind etcd; the watch may be down"
            );
        }
    }

    /// Follows the prefix until shutdown: watch from the cache's revision, apply and
    /// announce each change; on any failure re-read everything and watch again.
    pub async fn run_watch(&self, shutdown: CancellationToken) {
        let _ended = self.watch_ended.clone().drop_guard();
        loop {
            let from = *self.applied.borrow() + 1;
            let outcome = self.watch_from(from, &shutdown).await;
            if shutdown.is_cancelled() {
                return;
            }
            if let Err(error) = outcome {
                tracing::warn!(%error, "etcd watch lost; re-reading the metadata");
            }
            metrics::counter!(m::ETCD_WATCH_RESYNCS_TOTAL).increment(1);
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(ETCD_RETRY_PAUSE) => {}
                }
                match self.resync().await {
                    Ok(_) => break,
                    Err(error) => {
                        tracing::warn!(%error, "re-reading the metadata from etcd failed")
                    }
                }
            }
        }
    }

    pub(super) async fn watch_from(
        &self,
        from: i64,
        shutdown: &CancellationToken,
    ) -> Result<(), MetadataError> {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_progress_notify();
        let mut stream = self
            .client
            .clone()
            .watch(self.keys.prefix.clone(), Some(options))
            .await
            .map_err(etcd_error)?;
        loop {
            let message = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                message = stream.message() => message.map_err(etcd_error)?,
            };
            let Some(response) = message else {
                return Err(MetadataError::Etcd("watch stream ended".into()));
            };
            if response.canceled() || response.compact_revision() > 0 {
                return Err(MetadataError::Etcd(format!(
                    "watch canceled: {}",
                    response.cancel_reason()
                )));
            }
            let mut events = Vec::new();
            let mut revision = None;
            self.cache.update(|cache| {
                for event in response.events() {
                    let Some(kv) = event.kv() else { continue };
                    let put = event.event_type() == EventType::Put;
                    events.extend(apply(cache, &self.keys.prefix, kv, put));
                    revision = Some(kv.mod_revision());
                }
            });
            if let Some(revision) = revision {
                self.applied.send_if_modified(|r| {
                    let newer = revision > *r;
                    if newer {
                        *r = revision;
                    }
                    newer
                });
            }
            for event in events {
                self.publish(event);
            }
        }
    }
}
