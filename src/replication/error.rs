//! Why a partition refused a request, for the handlers to turn into Kafka error codes
//! (`api::errors::partition_error`) or HTTP answers.

use super::replica::ReplicaError;
use crate::log::{AppendError, OffsetOutOfRange};
use crate::model::TopicPartition;

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error(transparent)]
    Append(#[from] AppendError),
    #[error("partition {0} has failed storage and takes no writes")]
    StorageFailed(TopicPartition),
    #[error(transparent)]
    OutOfRange(#[from] OffsetOutOfRange),
    #[error("this broker is not the leader of {0}")]
    NotLeader(TopicPartition),
    #[error("this broker is not a follower of {0}")]
    NotFollower(TopicPartition),
    #[error("leader epoch {requested} of {partition} is older than the current {current}")]
    FencedLeaderEpoch {
        partition: TopicPartition,
        requested: i32,
        current: i32,
    },
    #[error("leader epoch {requested} of {partition} is newer than the current {current}")]
    UnknownLeaderEpoch {
        partition: TopicPartition,
        requested: i32,
        current: i32,
    },
    #[error("{partition} has {isr} in-sync replicas, below min.insync.replicas {min}")]
    NotEnoughReplicas {
        partition: TopicPartition,
        isr: i32,
        min: i32,
    },
    #[error("{0}: the in-sync replicas fell below min.insync.replicas after the append")]
    NotEnoughReplicasAfterAppend(TopicPartition),
    #[error("{0}: the write was not replicated within the request's timeout")]
    TimedOut(TopicPartition),
}

impl PartitionError {
    pub(super) fn of(partition: &TopicPartition, error: ReplicaError) -> Self {
        let partition = partition.clone();
        match error {
            ReplicaError::Append(e) => Self::Append(e),
            ReplicaError::OutOfRange(e) => Self::OutOfRange(e),
            ReplicaError::NotLeader => Self::NotLeader(partition),
            ReplicaError::NotFollower => Self::NotFollower(partition),
            ReplicaError::FencedLeaderEpoch { requested, current } => Self::FencedLeaderEpoch {
                partition,
                requested: requested.0,
                current: current.0,
            },
            ReplicaError::UnknownLeaderEpoch { requested, current } => Self::UnknownLeaderEpoch {
                partition,
                requested: requested.0,
                current: current.0,
            },
            ReplicaError::NotEnoughReplicas { isr, min } => Self::NotEnoughReplicas {
                partition,
                isr,
                min,
            },
        }
    }
}
