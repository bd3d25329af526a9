//! One partition replica's decisions, as a state machine over its log: which role it
//! plays (leader, follower, idle) for which state of the store, what a leader accepts and
//! when it acknowledges, how it serves a follower's fetch, and what a follower does with
//! its leader's answer (append, truncate, start over). No clock, no network, no locks:
//! callers pass `now_ms` and the facts they observed, and carry out what comes back
//! (publishing offsets, waking waiters, unlinking removed files, proposing ISR changes).
//!
//! `Partition` wraps it around the real `Log`; `sim` drives it around an in-memory log
//! that a simulated power loss cuts back to what was flushed. Both run this code: the
//! simulator checks the decisions that run in production, not a model of them.
//!
//! ```text
//!            apply_assignment (leader = me, elected for this run)
//!   Idle ───────────────────────────────────────────────────────▶ Leader(epoch)
//!    ▲  ◀── apply_assignment (not placed here / no leader) ──────  │  │
//!    │                                                              │  │ a newer epoch
//!    │    apply_assignment (leader = another)                       │  ▼ keeps leading
//!    └──────────────────────────────────────────▶ Follower(leader) ◀┘
//! ```
//!
//! **Only the run of leadership that appended a write acknowledges it**: a write carries
//! the epoch of its append, and is acknowledged only while this replica has led without a
//! break since (`leading_since`). A replica that followed meanwhile may have truncated and
//! rewritten its tail; a high watermark passing the same offsets later would be passing
//! another leader's data.
//!
//! **Durability of an acknowledged write.** The high watermark is the minimum log end of
//! the leader and every member of the maximal ISR (committed plus pending), and does not
//! advance while the committed ISR is below `min.insync.replicas` (then acks=all answers
//! NOT_ENOUGH_REPLICAS_AFTER_APPEND). With the default `flush.messages` (`i64::MAX`) an
//! acknowledged write is in every such replica's page cache and `log.flush.interval.ms`
//! bounds what a power loss takes; with `flush.messages=1` the leader counts only what it
//! has fsynced and followers fsync before fetching on (a tail written as leader too), so
//! it is on every in-sync replica's disk. A shrink to the leader alone is sent after a
//! flush, and in flight the leader counts only its flushed log.

use bytes::Bytes;

use super::follower::{self, FetchValidation};
use super::leader::{AckCheck, FollowerProgress, IsrProposal, LeaderLog, LeaderState};
use crate::cluster::PartitionAssignment;
use crate::log::txn::TxnMarker;
use crate::log::{AppendError, AppendInfo, OffsetOutOfRange};
use crate::model::{BrokerId, Isolation, LeaderEpoch, Offset};

/// What the leader's ISR maintenance asks its driver (`alter::maintain`, the simulator)
/// to do with a proposal.
#[derive(Debug)]
pub enum IsrStep {
    /// Send it to the store.
    Propose(IsrProposal),
    /// Flush the log, report the flush (`on_flushed`), and only then send it: it leaves
    /// the leader the only in-sync replica, whose disk must then hold every acknowledged
    /// write (`LeaderState::own_end_counted`). A failed flush sends nothing.
    FlushThenPropose(IsrProposal),
}

/// The storage a replica's decisions act on: the partition's `Log`, or the simulator's
/// in-memory log. Offsets and epochs as the log keeps them; `Removed` is what a cut takes
/// out, to be disposed of after the caller's lock is released.
pub trait ReplicaLog {
    type Removed: Default;

