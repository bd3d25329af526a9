//! Transactions in the simulation: a transactional producer and its coordinator,
//! reduced to what one partition sees, driving the code the broker runs
//! (`ReplicaState::append`, `ReplicaState::append_marker`, `last_stable_offset`, and the
//! real producer state inside [`MemLog`]) through the same crashes, power losses,
//! partitions and leader changes as the plain writes.
//!
//! The producer has one id and takes a new epoch for each transaction (as transaction
//! version 2 does). It writes a few transactional batches at whichever broker it picks,
//! waits for each acknowledgement as a real producer's flush does, then ends the
//! transaction: COMMIT only if every write was acknowledged, ABORT otherwise or at
//! random. The coordinator retries the marker at whichever broker leads until one is
//! acknowledged (acks=all), as it retries WriteTxnMarkers.
//!
//! Checked, every few steps on every leader and after the system settles:
//! - a read_committed reader of the leader (its log below the last stable offset,
//!   filtered by its aborted list as a consumer filters Fetch's `aborted_transactions`)
//!   sees only values of transactions whose COMMIT marker is below that offset, never
//!   one whose ABORT was acknowledged, and every value of a transaction whose COMMIT
//!   was acknowledged below that offset;
//! - the last stable offset never exceeds the high watermark;
//! - once settled, no transaction is open anywhere, the last stable offset is the log
//!   end on every replica, and every replica names the same aborted transactions.

use std::collections::{BTreeMap, BTreeSet};

use super::{Acknowledgement, Acks, Broker, Sim, ACK_TIMEOUT_MS};
use crate::log::batch::BatchHeader;
use crate::log::records::BatchBuilder;
use crate::log::txn::{CommittedFilter, MarkerKind, TxnMarker, TRANSACTIONAL_BIT};
use crate::log::AppendInfo;
use crate::model::{Offset, ProducerEpoch, ProducerId};

/// The simulated transactional producer's id.
const PRODUCER_ID: i64 = 4_000;
/// Transactional values carry this bit, plain ones never do.
const TXN_VALUE_BIT: u64 = 1 << 62;
/// Writes per transaction, at most.
const MAX_WRITES: usize = 3;

/// A write waiting for its acknowledgement: (broker, append, values, deadline).
type PendingWrite = (i32, AppendInfo, Vec<u64>, i64);

#[derive(Debug, Default)]
pub(super) struct TxnDriver {
    epoch: i16,
    /// The transaction in progress, if any.
    open: Option<OpenTxn>,
    /// Transactions whose COMMIT was acknowledged: (marker offset, values).
    pub(super) committed: Vec<(i64, Vec<u64>)>,
    /// Values of transactions whose ABORT was acknowledged.
    pub(super) aborted: BTreeSet<u64>,
    next_value: u64,
}

/// A read_committed reader's view of one replica ([`Sim::read_committed_values`]).
#[derive(Debug, Default)]
struct ReadCommitted {
    lso: i64,
    /// Transactional value → its transaction's epoch.
    seen: BTreeMap<u64, i16>,
    commit_epochs: BTreeSet<i16>,
}

#[derive(Debug, Default)]
struct OpenTxn {
    writes: usize,
    /// Values written and acknowledged.
    acked: Vec<u64>,
    /// Values of writes whose fate is unknown (appended somewhere, never acknowledged):
    /// possibly in the log, so the transaction must abort.
    doubtful: Vec<u64>,
    pending: Option<PendingWrite>,
    /// The decided end, once every write is settled.
    ending: Option<MarkerKind>,
    /// The marker appended and waiting for its acknowledgement.
    marker: Option<(i32, AppendInfo, i64)>,
}

impl Sim {
    /// One step of the transactional producer or its coordinator. New transactions
    /// begin only while `begin` (faults phase); an open one is always driven to its end.
    pub(super) fn txn_step(&mut self, begin: bool) {
        if self.txn.open.is_none() {
            if begin {
                self.txn.epoch += 1;
                self.txn.open = Some(OpenTxn::default());
            }
            return;
        }
        self.settle_txn_write();
        let Some(open) = self.txn.open.as_ref() else {
            return;
        };
        if open.pending.is_some() {
            return;
        }
        if open.marker.is_some() {
            self.settle_marker();
        } else if open.ending.is_none() && open.writes < MAX_WRITES && self.rng.below(4) != 0 {
            self.write_txn_batch();
        } else {
            self.append_txn_marker();
        }
    }

