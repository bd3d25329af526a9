//! The share-partitions this broker leads, and its share sessions.
//!
//! A share-partition (group, topic, partition) lives where the partition's leader
//! is, because acquiring records means reading that leader's log. Its state is
//! loaded from the group's coordinator the first time it is used under a leader
//! epoch (a new leader starts from what the last one stored, so acknowledged records
//! stay acknowledged and acquired ones come back), and stored there after every
//! change an acknowledgement or a release makes, before the request is answered (a
//! lock timeout's change goes with the next one). Acquisitions are not stored, as in
//! Kafka: after a failover a record that was acquired but not acknowledged is
//! delivered again.
//!
//! One async lock per share-partition orders everything done to it, including the
//! store's write, so two writes of the same share-partition never cross.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::OwnedMutexGuard;

use bytes::Bytes;

use super::partition::{
    AckBatch, AckError, Acquired, OffsetStatus, ShareConfig, SharePartition, ShareStats, Snapshot,
};
use super::session::ShareSessions;
use super::{PersistError, ShareKey, ShareState, StateStore};
use crate::limits::SHARE_STATE_LOADING_GRACE;
use crate::log::batch;
use crate::log::txn::{AbortedTxn, CommittedFilter};
use crate::model::{Isolation, Offset};
use crate::replication::Partition;

pub use super::super::config::{AutoOffsetReset, GroupConfigs};

/// Share-partition settings (broker-wide, `group.share.*`).
#[derive(Debug, Clone, Copy)]
pub struct ShareLeaderConfig {
    pub partition: ShareConfig,
    pub auto_offset_reset: AutoOffsetReset,
    /// Share sessions this broker holds at most (`group.share.max.share.sessions`).
    pub max_sessions: usize,
}

/// One share-partition as this broker holds it.
#[derive(Debug, Default)]
pub struct Slot {
    loaded: Option<Loaded>,
    /// Since when loading its state has failed with transient errors, while it has.
    failing_since: Option<tokio::time::Instant>,
}

/// Why a share-partition could not be held.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HoldError {
    /// Its state could not be loaded because the group's coordinator is moving or out
    /// of reach, and has been for less than [`SHARE_STATE_LOADING_GRACE`]: the
    /// share-partition is still loading. Kafka answers a fetch of a share-partition
    /// that is still initializing with nothing for it, and the client fetches again.
    #[error("the share-partition is still loading: {0}")]
    Loading(PersistError),
    #[error(transparent)]
    Failed(PersistError),
}

/// What a failed load of a share-partition's state is: a transient failure within
/// [`SHARE_STATE_LOADING_GRACE`] of the first one (`failing_since`, set here) is
/// still loading; any other failure, or one that lasts, is the error.
fn hold_error(
    failing_since: &mut Option<tokio::time::Instant>,
    now: tokio::time::Instant,
    error: PersistError,
) -> HoldError {
    if !error.is_transient() {
        return HoldError::Failed(error);
    }
    let since = *failing_since.get_or_insert(now);
    if now.duration_since(since) < SHARE_STATE_LOADING_GRACE {
        HoldError::Loading(error)
    } else {
        HoldError::Failed(error)
    }
}

impl HoldError {
    pub fn into_persist_error(self) -> PersistError {
        match self {
            Self::Loading(error) | Self::Failed(error) => error,
        }
    }
}

#[derive(Debug)]
struct Loaded {
    partition: SharePartition,
    /// What the group delivers of transactional records (its `share.isolation.level`,
    /// read again every time the partition is held).
    isolation: Isolation,
    leader_epoch: i32,
    state_epoch: i32,
    /// What the coordinator holds now.
    stored: Snapshot,
}

/// A share-partition loaded and locked for one request.
#[derive(Debug)]
pub struct Held {
    guard: OwnedMutexGuard<Slot>,
}

/// What one acquisition took: the whole log batches holding the records, and the
/// acquired offset ranges with their delivery counts (the client keeps only those).
#[derive(Debug, Default)]
pub struct Acquisition {
    pub records: Bytes,
    pub ranges: Vec<Acquired>,
}

