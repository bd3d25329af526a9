//! Producer state of one partition, as Kafka keeps it: for each producer id its epoch,
//! the last five batches' sequence ranges, and the first offset of its open
//! transaction; the partition's open transactions (for the last stable offset) and
//! the aborted ones (for read_committed fetches).
//!
//! The state is a pure function of the log: `record` is called for every appended
//! batch that carries a producer id, markers included, on the produce path, on a
//! follower's replicated append, and again on replay at start-up and after a
//! truncation. A snapshot taken at segment roll bounds the replay to the newest
//! segment; it carries the open and aborted transactions, which is what lets a
//! transaction that spans a roll and a restart still commit, and why tern keeps no
//! separate per-segment transaction index: the aborted list is rebuilt with the rest.

use std::collections::{BTreeSet, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::batch::BatchHeader;
use super::txn::{AbortedTxn, MarkerKind, TxnMarker};

/// Batches remembered per producer for duplicate detection (Kafka's limit).
pub const BATCHES_PER_PRODUCER: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchMetadata {
    pub first_sequence: i32,
    pub last_sequence: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerEntry {
    pub epoch: i16,
    pub batches: VecDeque<BatchMetadata>,
    /// Max timestamp of the producer's newest batch, for expiry.
    #[serde(default)]
    pub last_timestamp: i64,
    /// Offset of the producer's first batch in its open transaction on this partition.
    #[serde(default)]
    pub txn_first_offset: Option<i64>,
    /// Epoch of the coordinator that wrote this producer's last marker here.
    #[serde(default)]
    pub coordinator_epoch: i32,
}

/// A transaction whose marker is in the log: `[first_offset, marker]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct CompletedTxn {
    first_offset: i64,
    marker: i64,
}

/// How a batch from an idempotent producer relates to what the log already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// New data in sequence: append it.
    Append,
    /// A retry of a batch already in the log: answer with its original offsets.
    Duplicate { base_offset: i64, last_offset: i64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("producer {producer_id} epoch {epoch} is older than the current epoch {current}")]
    StaleEpoch {
        producer_id: i64,
        epoch: i16,
        current: i16,
    },
    #[error("producer {producer_id}: expected sequence {expected}, got {got}")]
    OutOfOrder {
        producer_id: i64,
        expected: i32,
        got: i32,
    },
    /// A non-transactional batch from a producer with an open transaction here
    /// (Kafka's INVALID_TXN_STATE, "Expected transactional write from producer").
    #[error("producer {producer_id} has an open transaction: expected a transactional write")]
    NotTransactional { producer_id: i64 },
    /// A transactional write whose transaction ended between its verification with
    /// the coordinator and its append (KIP-890; Kafka's INVALID_TXN_STATE).
    #[error("producer {producer_id} has no transaction here any more")]
    NotInTransaction { producer_id: i64 },
    /// A marker from a coordinator older than the one that wrote this producer's last
    /// marker here (Kafka's TRANSACTION_COORDINATOR_FENCED).
    #[error("producer {producer_id}: marker of coordinator epoch {epoch} is older than {current}")]
    CoordinatorFenced {
        producer_id: i64,
        epoch: i32,
        current: i32,
    },
}