    fn write_txn_batch(&mut self) {
        let id = self.rng.below(self.brokers.len() as u64) as i32;
        let count = 1 + self.rng.below(2);
        let values: Vec<u64> = (0..count)
            .map(|i| TXN_VALUE_BIT | (self.txn.next_value + i))
            .collect();
        let sequence = self.txn.open.as_ref().map_or(0, |o| o.writes) as i32 * 2;
        let mut builder = BatchBuilder::new()
            .idempotent(PRODUCER_ID, self.txn.epoch, sequence)
            .with_attributes(TRANSACTIONAL_BIT);
        for value in &values {
            builder.push(self.now, None, Some(&value.to_be_bytes()), &[]);
        }
        let records = builder.build();
        let now = self.now;
        let Some((replica, may_lead)) = self.running_replica(id) else {
            return;
        };
        let result = replica.append(&records, now, Acks::All, may_lead);
        self.txn.next_value += count;
        let Some(open) = self.txn.open.as_mut() else {
            return;
        };
        open.writes += 1;
        match result {
            Ok(info) => {
                open.pending = Some((id, info, values, now + ACK_TIMEOUT_MS));
                self.after_hw_change(id);
            }
            // Refused before anything was written: the producer's error; it aborts.
            Err(_) => open.ending = Some(MarkerKind::Abort),
        }
    }

    /// Resolves the pending write: acknowledged, failed, or past its deadline (doubtful).
    fn settle_txn_write(&mut self) {
        let now = self.now;
        let Some(open) = self.txn.open.as_mut() else {
            return;
        };
        let Some((id, info, values, deadline)) = open.pending.take() else {
            return;
        };
        let ack = acknowledgement_at(&self.brokers, id, &info);
        match ack {
            Some(Acknowledgement::Done) => open.acked.extend(values),
            Some(Acknowledgement::Wait) if now <= deadline => {
                open.pending = Some((id, info, values, deadline));
            }
            _ => {
                open.doubtful.extend(values);
                open.ending = Some(MarkerKind::Abort);
            }
        }
    }

    fn append_txn_marker(&mut self) {
        let Some(open) = self.txn.open.as_mut() else {
            return;
        };
        let kind = *open.ending.get_or_insert_with(|| {
            if !open.doubtful.is_empty() || self.rng.below(4) == 0 {
                MarkerKind::Abort
            } else {
                MarkerKind::Commit
            }
        });
        let marker = TxnMarker {
            producer_id: ProducerId(PRODUCER_ID),
            producer_epoch: ProducerEpoch(self.txn.epoch),
            coordinator_epoch: 0,
            kind,
        };
        let id = self.rng.below(self.brokers.len() as u64) as i32;
        let now = self.now;
        let Some((replica, may_lead)) = self.running_replica(id) else {
            return;
        };
        if let Ok(info) = replica.append_marker(&marker, now, may_lead) {
            if let Some(open) = self.txn.open.as_mut() {
                open.marker = Some((id, info, now + ACK_TIMEOUT_MS));
            }
            self.after_hw_change(id);
        }
    }

    /// The marker acknowledged ends the transaction; failed or late, it is re-sent.
    fn settle_marker(&mut self) {
        let now = self.now;
        let Some(open) = self.txn.open.as_mut() else {
            return;
        };
        let Some((id, info, deadline)) = open.marker.take() else {
            return;
        };
        let ack = acknowledgement_at(&self.brokers, id, &info);
        match ack {
            Some(Acknowledgement::Done) => {
                let Some(open) = self.txn.open.take() else {
                    return;
                };
                match open.ending {
                    Some(MarkerKind::Commit) => {
                        self.txn.committed.push((info.base_offset, open.acked));
                        self.stats.txn_commits += 1;
                    }
                    _ => {
                        self.txn.aborted.extend(open.acked);
                        self.txn.aborted.extend(open.doubtful);
                        self.stats.txn_aborts += 1;
                    }
                }
            }
            Some(Acknowledgement::Wait) if now <= deadline => {
                open.marker = Some((id, info, deadline));
            }
            _ => {} // re-sent by a later step
        }
    }

