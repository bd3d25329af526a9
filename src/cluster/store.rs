//! The metadata store's contract: the records it keeps (topics, assignments, brokers,
//! credentials), its events, its errors and the `MetadataStore` trait both stores serve.

use crate::security::credentials::{ScramMechanism, StoredScramCredential};
use std::collections::BTreeMap;
use std::fmt::Debug;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::security::acl::AclBinding;

/// A topic as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSpec {
    pub name: String,
    /// Kafka's topic id (Metadata v10+, Fetch v13+, Produce v13).
    pub topic_id: Uuid,
    /// A small, stable integer id for APIs that want one (the HTTP gateway).
    pub numeric_id: i64,
    pub partitions: i32,
    pub replication_factor: i16,
    /// Only the configs set on this topic; defaults come from the broker.
    pub configs: BTreeMap<String, String>,
    /// Operator-chosen replicas by partition index (CreateTopics / CreatePartitions
    /// assignments, AlterPartitionReassignments): for these partitions the list replaces
    /// the ring's placement, preferred leader first, until cancelled. Absent in data
    /// written before pins existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub replica_assignments: BTreeMap<i32, Vec<i32>>,
}

impl TopicSpec {
    /// The operator's pinned replicas of partition `index`, if any.
    pub fn pinned(&self, index: i32) -> Option<&[i32]> {
        self.replica_assignments.get(&index).map(Vec::as_slice)
    }
}

/// What a client asks for when creating a topic (already validated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
    /// Explicit replicas by partition (see [`TopicSpec::replica_assignments`]).
    pub assignments: BTreeMap<i32, Vec<i32>>,
}

/// A broker as clients should reach it, and its share of the placement ring.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
    /// Relative share of partitions (ring points); 0 takes none.
    #[serde(default = "default_weight")]
    pub weight: u32,
    /// Where other brokers reach this one, when not `host:port` (`--peer-advertise`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_address: Option<String>,
    /// Set by a broker in controlled shutdown: the controller moves its leaderships
    /// away and takes it out of every ISR before it leaves.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shutting_down: bool,
    /// The advertised address of each listener, by listener name (its protocol):
    /// a client is told the brokers' addresses on the listener it came in on, as in Kafka.
    /// Empty for a broker that declares only `host:port`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<BrokerEndpoint>,
}

/// One listener's advertised address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerEndpoint {
    pub listener: String,
    pub host: String,
    pub port: i32,
}

impl BrokerInfo {
    /// The address to tell a client that came in on `listener`. A broker without that
    /// listener answers with its main address (Kafka leaves such a broker out of the
    /// answer; the brokers of one cluster declare the same listeners).
    pub fn address_for(&self, listener: &str) -> (&str, i32) {
        self.endpoints
            .iter()
            .find(|e| e.listener == listener)
            .map_or((self.host.as_str(), self.port), |e| {
                (e.host.as_str(), e.port)
            })
    }

    /// The address another broker connects to.
    pub fn peer_address(&self) -> String {
        self.peer_address
            .clone()
            .unwrap_or_else(|| format!("{}:{}", self.host, self.port))
    }
}

fn default_weight() -> u32 {
    1
}

/// Where one partition lives. The controller writes it; brokers act on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionAssignment {
    /// The broker serving reads and writes; -1 when no broker is live.
    pub leader: i32,
    /// The leader first, then the next distinct brokers on the ring.
    pub replicas: Vec<i32>,
    /// Bumped whenever the leader changes, so stale leaders and clients can be told apart.
    pub leader_epoch: i32,
    /// In-sync replicas, the leader first when it has one; empty in data written before
    /// replication (read it as `[leader]`, see [`Self::in_sync`]).
    #[serde(default)]
    pub isr: Vec<i32>,
    /// Bumped on every change of this partition's state (leader, ISR, replicas): the
    /// compare-and-swap token of ISR changes (Kafka's partition epoch, KIP-497).
    #[serde(default)]
    pub partition_epoch: i32,
    /// Where the ring wants the replicas, when that is not where they are yet (a
    /// reassignment in progress: new replicas catch up before old ones go); empty when
    /// `replicas` is the ring's placement. The controller's memory of its own target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target: Vec<i32>,
    /// The leader's incarnation (the create revision of its registration) when the
    /// controller elected it; 0 when unknown (the embedded store, older data). A broker
    /// that restarted since — and may have lost what it had not fsynced — must not lead
    /// on this state: it waits until the controller, having seen the restart, elects
    /// again (Kafka fences a broker epoch the same way, KIP-841/903).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub leader_incarnation: i64,
    /// `target`/`replicas` follow an operator's pin rather than the ring: the controller's
    /// memory that the ring's own placement of this partition is not stored here, so that
    /// it places the partition afresh when the pin goes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// A one-shot unclean election asked for by ElectLeaders (UNCLEAN): the controller
    /// may elect a live replica outside the ISR once, whatever the topic's
    /// `unclean.leader.election.enable`, and clears it with its next write.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unclean_requested: bool,
    /// For ISR members a leader admitted by catching up: the incarnation of the
    /// follower process that caught up (KIP-903's broker epoch). A broker the controller
    /// sees restarted keeps its place in this ISR only when its current incarnation is
    /// the one recorded here — it rejoined after the restart, holding everything
    /// acknowledged; any other restarted member may have lost its unsynced tail and
    /// leaves the ISR.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub isr_incarnations: BTreeMap<i32, i64>,
}

