//! The transaction coordinator: owns every transactional id whose `__transaction_state`
//! partition this broker leads, decides each request with the pure transitions of
//! [`super::state`], persists the new state to that partition (acks=all) before it
//! counts, and drives commits and aborts to completion: markers to every partition of
//! the transaction ([`MarkerWriter`]), then Complete*.
//!
//! Leadership is the coordinator's fence, as in Kafka: its epoch is the partition's
//! leader epoch, carried in every marker (a partition refuses markers from an older
//! coordinator for a producer), and a deposed coordinator can no longer write its
//! partition. A broker that comes to lead a partition replays it
//! ([`TxnCoordinator::follow_leadership`]) and completes every PrepareCommit and
//! PrepareAbort it finds, re-sending the markers.
//!
//! Per transactional id one transition is in flight at a time (`pending`): a request
//! that finds one gets CONCURRENT_TRANSACTIONS, Kafka's answer.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use super::markers::MarkerWriter;
use super::records;
use super::state::{self, EndStep, InitStep, TxnError, TxnMetadata, TxnState};
use crate::cluster::{MetadataStore, ProducerIdAllocator};
use crate::log::batch;
use crate::log::records::BatchBuilder;
use crate::log::txn::{MarkerKind, TxnMarker};
use crate::model::{
    coordinator_partition, now_ms, Offset, ProducerEpoch, ProducerId, TopicPartition,
};
use crate::replication::{Acks, Partition, PartitionError, TopicReplicas};

