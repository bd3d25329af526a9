//! What a partition leader decides about its followers, as a pure state machine: each
//! follower's progress, the ISR changes to propose, the high watermark and whether an
//! acks=all write is acknowledged. No clock, no I/O, no locks: callers pass `now_ms` and
//! the facts they observed (a follower's fetch, the leader's own log end, the store's
//! answer to a proposal) and carry out what it returns.
//!
//! One `LeaderState` lives for one leader epoch: a new epoch (even with the same leader)
//! starts a new one, so that only fetches made under *this* epoch count. That is the
//! rule that keeps a deposed leader harmless: Kafka's `Partition.makeLeader` resets every
//! remote replica (`Replica.resetReplicaState`) to an unknown log end, and an unknown log
//! end holds the high watermark back, so a leader whose followers moved on to a newer
//! leader never advances its high watermark and never acknowledges an acks=all write
//! (unless the ISR is the leader alone, which the controller only keeps while no other
//! replica is in sync: then no other leader can be elected from it).
//!
//! ISR changes follow KIP-497 (Kafka's `Partition.maybeExpandIsr` / `maybeShrinkIsr` and
//! the `PendingExpandIsr` / `PendingShrinkIsr` states): one proposal in flight at a time,
//! each carrying the partition epoch it was based on so the store can compare-and-swap it;
//! while one is in flight the high watermark is computed over the *maximal* ISR (the
//! committed ISR plus a pending addition; a pending removal still counts), which is never
//! less strict than either outcome.
//!
//! ```text
//!   committed ──(fetch: a follower caught up)──▶ pending expansion ──┐
//!       ▲     ──(tick: a member lagged)───────▶ pending shrink ─────┤ proposal_committed /
//!       └────────────────────────────────────────────────────────────┘ proposal_failed /
//!                                                                      update_from_store
//! ```

use std::collections::BTreeMap;

/// An ISR change to write to the metadata store with a compare-and-swap: the write
/// succeeds only while the stored partition epoch still equals `partition_epoch` (Kafka's
/// AlterPartition, KIP-497); the store then bumps the partition epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    /// The whole proposed ISR, the leader first.
    pub isr: Vec<i32>,
    /// The partition epoch this proposal was computed from.
    pub partition_epoch: i32,
    /// For a member this proposal adds: the incarnation of the follower process whose
    /// fetch caught it up (KIP-903's broker epoch), so that the controller keeps it in
    /// the ISR when it notices a restart that happened *before* that fetch. Empty for a
    /// shrink, or when the follower did not say.
    pub incarnations: BTreeMap<i32, i64>,
}

impl IsrProposal {
    /// A shrink to the leader alone (the leader never proposes to leave): sent only after
    /// a flush (`IsrStep::FlushThenPropose`), by [`LeaderState`]'s rule for the last
    /// in-sync replica.
    pub fn leaves_the_leader_alone(&self) -> bool {
        self.isr.len() == 1
    }
}

/// The answer to "is this acks=all write acknowledged?" (Kafka's
/// `Partition.checkEnoughReplicasReachOffset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckCheck {
    /// The high watermark has not passed the write yet.
    Wait,
    /// Every committed ISR member has it and the ISR is at least min.insync.replicas.
    Done,
    /// The high watermark passed the write but the committed ISR shrank below
    /// min.insync.replicas meanwhile: Kafka answers NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    NotEnoughReplicasAfterAppend,
}

/// What the leader knows of one follower in this leader epoch (Kafka's `ReplicaState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Follower {
    /// The follower's log end as its last fetch in this epoch told us; `None` before its
    /// first fetch in this epoch (Kafka's `UnknownOffsetMetadata`): it then holds the
    /// high watermark back if it is in the ISR.
    log_end: Option<i64>,
    /// The last time it was known to have everything the leader had.
    last_caught_up_ms: i64,
    /// The leader's log end at the follower's previous fetch, and that fetch's time.
    last_fetch_leader_log_end: i64,
    last_fetch_ms: i64,
    /// The incarnation its last fetch declared (Fetch v15+ `replica_epoch`), if any.
    incarnation: Option<i64>,
    /// The log start its last served fetch declared (Fetch v5+ `log_start_offset`);
    /// `None` before one in this epoch.
    log_start: Option<i64>,
}

/// What the leader knows of one follower's progress in this leader epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    pub id: i32,
    /// Its last fetch offset, -1 before its first fetch in this epoch.
    pub log_end: i64,
    /// Its log start, as its last fetch declared.
    pub log_start: Option<i64>,
    pub last_caught_up_ms: i64,
}

