//! One partition replica as the broker runs it: its [`ReplicaState`] (role and log, the
//! decisions) behind one short, synchronous lock, and around it what is not a decision:
//! the `watch`es that wake waiting fetches and acknowledgements, durability (group-commit
//! flushes off the lock), and the disposal of removed files. Nothing slow happens while
//! the lock is held: no fsync (a roll, DeleteRecords and retention leave theirs to the
//! next flush, see `log::flush::FlushPlan`), no unlink of a removed segment, no waiting.
//!
//! Every durability failure (an fsync of data, of a retired segment, of a snapshot, of
//! the log start or of the directory) takes the partition offline for writes, as Kafka
//! takes a log directory offline: Linux may have dropped the dirty pages and reports
//! the error once, so a retry could "succeed" over lost data. A failed `pwrite` or
//! block allocation (a full disk) is not such a failure: nothing was acknowledged and
//! nothing dropped, so that produce gets KAFKA_STORAGE_ERROR and the next may succeed.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;
use uuid::Uuid;

pub use super::error::PartitionError;
use super::follower;
use super::leader::{FollowerProgress, IsrProposal};
pub use super::lease::LeaderLease;
pub use super::replica::Acks;
use super::replica::{
    Acknowledgement, Assigned, FetchAnswer, FetchPosition, IsrStep, ReplicaState,
};
use crate::cluster::PartitionAssignment;
use crate::log::cleaner::TombstonePolicy;
use crate::log::cleaning::Dirtiness;
use crate::log::compaction::{self, PassError, PassOutcome, PassSettings};
use crate::log::producer_state::SequenceError;
use crate::log::retention::{ArchiveWork, RetentionCounts};
use crate::log::truncate::Doomed;
use crate::log::txn::{AbortedTxn, TxnMarker};
use crate::log::AppendError;
use crate::log::{AppendInfo, ArchiveGate, CleanupPolicy, Log, LogConfig};
use crate::model::{BrokerId, Isolation, LeaderEpoch, Offset, PartitionOffsets, TopicPartition};

/// What a fetch found in one partition.
#[derive(Debug, Clone)]
pub struct ReadResult {
    /// Whole batches, a zero-copy view of a segment; `None` at the end of what may be read.
    pub records: Option<Bytes>,
    pub high_watermark: Offset,
    pub last_stable_offset: Offset,
    pub log_start_offset: Offset,
    /// For read_committed: the aborted transactions with data in the records returned.
    pub aborted: Vec<AbortedTxn>,
}

/// Who sent a replica fetch: the follower's broker id and, when it said (Fetch v15+
/// `replica_epoch`), the incarnation of its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProcess {
    pub id: i32,
    pub incarnation: Option<i64>,
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

