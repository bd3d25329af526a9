//! Transaction markers: the control batches a transaction coordinator writes to every
//! partition of a transaction when it commits or aborts it, in Kafka's format.
//!
//! A marker batch has the transactional and control attribute bits, the producer's id
//! and epoch, no sequence (-1), and one record whose key is `(version: i16 = 0,
//! type: i16)` (Kafka's `ControlRecordType`: 0 ABORT, 1 COMMIT) and whose value is
//! `(version: i16 = 0, coordinator_epoch: i32)` (`EndTxnMarker`). Consumers never see
//! the record: clients skip control batches.

use serde::{Deserialize, Serialize};

use super::batch::BatchHeader;
use super::records::BatchBuilder;
use crate::model::{ProducerEpoch, ProducerId};

/// Attribute bit of a transactional batch.
pub const TRANSACTIONAL_BIT: i16 = 1 << 4;
/// Attribute bit of a control batch.
pub const CONTROL_BIT: i16 = 1 << 5;

/// How a transaction ended (Kafka's `ControlRecordType`, by its wire number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MarkerKind {
    Abort,
    Commit,
}

impl MarkerKind {
    fn wire(self) -> i16 {
        match self {
            MarkerKind::Abort => 0,
            MarkerKind::Commit => 1,
        }
    }

    fn from_wire(value: i16) -> Option<Self> {
        match value {
            0 => Some(MarkerKind::Abort),
            1 => Some(MarkerKind::Commit),
            _ => None,
        }
    }

    pub fn from_committed(committed: bool) -> Self {
        if committed {
            MarkerKind::Commit
        } else {
            MarkerKind::Abort
        }
    }
}

/// The end of one producer's transaction on one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// The coordinator's epoch (its `__transaction_state` partition's leader epoch): a
    /// marker from a deposed coordinator is refused once a newer one wrote here.
    pub coordinator_epoch: i32,
    pub kind: MarkerKind,
}

impl TxnMarker {
    /// The control batch carrying this marker, stamped `timestamp`.
    pub fn encode(&self, timestamp: i64) -> Vec<u8> {
        let mut key = Vec::with_capacity(4);
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&self.kind.wire().to_be_bytes());
        let mut value = Vec::with_capacity(6);
        value.extend_from_slice(&0i16.to_be_bytes());
        value.extend_from_slice(&self.coordinator_epoch.to_be_bytes());
        let mut builder = BatchBuilder::new()
            .idempotent(self.producer_id.0, self.producer_epoch.0, -1)
            .with_attributes(TRANSACTIONAL_BIT | CONTROL_BIT);
        builder.push(timestamp, Some(&key), Some(&value), &[]);
        builder.build()
    }

    /// The marker a control batch carries; `None` for any other batch or a control
    /// record this broker does not know (Kafka skips unknown control types too).
    pub fn decode(header: &BatchHeader<'_>) -> Option<Self> {
        if !header.is_control() {
            return None;
        }
        let records = header.records()?;
        let record = records.first()?;
        let key = record.key?;
        let kind = MarkerKind::from_wire(i16::from_be_bytes([*key.get(2)?, *key.get(3)?]))?;
        let value = record.value.unwrap_or_default();
        let coordinator_epoch = match value.get(2..6) {
            Some(raw) => i32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]),
            None => 0,
        };
        Some(Self {
            producer_id: ProducerId(header.producer_id()),
            producer_epoch: ProducerEpoch(header.producer_epoch()),
            coordinator_epoch,
            kind,
        })
    }
}

/// An aborted transaction on one partition: its data lies in `[first_offset,
/// last_offset]` (the marker's offset), and read_committed consumers drop that
/// producer's records in the range (Fetch's `aborted_transactions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
    pub last_offset: i64,
}

/// A read_committed reader's filter over batches read with their aborted transactions
/// (as Kafka's consumer applies Fetch's `aborted_transactions`): a transactional batch
/// of a producer whose aborted transaction has started by then is dropped, up to that
/// producer's ABORT marker; control batches never reach the reader.
#[derive(Debug, Default)]
pub struct CommittedFilter {
    /// Aborted transactions not started yet, latest first (popped from the end).
    pending: Vec<AbortedTxn>,
    aborting: std::collections::HashSet<i64>,
}

