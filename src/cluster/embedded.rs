//! The single-node metadata store: all cluster metadata in one JSON document in the data
//! directory, rewritten atomically (temp file, fsync, rename) on every change. Changes
//! are rare (topic admin, producer-id blocks), so simplicity beats write throughput.
//! Reads are served by the shared `MetadataCache`, rebuilt from the state after each
//! write: the one broker is the only one, the controller, and the leader of everything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::cache::{MetadataCache, Snapshot};
use super::store::{
    BrokerInfo, ControllerTerm, MetadataError, MetadataEvent, MetadataStore, NewTopic,
    TopicAssignment, TopicSpec, UserCredentials,
};
use crate::log::write_atomically;
use crate::security::acl::AclBinding;
use crate::security::credentials::{ScramMechanism, StoredScramCredential};

const FILE_NAME: &str = "metadata.json";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct State {
    cluster_id: String,
    topics: BTreeMap<String, TopicSpec>,
    next_producer_id: i64,
    next_topic_numeric_id: i64,
    /// Dynamic broker configs by level: `<default>` or a broker id (as in Kafka's
    /// `/configs/brokers/<...>`). Absent from files written before they existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    broker_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// Dynamic group configs by group id. Absent from files written before they existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    group_configs: BTreeMap<String, BTreeMap<String, String>>,
    /// SCRAM credentials by user and mechanism.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    users: UserCredentials,
    /// Client quotas by entity storage key. Absent from files written before them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    client_quotas: BTreeMap<String, BTreeMap<String, String>>,
    /// ACL bindings, a set (kept sorted so that the file is stable). Absent from files
    /// written before ACLs existed.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    acls: std::collections::BTreeSet<AclBinding>,
}

/// The key of a dynamic broker config level.
fn broker_configs_key(broker: Option<i32>) -> String {
    broker.map_or_else(|| "<default>".to_string(), |id| id.to_string())
}

/// The level a key of `State::broker_configs` names; `None` for one that names none.
fn broker_configs_level(key: &str) -> Option<Option<i32>> {
    match key {
        "<default>" => Some(None),
        id => id.parse().ok().map(Some),
    }
}

impl State {
    /// What readers see of this state on the single broker `node`: it is the only
    /// broker, the controller, and the leader of every partition (epoch 0).
    fn snapshot(&self, node: &BrokerInfo) -> Snapshot {
        Snapshot {
            topics: self.topics.clone(),
            assignments: self
                .topics
                .iter()
                .map(|(name, spec)| (name.clone(), TopicAssignment::all_on(spec, node.node_id)))
                .collect(),
            assignment_revisions: BTreeMap::new(),
            brokers: BTreeMap::from([(node.node_id, node.clone())]),
            incarnations: BTreeMap::new(),
            controller: Some(ControllerTerm {
                node_id: node.node_id,
                revision: 0,
            }),
            broker_configs: self
                .broker_configs
                .iter()
                .filter_map(|(key, configs)| Some((broker_configs_level(key)?, configs.clone())))
                .collect(),
            group_configs: self.group_configs.clone(),
            users: self.users.clone(),
            client_quotas: self.client_quotas.clone(),
            acls: self
                .acls
                .iter()
                .map(|binding| (binding.storage_key(), binding.clone()))
                .collect(),
        }
    }
}

#[derive(Debug)]
pub struct EmbeddedStore {
    path: PathBuf,
    /// The persisted document; its lock also orders writers.
    state: Mutex<State>,
    /// What readers see, rebuilt from `state` after every write.
    cache: MetadataCache,
    events: broadcast::Sender<MetadataEvent>,
    /// The one broker: leader of everything, and the controller.
    node: BrokerInfo,
}

/// A fresh, Kafka-style cluster id: 16 random bytes in URL-safe base64 without padding.
fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = *Uuid::new_v4().as_bytes();
    let mut out = String::with_capacity(22);
    let mut bits: u32 = 0;
    let mut nbits = 0;
    for byte in bytes {
        bits = (bits << 8) | u32::from(byte);
        nbits += 8;
        while nbits >= 6 {
            nbits -= 6;
            out.push(ALPHABET[((bits >> nbits) & 63) as usize] as char);
        }
    }
    if nbits > 0 {
        out.push(ALPHABET[((bits << (6 - nbits)) & 63) as usize] as char);
    }
    out
}

