//! The only place internal errors become Kafka error codes. The matches are exhaustive
//! on purpose: a new error variant must choose its wire code here.

use kafka_protocol::ResponseError;

use crate::group::coordinator::CommitError;
use crate::group::state::GroupError;
use crate::log::batch::BatchError;
use crate::log::producer_state::SequenceError;
use crate::log::AppendError;
use crate::replication::{NotServed, PartitionError};
use crate::topics::TopicError;
use crate::txn::TxnError;

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
        AppendError::MissingKey { .. } | AppendError::ControlBatch => ResponseError::InvalidRecord,
        AppendError::Sequence(
            SequenceError::NotTransactional { .. } | SequenceError::NotInTransaction { .. },
        ) => ResponseError::InvalidTxnState,
        AppendError::Sequence(SequenceError::CoordinatorFenced { .. }) => {
            ResponseError::TransactionCoordinatorFenced
        }
        AppendError::UnreadableRecords(_) => ResponseError::CorruptMessage,
        AppendError::TimestampOutOfRange { .. } => ResponseError::InvalidTimestamp,
        AppendError::Io { .. } => ResponseError::KafkaStorageError,
        // Only a follower's fetcher appends replicated batches; no client sees this.
        AppendError::NotContiguous { .. } => ResponseError::UnknownServerError,
    }
}

pub fn partition_error(error: &PartitionError) -> ResponseError {
    match error {
        PartitionError::Append(e) => append_error(e),
        PartitionError::StorageFailed(_) => ResponseError::KafkaStorageError,
        PartitionError::OutOfRange(_) => ResponseError::OffsetOutOfRange,
        PartitionError::NotLeader(_) | PartitionError::NotFollower(_) => {
            ResponseError::NotLeaderOrFollower
        }
        PartitionError::FencedLeaderEpoch { .. } => ResponseError::FencedLeaderEpoch,
        PartitionError::UnknownLeaderEpoch { .. } => ResponseError::UnknownLeaderEpoch,
        PartitionError::NotEnoughReplicas { .. } => ResponseError::NotEnoughReplicas,
        PartitionError::NotEnoughReplicasAfterAppend(_) => {
            ResponseError::NotEnoughReplicasAfterAppend
        }
        PartitionError::TimedOut(_) => ResponseError::RequestTimedOut,
    }
}

/// A partition that is not here because its topic or partition does not exist. An
/// unknown topic *id* (the request named topics by id, Produce v13+ and Fetch v13+) is
/// UNKNOWN_TOPIC_ID; a missing partition of a known topic, or an unknown topic named
/// by name, is UNKNOWN_TOPIC_OR_PARTITION.
pub fn unknown_partition(topic_known: bool, named_by_id: bool) -> ResponseError {
    if !topic_known && named_by_id {
        ResponseError::UnknownTopicId
    } else {
        ResponseError::UnknownTopicOrPartition
    }
}

/// A group write (commit, deletion) that failed. A storage failure is
/// COORDINATOR_NOT_AVAILABLE, as Kafka answers when its offsets log cannot be written:
/// the client looks the coordinator up again and retries.
pub fn commit_error(error: &CommitError) -> ResponseError {
    match error {
        CommitError::Group(e) => group_error(e),
        CommitError::Storage(_) => ResponseError::CoordinatorNotAvailable,
    }
}

/// OffsetCommit's view of [`commit_error`]: before v9 (KIP-848) a commit with a
/// generation to a group that does not exist, or with another epoch than a consumer
/// group's member has, is ILLEGAL_GENERATION.
pub fn offset_commit_error(error: &CommitError, api_version: i16) -> ResponseError {
    match error {
        CommitError::Group(
            GroupError::GroupIdNotFound
            | GroupError::StaleMemberEpoch
            | GroupError::FencedMemberEpoch,
        ) if api_version < 9 => ResponseError::IllegalGeneration,
        other => commit_error(other),
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
        TopicError::InvalidRequest(_) => ResponseError::InvalidRequest,
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
        GroupError::FencedMemberEpoch => ResponseError::FencedMemberEpoch,
        GroupError::StaleMemberEpoch => ResponseError::StaleMemberEpoch,
        GroupError::UnreleasedInstanceId => ResponseError::UnreleasedInstanceId,
        GroupError::UnsupportedAssignor => ResponseError::UnsupportedAssignor,
        GroupError::InvalidRegularExpression => ResponseError::InvalidRegularExpression,
    }
}

/// The wire code of an optional error; 0 for none.
/// A transaction coordinator's refusal, with Kafka's rule for clients too old to know
/// PRODUCER_FENCED: requests below `fenced_since` get INVALID_PRODUCER_EPOCH instead
/// (InitProducerId v4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2).
pub fn txn_error(error: &TxnError, api_version: i16, fenced_since: i16) -> ResponseError {
    match error {
        TxnError::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
        TxnError::ProducerFenced if api_version < fenced_since => {
            ResponseError::InvalidProducerEpoch
        }
        TxnError::ProducerFenced => ResponseError::ProducerFenced,
        TxnError::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
        TxnError::InvalidTxnState => ResponseError::InvalidTxnState,
        TxnError::InvalidTransactionTimeout => ResponseError::InvalidTransactionTimeout,
        TxnError::NotCoordinator => ResponseError::NotCoordinator,
        TxnError::CoordinatorLoadInProgress => ResponseError::CoordinatorLoadInProgress,
        TxnError::CoordinatorNotAvailable => ResponseError::CoordinatorNotAvailable,
        TxnError::InvalidRequest => ResponseError::InvalidRequest,
    }
}

pub fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

/// Kafka's check of a client's `current_leader_epoch` (KIP-320) against this replica's
/// (`Partition.getLocalLog` with a current epoch): none asked (negative) passes, an older
/// one is FENCED_LEADER_EPOCH, a newer one UNKNOWN_LEADER_EPOCH.
pub fn check_current_leader_epoch(
    asked: i32,
    current: crate::model::LeaderEpoch,
) -> Result<(), ResponseError> {
    match asked {
        a if a < 0 || a == current.0 => Ok(()),
        a if a < current.0 => Err(ResponseError::FencedLeaderEpoch),
        _ => Err(ResponseError::UnknownLeaderEpoch),
    }
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
        assert_eq!(append_error(&AppendError::ControlBatch).code(), 87);
        let outside = SequenceError::NotTransactional { producer_id: 1 };
        assert_eq!(append_error(&AppendError::Sequence(outside)).code(), 48);
        assert_eq!(
            topic_error(&TopicError::AlreadyExists("t".into())).code(),
            36
        );
        assert_eq!(topic_error(&TopicError::InvalidName("t".into())).code(), 17);
        assert_eq!(code(None), 0);
        assert_eq!(group_error(&GroupError::MemberIdRequired).code(), 79);
        assert_eq!(group_error(&GroupError::NonEmptyGroup).code(), 68);
        assert_eq!(group_error(&GroupError::FencedInstanceId).code(), 82);
        let unknown_group = CommitError::Group(GroupError::GroupIdNotFound);
        assert_eq!(offset_commit_error(&unknown_group, 8).code(), 22);
        assert_eq!(offset_commit_error(&unknown_group, 9).code(), 69);
        assert_eq!(unknown_partition(false, true).code(), 100);
        assert_eq!(unknown_partition(true, true).code(), 3);
        assert_eq!(unknown_partition(false, false).code(), 3);
    }
}