impl CommittedFilter {
    pub fn new(mut aborted: Vec<AbortedTxn>) -> Self {
        aborted.sort_by_key(|txn| std::cmp::Reverse(txn.first_offset));
        Self {
            pending: aborted,
            aborting: Default::default(),
        }
    }

    /// Whether `header`'s records reach a read_committed reader; batches in offset order.
    pub fn keep(&mut self, header: &BatchHeader<'_>) -> bool {
        while self
            .pending
            .last()
            .is_some_and(|txn| txn.first_offset <= header.last_offset())
        {
            if let Some(txn) = self.pending.pop() {
                self.aborting.insert(txn.producer_id);
            }
        }
        if header.is_control() {
            if TxnMarker::decode(header).is_some_and(|m| m.kind == MarkerKind::Abort) {
                self.aborting.remove(&header.producer_id());
            }
            return false;
        }
        !(header.is_transactional() && self.aborting.contains(&header.producer_id()))
    }
}

/// The cleaner's walk through a compacted log's transactions, batch by batch in
/// offset order (Kafka's `CleanedTransactionMetadata`): it says which data batches
/// belong to aborted transactions (their records go) and which markers end a
/// transaction that has no data left before them. Such a marker is kept for
/// `delete.retention.ms` more (a reader that has seen the data must still see it end)
/// and then goes; an aborted transaction with no data left needs no entry in the
/// aborted list any more.
#[derive(Debug, Default)]
pub struct TxnCleaning {
    /// Aborted transactions not started yet, latest first (popped from the end).
    pending: Vec<AbortedTxn>,
    /// Producer → its started aborted transaction and whether data of it was seen.
    aborting: std::collections::HashMap<i64, (AbortedTxn, bool)>,
    /// Producers with committed (or open) transactional data seen since their last marker.
    committing: std::collections::HashSet<i64>,
}

/// What the cleaner may do with a marker ([`TxnCleaning::on_marker`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerFate {
    /// Data of its transaction is still in the log before it: it stays as it is.
    Keep,
    /// No data of its transaction is left: it may go after `delete.retention.ms`;
    /// `forget` is the aborted transaction the aborted list no longer needs.
    Empty { forget: Option<AbortedTxn> },
}

impl TxnCleaning {
    /// `aborted`: the aborted transactions with data in the section to be walked.
    pub fn new(mut aborted: Vec<AbortedTxn>) -> Self {
        aborted.sort_by_key(|txn| std::cmp::Reverse(txn.first_offset));
        Self {
            pending: aborted,
            ..Self::default()
        }
    }

    fn start_up_to(&mut self, offset: i64) {
        while self
            .pending
            .last()
            .is_some_and(|txn| txn.first_offset <= offset)
        {
            if let Some(txn) = self.pending.pop() {
                self.aborting.entry(txn.producer_id).or_insert((txn, false));
            }
        }
    }

    /// A data batch: whether it belongs to an aborted transaction (then its records go).
    pub fn is_aborted_data(&mut self, header: &BatchHeader<'_>) -> bool {
        self.start_up_to(header.last_offset());
        if !header.is_transactional() {
            return false;
        }
        let producer = header.producer_id();
        match self.aborting.get_mut(&producer) {
            Some((_, seen)) => {
                *seen = true;
                true
            }
            None => {
                self.committing.insert(producer);
                false
            }
        }
    }

