//! Topic administration as one service shared by every front end (the Kafka admin
//! APIs, auto-creation, the HTTP API's create_topic): validate, write the metadata
//! store, then make the local partitions match. Also hands out producer ids in blocks reserved from the store.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::cluster::broker_config::{self, BrokerConfigError};
use crate::cluster::reassignment;
use crate::cluster::topic_config::TopicDefaults;
use crate::cluster::topic_config::{self, ConfigError};
use crate::cluster::{MetadataError, MetadataStore, NewTopic, TopicSpec};
use crate::model::validate_topic_name;
use crate::replication::{ReplicaManager, TopicReplicas};

#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    #[error("invalid topic name: {0}")]
    InvalidName(String),
    #[error("topic '{0}' already exists")]
    AlreadyExists(String),
    #[error("topic '{0}' does not exist")]
    Unknown(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("{0}")]
    InvalidReplicaAssignment(String),
    #[error("{0}")]
    InvalidRequest(String),
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    #[error(transparent)]
    InvalidBrokerConfig(#[from] BrokerConfigError),
    #[error("storage: {0}")]
    Storage(#[from] std::io::Error),
    #[error(transparent)]
    Metadata(MetadataError),
}

impl From<MetadataError> for TopicError {
    fn from(error: MetadataError) -> Self {
        match error {
            MetadataError::TopicExists(name) => TopicError::AlreadyExists(name),
            MetadataError::UnknownTopic(name) => TopicError::Unknown(name),
            MetadataError::InvalidPartitionCount {
                topic,
                current,
                requested,
            } => TopicError::InvalidPartitions(format!(
                "topic '{topic}' has {current} partitions; cannot change to {requested}"
            )),
            other => TopicError::Metadata(other),
        }
    }
}

/// A create request after defaults: `-1` partitions or replication factor mean the
/// broker default; explicit assignments `(partition index, replicas)` fix the partition
/// count and pin those partitions' replicas (`TopicSpec::replica_assignments`).
#[derive(Debug, Clone)]
pub struct CreateTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: BTreeMap<String, String>,
}

pub use crate::model::is_internal;

pub use crate::limits::MAX_PARTITIONS_PER_TOPIC;
use crate::limits::{PLACEMENT_POLL, PLACEMENT_WAIT};

#[derive(Debug)]
pub struct TopicService {
    store: Arc<dyn MetadataStore>,
    replicas: Arc<ReplicaManager>,
    config: TopicsConfig,
    node_id: i32,
}

impl TopicService {
    pub fn new(
        store: Arc<dyn MetadataStore>,
        replicas: Arc<ReplicaManager>,
        config: TopicsConfig,
        node_id: i32,
    ) -> Self {
        Self {
            store,
            replicas,
            config,
            node_id,
        }
    }

    pub fn config(&self) -> &TopicsConfig {
        &self.config
    }

    /// Puts the dynamic broker configs stored now (the cluster default and this broker's
    /// own) in force on every local log. Called at start-up, after this broker changed
    /// them, and on every `BrokerConfigsChanged` from the store.
    pub fn apply_broker_configs(&self) -> bool {
        let dynamic = topic_config::DynamicBrokerConfigs {
            this_broker: self.store.broker_configs(Some(self.node_id)),
            cluster_default: self.store.broker_configs(None),
        };
        let changed = self.replicas.set_dynamic_configs(dynamic);
        if changed {
            tracing::info!("applied dynamic broker configs");
        }
        changed
    }

    /// Opens the partitions this broker leads, for every topic in the store.
    pub async fn load_all(&self) -> Result<usize, TopicError> {
        let topics = self.store.topics().await;
        for spec in &topics {
            self.apply(spec, false)?;
        }
        Ok(topics.len())
    }

    /// Makes the local partitions of `name` match the store: what this broker leads is
    /// open and stamped with its leader epoch; a deleted topic is removed. Returns the
    /// topic as it now is here.
    pub async fn reconcile(&self, name: &str) -> Result<Option<Arc<TopicReplicas>>, TopicError> {
        match self.store.topic(name).await {
            Some(spec) => Ok(Some(self.apply(&spec, false)?)),
            None => {
                self.replicas.remove_topic(name);
                Ok(None)
            }
        }
    }