fn is_zero(value: &i64) -> bool {
    *value == 0
}

impl PartitionAssignment {
    /// The ring's placement for this partition: the target while a reassignment is in
    /// progress, else the replicas.
    pub fn ring_target(&self) -> &[i32] {
        if self.target.is_empty() {
            &self.replicas
        } else {
            &self.target
        }
    }

    /// The in-sync replicas; `[leader]` for state written before replication.
    pub fn in_sync(&self) -> Vec<i32> {
        if self.isr.is_empty() && self.leader >= 0 {
            vec![self.leader]
        } else {
            self.isr.clone()
        }
    }
}

/// Where every partition of a topic lives, indexed by partition number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicAssignment {
    /// The topic incarnation this is for (a re-created topic gets a new id).
    pub topic_id: Uuid,
    pub partitions: Vec<PartitionAssignment>,
}

impl TopicAssignment {
    /// Every partition led by `node` under epoch 0: a single node's assignment.
    pub fn all_on(spec: &TopicSpec, node: i32) -> Self {
        let partition = PartitionAssignment {
            leader: node,
            replicas: vec![node],
            leader_epoch: 0,
            isr: vec![node],
            partition_epoch: 0,
            target: Vec::new(),
            leader_incarnation: 0,
            pinned: false,
            unclean_requested: false,
            isr_incarnations: BTreeMap::new(),
        };
        Self {
            topic_id: spec.topic_id,
            partitions: vec![partition; spec.partitions.max(0) as usize],
        }
    }

    /// Partition `index`, if the assignment covers it.
    pub fn partition(&self, index: i32) -> Option<&PartitionAssignment> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.partitions.get(i))
    }
}

/// The elected controller: its id and the create revision of its key, which is its
/// term: writes guarded by "the controller key still has this create revision" fail
/// once it has been deposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerTerm {
    pub node_id: i32,
    pub revision: i64,
}

/// One partition's proposed ISR, as its leader saw the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChange {
    pub index: i32,
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
    /// The incarnations of the members this change admits (see
    /// [`PartitionAssignment::isr_incarnations`]).
    pub incarnations: BTreeMap<i32, i64>,
}