/// Coordinator settings (Kafka's broker configs of the same names).
#[derive(Debug, Clone, Copy)]
pub struct TxnConfig {
    /// `transaction.state.log.num.partitions`.
    pub topic_partitions: i32,
    /// `transaction.state.log.replication.factor`.
    pub topic_replication_factor: i16,
    /// `transaction.max.timeout.ms`: the longest transaction timeout a producer may ask.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: an idle id is forgotten after this long.
    pub id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`.
    pub abort_check_interval: Duration,
}

/// How long a write to `__transaction_state` may wait for the in-sync replicas.
const STATE_WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const MARKER_RETRY_MAX: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct Entry {
    meta: TxnMetadata,
    /// A transition of this id is being written.
    pending: bool,
}

#[derive(Debug, Clone)]
struct Led {
    partition: Arc<Partition>,
    /// The coordinator epoch: the partition's leader epoch when this broker took it.
    epoch: i32,
}

/// A transactional id as DescribeTransactions and ListTransactions show it.
#[derive(Debug, Clone)]
pub struct TxnDescription {
    pub transactional_id: String,
    pub meta: TxnMetadata,
}

pub struct TxnCoordinator {
    config: TxnConfig,
    txns: Mutex<HashMap<String, Entry>>,
    /// The `__transaction_state` partitions led here, by index (empty until the topic exists).
    partitions: RwLock<Vec<Option<Led>>>,
    markers: Arc<MarkerWriter>,
    producer_ids: Arc<ProducerIdAllocator>,
    /// The cluster session: lapsed, another broker may coordinate these ids.
    session: Arc<dyn MetadataStore>,
}

impl std::fmt::Debug for TxnCoordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxnCoordinator")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl TxnCoordinator {
    pub fn new(
        config: TxnConfig,
        markers: Arc<MarkerWriter>,
        producer_ids: Arc<ProducerIdAllocator>,
        session: Arc<dyn MetadataStore>,
    ) -> Self {
        Self {
            config,
            txns: Mutex::new(HashMap::new()),
            partitions: RwLock::new(Vec::new()),
            markers,
            producer_ids,
            session,
        }
    }

    pub fn config(&self) -> &TxnConfig {
        &self.config
    }

    pub fn markers(&self) -> &Arc<MarkerWriter> {
        &self.markers
    }

    /// Leads exactly the `__transaction_state` partitions `topic` says this broker
    /// leads: replays those it gains (then completes their prepared transactions),
    /// forgets the ids of those it lost.
    pub fn follow_leadership(self: &Arc<Self>, topic: &TopicReplicas) {
        let count = topic.spec.partitions.max(0) as usize;
        {
            let mut partitions = self.partitions.write();
            if partitions.len() != count {
                partitions.resize(count, None);
            }
        }
        for index in 0..count {
            let led = topic.partition(index as i32).ok();
            let current = self.led(index);
            match (led, current) {
                (Some(led), Some(current))
                    if Arc::ptr_eq(led, &current.partition)
                        && led.leader_epoch().0 == current.epoch => {}
                (Some(led), _) => self.elect(index, Arc::clone(led)),
                (None, Some(_)) => self.resign(index),
                (None, None) => {}
            }
        }
    }

    fn led(&self, index: usize) -> Option<Led> {
        self.partitions.read().get(index).cloned().flatten()
    }

    fn partition_count(&self) -> i32 {
        self.partitions.read().len() as i32
    }

    fn index_of(&self, transactional_id: &str) -> usize {
        coordinator_partition(transactional_id, self.partition_count()) as usize
    }

    /// Takes over partition `index`: rebuilds its ids by replaying it, then completes
    /// every transaction it finds prepared.
    fn elect(self: &Arc<Self>, index: usize, partition: Arc<Partition>) {
        let started = std::time::Instant::now();
        let epoch = partition.leader_epoch().0;
        let loaded = replay(&partition);
        let mut prepared = Vec::new();
        {
            let count = self.partition_count();
            let mut txns = self.txns.lock();
            txns.retain(|id, _| coordinator_partition(id, count) as usize != index);
            for (id, meta) in loaded {
                if meta.state.is_preparing() {
                    prepared.push((id.clone(), meta.clone()));
                }
                txns.insert(
                    id,
                    Entry {
                        meta,
                        pending: false,
                    },
                );
            }
            if let Some(slot) = self.partitions.write().get_mut(index) {
                *slot = Some(Led {
                    partition: Arc::clone(&partition),
                    epoch,
                });
            }
        }
        metrics::histogram!(crate::metrics::TXN_COORDINATOR_LOAD_SECONDS)
            .record(started.elapsed().as_secs_f64());
        tracing::info!(partition = %partition.id(), coordinator_epoch = epoch,
            prepared = prepared.len(), "coordinating transactions");
        for (id, meta) in prepared {
            tokio::spawn(Arc::clone(self).finish(id, epoch, meta));
        }
    }

    fn resign(&self, index: usize) {
        let count = self.partition_count();
        if let Some(slot) = self.partitions.write().get_mut(index) {
            *slot = None;
        }
        self.txns
            .lock()
            .retain(|id, _| coordinator_partition(id, count) as usize != index);
        tracing::info!(
            partition = index,
            "no longer coordinating transactions of this partition"
        );
    }

    /// The partition and epoch coordinating `transactional_id`, if this broker does.
    fn coordinating(&self, transactional_id: &str) -> Result<Led, TxnError> {
        if self.partition_count() == 0 || !self.session.may_lead() {
            return Err(TxnError::NotCoordinator);
        }
        let led = self
            .led(self.index_of(transactional_id))
            .ok_or(TxnError::NotCoordinator)?;
        if !led.partition.is_leader() {
            return Err(TxnError::NotCoordinator);
        }
        Ok(led)
    }

    pub fn is_coordinator_for(&self, transactional_id: &str) -> bool {
        self.coordinating(transactional_id).is_ok()
    }

    /// InitProducerId with a transactional id: the producer id and epoch to use.
    pub async fn init_producer_id(
        self: &Arc<Self>,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<(ProducerId, ProducerEpoch)>,
    ) -> Result<(ProducerId, ProducerEpoch), TxnError> {
        if transactional_id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return Err(TxnError::InvalidTransactionTimeout);
        }
        let led = self.coordinating(transactional_id)?;
        let known = self.txns.lock().contains_key(transactional_id);
        let needs_id = !known
            || self
                .txns
                .lock()
                .get(transactional_id)
                .is_some_and(|e| state::needs_fresh_id(&e.meta));
        let fresh_id = if needs_id {
            Some(ProducerId(self.producer_ids.next().await.map_err(
                |error| {
                    tracing::warn!(%error, "could not allocate a producer id");
                    TxnError::CoordinatorNotAvailable
                },
            )?))
        } else {
            None
        };
        let now = now_ms();
        let step = {
            let mut txns = self.txns.lock();
            let entry = match txns.get_mut(transactional_id) {
                Some(entry) => entry,
                None => {
                    let id = fresh_id.ok_or(TxnError::CoordinatorNotAvailable)?;
                    txns.entry(transactional_id.to_string()).or_insert(Entry {
                        meta: TxnMetadata::new(id, timeout_ms, now),
                        pending: false,
                    })
                }
            };
            if entry.pending {
                return Err(TxnError::ConcurrentTransactions);
            }
            let step = state::init_producer_id(&entry.meta, timeout_ms, expected, fresh_id, now)?;
            entry.pending = true;
            step
        };
        match step {
            InitStep::Write(next) => {
                self.persist(transactional_id, &led, &next).await?;
                tracing::info!(
                    transactional_id,
                    producer_id = next.producer_id.0,
                    epoch = next.producer_epoch.0,
                    "initialized transactional id"
                );
                Ok((next.producer_id, next.producer_epoch))
            }
            InitStep::FenceAndAbort(next) => {
                self.persist(transactional_id, &led, &next).await?;
                tracing::info!(
                    transactional_id,
                    producer_id = next.producer_id.0,
                    epoch = next.producer_epoch.0,
                    "fenced the previous producer: aborting its open transaction"
                );
                metrics::counter!(crate::metrics::TXN_FENCED_TOTAL).increment(1);
                tokio::spawn(Arc::clone(self).finish(
                    transactional_id.to_string(),
                    led.epoch,
                    next,
                ));
                Err(TxnError::ConcurrentTransactions)
            }
        }
    }

    /// AddPartitionsToTxn and AddOffsetsToTxn: adds `partitions` to the open transaction.
    pub async fn add_partitions(
        &self,
        transactional_id: &str,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        partitions: &[TopicPartition],
    ) -> Result<(), TxnError> {
        let led = self.coordinating(transactional_id)?;
        let next = {
            let mut txns = self.txns.lock();
            let entry = txns
                .get_mut(transactional_id)
                .ok_or(TxnError::InvalidProducerIdMapping)?;
            if entry.pending {
                return Err(TxnError::ConcurrentTransactions);
            }
            let Some(next) =
                state::add_partitions(&entry.meta, producer_id, epoch, partitions, now_ms())?
            else {
                return Ok(());
            };
            entry.pending = true;
            next
        };
        self.persist(transactional_id, &led, &next).await
    }

    /// Whether `partitions` are all in the open transaction of the producer (KIP-890's
    /// verification, AddPartitionsToTxn v4+ `verify_only`).
    pub fn verify_partitions(
        &self,
        transactional_id: &str,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        partitions: &[TopicPartition],
    ) -> Result<Vec<bool>, TxnError> {
        self.coordinating(transactional_id)?;
        let txns = self.txns.lock();
        let entry = txns
            .get(transactional_id)
            .ok_or(TxnError::InvalidProducerIdMapping)?;
        if entry.meta.producer_id != producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if entry.meta.producer_epoch != epoch {
            return Err(TxnError::ProducerFenced);
        }
        let open = entry.meta.state == TxnState::Ongoing;
        Ok(partitions
            .iter()
            .map(|p| open && entry.meta.partitions.contains(p))
            .collect())
    }

    /// EndTxn: persists PrepareCommit or PrepareAbort, answers, and completes the
    /// transaction in the background.
    pub async fn end_transaction(
        self: &Arc<Self>,
        transactional_id: &str,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        commit: bool,
    ) -> Result<(), TxnError> {
        if transactional_id.is_empty() {
            return Err(TxnError::InvalidRequest);
        }
        let led = self.coordinating(transactional_id)?;
        let next = {
            let mut txns = self.txns.lock();
            let entry = txns
                .get_mut(transactional_id)
                .ok_or(TxnError::InvalidProducerIdMapping)?;
            if entry.pending {
                return Err(TxnError::ConcurrentTransactions);
            }
            match state::end_transaction(&entry.meta, producer_id, epoch, commit, now_ms())? {
                EndStep::AlreadyDone => return Ok(()),
                EndStep::Prepare(next) => {
                    entry.pending = true;
                    next
                }
            }
        };
        self.persist(transactional_id, &led, &next).await?;
        tokio::spawn(Arc::clone(self).finish(transactional_id.to_string(), led.epoch, next));
        Ok(())
    }

    /// Writes the markers of a prepared transaction until every partition has one, then
    /// persists its completion. Gives up when this broker stops coordinating the id in
    /// this epoch: the next coordinator replays the prepare and finishes it.
    async fn finish(self: Arc<Self>, transactional_id: String, epoch: i32, prepared: TxnMetadata) {
        let started = std::time::Instant::now();
        let commit = prepared.state.commits();
        let marker = TxnMarker {
            producer_id: prepared.producer_id,
            producer_epoch: prepared.producer_epoch,
            coordinator_epoch: epoch,
            kind: MarkerKind::from_committed(commit),
        };
        let mut remaining: Vec<TopicPartition> = prepared.partitions.iter().cloned().collect();
        let mut backoff = Duration::from_millis(20);
        loop {
            match self.coordinating(&transactional_id) {
                Ok(led) if led.epoch == epoch => {}
                _ => return,
            }
            if remaining.is_empty() {
                break;
            }
            remaining = self.markers.send(&marker, remaining).await;
            if !remaining.is_empty() {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MARKER_RETRY_MAX);
            }
        }
        metrics::histogram!(crate::metrics::TXN_MARKER_SECONDS)
            .record(started.elapsed().as_secs_f64());
        loop {
            let Ok(led) = self.coordinating(&transactional_id) else {
                return;
            };
            if led.epoch != epoch {
                return;
            }
            let next = {
                let mut txns = self.txns.lock();
                let Some(entry) = txns.get_mut(&transactional_id) else {
                    return;
                };
                if entry.meta.producer_id != prepared.producer_id
                    || entry.meta.state != prepared.state
                {
                    return;
                }
                if entry.pending {
                    None
                } else {
                    let Some(next) = state::complete(&entry.meta, now_ms()) else {
                        return;
                    };
                    entry.pending = true;
                    Some(next)
                }
            };
            if let Some(next) = next {
                match self.persist(&transactional_id, &led, &next).await {
                    Ok(()) => {
                        let counter = if commit {
                            crate::metrics::TXN_COMMITS_TOTAL
                        } else {
                            crate::metrics::TXN_ABORTS_TOTAL
                        };
                        metrics::counter!(counter).increment(1);
                        return;
                    }
                    Err(TxnError::NotCoordinator) => return,
                    Err(error) => {
                        tracing::debug!(transactional_id, %error, "could not store a completion yet")
                    }
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MARKER_RETRY_MAX);
        }
    }

    /// Writes `next` for `transactional_id` (marked pending by the caller) to the
    /// partition and makes it current; clears `pending` either way.
    async fn persist(
        &self,
        transactional_id: &str,
        led: &Led,
        next: &TxnMetadata,
    ) -> Result<(), TxnError> {
        let now = now_ms();
        let mut builder = BatchBuilder::new();
        builder.push(
            now,
            Some(&records::encode_key(transactional_id)),
            Some(&records::encode_value(next)),
            &[],
        );
        let written = led
            .partition
            .write(&builder.build(), now, Acks::All, STATE_WRITE_TIMEOUT)
            .await;
        let still_here =
            matches!(self.coordinating(transactional_id), Ok(l) if l.epoch == led.epoch);
        let mut txns = self.txns.lock();
        let Some(entry) = txns.get_mut(transactional_id) else {
            return Err(TxnError::NotCoordinator);
        };
        entry.pending = false;
        match written {
            Ok(_) if still_here => {
                entry.meta = next.clone();
                Ok(())
            }
            Ok(_) => Err(TxnError::NotCoordinator),
            Err(error) => {
                tracing::debug!(transactional_id, %error, "could not store a transaction state");
                if entry.meta.producer_epoch == state::NO_EPOCH {
                    txns.remove(transactional_id);
                }
                Err(match error {
                    PartitionError::NotLeader(_) | PartitionError::StorageFailed(_) => {
                        TxnError::NotCoordinator
                    }
                    _ => TxnError::CoordinatorNotAvailable,
                })
            }
        }
    }

    /// Aborts open transactions past their timeout (with an epoch bump that fences
    /// their producer) and forgets ids idle past `transactional.id.expiration.ms`.
    pub async fn tick(self: &Arc<Self>) {
        let now = now_ms();
        let (timed_out, expired) = {
            let txns = self.txns.lock();
            let timed_out: Vec<String> = txns
                .iter()
                .filter(|(_, e)| !e.pending && e.meta.timed_out(now))
                .map(|(id, _)| id.clone())
                .collect();
            let expired: Vec<String> = txns
                .iter()
                .filter(|(_, e)| !e.pending && e.meta.expired(now, self.config.id_expiration_ms))
                .map(|(id, _)| id.clone())
                .collect();
            (timed_out, expired)
        };
        for id in timed_out {
            let Ok(led) = self.coordinating(&id) else {
                continue;
            };
            let next = {
                let mut txns = self.txns.lock();
                let Some(entry) = txns.get_mut(&id) else {
                    continue;
                };
                let Some(next) = state::abort_timed_out(&entry.meta, now) else {
                    continue;
                };
                if entry.pending {
                    continue;
                }
                entry.pending = true;
                next
            };
            if self.persist(&id, &led, &next).await.is_ok() {
                tracing::info!(transactional_id = %id, producer_id = next.producer_id.0,
                    epoch = next.producer_epoch.0, timeout_ms = next.timeout_ms,
                    "aborting a transaction past its timeout");
                metrics::counter!(crate::metrics::TXN_TIMEOUTS_TOTAL).increment(1);
                tokio::spawn(Arc::clone(self).finish(id, led.epoch, next));
            }
        }
        for id in expired {
            self.expire(&id, now).await;
        }
        self.publish_gauges(now);
    }

    /// Writes a tombstone for an idle id, then forgets it.
    async fn expire(&self, transactional_id: &str, now: i64) {
        let Ok(led) = self.coordinating(transactional_id) else {
            return;
        };
        {
            let mut txns = self.txns.lock();
            match txns.get_mut(transactional_id) {
                Some(e) if !e.pending && e.meta.expired(now, self.config.id_expiration_ms) => {
                    e.pending = true
                }
                _ => return,
            }
        }
        let mut builder = BatchBuilder::new();
        builder.push(now, Some(&records::encode_key(transactional_id)), None, &[]);
        let written = led
            .partition
            .write(&builder.build(), now, Acks::All, STATE_WRITE_TIMEOUT)
            .await;
        let mut txns = self.txns.lock();
        match written {
            Ok(_) => {
                txns.remove(transactional_id);
                tracing::info!(transactional_id, "transactional id expired");
            }
            Err(_) => {
                if let Some(e) = txns.get_mut(transactional_id) {
                    e.pending = false;
                }
            }
        }
    }

    fn publish_gauges(&self, now: i64) {
        let txns = self.txns.lock();
        let open = txns
            .values()
            .filter(|e| e.meta.state == TxnState::Ongoing)
            .count();
        let oldest = txns
            .values()
            .filter(|e| e.meta.state == TxnState::Ongoing && e.meta.start_ms >= 0)
            .map(|e| now - e.meta.start_ms)
            .max()
            .unwrap_or(0);
        metrics::gauge!(crate::metrics::TXN_OPEN).set(open as f64);
        metrics::gauge!(crate::metrics::TXN_OLDEST_OPEN_SECONDS).set(oldest as f64 / 1000.0);
    }

    /// DescribeTransactions of one id.
    pub fn describe(&self, transactional_id: &str) -> Result<TxnMetadata, TxnError> {
        self.coordinating(transactional_id)?;
        self.txns
            .lock()
            .get(transactional_id)
            .map(|e| e.meta.clone())
            .ok_or(TxnError::InvalidProducerIdMapping)
    }

    /// ListTransactions: every id coordinated here.
    pub fn list(&self) -> Vec<TxnDescription> {
        let mut out: Vec<TxnDescription> = self
            .txns
            .lock()
            .iter()
            .filter(|(_, e)| e.meta.producer_epoch != state::NO_EPOCH)
            .map(|(id, e)| TxnDescription {
                transactional_id: id.clone(),
                meta: e.meta.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.transactional_id.cmp(&b.transactional_id));
        out
    }
}

/// Reads a whole `__transaction_state` partition to its log end (a new leader's log
/// is the partition's truth) and keeps each id's newest state.
fn replay(partition: &Partition) -> HashMap<String, TxnMetadata> {
    let mut state = HashMap::new();
    let offsets = partition.offsets();
    let mut offset = offsets.log_start().0;
    let end = offsets.log_end().0;
    let mut skipped = 0usize;
    while offset < end {
        let Ok(read) = partition.read_to_log_end(Offset(offset), 1 << 20, true) else {
            break;
        };
        let Some(bytes) = read.records else { break };
        let mut progressed = false;
        for header in batch::batches(&bytes) {
            let Ok(header) = header else { break };
            for record in header.records().unwrap_or_default() {
                if record.offset < offset {
                    continue;
                }
                let Some(id) = record.key.and_then(records::decode_key) else {
                    skipped += 1;
                    continue;
                };
                match record.value {
                    None => {
                        state.remove(&id);
                    }
                    Some(value) => match records::decode_value(value) {
                        Some(meta) => {
                            state.insert(id, meta);
                        }
                        None => skipped += 1,
                    },
                }
            }
            offset = header.last_offset() + 1;
            progressed = true;
        }
        if !progressed {
            break;
        }
    }
    if skipped > 0 {
        tracing::warn!(partition = %partition.id(), skipped, "skipped unreadable transaction records");
    }
    state
}