    fn apply(&self, spec: &TopicSpec, fresh: bool) -> Result<Arc<TopicReplicas>, TopicError> {
        let assignment = self.store.assignment(spec);
        let (topic, removed) = self.replicas.reconcile_topic(
            spec,
            assignment.as_ref(),
            fresh,
            self.store.incarnation(),
        )?;
        for partition in removed {
            self.replicas.delete_replica(&partition);
        }
        self.replicas.roles_changed();
        let local = (0..spec.partitions).find_map(|index| topic.replica(index));
        if let Some(partition) = local {
            let (archived, _) = partition.archive_settings();
            crate::metrics::export_topic_series(&spec.name, archived);
        }
        Ok(topic)
    }

    /// Waits (bounded) until the controller has placed every partition of `spec`, so
    /// that a client told "created" finds leaders in Metadata right away.
    async fn wait_for_placement(&self, spec: &TopicSpec) {
        let deadline = tokio::time::Instant::now() + PLACEMENT_WAIT;
        loop {
            let placed = self.store.assignment(spec).is_some_and(|a| {
                a.partitions.len() >= spec.partitions as usize
                    && a.partitions.iter().all(|p| p.leader >= 0)
            });
            if placed || tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(PLACEMENT_POLL).await;
        }
    }

    /// The dynamic broker configs of one level as stored (`None`: the cluster default).
    pub fn broker_configs(&self, level: Option<i32>) -> BTreeMap<String, String> {
        self.store.broker_configs(level)
    }

    /// Replaces the dynamic broker configs of one level (`None`: the cluster-wide default,
    /// `Some(id)`: this broker's own) after checking them, and puts them in force here at
    /// once; the other brokers follow the store's `BrokerConfigsChanged`. `read_only`
    /// names the broker configs that exist but are not dynamic.
    pub async fn set_broker_configs(
        &self,
        level: Option<i32>,
        configs: BTreeMap<String, String>,
        read_only: &(dyn Fn(&str) -> bool + Sync),
        validate_only: bool,
    ) -> Result<(), TopicError> {
        let (mine, default) = (
            self.store.broker_configs(level),
            self.store.broker_configs(None),
        );
        let static_values = self.replicas.defaults().with_dynamic(Default::default());
        // In force now: a dynamic value, else a topic default's static or built-in one.
        let current = |name: &str| {
            mine.get(name)
                .or_else(|| default.get(name))
                .cloned()
                .or_else(|| {
                    let def = topic_config::by_broker_key(name)?;
                    static_values.broker_value(def.name).map(|(v, _)| v)
                })
        };
        broker_config::validate_dynamic(&configs, level.is_some(), read_only, &current)?;
        if validate_only {
            return Ok(());
        }
        self.store.set_broker_configs(level, configs).await?;
        self.apply_broker_configs();
        tracing::info!(level = ?level, "dynamic broker configs changed");
        Ok(())
    }

    /// Creates the internal offsets topic on first start with its fixed configs
    /// (`topic_config::OFFSETS_TOPIC_CONFIGS`: compacted by its coordinator, never subject
    /// to retention), brings an existing one's configs up to them, and opens its
    /// partitions.
    pub async fn ensure_internal(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i16,
    ) -> Result<Arc<TopicReplicas>, TopicError> {
        let spec = match self.store.topic(name).await {
            Some(spec) => spec,
            None => {
                // Several brokers may start at once: the first one creates it.
                let configs = topic_config::with_offsets_topic_configs(BTreeMap::new());
                let topic = NewTopic {
                    name: name.to_string(),
                    partitions,
                    // Not capped by the brokers alive now: the ring places as many
                    // replicas as there are live brokers, up to this, as they join.
                    replication_factor,
                    configs,
                    assignments: BTreeMap::new(),
                };
                match self.store.create_topic(topic).await {
                    Ok(spec) => {
                        tracing::info!(topic = name, partitions, "created internal topic");
                        spec
                    }
                    Err(MetadataError::TopicExists(_)) => self
                        .store
                        .topic(name)
                        .await
                        .ok_or_else(|| TopicError::Unknown(name.to_string()))?,
                    Err(error) => return Err(error.into()),
                }
            }
        };
        // A topic created by an older version lacks some of the fixed configs.
        let required = topic_config::with_offsets_topic_configs(spec.configs.clone());
        let spec = if required != spec.configs {
            tracing::info!(topic = name, configs = ?required, "updating internal topic configs");
            self.store.set_topic_configs(name, required).await?
        } else {
            spec
        };
        self.apply(&spec, false)
    }

