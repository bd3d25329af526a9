//! Partitions hosted on this broker. Today every partition is a single replica led
//! here; leader/follower replication, the ISR and the high watermark's advance by
//! follower progress belong in this module when they land.

mod partition;
mod replicas;

pub use partition::{Partition, PartitionError, ReadResult};
pub use replicas::{Durability, ReplicaManager, TopicReplicas};
