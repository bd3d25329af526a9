//! The only place internal errors become Kafka error codes. The matches are exhaustive
//! on purpose: a new error variant must choose its wire code here.

use kafka_protocol::ResponseError;

use crate::group::state::GroupError;
use crate::log::batch::BatchError;
use crate::log::producer_state::SequenceError;
use crate::log::AppendError;
use crate::replication::{NotServed, PartitionError};
use crate::topics::TopicError;

pub fn batch_error(error: &BatchError) -> ResponseError {
    match error {
        BatchError::Truncated { .. }
        | BatchError::LengthTooSmall { .. }
        | BatchError::UnsupportedMagic { .. }
        | BatchError::CrcMismatch { .. }
        | BatchError::InconsistentCount { .. }
        | BatchError::Empty => ResponseError::CorruptMessage,
    }
}

pub fn append_error(error: &AppendError) -> ResponseError {
    match error {
        AppendError::Batch(e) => batch_error(e),
        AppendError::TooLarge { .. } => ResponseError::MessageTooLarge,
        AppendError::LargerThanSegment { .. } => ResponseError::RecordListTooLarge,
        AppendError::Sequence(SequenceError::OutOfOrder { .. }) => {
            ResponseError::OutOfOrderSequenceNumber
        }
        AppendError::Sequence(SequenceError::StaleEpoch { .. }) => {
            ResponseError::InvalidProducerEpoch
        }
        AppendError::Io { .. } => ResponseError::KafkaStorageError,
    }
}

pub fn partition_error(error: &PartitionError) -> ResponseError {
    match error {
        PartitionError::Append(e) => append_error(e),
        PartitionError::StorageFailed(_) => ResponseError::KafkaStorageError,
        PartitionError::OutOfRange(_) => ResponseError::OffsetOutOfRange,
    }
}

/// Why a partition is not served here, as Kafka says it.
pub fn not_served(reason: NotServed) -> ResponseError {
    match reason {
        NotServed::Unknown => ResponseError::UnknownTopicOrPartition,
        NotServed::NotLeader => ResponseError::NotLeaderOrFollower,
    }
}

pub fn topic_error(error: &TopicError) -> ResponseError {
    match error {
        TopicError::InvalidName(_) => ResponseError::InvalidTopicException,
        TopicError::AlreadyExists(_) => ResponseError::TopicAlreadyExists,
        TopicError::Unknown(_) => ResponseError::UnknownTopicOrPartition,
        TopicError::InvalidPartitions(_) => ResponseError::InvalidPartitions,
        TopicError::InvalidReplicationFactor(_) => ResponseError::InvalidReplicationFactor,
        TopicError::InvalidReplicaAssignment(_) => ResponseError::InvalidReplicaAssignment,
        TopicError::InvalidConfig(_) => ResponseError::InvalidConfig,
        // Kafka answers every refused BROKER-resource change with INVALID_REQUEST.
        TopicError::InvalidBrokerConfig(_) => ResponseError::InvalidRequest,
        TopicError::Storage(_) => ResponseError::KafkaStorageError,
        TopicError::Metadata(_) => ResponseError::UnknownServerError,
    }
}

pub fn group_error(error: &GroupError) -> ResponseError {
    match error {
        GroupError::UnknownMemberId => ResponseError::UnknownMemberId,
        GroupError::IllegalGeneration => ResponseError::IllegalGeneration,
        GroupError::RebalanceInProgress => ResponseError::RebalanceInProgress,
        GroupError::MemberIdRequired => ResponseError::MemberIdRequired,
        GroupError::InconsistentGroupProtocol => ResponseError::InconsistentGroupProtocol,
        GroupError::InvalidSessionTimeout => ResponseError::InvalidSessionTimeout,
        GroupError::FencedInstanceId => ResponseError::FencedInstanceId,
        GroupError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
        GroupError::NotCoordinator => ResponseError::NotCoordinator,
        GroupError::NonEmptyGroup => ResponseError::NonEmptyGroup,
        GroupError::GroupIdNotFound => ResponseError::GroupIdNotFound,
        GroupError::GroupMaxSizeReached => ResponseError::GroupMaxSizeReached,
        GroupError::GroupSubscribedToTopic => ResponseError::GroupSubscribedToTopic,
        GroupError::InvalidGroupId => ResponseError::InvalidGroupId,
    }
}

/// The wire code of an optional error; 0 for none.
pub fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_and_protocol_errors_map_to_their_kafka_codes() {
        assert_eq!(
            batch_error(&BatchError::CrcMismatch {
                stored: 1,
                computed: 2
            })
            .code(),
            2
        );
        assert_eq!(
            append_error(&AppendError::TooLarge { bytes: 2, max: 1 }).code(),
            10
        );
        let gap = SequenceError::OutOfOrder {
            producer_id: 1,
            expected: 1,
            got: 3,
        };
        assert_eq!(append_error(&AppendError::Sequence(gap)).code(), 45);
        let stale = SequenceError::StaleEpoch {
            producer_id: 1,
            epoch: 0,
            current: 1,
        };
        assert_eq!(append_error(&AppendError::Sequence(stale)).code(), 47);
        let io = AppendError::Io {
            dir: "x".into(),
            source: std::io::Error::other("disk"),
        };
        assert_eq!(append_error(&io).code(), 56);
        assert_eq!(
            topic_error(&TopicError::AlreadyExists("t".into())).code(),
            36
        );
        assert_eq!(topic_error(&TopicError::InvalidName("t".into())).code(), 17);
        assert_eq!(code(None), 0);
        assert_eq!(group_error(&GroupError::MemberIdRequired).code(), 79);
        assert_eq!(group_error(&GroupError::NonEmptyGroup).code(), 68);
        assert_eq!(group_error(&GroupError::FencedInstanceId).code(), 82);
    }
}
