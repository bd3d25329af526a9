//! `MetadataStore` on etcd: reads from the local cache, writes as compare-and-swap
//! transactions that return once the cache has seen them.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::txn::found_existing;
use super::{corrupt, EtcdStore};
use crate::cluster::store::{
    BrokerInfo, MetadataError, MetadataEvent, MetadataStore, NewTopic, PartitionAssignment,
    TopicAssignment, TopicSpec, UserCredentials,
};
use crate::limits::ETCD_CAS_ATTEMPTS as CAS_ATTEMPTS;
use crate::model::monotonic_ms;
use crate::security::acl::AclBinding;
use crate::security::credentials::{ScramMechanism, StoredScramCredential};

/// First producer id handed out by a new cluster.
const FIRST_PRODUCER_ID: i64 = 1000;

#[async_trait::async_trait]
impl MetadataStore for EtcdStore {
    fn cluster_id(&self) -> String {
        self.cluster_id.clone()
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
        let key = self.keys.topic(&topic.name);
        let counter = self.keys.topic_ids();
        for _ in 0..CAS_ATTEMPTS {
            let (numeric_id, unchanged) = self.read_counter(&counter, 1).await?;
            let spec = TopicSpec {
                name: topic.name.clone(),
                topic_id: Uuid::new_v4(),
                numeric_id,
                partitions: topic.partitions,
                replication_factor: topic.replication_factor,
                configs: topic.configs.clone(),
                replica_assignments: topic.assignments.clone(),
            };
            let value = serde_json::to_vec(&spec).map_err(|e| corrupt(&key, e))?;
            let txn = Txn::new()
                .when([
                    Compare::create_revision(key.clone(), CompareOp::Equal, 0),
                    unchanged,
                ])
                .and_then([
                    TxnOp::put(key.clone(), value, None),
                    TxnOp::put(counter.clone(), (numeric_id + 1).to_string(), None),
                ])
                .or_else([TxnOp::get(key.clone(), None)]);
            let response = self.txn_seen(txn).await?;
            if response.succeeded() {
                return Ok(spec);
            }
            if let Some(revision) = found_existing(&response) {
                // Someone else created it: make it visible here before saying so.
                self.wait_applied(revision).await;
                return Err(MetadataError::TopicExists(topic.name));
            }
        }
        Err(MetadataError::Contended(topic.name))
    }

    async fn delete_topic(&self, name: &str) -> Result<TopicSpec, MetadataError> {
        let key = self.keys.topic(name);
        for _ in 0..CAS_ATTEMPTS {
            let (spec, revision) = self.read_topic(name).await?;
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([
                    TxnOp::delete(key.clone(), None),
                    TxnOp::delete(self.keys.assignment(name), None),
                ]);
            if self.txn_seen(txn).await?.succeeded() {
                return Ok(spec);
            }
        }
        Err(MetadataError::Contended(name.to_string()))
    }

    async fn set_partition_count(
        &self,
        name: &str,
        count: i32,
        assignments: &BTreeMap<i32, Vec<i32>>,
    ) -> Result<TopicSpec, MetadataError> {
        self.update_topic(name, |spec| {
            if count <= spec.partitions {
                return Err(MetadataError::InvalidPartitionCount {
                    topic: spec.name.clone(),
                    current: spec.partitions,
                    requested: count,
                });
            }
            spec.partitions = count;
            let pins = assignments
                .iter()
                .map(|(index, replicas)| (*index, Some(replicas.clone())))
                .collect();
            crate::cluster::reassignment::apply_pins(spec, &pins);
            Ok(())
        })
        .await
    }

    async fn set_replica_assignments(
        &self,
        name: &str,
        topic_id: Uuid,
        changes: &BTreeMap<i32, Option<Vec<i32>>>,
    ) -> Result<TopicSpec, MetadataError> {
        self.update_topic(name, |spec| {
            if spec.topic_id != topic_id {
                return Err(MetadataError::UnknownTopic(name.to_string()));
            }
            crate::cluster::reassignment::apply_pins(spec, changes);
            Ok(())
        })
        .await
    }