impl EmbeddedStore {
    /// Opens the store in `data_dir`, creating it (with `cluster_id` or a random one),
    /// for the single broker `node`.
    pub fn open(
        data_dir: &Path,
        cluster_id: Option<&str>,
        node: BrokerInfo,
    ) -> Result<Self, MetadataError> {
        std::fs::create_dir_all(data_dir)?;
        let path = data_dir.join(FILE_NAME);
        let state = match std::fs::read(&path) {
            Ok(raw) => serde_json::from_slice::<State>(&raw)
                .map_err(|e| MetadataError::Corrupt(e.to_string()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let state = State {
                    cluster_id: cluster_id.map_or_else(new_cluster_id, str::to_string),
                    topics: BTreeMap::new(),
                    next_producer_id: 1000,
                    next_topic_numeric_id: 1,
                    broker_configs: BTreeMap::new(),
                    group_configs: BTreeMap::new(),
                    users: BTreeMap::new(),
                    client_quotas: BTreeMap::new(),
                    acls: Default::default(),
                };
                persist(&path, &state)?;
                state
            }
            Err(e) => return Err(e.into()),
        };
        let (events, _) = broadcast::channel(1024);
        Ok(Self {
            path,
            cache: MetadataCache::new(state.snapshot(&node)),
            state: Mutex::new(state),
            events,
            node,
        })
    }

    /// Applies `change` to a copy of the state, persists it, then publishes it.
    fn update<T>(
        &self,
        change: impl FnOnce(&mut State) -> Result<T, MetadataError>,
    ) -> Result<T, MetadataError> {
        let mut guard = self.state.lock();
        let mut next = guard.clone();
        let out = change(&mut next)?;
        persist(&self.path, &next)?;
        self.cache.replace(next.snapshot(&self.node));
        *guard = next;
        Ok(out)
    }

    fn publish(&self, event: MetadataEvent) {
        // No subscriber is fine: nobody needs to hear about it.
        let _ = self.events.send(event);
    }
}

fn persist(path: &Path, state: &State) -> Result<(), MetadataError> {
    let raw =
        serde_json::to_vec_pretty(state).map_err(|e| MetadataError::Corrupt(e.to_string()))?;
    write_atomically(path, &raw)?;
    Ok(())
}

#[async_trait::async_trait]
impl MetadataStore for EmbeddedStore {
    fn cluster_id(&self) -> String {
        self.state.lock().cluster_id.clone()
    }

    async fn topics(&self) -> Vec<TopicSpec> {
        self.cache.topics()
    }

    async fn topic(&self, name: &str) -> Option<TopicSpec> {
        self.cache.topic(name)
    }

    async fn topic_by_id(&self, topic_id: Uuid) -> Option<TopicSpec> {
        self.cache.topic_by_id(topic_id)
    }

    async fn create_topic(&self, topic: NewTopic) -> Result<TopicSpec, MetadataError> {
        let spec = self.update(|state| {
            if state.topics.contains_key(&topic.name) {
                return Err(MetadataError::TopicExists(topic.name.clone()));
            }
            let spec = TopicSpec {
                name: topic.name.clone(),
                topic_id: Uuid::new_v4(),
                numeric_id: state.next_topic_numeric_id,
                partitions: topic.partitions,
                replication_factor: topic.replication_factor,
                configs: topic.configs.clone(),
                replica_assignments: topic.assignments.clone(),
            };
            state.next_topic_numeric_id += 1;
            state.topics.insert(spec.name.clone(), spec.clone());
            Ok(spec)
        })?;
        self.publish(MetadataEvent::TopicCreated(spec.clone()));
        Ok(spec)
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicSpec, MetadataError> {
        let spec = self.update(|state| {
            state
                .topics
                .remove(name)
                .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))
        })?;
        self.publish(MetadataEvent::TopicDeleted(spec.clone()));
        Ok(spec)
    }

    async fn set_partition_count(
        &self,
        name: &str,
        count: i32,
        assignments: &BTreeMap<i32, Vec<i32>>,
    ) -> Result<TopicSpec, MetadataError> {
        let spec = self.update(|state| {
            let topic = state
                .topics
                .get_mut(name)
                .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
            if count <= topic.partitions {
                return Err(MetadataError::InvalidPartitionCount {
                    topic: name.to_string(),
                    current: topic.partitions,
                    requested: count,
                });
            }
            topic.partitions = count;
            let changes = assignments
                .iter()
                .map(|(index, replicas)| (*index, Some(replicas.clone())))
                .collect();
            super::reassignment::apply_pins(topic, &changes);
            Ok(topic.clone())
        })?;
        self.publish(MetadataEvent::TopicChanged(spec.clone()));
        Ok(spec)
    }

