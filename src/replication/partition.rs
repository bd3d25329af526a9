//! One partition replica: its log, its durability and the wake-ups of long-polling
//! fetchers. The log sits behind a short, synchronous lock; nothing slow happens while
//! it is held: no fsync (a roll, DeleteRecords and retention leave theirs to the next
//! flush, see `log::flush::FlushPlan`), no unlink of a removed segment, no waiting.
//!
//! Every durability failure (an fsync of data, of a retired segment, of a snapshot, of
//! the log start or of the directory) takes the partition offline for writes, as Kafka
//! takes a log directory offline: Linux may have dropped the dirty pages and reports
//! the error once, so a retry could "succeed" over lost data. A failed `pwrite` or
//! block allocation (a full disk) is not such a failure: nothing was acknowledged and
//! nothing dropped, so that produce gets KAFKA_STORAGE_ERROR and the next may succeed.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;
use uuid::Uuid;

use super::follower;
use super::leader::{AckCheck, IsrProposal, LeaderState};
use crate::cluster::PartitionAssignment;
use crate::log::cleaner::TombstonePolicy;
use crate::log::cleaning::Dirtiness;
use crate::log::compaction::{self, PassError, PassOutcome, PassSettings};
use crate::log::retention::{ArchiveWork, RetentionCounts};
use crate::log::truncate::Doomed;
use crate::log::{
    AppendError, AppendInfo, ArchiveGate, CleanupPolicy, Log, LogConfig, OffsetOutOfRange,
};
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

/// How much a producer asked to be acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// acks=0 and acks=1: in the leader's log.
    Leader,
    /// acks=all: in every in-sync replica's log, with at least min.insync.replicas of them.
    All,
}

/// What a fetch found in one partition.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Whole batches, a zero-copy view of a segment; `None` at the end of what may be read.
    pub records: Option<Bytes>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
}

/// What a follower's fetch from this leader found.
#[derive(Debug, Clone)]
pub struct ReplicaRead {
    pub read: ReadResult,
    /// The follower's log diverges from ours: `(epoch, end offset)` to truncate by
    /// (Fetch v12+ `diverging_epoch`); no records then.
    pub diverging: Option<(i32, i64)>,
    pub log_end_offset: i64,
    /// An ISR change the fetch made due (an expansion), for the store.
    pub proposal: Option<IsrProposal>,
}

/// This replica's part in replicating the partition.
#[derive(Debug)]
enum Role {
    /// Neither leader nor follower (not assigned here, or no leader yet).
    Idle,
    Leader(Box<LeaderState>),
    Follower {
        leader: i32,
    },
}

#[derive(Debug)]
pub struct Partition {
    id: TopicPartition,
    topic_id: Uuid,
    node_id: i32,
    /// Lock order: `role`, then `log`. The role is held across a leader's append, so
    /// that no append lands after this replica stopped leading.
    role: Mutex<Role>,
    log: Mutex<Log>,
    /// The log end offset, published after each append for waiting replica fetches.
    log_end: watch::Sender<i64>,
    /// The high watermark: every in-sync replica has what lies below it, so consumers
    /// read only below it and acks=all waits for it to pass the write. Never goes back
    /// while this replica leads.
    high_watermark: watch::Sender<i64>,
    /// Everything below this offset is on disk.
    durable_offset: AtomicI64,
    /// Serialises flushes; waiters queue here and find their data already flushed.
    flush_lock: tokio::sync::Mutex<()>,
    /// Set after an fsync error: Linux may have dropped the pages, so we stop writing.
    failed: AtomicBool,
    min_insync_replicas: AtomicI32,
    /// The leader epoch in which this replica's current run of leadership began: a new
    /// epoch taken while already leading keeps it (the log was never truncated in
    /// between), following or idling ends the run. Written under `role`.
    leading_since_epoch: AtomicI32,
    /// `flush.messages`: see [`Self::flush_due`].
    flush_messages: AtomicI64,
    /// Tests only: where each flush records the offset it made durable.
    fsynced_record: std::sync::OnceLock<std::path::PathBuf>,
}

impl Partition {
    /// A replica on `node_id` over `log`, neither leading nor following yet;
    /// `high_watermark` is the last one checkpointed (capped at the log end).
    pub fn new(
        id: TopicPartition,
        topic_id: Uuid,
        node_id: i32,
        log: Log,
        high_watermark: i64,
        min_insync_replicas: i32,
    ) -> Self {
        let log_end_offset = log.log_end_offset();
        let (log_end, _) = watch::channel(log_end_offset);
        let hw = high_watermark.clamp(log.log_start_offset(), log_end_offset);
        let (high_watermark, _) = watch::channel(hw);
        let durable = log.recovery_point();
        let flush_messages = AtomicI64::new(log.config().flush_messages);
        Self {
            id,
            topic_id,
            node_id,
            role: Mutex::new(Role::Idle),
            log: Mutex::new(log),
            log_end,
            high_watermark,
            durable_offset: AtomicI64::new(durable),
            flush_lock: tokio::sync::Mutex::new(()),
            failed: AtomicBool::new(false),
            min_insync_replicas: AtomicI32::new(min_insync_replicas),
            leading_since_epoch: AtomicI32::new(i32::MAX),
            flush_messages,
            fsynced_record: std::sync::OnceLock::new(),
        }
    }