    /// Checks a create request and returns the topic it would create.
    pub fn validate_create(&self, request: &CreateTopic) -> Result<NewTopic, TopicError> {
        validate_topic_name(&request.name).map_err(TopicError::InvalidName)?;
        let mut partitions = if request.partitions == -1 {
            self.config.num_partitions
        } else {
            request.partitions
        };
        let mut replication_factor = if request.replication_factor == -1 {
            self.config.default_replication_factor
        } else {
            request.replication_factor
        };
        let mut assignments = BTreeMap::new();
        if !request.assignments.is_empty() {
            // Kafka's ReplicationControlManager.createTopic, check by check.
            if request.replication_factor != -1 {
                return Err(TopicError::InvalidRequest(
                    "A manual partition assignment was specified, but replication factor was not set to -1.".into(),
                ));
            }
            if request.partitions != -1 {
                return Err(TopicError::InvalidRequest(
                    "A manual partition assignment was specified, but numPartitions was not set to -1.".into(),
                ));
            }
            let (registered, active) = self.broker_sets();
            let mut factor = None;
            for (index, replicas) in &request.assignments {
                if assignments.contains_key(index) {
                    return Err(TopicError::InvalidReplicaAssignment(format!(
                        "Found multiple manual partition assignments for partition {index}"
                    )));
                }
                reassignment::validate(*index, replicas, &registered, &active, factor)
                    .map_err(|e| TopicError::InvalidReplicaAssignment(e.to_string()))?;
                factor = Some(replicas.len());
                assignments.insert(*index, replicas.clone());
            }
            let count = assignments.len() as i32;
            if !(0..count).all(|i| assignments.contains_key(&i)) {
                return Err(TopicError::InvalidReplicaAssignment(
                    "partitions should be a consecutive 0-based integer sequence".into(),
                ));
            }
            partitions = count;
            replication_factor = i16::try_from(factor.unwrap_or(1)).unwrap_or(i16::MAX);
        }
        if !(1..=MAX_PARTITIONS_PER_TOPIC).contains(&partitions) {
            return Err(TopicError::InvalidPartitions(format!(
                "number of partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}, got {partitions}"
            )));
        }
        let brokers = self.store.brokers().len().max(1) as i16;
        if replication_factor < 1 || replication_factor > brokers {
            return Err(TopicError::InvalidReplicationFactor(format!(
                "replication factor {replication_factor} must be between 1 and the number of brokers ({brokers})"
            )));
        }
        topic_config::validate(&request.configs)?;
        Ok(NewTopic {
            name: request.name.clone(),
            partitions,
            replication_factor,
            configs: request.configs.clone(),
            assignments,
        })
    }

    /// The brokers a manual assignment may name (registered: tern knows the live ones)
    /// and those among them not in controlled shutdown. A single node knows itself.
    fn broker_sets(&self) -> (BTreeSet<i32>, BTreeSet<i32>) {
        let brokers = self.store.brokers();
        if brokers.is_empty() {
            let me: BTreeSet<i32> = [self.node_id].into_iter().collect();
            return (me.clone(), me);
        }
        let registered = brokers.iter().map(|b| b.node_id).collect();
        let active = brokers
            .iter()
            .filter(|b| !b.shutting_down)
            .map(|b| b.node_id)
            .collect();
        (registered, active)
    }

    /// Creates a topic and its local partitions.
    pub async fn create(&self, request: &CreateTopic) -> Result<TopicSpec, TopicError> {
        let topic = self.validate_create(request)?;
        let spec = self.store.create_topic(topic).await?;
        self.wait_for_placement(&spec).await;
        self.apply(&spec, true)?;
        tracing::info!(topic = %spec.name, partitions = spec.partitions, "created topic");
        Ok(spec)
    }

    /// `auto.create.topics.enable`.
    pub fn auto_create_enabled(&self) -> bool {
        self.config.auto_create
    }