impl Follower {
    /// Kafka's `Replica.resetReplicaState` for a new leader: log end unknown; an ISR
    /// member is given until `lag_max_ms` from now to show up.
    fn reset(in_sync: bool, leader_log_end: i64, now_ms: i64) -> Self {
        Self {
            log_end: None,
            last_caught_up_ms: if in_sync { now_ms } else { 0 },
            last_fetch_leader_log_end: leader_log_end,
            last_fetch_ms: now_ms,
            incarnation: None,
            log_start: None,
        }
    }

    /// Kafka's `ReplicaState.isCaughtUp`: at the leader's end, or caught up recently enough.
    fn is_caught_up(&self, leader_log_end: i64, now_ms: i64, lag_max_ms: i64) -> bool {
        self.log_end == Some(leader_log_end)
            || now_ms.saturating_sub(self.last_caught_up_ms) <= lag_max_ms
    }
}

/// The leader's view of one partition in one leader epoch. See the module doc.
#[derive(Debug, Clone)]
pub struct LeaderState {
    node_id: i32,
    leader_epoch: i32,
    partition_epoch: i32,
    replicas: Vec<i32>,
    /// The committed ISR (what the store holds, as far as we know).
    isr: Vec<i32>,
    /// The proposal in flight, if any.
    pending: Option<IsrProposal>,
    followers: BTreeMap<i32, Follower>,
    leader_log_end: i64,
    /// How far the leader's own log counts towards the high watermark: its log end, or
    /// less while `flush.messages` says writes must be on its disk first (see
    /// [`Self::on_leader_durable`]).
    leader_durable_end: i64,
    /// Everything below it is on the leader's disk (whatever `flush.messages` says).
    flushed_end: i64,
    high_watermark: i64,
    epoch_start_offset: i64,
    /// Kafka 4 (KIP-966) does not advance the high watermark while the committed ISR is
    /// below min.insync.replicas; 1 (the default) never holds it back.
    min_insync_replicas: i32,
}

/// The new leader's own log, as a leader epoch begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderLog {
    /// Its log end.
    pub end: i64,
    /// The high watermark it knew (as a follower, or from the epoch before).
    pub high_watermark: i64,
    /// Where this leader epoch begins (the log end when it began).
    pub epoch_start: i64,
    /// How far its own log counts towards the high watermark (see
    /// [`LeaderState::on_leader_durable`]); `i64::MAX` for all of it.
    pub durable_end: i64,
    /// Everything below it is on disk.
    pub flushed_end: i64,
}

impl LeaderState {
    /// `replicas`, `isr`, `partition_epoch`: from the store; `log`: this broker's log.
    /// An empty `isr` (state written before replication) reads as `[node_id]`.
    pub fn new(
        node_id: i32,
        leader_epoch: i32,
        partition_epoch: i32,
        replicas: Vec<i32>,
        isr: Vec<i32>,
        log: LeaderLog,
        now_ms: i64,
    ) -> Self {
        let LeaderLog {
            end: log_end,
            high_watermark,
            epoch_start: epoch_start_offset,
            durable_end,
            flushed_end,
        } = log;
        let isr = if isr.is_empty() { vec![node_id] } else { isr };
        let followers = replicas
            .iter()
            .filter(|&&r| r != node_id)
            .map(|&r| (r, Follower::reset(isr.contains(&r), log_end, now_ms)))
            .collect();
        let mut state = Self {
            node_id,
            leader_epoch,
            partition_epoch,
            replicas,
            isr,
            pending: None,
            followers,
            leader_log_end: log_end,
            leader_durable_end: durable_end,
            flushed_end,
            high_watermark: high_watermark.min(log_end),
            epoch_start_offset,
            min_insync_replicas: 1,
        };
        // Kafka's makeLeader: "we may need to increment high watermark since ISR could
        // be down to 1".
        state.maybe_increment_hw();
        state
    }

    /// Hold the high watermark back while the committed ISR is smaller than `min`, as
    /// Kafka 4's `maybeIncrementLeaderHW` does (`isUnderMinIsr`, KIP-966). Optional:
    /// without it (min 1) the high watermark follows the ISR alone, as in Kafka 3.
    pub fn set_min_insync_replicas(&mut self, min: i32) -> bool {
        self.min_insync_replicas = min.max(1);
        self.maybe_increment_hw()
    }

