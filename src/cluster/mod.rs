//! Cluster metadata behind one trait: topics, their partitions, configs and ids, where
//! each partition lives (leader, replicas, leader epoch), the live brokers and the
//! controller, producer-id allocation, and the dynamic broker configs (KIP-226: per
//! broker and the cluster-wide default). `EmbeddedStore` serves a single node from a
//! file in the data directory; `EtcdStore` serves a cluster from etcd, with a local
//! cache kept current by watches. Both answer reads from one `MetadataCache`, and both
//! pass the same contract (`tests/store_contract.rs`). The controller needs more than
//! `MetadataStore` (an election, writes fenced by its term): `ControllerStore`, which
//! `EtcdStore` implements.
//!
//! Writers change the store; every broker (this one included) then reconciles its local
//! partitions with what the store says (`topics::TopicService::reconcile`), driven by
//! the store's events.

pub mod broker_config;
pub mod cache;
pub mod config_value;
pub mod dynamic_broker_configs;
pub mod controller;
pub mod controller_store;
pub mod election;
pub mod embedded;
pub mod etcd;
pub mod peers;
pub mod producer_ids;
pub mod reassignment;
pub mod ring;
pub mod store;
pub mod topic_config;

pub use self::cache::{MetadataCache, Snapshot};
pub use self::controller_store::{ControllerStore, Placed};
pub use self::embedded::EmbeddedStore;
pub use self::etcd::EtcdStore;
pub use self::producer_ids::ProducerIdAllocator;
pub use self::store::{
    apply_isr_change, set_user_credential, BrokerEndpoint, BrokerInfo, ControllerTerm, IsrChange,
    MetadataError, MetadataEvent, MetadataStore, NewTopic, PartitionAssignment, TopicAssignment,
    TopicSpec, UserCredentials,
};