    /// The topic's local partitions, creating the topic first when auto-creation is on
    /// and `allow_auto_create`. `Ok(None)` when it does not exist and may not be created.
    pub async fn get_or_auto_create(
        &self,
        name: &str,
        allow_auto_create: bool,
    ) -> Result<Option<Arc<TopicReplicas>>, TopicError> {
        if let Some(topic) = self.replicas.topic(name) {
            return Ok(Some(topic));
        }
        if let Some(spec) = self.store.topic(name).await {
            return Ok(Some(self.apply(&spec, false)?));
        }
        if !(allow_auto_create && self.config.auto_create) {
            validate_topic_name(name).map_err(TopicError::InvalidName)?;
            return Ok(None);
        }
        let request = CreateTopic {
            name: name.to_string(),
            partitions: -1,
            replication_factor: -1,
            assignments: Vec::new(),
            configs: BTreeMap::new(),
        };
        match self.create(&request).await {
            Ok(_) | Err(TopicError::AlreadyExists(_)) => Ok(self.replicas.topic(name)),
            Err(error) => Err(error),
        }
    }

    pub async fn delete(&self, name: &str) -> Result<TopicSpec, TopicError> {
        if is_internal(name) {
            return Err(TopicError::InvalidName(format!(
                "internal topic '{name}' cannot be deleted"
            )));
        }
        let spec = self.store.delete_topic(name).await?;
        self.replicas.remove_topic(name);
        tracing::info!(topic = %name, "deleted topic");
        Ok(spec)
    }

    /// Grows a topic to `count` partitions. `assignments`, when given, pin the new
    /// partitions' replicas (one list per new partition, Kafka's checks, each the
    /// topic's replication factor long); without them the ring places them with the
    /// topic's replication factor.
    pub async fn create_partitions(
        &self,
        name: &str,
        count: i32,
        assignments: Option<&[Vec<i32>]>,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        if is_internal(name) {
            return Err(TopicError::InvalidName(format!(
                "internal topic '{name}' cannot be resized"
            )));
        }
        let spec = self
            .store
            .topic(name)
            .await
            .ok_or_else(|| TopicError::Unknown(name.to_string()))?;
        if count <= spec.partitions || count > MAX_PARTITIONS_PER_TOPIC {
            return Err(TopicError::InvalidPartitions(format!(
                "topic '{name}' has {} partitions; the new count must be larger (and at most {MAX_PARTITIONS_PER_TOPIC}), got {count}",
                spec.partitions
            )));
        }
        let mut pins = BTreeMap::new();
        if let Some(assignments) = assignments {
            let additional = count - spec.partitions;
            if assignments.len() as i64 != i64::from(additional) {
                return Err(TopicError::InvalidReplicaAssignment(format!(
                    "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
                    assignments.len()
                )));
            }
            let (registered, active) = self.broker_sets();
            let factor = self.replication_factor_of(&spec);
            for (offset, replicas) in assignments.iter().enumerate() {
                let index = spec.partitions + offset as i32;
                reassignment::validate(index, replicas, &registered, &active, Some(factor))
                    .map_err(|e| TopicError::InvalidReplicaAssignment(e.to_string()))?;
                pins.insert(index, replicas.clone());
            }
        }
        if validate_only {
            return Ok(());
        }
        let spec = self.store.set_partition_count(name, count, &pins).await?;
        self.wait_for_placement(&spec).await;
        self.apply(&spec, false)?;
        Ok(())
    }

    /// The replica count the topic's partitions have (Kafka takes partition 0's): the
    /// stored placement's, else the topic's replication factor.
    fn replication_factor_of(&self, spec: &TopicSpec) -> usize {
        self.store
            .assignment(spec)
            .and_then(|a| a.partition(0).map(|p| p.ring_target().len()))
            .filter(|&n| n > 0)
            .unwrap_or_else(|| usize::try_from(spec.replication_factor).unwrap_or(1))
    }

    /// Replaces a topic's explicit configs with `configs` (after validation).
    pub async fn set_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<(), TopicError> {
        topic_config::validate_for_topic(name, &configs)?;
        if self.store.topic(name).await.is_none() {
            return Err(TopicError::Unknown(name.to_string()));
        }
        if validate_only {
            return Ok(());
        }
        let spec = self.store.set_topic_configs(name, configs).await?;
        self.apply(&spec, false)?;
        Ok(())
    }
}

/// Topic creation defaults and the static defaults of every topic config (built-in and
/// operator-set); `ReplicaManager` puts the dynamic broker configs on top of them.
#[derive(Debug, Clone)]
pub struct TopicsConfig {
    pub auto_create: bool,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub defaults: TopicDefaults,
}
