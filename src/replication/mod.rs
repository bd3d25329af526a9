//! Partitions hosted on this broker and their replication: each `Partition` is a
//! replica that leads (tracking its followers, the ISR and the high watermark in
//! `leader::LeaderState`), follows (appending what its leader's fetcher brings,
//! truncating a divergent tail by `follower`'s decisions) or idles.

pub mod alter;
mod error;
pub mod fetcher;
pub mod follower;
pub mod leader;
mod lease;
pub mod log_cleaner;
mod partition;
mod real_log;
pub mod replica;
mod replicas;
#[cfg(test)]
pub(crate) mod sim;

pub use follower::{diverging_epoch, truncation_offset, TruncationDecision};
pub use leader::{AckCheck, FollowerProgress, IsrProposal, LeaderState};
#[cfg(test)]
pub use partition::testing as partition_testing;
pub use partition::{
    Acks, FollowerProcess, LeaderLease, Partition, PartitionError, ReadResult, ReplicaRead,
};
pub use replicas::{NotServed, ReplicaManager, TopicReplicas};