    /// One node holds every replica: a pin can only name it, and changes nothing but
    /// the record of it.
    async fn set_replica_assignments(
        &self,
        name: &str,
        topic_id: Uuid,
        changes: &BTreeMap<i32, Option<Vec<i32>>>,
    ) -> Result<TopicSpec, MetadataError> {
        let spec = self.update(|state| {
            let topic = state
                .topics
                .get_mut(name)
                .filter(|t| t.topic_id == topic_id)
                .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
            super::reassignment::apply_pins(topic, changes);
            Ok(topic.clone())
        })?;
        self.publish(MetadataEvent::TopicChanged(spec.clone()));
        Ok(spec)
    }

    async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicSpec, MetadataError> {
        let spec = self.update(|state| {
            let topic = state
                .topics
                .get_mut(name)
                .ok_or_else(|| MetadataError::UnknownTopic(name.to_string()))?;
            topic.configs = configs;
            Ok(topic.clone())
        })?;
        self.publish(MetadataEvent::TopicChanged(spec.clone()));
        Ok(spec)
    }

    fn broker_configs(&self, broker: Option<i32>) -> BTreeMap<String, String> {
        self.cache.broker_configs(broker)
    }

    fn acls(&self) -> Vec<AclBinding> {
        self.cache.acls()
    }

    async fn create_acls(&self, bindings: &[AclBinding]) -> Result<(), MetadataError> {
        self.update(|state| {
            state.acls.extend(bindings.iter().cloned());
            Ok(())
        })?;
        self.publish(MetadataEvent::AclsChanged);
        Ok(())
    }

    async fn delete_acls(&self, bindings: &[AclBinding]) -> Result<(), MetadataError> {
        self.update(|state| {
            for binding in bindings {
                state.acls.remove(binding);
            }
            Ok(())
        })?;
        self.publish(MetadataEvent::AclsChanged);
        Ok(())
    }

    async fn set_broker_configs(
        &self,
        broker: Option<i32>,
        configs: BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        self.update(|state| {
            let key = broker_configs_key(broker);
            if configs.is_empty() {
                state.broker_configs.remove(&key);
            } else {
                state.broker_configs.insert(key, configs);
            }
            Ok(())
        })?;
        self.publish(MetadataEvent::BrokerConfigsChanged(broker));
        Ok(())
    }

    fn group_configs(&self, group: &str) -> BTreeMap<String, String> {
        self.cache.group_configs(group)
    }

    async fn set_group_configs(
        &self,
        group: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        self.update(|state| {
            if configs.is_empty() {
                state.group_configs.remove(group);
            } else {
                state.group_configs.insert(group.to_string(), configs);
            }
            Ok(())
        })
    }

    fn client_quotas(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.cache.client_quotas()
    }

    async fn set_client_quotas(
        &self,
        entity: &str,
        values: BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        self.update(|state| {
            if values.is_empty() {
                state.client_quotas.remove(entity);
            } else {
                state.client_quotas.insert(entity.to_string(), values);
            }
            Ok(())
        })?;
        self.publish(MetadataEvent::ClientQuotasChanged);
        Ok(())
    }

    async fn allocate_producer_ids(&self, count: i64) -> Result<i64, MetadataError> {
        self.update(|state| {
            let first = state.next_producer_id;
            state.next_producer_id += count.max(1);
            Ok(first)
        })
    }

    fn scram_credentials(&self) -> UserCredentials {
        self.cache.scram_credentials()
    }

    fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<StoredScramCredential> {
        self.cache.scram_credential(user, mechanism)
    }