    pub fn id(&self) -> &TopicPartition {
        &self.id
    }
    pub fn topic_id(&self) -> Uuid {
        self.topic_id
    }
    pub fn min_insync_replicas(&self) -> i32 {
        self.min_insync_replicas.load(Ordering::Relaxed)
    }
    /// The committed in-sync replicas while this replica leads; empty otherwise.
    pub fn isr(&self) -> Vec<i32> {
        match &*self.role.lock() {
            Role::Leader(state) => state.isr().to_vec(),
            _ => Vec::new(),
        }
    }
    /// How many replicas are in sync (0 unless this replica leads).
    pub fn isr_size(&self) -> i32 {
        self.isr().len() as i32
    }
    pub fn is_leader(&self) -> bool {
        matches!(&*self.role.lock(), Role::Leader(_))
    }
    /// The broker this replica follows, if it is a follower.
    pub fn following(&self) -> Option<i32> {
        match &*self.role.lock() {
            Role::Follower { leader } => Some(*leader),
            _ => None,
        }
    }

    /// Tests only (emulated power loss): every flush from now on writes the offset it
    /// made durable to `path`.
    pub fn record_fsynced_offsets_in(&self, path: std::path::PathBuf) {
        let _ = self.fsynced_record.set(path);
    }

    pub fn set_config(&self, config: LogConfig, min_insync_replicas: i32) {
        self.flush_messages
            .store(config.flush_messages, Ordering::Relaxed);
        self.log.lock().set_config(config);
        self.min_insync_replicas
            .store(min_insync_replicas, Ordering::Relaxed);
    }

    /// Leads under `state`'s leader epoch. A new epoch starts a fresh leader state from
    /// the log end; the same epoch only takes the store's newer replicas and ISR.
    pub fn become_leader(&self, state: &PartitionAssignment, now_ms: i64) {
        let mut role = self.role.lock();
        let epoch = state.leader_epoch;
        let same_epoch =
            matches!(&*role, Role::Leader(_)) && self.log.lock().leader_epoch() == epoch;
        if same_epoch {
            if let Role::Leader(leader) = &mut *role {
                leader.update_from_store(
                    state.replicas.clone(),
                    state.in_sync(),
                    state.partition_epoch,
                );
            }
        } else {
            if !matches!(&*role, Role::Leader(_)) {
                self.leading_since_epoch.store(epoch, Ordering::Relaxed);
            }
            let log_end = {
                let mut log = self.log.lock();
                log.set_leader_epoch(epoch);
                // Kafka's makeLeader → maybeAssignEpochStartOffset: the epoch starts at
                // the log end now, not at its first batch, so that a follower whose tail
                // diverges before any write in this epoch is still told where.
                if let Err(error) = log.start_leader_epoch(epoch) {
                    tracing::warn!(partition = %self.id, epoch, %error, "could not record the leader epoch start");
                }
                log.log_end_offset()
            };
            let high_watermark = (*self.high_watermark.borrow()).min(log_end);
            tracing::debug!(partition = %self.id, epoch, log_end, high_watermark, "leading partition");
            *role = Role::Leader(Box::new(LeaderState::new(
                self.node_id,
                epoch,
                state.partition_epoch,
                state.replicas.clone(),
                state.in_sync(),
                log_end,
                high_watermark,
                log_end,
                now_ms,
            )));
        }
        if let Role::Leader(leader) = &mut *role {
            leader.on_leader_append(*self.log_end.borrow());
            self.publish_high_watermark(leader);
        }
    }

    /// Wakes every [`Self::wait_acknowledged`] to look at the role again: the high
    /// watermark watch is what they sleep on, so it is marked changed without a change.
    fn wake_acknowledgement_waiters(&self) {
        self.high_watermark.send_modify(|_| {});
    }

    /// Publishes the leader's high watermark if it moved (an ISR change or the store's
    /// update may move it without an append).
    fn publish_high_watermark(&self, leader: &LeaderState) {
        let high_watermark = leader.high_watermark();
        self.high_watermark.send_if_modified(|hw| {
            let moved = high_watermark > *hw;
            if moved {
                *hw = high_watermark;
            }
            moved
        });
    }

    /// Follows `leader` under `leader_epoch`: appends come only from its fetcher.
    pub fn become_follower(&self, leader: i32, leader_epoch: i32) {
        let mut role = self.role.lock();
        let mut log = self.log.lock();
        if !matches!(&*role, Role::Follower { leader: l } if *l == leader)
            || log.leader_epoch() != leader_epoch
        {
            tracing::debug!(partition = %self.id, leader, leader_epoch, "following partition");
        }
        log.set_leader_epoch(leader_epoch);
        self.step_down(&mut role, Role::Follower { leader });
    }