#[derive(Debug)]
pub struct Partition {
    id: TopicPartition,
    topic_id: Uuid,
    /// The replica's decisions and its log, under one short lock.
    state: Mutex<ReplicaState<Log>>,
    /// The log end offset, published after each change for waiting replica fetches.
    log_end: watch::Sender<i64>,
    /// The high watermark, published after each change: consumers wait on it, and so do
    /// acks=all writes (a step down marks it changed to wake them).
    high_watermark: watch::Sender<i64>,
    /// Everything below this offset is on disk.
    durable_offset: AtomicI64,
    /// Serialises flushes; waiters queue here and find their data already flushed.
    flush_lock: tokio::sync::Mutex<()>,
    /// Set after an fsync error: Linux may have dropped the pages, so we stop writing.
    failed: AtomicBool,
    /// `flush.messages`: see [`Self::flush_due`].
    flush_messages: AtomicI64,
    /// `flush.ms`: see [`Self::flush_wait`].
    flush_ms: AtomicI64,
    /// When the last flush finished (or the replica opened).
    last_flush: Mutex<std::time::Instant>,
    lease: LeaderLease,
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
        lease: LeaderLease,
    ) -> Self {
        let durable = log.recovery_point().0;
        let flush_messages = AtomicI64::new(log.config().flush_messages);
        let flush_ms = AtomicI64::new(log.config().flush_ms);
        let state = ReplicaState::new(
            BrokerId(node_id),
            log,
            Offset(high_watermark),
            min_insync_replicas,
        );
        let (log_end, _) = watch::channel(state.log().log_end_offset().0);
        let (high_watermark, _) = watch::channel(state.high_watermark().0);
        Self {
            id,
            topic_id,
            state: Mutex::new(state),
            log_end,
            high_watermark,
            durable_offset: AtomicI64::new(durable),
            flush_lock: tokio::sync::Mutex::new(()),
            failed: AtomicBool::new(false),
            flush_messages,
            flush_ms,
            last_flush: Mutex::new(std::time::Instant::now()),
            lease,
        }
    }

    pub fn id(&self) -> &TopicPartition {
        &self.id
    }
    pub fn topic_id(&self) -> Uuid {
        self.topic_id
    }
    pub fn min_insync_replicas(&self) -> i32 {
        self.state.lock().min_insync_replicas()
    }
    /// The committed in-sync replicas while this replica leads; empty otherwise.
    pub fn isr(&self) -> Vec<BrokerId> {
        self.state.lock().isr().into_iter().map(BrokerId).collect()
    }
    /// How many replicas are in sync (0 unless this replica leads).
    pub fn isr_size(&self) -> i32 {
        self.isr().len() as i32
    }
    pub fn is_leader(&self) -> bool {
        self.state.lock().is_leader()
    }
    /// The broker this replica follows, if it is a follower.
    pub fn following(&self) -> Option<BrokerId> {
        self.state.lock().following()
    }

    pub fn set_config(&self, config: LogConfig, min_insync_replicas: i32) {
        self.flush_messages
            .store(config.flush_messages, Ordering::Relaxed);
        self.flush_ms.store(config.flush_ms, Ordering::Relaxed);
        let mut state = self.state.lock();
        state.log_mut().set_config(config);
        state.set_min_insync_replicas(min_insync_replicas);
        // A changed flush.messages moves how far the leader's own log counts.
        state.on_flushed();
        self.publish(&state);
    }

    /// Publishes what changed under the lock: the log end for replica fetches, the high
    /// watermark for consumers and acknowledgements.
    fn publish(&self, state: &ReplicaState<Log>) {
        let log_end = state.log().log_end_offset().0;
        self.log_end.send_if_modified(|end| {
            let moved = *end != log_end;
            *end = log_end;
            moved
        });
        let high_watermark = state.high_watermark().0;
        self.high_watermark.send_if_modified(|hw| {
            let moved = *hw != high_watermark;
            *hw = high_watermark;
            moved
        });
    }

    /// Wakes every [`Self::wait_acknowledged`] to look at the role again: the high
    /// watermark watch is what they sleep on, so it is marked changed without a change.
    fn wake_acknowledgement_waiters(&self) {
        self.high_watermark.send_modify(|_| {});
    }

    /// Takes the role the store's `state` gives this replica (see
    /// `ReplicaState::apply_assignment`); `incarnation` is this process's in a cluster.
    pub fn apply_assignment(
        &self,
        state: &PartitionAssignment,
        incarnation: Option<i64>,
        now_ms: i64,
    ) -> Assigned {
        let mut replica = self.state.lock();
        let was = replica.following();
        let (assigned, leadership_ended) = replica.apply_assignment(state, incarnation, now_ms);
        self.publish(&replica);
        drop(replica);
        if leadership_ended {
            self.wake_acknowledgement_waiters();
        }
        match assigned {
            Assigned::Leader { new_epoch: true } => {
                tracing::debug!(partition = %self.id, epoch = state.leader_epoch, "leading partition");
            }
            Assigned::Follower { leader } if was != Some(leader) => {
                tracing::debug!(partition = %self.id, %leader, epoch = state.leader_epoch, "following partition");
            }
            Assigned::IdleElectedForAnotherRun => {
                tracing::info!(partition = %self.id, "elected for a previous run of this broker: waiting for the controller");
            }
            _ => {}
        }
        assigned
    }

    /// Neither leads nor follows any more (the partition moved away or has no leader).
    pub fn become_idle(&self) {
        let ended = self.state.lock().become_idle();
        if ended {
            self.wake_acknowledgement_waiters();
        }
    }

    /// Validates and appends a producer's record set as the leader, while this broker's
    /// lease lets it lead (see `ReplicaState::append`): the one append path of Produce,
    /// the HTTP API and the group coordinator.
    pub fn append(
        &self,
        records: &[u8],
        now_ms: i64,
        acks: Acks,
    ) -> Result<AppendInfo, PartitionError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let mut state = self.state.lock();
        let info = state
            .append(records, now_ms, acks, self.lease.may_lead())
            .map_err(|e| PartitionError::of(&self.id, e))?;
        self.publish(&state);
        Ok(info)
    }

    /// Whether producer `producer_id` has a transaction open on this partition.
    pub fn has_open_transaction(&self, producer_id: i64) -> bool {
        self.state
            .lock()
            .log()
            .producer_state()
            .has_open_transaction(producer_id)
    }

    /// Takes a KIP-890 verification guard for the producer, before asking its
    /// transaction coordinator whether this partition is in its transaction.
    pub fn begin_verification(&self, producer_id: i64) -> u64 {
        self.state.lock().log_mut().begin_verification(producer_id)
    }

    /// [`Self::append`] of a transactional write verified with the coordinator under
    /// guard `token`: refused (INVALID_TXN_STATE) when a marker for the producer came
    /// in between, since the transaction the coordinator confirmed has ended.
    pub fn append_verified(
        &self,
        records: &[u8],
        now_ms: i64,
        acks: Acks,
        (producer_id, token): (i64, u64),
    ) -> Result<AppendInfo, PartitionError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let mut state = self.state.lock();
        if !state
            .log()
            .producer_state()
            .verification_holds(producer_id, token)
        {
            return Err(PartitionError::Append(AppendError::Sequence(
                SequenceError::NotInTransaction { producer_id },
            )));
        }
        let info = state
            .append(records, now_ms, acks, self.lease.may_lead())
            .map_err(|e| PartitionError::of(&self.id, e))?;
        self.publish(&state);
        Ok(info)
    }

    /// Appends a transaction marker as the leader (see `ReplicaState::append_marker`).
    pub fn append_marker(
        &self,
        marker: &TxnMarker,
        now_ms: i64,
    ) -> Result<AppendInfo, PartitionError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let mut state = self.state.lock();
        let info = state
            .append_marker(marker, now_ms, self.lease.may_lead())
            .map_err(|e| PartitionError::of(&self.id, e))?;
        self.publish(&state);
        Ok(info)
    }

    /// Appends a marker and returns once every in-sync replica has it, or `TimedOut`.
    pub async fn write_marker(
        &self,
        marker: &TxnMarker,
        now_ms: i64,
        timeout: std::time::Duration,
    ) -> Result<AppendInfo, PartitionError> {
        let info = self.append_marker(marker, now_ms)?;
        match tokio::time::timeout(timeout, self.wait_acknowledged(&info, Acks::All)).await {
            Ok(outcome) => outcome.map(|()| info),
            Err(_) => Err(PartitionError::TimedOut(self.id.clone())),
        }
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

    /// Returns once a write ending at `written.last_offset` is acknowledged at `acks`:
    /// for acks=all, once the high watermark has passed it (every in-sync replica has it)
    /// with at least min.insync.replicas in sync, by this run of leadership (see
    /// `ReplicaState::acknowledgement`); and once it is on disk here when
    /// [`Self::flush_due`]. The caller bounds the wait (the request's timeout). Stepping
    /// down wakes the wait, so it fails at once with NOT_LEADER_OR_FOLLOWER (Kafka
    /// completes its delayed produces when a leader becomes a follower) instead of
    /// holding the connection's later requests until the timeout.
    pub async fn wait_acknowledged(
        &self,
        written: &AppendInfo,
        acks: Acks,
    ) -> Result<(), PartitionError> {
        // With `flush.messages`, on this replica's disk first: the high watermark does not
        // pass a write the leader has yet to flush (`ReplicaState::durable_cap`).
        if self.flush_due(written.last_offset) {
            self.wait_durable(written.last_offset).await?;
        }
        let mut high_watermark = self.high_watermark.subscribe();
        loop {
            match self.state.lock().acknowledgement(written, acks) {
                Acknowledgement::Done => break,
                Acknowledgement::NotLeader => {
                    return Err(PartitionError::NotLeader(self.id.clone()))
                }
                Acknowledgement::NotEnoughReplicasAfterAppend => {
                    return Err(PartitionError::NotEnoughReplicasAfterAppend(
                        self.id.clone(),
                    ))
                }
                Acknowledgement::Wait => {}
            }
            if high_watermark.changed().await.is_err() {
                return Err(PartitionError::NotLeader(self.id.clone()));
            }
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

    /// What a follower's next fetch asks.
    pub fn fetch_position(&self) -> FetchPosition {
        self.state.lock().fetch_position()
    }

    /// What a follower's next fetch asks, after the flush that
    /// `ReplicaState::must_flush_before_fetch` asks for (a tail written while leading).
    pub async fn fetch_position_on_disk(&self) -> Result<FetchPosition, PartitionError> {
        {
            // One lock on the common path: nothing to flush.
            let state = self.state.lock();
            if !state.must_flush_before_fetch() {
                return Ok(state.fetch_position());
            }
        }
        self.flush().await?;
        Ok(self.fetch_position())
    }

    /// A follower applies its leader's answer (see `ReplicaState::apply_fetch_answer`):
    /// files a cut removed are unlinked after the lock is released and the cut is
    /// flushed, appended batches are flushed first when `flush.messages` says so (before
    /// the next fetch tells the leader this replica has them). Returns whether the next
    /// fetch asks something else.
    pub async fn apply_fetch_answer(
        &self,
        leader: i32,
        asked: &FetchPosition,
        answer: FetchAnswer<'_>,
    ) -> Result<bool, PartitionError> {
        if self.failed.load(Ordering::Acquire) {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let before = *asked;
        let applied = {
            let mut state = self.state.lock();
            let applied = state
                .apply_fetch_answer(BrokerId(leader), asked, answer)
                .map_err(|e| PartitionError::of(&self.id, e))?;
            if applied.removed.is_some() {
                // What was durable may have been cut: bring it inside the log.
                let log = state.log();
                let durable = self
                    .durable_offset
                    .load(Ordering::Acquire)
                    .clamp(log.log_start_offset().0, log.log_end_offset().0);
                self.durable_offset.store(durable, Ordering::Release);
            }
            self.publish(&state);
            applied
        };
        if let Some(removed) = applied.removed {
            let after = self.fetch_position();
            if after.fetch_offset < before.fetch_offset {
                tracing::info!(partition = %self.id, from = %before.fetch_offset, to = %after.fetch_offset, "truncated divergent log tail");
            } else if after.log_start > before.log_start {
                tracing::debug!(partition = %self.id, log_start = %after.log_start, "log start raised to the leader's");
            }
            self.discard(removed).await?;
        }
        if let Some(appended) = applied.appended {
            if self.flush_due(appended.last_offset) {
                self.wait_durable(appended.last_offset).await?;
            }
        }
        Ok(applied.progressed)
    }

    async fn discard(&self, doomed: Doomed) -> Result<(), PartitionError> {
        let id = self.id.clone();
        let _ = tokio::task::spawn_blocking(move || delete_segments(&id, doomed)).await;
        self.flush().await
    }

    /// Our own `(epoch, end offset)` for `epoch` (OffsetForLeaderEpoch).
    pub fn end_offset_for_epoch(&self, epoch: LeaderEpoch) -> (LeaderEpoch, Offset) {
        self.state.lock().log().end_offset_for_epoch(epoch)
    }

    /// Where a follower would truncate after its leader said it diverges at `diverging`.
    pub fn truncation_point(&self, diverging: (i32, i64)) -> follower::TruncationDecision {
        let state = self.state.lock();
        let log = state.log();
        let (epoch, end) = log.end_offset_for_epoch(LeaderEpoch(diverging.0));
        follower::truncation_offset(diverging, (epoch.0, end.0), log.log_end_offset().0)
    }

    /// Serves a follower's fetch as the leader (see `ReplicaState::serve_follower`).
    pub fn read_for_follower(
        &self,
        follower: FollowerProcess,
        position: &FetchPosition,
        max_bytes: u64,
        now_ms: i64,
    ) -> Result<ReplicaRead, PartitionError> {
        let mut state = self.state.lock();
        state.note_follower_incarnation(BrokerId(follower.id), follower.incarnation);
        let (served, proposal) = state
            .serve_follower(BrokerId(follower.id), position, max_bytes, now_ms)
            .map_err(|e| PartitionError::of(&self.id, e))?;
        self.publish(&state);
        Ok(ReplicaRead {
            read: ReadResult {
                records: served.records,
                high_watermark: served.high_watermark,
                last_stable_offset: state.last_stable_offset(),
                log_start_offset: served.log_start,
                aborted: Vec::new(),
            },
            diverging: served.diverging.map(|(epoch, end)| (epoch.0, end.0)),
            log_end_offset: served.log_end.0,
            proposal,
        })
    }

    /// Periodic ISR maintenance as leader: a shrink to propose for followers that
    /// have not caught up within `lag_max_ms`.
    pub fn maintain_isr(&self, now_ms: i64, lag_max_ms: i64) -> Option<IsrStep> {
        self.state.lock().maintain_isr(now_ms, lag_max_ms)
    }

    /// The store's answer to `proposal`: `Some(state)` committed, `None` refused.
    pub fn isr_outcome(&self, proposal: &IsrProposal, committed: Option<&PartitionAssignment>) {
        let mut state = self.state.lock();
        state.isr_outcome(
            proposal,
            committed.map(|state| (state.in_sync(), state.partition_epoch)),
        );
        self.publish(&state);
    }

    /// Each follower's progress while leading.
    pub fn follower_progress(&self) -> Vec<FollowerProgress> {
        self.state.lock().follower_progress()
    }

    pub fn high_watermark(&self) -> Offset {
        Offset(*self.high_watermark.borrow())
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
        let plan = self.state.lock().log().flush_plan();
        let up_to = plan.up_to_offset();
        let outcome = tokio::task::spawn_blocking(move || plan.run().map(|()| plan)).await;
        match outcome {
            Ok(Ok(plan)) => {
                let mut state = self.state.lock();
                let log = state.log_mut();
                // A plan made before a truncation covers offsets that no longer exist:
                // only the log's own recovery point says what is durable then.
                let durable = if log.mark_flushed(&plan) {
                    up_to
                } else {
                    log.recovery_point().0
                };
                self.durable_offset.fetch_max(durable, Ordering::AcqRel);
                *self.last_flush.lock() = std::time::Instant::now();
                state.on_flushed();
                self.publish(&state);
                drop(state);
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
        self.state
            .lock()
            .log()
            .checkpoint_offset()
            .0
            .min(self.durable_offset())
    }

    /// Whether an fsync failed, so the partition takes no writes.
    pub fn is_offline(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// How long until `flush.ms` makes this replica's unflushed data due for a flush
    /// (zero: due now); `None` when everything is on disk. As Kafka's log flusher, the
    /// time counts from the last flush.
    pub fn flush_wait(&self, now: std::time::Instant) -> Option<std::time::Duration> {
        if self.unflushed_bytes() == 0 {
            return None;
        }
        let every =
            std::time::Duration::from_millis(self.flush_ms.load(Ordering::Relaxed).max(0) as u64);
        let since = now.saturating_duration_since(*self.last_flush.lock());
        Some(every.saturating_sub(since))
    }

    pub fn unflushed_bytes(&self) -> u64 {
        self.state.lock().log().unflushed_bytes()
    }

    /// What a consumer may read: whole batches below the high watermark, or for
    /// read_committed below the last stable offset, with the aborted transactions
    /// whose data the batches returned may hold.
    pub fn read(
        &self,
        offset: Offset,
        max_bytes: u64,
        min_one: bool,
        isolation: Isolation,
    ) -> Result<ReadResult, PartitionError> {
        let state = self.state.lock();
        let records = state.read(offset, max_bytes, min_one, isolation)?;
        let aborted = match (&records, isolation) {
            (Some(bytes), Isolation::ReadCommitted) => aborted_in(&state, offset, bytes),
            _ => Vec::new(),
        };
        Ok(ReadResult {
            records,
            high_watermark: state.high_watermark(),
            last_stable_offset: state.last_stable_offset(),
            log_start_offset: state.log().log_start_offset(),
            aborted,
        })
    }

    /// Whole batches up to the log end, past the high watermark: for the broker's own
    /// replay of a partition it now leads (the group coordinator's load).
    pub fn read_to_log_end(
        &self,
        offset: Offset,
        max_bytes: u64,
        min_one: bool,
    ) -> Result<ReadResult, PartitionError> {
        let state = self.state.lock();
        let high_watermark = state.high_watermark();
        let log = state.log();
        let records = log.read(offset, max_bytes, min_one)?;
        Ok(ReadResult {
            records,
            high_watermark,
            last_stable_offset: state.last_stable_offset(),
            log_start_offset: log.log_start_offset(),
            aborted: Vec::new(),
        })
    }

    /// A consumer's read here: as [`Self::read`], but a follower answers an offset past
    /// its log end (the consumer's position came from the leader, which is ahead) with
    /// no records rather than OFFSET_OUT_OF_RANGE, which would reset the consumer.
    pub fn read_for_consumer(
        &self,
        offset: Offset,
        max_bytes: u64,
        min_one: bool,
        isolation: Isolation,
    ) -> Result<ReadResult, PartitionError> {
        match self.read(offset, max_bytes, min_one, isolation) {
            Err(PartitionError::OutOfRange(range))
                if offset.0 > range.log_end && self.following().is_some() =>
            {
                let offsets = self.offsets();
                Ok(ReadResult {
                    records: None,
                    high_watermark: offsets.high_watermark(),
                    last_stable_offset: offsets.last_stable(),
                    log_start_offset: Offset(range.log_start),
                    aborted: Vec::new(),
                })
            }
            other => other,
        }
    }

    /// Each producer's state here (DescribeProducers): id, epoch, last sequence, last
    /// timestamp, coordinator epoch, first offset of its open transaction (-1: none).
    pub fn producers(&self) -> Vec<(i64, i16, i32, i64, i32, i64)> {
        let state = self.state.lock();
        state
            .log()
            .producer_state()
            .producers()
            .map(|(id, entry)| {
                let last_sequence = entry.batches.back().map_or(-1, |b| b.last_sequence);
                (
                    id,
                    entry.epoch,
                    last_sequence,
                    entry.last_timestamp,
                    entry.coordinator_epoch,
                    entry.txn_first_offset.unwrap_or(-1),
                )
            })
            .collect()
    }

    /// The log start, high watermark and log end, read together under the lock.
    pub fn offsets(&self) -> PartitionOffsets {
        let state = self.state.lock();
        let log = state.log();
        PartitionOffsets::new(
            log.log_start_offset(),
            state.high_watermark(),
            log.log_end_offset(),
        )
        .with_last_stable(state.last_stable_offset())
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.state.lock().log().leader_epoch()
    }

    pub fn offset_for_timestamp(&self, timestamp: i64) -> Option<(i64, i64)> {
        self.state.lock().log().offset_for_timestamp(timestamp)
    }

    /// See `Log::legacy_offset_points` (ListOffsets v0).
    pub fn legacy_offset_points(&self, now_ms: i64) -> Vec<(i64, i64)> {
        self.state.lock().log().legacy_offset_points(now_ms)
    }

    pub fn max_timestamp(&self) -> Option<(i64, i64)> {
        self.state.lock().log().max_timestamp()
    }

    /// Moves the log start to `offset`, which must lie within `[log start, high
    /// watermark]`, and returns once the new log start is on disk. The lock is held
    /// only to move it in memory; removed segments are unlinked and the log start
    /// written after it is released.
    pub async fn delete_records_before(&self, offset: Offset) -> Result<Offset, PartitionError> {
        if self.is_offline() {
            return Err(PartitionError::StorageFailed(self.id.clone()));
        }
        let (log_start, doomed) = {
            let mut state = self.state.lock();
            let doomed = state
                .delete_records_before(offset)
                .map_err(|e| PartitionError::of(&self.id, e))?;
            self.publish(&state);
            (state.log().log_start_offset().0, doomed)
        };
        let id = self.id.clone();
        let _ = tokio::task::spawn_blocking(move || delete_segments(&id, doomed)).await;
        self.flush().await?;
        Ok(Offset(log_start))
    }

    /// Removes segments past retention (see [`Log::apply_retention`]). Blocking
    /// (file deletion): call it off the async runtime.
    pub fn apply_retention(&self, now_ms: i64, disk_low: bool) -> std::io::Result<RetentionCounts> {
        let retention = self
            .state
            .lock()
            .log_mut()
            .apply_retention(now_ms, disk_low)?;
        let counts = retention.counts();
        retention.doomed.delete()?;
        Ok(counts)
    }

    /// The expired, committed section the archive has yet to take, given that it holds
    /// everything below `archived_below`.
    pub fn archive_work(&self, now_ms: i64, archived_below: i64) -> Option<ArchiveWork> {
        let upper = self.offsets().last_stable().0;
        self.state
            .lock()
            .log()
            .archive_work(now_ms, archived_below, upper)
    }

    pub fn set_archive_gate(&self, gate: ArchiveGate) {
        self.state.lock().log_mut().set_archive_gate(gate);
    }

    pub fn archive_gate(&self) -> ArchiveGate {
        self.state.lock().log().archive_gate()
    }

    /// Whether the topic archives, and whether a failed export lets retention go on.
    pub fn archive_settings(&self) -> (bool, bool) {
        let state = self.state.lock();
        let config = state.log().config();
        (config.archive, config.archive_failure_deletes)
    }

    /// The log's `cleanup.policy`.
    pub fn cleanup_policy(&self) -> CleanupPolicy {
        self.state.lock().log().config().cleanup
    }

    /// How dirty this replica's log is (`None` unless compacted); cleaned only below
    /// the last stable offset: below the high watermark, which no leader change can
    /// truncate, and past no open transaction, whose records may yet be aborted (Kafka
    /// cleans below the first unstable offset too).
    pub fn dirtiness(&self, now_ms: i64) -> Option<Dirtiness> {
        let upper = self.offsets().last_stable().0;
        self.state.lock().log().dirtiness(upper, now_ms)
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
        let upper = self.offsets().last_stable().0;
        let Some(job) = self.state.lock().log().cleaning_job(upper, now_ms) else {
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
        let (_, emptied) = self
            .state
            .lock()
            .log_mut()
            .install_cleaned(&job, &outcome)?;
        emptied.delete()?;
        Ok(Some(outcome))
    }

    pub fn size_bytes(&self) -> u64 {
        self.state.lock().log().size_bytes()
    }

    /// `(bytes, segments)` of the log, read under one lock.
    pub fn size_and_segments(&self) -> (u64, usize) {
        let state = self.state.lock();
        (state.log().size_bytes(), state.log().segment_count())
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
        self.state.lock().log_mut().close()
    }
}

/// The aborted transactions with data in `records`, read from `offset` below the last
/// stable offset (Fetch's `aborted_transactions`). Most reads have none before the
/// last stable offset at all, and then the records are not walked; otherwise only
/// their batch headers are (no CRC): this runs under the partition's lock for every
/// read_committed fetch, which is what librdkafka's and kafkajs's consumers send.
fn aborted_in(state: &ReplicaState<Log>, offset: Offset, records: &[u8]) -> Vec<AbortedTxn> {
    let mut aborted = state
        .log()
        .aborted_between(offset, state.last_stable_offset());
    if !aborted.is_empty() {
        let end = crate::log::batch::end_offset(records).unwrap_or(offset.0);
        aborted.retain(|txn| txn.first_offset < end);
    }
    aborted
}

/// Unlinks removed segments. A failure leaves stray files, not lost data: it is logged,
/// and the next start deletes segments that lie below the log start.
fn delete_segments(id: &TopicPartition, doomed: Doomed) {
    if let Err(error) = doomed.delete() {
        tracing::warn!(partition = %id, %error, "could not delete removed segment files");
    }
}

/// Partitions for the tests of this module and of the layers above it.
#[cfg(test)]
pub mod testing {
    use super::*;
    use crate::log::OpenMode;

    /// Partition `t-0` in `dir`, led by node 0 (this broker) in leader epoch 0.
    pub fn led_by_0_in(dir: &std::path::Path, config: LogConfig) -> std::io::Result<Partition> {
        let mode = OpenMode {
            clean: false,
            recovery_point: 0,
        };
        let log = Log::open(dir, config, mode)?;
        let partition = Partition::new(
            TopicPartition::new("t", 0),
            Uuid::nil(),
            0,
            log,
            0,
            1,
            LeaderLease::always(),
        );
        partition.apply_assignment(&led_by_0(0, vec![0]), None, 0);
        Ok(partition)
    }

    /// Node 0 leads in `epoch` over replicas 0 and 1, with `isr` in sync.
    pub fn led_by_0(leader_epoch: i32, isr: Vec<i32>) -> PartitionAssignment {
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
            isr_incarnations: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::led_by_0;
    use super::*;
    use crate::log::records::testing::simple_batch;

    fn partition_in(dir: &std::path::Path) -> std::io::Result<Partition> {
        let config = LogConfig {
            segment_bytes: 1024,
            index_bytes: 1024,
            index_interval_bytes: 128,
            ..LogConfig::default()
        };
        testing::led_by_0_in(dir, config)
    }

    /// Node 1 leads in `leader_epoch`.
    fn led_by_1(leader_epoch: i32) -> PartitionAssignment {
        PartitionAssignment {
            leader: 1,
            ..led_by_0(leader_epoch, vec![1])
        }
    }

    #[tokio::test]
    async fn a_former_leaders_unflushed_tail_is_flushed_before_it_fetches(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let partition = partition_in(dir.path())?;
        let config = LogConfig {
            flush_messages: 1,
            ..partition.state.lock().log().config().clone()
        };
        partition.set_config(config, 1);
        partition.apply_assignment(&led_by_0(1, vec![0, 1]), None, 0);
        let written = partition.append(&simple_batch(2, 0), 0, Acks::All)?;
        assert!(
            partition.durable_offset() <= written.last_offset,
            "not yet flushed"
        );
        // Node 1 takes over before the write's flush ran; as a follower, node 0's fetch
        // offset would count the unflushed tail towards node 1's high watermark.
        partition.apply_assignment(&led_by_1(2), None, 0);
        assert!(partition.state.lock().must_flush_before_fetch());
        let position = partition.fetch_position_on_disk().await?;
        assert_eq!(position.fetch_offset.0, written.last_offset + 1);
        assert!(partition.durable_offset() > written.last_offset);
        assert!(!partition.state.lock().must_flush_before_fetch());
        Ok(())
    }

    #[tokio::test]
    async fn a_shrink_to_the_leader_alone_is_sent_after_a_flush(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let partition = partition_in(dir.path())?;
        partition.apply_assignment(&led_by_0(1, vec![0, 1]), None, 0);
        let written = partition.append(&simple_batch(2, 0), 0, Acks::All)?;
        // Node 1 never fetched: past the lag limit the leader would be alone.
        let Some(IsrStep::FlushThenPropose(proposal)) = partition.maintain_isr(10_000, 500) else {
            panic!("a shrink to the leader alone must ask for a flush first");
        };
        assert_eq!(proposal.isr, vec![0]);
        partition.flush().await?;
        let mut committed = led_by_0(1, vec![0]);
        committed.partition_epoch = 2;
        partition.isr_outcome(&proposal, Some(&committed));
        assert!(partition.high_watermark().0 > written.last_offset);
        partition.wait_acknowledged(&written, Acks::All).await?;
        Ok(())
    }

    #[tokio::test]
    async fn an_acks_all_wait_fails_at_once_when_the_leader_steps_down(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let partition = std::sync::Arc::new(partition_in(dir.path())?);
        partition.apply_assignment(&led_by_0(1, vec![0, 1]), None, 0);
        let written = partition.append(&simple_batch(2, 0), 0, Acks::All)?;
        let waiting = {
            let partition = std::sync::Arc::clone(&partition);
            tokio::spawn(async move { partition.wait_acknowledged(&written, Acks::All).await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "node 1 has not fetched the write");
        partition.apply_assignment(&led_by_1(2), None, 0);
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
        partition.apply_assignment(&led_by_0(1, vec![0, 1]), None, 0);
        let old = partition.append(&simple_batch(2, 0), 0, Acks::All)?;
        partition.apply_assignment(&led_by_1(2), None, 0);
        // Leading again with node 1 out of the ISR: the high watermark passes `old`'s
        // offsets at once, but in epoch 3 those offsets may hold another write.
        partition.apply_assignment(&led_by_0(3, vec![0]), None, 0);
        assert!(partition.high_watermark().0 > old.last_offset);
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
        partition.apply_assignment(&led_by_0(1, vec![0, 1]), None, 0);
        let written = partition.append(&simple_batch(2, 0), 0, Acks::All)?;
        // A reassignment's end bumps the leader epoch with the same leader, and here drops
        // node 1 from the ISR: nothing was truncated, so the write counts once committed.
        partition.apply_assignment(&led_by_0(2, vec![0]), None, 0);
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
        assert_eq!(
            partition.delete_records_before(Offset(11)).await?,
            Offset(11)
        );
        let stored = std::fs::read_to_string(dir.path().join("log-start-offset"))?;
        assert_eq!(stored.trim(), "11");
        assert!(partition.delete_records_before(Offset(99)).await.is_err());
        Ok(())
    }
}
