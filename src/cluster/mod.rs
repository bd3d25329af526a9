//! Cluster metadata behind one trait: topics, their partitions, configs and ids, and
//! producer-id allocation. `EmbeddedStore` serves a single node from a file in the data
//! directory; an etcd-backed store for many nodes implements the same trait.
//!
//! Writers change the store; every broker (this one included) then reconciles its local
//! partitions with what the store says (`replication::ReplicaManager::reconcile_topic`).

pub mod embedded;
pub mod ring;
pub mod topic_config;

use std::collections::BTreeMap;
use std::fmt::Debug;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub use embedded::EmbeddedStore;

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
}

/// What a client asks for when creating a topic (already validated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i16,
    pub configs: BTreeMap<String, String>,
}

/// A broker as clients should reach it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerInfo {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
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
}

/// A change other components react to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataEvent {
    TopicCreated(TopicSpec),
    TopicChanged(TopicSpec),
    TopicDeleted(TopicSpec),
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
    /// Grows a topic to `count` partitions (never shrinks).
    async fn set_partition_count(&self, name: &str, count: i32)
        -> Result<TopicSpec, MetadataError>;
    /// Replaces the topic's explicit configs.
    async fn set_topic_configs(
        &self,
        name: &str,
        configs: BTreeMap<String, String>,
    ) -> Result<TopicSpec, MetadataError>;
    /// Reserves `count` consecutive producer ids and returns the first.
    async fn allocate_producer_ids(&self, count: i64) -> Result<i64, MetadataError>;
    /// Changes from now on.
    fn subscribe(&self) -> tokio::sync::broadcast::Receiver<MetadataEvent>;
}
