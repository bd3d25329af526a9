//! The local copy of the cluster's metadata that a store serves its reads from, and
//! the one set of readers over it: `EmbeddedStore` rebuilds the copy from its file's
//! state after every write, `EtcdStore` keeps it current from etcd's watch. No I/O
//! here; a read waits only for the copy's short lock.

use std::collections::BTreeMap;

use parking_lot::RwLock;
use uuid::Uuid;

use super::store::{BrokerInfo, ControllerTerm, TopicAssignment, TopicSpec, UserCredentials};
use crate::security::acl::AclBinding;
use crate::security::credentials::{ScramMechanism, StoredScramCredential};

/// Everything a store knows, at one moment.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub topics: BTreeMap<String, TopicSpec>,
    /// Where each topic's partitions live, by topic name; may be left from a deleted
    /// topic of the same name (see [`MetadataCache::assignment`]).
    pub assignments: BTreeMap<String, TopicAssignment>,
    /// The etcd mod revision of each `assignments/<name>` key: what a compare-and-swap
    /// of the controller's next write of it must match (empty in the embedded store).
    pub assignment_revisions: BTreeMap<String, i64>,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// Each live broker's incarnation: the create revision of its registration, new on
    /// every (re)start or re-registration after a lapsed lease (Kafka's broker epoch);
    /// empty in the embedded store.
    pub incarnations: BTreeMap<i32, i64>,
    pub controller: Option<ControllerTerm>,
    /// Dynamic broker configs by level (`None`: the cluster-wide default).
    pub broker_configs: BTreeMap<Option<i32>, BTreeMap<String, String>>,
    /// Dynamic group configs (GROUP resources) by group id.
    pub group_configs: BTreeMap<String, BTreeMap<String, String>>,
    pub users: UserCredentials,
    /// Client quotas by entity (`QuotaEntity::storage_key`), then config key → value.
    pub client_quotas: BTreeMap<String, BTreeMap<String, String>>,
    /// ACL bindings by their storage key (`AclBinding::storage_key`).
    pub acls: BTreeMap<String, AclBinding>,
}

/// A store's local copy behind its lock, with the readers both stores answer with.
#[derive(Debug, Default)]
pub struct MetadataCache {
    snapshot: RwLock<Snapshot>,
}

impl MetadataCache {
    pub fn new(snapshot: Snapshot) -> Self {
        Self {
            snapshot: RwLock::new(snapshot),
        }
    }

    /// A copy of the whole cache.
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot.read().clone()
    }

    /// Replaces the whole cache (a store that re-read everything).
    pub fn replace(&self, fresh: Snapshot) {
        *self.snapshot.write() = fresh;
    }

    /// Changes the cache under its write lock (a store applying a batch of changes
    /// that readers must see together).
    pub fn update<T>(&self, change: impl FnOnce(&mut Snapshot) -> T) -> T {
        change(&mut self.snapshot.write())
    }

    /// Every topic, by name.
    pub fn topics(&self) -> Vec<TopicSpec> {
        self.snapshot.read().topics.values().cloned().collect()
    }

    pub fn topic(&self, name: &str) -> Option<TopicSpec> {
        self.snapshot.read().topics.get(name).cloned()
    }

    pub fn topic_by_id(&self, topic_id: Uuid) -> Option<TopicSpec> {
        self.snapshot
            .read()
            .topics
            .values()
            .find(|t| t.topic_id == topic_id)
            .cloned()
    }

    /// Where the partitions of `spec` live; `None` until placed, and for a placement
    /// left from a deleted topic of the same name (another topic id).
    pub fn assignment(&self, spec: &TopicSpec) -> Option<TopicAssignment> {
        let snapshot = self.snapshot.read();
        let assignment = snapshot.assignments.get(&spec.name)?;
        (assignment.topic_id == spec.topic_id).then(|| assignment.clone())
    }

    /// Live brokers, by id.
    pub fn brokers(&self) -> Vec<BrokerInfo> {
        self.snapshot.read().brokers.values().cloned().collect()
    }

    /// The ids of the live brokers, ascending.
    pub fn broker_ids(&self) -> Vec<i32> {
        self.snapshot.read().brokers.keys().copied().collect()
    }

    pub fn controller(&self) -> Option<ControllerTerm> {
        self.snapshot.read().controller
    }

    pub fn controller_id(&self) -> Option<i32> {
        self.controller().map(|c| c.node_id)
    }

    /// The dynamic broker configs of one level (`None`: the cluster-wide default);
    /// empty when none are set.
    pub fn broker_configs(&self, broker: Option<i32>) -> BTreeMap<String, String> {
        self.snapshot
            .read()
            .broker_configs
            .get(&broker)
            .cloned()
            .unwrap_or_default()
    }

    /// A group's dynamic configs; empty when none are set.
    pub fn group_configs(&self, group: &str) -> BTreeMap<String, String> {
        self.snapshot
            .read()
            .group_configs
            .get(group)
            .cloned()
            .unwrap_or_default()
    }

    /// Every client quota entity's values.
    pub fn client_quotas(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.snapshot.read().client_quotas.clone()
    }

    /// Every ACL binding, in `AclBinding`'s order (resource type, then name, …).
    pub fn acls(&self) -> Vec<AclBinding> {
        let mut bindings: Vec<AclBinding> = self.snapshot.read().acls.values().cloned().collect();
        bindings.sort();
        bindings
    }

    pub fn scram_credentials(&self) -> UserCredentials {
        self.snapshot.read().users.clone()
    }

    pub fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<StoredScramCredential> {
        self.snapshot
            .read()
            .users
            .get(user)?
            .get(mechanism.name())
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> TopicSpec {
        TopicSpec {
            name: name.to_string(),
            topic_id: Uuid::new_v4(),
            numeric_id: 1,
            partitions: 2,
            replication_factor: 1,
            configs: BTreeMap::new(),
            replica_assignments: BTreeMap::new(),
        }
    }

    #[test]
    fn a_placement_left_from_a_deleted_topic_of_the_same_name_is_not_returned() {
        let old = spec("a");
        let new = spec("a");
        let mut snapshot = Snapshot::default();
        snapshot
            .assignments
            .insert("a".to_string(), TopicAssignment::all_on(&old, 1));
        let cache = MetadataCache::new(snapshot);
        assert!(cache.assignment(&old).is_some());
        assert!(cache.assignment(&new).is_none());
    }
}