    fn log_start(&self) -> Offset;
    fn log_end(&self) -> Offset;
    /// The epoch stamped on batches appended from now on.
    fn leader_epoch(&self) -> LeaderEpoch;
    fn set_leader_epoch(&mut self, epoch: LeaderEpoch);
    /// Becoming leader in `epoch`: the epoch cache records that it starts at the log end
    /// now, before any batch (Kafka's `maybeAssignEpochStartOffset`).
    fn start_leader_epoch(&mut self, epoch: LeaderEpoch) -> Result<(), AppendError>;
    /// The epoch of the newest batch (or the newest started epoch).
    fn latest_epoch(&self) -> Option<LeaderEpoch>;
    /// Kafka's `LeaderEpochFileCache.endOffsetFor`; `(UNDEFINED, UNDEFINED)` when it
    /// cannot answer.
    fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> (LeaderEpoch, Offset);
    /// A leader's append of a producer's record set.
    fn append(&mut self, records: &[u8], now_ms: i64) -> Result<AppendInfo, AppendError>;
    /// A leader's append of a transaction marker.
    fn append_marker(&mut self, marker: &TxnMarker, now_ms: i64)
        -> Result<AppendInfo, AppendError>;
    /// The start of the oldest transaction still unstable at `high_watermark`.
    fn first_unstable_offset(&self, high_watermark: Offset) -> Option<Offset>;
    /// Forgets transactions whose marker is below `high_watermark`.
    fn forget_replicated_txns(&mut self, high_watermark: Offset);
    /// A follower's append of its leader's batches, unchanged.
    fn append_replicated(&mut self, records: &[u8]) -> Result<AppendInfo, AppendError>;
    fn truncate_to(&mut self, offset: Offset) -> Result<Self::Removed, AppendError>;
    fn reset_to(&mut self, offset: Offset) -> Result<Self::Removed, AppendError>;
    /// Raises the log start to `offset` (DeleteRecords, or a follower following its
    /// leader's log start); nothing below the current log start.
    fn raise_log_start(&mut self, offset: Offset) -> Result<Self::Removed, AppendError>;
    /// Everything below this offset is on disk.
    fn durable_end(&self) -> Offset;
    /// `flush.messages`: how many records may be unflushed when a write counts.
    fn flush_messages(&self) -> i64;
    /// Whole batches from the one holding `offset`, whose base is below `upper`.
    fn read(
        &self,
        offset: Offset,
        max_bytes: u64,
        min_one: bool,
        upper: Offset,
    ) -> Result<Option<Bytes>, OffsetOutOfRange>;
}

/// How much a producer asked to be acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// acks=0 and acks=1: in the leader's log.
    Leader,
    /// acks=all: in every in-sync replica's log, with at least min.insync.replicas of them.
    All,
}

/// Why a replica refused an operation; `Partition` names the partition in its errors.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error(transparent)]
    Append(#[from] AppendError),
    #[error(transparent)]
    OutOfRange(#[from] OffsetOutOfRange),
    #[error("not the leader")]
    NotLeader,
    #[error("not a follower")]
    NotFollower,
    #[error("leader epoch {requested} is older than the current {current}")]
    FencedLeaderEpoch {
        requested: LeaderEpoch,
        current: LeaderEpoch,
    },
    #[error("leader epoch {requested} is newer than the current {current}")]
    UnknownLeaderEpoch {
        requested: LeaderEpoch,
        current: LeaderEpoch,
    },
    #[error("{isr} in-sync replicas, below min.insync.replicas {min}")]
    NotEnoughReplicas { isr: i32, min: i32 },
}

/// Where an acknowledgement stands (see [`ReplicaState::acknowledgement`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acknowledgement {
    /// Acknowledged (durability aside: `flush.messages` is the caller's).
    Done,
    /// The high watermark has not passed it yet.
    Wait,
    /// This replica stopped leading since the append: NOT_LEADER_OR_FOLLOWER.
    NotLeader,
    /// The high watermark passed it but the ISR is below min.insync.replicas.
    NotEnoughReplicasAfterAppend,
}

/// What the role a new store state gives this replica turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assigned {
    /// Leads in a new epoch (`true`) or goes on leading in the same one (`false`).
    Leader {
        new_epoch: bool,
    },
    Follower {
        leader: BrokerId,
    },
    Idle,
    /// Named leader by a state elected for a previous run of this broker, which may have
    /// held data this run lost: idles until the controller elects again.
    IdleElectedForAnotherRun,
}