    async fn set_scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        credential: Option<StoredScramCredential>,
    ) -> Result<(), MetadataError> {
        self.update(|state| {
            super::store::set_user_credential(&mut state.users, user, mechanism.name(), credential);
            Ok(())
        })
    }

    fn subscribe(&self) -> broadcast::Receiver<MetadataEvent> {
        self.events.subscribe()
    }

    fn brokers(&self) -> Vec<BrokerInfo> {
        self.cache.brokers()
    }

    fn controller_id(&self) -> Option<i32> {
        self.cache.controller_id()
    }

    fn assignment(&self, spec: &TopicSpec) -> Option<TopicAssignment> {
        self.cache.assignment(spec)
    }

    /// One node is the whole ISR of everything: no change can be written.
    async fn alter_partitions(
        &self,
        _topic: &str,
        _topic_id: Uuid,
        changes: &[super::store::IsrChange],
    ) -> Result<Vec<Option<super::store::PartitionAssignment>>, MetadataError> {
        Ok(vec![None; changes.len()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new_topic(name: &str) -> NewTopic {
        NewTopic {
            name: name.into(),
            partitions: 3,
            replication_factor: 1,
            configs: BTreeMap::new(),
            assignments: BTreeMap::new(),
        }
    }

    fn node() -> BrokerInfo {
        BrokerInfo {
            node_id: 1,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: None,
            weight: 1,
            peer_address: None,
            shutting_down: false,
            endpoints: Vec::new(),
        }
    }

    #[tokio::test]
    async fn topics_and_ids_survive_reopen() -> Result<(), MetadataError> {
        let dir = tempfile::tempdir()?;
        let store = EmbeddedStore::open(dir.path(), Some("c1"), node())?;
        let mut events = store.subscribe();
        let created = store.create_topic(new_topic("a")).await?;
        assert!(matches!(
            events.try_recv(),
            Ok(MetadataEvent::TopicCreated(_))
        ));
        assert!(matches!(
            store.create_topic(new_topic("a")).await,
            Err(MetadataError::TopicExists(_))
        ));
        store.set_partition_count("a", 5, &BTreeMap::new()).await?;
        assert!(store
            .set_partition_count("a", 2, &BTreeMap::new())
            .await
            .is_err());
        let first = store.allocate_producer_ids(10).await?;
        drop(store);
        let store = EmbeddedStore::open(dir.path(), None, node())?;
        assert_eq!(store.cluster_id(), "c1");
        let topic = store.topic("a").await.expect("persisted");
        assert_eq!((topic.partitions, topic.topic_id), (5, created.topic_id));
        assert_eq!(
            store.topic_by_id(created.topic_id).await.map(|t| t.name),
            Some("a".into())
        );
        assert_eq!(
            store.allocate_producer_ids(1).await?,
            first + 10,
            "ids never reused"
        );
        store.delete_topic("a").await?;
        assert!(store.topic("a").await.is_none());
        Ok(())
    }

    #[tokio::test]
    async fn acls_survive_reopen_and_are_announced() -> Result<(), MetadataError> {
        use crate::security::acl::{AclOperation, AclPermissionType, PatternType, ResourceType};
        let dir = tempfile::tempdir()?;
        let store = EmbeddedStore::open(dir.path(), Some("c1"), node())?;
        let mut events = store.subscribe();
        let binding = |name: &str| AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: name.to_string(),
            pattern_type: PatternType::Literal,
            principal: "User:alice".to_string(),
            host: "*".to_string(),
            operation: AclOperation::Read,
            permission: AclPermissionType::Allow,
        };
        store
            .create_acls(&[binding("a"), binding("b"), binding("a")])
            .await?;
        assert_eq!(events.try_recv().ok(), Some(MetadataEvent::AclsChanged));
        assert_eq!(store.acls(), vec![binding("a"), binding("b")], "a set");
        drop(store);
        let store = EmbeddedStore::open(dir.path(), None, node())?;
        assert_eq!(store.acls().len(), 2);
        store.delete_acls(&[binding("a"), binding("zz")]).await?;
        assert_eq!(store.acls(), vec![binding("b")]);
        Ok(())
    }

    #[tokio::test]
    async fn dynamic_broker_configs_survive_reopen_and_are_announced() -> Result<(), MetadataError>
    {
        let dir = tempfile::tempdir()?;
        let store = EmbeddedStore::open(dir.path(), Some("c1"), node())?;
        let mut events = store.subscribe();
        let mut default = BTreeMap::new();
        default.insert("log.retention.ms".to_string(), "60000".to_string());
        store.set_broker_configs(None, default.clone()).await?;
        assert_eq!(
            events.try_recv().ok(),
            Some(MetadataEvent::BrokerConfigsChanged(None))
        );
        let mut mine = BTreeMap::new();
        mine.insert("log.segment.bytes".to_string(), "1048576".to_string());
        store.set_broker_configs(Some(1), mine.clone()).await?;
        drop(store);
        let store = EmbeddedStore::open(dir.path(), None, node())?;
        assert_eq!(store.broker_configs(None), default);
        assert_eq!(store.broker_configs(Some(1)), mine);
        assert!(store.broker_configs(Some(2)).is_empty());
        store.set_broker_configs(None, BTreeMap::new()).await?;
        assert!(store.broker_configs(None).is_empty());
        Ok(())
    }

    #[test]
    fn generated_cluster_ids_look_like_kafkas() {
        let id = new_cluster_id();
        assert_eq!(id.len(), 22);
        assert_ne!(id, new_cluster_id());
    }
}
