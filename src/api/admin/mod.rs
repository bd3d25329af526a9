//! Topic and cluster administration APIs.

pub mod alter_configs;
pub mod create_partitions;
pub mod create_topics;
pub mod delete_topics;
pub mod describe_cluster;
pub mod describe_configs;
pub mod incremental_alter_configs;

/// DescribeConfigs/AlterConfigs resource types.
pub(crate) const RESOURCE_TOPIC: i8 = 2;
pub(crate) const RESOURCE_BROKER: i8 = 4;