/// What a follower's fetch found at its leader.
#[derive(Debug, Clone)]
pub struct ServedFetch {
    pub records: Option<Bytes>,
    pub high_watermark: Offset,
    pub log_start: Offset,
    pub log_end: Offset,
    /// The follower's log diverges: `(epoch, end offset)` to truncate by (Fetch v12+
    /// `diverging_epoch`); no records then.
    pub diverging: Option<(LeaderEpoch, Offset)>,
}

/// The leader's answer to a follower's fetch, as the follower applies it.
#[derive(Debug, Clone, Copy)]
pub enum FetchAnswer<'a> {
    /// Batches (possibly none) at the follower's position, with the leader's high
    /// watermark and log start.
    Records {
        records: &'a [u8],
        high_watermark: Offset,
        log_start: Offset,
    },
    /// The follower's tail from some point is not the leader's.
    Diverging {
        epoch: LeaderEpoch,
        end_offset: Offset,
    },
    /// OFFSET_OUT_OF_RANGE, with the leader's high watermark (`UNDEFINED` if unknown)
    /// and log start.
    OutOfRange {
        high_watermark: Offset,
        log_start: Offset,
    },
}

/// What applying a fetch answer did.
#[derive(Debug, Default)]
pub struct FetchApplied<R> {
    /// Batches appended.
    pub appended: Option<AppendInfo>,
    /// What a truncation, reset or log start raise took out.
    pub removed: Option<R>,
    /// The next fetch asks something else (append, truncation, reset): no backoff.
    pub progressed: bool,
    /// The answer came for a position this replica has left: ignored.
    pub stale: bool,
}

/// A follower's next fetch: where, in which leader epoch, with which last epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchPosition {
    pub fetch_offset: Offset,
    pub last_fetched_epoch: Option<LeaderEpoch>,
    pub current_leader_epoch: LeaderEpoch,
    pub log_start: Offset,
}

#[derive(Debug)]
enum Role {
    Idle,
    Leader(Box<LeaderState>),
    Follower { leader: BrokerId },
}

/// One replica of one partition: its role and its log. See the module doc.
#[derive(Debug)]
pub struct ReplicaState<L> {
    node: BrokerId,
    role: Role,
    log: L,
    /// The high watermark this replica serves below: the leader's while it leads, what
    /// the leader last said (capped at the log end) while it follows. Never goes back
    /// while leading.
    high_watermark: Offset,
    /// The leader epoch in which this replica's current run of leadership began: a new
    /// epoch taken while already leading keeps it (the log was never truncated in
    /// between); following or idling ends the run (`LeaderEpoch(i32::MAX)`).
    leading_since: LeaderEpoch,
    min_insync_replicas: i32,
}

const NOT_LEADING: LeaderEpoch = LeaderEpoch(i32::MAX);

impl<L: ReplicaLog> ReplicaState<L> {
    /// A replica on `node` over `log`, neither leading nor following yet; `high_watermark`
    /// is the last one checkpointed (capped to the log).
    pub fn new(node: BrokerId, log: L, high_watermark: Offset, min_insync_replicas: i32) -> Self {
        let high_watermark = high_watermark.clamp(log.log_start(), log.log_end());
        Self {
            node,
            role: Role::Idle,
            log,
            high_watermark,
            leading_since: NOT_LEADING,
            min_insync_replicas,
        }
    }

    pub fn log(&self) -> &L {
        &self.log
    }
    /// The log, for what is not replication's business (flushes, retention, cleaning):
    /// none of it may move the log end or the epochs.
    pub fn log_mut(&mut self) -> &mut L {
        &mut self.log
    }
    pub fn into_log(self) -> L {
        self.log
    }