    /// A follower fetched at `fetch_offset` under this leader epoch while the leader's log
    /// ended at `leader_log_end` (read *before* serving the fetch, as Kafka does, so that
    /// appends racing the fetch cannot keep a follower out of the ISR). Returns whether
    /// the high watermark moved, and an ISR expansion to propose, if any.
    ///
    /// Kafka's `Partition.updateFollowerFetchState`: the fetch state first
    /// (`Replica.updateFetchStateOrThrow`), then `maybeExpandIsr`, then
    /// `maybeIncrementLeaderHW`. Call it only for a fetch that was served, i.e. not one
    /// answered with a diverging epoch (Kafka skips those too) or an error. A fetch from a
    /// broker that is not a replica, or past the leader's end, changes nothing.
    pub fn on_follower_fetch(
        &mut self,
        follower: i32,
        fetch_offset: i64,
        leader_log_end: i64,
        now_ms: i64,
    ) -> (bool, Option<IsrProposal>) {
        self.leader_log_end = self.leader_log_end.max(leader_log_end);
        if fetch_offset > leader_log_end || fetch_offset < 0 {
            return (false, None);
        }
        let Some(state) = self.followers.get_mut(&follower) else {
            return (false, None);
        };
        // Replica.updateFetchStateOrThrow.
        if fetch_offset >= leader_log_end {
            state.last_caught_up_ms = state.last_caught_up_ms.max(now_ms);
        } else if fetch_offset >= state.last_fetch_leader_log_end {
            state.last_caught_up_ms = state.last_caught_up_ms.max(state.last_fetch_ms);
        }
        state.log_end = Some(fetch_offset);
        state.last_fetch_leader_log_end = leader_log_end;
        state.last_fetch_ms = now_ms;

        let proposal = self.maybe_expand_isr(follower, fetch_offset);
        let moved = self.maybe_increment_hw();
        (moved, proposal)
    }

    /// Kafka's `maybeExpandIsr`: a replica outside the ISR joins once it has reached the
    /// high watermark and the start of this leader epoch (`isFollowerInSync`), so that it
    /// holds everything acknowledged, including what earlier leaders acknowledged.
    fn maybe_expand_isr(&mut self, follower: i32, fetch_offset: i64) -> Option<IsrProposal> {
        if self.pending.is_some() || self.isr.contains(&follower) {
            return None;
        }
        if fetch_offset < self.high_watermark || fetch_offset < self.epoch_start_offset {
            return None;
        }
        let mut isr = self.isr.clone();
        isr.push(follower);
        let admitted = self
            .followers
            .get(&follower)
            .and_then(|f| f.incarnation)
            .map(|incarnation| (follower, incarnation));
        Some(self.propose(isr, admitted.into_iter().collect()))
    }

    /// The incarnation a follower's fetch declared, before [`Self::on_follower_fetch`]
    /// counts that fetch: an ISR expansion it triggers names it.
    pub fn on_follower_incarnation(&mut self, follower: i32, incarnation: Option<i64>) {
        if let Some(state) = self.followers.get_mut(&follower) {
            state.incarnation = incarnation;
        }
    }

    /// The log start a served fetch of `follower` declared (Kafka's
    /// `Replica.updateFetchStateOrThrow` keeps it beside the log end): KIP-392 sends no
    /// consumer to a follower that no longer holds the offset it reads.
    pub fn on_follower_log_start(&mut self, follower: i32, log_start: i64) {
        if let Some(state) = self.followers.get_mut(&follower) {
            state.log_start = (log_start >= 0).then_some(log_start);
        }
    }

    /// The leader's own log end moved (an append): the high watermark may move when the
    /// ISR is the leader alone (or every follower already has more).
    pub fn on_leader_append(&mut self, leader_log_end: i64) -> bool {
        self.leader_log_end = self.leader_log_end.max(leader_log_end);
        self.maybe_increment_hw()
    }

    /// The leader's own log may count towards the high watermark only up to
    /// `durable_end`: with `flush.messages`, Kafka flushes in the append that reaches the
    /// count, before the high watermark can pass it; tern flushes off the lock, so the
    /// high watermark waits for that flush instead (a consumer never reads a record that
    /// a power loss of the leader could take back). `i64::MAX`: no such bound.
    /// `flushed_end`: everything below it is on disk, whatever the flush policy.
    pub fn on_leader_durable(&mut self, durable_end: i64, flushed_end: i64) -> bool {
        self.leader_durable_end = durable_end;
        self.flushed_end = flushed_end;
        self.maybe_increment_hw()
    }