impl Held {
    /// Acquires for `member` up to `max_records` records of `replica` (its leader's
    /// log, below the high watermark), reading at most about `max_bytes`: first records
    /// whose locks ran out or that were released, then new ones.
    pub fn acquire(
        &mut self,
        replica: &Partition,
        member: &str,
        max_records: usize,
        max_bytes: u64,
    ) -> Acquisition {
        let isolation = self
            .guard
            .loaded
            .as_ref()
            .map_or(Isolation::ReadUncommitted, |l| l.isolation);
        let share = self.partition();
        let now = crate::model::monotonic_ms() as i64;
        share.expire_locks(now);
        let offsets = replica.offsets();
        let fetchable_end = match isolation {
            Isolation::ReadCommitted => offsets.last_stable().0,
            Isolation::ReadUncommitted => offsets.high_watermark().0,
        };
        let next = share.next_fetch_offset();
        if max_records == 0 || next >= fetchable_end {
            return Acquisition::default();
        }
        // A read past the log (its end moved under us) is simply nothing now.
        let Ok(read) = replica.read_for_consumer(Offset(next), max_bytes.max(1), true, isolation)
        else {
            return Acquisition::default();
        };
        let records = read.records.unwrap_or_default();
        let data_end = batch::end_offset(&records).unwrap_or(next);
        let undeliverable = match isolation {
            Isolation::ReadCommitted => undeliverable(&records, read.aborted),
            Isolation::ReadUncommitted => Vec::new(),
        };
        let ranges = share.acquire_skipping(
            member,
            now,
            fetchable_end.min(data_end),
            max_records,
            &undeliverable,
        );
        Acquisition {
            records: holding(&records, &ranges),
            ranges,
        }
    }

    /// Applies `member`'s acknowledgements and stores the result (see [`Self::change`]).
    pub async fn acknowledge(
        &mut self,
        key: &ShareKey,
        persister: &dyn StateStore,
        member: &str,
        batches: &[AckBatch],
    ) -> Result<Result<(), AckError>, PersistError> {
        let now = crate::model::monotonic_ms() as i64;
        self.change(key, persister, |p| {
            p.expire_locks(now);
            p.acknowledge(member, batches)
        })
        .await
    }

    pub fn partition(&mut self) -> &mut SharePartition {
        match self.guard.loaded.as_mut() {
            Some(loaded) => &mut loaded.partition,
            // `SharePartitions::hold` returns only loaded slots.
            None => unreachable!("a held share-partition is loaded"),
        }
    }

    /// Runs `change` and stores the result if it changed what is stored; on a failed
    /// store the change is undone (the caller answers with the error, and the records
    /// stay as they were, to be acknowledged again or redelivered).
    pub async fn change<T>(
        &mut self,
        key: &ShareKey,
        persister: &dyn StateStore,
        change: impl FnOnce(&mut SharePartition) -> T,
    ) -> Result<T, PersistError> {
        let Some(loaded) = self.guard.loaded.as_mut() else {
            return Err(PersistError::Storage("share-partition not loaded".into()));
        };
        let before = loaded.partition.clone();
        let result = change(&mut loaded.partition);
        let snapshot = loaded.partition.snapshot();
        if durable_view(&snapshot) == durable_view(&loaded.stored) {
            return Ok(result);
        }
        let state = ShareState {
            state_epoch: loaded.state_epoch,
            leader_epoch: loaded.leader_epoch,
            snapshot: snapshot.clone(),
        };
        match persister.write(key, state).await {
            Ok(()) => {
                loaded.stored = snapshot;
                Ok(result)
            }
            Err(error) => {
                let stats = loaded.partition.stats;
                loaded.partition = before;
                loaded.partition.stats = stats;
                if matches!(
                    error,
                    PersistError::FencedLeaderEpoch | PersistError::FencedStateEpoch
                ) {
                    // A newer leader took it over, or an operator reset it: load it
                    // again next time.
                    self.guard.loaded = None;
                }
                Err(error)
            }
        }
    }
}

/// The share-partitions led here and the share sessions of members fetching here.
#[derive(Debug)]
pub struct SharePartitions {
    slots: Mutex<HashMap<ShareKey, Arc<tokio::sync::Mutex<Slot>>>>,
    sessions: Mutex<ShareSessions>,
    config: ShareLeaderConfig,
    /// Each group's lock duration and auto offset reset (its group configs).
    groups: Option<GroupConfigs>,
}

