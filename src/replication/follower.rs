//! TEMPORARY stand-in with the agreed signatures; replaced by the repl-state branch.
#![allow(dead_code, unused_variables)]

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruncationDecision {
    TruncateTo(i64),
}

pub fn diverging_epoch(
    fetch_offset: i64,
    last_fetched_epoch: i32,
    leader_end_for_epoch: (i32, i64),
) -> Option<(i32, i64)> {
    let (epoch, end) = leader_end_for_epoch;
    (end < fetch_offset || epoch < last_fetched_epoch).then_some((epoch, end))
}

pub fn truncation_offset(
    diverging: (i32, i64),
    local_end_for_epoch: (i32, i64),
    local_log_end: i64,
) -> TruncationDecision {
    TruncationDecision::TruncateTo(
        diverging
            .1
            .min(local_end_for_epoch.1)
            .min(local_log_end)
            .max(0),
    )
}