    /// The rule for the last in-sync replica: a shrink to the leader alone is sent only
    /// once the leader's log is on disk up to its high watermark (the caller flushes
    /// first), and while it is in flight the leader's own log counts towards the high
    /// watermark only as far as it is on disk. Once the store commits it, the leader is
    /// the only replica the next election may pick (the others left the ISR), so every
    /// acknowledged write must survive a power loss of that one machine; before, each
    /// was also in a follower's page cache. Kafka does not have this rule: there the
    /// leader's power loss just after such a shrink loses acknowledged writes, which
    /// KIP-966 turns into an offline partition awaiting unclean recovery.
    fn own_end_counted(&self) -> i64 {
        let own = self.leader_log_end.min(self.leader_durable_end);
        match &self.pending {
            Some(p) if p.leaves_the_leader_alone() => own.min(self.flushed_end),
            _ => own,
        }
    }

    /// Periodic (Kafka's `maybeShrinkIsr`, run every `replica.lag.time.max.ms / 2`): an ISR
    /// shrink to propose for the members (never the leader) that have not been caught up
    /// within `lag_max_ms` (`getOutOfSyncReplicas`). Nothing while a proposal is in flight.
    pub fn tick(
        &mut self,
        now_ms: i64,
        lag_max_ms: i64,
        leader_log_end: i64,
    ) -> Option<IsrProposal> {
        self.leader_log_end = self.leader_log_end.max(leader_log_end);
        if self.pending.is_some() {
            return None;
        }
        let end = self.leader_log_end;
        let out_of_sync = |id: i32| match self.followers.get(&id) {
            Some(f) => !f.is_caught_up(end, now_ms, lag_max_ms),
            // An ISR member that is not a replica (should not happen): drop it.
            None => true,
        };
        let isr: Vec<i32> = self
            .isr
            .iter()
            .copied()
            .filter(|&id| id == self.node_id || !out_of_sync(id))
            .collect();
        if isr.len() == self.isr.len() {
            return None;
        }
        Some(self.propose(isr, BTreeMap::new()))
    }

    fn propose(&mut self, isr: Vec<i32>, incarnations: BTreeMap<i32, i64>) -> IsrProposal {
        let proposal = IsrProposal {
            isr,
            partition_epoch: self.partition_epoch,
            incarnations,
        };
        self.pending = Some(proposal.clone());
        proposal
    }

    /// The store accepted the last proposal and now holds `isr` at `partition_epoch`.
    /// The high watermark may move (a member left): compare [`Self::high_watermark`].
    /// A stale answer (a partition epoch not newer than ours) is ignored.
    pub fn proposal_committed(&mut self, isr: Vec<i32>, partition_epoch: i32) {
        // A commit is always newer than the state it was based on; an answer no newer than
        // ours is already reflected (the store's watch got here first).
        if partition_epoch <= self.partition_epoch {
            return;
        }
        self.pending = None;
        self.set_committed(isr, partition_epoch);
    }

    /// The store refused the last proposal (its partition epoch moved): the state stays
    /// as committed, and the next fetch or tick may propose again (after
    /// [`Self::update_from_store`] brought the new partition epoch). Call it only for the
    /// proposal still in flight; when answers can arrive late, use
    /// [`Self::proposal_answered`], which ignores stale ones.
    pub fn proposal_failed(&mut self) {
        self.pending = None;
        self.maybe_increment_hw();
    }

    /// The store's answer to `proposal`: `Some((isr, partition_epoch))` when it was
    /// committed, `None` when refused. An answer for anything but the proposal in flight is
    /// stale and ignored, except that a commit newer than our state is still news (Kafka's
    /// AlterPartition callback ignores a response once the partition state moved on:
    /// dropping a *newer* pending expansion early would let the HW pass the new member).
    pub fn proposal_answered(
        &mut self,
        proposal: &IsrProposal,
        committed: Option<(Vec<i32>, i32)>,
    ) {
        let current = self.pending.as_ref() == Some(proposal);
        match committed {
            Some((isr, partition_epoch)) if current || partition_epoch > self.partition_epoch => {
                self.proposal_committed(isr, partition_epoch)
            }
            None if current => self.proposal_failed(),
            _ => {}
        }
    }