/// Kafka's AlterPartition checks, as a pure function: the proposal of `leader` must
/// be based on the current leader epoch and partition epoch, keep the leader in the
/// ISR, name only replicas, and add only live brokers in the run the leader saw catch
/// up (`registered`: a broker's current incarnation, `None` when it is not live). A
/// member admitted with another incarnation is a previous run of a broker that has
/// restarted since, perhaps without its unflushed tail, whose fetch arrived late
/// (Kafka's INELIGIBLE_REPLICA, "broker epoch mismatch"). Returns the next state
/// (partition epoch bumped), or `None` when refused.
pub fn apply_isr_change(
    current: &PartitionAssignment,
    leader: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    isr: &[i32],
    admitted: &BTreeMap<i32, i64>,
    registered: impl Fn(i32) -> Option<i64>,
) -> Option<PartitionAssignment> {
    let before = current.in_sync();
    let admissible = |r: i32| match (registered(r), admitted.get(&r)) {
        (None, _) => false,
        (Some(current), Some(&seen)) => seen == current,
        (Some(_), None) => true,
    };
    let acceptable = current.leader == leader
        && current.leader_epoch == leader_epoch
        && current.partition_epoch == partition_epoch
        && isr.contains(&leader)
        && isr.iter().all(|r| current.replicas.contains(r))
        && isr.iter().all(|&r| before.contains(&r) || admissible(r));
    acceptable.then(|| {
        let mut next = current.clone();
        let mut members = vec![leader];
        members.extend(isr.iter().copied().filter(|&r| r != leader));
        members.dedup();
        // A member's recorded incarnation is the one it was admitted with: a newly
        // admitted member's from this change, the others' as stored.
        next.isr_incarnations = members
            .iter()
            .filter_map(|&m| {
                let recorded = if before.contains(&m) {
                    current.isr_incarnations.get(&m)
                } else {
                    admitted.get(&m)
                };
                recorded.map(|&incarnation| (m, incarnation))
            })
            .collect();
        next.isr = members;
        next.partition_epoch += 1;
        next
    })
}

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("topic '{0}' already exists")]
    TopicExists(String),
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    #[error("topic '{topic}' has {current} partitions; cannot change to {requested}")]
    InvalidPartitionCount {
        topic: String,
        current: i32,
        requested: i32,
    },
    #[error("persisting metadata: {0}")]
    Io(#[from] std::io::Error),
    #[error("metadata file is corrupt: {0}")]
    Corrupt(String),
    #[error("etcd: {0}")]
    Etcd(String),
    #[error("broker id {0} is registered by another live broker")]
    NodeIdTaken(i32),
    #[error("metadata store is busy (too many concurrent changes to '{0}'); retry")]
    Contended(String),
}

/// A change other components react to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataEvent {
    TopicCreated(TopicSpec),
    TopicChanged(TopicSpec),
    TopicDeleted(TopicSpec),
    /// The placement of this topic's partitions changed.
    AssignmentChanged(String),
    /// A broker joined or left.
    BrokersChanged,
    /// The controller changed (or there is none for now).
    ControllerChanged,
    /// Dynamic broker configs changed (`None`: the cluster-wide default, `Some(id)`: that
    /// broker's own): brokers re-resolve topic defaults and re-apply them.
    BrokerConfigsChanged(Option<i32>),
    /// ACL bindings were created or deleted: brokers rebuild their authorizer.
    AclsChanged,
    /// Client quotas were altered: brokers reload the quotas in force.
    ClientQuotasChanged,
    /// The store reloaded everything (after a lost watch): reconcile it all.
    Resynced,
}

/// SCRAM credentials by user, then by mechanism name.
pub type UserCredentials = BTreeMap<String, BTreeMap<String, StoredScramCredential>>;

/// Sets (`Some`) or removes one user's credential of one mechanism; a user left with
/// none is removed. Both stores keep their copy with it.
pub fn set_user_credential(
    users: &mut UserCredentials,
    user: &str,
    mechanism: &str,
    credential: Option<StoredScramCredential>,
) {
    match credential {
        Some(credential) => {
            users
                .entry(user.to_string())
                .or_default()
                .insert(mechanism.to_string(), credential);
        }
        None => {
            if let Some(of_user) = users.get_mut(user) {
                of_user.remove(mechanism);
                if of_user.is_empty() {
                    users.remove(user);
                }
            }
        }
    }
}