/// A session idle this long may be evicted when the cache is full.
const SESSION_IDLE_EVICTION_MS: u64 = 60_000;

impl SharePartitions {
    pub fn new(config: ShareLeaderConfig) -> Self {
        Self {
            slots: Mutex::new(HashMap::new()),
            sessions: Mutex::new(ShareSessions::new(
                config.max_sessions,
                SESSION_IDLE_EVICTION_MS,
            )),
            config,
            groups: None,
        }
    }

    /// Each group's `share.record.lock.duration.ms` and `share.auto.offset.reset` come
    /// from `groups` rather than from the broker-wide settings.
    pub fn with_group_configs(mut self, groups: GroupConfigs) -> Self {
        self.groups = Some(groups);
        self
    }

    /// The lock duration, auto offset reset and isolation `group` runs with now.
    fn group_settings(&self, group: &str) -> (i64, AutoOffsetReset, Isolation) {
        match &self.groups {
            Some(groups) => {
                let settings = groups.settings(group);
                (
                    settings.share_record_lock_duration_ms,
                    settings.share_auto_offset_reset,
                    settings.share_isolation_level,
                )
            }
            None => (
                self.config.partition.lock_duration_ms,
                self.config.auto_offset_reset,
                Isolation::ReadUncommitted,
            ),
        }
    }

    pub fn config(&self) -> &ShareLeaderConfig {
        &self.config
    }

    pub fn sessions(&self) -> parking_lot::MutexGuard<'_, ShareSessions> {
        self.sessions.lock()
    }

    /// Locks share-partition `key` of `replica` (which this broker leads), loading
    /// its state from the group's coordinator when it is new here or the leader epoch
    /// moved on.
    pub async fn hold(
        &self,
        key: &ShareKey,
        replica: &Partition,
        persister: &dyn StateStore,
    ) -> Result<Held, HoldError> {
        self.hold_checked(key, replica, persister, false).await
    }

    /// As [`Self::hold`]; with `verify`, first asks the coordinator whether the state
    /// was reset or deleted since it was loaded (a new share session does, so the
    /// first member after an operator's AlterShareGroupOffsets starts where it says).
    pub async fn hold_checked(
        &self,
        key: &ShareKey,
        replica: &Partition,
        persister: &dyn StateStore,
        verify: bool,
    ) -> Result<Held, HoldError> {
        let slot = Arc::clone(self.slots.lock().entry(key.clone()).or_default());
        let mut guard = slot.lock_owned().await;
        let loading = self
            .load_if_due(&mut guard, key, replica, persister, verify)
            .await;
        if let Err(error) = loading {
            let now = tokio::time::Instant::now();
            return Err(hold_error(&mut guard.failing_since, now, error));
        }
        guard.failing_since = None;
        let offsets = replica.offsets();
        let (lock_duration_ms, _, isolation) = self.group_settings(&key.group);
        if let Some(loaded) = guard.loaded.as_mut() {
            // Retention or DeleteRecords removed records: they cannot be delivered.
            loaded.partition.move_start_to(offsets.log_start().0);
            loaded.partition.set_lock_duration(lock_duration_ms);
            loaded.isolation = isolation;
        }
        Ok(Held { guard })
    }

    /// Loads the slot's state when it is new here, the leader epoch moved on, or —
    /// with `verify` — the coordinator's copy was reset since it was loaded.
    async fn load_if_due(
        &self,
        slot: &mut Slot,
        key: &ShareKey,
        replica: &Partition,
        persister: &dyn StateStore,
        verify: bool,
    ) -> Result<(), PersistError> {
        let epoch = replica.leader_epoch().0;
        if verify {
            if let Some(loaded) = slot.loaded.as_ref() {
                let stored = persister.read(key, epoch).await?;
                if stored.is_none_or(|s| s.state_epoch != loaded.state_epoch) {
                    slot.loaded = None;
                }
            }
        }
        if slot.loaded.as_ref().is_none_or(|l| l.leader_epoch != epoch) {
            slot.loaded = Some(self.load(key, replica, epoch, persister).await?);
        }
        Ok(())
    }

    async fn load(
        &self,
        key: &ShareKey,
        replica: &Partition,
        leader_epoch: i32,
        persister: &dyn StateStore,
    ) -> Result<Loaded, PersistError> {
        if let Some(stored) = persister.read(key, leader_epoch).await? {
            let partition = SharePartition::restore(&stored.snapshot, self.config.partition);
            return Ok(Loaded {
                partition,
                isolation: Isolation::ReadUncommitted,
                leader_epoch,
                state_epoch: stored.state_epoch,
                stored: stored.snapshot,
            });
        }
        // First use: fix where the group starts, durably, so a new leader starts at
        // the same offset rather than at its own "latest".
        let offsets = replica.offsets();
        let start = match self.group_settings(&key.group).1 {
            AutoOffsetReset::Earliest => offsets.log_start().0,
            AutoOffsetReset::Latest => offsets.high_watermark().0,
        };
        let partition = SharePartition::new(start, self.config.partition);
        let state = ShareState {
            state_epoch: 0,
            leader_epoch,
            snapshot: partition.snapshot(),
        };
        persister.write(key, state.clone()).await?;
        Ok(Loaded {
            partition,
            isolation: Isolation::ReadUncommitted,
            leader_epoch,
            state_epoch: 0,
            stored: state.snapshot,
        })
    }

    /// The share-partitions held here now, for their lock timeouts and metrics.
    pub fn keys(&self) -> Vec<ShareKey> {
        self.slots.lock().keys().cloned().collect()
    }

    /// The counters of a share-partition, if it is loaded here and not busy.
    pub fn stats_of(&self, key: &ShareKey) -> Option<(ShareStats, i64, usize)> {
        let slot = Arc::clone(self.slots.lock().get(key)?);
        let guard = slot.try_lock().ok()?;
        let loaded = guard.loaded.as_ref()?;
        Some((
            loaded.partition.stats,
            loaded.partition.start_offset(),
            loaded.partition.in_flight_len(),
        ))
    }

    /// Where `offset` of a share-partition loaded here stands (acquisitions included);
    /// `None` when it is not loaded here or busy.
    pub fn status_of(&self, key: &ShareKey, offset: i64) -> Option<OffsetStatus> {
        let slot = Arc::clone(self.slots.lock().get(key)?);
        let guard = slot.try_lock().ok()?;
        Some(guard.loaded.as_ref()?.partition.state_of(offset))
    }

    /// Forgets share-partitions of partitions this broker no longer leads.
    pub fn retain(&self, mut led: impl FnMut(&ShareKey) -> bool) {
        self.slots.lock().retain(|key, _| led(key));
    }
}

