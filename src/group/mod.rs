//! Consumer groups: classic membership (`state`), KIP-848 consumer groups
//! (`consumer`), KIP-932 share groups (`share`), committed offsets (`offsets`), the
//! per-group configs (`config`) and the coordinator that drives them (`coordinator`).

pub mod config;
pub mod consumer;
pub mod coordinator;
pub mod offsets;
pub mod share;
pub mod state;

/// Consumer-group coordinator settings.
#[derive(Debug, Clone, Copy)]
pub struct GroupsConfig {
    pub coordinator: coordinator::CoordinatorConfig,
    pub offsets_topic_partitions: i32,
    /// Replicas per offsets partition; the ring places min(this, live brokers).
    pub offsets_topic_replication_factor: i16,
}
