//! `ControllerStore` on etcd: campaign for the lease-held `controller` key, resign, and the writes fenced by its term (placements, the incarnations it
//! placed with).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::keys::ControllerRecord;
use super::{corrupt, EtcdStore};
use crate::cluster::cache::Snapshot;
use crate::cluster::controller_store::{ControllerStore, Placed};
use crate::cluster::store::{ControllerTerm, MetadataError, MetadataStore, TopicAssignment};

#[async_trait::async_trait]
impl ControllerStore for EtcdStore {
    fn node_id(&self) -> i32 {
        self.node.node_id
    }

    fn snapshot(&self) -> Snapshot {
        self.cache.snapshot()
    }

    fn controller(&self) -> Option<ControllerTerm> {
        self.cache.controller()
    }

    /// Creates the `controller` key on this broker's lease if absent; its create
    /// revision is the term.
    async fn campaign(&self) -> Result<Option<ControllerTerm>, MetadataError> {
        let lease = self.lease.load(Ordering::Acquire);
        if lease == 0 || !self.may_lead() {
            return Ok(None);
        }
        let key = self.keys.controller();
        let record = ControllerRecord {
            node_id: self.node.node_id,
        };
        let value = serde_json::to_vec(&record).map_err(|e| corrupt(&key, e))?;
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let response = self.txn(txn).await?;
        if !response.succeeded() {
            return Ok(None);
        }
        let revision = response.header().map_or(0, |h| h.revision());
        self.wait_applied(revision).await;
        Ok(Some(ControllerTerm {
            node_id: self.node.node_id,
            revision,
        }))
    }

    /// Deletes the `controller` key if it still has the term's create revision.
    async fn resign(&self, term: ControllerTerm) {
        let key = self.keys.controller();
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                term.revision,
            )])
            .and_then([TxnOp::delete(key, None)]);
        if let Err(error) = self.txn(txn).await {
            tracing::warn!(%error, "could not resign as controller; the lease will expire");
        }
    }

    /// One transaction guarded by the `controller` key's create revision (the term)
    /// and the placement key's mod revision; when it fails, a second tells stale from
    /// fenced.
    async fn put_assignment(
        &self,
        term: ControllerTerm,
        topic: &str,
        assignment: Option<&TopicAssignment>,
        expected: i64,
    ) -> Result<Placed, MetadataError> {
        let key = self.keys.assignment(topic);
        let operation = match assignment {
            Some(assignment) => {
                let value = serde_json::to_vec(assignment).map_err(|e| corrupt(&key, e))?;
                TxnOp::put(key.clone(), value, None)
            }
            None => TxnOp::delete(key.clone(), None),
        };
        let controller =
            Compare::create_revision(self.keys.controller(), CompareOp::Equal, term.revision);
        let txn = Txn::new()
            .when([
                controller.clone(),
                Compare::mod_revision(key, CompareOp::Equal, expected),
            ])
            .and_then([operation]);
        if self.txn_seen(txn).await?.succeeded() {
            return Ok(Placed::Written);
        }
        let still_controller = Txn::new().when([controller]);
        Ok(if self.txn(still_controller).await?.succeeded() {
            Placed::Stale
        } else {
            Placed::Fenced
        })
    }

    /// Read from etcd (`controller-incarnations`), not the cache.
    async fn controller_incarnations(&self) -> Result<BTreeMap<i32, i64>, MetadataError> {
        let key = self.keys.controller_incarnations();
        match self.get(&key).await? {
            Some(kv) => serde_json::from_slice(kv.value()).map_err(|e| corrupt(&key, e)),
            None => Ok(BTreeMap::new()),
        }
    }

    async fn save_controller_incarnations(
        &self,
        term: ControllerTerm,
        incarnations: &BTreeMap<i32, i64>,
    ) -> Result<Placed, MetadataError> {
        let key = self.keys.controller_incarnations();
        let value = serde_json::to_vec(incarnations).map_err(|e| corrupt(&key, e))?;
        let controller =
            Compare::create_revision(self.keys.controller(), CompareOp::Equal, term.revision);
        let txn = Txn::new()
            .when([controller])
            .and_then([TxnOp::put(key, value, None)]);
        Ok(if self.txn(txn).await?.succeeded() {
            Placed::Written
        } else {
            Placed::Fenced
        })
    }
}