    /// A control batch: whether its transaction still has data before it.
    pub fn on_marker(&mut self, header: &BatchHeader<'_>) -> MarkerFate {
        self.start_up_to(header.last_offset());
        let producer = header.producer_id();
        match TxnMarker::decode(header).map(|m| m.kind) {
            Some(MarkerKind::Abort) => match self.aborting.remove(&producer) {
                Some((_, true)) => MarkerFate::Keep,
                Some((txn, false)) => MarkerFate::Empty { forget: Some(txn) },
                None => MarkerFate::Empty { forget: None },
            },
            Some(MarkerKind::Commit) => {
                if self.committing.remove(&producer) {
                    MarkerFate::Keep
                } else {
                    MarkerFate::Empty { forget: None }
                }
            }
            // A control batch this broker cannot read stays.
            None => MarkerFate::Keep,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-record transactional batch of producer `pid` at `offset`.
    fn txn(pid: i64, offset: i64) -> Vec<u8> {
        let mut builder = BatchBuilder::new()
            .idempotent(pid, 0, 0)
            .with_attributes(TRANSACTIONAL_BIT);
        builder.push(1, Some(b"k"), Some(b"v"), &[]);
        let mut batch = builder.build();
        super::super::batch::assign_offsets(&mut batch, offset, 0, None);
        batch
    }

    /// Producer `pid`'s marker of `kind` at `offset`.
    fn marker(pid: i64, kind: MarkerKind, offset: i64) -> Vec<u8> {
        let mut batch = TxnMarker {
            producer_id: ProducerId(pid),
            producer_epoch: ProducerEpoch(0),
            coordinator_epoch: 0,
            kind,
        }
        .encode(1);
        super::super::batch::assign_offsets(&mut batch, offset, 0, None);
        batch
    }

    #[test]
    fn a_marker_round_trips_through_its_control_batch() {
        for kind in [MarkerKind::Abort, MarkerKind::Commit] {
            let marker = TxnMarker {
                producer_id: ProducerId(42),
                producer_epoch: ProducerEpoch(3),
                coordinator_epoch: 7,
                kind,
            };
            let batch = marker.encode(1_000);
            let header = BatchHeader::parse_checked(&batch).expect("valid batch");
            assert!(header.is_control() && header.is_transactional());
            assert_eq!(header.base_sequence(), -1);
            assert_eq!(header.record_count(), 1);
            assert_eq!(TxnMarker::decode(&header), Some(marker));
        }
    }

    #[test]
    fn the_committed_filter_drops_aborted_batches_and_every_marker() {
        // pid 1 aborts [0, 3], pid 2 commits [1, 2]; pid 1 writes again at 4.
        let log = [
            txn(1, 0),
            txn(2, 1),
            marker(2, MarkerKind::Commit, 2),
            marker(1, MarkerKind::Abort, 3),
            txn(1, 4),
        ];
        let mut filter = CommittedFilter::new(vec![AbortedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 3,
        }]);
        let kept: Vec<i64> = log
            .iter()
            .map(|b| BatchHeader::parse_checked(b).expect("valid"))
            .filter(|h| filter.keep(h))
            .map(|h| h.base_offset())
            .collect();
        assert_eq!(kept, vec![1, 4]);
    }

    #[test]
    fn a_marker_is_empty_once_no_data_of_its_transaction_is_left() {
        let aborted = AbortedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 3,
        };
        let fates = |log: &[Vec<u8>]| {
            let mut walk = TxnCleaning::new(vec![aborted]);
            log.iter()
                .map(|b| BatchHeader::parse_checked(b).expect("valid"))
                .map(|h| {
                    if h.is_control() {
                        format!("{:?}", walk.on_marker(&h))
                    } else {
                        format!("aborted={}", walk.is_aborted_data(&h))
                    }
                })
                .collect::<Vec<_>>()
        };
        // With its data: pid 1's abort marker and pid 2's commit marker stay.
        let full = [
            txn(1, 0),
            txn(2, 1),
            marker(2, MarkerKind::Commit, 2),
            marker(1, MarkerKind::Abort, 3),
        ];
        assert_eq!(
            fates(&full),
            ["aborted=true", "aborted=false", "Keep", "Keep"]
        );
        // The data gone (an earlier pass dropped it): both markers are empty, and the
        // aborted transaction is one to forget.
        let cleaned = [
            marker(2, MarkerKind::Commit, 2),
            marker(1, MarkerKind::Abort, 3),
        ];
        assert_eq!(
            fates(&cleaned),
            [
                "Empty { forget: None }".to_string(),
                format!("Empty {{ forget: Some({aborted:?}) }}")
            ]
        );
    }

    #[test]
    fn a_data_batch_is_no_marker() {
        let mut builder = BatchBuilder::new();
        builder.push(1, Some(b"\0\0\0\x01"), None, &[]);
        let batch = builder.build();
        let header = BatchHeader::parse_checked(&batch).expect("valid batch");
        assert_eq!(TxnMarker::decode(&header), None);
    }
}
