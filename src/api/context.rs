//! What every handler receives: the request's identity (principal, client, version)
//! and handles to the broker's subsystems.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::cluster::broker_config::StaticBrokerConfig;
use crate::cluster::peers::Peers;
use crate::cluster::{BrokerInfo, MetadataStore};
use crate::config::ServerConfig;
use crate::group::coordinator::GroupCoordinator;
use crate::replication::ReplicaManager;
use crate::topics::{ProducerIdAllocator, TopicService};

/// Who sent a request. Authentication (SASL) will fill in `User`; ACLs check it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    Anonymous,
    User(String),
}

/// The broker's subsystems, shared by all connections.
#[derive(Debug)]
pub struct Services {
    pub node: BrokerInfo,
    pub store: Arc<dyn MetadataStore>,
    pub replicas: Arc<ReplicaManager>,
    pub topics: TopicService,
    pub producer_ids: ProducerIdAllocator,
    pub groups: Arc<GroupCoordinator>,
    /// Connections to the other brokers, for what only their partitions or groups answer.
    pub peers: Peers,
    pub server: ServerConfig,
    /// The read-only broker configs DescribeConfigs lists for this broker (and
    /// `log.flush.interval.ms`'s static value), by Kafka name.
    pub static_configs: Vec<StaticBrokerConfig>,
}

/// One request's context.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub services: Arc<Services>,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    pub principal: Principal,
    pub peer: SocketAddr,
    /// Time the handler spent waiting rather than working (long-poll), in µs.
    pub remote_wait_us: Arc<std::sync::atomic::AtomicU64>,
}

impl RequestContext {
    pub fn node_id(&self) -> i32 {
        self.services.node.node_id
    }
}