    pub fn high_watermark(&self) -> Offset {
        match &self.role {
            Role::Leader(leader) => Offset(leader.high_watermark()),
            _ => self.high_watermark,
        }
    }
    pub fn min_insync_replicas(&self) -> i32 {
        self.min_insync_replicas
    }
    pub fn set_min_insync_replicas(&mut self, min: i32) {
        self.min_insync_replicas = min;
    }
    pub fn is_leader(&self) -> bool {
        matches!(self.role, Role::Leader(_))
    }
    /// The broker this replica follows, if it is a follower.
    pub fn following(&self) -> Option<BrokerId> {
        match self.role {
            Role::Follower { leader } => Some(leader),
            _ => None,
        }
    }
    /// The committed ISR while leading; empty otherwise.
    pub fn isr(&self) -> Vec<i32> {
        match &self.role {
            Role::Leader(leader) => leader.isr().to_vec(),
            _ => Vec::new(),
        }
    }
    /// Each follower's progress while leading.
    pub fn follower_progress(&self) -> Vec<FollowerProgress> {
        match &self.role {
            Role::Leader(leader) => leader.followers().collect(),
            _ => Vec::new(),
        }
    }

    /// Takes the role `state` (the store's, for this partition, which places a replica
    /// here) gives this replica. `incarnation` is this process's in the cluster (`None`
    /// without one): it leads only a state stamped with it. Returns what it became and
    /// whether a leadership ended (acks=all waits must look again).
    pub fn apply_assignment(
        &mut self,
        state: &PartitionAssignment,
        incarnation: Option<i64>,
        now_ms: i64,
    ) -> (Assigned, bool) {
        let leader = BrokerId(state.leader);
        if leader == self.node {
            if incarnation.is_none_or(|i| i == state.leader_incarnation) {
                let new_epoch = self.become_leader(state, now_ms);
                (Assigned::Leader { new_epoch }, false)
            } else {
                (
                    Assigned::IdleElectedForAnotherRun,
                    self.step_down(Role::Idle),
                )
            }
        } else if leader.is_some() {
            self.log.set_leader_epoch(LeaderEpoch(state.leader_epoch));
            let ended = self.step_down(Role::Follower { leader });
            (Assigned::Follower { leader }, ended)
        } else {
            (Assigned::Idle, self.step_down(Role::Idle))
        }
    }

    /// Neither leads nor follows any more (the partition moved away). Returns whether a
    /// leadership ended.
    pub fn become_idle(&mut self) -> bool {
        self.step_down(Role::Idle)
    }

    /// Leads under `state`'s leader epoch. A new epoch starts a fresh leader state from
    /// the log end; the same epoch only takes the store's newer replicas and ISR.
    /// Returns whether the epoch is new.
    fn become_leader(&mut self, state: &PartitionAssignment, now_ms: i64) -> bool {
        let epoch = LeaderEpoch(state.leader_epoch);
        if let Role::Leader(leader) = &mut self.role {
            if self.log.leader_epoch() == epoch {
                leader.update_from_store(
                    state.replicas.clone(),
                    state.in_sync(),
                    state.partition_epoch,
                );
                return false;
            }
        } else {
            self.leading_since = epoch;
        }
        self.log.set_leader_epoch(epoch);
        if let Err(error) = self.log.start_leader_epoch(epoch) {
            tracing::warn!(%epoch, %error, "could not record the leader epoch start");
        }
        let log_end = self.log.log_end();
        // The high watermark served so far: a new epoch taken while leading keeps it.
        let high_watermark = self.high_watermark().min(log_end);
        let mut leader = LeaderState::new(
            self.node.0,
            epoch.0,
            state.partition_epoch,
            state.replicas.clone(),
            state.in_sync(),
            LeaderLog {
                end: log_end.0,
                high_watermark: high_watermark.0,
                epoch_start: log_end.0,
                durable_end: self.durable_cap().0,
                flushed_end: self.log.durable_end().0,
            },
            now_ms,
        );
        leader.on_leader_append(log_end.0);
        self.role = Role::Leader(Box::new(leader));
        true
    }