/// Next sequence after `last`, wrapping like Kafka's `DefaultRecordBatch.incrementSequence`.
fn next_sequence(last: i32) -> i32 {
    if last == i32::MAX {
        0
    } else {
        last + 1
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerStateTable {
    producers: HashMap<i64, ProducerEntry>,
    /// Open transactions: `(first offset, producer id)`.
    #[serde(default)]
    ongoing: BTreeSet<(i64, i64)>,
    /// Transactions with a marker, in marker order, until the high watermark passes
    /// the marker ([`Self::forget_replicated`]): until then they stay unstable, as in
    /// Kafka (`unreplicatedTxns`), so no read_committed consumer reads a transaction
    /// whose marker a failover could still take back.
    #[serde(default)]
    completed: VecDeque<CompletedTxn>,
    /// Aborted transactions in marker order, down to the log start.
    #[serde(default)]
    aborted: VecDeque<AbortedTxn>,
    /// KIP-890's verification guards: a producer's transactional write that would open
    /// a transaction here is appended only if the guard taken before the coordinator
    /// confirmed the partition is still in place; a marker for the producer clears it,
    /// so a write verified for a transaction that ended meanwhile cannot open a new one
    /// that no coordinator knows (a hanging transaction). In memory only.
    #[serde(skip)]
    verifications: HashMap<i64, u64>,
    #[serde(skip)]
    next_verification: u64,
}

impl ProducerStateTable {
    /// Checks a batch from producer `header.producer_id()` against the state.
    pub fn check(&self, header: &BatchHeader<'_>) -> Result<SequenceCheck, SequenceError> {
        let (producer_id, epoch) = (header.producer_id(), header.producer_epoch());
        let (first, last) = (header.base_sequence(), header.last_sequence());
        if first < 0 {
            // Offsets committed in a transaction carry no sequence: only the epoch counts.
            return match self.producers.get(&producer_id) {
                Some(entry) if epoch < entry.epoch => Err(SequenceError::StaleEpoch {
                    producer_id,
                    epoch,
                    current: entry.epoch,
                }),
                _ => Ok(SequenceCheck::Append),
            };
        }
        let Some(entry) = self.producers.get(&producer_id) else {
            return if first == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(SequenceError::OutOfOrder {
                    producer_id,
                    expected: 0,
                    got: first,
                })
            };
        };
        if epoch < entry.epoch {
            return Err(SequenceError::StaleEpoch {
                producer_id,
                epoch,
                current: entry.epoch,
            });
        }
        if epoch == entry.epoch && !header.is_transactional() && entry.txn_first_offset.is_some() {
            return Err(SequenceError::NotTransactional { producer_id });
        }
        if epoch > entry.epoch {
            // A bumped epoch restarts the sequence at zero.
            return if first == 0 {
                Ok(SequenceCheck::Append)
            } else {
                Err(SequenceError::OutOfOrder {
                    producer_id,
                    expected: 0,
                    got: first,
                })
            };
        }
        if let Some(seen) = entry
            .batches
            .iter()
            .find(|b| b.first_sequence == first && b.last_sequence == last)
        {
            return Ok(SequenceCheck::Duplicate {
                base_offset: seen.base_offset,
                last_offset: seen.last_offset,
            });
        }
        let expected = entry
            .batches
            .back()
            .map_or(0, |b| next_sequence(b.last_sequence));
        if first == expected {
            Ok(SequenceCheck::Append)
        } else {
            Err(SequenceError::OutOfOrder {
                producer_id,
                expected,
                got: first,
            })
        }
    }

    /// Checks a marker against the producer's state (Kafka's `appendEndTxnMarker`):
    /// its producer epoch may not be older than the producer's, nor its coordinator
    /// epoch older than the last marker's here.
    pub fn check_marker(&self, marker: &TxnMarker) -> Result<(), SequenceError> {
        let producer_id = marker.producer_id.0;
        let Some(entry) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if marker.producer_epoch.0 < entry.epoch {
            return Err(SequenceError::StaleEpoch {
                producer_id,
                epoch: marker.producer_epoch.0,
                current: entry.epoch,
            });
        }
        if marker.coordinator_epoch < entry.coordinator_epoch {
            return Err(SequenceError::CoordinatorFenced {
                producer_id,
                epoch: marker.coordinator_epoch,
                current: entry.coordinator_epoch,
            });
        }
        Ok(())
    }

    /// Records a batch appended at `base_offset` (the header's own base offset field
    /// may still be the producer's, since only the copy in the log is rewritten).
    pub fn record(&mut self, header: &BatchHeader<'_>, base_offset: i64) {
        if !header.has_producer_id() {
            return;
        }
        if header.is_control() {
            if let Some(marker) = TxnMarker::decode(header) {
                self.end_transaction(&marker, base_offset, header.max_timestamp());
            }
            return;
        }
        // Offsets committed in a transaction come with no sequence; other batches
        // without one are no idempotent producer's.
        if header.base_sequence() < 0 && !header.is_transactional() {
            return;
        }
        let producer_id = header.producer_id();
        let entry = self.producers.entry(producer_id).or_default();
        if header.producer_epoch() != entry.epoch {
            entry.epoch = header.producer_epoch();
            entry.batches.clear();
        }
        entry.last_timestamp = entry.last_timestamp.max(header.max_timestamp());
        if header.is_transactional() && entry.txn_first_offset.is_none() {
            entry.txn_first_offset = Some(base_offset);
            self.ongoing.insert((base_offset, producer_id));
        }
        if header.base_sequence() < 0 {
            return;
        }
        entry.batches.push_back(BatchMetadata {
            first_sequence: header.base_sequence(),
            last_sequence: header.last_sequence(),
            base_offset,
            last_offset: base_offset + i64::from(header.last_offset_delta()),
        });
        while entry.batches.len() > BATCHES_PER_PRODUCER {
            entry.batches.pop_front();
        }
    }

    /// A marker at `offset` ends the producer's open transaction here (a marker for a
    /// producer with none changes no offsets: Kafka emits no completed transaction).
    fn end_transaction(&mut self, marker: &TxnMarker, offset: i64, timestamp: i64) {
        let producer_id = marker.producer_id.0;
        self.verifications.remove(&producer_id);
        let entry = self.producers.entry(producer_id).or_default();
        if let Some(first_offset) = entry.txn_first_offset.take() {
            self.ongoing.remove(&(first_offset, producer_id));
            self.completed.push_back(CompletedTxn {
                first_offset,
                marker: offset,
            });
            if marker.kind == MarkerKind::Abort {
                self.aborted.push_back(AbortedTxn {
                    producer_id,
                    first_offset,
                    last_offset: offset,
                });
            }
        }
        if marker.producer_epoch.0 != entry.epoch {
            entry.epoch = marker.producer_epoch.0;
            entry.batches.clear();
        }
        entry.coordinator_epoch = marker.coordinator_epoch;
        entry.last_timestamp = entry.last_timestamp.max(timestamp);
    }

    /// The first offset a read_committed consumer may not read yet, given the high
    /// watermark: the start of the oldest open transaction, or of a completed one
    /// whose marker is not below the high watermark yet. `None`: nothing is unstable.
    pub fn first_unstable_offset(&self, high_watermark: i64) -> Option<i64> {
        let open = self.ongoing.first().map(|&(first, _)| first);
        let unreplicated = self
            .completed
            .iter()
            .rev()
            .take_while(|txn| txn.marker >= high_watermark)
            .map(|txn| txn.first_offset)
            .min();
        match (open, unreplicated) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Forgets completed transactions whose marker the high watermark has passed.
    pub fn forget_replicated(&mut self, high_watermark: i64) {
        while self
            .completed
            .front()
            .is_some_and(|txn| txn.marker < high_watermark)
        {
            self.completed.pop_front();
        }
    }

    /// The aborted transactions with data in `[from, to)`, oldest marker first.
    pub fn aborted_between(&self, from: i64, to: i64) -> Vec<AbortedTxn> {
        let start = self.aborted.partition_point(|txn| txn.last_offset < from);
        self.aborted
            .range(start..)
            .filter(|txn| txn.first_offset < to)
            .copied()
            .collect()
    }

    /// Whether producer `producer_id` has a transaction open here.
    pub fn has_open_transaction(&self, producer_id: i64) -> bool {
        self.producers
            .get(&producer_id)
            .is_some_and(|e| e.txn_first_offset.is_some())
    }

    /// Takes a verification guard for the producer (see `verifications`).
    pub fn begin_verification(&mut self, producer_id: i64) -> u64 {
        self.next_verification += 1;
        self.verifications
            .insert(producer_id, self.next_verification);
        self.next_verification
    }

    /// Whether a transactional write of the producer may go in: it has a transaction
    /// open here, or its guard `token` is still in place.
    pub fn verification_holds(&self, producer_id: i64, token: u64) -> bool {
        self.has_open_transaction(producer_id)
            || self.verifications.get(&producer_id) == Some(&token)
    }

    /// Open transactions: `(producer id, first offset)`, oldest first.
    pub fn open_transactions(&self) -> Vec<(i64, i64)> {
        self.ongoing
            .iter()
            .map(|&(first, pid)| (pid, first))
            .collect()
    }

    /// Each producer's state, for DescribeProducers.
    pub fn producers(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> {
        self.producers.iter().map(|(id, entry)| (*id, entry))
    }

    /// Drops aborted transactions the cleaner found with no data left
    /// ([`super::txn::MarkerFate::Empty`]).
    pub fn forget_aborted(&mut self, txns: &[AbortedTxn]) {
        self.aborted.retain(|txn| !txns.contains(txn));
    }

    /// Drops what lies wholly below the new log start: aborted transactions whose
    /// marker is gone. Open transactions stay: their producers must still end them.
    pub fn forget_below(&mut self, log_start: i64) {
        while self
            .aborted
            .front()
            .is_some_and(|txn| txn.last_offset < log_start)
        {
            self.aborted.pop_front();
        }
        while self
            .completed
            .front()
            .is_some_and(|txn| txn.marker < log_start)
        {
            self.completed.pop_front();
        }
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Forgets producers whose newest batch is older than `max_age_ms`
    /// (`producer.id.expiration.ms`); returns how many were dropped. A forgotten
    /// producer that comes back must start again at sequence 0, as in Kafka. A producer
    /// with an open transaction here never expires: its marker is still to come.
    pub fn expire(&mut self, now_ms: i64, max_age_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers.retain(|_, entry| {
            entry.txn_first_offset.is_some() || entry.last_timestamp >= now_ms - max_age_ms
        });
        before - self.producers.len()
    }
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::batch::{assign_offsets, BatchHeader};
    use super::super::records::testing::{encode_batch, TestRecord};
    use super::*;

    fn batch(pid: i64, epoch: i16, seq: i32, count: usize, base_offset: i64) -> Vec<u8> {
        let records = vec![TestRecord::default(); count];
        let mut b = encode_batch(&records, 0, (pid, epoch, seq));
        assign_offsets(&mut b, base_offset, 0, None);
        b
    }

    fn header(b: &[u8]) -> BatchHeader<'_> {
        BatchHeader::parse_checked(b).expect("valid test batch")
    }

    #[test]
    fn in_sequence_then_duplicate_then_gap() {
        let mut table = ProducerStateTable::default();
        let first = batch(7, 0, 0, 3, 0);
        assert_eq!(table.check(&header(&first)), Ok(SequenceCheck::Append));
        table.record(&header(&first), header(&first).base_offset());
        assert_eq!(
            table.check(&header(&first)),
            Ok(SequenceCheck::Duplicate {
                base_offset: 0,
                last_offset: 2
            })
        );
        let next = batch(7, 0, 3, 1, 3);
        assert_eq!(table.check(&header(&next)), Ok(SequenceCheck::Append));
        let gap = batch(7, 0, 5, 1, 3);
        assert!(matches!(
            table.check(&header(&gap)),
            Err(SequenceError::OutOfOrder { expected: 3, .. })
        ));
    }

    #[test]
    fn epochs_fence_and_reset() {
        let mut table = ProducerStateTable::default();
        let first = batch(7, 2, 0, 1, 0);
        table.record(&header(&first), 0);
        assert!(matches!(
            table.check(&header(&batch(7, 1, 1, 1, 1))),
            Err(SequenceError::StaleEpoch { current: 2, .. })
        ));
        assert_eq!(
            table.check(&header(&batch(7, 3, 0, 1, 1))),
            Ok(SequenceCheck::Append)
        );
        assert!(table.check(&header(&batch(7, 3, 4, 1, 1))).is_err());
        assert!(
            table.check(&header(&batch(8, 0, 9, 1, 1))).is_err(),
            "unknown producer must start at 0"
        );
    }

    #[test]
    fn idle_producers_expire() {
        let mut table = ProducerStateTable::default();
        let records = vec![TestRecord::default(); 1];
        let mut old = encode_batch(&records, 1_000, (1, 0, 0));
        assign_offsets(&mut old, 0, 0, None);
        let mut new = encode_batch(&records, 90_000, (2, 0, 0));
        assign_offsets(&mut new, 1, 0, None);
        table.record(&header(&old), header(&old).base_offset());
        table.record(&header(&new), header(&new).base_offset());
        assert_eq!(table.expire(100_000, 50_000), 1);
        assert_eq!(table.len(), 1);
        assert!(
            table.check(&header(&old)).is_ok(),
            "an expired producer starts over at sequence 0"
        );
    }

    #[test]
    fn keeps_only_five_batches() {
        let mut table = ProducerStateTable::default();
        for i in 0..7 {
            let b = batch(1, 0, i, 1, i64::from(i));
            table.record(&header(&b), i64::from(i));
        }
        assert_eq!(table.producers[&1].batches.len(), BATCHES_PER_PRODUCER);
        // The oldest batches are forgotten: a retry of seq 0 is now out of order.
        assert!(table.check(&header(&batch(1, 0, 0, 1, 0))).is_err());
    }

    /// Transactional batches, markers and high watermarks from a few producers in
    /// seeded random order, against a brute-force reading of the same log: the first
    /// unstable offset is the first offset of the oldest transaction without a marker
    /// below the high watermark, and the aborted transactions named for a range are
    /// exactly the aborted ones with data in it.
    #[test]
    fn random_transactions_match_a_brute_force_reading_of_the_log() {
        use super::super::txn::{MarkerKind, TxnMarker, TRANSACTIONAL_BIT};
        use crate::model::{ProducerEpoch, ProducerId};
        for seed in 0..500u64 {
            let mut rng = TestRng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut table = ProducerStateTable::default();
            let mut txns: Vec<ModelTxn> = Vec::new();
            let mut open: HashMap<i64, usize> = HashMap::new();
            let mut sequences: HashMap<i64, i32> = HashMap::new();
            let mut end = 0i64;
            let mut high_watermark = 0i64;
            for _ in 0..80 {
                let pid = rng.below(4) as i64;
                if rng.below(3) == 0 && open.contains_key(&pid) {
                    let kind = if rng.below(2) == 0 {
                        MarkerKind::Commit
                    } else {
                        MarkerKind::Abort
                    };
                    let marker = TxnMarker {
                        producer_id: ProducerId(pid),
                        producer_epoch: ProducerEpoch(0),
                        coordinator_epoch: 0,
                        kind,
                    };
                    let mut batch = marker.encode(1);
                    assign_offsets(&mut batch, end, 0, None);
                    table.record(&header(&batch), end);
                    if let Some(i) = open.remove(&pid) {
                        txns[i].2 = Some((end, kind));
                    }
                    end += 1;
                } else {
                    let seq = *sequences.get(&pid).unwrap_or(&0);
                    let count = 1 + rng.below(3) as i32;
                    let mut builder = super::super::records::BatchBuilder::new()
                        .idempotent(pid, 0, seq)
                        .with_attributes(TRANSACTIONAL_BIT);
                    for _ in 0..count {
                        builder.push(1, Some(b"k"), Some(b"v"), &[]);
                    }
                    let mut batch = builder.build();
                    assign_offsets(&mut batch, end, 0, None);
                    assert_eq!(
                        table.check(&header(&batch)),
                        Ok(SequenceCheck::Append),
                        "seed {seed}"
                    );
                    table.record(&header(&batch), end);
                    sequences.insert(pid, seq + count);
                    open.entry(pid).or_insert_with(|| {
                        txns.push((pid, end, None));
                        txns.len() - 1
                    });
                    end += i64::from(count);
                }
                high_watermark = (high_watermark + rng.below(4) as i64).min(end);
                if rng.below(4) == 0 {
                    table.forget_replicated(high_watermark);
                }
                let expected = txns
                    .iter()
                    .filter(|(_, _, ended)| {
                        ended.is_none_or(|(marker, _)| marker >= high_watermark)
                    })
                    .map(|(_, first, _)| *first)
                    .min();
                assert_eq!(
                    table.first_unstable_offset(high_watermark),
                    expected,
                    "seed {seed}: first unstable offset at high watermark {high_watermark}"
                );
                let from = rng.below(end.max(1) as u64) as i64;
                let to = from + rng.below(10) as i64;
                let mut named: Vec<(i64, i64)> = table
                    .aborted_between(from, to)
                    .iter()
                    .map(|t| (t.producer_id, t.first_offset))
                    .collect();
                let mut brute: Vec<(i64, i64)> = txns
                    .iter()
                    .filter_map(|(pid, first, ended)| match ended {
                        Some((marker, MarkerKind::Abort)) if *marker >= from && *first < to => {
                            Some((*pid, *first))
                        }
                        _ => None,
                    })
                    .collect();
                named.sort();
                brute.sort();
                assert_eq!(
                    named, brute,
                    "seed {seed}: aborted transactions in [{from}, {to})"
                );
            }
        }
    }

    /// (producer, first offset, marker offset and kind once ended)
    type ModelTxn = (i64, i64, Option<(i64, super::super::txn::MarkerKind)>);

    /// xorshift64*, seeded: this module imports nothing of tern's but `model`.
    struct TestRng(u64);

    impl TestRng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n.max(1)
        }
    }
}
