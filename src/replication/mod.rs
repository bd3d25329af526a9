//! Partitions hosted on this broker. A partition is served only by its leader, as
//! the metadata store assigns it; there are no followers yet: leader/follower
//! replication, the ISR and the high watermark's advance by follower progress belong
//! in this module when they land.

pub mod follower;
pub mod leader;
mod partition;
mod replicas;
#[cfg(test)]
pub(crate) mod sim;

pub use follower::{diverging_epoch, truncation_offset, TruncationDecision};
pub use leader::{AckCheck, IsrProposal, LeaderState};
pub use partition::{Partition, PartitionError, ReadResult};
pub use replicas::{Durability, NotServed, ReplicaManager, TopicReplicas};