/// What the coordinator stores of a snapshot: the start and every run that is not
/// merely in flight for the first time. Acquiring new records changes nothing stored
/// (as in Kafka); anything an acknowledgement, release or timeout does does.
fn durable_view(snapshot: &Snapshot) -> (i64, Vec<(i64, i64, i8, i16)>) {
    let runs = snapshot
        .batches
        .iter()
        .filter(|b| {
            !(b.state == super::partition::DeliveryState::Available && b.delivery_count <= 1)
        })
        .map(|b| (b.first, b.last, b.state.id(), b.delivery_count))
        .collect();
    (snapshot.start_offset, runs)
}

/// For a read_committed group: the offset ranges of `records` never to be delivered,
/// the batches of aborted transactions and every transaction marker (Kafka's share
/// partitions archive them; a read_committed consumer would drop them).
fn undeliverable(records: &Bytes, aborted: Vec<AbortedTxn>) -> Vec<(i64, i64)> {
    let mut filter = CommittedFilter::new(aborted);
    let mut ranges: Vec<(i64, i64)> = Vec::new();
    for header in batch::batches(records).map_while(Result::ok) {
        if filter.keep(&header) {
            continue;
        }
        let (first, last) = (header.base_offset(), header.last_offset());
        match ranges.last_mut() {
            Some(run) if run.1 + 1 == first => run.1 = last,
            _ => ranges.push((first, last)),
        }
    }
    ranges
}

