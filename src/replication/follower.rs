//! The divergence decisions of replication by leader epoch (KIP-101, KIP-279, and the
//! fetch-based truncation of KIP-320 / Fetch v12+), as pure functions: on the leader,
//! whether a follower's fetch position is consistent with the leader's log; on the
//! follower, where to truncate when it is not. No I/O: callers pass the answers of their
//! log's epoch cache (`end_offset_for(epoch)`, Kafka's `LeaderEpochFileCache.endOffsetFor`
//! semantics, with `(-1, -1)` for "undefined").
//!
//! The follower's truncation is the same whether the leader's answer came in a Fetch
//! response's `diverging_epoch` or in an OffsetForLeaderEpoch response: Kafka's
//! `AbstractFetcherThread` sends both through `getOffsetTruncationState`, so
//! [`truncation_offset`] serves both.
//!
//! One requirement on the caller, from Kafka: a leader records its own epoch in its epoch
//! cache when it *becomes* leader (`Partition.makeLeader` →
//! `UnifiedLog.maybeAssignEpochStartOffset`), not at its first append. Otherwise a new
//! leader that has not appended yet answers "undefined" for a follower's newer
//! last-fetched epoch (one the new leader never saw), and the follower is sent to
//! OFFSET_OUT_OF_RANGE handling instead of truncating its divergent tail.

pub use crate::log::epochs::{UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET};

/// The leader's verdict on a follower's fetch position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchValidation {
    /// Serve the fetch.
    Consistent,
    /// Answer with this `diverging_epoch` and no records.
    Diverging { epoch: i32, end_offset: i64 },
    /// The leader cannot place the follower's last fetched epoch at all: Kafka answers
    /// OFFSET_OUT_OF_RANGE ("Could not determine the end offset of the last fetched epoch").
    OffsetOutOfRange,
}

/// Leader side of a follower Fetch, in full (Kafka's `Partition.fetchRecords` →
/// the `lastFetchedEpoch` check of `readRecords`/`validateFetchOffsetAndEpoch`):
/// `leader_end_for_epoch` is the leader's `end_offset_for(last_fetched_epoch)`. A
/// follower with no epoch yet (`last_fetched_epoch` < 0, sent as absent) is consistent.
/// The log-start check (fetch offset below the log start: OFFSET_OUT_OF_RANGE) is the
/// caller's, before this one.
pub fn validate_follower_fetch(
    fetch_offset: i64,
    last_fetched_epoch: i32,
    leader_end_for_epoch: (i32, i64),
) -> FetchValidation {
    if last_fetched_epoch < 0 {
        return FetchValidation::Consistent;
    }
    let (epoch, end_offset) = leader_end_for_epoch;
    if end_offset == UNDEFINED_EPOCH_OFFSET || epoch == UNDEFINED_EPOCH {
        return FetchValidation::OffsetOutOfRange;
    }
    // The leader's largest epoch ≤ the follower's is older (the follower has an epoch
    // the leader never had), or that epoch ends on the leader before the follower's
    // position: the follower's tail from there is not the leader's.
    if epoch < last_fetched_epoch || end_offset < fetch_offset {
        FetchValidation::Diverging { epoch, end_offset }
    } else {
        FetchValidation::Consistent
    }
}