/// Topics and ids for the whole cluster. Implementations are cheap to query: callers
/// on the request path use them directly.
#[async_trait::async_trait]
pub trait MetadataStore: Send + Sync + Debug + 'static {
    /// The cluster id, stable for the life of the cluster.
    fn cluster_id(&self) -> String;
    async fn topics(&self) -> Vec<TopicSpec>;
    async fn topic(&self, name: &str) -> Option<TopicSpec>;
    async fn topic_by_id(&self, topic_id: Uuid) -> Option<TopicSpec>;
    async fn create_topic(&self, topic: NewTopic) -> Result<TopicSpec, MetadataError>;
    async fn delete_topic(&self, name: &str) -> Result<TopicSpec, MetadataError>;
    /// Grows a topic to `count` partitions (never shrinks), pinning the new partitions
    /// named in `assignments` (partition index → replicas) in the same write.
    async fn set_partition_count(
        &self,
        name: &str,
        count: i32,
        assignments: &BTreeMap<i32, Vec<i32>>,
    ) -> Result<TopicSpec, MetadataError>;
    /// Pins (`Some(replicas)`) or unpins (`None`) partitions of the topic `name` whose
    /// id is `topic_id`, in one compare-and-swap write of the topic.
    async fn set_replica_assignments(
        &self,
        name: &str,
        topic_id: Uuid,
        changes: &BTreeMap<i32, Option<Vec<i32>>>,
    ) -> Result<TopicSpec, MetadataError>;
    /// Asks the controller for a one-shot unclean election of partition `index` (see
    /// [`PartitionAssignment::unclean_requested`]), with a compare-and-swap on the
    /// placement. False when there is no placement to mark (a single node always leads).
    async fn request_unclean_election(
        &self,
        _topic: &str,
        _topic_id: Uuid,
        _index: i32,
    ) -> Result<bool, MetadataError> {
        Ok(false)
    }
    /// Replaces the topic's explicit configs.
    async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicSpec, MetadataError>;
    /// The dynamic broker configs (KIP-226) of one level, by broker config name: `None`
    /// is the cluster-wide default (resource name `""`, stored as `<default>`), `Some(id)`
    /// that broker's own. Read from the local copy: cheap, for the request path.
    fn broker_configs(&self, broker: Option<i32>) -> BTreeMap<String, String>;
    /// Replaces the dynamic broker configs of one level (an empty map removes them), and
    /// announces `BrokerConfigsChanged` to every broker.
    async fn set_broker_configs(
        &self,
        broker: Option<i32>,
        configs: BTreeMap<String, String>,
    ) -> Result<(), MetadataError>;
    /// A group's dynamic configs (GROUP config resources: `consumer.session.timeout.ms`,
    /// `share.record.lock.duration.ms`, …), from the local copy: cheap, for the request
    /// path (a group reads them on every heartbeat). Empty when none are set.
    fn group_configs(&self, group: &str) -> BTreeMap<String, String>;
    /// Replaces a group's dynamic configs (an empty map removes them). The group need
    /// not exist: as in Kafka, configs are kept apart from the group's own state.
    async fn set_group_configs(
        &self,
        group: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<(), MetadataError>;
    /// Every client quota entity's values (entity storage key → config key → value),
    /// from the local copy: read when `ClientQuotasChanged` reloads the quotas in force.
    fn client_quotas(&self) -> BTreeMap<String, BTreeMap<String, String>>;
    /// Replaces one entity's quota values (an empty map removes the entity) and
    /// announces `ClientQuotasChanged` to every broker.
    async fn set_client_quotas(
        &self,
        entity: &str,
        values: BTreeMap<String, String>,
    ) -> Result<(), MetadataError>;
    /// Every ACL binding of the cluster, from the local copy: cheap, for rebuilding the
    /// authorizer on `AclsChanged`.
    fn acls(&self) -> Vec<AclBinding>;
    /// Adds ACL bindings (already validated; adding one that exists changes nothing) and
    /// announces `AclsChanged` to every broker.
    async fn create_acls(&self, bindings: &[AclBinding]) -> Result<(), MetadataError>;
    /// Removes exactly these ACL bindings (absent ones are ignored) and announces
    /// `AclsChanged` to every broker.
    async fn delete_acls(&self, bindings: &[AclBinding]) -> Result<(), MetadataError>;
    /// Reserves `count` consecutive producer ids and returns the first.
    async fn allocate_producer_ids(&self, count: i64) -> Result<i64, MetadataError>;
    /// Every user's SCRAM credentials, salted and hashed (never a password), from the
    /// local copy: what SASL lookups and DescribeUserScramCredentials read.
    fn scram_credentials(&self) -> UserCredentials;
    /// One user's credential of one mechanism, from the local copy.
    fn scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
    ) -> Option<StoredScramCredential>;
    /// Sets (`Some`) or deletes one user's credential of one mechanism, for the whole
    /// cluster; returns once this broker's own copy shows it.
    async fn set_scram_credential(
        &self,
        user: &str,
        mechanism: ScramMechanism,
        credential: Option<StoredScramCredential>,
    ) -> Result<(), MetadataError>;
    /// Changes from now on.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<MetadataEvent>;
    /// Live brokers, by id.
    fn brokers(&self) -> Vec<BrokerInfo>;
    /// The active controller, if there is one right now.
    fn controller_id(&self) -> Option<i32>;
    /// Where the partitions of `spec` live; `None` until the controller has placed this
    /// incarnation of it (a placement left from a deleted topic of the same name is not
    /// returned).
    fn assignment(&self, spec: &TopicSpec) -> Option<TopicAssignment>;
    /// The live-or-not leader of partition `index` of `spec`; `None` while unplaced.
    fn leader_of(&self, spec: &TopicSpec, index: i32) -> Option<i32> {
        self.assignment(spec)
            .and_then(|a| a.partition(index).map(|p| p.leader))
            .filter(|&leader| leader >= 0)
    }
    /// Writes ISR changes proposed by the leader (this broker) of partitions of one
    /// topic, as Kafka's AlterPartition, in one write: each only while this broker still
    /// leads under its `leader_epoch` and the partition epoch is still its
    /// `partition_epoch` (see [`apply_isr_change`]). Per change, in order:
    /// `Some(state)` written, `None` refused (the partition changed meanwhile).
    async fn alter_partitions(
        &self,
        topic: &str,
        topic_id: Uuid,
        changes: &[IsrChange],
    ) -> Result<Vec<Option<PartitionAssignment>>, MetadataError>;
    /// Whether this broker may act as a leader: false once its cluster session has
    /// lapsed by its own clock, so that it stops taking writes before etcd says so.
    fn may_lead(&self) -> bool {
        true
    }
    /// This process's incarnation in the cluster (its registration's create
    /// revision), to match against [`PartitionAssignment::leader_incarnation`]; `None`
    /// where there are no incarnations (the embedded store).
    fn incarnation(&self) -> Option<i64> {
        None
    }
    /// Announces a controlled shutdown (Kafka's ControlledShutdown): the controller
    /// moves this broker's leaderships to other in-sync replicas and takes it out of
    /// the ISRs, while it still serves. Returns whether the announcement reached the
    /// controller: when it did not (the store is unreachable, the registration is
    /// gone), nothing will move and waiting for it only delays the shutdown.
    async fn begin_shutdown(&self) -> bool {
        false
    }
    /// Leaves the cluster on a clean shutdown, so others take over at once.
    async fn leave(&self) {}
}