/// The batches of `records` that hold an acquired offset.
fn holding(records: &Bytes, acquired: &[Acquired]) -> Bytes {
    let (Some(first), Some(last)) = (acquired.first(), acquired.last()) else {
        return Bytes::new();
    };
    let (mut start, mut end, mut position) = (None, 0usize, 0usize);
    for header in batch::batches(records) {
        let Ok(header) = header else { break };
        let size = header.total_bytes();
        if header.last_offset() >= first.first && header.base_offset() <= last.last {
            start.get_or_insert(position);
            end = position + size;
        }
        position += size;
    }
    match start {
        Some(start) => records.slice(start..end),
        None => Bytes::new(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::log::LogConfig;
    use crate::replication::partition_testing::led_by_0_in;

    /// A coordinator that answers `error` to the first `failures` reads, then keeps
    /// what is written.
    struct Flaky {
        failures: AtomicUsize,
        error: PersistError,
        stored: Mutex<Option<ShareState>>,
    }

    #[async_trait::async_trait]
    impl StateStore for Flaky {
        async fn read(&self, _: &ShareKey, _: i32) -> Result<Option<ShareState>, PersistError> {
            if self.failures.load(Ordering::SeqCst) > 0 {
                self.failures.fetch_sub(1, Ordering::SeqCst);
                return Err(self.error.clone());
            }
            Ok(self.stored.lock().clone())
        }

        async fn write(&self, _: &ShareKey, state: ShareState) -> Result<(), PersistError> {
            *self.stored.lock() = Some(state);
            Ok(())
        }
    }

    fn shares() -> SharePartitions {
        SharePartitions::new(ShareLeaderConfig {
            partition: ShareConfig::default(),
            auto_offset_reset: AutoOffsetReset::Earliest,
            max_sessions: 10,
        })
    }

    fn key() -> ShareKey {
        ShareKey {
            group: "g".into(),
            topic_id: uuid::Uuid::nil(),
            partition: 0,
        }
    }

    #[tokio::test]
    async fn a_share_partition_whose_coordinator_moves_is_loading_then_held(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let replica = led_by_0_in(dir.path(), LogConfig::default())?;
        let (shares, key) = (shares(), key());
        let store = Flaky {
            failures: AtomicUsize::new(2),
            error: PersistError::NotCoordinator,
            stored: Mutex::new(None),
        };
        for _ in 0..2 {
            let refused = shares.hold(&key, &replica, &store).await.err();
            assert_eq!(
                refused,
                Some(HoldError::Loading(PersistError::NotCoordinator))
            );
        }
        assert!(shares.hold(&key, &replica, &store).await.is_ok());
        assert!(
            store.stored.lock().is_some(),
            "the first use stored the start"
        );
        let slot = Arc::clone(shares.slots.lock().get(&key).ok_or("a slot")?);
        assert_eq!(
            slot.lock().await.failing_since,
            None,
            "the failures are forgotten"
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_fenced_leader_is_refused_at_once() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let replica = led_by_0_in(dir.path(), LogConfig::default())?;
        let store = Flaky {
            failures: AtomicUsize::new(1),
            error: PersistError::FencedLeaderEpoch,
            stored: Mutex::new(None),
        };
        let refused = shares().hold(&key(), &replica, &store).await.err();
        assert_eq!(
            refused,
            Some(HoldError::Failed(PersistError::FencedLeaderEpoch))
        );
        Ok(())
    }

    #[test]
    fn a_moving_coordinator_is_still_loading_until_the_grace_runs_out() {
        let start = tokio::time::Instant::now();
        let mut failing_since = None;
        let moving = || PersistError::Unreachable("no coordinator for 'g'".into());
        assert_eq!(
            hold_error(&mut failing_since, start, moving()),
            HoldError::Loading(moving())
        );
        assert_eq!(failing_since, Some(start));
        let later = start + SHARE_STATE_LOADING_GRACE - std::time::Duration::from_millis(1);
        assert_eq!(
            hold_error(&mut failing_since, later, PersistError::NotCoordinator),
            HoldError::Loading(PersistError::NotCoordinator)
        );
        let expired = start + SHARE_STATE_LOADING_GRACE;
        assert_eq!(
            hold_error(&mut failing_since, expired, moving()),
            HoldError::Failed(moving())
        );
    }

    #[test]
    fn a_fence_is_an_error_at_once() {
        let mut failing_since = None;
        let now = tokio::time::Instant::now();
        assert_eq!(
            hold_error(&mut failing_since, now, PersistError::FencedLeaderEpoch),
            HoldError::Failed(PersistError::FencedLeaderEpoch)
        );
        assert_eq!(failing_since, None);
    }
}