    /// Neither leads nor follows any more (the partition moved away or has no leader).
    pub fn become_idle(&self) {
        self.step_down(&mut self.role.lock(), Role::Idle);
    }

    /// Takes a non-leading role; a leader stepping down wakes its acks=all waits.
    fn step_down(&self, role: &mut Role, next: Role) {
        let was_leader = matches!(role, Role::Leader(_));
        *role = next;
        if was_leader {
            self.wake_acknowledgement_waiters();
        }
    }

    /// Validates and appends a producer's record set as the leader. acks=all is refused
    /// before anything is written when the ISR is below min.insync.replicas (Kafka's
    /// NOT_ENOUGH_REPLICAS).
    pub fn append(
        &self,
        records: &[u8],
        now_ms: i64,
        acks: Acks,
    ) -> Result<AppendInfo, PartitionError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let mut role = self.role.lock();
        let Role::Leader(leader) = &mut *role else {
            return Err(PartitionError::NotLeader(self.id.clone()));
        };
        let min = self.min_insync_replicas();
        if acks == Acks::All && !leader.has_min_isr(min) {
            return Err(PartitionError::NotEnoughReplicas {
                partition: self.id.clone(),
                isr: leader.isr().len() as i32,
                min,
            });
        }
        let (info, log_end) = {
            let mut log = self.log.lock();
            let info = log.append(records, now_ms)?;
            (info, log.log_end_offset())
        };
        self.log_end.send_replace(log_end);
        if leader.on_leader_append(log_end) {
            self.publish_high_watermark(leader);
        }
        Ok(info)
    }

    /// Whether a write ending at `last_offset` must be on this replica's disk before it
    /// counts: once `flush.messages` or more messages are unflushed, as Kafka flushes in
    /// the append that reaches the count. With 1, every write is; with the default
    /// (`i64::MAX`), none waits and `log.flush.interval.ms` bounds what a power loss
    /// takes. A follower asks it too, before fetching on: the leader learns its offset
    /// from that fetch, so the high watermark then passes only data on every in-sync
    /// replica's disk.
    pub fn flush_due(&self, last_offset: i64) -> bool {
        let every = self.flush_messages.load(Ordering::Relaxed).max(1);
        last_offset.saturating_add(1) - self.durable_offset() >= every
    }

    /// Returns once a write ending at `last_offset` is acknowledged at `acks`: for
    /// acks=all, once the high watermark has passed it (every in-sync replica has it)
    /// with at least min.insync.replicas in sync; and once it is on disk here when
    /// [`Self::flush_due`]. The caller bounds the wait (the request's timeout).
    ///
    /// This replica must have led without a break since the write's append (in
    /// `written.leader_epoch`; a later epoch taken while leading keeps its log intact):
    /// once it followed, its tail may have been truncated and rewritten, and should it
    /// lead again, a high watermark passing the same offsets would be passing someone
    /// else's data. Stepping down wakes the wait, so it fails at once with
    /// NOT_LEADER_OR_FOLLOWER (Kafka completes its delayed produces when a leader
    /// becomes a follower) instead of holding the connection's later requests until the
    /// timeout.
    pub async fn wait_acknowledged(
        &self,
        written: &AppendInfo,
        acks: Acks,
    ) -> Result<(), PartitionError> {
        let last_offset = written.last_offset;
        if acks == Acks::All {
            let mut high_watermark = self.high_watermark.subscribe();
            loop {
                let check = match &*self.role.lock() {
                    Role::Leader(leader)
                        if self.leading_since_epoch.load(Ordering::Relaxed)
                            <= written.leader_epoch =>
                    {
                        leader.ack_check(last_offset, self.min_insync_replicas())
                    }
                    _ => return Err(PartitionError::NotLeader(self.id.clone())),
                };
                match check {
                    AckCheck::Done => break,
                    AckCheck::NotEnoughReplicasAfterAppend => {
                        return Err(PartitionError::NotEnoughReplicasAfterAppend(
                            self.id.clone(),
                        ))
                    }
                    AckCheck::Wait => {
                        if high_watermark.changed().await.is_err() {
                            return Err(PartitionError::NotLeader(self.id.clone()));
                        }
                    }
                }
            }
        }
        if self.flush_due(last_offset) {
            self.wait_durable(last_offset).await?;
        }
        Ok(())
    }

    /// Appends as the leader and returns once acknowledged at `acks` (see
    /// [`Self::wait_acknowledged`]), or `TimedOut` after `timeout`: the one write path
    /// of the broker's own writers (group commits, HTTP publishes). Produce runs the
    /// same two steps, split so that its reply can wait off the connection.
    pub async fn write(
        &self,
        records: &[u8],
        now_ms: i64,
        acks: Acks,
        timeout: std::time::Duration,
    ) -> Result<AppendInfo, PartitionError> {
        let info = self.append(records, now_ms, acks)?;
        match tokio::time::timeout(timeout, self.wait_acknowledged(&info, acks)).await {
            Ok(outcome) => outcome.map(|()| info),
            Err(_) => Err(PartitionError::TimedOut(self.id.clone())),
        }
    }

    /// A follower appends what its leader sent, unchanged, and learns the leader's
    /// high watermark.
    pub fn append_replicated(
        &self,
        records: &[u8],
        leader_high_watermark: i64,
    ) -> Result<Option<AppendInfo>, PartitionError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let role = self.role.lock();
        if !matches!(&*role, Role::Follower { .. }) {
            return Err(PartitionError::NotFollower(self.id.clone()));
        }
        let (info, log_end) = {
            let mut log = self.log.lock();
            let info = if records.is_empty() {
                None
            } else {
                Some(log.append_replicated(records)?)
            };
            (info, log.log_end_offset())
        };
        self.log_end.send_replace(log_end);
        let high_watermark = leader_high_watermark.min(log_end);
        self.high_watermark.send_if_modified(|hw| {
            let moved = high_watermark > *hw;
            if moved {
                *hw = high_watermark;
            }
            moved
        });
        Ok(info)
    }

    /// A follower drops its divergent tail from `offset` on (the leader's answer to its
    /// last fetched epoch). Removed segments are unlinked after the lock is released.
    pub async fn truncate_to(&self, offset: i64) -> Result<(), PartitionError> {
        self.rewind(|log| log.truncate_to(offset)).await?;
        tracing::info!(partition = %self.id, offset, "truncated divergent log tail");
        Ok(())
    }

    /// A follower whose log ends below its leader's log start starts over at `offset`.
    pub async fn reset_to(&self, offset: i64) -> Result<(), PartitionError> {
        self.rewind(|log| log.reset_to(offset)).await?;
        tracing::info!(partition = %self.id, offset, "log reset to the leader's log start");
        Ok(())
    }

    /// Cuts a follower's log with `cut`, then brings what is published about it (log
    /// end, high watermark, durable offset) back inside the log's new bounds.
    async fn rewind(
        &self,
        cut: impl FnOnce(&mut Log) -> Result<Doomed, AppendError>,
    ) -> Result<(), PartitionError> {
        let doomed = {
            let role = self.role.lock();
            if !matches!(&*role, Role::Follower { .. }) {
                return Err(PartitionError::NotFollower(self.id.clone()));
            }
            let mut log = self.log.lock();
            let doomed = cut(&mut log)?;
            let (start, end) = (log.log_start_offset(), log.log_end_offset());
            self.log_end.send_replace(end);
            self.high_watermark.send_if_modified(|hw| {
                let bounded = (*hw).clamp(start, end);
                let moved = bounded != *hw;
                *hw = bounded;
                moved
            });
            let durable = self
                .durable_offset
                .load(Ordering::Acquire)
                .clamp(start, end);
            self.durable_offset.store(durable, Ordering::Release);
            doomed
        };
        self.discard(doomed).await
    }

    async fn discard(&self, doomed: Doomed) -> Result<(), PartitionError> {
        let id = self.id.clone();
        let _ = tokio::task::spawn_blocking(move || delete_segments(&id, doomed)).await;
        self.flush().await
    }

    /// What a follower's fetch sends: `(fetch offset, last fetched epoch)`.
    pub fn fetch_position(&self) -> (i64, Option<i32>) {
        let log = self.log.lock();
        (log.log_end_offset(), log.latest_epoch())
    }

    /// Our own `(epoch, end offset)` for `epoch` (OffsetForLeaderEpoch, truncation).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        self.log.lock().end_offset_for_epoch(epoch)
    }

    /// Where a follower should truncate to after its leader said it diverges at
    /// `diverging`.
    pub fn truncation_point(&self, diverging: (i32, i64)) -> follower::TruncationDecision {
        let log = self.log.lock();
        follower::truncation_offset(
            diverging,
            log.end_offset_for_epoch(diverging.0),
            log.log_end_offset(),
        )
    }

    /// Serves a follower's fetch as the leader: checks the follower's leader epoch
    /// and its last fetched epoch (divergence), reads up to the log end, and records
    /// the follower's progress, which may advance the high watermark.
    #[allow(clippy::too_many_arguments)]
    pub fn read_for_follower(
        &self,
        follower: i32,
        fetch_offset: i64,
        current_leader_epoch: i32,
        last_fetched_epoch: Option<i32>,
        max_bytes: u64,
        now_ms: i64,
    ) -> Result<ReplicaRead, PartitionError> {
        let mut role = self.role.lock();
        let Role::Leader(leader) = &mut *role else {
            return Err(PartitionError::NotLeader(self.id.clone()));
        };
        let log = self.log.lock();
        self.check_epoch(log.leader_epoch(), current_leader_epoch)?;
        let log_end = log.log_end_offset();
        let log_start = log.log_start_offset();
        if fetch_offset < log_start || fetch_offset > log_end {
            return Err(OffsetOutOfRange {
                offset: fetch_offset,
                log_start,
                log_end,
            }
            .into());
        }
        let validation = match last_fetched_epoch.filter(|&epoch| epoch >= 0) {
            Some(epoch) => follower::validate_follower_fetch(
                fetch_offset,
                epoch,
                log.end_offset_for_epoch(epoch),
            ),
            None => follower::FetchValidation::Consistent,
        };
        let diverging = match validation {
            follower::FetchValidation::Consistent => None,
            follower::FetchValidation::Diverging { epoch, end_offset } => Some((epoch, end_offset)),
            follower::FetchValidation::OffsetOutOfRange => {
                return Err(OffsetOutOfRange {
                    offset: fetch_offset,
                    log_start,
                    log_end,
                }
                .into())
            }
        };
        if let Some(diverging) = diverging {
            return Ok(ReplicaRead {
                read: ReadResult {
                    records: None,
                    high_watermark: leader.high_watermark(),
                    log_start_offset: log_start,
                },
                diverging: Some(diverging),
                log_end_offset: log_end,
                proposal: None,
            });
        }
        let records = log.read(fetch_offset, max_bytes, true)?;
        drop(log);
        let (moved, proposal) = leader.on_follower_fetch(follower, fetch_offset, log_end, now_ms);
        if moved {
            self.publish_high_watermark(leader);
        }
        Ok(ReplicaRead {
            read: ReadResult {
                records,
                high_watermark: leader.high_watermark(),
                log_start_offset: log_start,
            },
            diverging: None,
            log_end_offset: log_end,
            proposal,
        })
    }

    fn check_epoch(&self, current: i32, requested: i32) -> Result<(), PartitionError> {
        if requested < 0 || requested == current {
            Ok(())
        } else if requested < current {
            Err(PartitionError::FencedLeaderEpoch {
                partition: self.id.clone(),
                requested,
                current,
            })
        } else {
            Err(PartitionError::UnknownLeaderEpoch {
                partition: self.id.clone(),
                requested,
                current,
            })
        }
    }

    /// Periodic ISR maintenance as leader: a shrink to propose for followers that
    /// have not caught up within `lag_max_ms`.
    pub fn maintain_isr(&self, now_ms: i64, lag_max_ms: i64) -> Option<IsrProposal> {
        let mut role = self.role.lock();
        let Role::Leader(leader) = &mut *role else {
            return None;
        };
        leader.tick(now_ms, lag_max_ms, *self.log_end.borrow())
    }

    /// The store's answer to `proposal`: `Some(state)` committed, `None` refused.
    pub fn isr_outcome(&self, proposal: &IsrProposal, committed: Option<&PartitionAssignment>) {
        let mut role = self.role.lock();
        let Role::Leader(leader) = &mut *role else {
            return;
        };
        leader.proposal_answered(
            proposal,
            committed.map(|state| (state.in_sync(), state.partition_epoch)),
        );
        self.publish_high_watermark(leader);
    }

    /// `(follower, fetch offset, last caught-up time)` of each follower while leading.
    pub fn follower_progress(&self) -> Vec<(i32, i64, i64)> {
        match &*self.role.lock() {
            Role::Leader(leader) => leader.followers().collect(),
            _ => Vec::new(),
        }
    }

    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    /// Returns once every offset up to and including `offset` is on disk. Concurrent
    /// callers share flushes: whoever holds the flush lock writes everything appended
    /// so far, and the others find their offsets covered (group commit).
    pub async fn wait_durable(&self, offset: i64) -> Result<(), PartitionError> {
        if self.durable_offset.load(Ordering::Acquire) > offset {
            return Ok(());
        }
        let _turn = self.flush_lock.lock().await;
        if self.durable_offset.load(Ordering::Acquire) > offset {
            return Ok(());
        }
        self.flush_in_turn().await
    }

    /// Writes everything appended so far to disk, off the log lock and off the runtime.
    pub async fn flush(&self) -> Result<(), PartitionError> {
        let _turn = self.flush_lock.lock().await;
        self.flush_in_turn().await
    }

    /// One flush plan at a time: two plans carrying the same deferred snapshot or log
    /// start would write the same files at once.
    async fn flush_in_turn(&self) -> Result<(), PartitionError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let plan = self.log.lock().flush_plan();
        let up_to = plan.up_to_offset();
        let outcome = tokio::task::spawn_blocking(move || plan.run().map(|()| plan)).await;
        match outcome {
            Ok(Ok(plan)) => {
                let mut log = self.log.lock();
                // A plan made before a truncation covers offsets that no longer exist:
                // only the log's own recovery point says what is durable then.
                let durable = if log.mark_flushed(&plan) {
                    up_to
                } else {
                    log.recovery_point()
                };
                let durable = self
                    .durable_offset
                    .fetch_max(durable, Ordering::AcqRel)
                    .max(durable);
                drop(log);
                if let Some(path) = self.fsynced_record.get() {
                    if let Err(error) = std::fs::write(path, durable.to_string()) {
                        tracing::warn!(partition = %self.id, %error, "test: cannot record the fsynced offset");
                    }
                }
                Ok(())
            }
            Ok(Err(error)) => {
                tracing::error!(partition = %self.id, %error, "flush failed; partition taken offline");
                self.failed.store(true, Ordering::Release);
                Err(PartitionError::StorageFailed(self.id.clone()))
            }
            Err(join_error) => {
                tracing::error!(partition = %self.id, %join_error, "flush task failed; partition taken offline");
                self.failed.store(true, Ordering::Release);
                Err(PartitionError::StorageFailed(self.id.clone()))
            }
        }
    }

    pub fn durable_offset(&self) -> i64 {
        self.durable_offset.load(Ordering::Acquire)
    }

    /// What the recovery checkpoint may record for this partition (see
    /// `Log::checkpoint_offset`).
    pub fn checkpoint_offset(&self) -> i64 {
        self.log
            .lock()
            .checkpoint_offset()
            .min(self.durable_offset())
    }

    /// Whether an fsync failed, so the partition takes no writes.
    pub fn is_offline(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    pub fn unflushed_bytes(&self) -> u64 {
        self.log.lock().unflushed_bytes()
    }

    /// What a consumer may read: whole batches below the high watermark.
    pub fn read(
        &self,
        offset: i64,
        max_bytes: u64,
        min_one: bool,
    ) -> Result<ReadResult, PartitionError> {
        let high_watermark = self.high_watermark();
        let log = self.log.lock();
        let records = log.read_below(offset, max_bytes, min_one, high_watermark)?;
        Ok(ReadResult {
            records,
            high_watermark,
            log_start_offset: log.log_start_offset(),
        })
    }

    /// Whole batches up to the log end, past the high watermark: for the broker's own
    /// replay of a partition it now leads (the group coordinator's load).
    pub fn read_to_log_end(
        &self,
        offset: i64,
        max_bytes: u64,
        min_one: bool,
    ) -> Result<ReadResult, PartitionError> {
        let high_watermark = self.high_watermark();
        let log = self.log.lock();
        let records = log.read(offset, max_bytes, min_one)?;
        Ok(ReadResult {
            records,
            high_watermark,
            log_start_offset: log.log_start_offset(),
        })
    }

    /// A consumer's read here: as [`Self::read`], but a follower answers an offset past
    /// its log end (the consumer's position came from the leader, which is ahead) with
    /// no records rather than OFFSET_OUT_OF_RANGE, which would reset the consumer.
    pub fn read_for_consumer(
        &self,
        offset: i64,
        max_bytes: u64,
        min_one: bool,
    ) -> Result<ReadResult, PartitionError> {
        match self.read(offset, max_bytes, min_one) {
            Err(PartitionError::OutOfRange(range))
                if offset > range.log_end && self.following().is_some() =>
            {
                Ok(ReadResult {
                    records: None,
                    high_watermark: self.high_watermark(),
                    log_start_offset: range.log_start,
                })
            }
            other => other,
        }
    }

    /// `(log start, high watermark, log end)`.
    pub fn offsets(&self) -> (i64, i64, i64) {
        let high_watermark = self.high_watermark();
        let log = self.log.lock();
        (
            log.log_start_offset(),
            high_watermark.min(log.log_end_offset()),
            log.log_end_offset(),
        )
    }

    pub fn leader_epoch(&self) -> i32 {
        self.log.lock().leader_epoch()
    }

    pub fn offset_for_timestamp(&self, timestamp: i64) -> Option<(i64, i64)> {
        self.log.lock().offset_for_timestamp(timestamp)
    }

    /// See `Log::legacy_offset_points` (ListOffsets v0).
    pub fn legacy_offset_points(&self, now_ms: i64) -> Vec<(i64, i64)> {
        self.log.lock().legacy_offset_points(now_ms)
    }

    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        self.log.lock().max_timestamp()
    }

    /// Moves the log start to `offset`, which must lie within `[log start, high
    /// watermark]`, and returns once the new log start is on disk. The lock is held
    /// only to move it in memory; removed segments are unlinked and the log start
    /// written after it is released.
    pub async fn delete_records_before(&self, offset: i64) -> Result<i64, PartitionError> {
        if self.is_offline() {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let (log_start, doomed) = {
            let mut log = self.log.lock();
            let (log_start, log_end) = (log.log_start_offset(), log.log_end_offset());
            if offset < 0 || offset > log_end {
                return Err(OffsetOutOfRange {
                    offset,
                    log_start,
                    log_end,
                }
                .into());
            }
            log.delete_records_before(offset)?
        };
        let id = self.id.clone();
        let _ = tokio::task::spawn_blocking(move || delete_segments(&id, doomed)).await;
        self.flush().await?;
        Ok(log_start)
    }

    /// Removes segments past retention (see [`Log::apply_retention`]). Blocking
    /// (file deletion): call it off the async runtime.
    pub fn apply_retention(&self, now_ms: i64, disk_low: bool) -> std::io::Result<RetentionCounts> {
        let retention = self.log.lock().apply_retention(now_ms, disk_low)?;
        let counts = retention.counts();
        retention.doomed.delete()?;
        Ok(counts)
    }

    /// The expired, committed section the archive has yet to take, given that it holds
    /// everything below `archived_below`.
    pub fn archive_work(&self, now_ms: i64, archived_below: i64) -> Option<ArchiveWork> {
        let upper = self.high_watermark();
        self.log.lock().archive_work(now_ms, archived_below, upper)
    }

    pub fn set_archive_gate(&self, gate: ArchiveGate) {
        self.log.lock().set_archive_gate(gate);
    }

    pub fn archive_gate(&self) -> ArchiveGate {
        self.log.lock().archive_gate()
    }

    /// Whether the topic archives, and whether a failed export lets retention go on.
    pub fn archive_settings(&self) -> (bool, bool) {
        let log = self.log.lock();
        (log.config().archive, log.config().archive_failure_deletes)
    }

    /// The log's `cleanup.policy`.
    pub fn cleanup_policy(&self) -> CleanupPolicy {
        self.log.lock().config().cleanup
    }

    /// How dirty this replica's log is (`None` unless compacted); cleaned only below
    /// the high watermark, which no leader change can truncate.
    pub fn dirtiness(&self, now_ms: i64) -> Option<Dirtiness> {
        let upper = self.high_watermark();
        self.log.lock().dirtiness(upper, now_ms)
    }

    /// One cleaning pass if one is due: the job is taken and installed under the log
    /// lock, briefly; the reading, rewriting and syncing in between run without it,
    /// so produce and fetch go on. Blocking: call it on the blocking pool.
    pub fn clean(
        &self,
        dedupe_buffer_bytes: u64,
        io_max_bytes_per_second: Option<f64>,
        now_ms: i64,
    ) -> Result<Option<PassOutcome>, PassError> {
        let upper = self.high_watermark();
        let Some(job) = self.log.lock().cleaning_job(upper, now_ms) else {
            return Ok(None);
        };
        let settings = PassSettings {
            dedupe_buffer_bytes,
            io_max_bytes_per_second,
            tombstones: TombstonePolicy {
                now_ms,
                delete_retention_ms: job.delete_retention_ms,
            },
        };
        let outcome = compaction::run_pass(&job, &settings)?;
        let (_, emptied) = self.log.lock().install_cleaned(&job, &outcome)?;
        emptied.delete()?;
        Ok(Some(outcome))
    }

    pub fn size_bytes(&self) -> u64 {
        self.log.lock().size_bytes()
    }

    /// `(bytes, segments)` of the log, read under one lock.
    pub fn size_and_segments(&self) -> (u64, usize) {
        let log = self.log.lock();
        (log.size_bytes(), log.segment_count())
    }

    /// A receiver that changes whenever the log end moves (replica fetches wait on it).
    pub fn watch_log_end(&self) -> watch::Receiver<i64> {
        self.log_end.subscribe()
    }

    /// A receiver that changes whenever the high watermark moves (consumers wait on it).
    pub fn watch_high_watermark(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// Flushes and seals the log for a clean restart.
    pub fn close(&self) -> std::io::Result<()> {
        self.log.lock().close()
    }
}

/// Unlinks removed segments. A failure leaves stray files, not lost data: it is logged,
/// and the next start deletes segments that lie below the log start.
fn delete_segments(id: &TopicPartition, doomed: Doomed) {
    if let Err(error) = doomed.delete() {
        tracing::warn!(partition = %id, %error, "could not delete removed segment files");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::testing::simple_batch;
    use crate::log::OpenMode;

    fn partition_in(dir: &std::path::Path) -> std::io::Result<Partition> {
        let config = LogConfig {
            segment_bytes: 1024,
            index_bytes: 1024,
            index_interval_bytes: 128,
            ..LogConfig::default()
        };
        let mode = OpenMode {
            clean: false,
            recovery_point: 0,
        };
        let log = Log::open(dir, config, mode)?;
        let partition = Partition::new(TopicPartition::new("t", 0), Uuid::nil(), 0, log, 0, 1);
        partition.become_leader(&led_by_0(0, vec![0]), 0);
        Ok(partition)
    }

    /// Node 0 leads in `epoch` over replicas 0 and 1, with `isr` in sync.
    fn led_by_0(leader_epoch: i32, isr: Vec<i32>) -> PartitionAssignment {
        PartitionAssignment {
            leader: 0,
            replicas: vec![0, 1],
            leader_epoch,
            isr,
            partition_epoch: leader_epoch,
            target: Vec::new(),
            leader_incarnation: 0,
            pinned: false,
            unclean_requested: false,
        }
    }

    #[tokio::test]
    async fn an_acks_all_wait_fails_at_once_when_the_leader_steps_down(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let partition = std::sync::Arc::new(partition_in(dir.path())?);
        partition.become_leader(&led_by_0(1, vec![0, 1]), 0);
        let written = partition.append(&simple_batch(2, 0), 0, Acks::All)?;
        let waiting = {
            let partition = std::sync::Arc::clone(&partition);
            tokio::spawn(async move { partition.wait_acknowledged(&written, Acks::All).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "node 1 has not fetched the write");
        partition.become_follower(1, 2);
        // Bounded far below any produce timeout: the wait must not sleep until one.
        let outcome = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await??;
        assert!(
            matches!(outcome, Err(PartitionError::NotLeader(_))),
            "{outcome:?}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_write_from_an_earlier_leadership_is_never_acknowledged_by_a_later_one(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let partition = partition_in(dir.path())?;
        partition.become_leader(&led_by_0(1, vec![0, 1]), 0);
        let old = partition.append(&simple_batch(2, 0), 0, Acks::All)?;
        partition.become_follower(1, 2);
        // Leading again with node 1 out of the ISR: the high watermark passes `old`'s
        // offsets at once, but in epoch 3 those offsets may hold another write.
        partition.become_leader(&led_by_0(3, vec![0]), 0);
        assert!(partition.high_watermark() > old.last_offset);
        assert!(matches!(
            partition.wait_acknowledged(&old, Acks::All).await,
            Err(PartitionError::NotLeader(_))
        ));
        let new = partition.append(&simple_batch(2, 1), 0, Acks::All)?;
        assert_eq!(new.leader_epoch, 3);
        partition.wait_acknowledged(&new, Acks::All).await?;
        Ok(())
    }

    #[tokio::test]
    async fn a_new_epoch_taken_while_leading_still_acknowledges_earlier_writes(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let partition = partition_in(dir.path())?;
        partition.become_leader(&led_by_0(1, vec![0, 1]), 0);
        let written = partition.append(&simple_batch(2, 0), 0, Acks::All)?;
        // A reassignment's end bumps the leader epoch with the same leader, and here drops
        // node 1 from the ISR: nothing was truncated, so the write counts once committed.
        partition.become_leader(&led_by_0(2, vec![0]), 0);
        partition.wait_acknowledged(&written, Acks::All).await?;
        Ok(())
    }

    #[tokio::test]
    async fn a_failed_sync_of_a_rolls_deferred_work_takes_the_partition_offline(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let log_dir = dir.path().join("t-0");
        let partition = partition_in(&log_dir)?;
        let mut last = 0;
        for i in 0..20 {
            last = partition
                .append(&simple_batch(2, i), 0, Acks::Leader)?
                .last_offset;
        }
        partition.wait_durable(last).await?;
        assert!(!partition.is_offline());
        // Roll again, then take the directory away: the roll's snapshot cannot be written.
        let (_, segments) = partition.size_and_segments();
        while partition.size_and_segments().1 == segments {
            last = partition
                .append(&simple_batch(2, 0), 0, Acks::Leader)?
                .last_offset;
        }
        std::fs::remove_dir_all(&log_dir)?;
        assert!(matches!(
            partition.wait_durable(last).await,
            Err(PartitionError::StorageFailed(_))
        ));
        assert!(partition.is_offline());
        assert!(
            partition.durable_offset() <= last,
            "nothing reported durable"
        );
        assert!(matches!(
            partition.append(&simple_batch(1, 0), 0, Acks::Leader),
            Err(PartitionError::StorageFailed(_))
        ));
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_flushes_across_rolls_never_fail() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = tempfile::tempdir()?;
        let partition = std::sync::Arc::new(partition_in(dir.path())?);
        let flusher = {
            let partition = std::sync::Arc::clone(&partition);
            tokio::spawn(async move {
                for _ in 0..300 {
                    partition.flush().await?;
                }
                Ok::<_, PartitionError>(())
            })
        };
        for i in 0..300 {
            let info = partition.append(&simple_batch(2, i), 0, Acks::Leader)?;
            partition.wait_durable(info.last_offset).await?;
        }
        flusher.await??;
        assert!(!partition.is_offline());
        assert!(partition.size_and_segments().1 > 10, "it rolled often");
        Ok(())
    }

    #[tokio::test]
    async fn delete_records_returns_once_the_log_start_is_on_disk(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let partition = partition_in(dir.path())?;
        for i in 0..20 {
            partition.append(&simple_batch(2, i), 0, Acks::Leader)?;
        }
        assert_eq!(partition.delete_records_before(11).await?, 11);
        let stored = std::fs::read_to_string(dir.path().join("log-start-offset"))?;
        assert_eq!(stored.trim(), "11");
        assert!(partition.delete_records_before(99).await.is_err());
        Ok(())
    }
}