#[cfg(test)]
mod isr_change_tests {
    use super::*;

    #[test]
    fn an_admitted_member_is_recorded_with_its_incarnation_and_a_previous_run_is_refused() {
        let mut current = PartitionAssignment {
            leader: 1,
            replicas: vec![1, 2, 3],
            leader_epoch: 0,
            isr: vec![1],
            partition_epoch: 0,
            target: Vec::new(),
            leader_incarnation: 0,
            pinned: false,
            unclean_requested: false,
            isr_incarnations: BTreeMap::new(),
        };
        current.replicas = vec![1, 2, 3];
        current.isr_incarnations = [(1, 5)].into_iter().collect();
        let admitted: BTreeMap<i32, i64> = [(2, 7), (3, 99)].into_iter().collect();
        let registered = |b: i32| {
            [(1, 5), (2, 7), (3, 99)]
                .into_iter()
                .find(|&(id, _)| id == b)
                .map(|(_, i)| i)
        };
        // A previous run of 2 (incarnation 6) caught up, but 2 has restarted since.
        let stale: BTreeMap<i32, i64> = [(2, 6)].into_iter().collect();
        assert!(apply_isr_change(&current, 1, 0, 0, &[1, 2], &stale, registered).is_none());
        // A broker that is not live is refused too.
        assert!(apply_isr_change(&current, 1, 0, 0, &[1, 2], &admitted, |_| None).is_none());
        let next = apply_isr_change(&current, 1, 0, 0, &[1, 2], &admitted, registered)
            .expect("a valid expansion");
        assert_eq!(next.isr, vec![1, 2]);
        assert_eq!(
            next.isr_incarnations,
            [(1, 5), (2, 7)].into_iter().collect::<BTreeMap<_, _>>(),
            "3 is not in the ISR; 1 keeps what it had"
        );
        // A shrink admits nobody and drops the leaver's record.
        let shrunk = apply_isr_change(&next, 1, 0, 1, &[1], &BTreeMap::new(), registered)
            .expect("a valid shrink");
        assert_eq!(shrunk.isr_incarnations, [(1, 5)].into_iter().collect());
    }
}