    /// How far the leader's own log counts towards the high watermark: at most
    /// `flush.messages - 1` records past what is on disk, as Kafka's append flushes once
    /// the unflushed count reaches `flush.messages` (so with 1, only what is on disk).
    fn durable_cap(&self) -> Offset {
        match self.log.flush_messages() {
            i64::MAX => Offset(i64::MAX),
            every => self.log.durable_end() + (every.max(1) - 1),
        }
    }

    /// A flush ran: the leader's own log may now count further (see
    /// [`Self::durable_cap`]).
    pub fn on_flushed(&mut self) {
        let (cap, flushed) = (self.durable_cap(), self.log.durable_end());
        if let Role::Leader(leader) = &mut self.role {
            leader.on_leader_durable(cap.0, flushed.0);
        }
    }

    /// Takes a non-leading role, keeping what the leader's high watermark reached.
    fn step_down(&mut self, next: Role) -> bool {
        let was_leader = matches!(self.role, Role::Leader(_));
        self.high_watermark = self.high_watermark();
        self.role = next;
        self.leading_since = NOT_LEADING;
        was_leader
    }

    /// Validates and appends a producer's record set as the leader. Refused unless this
    /// replica leads and `may_lead` (its cluster session is good for leading); acks=all
    /// is refused before anything is written when the ISR is below min.insync.replicas
    /// (Kafka's NOT_ENOUGH_REPLICAS).
    pub fn append(
        &mut self,
        records: &[u8],
        now_ms: i64,
        acks: Acks,
        may_lead: bool,
    ) -> Result<AppendInfo, ReplicaError> {
        self.append_as_leader(acks, may_lead, |log| log.append(records, now_ms))
    }

    /// Appends a transaction marker as the leader, on the terms of an acks=all append:
    /// a marker counts only once every in-sync replica has it.
    pub fn append_marker(
        &mut self,
        marker: &TxnMarker,
        now_ms: i64,
        may_lead: bool,
    ) -> Result<AppendInfo, ReplicaError> {
        self.append_as_leader(Acks::All, may_lead, |log| log.append_marker(marker, now_ms))
    }

    fn append_as_leader(
        &mut self,
        acks: Acks,
        may_lead: bool,
        write: impl FnOnce(&mut L) -> Result<AppendInfo, AppendError>,
    ) -> Result<AppendInfo, ReplicaError> {
        let high_watermark = self.high_watermark();
        let Role::Leader(leader) = &mut self.role else {
            return Err(ReplicaError::NotLeader);
        };
        if !may_lead {
            return Err(ReplicaError::NotLeader);
        }
        let min = self.min_insync_replicas;
        if acks == Acks::All && !leader.has_min_isr(min) {
            return Err(ReplicaError::NotEnoughReplicas {
                isr: leader.isr().len() as i32,
                min,
            });
        }
        self.log.forget_replicated_txns(high_watermark);
        let info = write(&mut self.log)?;
        leader.on_leader_append(self.log.log_end().0);
        Ok(info)
    }

    /// The last stable offset: read_committed consumers read below it. The high
    /// watermark, or the start of the oldest transaction not yet stable if lower; never
    /// below the log start (Kafka's `updateFirstUnstableOffset`).
    pub fn last_stable_offset(&self) -> Offset {
        let high_watermark = self.high_watermark();
        let unstable = self.log.first_unstable_offset(high_watermark);
        unstable
            .map_or(high_watermark, |first| first.min(high_watermark))
            .max(self.log.log_start())
    }