    async fn request_unclean_election(
        &self,
        topic: &str,
        topic_id: Uuid,
        index: i32,
    ) -> Result<bool, MetadataError> {
        let key = self.keys.assignment(topic);
        for _ in 0..CAS_ATTEMPTS {
            let Some((mut assignment, revision)) = self.read_assignment(topic).await? else {
                return Ok(false);
            };
            if assignment.topic_id != topic_id {
                return Ok(false);
            }
            let Some(partition) = usize::try_from(index)
                .ok()
                .and_then(|i| assignment.partitions.get_mut(i))
            else {
                return Ok(false);
            };
            if partition.leader >= 0 {
                return Ok(false);
            }
            partition.unclean_requested = true;
            if self.put_if_unchanged(&key, revision, &assignment).await? {
                return Ok(true);
            }
        }
        Err(MetadataError::Contended(topic.to_string()))
    }

    async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicSpec, MetadataError> {
        self.update_topic(name, |spec| {
            spec.configs = configs.clone();
            Ok(())
        })
        .await
    }

    fn broker_configs(&self, broker: Option<i32>) -> BTreeMap<String, String> {
        self.cache.broker_configs(broker)
    }

    async fn set_broker_configs(
        &self,
        broker: Option<i32>,
        configs: BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        self.replace_configs(self.keys.broker_configs(broker), &configs)
            .await
    }

    fn group_configs(&self, group: &str) -> BTreeMap<String, String> {
        self.cache.group_configs(group)
    }

    async fn set_group_configs(
        &self,
        group: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        self.replace_configs(self.keys.group_configs(group), &configs)
            .await
    }

    fn client_quotas(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.cache.client_quotas()
    }

    async fn set_client_quotas(
        &self,
        entity: &str,
        values: BTreeMap<String, String>,
    ) -> Result<(), MetadataError> {
        self.replace_configs(self.keys.client_quotas(entity), &values)
            .await
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
        let key = self.keys.user(mechanism, user);
        let operation = match credential {
            Some(credential) => {
                let value = serde_json::to_vec(&credential).map_err(|e| corrupt(&key, e))?;
                TxnOp::put(key, value, None)
            }
            None => TxnOp::delete(key, None),
        };
        self.txn_seen(Txn::new().and_then([operation])).await?;
        Ok(())
    }

    fn acls(&self) -> Vec<AclBinding> {
        self.cache.acls()
    }

    /// One put per distinct binding: etcd refuses a transaction naming a key twice
    /// ("duplicate key given in txn request"), and a request may repeat a binding.
    async fn create_acls(&self, bindings: &[AclBinding]) -> Result<(), MetadataError> {
        let distinct: BTreeMap<String, &AclBinding> = bindings
            .iter()
            .map(|binding| (self.keys.acl(binding), binding))
            .collect();
        let mut operations = Vec::with_capacity(distinct.len());
        for (key, binding) in distinct {
            let value = serde_json::to_vec(binding).map_err(|e| corrupt(&key, e))?;
            operations.push(TxnOp::put(key, value, None));
        }
        self.write_in_chunks(operations).await
    }

    async fn delete_acls(&self, bindings: &[AclBinding]) -> Result<(), MetadataError> {
        let distinct: std::collections::BTreeSet<String> = bindings
            .iter()
            .map(|binding| self.keys.acl(binding))
            .collect();
        let operations = distinct
            .into_iter()
            .map(|key| TxnOp::delete(key, None))
            .collect();
        self.write_in_chunks(operations).await
    }

