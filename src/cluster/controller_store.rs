//! What the controller needs from a metadata store, as a trait: an election with
//! terms, a consistent snapshot to place from, and writes fenced by the term (a
//! deposed controller's write fails). `EtcdStore` implements it; the controller
//! (`controller.rs`) knows only this trait.

use std::collections::BTreeMap;

use super::cache::Snapshot;
use super::store::{ControllerTerm, MetadataError, MetadataStore, TopicAssignment};

/// How a controller's write of a placement went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    Written,
    /// Someone (a leader's ISR change) wrote it since: re-read and decide again.
    Stale,
    /// This broker is no longer the controller.
    Fenced,
}

/// A metadata store a controller can be elected through and place partitions with.
/// Reads (`snapshot`, `controller`) come from the store's local copy; the writes are
/// fenced by the term and return once that copy shows them.
#[async_trait::async_trait]
pub trait ControllerStore: MetadataStore {
    /// This broker's id.
    fn node_id(&self) -> i32;
    /// A copy of everything the store knows, to place from.
    fn snapshot(&self) -> Snapshot;
    /// The elected controller and its term, if there is one right now.
    fn controller(&self) -> Option<ControllerTerm>;
    /// Tries to become the controller; returns the term when it did. `None` when
    /// another broker holds the role, or this broker may not lead (see `may_lead`).
    async fn campaign(&self) -> Result<Option<ControllerTerm>, MetadataError>;
    /// Gives up the controller role (on a clean shutdown), if still held in `term`.
    async fn resign(&self, term: ControllerTerm);
    /// Writes (`Some`) or removes (`None`) a topic's placement, only while `term`
    /// still holds (the fencing) and nobody changed it since revision `expected`
    /// (0: absent; `Snapshot::assignment_revisions`): a leader's ISR change in
    /// between must not be overwritten.
    async fn put_assignment(
        &self,
        term: ControllerTerm,
        topic: &str,
        assignment: Option<&TopicAssignment>,
        expected: i64,
    ) -> Result<Placed, MetadataError>;
    /// The broker incarnations the last controller placed partitions with (empty when
    /// none was saved), so that a new controller notices restarts that happened while
    /// there was none.
    async fn controller_incarnations(&self) -> Result<BTreeMap<i32, i64>, MetadataError>;
    /// Saves the incarnations this controller has placed with (fenced by its term).
    async fn save_controller_incarnations(
        &self,
        term: ControllerTerm,
        incarnations: &BTreeMap<i32, i64>,
    ) -> Result<Placed, MetadataError>;
}