    /// The store's state changed under us (the controller wrote new replicas or a
    /// smaller ISR under the same leader epoch). An older or equal partition epoch is
    /// ignored; a newer one replaces the committed state and drops the proposal in flight
    /// (its compare-and-swap can no longer succeed). New replicas start unknown, as in
    /// Kafka's `updateAssignmentAndIsr`. The high watermark may move.
    pub fn update_from_store(&mut self, replicas: Vec<i32>, isr: Vec<i32>, partition_epoch: i32) {
        if partition_epoch <= self.partition_epoch {
            return;
        }
        self.followers.retain(|id, _| replicas.contains(id));
        for &r in &replicas {
            if r != self.node_id {
                self.followers.entry(r).or_insert(Follower {
                    log_end: None,
                    last_caught_up_ms: 0,
                    last_fetch_leader_log_end: self.leader_log_end,
                    last_fetch_ms: 0,
                    incarnation: None,
                    log_start: None,
                });
            }
        }
        self.replicas = replicas;
        self.pending = None;
        self.set_committed(isr, partition_epoch);
    }

    fn set_committed(&mut self, isr: Vec<i32>, partition_epoch: i32) {
        self.isr = if isr.is_empty() {
            vec![self.node_id]
        } else {
            isr
        };
        self.partition_epoch = partition_epoch;
        self.maybe_increment_hw();
    }

    /// The committed ISR plus the member a pending expansion adds (KIP-497's maximal ISR).
    pub fn maximal_isr(&self) -> Vec<i32> {
        let mut isr = self.isr.clone();
        if let Some(pending) = &self.pending {
            for &id in &pending.isr {
                if !isr.contains(&id) {
                    isr.push(id);
                }
            }
        }
        isr
    }