    async fn allocate_producer_ids(&self, count: i64) -> Result<i64, MetadataError> {
        let key = self.keys.producer_ids();
        for _ in 0..CAS_ATTEMPTS {
            let (first, unchanged) = self.read_counter(&key, FIRST_PRODUCER_ID).await?;
            let txn = Txn::new().when([unchanged]).and_then([TxnOp::put(
                key.clone(),
                (first + count.max(1)).to_string(),
                None,
            )]);
            if self.txn(txn).await?.succeeded() {
                return Ok(first);
            }
        }
        Err(MetadataError::Contended(key))
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

    async fn alter_partitions(
        &self,
        topic: &str,
        topic_id: Uuid,
        changes: &[crate::cluster::store::IsrChange],
    ) -> Result<Vec<Option<PartitionAssignment>>, MetadataError> {
        let key = self.keys.assignment(topic);
        let refused = || vec![None; changes.len()];
        for _ in 0..CAS_ATTEMPTS {
            // A broker whose session lapsed is about to be replaced: it changes nothing.
            if !self.may_lead() {
                return Ok(refused());
            }
            let Some((mut assignment, revision)) = self.read_assignment(topic).await? else {
                return Ok(refused());
            };
            if assignment.topic_id != topic_id {
                return Ok(refused());
            }
            // Registrations from etcd, and the write guarded on them: an admission
            // judged on the cache could let in a broker's previous run whose restart
            // the watch has not delivered yet.
            let incarnations = self.read_incarnations().await?;
            let mut outcomes = Vec::with_capacity(changes.len());
            let mut guards = Vec::new();
            for change in changes {
                let slot = usize::try_from(change.index)
                    .ok()
                    .and_then(|i| assignment.partitions.get_mut(i));
                let next = slot.and_then(|current| {
                    let before = current.in_sync();
                    let next = crate::cluster::store::apply_isr_change(
                        current,
                        self.node.node_id,
                        change.leader_epoch,
                        change.partition_epoch,
                        &change.isr,
                        &change.incarnations,
                        |broker| incarnations.get(&broker).copied(),
                    )?;
                    let admitted = next.isr.iter().filter(|m| !before.contains(m));
                    guards.extend(admitted.map(|&m| {
                        self.still_registered(m, next.isr_incarnations.get(&m).copied())
                    }));
                    *current = next.clone();
                    Some(next)
                });
                outcomes.push(next);
            }
            if outcomes.iter().all(Option::is_none) {
                return Ok(outcomes);
            }
            if self
                .put_if_unchanged_and(&key, revision, &assignment, guards)
                .await?
            {
                return Ok(outcomes);
            }
        }
        Err(MetadataError::Contended(topic.to_string()))
    }

    fn may_lead(&self) -> bool {
        monotonic_ms() < self.alive_until_ms.load(Ordering::Acquire)
    }

    fn incarnation(&self) -> Option<i64> {
        Some(self.incarnation.load(Ordering::Acquire))
    }

    async fn begin_shutdown(&self) -> bool {
        let lease = self.lease.load(Ordering::Acquire);
        if lease == 0 {
            return false;
        }
        let key = self.keys.broker(self.node.node_id);
        let mut node = self.node.clone();
        node.shutting_down = true;
        let Ok(value) = serde_json::to_vec(&node) else {
            return false;
        };
        // Only over this broker's own registration (same lease), never a successor's.
        let txn = Txn::new()
            .when([Compare::lease(key.clone(), CompareOp::Equal, lease)])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        match self.txn_seen(txn).await {
            Ok(response) if response.succeeded() => {
                tracing::info!("controlled shutdown: leaderships moving away");
                true
            }
            Ok(_) => {
                tracing::warn!("controlled shutdown: registration changed; leaving directly");
                false
            }
            Err(error) => {
                tracing::warn!(%error, "controlled shutdown could not be announced; leaving directly");
                false
            }
        }
    }

    async fn leave(&self) {
        let lease = self.lease.swap(0, Ordering::AcqRel);
        self.alive_until_ms.store(0, Ordering::Release);
        if lease != 0 {
            match self.client.clone().lease_revoke(lease).await {
                Ok(_) => tracing::info!("left the cluster"),
                Err(error) => {
                    tracing::warn!(%error, "could not revoke the lease; it will expire")
                }
            }
        }
    }
}
