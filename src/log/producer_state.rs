//! Idempotent-producer state of one partition: for each producer id, its epoch and the
//! last five batches' sequence ranges, as Kafka keeps them.
//!
//! The state is a pure function of the log: `record` is called for every appended
//! batch that carries a producer id, on the produce path and again on replay at
//! start-up. A snapshot taken at segment roll bounds the replay to the newest segment.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::batch::BatchHeader;

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
}

impl ProducerStateTable {
    /// Checks a batch from producer `header.producer_id()` against the state.
    pub fn check(&self, header: &BatchHeader<'_>) -> Result<SequenceCheck, SequenceError> {
        let (producer_id, epoch) = (header.producer_id(), header.producer_epoch());
        let (first, last) = (header.base_sequence(), header.last_sequence());
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

    /// Records a batch appended at `base_offset` (the header's own base offset field
    /// may still be the producer's, since only the copy in the log is rewritten).
    pub fn record(&mut self, header: &BatchHeader<'_>, base_offset: i64) {
        if !header.has_producer_id() || header.base_sequence() < 0 {
            return;
        }
        let entry = self.producers.entry(header.producer_id()).or_default();
        if header.producer_epoch() != entry.epoch {
            entry.epoch = header.producer_epoch();
            entry.batches.clear();
        }
        entry.last_timestamp = entry.last_timestamp.max(header.max_timestamp());
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

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Forgets producers whose newest batch is older than `max_age_ms`
    /// (`producer.id.expiration.ms`); returns how many were dropped. A forgotten
    /// producer that comes back must start again at sequence 0, as in Kafka.
    pub fn expire(&mut self, now_ms: i64, max_age_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers
            .retain(|_, entry| entry.last_timestamp >= now_ms - max_age_ms);
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
}