    /// Kafka's `maybeIncrementLeaderHW`: the minimum log end over the leader and every
    /// maximal-ISR member, a member not yet heard from in this epoch counting as unknown
    /// (which blocks); the high watermark only ever moves forward.
    fn maybe_increment_hw(&mut self) -> bool {
        if (self.isr.len() as i64) < i64::from(self.min_insync_replicas) {
            return false;
        }
        let mut candidate = Some(self.own_end_counted());
        for id in self.maximal_isr() {
            if id == self.node_id {
                continue;
            }
            let end = self.followers.get(&id).and_then(|f| f.log_end);
            candidate = match (candidate, end) {
                (Some(c), Some(e)) => Some(c.min(e)),
                _ => None,
            };
        }
        match candidate {
            Some(hw) if hw > self.high_watermark => {
                self.high_watermark = hw;
                true
            }
            _ => false,
        }
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// The committed ISR.
    pub fn isr(&self) -> &[i32] {
        &self.isr
    }

    /// The proposal in flight, if any (its ISR).
    pub fn pending_isr(&self) -> Option<&[i32]> {
        self.pending.as_ref().map(|p| p.isr.as_slice())
    }

    pub fn replicas(&self) -> &[i32] {
        &self.replicas
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    pub fn epoch_start_offset(&self) -> i64 {
        self.epoch_start_offset
    }

    /// Before an acks=all append: Kafka's NOT_ENOUGH_REPLICAS check in
    /// `Partition.appendRecordsToLeader` (committed ISR size < min.insync.replicas).
    pub fn has_min_isr(&self, min_insync_replicas: i32) -> bool {
        self.isr.len() as i64 >= i64::from(min_insync_replicas)
    }

    /// acks=all: is the write whose **last record** is at `last_offset` acknowledged?
    /// Kafka's `checkEnoughReplicasReachOffset(requiredOffset = lastOffset + 1)`: done once
    /// the high watermark is past it, then NOT_ENOUGH_REPLICAS_AFTER_APPEND if the
    /// committed ISR is below `min_insync_replicas` at that moment.
    pub fn ack_check(&self, last_offset: i64, min_insync_replicas: i32) -> AckCheck {
        if self.high_watermark > last_offset {
            if self.has_min_isr(min_insync_replicas) {
                AckCheck::Done
            } else {
                AckCheck::NotEnoughReplicasAfterAppend
            }
        } else {
            AckCheck::Wait
        }
    }

    /// Each follower's progress (KIP-392's choice of a replica to read from).
    pub fn followers(&self) -> impl Iterator<Item = FollowerProgress> + '_ {
        self.followers.iter().map(|(&id, f)| FollowerProgress {
            id,
            log_end: f.log_end.unwrap_or(-1),
            log_start: f.log_start,
            last_caught_up_ms: f.last_caught_up_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::sim::Rng;

    fn log_at(end: i64, high_watermark: i64, epoch_start: i64) -> LeaderLog {
        LeaderLog {
            end,
            high_watermark,
            epoch_start,
            durable_end: i64::MAX,
            flushed_end: end,
        }
    }

    fn leader(isr: Vec<i32>, log_end: i64, hw: i64) -> LeaderState {
        LeaderState::new(
            1,
            5,
            10,
            vec![1, 2, 3],
            isr,
            log_at(log_end, hw, log_end),
            1_000,
        )
    }

    #[test]
    fn alone_in_isr_the_hw_follows_appends() {
        let mut s = leader(vec![1], 10, 4);
        assert_eq!(
            s.high_watermark(),
            10,
            "makeLeader increments the HW at once"
        );
        assert!(s.on_leader_append(12));
        assert_eq!(s.high_watermark(), 12);
        assert_eq!(s.ack_check(11, 1), AckCheck::Done);
        assert_eq!(s.ack_check(12, 1), AckCheck::Wait);
        assert_eq!(s.ack_check(11, 2), AckCheck::NotEnoughReplicasAfterAppend);
        assert!(!s.has_min_isr(2));
    }

    #[test]
    fn followers_unheard_in_this_epoch_hold_the_hw() {
        let mut s = leader(vec![1, 2, 3], 10, 4);
        assert_eq!(s.high_watermark(), 4);
        assert!(!s.on_leader_append(20));
        let (moved, p) = s.on_follower_fetch(2, 10, 20, 1_010);
        assert!(!moved, "3 has not fetched in this epoch");
        assert_eq!(p, None);
        let (moved, _) = s.on_follower_fetch(3, 8, 20, 1_020);
        assert!(moved);
        assert_eq!(s.high_watermark(), 8);
        assert_eq!(s.ack_check(7, 3), AckCheck::Done);
        assert_eq!(s.ack_check(8, 3), AckCheck::Wait);
        // A fetch going back (impossible for a follower) does not move the HW back.
        s.on_follower_fetch(3, 6, 20, 1_030);
        assert_eq!(s.high_watermark(), 8);
    }

    #[test]
    fn expansion_needs_hw_and_epoch_start() {
        // 3 is out of the ISR; the epoch started at 10, HW 10.
        let mut s = leader(vec![1, 2], 10, 10);
        let (_, p) = s.on_follower_fetch(3, 9, 10, 1_001);
        assert_eq!(p, None, "below the HW and the epoch start");
        let (_, p) = s.on_follower_fetch(3, 10, 12, 1_002);
        assert_eq!(
            p,
            Some(IsrProposal {
                isr: vec![1, 2, 3],
                partition_epoch: 10,
                incarnations: BTreeMap::new(),
            })
        );
        // One in flight at a time; the pending member already holds the HW back.
        assert_eq!(s.maximal_isr(), vec![1, 2, 3]);
        s.on_follower_fetch(2, 12, 12, 1_003);
        assert_eq!(s.high_watermark(), 10, "3 (pending) is at 10");
        s.proposal_committed(vec![1, 2, 3], 11);
        assert_eq!(s.isr(), &[1, 2, 3]);
        assert_eq!(s.partition_epoch(), 11);
        s.on_follower_fetch(3, 12, 12, 1_004);
        assert_eq!(s.high_watermark(), 12);
    }

    #[test]
    fn expansion_waits_for_the_epoch_start_even_above_the_hw() {
        // HW 4 (stale from the follower days), epoch start 10.
        let mut s = LeaderState::new(1, 5, 10, vec![1, 2, 3], vec![1, 2], log_at(10, 4, 10), 0);
        let (_, p) = s.on_follower_fetch(3, 7, 10, 1);
        assert_eq!(p, None);
    }

    #[test]
    fn shrink_by_last_caught_up_time() {
        let mut s = leader(vec![1, 2, 3], 10, 10);
        // 2 keeps fetching at the end, 3 never fetches.
        s.on_follower_fetch(2, 10, 10, 1_100);
        assert_eq!(
            s.tick(1_200, 500, 10),
            None,
            "3's reset grace: caught up at 1000"
        );
        s.on_follower_fetch(2, 10, 15, 1_600);
        // 2 fetched at 10 while the leader ended at 15 (not caught up now), but it had
        // caught up to the leader's end of its previous fetch (10): caught up at 1_100.
        let p = s.tick(1_599, 500, 15).expect("3 lags");
        assert_eq!(p.isr, vec![1, 2]);
        assert_eq!(p.partition_epoch, 10);
        assert_eq!(s.tick(5_000, 500, 15), None, "one proposal in flight");
        // The pending removal still counts for the HW.
        assert_eq!(s.maximal_isr(), vec![1, 2, 3]);
        s.on_follower_fetch(2, 15, 15, 1_700);
        assert_eq!(s.high_watermark(), 10);
        s.proposal_committed(vec![1, 2], 11);
        assert_eq!(s.high_watermark(), 15);
        // Now 2 stops and lags: previous fetch 15 == the leader end at that fetch.
        assert_eq!(s.tick(2_100, 500, 20), None, "caught up at 1_700");
        assert_eq!(s.tick(2_201, 500, 20).map(|p| p.isr), Some(vec![1]));
    }

    #[test]
    fn a_shrink_to_the_leader_alone_counts_only_what_is_on_disk() {
        // 1 leads with 2 in the ISR, its log on disk up to 10.
        let mut s = leader(vec![1, 2], 10, 10);
        s.on_follower_fetch(2, 10, 10, 1_100);
        s.on_leader_append(20);
        let p = s.tick(2_000, 500, 20).expect("2 lags");
        assert!(p.leaves_the_leader_alone());
        // 2 catches up while the shrink is in flight: its page cache and the leader's
        // would hold 10..20, but once the shrink commits only the leader's disk counts.
        s.on_follower_fetch(2, 20, 20, 2_010);
        assert_eq!(s.high_watermark(), 10, "10..20 is not on the leader's disk");
        // The caller flushes before sending the proposal.
        assert!(s.on_leader_durable(i64::MAX, 20));
        assert_eq!(s.high_watermark(), 20);
        s.proposal_committed(vec![1], 11);
        // Alone in the ISR by the store's word: min.insync.replicas=1 means one copy.
        s.on_leader_append(25);
        assert_eq!(s.high_watermark(), 25);
        // A shrink that leaves a follower counts the page cache as before.
        let mut s = leader(vec![1, 2, 3], 10, 10);
        s.on_follower_fetch(2, 10, 10, 1_100);
        s.on_follower_fetch(3, 10, 10, 1_100);
        s.on_leader_append(20);
        s.on_follower_fetch(2, 20, 20, 1_900);
        let p = s.tick(2_000, 500, 20).expect("3 lags");
        assert!(!p.leaves_the_leader_alone());
        s.proposal_committed(vec![1, 2], 11);
        assert_eq!(s.high_watermark(), 20);
    }

    #[test]
    fn failed_proposal_and_store_updates() {
        let mut s = leader(vec![1, 2], 10, 10);
        let (_, p) = s.on_follower_fetch(3, 10, 10, 1_001);
        assert!(p.is_some());
        s.proposal_failed();
        assert_eq!(s.pending_isr(), None);
        // The controller removed 2 (dead) meanwhile.
        s.update_from_store(vec![1, 2, 3], vec![1], 12);
        assert_eq!(s.isr(), &[1]);
        assert_eq!(s.high_watermark(), 10);
        s.on_leader_append(11);
        assert_eq!(s.high_watermark(), 11);
        // Stale store updates are ignored.
        s.update_from_store(vec![1, 2, 3], vec![1, 2, 3], 11);
        assert_eq!(s.isr(), &[1]);
        // 3 rejoins, based on the new partition epoch.
        let (_, p) = s.on_follower_fetch(3, 11, 11, 1_002);
        assert_eq!(p.map(|p| p.partition_epoch), Some(12));
        // A stale commit answer is ignored.
        s.proposal_committed(vec![1, 2, 3], 9);
        assert_eq!(s.isr(), &[1]);
    }

    #[test]
    fn min_isr_gate_holds_the_hw() {
        let mut s = leader(vec![1], 10, 10);
        s.set_min_insync_replicas(2);
        assert!(!s.on_leader_append(12));
        assert_eq!(s.high_watermark(), 10);
        assert!(s.set_min_insync_replicas(1));
        assert_eq!(s.high_watermark(), 12);
    }

    #[test]
    fn followers_report_progress() {
        let mut s = leader(vec![1, 2], 10, 10);
        s.on_follower_fetch(2, 10, 10, 1_500);
        s.on_follower_log_start(2, 4);
        s.on_follower_log_start(9, 4);
        let f: Vec<_> = s.followers().collect();
        let progress = |id, log_end, log_start, last_caught_up_ms| FollowerProgress {
            id,
            log_end,
            log_start,
            last_caught_up_ms,
        };
        assert_eq!(
            f,
            vec![progress(2, 10, Some(4), 1_500), progress(3, -1, None, 0)]
        );
    }

    /// Random schedules of fetches, appends, ticks and store answers against one
    /// LeaderState, checking its invariants after every step.
    #[test]
    fn randomized_leader_invariants() {
        for seed in 1..=300u64 {
            run_leader_schedule(seed, 2_000);
        }
    }

    fn run_leader_schedule(seed: u64, steps: usize) {
        let mut rng = Rng::new(seed);
        let replicas = vec![1, 2, 3, 4];
        let isr0: Vec<i32> = match rng.below(3) {
            0 => vec![1],
            1 => vec![1, 2],
            _ => vec![1, 2, 3],
        };
        let mut now = 1_000i64;
        let mut leader_end = rng.below(20) as i64;
        let hw0 = rng.below(leader_end as u64 + 1) as i64;
        // Followers' real log ends (they only grow here: a follower of this leader).
        let mut ends: BTreeMap<i32, i64> = replicas[1..].iter().map(|&r| (r, hw0)).collect();
        let silent = rng.below(4) == 0; // nobody fetches in this epoch
        let mut s = LeaderState::new(
            1,
            3,
            7,
            replicas.clone(),
            isr0.clone(),
            log_at(leader_end, hw0, leader_end),
            now,
        );
        let initial_hw = s.high_watermark();
        let mut store_epoch = 7;
        let mut store_isr = isr0.clone();
        let mut in_flight: Option<IsrProposal> = None;
        // What each follower had fetched in this epoch (the leader's knowledge).
        let mut known: BTreeMap<i32, i64> = BTreeMap::new();
        let mut prev_hw = s.high_watermark();
        for step in 0..steps {
            let ctx = format!("seed {seed} step {step}");
            now += rng.below(40) as i64;
            match rng.below(10) {
                0..=2 => {
                    leader_end += 1 + rng.below(3) as i64;
                    s.on_leader_append(leader_end);
                }
                3..=6 if !silent => {
                    let f = 2 + rng.below(3) as i32;
                    // The follower fetched what it had (≤ leader end), then may catch up.
                    let Some(e) = ends.get_mut(&f) else { continue };
                    let fetch = *e;
                    let (_, p) = s.on_follower_fetch(f, fetch, leader_end, now);
                    known.insert(f, fetch);
                    if rng.below(3) != 0 {
                        *e = leader_end.min(*e + rng.below(6) as i64);
                    }
                    if let Some(p) = p {
                        assert!(in_flight.is_none(), "{ctx}: two proposals in flight");
                        in_flight = Some(p);
                    }
                }
                7 => {
                    if let Some(p) = s.tick(now, 200, leader_end) {
                        assert!(in_flight.is_none(), "{ctx}: two proposals in flight");
                        assert!(p.isr.contains(&1), "{ctx}: shrink removed the leader");
                        in_flight = Some(p);
                    }
                }
                8 => {
                    if let Some(p) = in_flight.take() {
                        // The store's compare-and-swap.
                        if p.partition_epoch == store_epoch && rng.below(4) != 0 {
                            store_epoch += 1;
                            store_isr = p.isr.clone();
                            s.proposal_committed(p.isr, store_epoch);
                        } else {
                            s.proposal_failed();
                        }
                    }
                }
                _ => {
                    // The controller removes a non-leader member (dead broker).
                    if rng.below(4) == 0 && store_isr.len() > 1 && in_flight.is_none() {
                        store_isr.pop();
                        store_epoch += 1;
                        s.update_from_store(replicas.clone(), store_isr.clone(), store_epoch);
                    }
                }
            }
            let hw = s.high_watermark();
            assert!(hw >= prev_hw, "{ctx}: HW went back {prev_hw} -> {hw}");
            prev_hw = hw;
            assert!(hw <= leader_end, "{ctx}: HW past the leader's end");
            for id in s.maximal_isr() {
                if id != 1 {
                    let k = known.get(&id).copied();
                    assert!(
                        k.is_some_and(|k| hw <= k) || hw == initial_hw,
                        "{ctx}: HW {hw} past member {id}'s known end {k:?}"
                    );
                }
            }
            // Writes of this leader (below the initial HW, earlier leaders acknowledged).
            for off in [hw - 1, hw, hw + 1] {
                if off >= initial_hw && s.ack_check(off, 1) == AckCheck::Done {
                    for &id in s.isr() {
                        if id != 1 {
                            let k = known.get(&id).copied().unwrap_or(-1);
                            assert!(k > off, "{ctx}: acked {off} but member {id} has {k}");
                        }
                    }
                }
            }
            if silent && isr0.len() > 1 && store_isr.len() > 1 {
                assert_eq!(
                    hw, initial_hw,
                    "{ctx}: a leader nobody fetches from advanced"
                );
            }
        }
    }
}
