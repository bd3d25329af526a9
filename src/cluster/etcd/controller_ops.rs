//! What the controller does through etcd: campaign for the lease-held `controller`
//! key, resign, and the writes fenced by its term (placements, the incarnations it
//! placed with).

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

use super::cache::Placed;
use super::keys::ControllerRecord;
use super::{corrupt, EtcdStore};
use crate::cluster::store::{ControllerTerm, MetadataError, MetadataStore, TopicAssignment};

impl EtcdStore {
    /// Tries to become the controller; returns the term when it did.
    pub async fn campaign(&self) -> Result<Option<ControllerTerm>, MetadataError> {
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

    /// Gives up the controller role (on a clean shutdown), if still held in `term`.
    pub async fn resign(&self, term: ControllerTerm) {
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

    /// Writes a topic's placement, only while `term` still holds (the fencing) and
    /// nobody changed it since revision `expected` (0: absent) — a leader's ISR change
    /// in between must not be overwritten.
    pub async fn put_assignment(
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

    /// The broker incarnations the last controller placed partitions with (empty when
    /// none was saved), so that a new controller notices restarts that happened while
    /// there was none.
    pub async fn controller_incarnations(&self) -> Result<BTreeMap<i32, i64>, MetadataError> {
        let key = self.keys.controller_incarnations();
        match self.get(&key).await? {
            Some(kv) => serde_json::from_slice(kv.value()).map_err(|e| corrupt(&key, e)),
            None => Ok(BTreeMap::new()),
        }
    }

    /// Saves the incarnations this controller has placed with (fenced by its term).
    pub async fn save_controller_incarnations(
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