/// Leader side of a follower Fetch with `last_fetched_epoch` (Kafka's
/// Partition.fetchRecords → validateFetchOffsetAndEpoch, Fetch v12+): `leader_end_for_epoch` is
/// the leader's `end_offset_for(last_fetched_epoch)`. `Some((epoch, end_offset))` = the
/// response's diverging_epoch; `None` = consistent, serve the fetch.
///
/// When the leader cannot place the epoch at all (`leader_end_for_epoch` undefined), this
/// returns `Some((-1, -1))`, which [`truncation_offset`] reads as Kafka's undefined answer
/// (truncate to the high watermark); Kafka itself answers OFFSET_OUT_OF_RANGE there —
/// use [`validate_follower_fetch`] to do exactly that.
pub fn diverging_epoch(
    fetch_offset: i64,
    last_fetched_epoch: i32,
    leader_end_for_epoch: (i32, i64),
) -> Option<(i32, i64)> {
    match validate_follower_fetch(fetch_offset, last_fetched_epoch, leader_end_for_epoch) {
        FetchValidation::Consistent => None,
        FetchValidation::Diverging { epoch, end_offset } => Some((epoch, end_offset)),
        FetchValidation::OffsetOutOfRange => Some((UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
    }
}

/// Where a follower truncates (Kafka's `OffsetTruncationState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruncationDecision {
    /// Truncate the log to this offset (no-op if it already ends there) and fetch from it:
    /// the logs now agree below it.
    TruncateTo(i64),
    /// Truncate to this offset, then ask again: our largest epoch ≤ the leader's answer
    /// is older than it, so the logs may still diverge below this point. With fetch-based
    /// truncation the next Fetch (carrying our new latest epoch as `last_fetched_epoch`)
    /// asks; with OffsetForLeaderEpoch, another request does (`truncationCompleted = false`).
    TruncateAndRetry(i64),
    /// The leader answered undefined (it knows no epoch at or below ours): truncate to our
    /// high watermark, the pre-KIP-101 rule Kafka keeps for this case.
    TruncateToHighWatermark,
}

impl TruncationDecision {
    /// The offset to truncate to, given our high watermark.
    pub fn offset(self, high_watermark: i64) -> i64 {
        match self {
            Self::TruncateTo(o) | Self::TruncateAndRetry(o) => o,
            Self::TruncateToHighWatermark => high_watermark,
        }
    }
}

/// Follower side: the leader said our log diverges at `diverging` = (epoch, end_offset);
/// `local_end_for_epoch` is our own end_offset_for(diverging.0), `local_log_end` our log end.
/// Returns the offset to truncate to (Kafka's AbstractFetcherThread truncateOnFetchResponse /
/// getOffsetTruncationState). The same for an OffsetForLeaderEpoch answer (see the module doc).
pub fn truncation_offset(
    diverging: (i32, i64),
    local_end_for_epoch: (i32, i64),
    local_log_end: i64,
) -> TruncationDecision {
    let (leader_epoch, leader_end) = diverging;
    if leader_end == UNDEFINED_EPOCH_OFFSET {
        return TruncationDecision::TruncateToHighWatermark;
    }
    if leader_epoch == UNDEFINED_EPOCH {
        // A leader without epochs (pre-0.11 protocol): its end offset is all it gives.
        return TruncationDecision::TruncateTo(leader_end.min(local_log_end));
    }
    let (local_epoch, local_end) = local_end_for_epoch;
    if local_end == UNDEFINED_EPOCH_OFFSET || local_epoch == UNDEFINED_EPOCH {
        // We know no epoch at or below the leader's (we were not tracking epochs, or our
        // log starts later): the leader's answer is below what we asked, so its end
        // offset is safe to truncate to.
        return TruncationDecision::TruncateTo(leader_end.min(local_log_end));
    }
    if local_epoch != leader_epoch {
        // We do not have the leader's epoch: cut to the end of our largest older epoch and
        // ask again with it (KIP-279).
        TruncationDecision::TruncateAndRetry(local_end.min(local_log_end))
    } else {
        TruncationDecision::TruncateTo(local_end.min(leader_end).min(local_log_end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_side_cases() {
        // No epoch yet: nothing to check.
        assert_eq!(diverging_epoch(0, -1, (-1, -1)), None);
        // Same epoch, the leader has at least as much.
        assert_eq!(diverging_epoch(10, 3, (3, 10)), None);
        assert_eq!(diverging_epoch(10, 3, (3, 15)), None);
        // The epoch ended earlier on the leader.
        assert_eq!(diverging_epoch(10, 3, (3, 8)), Some((3, 8)));
        // The leader never had epoch 4: its largest ≤ 4 is 3, ending at 12.
        assert_eq!(diverging_epoch(10, 4, (3, 12)), Some((3, 12)));
        // Undefined.
        assert_eq!(
            validate_follower_fetch(10, 4, (-1, -1)),
            FetchValidation::OffsetOutOfRange
        );
        assert_eq!(diverging_epoch(10, 4, (-1, -1)), Some((-1, -1)));
    }

    #[test]
    fn follower_side_cases() {
        // Same epoch on both: the smaller end.
        assert_eq!(
            truncation_offset((3, 8), (3, 10), 10),
            TruncationDecision::TruncateTo(8)
        );
        assert_eq!(
            truncation_offset((3, 12), (3, 10), 14),
            TruncationDecision::TruncateTo(10)
        );
        // We lack the leader's epoch 3: our largest ≤ 3 is 2, ending at 6.
        assert_eq!(
            truncation_offset((3, 12), (2, 6), 14),
            TruncationDecision::TruncateAndRetry(6)
        );
        // We know nothing at or below 3.
        assert_eq!(
            truncation_offset((3, 12), (-1, -1), 20),
            TruncationDecision::TruncateTo(12)
        );
        assert_eq!(
            truncation_offset((3, 12), (-1, -1), 5),
            TruncationDecision::TruncateTo(5)
        );
        // Leader without epochs; undefined answer.
        assert_eq!(
            truncation_offset((-1, 7), (3, 10), 10),
            TruncationDecision::TruncateTo(7)
        );
        assert_eq!(
            truncation_offset((-1, -1), (3, 10), 10),
            TruncationDecision::TruncateToHighWatermark
        );
        assert_eq!(TruncationDecision::TruncateToHighWatermark.offset(4), 4);
    }
}