    /// Where the acknowledgement of `written` stands at `acks` (see the module doc for
    /// the epoch rule). acks=1 is done once appended.
    pub fn acknowledgement(&self, written: &AppendInfo, acks: Acks) -> Acknowledgement {
        if acks == Acks::Leader {
            return Acknowledgement::Done;
        }
        match &self.role {
            Role::Leader(leader) if self.leading_since <= LeaderEpoch(written.leader_epoch) => {
                match leader.ack_check(written.last_offset, self.min_insync_replicas) {
                    AckCheck::Done => Acknowledgement::Done,
                    AckCheck::Wait => Acknowledgement::Wait,
                    AckCheck::NotEnoughReplicasAfterAppend => {
                        Acknowledgement::NotEnoughReplicasAfterAppend
                    }
                }
            }
            _ => Acknowledgement::NotLeader,
        }
    }

    /// Serves a follower's fetch as the leader: checks the follower's leader epoch and
    /// its last fetched epoch (divergence), reads up to the log end, and records the
    /// follower's progress, which may advance the high watermark and make an ISR
    /// expansion due (returned, for the store).
    ///
    /// The checks run in Kafka's order (`Partition.readRecords`): below the log start is
    /// out of range; then divergence; only then past the log end. A follower ahead of a
    /// new leader is almost always one holding a tail the new leader never had: it must
    /// be told where the logs part, not OFFSET_OUT_OF_RANGE, which would send it to the
    /// leader's high watermark — and a new leader's high watermark lags what the old one
    /// committed, so that cut could take acknowledged writes out of an in-sync replica.
    pub fn serve_follower(
        &mut self,
        follower: BrokerId,
        position: &FetchPosition,
        max_bytes: u64,
        now_ms: i64,
    ) -> Result<(ServedFetch, Option<IsrProposal>), ReplicaError> {
        let Role::Leader(leader) = &mut self.role else {
            return Err(ReplicaError::NotLeader);
        };
        let FetchPosition {
            fetch_offset,
            current_leader_epoch,
            last_fetched_epoch,
            log_start: follower_log_start,
        } = *position;
        check_epoch(self.log.leader_epoch(), current_leader_epoch)?;
        let (log_start, log_end) = (self.log.log_start(), self.log.log_end());
        let out_of_range = || OffsetOutOfRange {
            offset: fetch_offset.0,
            log_start: log_start.0,
            log_end: log_end.0,
        };
        if fetch_offset < log_start {
            return Err(out_of_range().into());
        }
        let validation = match last_fetched_epoch.filter(|e| e.is_defined()) {
            Some(epoch) => {
                let (end_epoch, end_offset) = self.log.end_offset_for_epoch(epoch);
                follower::validate_follower_fetch(
                    fetch_offset.0,
                    epoch.0,
                    (end_epoch.0, end_offset.0),
                )
            }
            None => FetchValidation::Consistent,
        };
        let mut served = ServedFetch {
            records: None,
            high_watermark: Offset(leader.high_watermark()),
            log_start,
            log_end,
            diverging: None,
        };
        match validation {
            FetchValidation::Consistent => {}
            FetchValidation::Diverging { epoch, end_offset } => {
                served.diverging = Some((LeaderEpoch(epoch), Offset(end_offset)));
                return Ok((served, None));
            }
            FetchValidation::OffsetOutOfRange => return Err(out_of_range().into()),
        }
        if fetch_offset > log_end {
            return Err(out_of_range().into());
        }
        served.records = self.log.read(fetch_offset, max_bytes, true, log_end)?;
        let (_, proposal) = leader.on_follower_fetch(follower.0, fetch_offset.0, log_end.0, now_ms);
        leader.on_follower_log_start(follower.0, follower_log_start.0);
        served.high_watermark = Offset(leader.high_watermark());
        Ok((served, proposal))
    }

    /// The incarnation a follower's fetch declares (Fetch v15+ `replica_epoch`), told to
    /// the leader before [`Self::serve_follower`] serves that fetch.
    pub fn note_follower_incarnation(&mut self, follower: BrokerId, incarnation: Option<i64>) {
        if let Role::Leader(leader) = &mut self.role {
            leader.on_follower_incarnation(follower.0, incarnation);
        }
    }