    /// What a read_committed reader of broker `id` sees: the transactional values
    /// below its last stable offset, aborted transactions filtered out, each with its
    /// transaction's epoch; and the epochs whose COMMIT marker is below that offset.
    fn read_committed_values(&self, id: usize) -> Option<ReadCommitted> {
        let replica = self.brokers[id].replica.as_ref()?;
        let log = replica.log();
        let lso = replica.last_stable_offset().0;
        let hw = replica.high_watermark().0;
        assert!(lso <= hw, "{}: LSO {lso} above HW {hw}", self.ctx());
        let mut filter = CommittedFilter::new(log.producers.aborted_between(log.log_start, lso));
        let mut read = ReadCommitted {
            lso,
            ..ReadCommitted::default()
        };
        for (base, bytes) in &log.batches {
            if *base >= lso {
                break;
            }
            let Ok(header) = BatchHeader::parse_checked(bytes) else {
                continue;
            };
            if let Some(marker) = TxnMarker::decode(&header) {
                if marker.kind == MarkerKind::Commit {
                    read.commit_epochs.insert(marker.producer_epoch.0);
                }
            }
            if !filter.keep(&header) {
                continue;
            }
            for record in header.records().unwrap_or_default() {
                if let Some(value) = record.value.and_then(|v| v.try_into().ok()) {
                    let value = u64::from_be_bytes(value);
                    if value & TXN_VALUE_BIT != 0 {
                        read.seen.insert(value, header.producer_epoch());
                    }
                }
            }
        }
        Some(read)
    }

    /// The read_committed properties on every running leader.
    pub(super) fn check_transactions(&self) {
        for id in 0..self.brokers.len() {
            if !self.brokers[id].running() || self.brokers[id].leading_epoch().is_none() {
                continue;
            }
            let Some(ReadCommitted {
                lso,
                seen,
                commit_epochs,
            }) = self.read_committed_values(id)
            else {
                continue;
            };
            let ctx = self.ctx();
            if let Some(v) = seen.keys().find(|v| self.txn.aborted.contains(v)) {
                panic!("{ctx}: leader {id} shows aborted value {v:#x} below its LSO {lso}");
            }
            if let Some((v, epoch)) = seen.iter().find(|(_, e)| !commit_epochs.contains(e)) {
                panic!(
                    "{ctx}: leader {id} shows {v:#x} of transaction {epoch} below its LSO {lso}, \
                     which holds no COMMIT of it"
                );
            }
            for (marker, values) in &self.txn.committed {
                if *marker < lso {
                    if let Some(v) = values.iter().find(|v| !seen.contains_key(v)) {
                        panic!(
                            "{ctx}: leader {id} lost committed value {v:#x} (marker at {marker}, LSO {lso})"
                        );
                    }
                }
            }
        }
    }

    /// After settling: no transaction open, every replica stable at its end and naming
    /// the same aborted transactions as the leader.
    pub(super) fn verify_transactions_settled(&self, leader: usize) {
        let ctx = self.ctx();
        assert!(
            self.txn.open.is_none(),
            "{ctx}: a transaction never ended: {:?}",
            self.txn.open
        );
        self.check_transactions();
        let aborted_list = |id: usize| {
            let log = self.brokers[id].log();
            log.producers
                .aborted_between(log.log_start, log.end())
                .into_iter()
                .map(|t| (t.producer_id, t.first_offset, t.last_offset))
                .collect::<Vec<_>>()
        };
        let leader_aborts = aborted_list(leader);
        for &id in &self.store.replicas {
            let b = &self.brokers[id as usize];
            let Some(replica) = b.replica.as_ref() else {
                continue;
            };
            assert_eq!(
                replica.last_stable_offset(),
                Offset(b.log().end()),
                "{ctx}: replica {id} has a transaction open after settling"
            );
            assert_eq!(
                aborted_list(id as usize),
                leader_aborts,
                "{ctx}: replica {id} names other aborted transactions than leader {leader}"
            );
        }
    }
}

/// Where an acks=all write at broker `id` stands; `None` while that broker is down.
fn acknowledgement_at(brokers: &[Broker], id: i32, info: &AppendInfo) -> Option<Acknowledgement> {
    let b = &brokers[id as usize];
    b.replica
        .as_ref()
        .filter(|_| b.running())
        .map(|r| r.acknowledgement(info, Acks::All))
}