    /// A follower's fetch offset tells its leader that the records below it count for
    /// the high watermark, so with `flush.messages` they must be on disk as far as
    /// [`Self::durable_cap`] says. Fetched records are flushed as they are appended, but
    /// a leader that stepped down before its own flush ran holds a tail that is not: its
    /// driver flushes ([`Self::on_flushed`]) before it sends the next fetch. (Kafka
    /// flushes inside the append, so there a former leader's tail is already on disk.)
    pub fn must_flush_before_fetch(&self) -> bool {
        self.following().is_some() && self.log.log_end() > self.durable_cap()
    }

    /// What a follower's next fetch asks.
    pub fn fetch_position(&self) -> FetchPosition {
        FetchPosition {
            fetch_offset: self.log.log_end(),
            last_fetched_epoch: self.log.latest_epoch(),
            current_leader_epoch: self.log.leader_epoch(),
            log_start: self.log.log_start(),
        }
    }

    /// A follower applies `leader`'s answer to the fetch it sent from `asked` (what
    /// [`Self::fetch_position`] said then): appends the batches and learns the high
    /// watermark and log start (Kafka's `processPartitionData`,
    /// `maybeIncrementLogStartOffset`), truncates a divergent tail
    /// (`follower::truncation_offset`), or, told its position is out of range, keeps only
    /// what the leader committed (when ahead of it: an unclean election) or starts over at
    /// the leader's log start (when behind it).
    ///
    /// An answer is applied only while this replica still follows `leader` from the
    /// position it asked at (Kafka's `AbstractFetcherThread.processFetchRequest`: "we only
    /// want to process the fetch response if ... the current offset is the same as the
    /// offset requested"). A late answer is stale: a leader that was deposed meanwhile
    /// may send a tail no one committed, or a divergence point computed against a log
    /// this replica has since replaced with a newer leader's, whose truncation would cut
    /// data that leader already counted as replicated here.
    pub fn apply_fetch_answer(
        &mut self,
        leader: BrokerId,
        asked: &FetchPosition,
        answer: FetchAnswer<'_>,
    ) -> Result<FetchApplied<L::Removed>, ReplicaError> {
        if !matches!(self.role, Role::Follower { .. }) {
            return Err(ReplicaError::NotFollower);
        }
        let before = self.fetch_position();
        let mut applied = FetchApplied::default();
        if self.following() != Some(leader) || before != *asked {
            applied.stale = true;
            return Ok(applied);
        }
        match answer {
            FetchAnswer::Records {
                records,
                high_watermark,
                log_start,
            } => {
                if !records.is_empty() {
                    let info = self.log.append_replicated(records)?;
                    if info.last_offset >= info.base_offset {
                        applied.appended = Some(info);
                    }
                }
                let log_end = self.log.log_end();
                self.high_watermark = self.high_watermark.max(high_watermark.min(log_end));
                self.log.forget_replicated_txns(self.high_watermark);
                // The leader's log start moved (DeleteRecords, retention): follow it, as
                // far as this log and the high watermark reach, so that a failover does
                // not bring deleted records back.
                let raise_to = log_start.min(self.high_watermark);
                if raise_to > self.log.log_start() {
                    applied.removed = Some(self.log.raise_log_start(raise_to)?);
                }
            }
            FetchAnswer::Diverging { epoch, end_offset } => {
                let (local_epoch, local_end) = self.log.end_offset_for_epoch(epoch);
                let decision = follower::truncation_offset(
                    (epoch.0, end_offset.0),
                    (local_epoch.0, local_end.0),
                    self.log.log_end().0,
                );
                let to = Offset(decision.offset(self.high_watermark.0));
                applied.removed = Some(self.cut(|log| log.truncate_to(to))?);
            }
            FetchAnswer::OutOfRange {
                high_watermark,
                log_start,
            } => {
                if before.fetch_offset < log_start {
                    // Everything here is below the leader's log start (Kafka's
                    // `truncateFullyAndStartAt` when the leader's start passed our end).
                    applied.removed =
                        Some(self.cut(|log| log.reset_to(log_start.max(Offset::ZERO)))?);
                } else if high_watermark >= Offset::ZERO && before.fetch_offset > high_watermark {
                    // Ahead of the leader with no divergence it could name (an unclean
                    // election, or a log without epochs): keep what it committed.
                    applied.removed = Some(self.cut(|log| log.truncate_to(high_watermark))?);
                }
            }
        }
        applied.progressed = applied.appended.is_some() || self.fetch_position() != before;
        Ok(applied)
    }

    /// Cuts a follower's log with `cut`, keeping the high watermark inside it.
    fn cut(
        &mut self,
        cut: impl FnOnce(&mut L) -> Result<L::Removed, AppendError>,
    ) -> Result<L::Removed, ReplicaError> {
        let removed = cut(&mut self.log)?;
        self.high_watermark = self
            .high_watermark
            .clamp(self.log.log_start(), self.log.log_end());
        Ok(removed)
    }

    /// Periodic ISR maintenance as leader: a shrink to propose for followers that have
    /// not caught up within `lag_max_ms`.
    pub fn maintain_isr(&mut self, now_ms: i64, lag_max_ms: i64) -> Option<IsrStep> {
        let log_end = self.log.log_end();
        let proposal = match &mut self.role {
            Role::Leader(leader) => leader.tick(now_ms, lag_max_ms, log_end.0)?,
            _ => return None,
        };
        Some(if proposal.leaves_the_leader_alone() {
            IsrStep::FlushThenPropose(proposal)
        } else {
            IsrStep::Propose(proposal)
        })
    }

    /// The store's answer to `proposal`: `Some(state)` committed, `None` refused.
    pub fn isr_outcome(&mut self, proposal: &IsrProposal, committed: Option<(Vec<i32>, i32)>) {
        if let Role::Leader(leader) = &mut self.role {
            leader.proposal_answered(proposal, committed);
        }
    }

    /// What a consumer may read: whole batches below the high watermark, or for
    /// read_committed below the last stable offset.
    pub fn read(
        &self,
        offset: Offset,
        max_bytes: u64,
        min_one: bool,
        isolation: Isolation,
    ) -> Result<Option<Bytes>, OffsetOutOfRange> {
        let upper = match isolation {
            Isolation::ReadUncommitted => self.high_watermark(),
            Isolation::ReadCommitted => self.last_stable_offset(),
        };
        self.log.read(offset, max_bytes, min_one, upper)
    }

    /// Moves the log start to `offset` (DeleteRecords), which must lie within the log.
    pub fn delete_records_before(&mut self, offset: Offset) -> Result<L::Removed, ReplicaError> {
        let (log_start, log_end) = (self.log.log_start(), self.log.log_end());
        if offset < Offset::ZERO || offset > log_end {
            return Err(OffsetOutOfRange {
                offset: offset.0,
                log_start: log_start.0,
                log_end: log_end.0,
            }
            .into());
        }
        let removed = self.log.raise_log_start(offset)?;
        self.high_watermark = self.high_watermark.max(self.log.log_start());
        Ok(removed)
    }
}

/// A follower's fetch names the leader epoch it believes current (KIP-320): an older one
/// is fenced, a newer one is not known here yet; none (`< 0`) is not checked.
fn check_epoch(current: LeaderEpoch, requested: LeaderEpoch) -> Result<(), ReplicaError> {
    if !requested.is_defined() || requested == current {
        Ok(())
    } else if requested < current {
        Err(ReplicaError::FencedLeaderEpoch { requested, current })
    } else {
        Err(ReplicaError::UnknownLeaderEpoch { requested, current })
    }
}
