//! Delivery state of one share-partition (KIP-932, Kafka's `SharePartition`).
//!
//! A share group lets several consumers read one topic-partition at once.
//! Instead of a single committed offset, the broker tracks every *in-flight*
//! record between the share-partition start offset (SPSO, the first offset
//! not yet finished) and the end offset (SPEO, exclusive: every offset below
//! it has been handed out at least once). Each record is acquired by one
//! member under a time-limited lock and then accepted, released for
//! redelivery, or rejected.
//!
//! This module is deliberately pure: it performs no I/O and never reads a
//! clock (`now_ms` is passed in), so the coordinator owns persistence and
//! timing, and every rule here can be tested deterministically.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// Tunables for one share-partition; they mirror Kafka's
/// `group.share.record.lock.duration.ms`, `group.share.delivery.count.limit`
/// and `group.share.partition.max.record.locks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareConfig {
    /// How long an acquired record stays locked to its member before it is
    /// made available to others again.
    pub lock_duration_ms: i64,
    /// Maximum number of deliveries of one record; a record released at this
    /// count is archived instead, so a poison record cannot loop forever.
    pub delivery_limit: i16,
    /// Maximum width of the in-flight window `[start, end)`; bounds memory and
    /// keeps one slow record from letting the window grow without limit.
    pub max_in_flight: i64,
}

impl Default for ShareConfig {
    fn default() -> Self {
        Self {
            lock_duration_ms: 30_000,
            delivery_limit: 5,
            max_in_flight: 2_000,
        }
    }
}

/// Acknowledgement type, with Kafka's wire values
/// (`ShareAcknowledge`/`ShareFetch` `AcknowledgeTypes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(i8)]
pub enum AckType {
    /// The offset is not a record (e.g. compacted away or a control record);
    /// it is archived like a rejection.
    Gap = 0,
    /// Processed successfully: never deliver again.
    Accept = 1,
    /// Give it back for redelivery (subject to the delivery limit).
    Release = 2,
    /// Unprocessable: archive without redelivery.
    Reject = 3,
}

impl TryFrom<i8> for AckType {
    /// An unknown acknowledge type makes the whole request malformed.
    type Error = AckError;

    fn try_from(value: i8) -> Result<Self, Self::Error> {
        match value {
            0 => Ok(Self::Gap),
            1 => Ok(Self::Accept),
            2 => Ok(Self::Release),
            3 => Ok(Self::Reject),
            _ => Err(AckError::InvalidRequest),
        }
    }
}

/// Public (and persisted) state of an in-flight record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliveryState {
    /// Waiting to be (re)delivered.
    Available,
    /// Locked to one member until acknowledged, released or expired.
    Acquired,
    /// Accepted; finished.
    Acknowledged,
    /// Rejected, a gap, or over the delivery limit; finished.
    Archived,
}

impl DeliveryState {
    /// Kafka's `RecordState` id, used in the persisted share-group state so
    /// that snapshots stay compatible with Kafka's persister format.
    pub fn id(self) -> i8 {
        match self {
            Self::Available => 0,
            Self::Acquired => 1,
            Self::Acknowledged => 2,
            Self::Archived => 4,
        }
    }

    /// Inverse of [`DeliveryState::id`]; `None` for ids Kafka does not define.
    pub fn from_id(id: i8) -> Option<Self> {
        match id {
            0 => Some(Self::Available),
            1 => Some(Self::Acquired),
            2 => Some(Self::Acknowledged),
            4 => Some(Self::Archived),
            _ => None,
        }
    }
}

/// A run of records handed to a member by [`SharePartition::acquire`].
/// Inclusive bounds; runs are sorted, non-overlapping, and consecutive
/// offsets with the same delivery count are merged, matching the
/// `AcquiredRecords` shape of a ShareFetch response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acquired {
    pub first: i64,
    pub last: i64,
    pub delivery_count: i16,
}

/// One acknowledgement batch from a ShareFetch/ShareAcknowledge request.
/// `types` has one entry covering the whole inclusive range, or exactly one
/// entry per offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckBatch {
    pub first: i64,
    pub last: i64,
    pub types: Vec<AckType>,
}

/// Why an acknowledgement was refused; maps to Kafka error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckError {
    /// `INVALID_RECORD_STATE`: a record is not acquired by this member
    /// (its lock expired, someone else holds it, or it is already finished).
    InvalidRecordState,
    /// `INVALID_REQUEST`: malformed batches or offsets never delivered.
    InvalidRequest,
}

impl fmt::Display for AckError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidRecordState => f.write_str("record is not acquired by this member"),
            Self::InvalidRequest => f.write_str("invalid acknowledgement batches"),
        }
    }
}

impl std::error::Error for AckError {}

/// A persisted run of consecutive offsets sharing state and delivery count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBatch {
    pub first: i64,
    pub last: i64,
    pub state: DeliveryState,
    pub delivery_count: i16,
}

/// Everything needed to rebuild a share-partition after a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub start_offset: i64,
    pub batches: Vec<StateBatch>,
}

/// Cumulative counters for metrics. They are not part of [`Snapshot`]:
/// metrics restart with the process, correctness state does not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ShareStats {
    /// Offsets handed out by `acquire` (first deliveries and redeliveries).
    pub acquired: u64,
    /// Acquisitions whose resulting delivery count is above 1.
    pub redelivered: u64,
    /// Offsets acknowledged with ACCEPT.
    pub accepted: u64,
    /// Offsets acknowledged with RELEASE (whether or not they hit the limit).
    pub released: u64,
    /// Offsets acknowledged with REJECT or GAP (both archive immediately).
    pub rejected: u64,
    /// Offsets archived because they were released (explicitly, by member
    /// departure, or by lock timeout) at the delivery limit.
    pub archived_at_limit: u64,
    /// Acquired offsets whose lock expired.
    pub lock_timeouts: u64,
}

/// Where an offset stands relative to the in-flight window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetStatus {
    /// Below the start offset: accepted or archived, and forgotten (which of
    /// the two is no longer known, exactly as in Kafka).
    Finished,
    /// Inside `[start, end)`: its state and delivery count.
    InFlight(DeliveryState, i16),
    /// At or above the end offset: never handed out.
    NotYetDelivered,
}

/// Internal per-offset state. The owner and deadline live inside the
/// `Acquired` variant so "acquired without owner" cannot be represented.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Slot {
    Available,
    Acquired { owner: Arc<str>, deadline_ms: i64 },
    Acknowledged,
    Archived,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    slot: Slot,
    delivery_count: i16,
}

impl Entry {
    fn state(&self) -> DeliveryState {
        match self.slot {
            Slot::Available => DeliveryState::Available,
            Slot::Acquired { .. } => DeliveryState::Acquired,
            Slot::Acknowledged => DeliveryState::Acknowledged,
            Slot::Archived => DeliveryState::Archived,
        }
    }

    fn is_finished(&self) -> bool {
        matches!(self.slot, Slot::Acknowledged | Slot::Archived)
    }

    fn is_owned_by(&self, member: &str) -> bool {
        matches!(&self.slot, Slot::Acquired { owner, .. } if &**owner == member)
    }

    /// Returns an acquired record for redelivery. At the delivery limit it is
    /// archived instead, because another delivery would exceed the limit.
    fn release(&mut self, limit: i16, stats: &mut ShareStats) {
        if self.delivery_count >= limit {
            self.slot = Slot::Archived;
            stats.archived_at_limit += 1;
        } else {
            self.slot = Slot::Available;
        }
    }
}

/// Delivery state of one share-partition. Invariants: `start <= end`, and
/// `in_flight` has exactly one entry per offset in `[start, end)`; the entry
/// at `start` (if any) is not finished.
#[derive(Debug, Clone)]
pub struct SharePartition {
    start: i64,
    end: i64,
    in_flight: BTreeMap<i64, Entry>,
    config: ShareConfig,
    /// Cumulative counters; public so the owner can export or carry them
    /// across a [`SharePartition::restore`].
    pub stats: ShareStats,
}

impl SharePartition {
    /// An empty share-partition whose first record to deliver is `start_offset`.
    pub fn new(start_offset: i64, config: ShareConfig) -> Self {
        Self {
            start: start_offset,
            end: start_offset,
            in_flight: BTreeMap::new(),
            config,
            stats: ShareStats::default(),
        }
    }

    /// Locks taken from now on last `lock_duration_ms` (the group's
    /// `share.record.lock.duration.ms` changed); locks held keep their deadline.
    pub fn set_lock_duration(&mut self, lock_duration_ms: i64) {
        self.config.lock_duration_ms = lock_duration_ms;
    }

    pub fn config(&self) -> &ShareConfig {
        &self.config
    }

    /// The share-partition start offset (SPSO): first offset not finished.
    pub fn start_offset(&self) -> i64 {
        self.start
    }

    /// Exclusive end of the in-flight window: the next never-delivered offset.
    pub fn end_offset(&self) -> i64 {
        self.end
    }

    /// Number of tracked offsets (always `end - start`).
    pub fn in_flight_len(&self) -> usize {
        self.in_flight.len()
    }

    pub fn state_of(&self, offset: i64) -> OffsetStatus {
        if offset < self.start {
            OffsetStatus::Finished
        } else if offset >= self.end {
            OffsetStatus::NotYetDelivered
        } else {
            match self.in_flight.get(&offset) {
                Some(e) => OffsetStatus::InFlight(e.state(), e.delivery_count),
                // Unreachable while the invariant holds; "not delivered" is
                // the safe answer since it never hides a finished record.
                None => OffsetStatus::NotYetDelivered,
            }
        }
    }

    /// Where the next acquisition starts reading the log: the lowest available
    /// in-flight offset, else the end.
    pub fn next_fetch_offset(&self) -> i64 {
        self.in_flight
            .iter()
            .find(|(_, entry)| entry.slot == Slot::Available)
            .map_or(self.end, |(&offset, _)| offset)
    }

    /// Acquires up to `max_records` offsets for `member`, locking them until
    /// `now_ms + lock_duration_ms`. Released/expired records are redelivered
    /// first (oldest first) so that they do not starve behind new data; new
    /// records come from `end` up to `fetchable_end` (the high watermark or
    /// last stable offset), but never widen the window past `max_in_flight`.
    pub fn acquire(
        &mut self,
        member: &str,
        now_ms: i64,
        fetchable_end: i64,
        max_records: usize,
    ) -> Vec<Acquired> {
        self.acquire_skipping(member, now_ms, fetchable_end, max_records, &[])
    }

    /// As [`Self::acquire`], but offsets inside `undeliverable` (inclusive ranges in
    /// ascending order: a read_committed group's aborted records and transaction
    /// markers) are archived on the way instead of delivered, and count against no
    /// member's `max_records`.
    pub fn acquire_skipping(
        &mut self,
        member: &str,
        now_ms: i64,
        fetchable_end: i64,
        max_records: usize,
        undeliverable: &[(i64, i64)],
    ) -> Vec<Acquired> {
        let mut out: Vec<Acquired> = Vec::new();
        if max_records == 0 {
            return out;
        }
        let owner: Arc<str> = Arc::from(member);
        let deadline_ms = now_ms.saturating_add(self.config.lock_duration_ms);
        let mut remaining = max_records;

        // Only below `fetchable_end`: the caller holds the log's records up to there.
        let mut skipped = Ranges::new(undeliverable);
        for (&offset, entry) in self.in_flight.range_mut(..fetchable_end) {
            if remaining == 0 {
                break;
            }
            if entry.slot != Slot::Available {
                continue;
            }
            if skipped.contains(offset) {
                entry.slot = Slot::Archived;
                continue;
            }
            entry.delivery_count = entry.delivery_count.saturating_add(1);
            entry.slot = Slot::Acquired {
                owner: Arc::clone(&owner),
                deadline_ms,
            };
            self.stats.acquired += 1;
            if entry.delivery_count > 1 {
                self.stats.redelivered += 1;
            }
            push_merged(&mut out, offset, entry.delivery_count);
            remaining -= 1;
        }

        let window_end = fetchable_end.min(self.start.saturating_add(self.config.max_in_flight));
        let mut skipped = Ranges::new(undeliverable);
        while self.end < window_end {
            let offset = self.end;
            if skipped.contains(offset) {
                self.in_flight.insert(
                    offset,
                    Entry {
                        slot: Slot::Archived,
                        delivery_count: 0,
                    },
                );
                self.end += 1;
                continue;
            }
            if remaining == 0 {
                break;
            }
            remaining -= 1;
            self.in_flight.insert(
                offset,
                Entry {
                    slot: Slot::Acquired {
                        owner: Arc::clone(&owner),
                        deadline_ms,
                    },
                    delivery_count: 1,
                },
            );
            self.stats.acquired += 1;
            push_merged(&mut out, offset, 1);
            self.end += 1;
        }
        // Archived offsets at the start settle at once.
        self.advance_start();
        out
    }

    /// Applies `member`'s acknowledgements. All-or-nothing: every batch is
    /// validated before anything changes, so a client retrying after an error
    /// never sees a half-applied request. Offsets below `start` are skipped
    /// because they are already finished (e.g. a late ack after the log start
    /// moved). Batches must be in ascending, non-overlapping order.
    pub fn acknowledge(&mut self, member: &str, batches: &[AckBatch]) -> Result<(), AckError> {
        let mut prev_last: Option<i64> = None;
        for batch in batches {
            if batch.first > batch.last || batch.types.is_empty() {
                return Err(AckError::InvalidRequest);
            }
            if prev_last.is_some_and(|p| batch.first <= p) {
                return Err(AckError::InvalidRequest);
            }
            if batch.types.len() != 1 {
                let span = i128::from(batch.last) - i128::from(batch.first) + 1;
                if i128::try_from(batch.types.len()).ok() != Some(span) {
                    return Err(AckError::InvalidRequest);
                }
            }
            if batch.last >= self.end {
                return Err(AckError::InvalidRequest);
            }
            prev_last = Some(batch.last);
        }
        // Every checked range below lies in [start, end), so iterating it is
        // bounded by the in-flight window.
        for batch in batches {
            for offset in batch.first.max(self.start)..=batch.last {
                let owned = self
                    .in_flight
                    .get(&offset)
                    .is_some_and(|e| e.is_owned_by(member));
                if !owned {
                    return Err(AckError::InvalidRecordState);
                }
            }
        }

        let limit = self.config.delivery_limit;
        for batch in batches {
            for offset in batch.first.max(self.start)..=batch.last {
                let (Some(ack), Some(entry)) =
                    (ack_type_at(batch, offset), self.in_flight.get_mut(&offset))
                else {
                    continue; // unreachable after validation
                };
                match ack {
                    AckType::Accept => {
                        entry.slot = Slot::Acknowledged;
                        self.stats.accepted += 1;
                    }
                    AckType::Release => {
                        self.stats.released += 1;
                        entry.release(limit, &mut self.stats);
                    }
                    AckType::Reject | AckType::Gap => {
                        entry.slot = Slot::Archived;
                        self.stats.rejected += 1;
                    }
                }
            }
        }
        self.advance_start();
        Ok(())
    }

    /// Releases every record `member` holds, as if it had sent RELEASE; used
    /// when a member leaves or its share session closes, so its records need
    /// not wait for the lock to time out. Returns how many were released.
    pub fn release_member(&mut self, member: &str) -> usize {
        let limit = self.config.delivery_limit;
        let mut n = 0;
        for entry in self.in_flight.values_mut() {
            if entry.is_owned_by(member) {
                entry.release(limit, &mut self.stats);
                n += 1;
            }
        }
        self.advance_start();
        n
    }

    /// Releases every record whose lock deadline is `<= now_ms` (a consumer
    /// that stalls must not hold records forever). Returns how many expired.
    pub fn expire_locks(&mut self, now_ms: i64) -> usize {
        let limit = self.config.delivery_limit;
        let mut n = 0;
        for entry in self.in_flight.values_mut() {
            if matches!(entry.slot, Slot::Acquired { deadline_ms, .. } if deadline_ms <= now_ms) {
                entry.release(limit, &mut self.stats);
                self.stats.lock_timeouts += 1;
                n += 1;
            }
        }
        self.advance_start();
        n
    }

    /// Earliest lock deadline, so the caller can schedule the next
    /// [`SharePartition::expire_locks`] instead of polling.
    pub fn next_lock_deadline(&self) -> Option<i64> {
        self.in_flight
            .values()
            .filter_map(|e| match e.slot {
                Slot::Acquired { deadline_ms, .. } => Some(deadline_ms),
                _ => None,
            })
            .min()
    }

    /// The log lost everything below `log_start` (retention, DeleteRecords):
    /// those records can never be delivered or acknowledged, so forget them.
    pub fn move_start_to(&mut self, log_start: i64) {
        if log_start <= self.start {
            return;
        }
        self.in_flight = self.in_flight.split_off(&log_start);
        self.start = log_start;
        self.end = self.end.max(log_start);
        self.advance_start();
    }

    /// Operator reset (AlterShareGroupOffsets): forget all delivery state and
    /// start delivering from `new_start`. Outstanding acks of old offsets then
    /// fail or are skipped, which is the documented Kafka behaviour.
    pub fn reset(&mut self, new_start: i64) {
        self.in_flight.clear();
        self.start = new_start;
        self.end = new_start;
    }

    /// Persistable state: `start` plus runs covering `[start, end)`.
    ///
    /// Acquired records are written as Available (a crash loses the locks,
    /// so they must be redelivered, as Kafka does) with their delivery count,
    /// so the limit survives a crash. An acquired record already at the limit
    /// is written as Archived: redelivering it after a crash would exceed the
    /// limit, and Archived is exactly what its lock timeout would produce.
    pub fn snapshot(&self) -> Snapshot {
        let limit = self.config.delivery_limit;
        let mut batches: Vec<StateBatch> = Vec::new();
        for (&offset, entry) in &self.in_flight {
            let state = match entry.state() {
                DeliveryState::Acquired if entry.delivery_count >= limit => DeliveryState::Archived,
                DeliveryState::Acquired => DeliveryState::Available,
                other => other,
            };
            if let Some(last) = batches.last_mut() {
                if last.last + 1 == offset
                    && last.state == state
                    && last.delivery_count == entry.delivery_count
                {
                    last.last = offset;
                    continue;
                }
            }
            batches.push(StateBatch {
                first: offset,
                last: offset,
                state,
                delivery_count: entry.delivery_count,
            });
        }
        Snapshot {
            start_offset: self.start,
            batches,
        }
    }

    /// Rebuilds a share-partition from a [`Snapshot`] (stats start at zero).
    ///
    /// Tolerates snapshots not produced by [`SharePartition::snapshot`]:
    /// offsets below the start are ignored, later batches win on overlap,
    /// holes inside the window become Available never-delivered records,
    /// Acquired is treated as Available, and an Available record at or over
    /// the (possibly lowered) delivery limit is archived rather than
    /// delivered once too often. Batch sizes are trusted; a snapshot from
    /// `snapshot()` is bounded by `max_in_flight`.
    pub fn restore(snapshot: &Snapshot, config: ShareConfig) -> Self {
        let start = snapshot.start_offset;
        let mut in_flight = BTreeMap::new();
        for batch in &snapshot.batches {
            let slot = match batch.state {
                DeliveryState::Available | DeliveryState::Acquired
                    if batch.delivery_count >= config.delivery_limit =>
                {
                    Slot::Archived
                }
                DeliveryState::Available | DeliveryState::Acquired => Slot::Available,
                DeliveryState::Acknowledged => Slot::Acknowledged,
                DeliveryState::Archived => Slot::Archived,
            };
            for offset in batch.first.max(start)..=batch.last {
                in_flight.insert(
                    offset,
                    Entry {
                        slot: slot.clone(),
                        delivery_count: batch.delivery_count,
                    },
                );
            }
        }
        let end = in_flight
            .keys()
            .next_back()
            .map_or(start, |&last: &i64| last.saturating_add(1));
        for offset in start..end {
            in_flight.entry(offset).or_insert(Entry {
                slot: Slot::Available,
                delivery_count: 0,
            });
        }
        let mut partition = Self {
            start,
            end,
            in_flight,
            config,
            stats: ShareStats::default(),
        };
        partition.advance_start();
        partition
    }

    /// Moves `start` past the finished prefix; finished records are dropped
    /// because only the window `[start, end)` needs per-offset state.
    fn advance_start(&mut self) {
        while let Some(entry) = self.in_flight.first_entry() {
            if *entry.key() != self.start || !entry.get().is_finished() {
                break;
            }
            entry.remove();
            self.start += 1;
        }
    }
}

/// Membership in inclusive offset ranges given in ascending order, asked about
/// ascending offsets: a cursor, so a walk over a window costs one pass.
struct Ranges<'a> {
    ranges: &'a [(i64, i64)],
}

impl<'a> Ranges<'a> {
    fn new(ranges: &'a [(i64, i64)]) -> Self {
        Self { ranges }
    }

    fn contains(&mut self, offset: i64) -> bool {
        while let Some((&(_, last), rest)) = self.ranges.split_first() {
            if last >= offset {
                break;
            }
            self.ranges = rest;
        }
        self.ranges
            .first()
            .is_some_and(|&(first, last)| first <= offset && offset <= last)
    }
}

/// Ack type for `offset` within a validated batch.
fn ack_type_at(batch: &AckBatch, offset: i64) -> Option<AckType> {
    if batch.types.len() == 1 {
        return batch.types.first().copied();
    }
    let idx = usize::try_from(offset.checked_sub(batch.first)?).ok()?;
    batch.types.get(idx).copied()
}

/// Appends `offset` to `out`, extending the last run when contiguous with the
/// same delivery count (the response format groups records that way).
fn push_merged(out: &mut Vec<Acquired>, offset: i64, delivery_count: i16) {
    if let Some(last) = out.last_mut() {
        if last.last + 1 == offset && last.delivery_count == delivery_count {
            last.last = offset;
            return;
        }
    }
    out.push(Acquired {
        first: offset,
        last: offset,
        delivery_count,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ShareConfig {
        ShareConfig {
            lock_duration_ms: 1_000,
            delivery_limit: 3,
            max_in_flight: 100,
        }
    }

    fn batch(first: i64, last: i64, t: AckType) -> AckBatch {
        AckBatch {
            first,
            last,
            types: vec![t],
        }
    }

    fn acq(first: i64, last: i64, delivery_count: i16) -> Acquired {
        Acquired {
            first,
            last,
            delivery_count,
        }
    }

    fn flat(runs: &[Acquired]) -> Vec<(i64, i16)> {
        runs.iter()
            .flat_map(|r| (r.first..=r.last).map(move |o| (o, r.delivery_count)))
            .collect()
    }

    #[test]
    fn ids_round_trip() {
        for t in [
            AckType::Gap,
            AckType::Accept,
            AckType::Release,
            AckType::Reject,
        ] {
            assert_eq!(AckType::try_from(t as i8), Ok(t));
        }
        assert_eq!(AckType::try_from(4), Err(AckError::InvalidRequest));
        for s in [
            DeliveryState::Available,
            DeliveryState::Acquired,
            DeliveryState::Acknowledged,
            DeliveryState::Archived,
        ] {
            assert_eq!(DeliveryState::from_id(s.id()), Some(s));
        }
        assert_eq!(DeliveryState::Archived.id(), 4);
        assert_eq!(DeliveryState::from_id(3), None);
    }

    #[test]
    fn undeliverable_offsets_are_archived_never_delivered_and_cost_no_budget() {
        let mut p = SharePartition::new(0, cfg());
        // 0..=2 aborted, 3..=5 fine, 6 a marker, 7..=9 fine: three records asked for.
        let skip = [(0, 2), (6, 6)];
        let got = p.acquire_skipping("a", 0, 10, 3, &skip);
        assert_eq!(flat(&got), vec![(3, 1), (4, 1), (5, 1)]);
        assert_eq!(p.start_offset(), 3, "the archived prefix settles at once");
        let got = p.acquire_skipping("a", 0, 10, 10, &skip);
        assert_eq!(flat(&got), vec![(7, 1), (8, 1), (9, 1)]);
        assert_eq!(p.end_offset(), 10);
        assert_eq!(
            p.state_of(6),
            OffsetStatus::InFlight(DeliveryState::Archived, 0)
        );
        // Released records inside a range named later (the group switched to
        // read_committed) are archived instead of delivered again.
        p.acknowledge("a", &[batch(3, 5, AckType::Release)])
            .expect("released");
        let got = p.acquire_skipping("b", 0, 10, 10, &[(4, 4)]);
        assert_eq!(flat(&got), vec![(3, 2), (5, 2)]);
        assert_eq!(
            p.state_of(4),
            OffsetStatus::InFlight(DeliveryState::Archived, 1)
        );
    }

    #[test]
    fn acquire_new_records_and_merge() {
        let mut p = SharePartition::new(10, cfg());
        assert_eq!(p.acquire("a", 0, 15, 100), vec![acq(10, 14, 1)]);
        assert_eq!(p.acquire("b", 0, 15, 100), vec![]);
        assert_eq!(p.acquire("b", 0, 20, 2), vec![acq(15, 16, 1)]);
        assert_eq!(p.acquire("b", 0, 20, 0), vec![]);
        assert_eq!(
            (p.start_offset(), p.end_offset(), p.in_flight_len()),
            (10, 17, 7)
        );
        assert_eq!(p.state_of(9), OffsetStatus::Finished);
        assert_eq!(
            p.state_of(12),
            OffsetStatus::InFlight(DeliveryState::Acquired, 1)
        );
        assert_eq!(p.state_of(17), OffsetStatus::NotYetDelivered);
        assert_eq!(p.stats.acquired, 7);
        // release 11 and 13; redelivery comes first, then new records
        p.acknowledge(
            "a",
            &[
                batch(11, 11, AckType::Release),
                batch(13, 13, AckType::Release),
            ],
        )
        .expect("ack");
        assert_eq!(
            p.acquire("b", 5, 19, 10),
            vec![acq(11, 11, 2), acq(13, 13, 2), acq(17, 18, 1)]
        );
        assert_eq!(p.stats.redelivered, 2);
        assert_eq!(p.next_lock_deadline(), Some(1_000));
    }

    #[test]
    fn release_at_limit_archives() {
        let mut p = SharePartition::new(0, cfg());
        for round in 1..=3 {
            assert_eq!(p.acquire("a", 0, 1, 10), vec![acq(0, 0, round)]);
            p.acknowledge("a", &[batch(0, 0, AckType::Release)])
                .expect("ack");
        }
        assert_eq!(p.start_offset(), 1);
        assert_eq!(p.stats.archived_at_limit, 1);
        assert_eq!(p.stats.released, 3);
        assert_eq!(p.acquire("a", 0, 1, 10), vec![]);
    }

    #[test]
    fn reject_and_gap_archive_and_advance_start() {
        let mut p = SharePartition::new(0, cfg());
        p.acquire("a", 0, 4, 10);
        let per_offset = AckBatch {
            first: 0,
            last: 3,
            types: vec![
                AckType::Reject,
                AckType::Gap,
                AckType::Release,
                AckType::Accept,
            ],
        };
        p.acknowledge("a", &[per_offset]).expect("ack");
        assert_eq!(p.start_offset(), 2);
        assert_eq!(
            p.state_of(2),
            OffsetStatus::InFlight(DeliveryState::Available, 1)
        );
        assert_eq!(
            p.state_of(3),
            OffsetStatus::InFlight(DeliveryState::Acknowledged, 1)
        );
        assert_eq!(
            (p.stats.rejected, p.stats.released, p.stats.accepted),
            (2, 1, 1)
        );
        p.acquire("b", 0, 4, 10);
        p.acknowledge("b", &[batch(2, 2, AckType::Reject)])
            .expect("ack");
        assert_eq!(
            (p.start_offset(), p.end_offset(), p.in_flight_len()),
            (4, 4, 0)
        );
    }

    #[test]
    fn wrong_member_is_all_or_nothing() {
        let mut p = SharePartition::new(0, cfg());
        p.acquire("a", 0, 3, 10);
        p.acquire("b", 0, 6, 10);
        let before = p.snapshot();
        let stats = p.stats;
        let r = p.acknowledge(
            "a",
            &[batch(0, 2, AckType::Accept), batch(3, 3, AckType::Accept)],
        );
        assert_eq!(r, Err(AckError::InvalidRecordState));
        assert_eq!(p.snapshot(), before);
        assert_eq!(p.stats, stats);
        assert_eq!(
            p.state_of(0),
            OffsetStatus::InFlight(DeliveryState::Acquired, 1)
        );
        // a finished record cannot be acked again either
        p.acknowledge("a", &[batch(1, 1, AckType::Accept)])
            .expect("ack");
        assert_eq!(
            p.acknowledge("a", &[batch(1, 1, AckType::Accept)]),
            Err(AckError::InvalidRecordState)
        );
    }

    #[test]
    fn ack_past_end_and_malformed_are_invalid_request() {
        let mut p = SharePartition::new(0, cfg());
        p.acquire("a", 0, 3, 10);
        let before = p.snapshot();
        let bad = [
            vec![batch(0, 3, AckType::Accept)],
            vec![batch(2, 1, AckType::Accept)],
            vec![AckBatch {
                first: 0,
                last: 1,
                types: vec![],
            }],
            vec![AckBatch {
                first: 0,
                last: 2,
                types: vec![AckType::Accept; 2],
            }],
            vec![batch(0, 1, AckType::Accept), batch(1, 2, AckType::Accept)],
            vec![batch(1, 1, AckType::Accept), batch(0, 0, AckType::Accept)],
            vec![batch(i64::MIN, i64::MAX, AckType::Accept)],
            vec![AckBatch {
                first: i64::MIN,
                last: i64::MAX,
                types: vec![AckType::Accept; 2],
            }],
        ];
        for b in &bad {
            assert_eq!(
                p.acknowledge("a", b),
                Err(AckError::InvalidRequest),
                "{b:?}"
            );
        }
        assert_eq!(p.snapshot(), before);
        assert_eq!(p.stats.accepted, 0);
    }

    #[test]
    fn below_start_is_skipped() {
        let mut p = SharePartition::new(0, cfg());
        p.acquire("a", 0, 4, 10);
        p.acknowledge("a", &[batch(0, 1, AckType::Accept)])
            .expect("ack");
        assert_eq!(p.start_offset(), 2);
        // 0..1 already finished: skipped, 2 applied
        p.acknowledge("a", &[batch(0, 2, AckType::Accept)])
            .expect("ack");
        assert_eq!(p.stats.accepted, 3);
        assert_eq!(p.start_offset(), 3);
        // entirely below start: no-op success
        p.acknowledge("zzz", &[batch(0, 1, AckType::Reject)])
            .expect("ack");
        assert_eq!(p.stats.rejected, 0);
    }

    #[test]
    fn in_flight_cap_stops_new_but_allows_redelivery() {
        let config = ShareConfig {
            max_in_flight: 5,
            ..cfg()
        };
        let mut p = SharePartition::new(0, config);
        assert_eq!(p.acquire("a", 0, 100, 100), vec![acq(0, 4, 1)]);
        assert_eq!(p.acquire("b", 0, 100, 100), vec![]);
        p.acknowledge("a", &[batch(1, 2, AckType::Release)])
            .expect("ack");
        assert_eq!(p.acquire("b", 0, 100, 100), vec![acq(1, 2, 2)]);
        // finishing offset 0 moves start and frees one slot
        p.acknowledge("a", &[batch(0, 0, AckType::Accept)])
            .expect("ack");
        assert_eq!(p.acquire("b", 0, 100, 100), vec![acq(5, 5, 1)]);
        assert_eq!(p.end_offset() - p.start_offset(), 5);
    }

    #[test]
    fn lock_expiry_redelivers() {
        let mut p = SharePartition::new(0, cfg());
        p.acquire("a", 0, 2, 10);
        p.acquire("b", 500, 3, 10);
        assert_eq!(p.next_lock_deadline(), Some(1_000));
        assert_eq!(p.expire_locks(999), 0);
        assert_eq!(p.expire_locks(1_000), 2);
        assert_eq!(p.stats.lock_timeouts, 2);
        assert_eq!(p.next_lock_deadline(), Some(1_500));
        // a's late ack fails: it no longer holds the records
        assert_eq!(
            p.acknowledge("a", &[batch(0, 1, AckType::Accept)]),
            Err(AckError::InvalidRecordState)
        );
        assert_eq!(p.acquire("b", 1_000, 3, 10), vec![acq(0, 1, 2)]);
        assert_eq!(p.stats.redelivered, 2);
    }

    #[test]
    fn release_member_frees_only_its_records() {
        let mut p = SharePartition::new(0, cfg());
        p.acquire("a", 0, 2, 10);
        p.acquire("b", 0, 4, 10);
        assert_eq!(p.release_member("a"), 2);
        assert_eq!(p.release_member("a"), 0);
        assert_eq!(
            p.state_of(0),
            OffsetStatus::InFlight(DeliveryState::Available, 1)
        );
        assert_eq!(
            p.state_of(2),
            OffsetStatus::InFlight(DeliveryState::Acquired, 1)
        );
        assert_eq!(
            p.stats.released, 0,
            "member release is not an explicit RELEASE ack"
        );
    }

    #[test]
    fn snapshot_restore_round_trip() {
        let mut p = SharePartition::new(100, cfg());
        p.acquire("a", 0, 110, 100);
        // 106 delivered up to the limit and still acquired
        for _ in 0..2 {
            p.acknowledge("a", &[batch(106, 106, AckType::Release)])
                .expect("ack");
            assert_eq!(p.acquire("a", 0, 110, 1).len(), 1);
        }
        p.acknowledge(
            "a",
            &[
                batch(101, 102, AckType::Accept),
                batch(103, 103, AckType::Reject),
                batch(104, 105, AckType::Release),
            ],
        )
        .expect("ack");
        assert_eq!(
            p.state_of(106),
            OffsetStatus::InFlight(DeliveryState::Acquired, 3)
        );
        let snap = p.snapshot();
        assert_eq!(snap.start_offset, 100);
        let s = |first, last, state, delivery_count| StateBatch {
            first,
            last,
            state,
            delivery_count,
        };
        use DeliveryState::*;
        assert_eq!(
            snap.batches,
            vec![
                s(100, 100, Available, 1),
                s(101, 102, Acknowledged, 1),
                s(103, 103, Archived, 1),
                s(104, 105, Available, 1),
                s(106, 106, Archived, 3),
                s(107, 109, Available, 1),
            ]
        );
        let r = SharePartition::restore(&snap, cfg());
        assert_eq!(
            (r.start_offset(), r.end_offset(), r.in_flight_len()),
            (100, 110, 10)
        );
        assert_eq!(r.snapshot(), snap);
        assert_eq!(r.next_lock_deadline(), None);
        // restored records are redelivered with their counts carried over
        let mut r = r;
        assert_eq!(
            r.acquire("b", 0, 110, 100),
            vec![acq(100, 100, 2), acq(104, 105, 2), acq(107, 109, 2)]
        );

        let empty = SharePartition::restore(
            &Snapshot {
                start_offset: 7,
                batches: vec![],
            },
            cfg(),
        );
        assert_eq!((empty.start_offset(), empty.end_offset()), (7, 7));
    }

    #[test]
    fn restore_is_defensive() {
        use DeliveryState::*;
        let snap = Snapshot {
            start_offset: 10,
            batches: vec![
                StateBatch {
                    first: 5,
                    last: 11,
                    state: Acknowledged,
                    delivery_count: 1,
                },
                StateBatch {
                    first: 14,
                    last: 14,
                    state: Available,
                    delivery_count: 3,
                },
                StateBatch {
                    first: 15,
                    last: 15,
                    state: Acquired,
                    delivery_count: 1,
                },
            ],
        };
        let p = SharePartition::restore(&snap, cfg());
        assert_eq!(
            (p.start_offset(), p.end_offset(), p.in_flight_len()),
            (12, 16, 4)
        );
        assert_eq!(p.state_of(12), OffsetStatus::InFlight(Available, 0));
        assert_eq!(p.state_of(14), OffsetStatus::InFlight(Archived, 3));
        assert_eq!(p.state_of(15), OffsetStatus::InFlight(Available, 1));
    }

    #[test]
    fn move_start_to_and_reset() {
        let mut p = SharePartition::new(0, cfg());
        p.acquire("a", 0, 10, 100);
        p.acknowledge("a", &[batch(5, 5, AckType::Accept)])
            .expect("ack");
        p.move_start_to(3);
        assert_eq!(
            (p.start_offset(), p.end_offset(), p.in_flight_len()),
            (3, 10, 7)
        );
        p.move_start_to(1); // never moves backwards
        assert_eq!(p.start_offset(), 3);
        // acks for the dropped offsets are skipped
        p.acknowledge("a", &[batch(0, 4, AckType::Accept)])
            .expect("ack");
        assert_eq!(p.start_offset(), 6, "5 was already accepted");
        p.move_start_to(20);
        assert_eq!(
            (p.start_offset(), p.end_offset(), p.in_flight_len()),
            (20, 20, 0)
        );
        assert_eq!(p.acquire("a", 0, 22, 100), vec![acq(20, 21, 1)]);
        p.reset(5);
        assert_eq!(
            (p.start_offset(), p.end_offset(), p.in_flight_len()),
            (5, 5, 0)
        );
        assert_eq!(p.acquire("a", 0, 6, 100), vec![acq(5, 5, 1)]);
    }

    // ---- randomized schedule against a simple model ----

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn range(&mut self, lo: i64, hi_incl: i64) -> i64 {
            lo + (self.next() % ((hi_incl - lo + 1) as u64)) as i64
        }
    }

    #[derive(Clone, Default)]
    struct Off {
        deliveries: i16,
        owner: Option<(usize, i64)>,
        accepted: u32,
        archived: bool,
    }

    impl Off {
        fn finished(&self) -> bool {
            self.accepted > 0 || self.archived
        }
    }

    struct Sim {
        p: SharePartition,
        cfg: ShareConfig,
        members: Vec<String>,
        offs: Vec<Off>,
        stats: ShareStats,
        end: i64,
        log_end: i64,
        now: i64,
        last_start: i64,
    }

    impl Sim {
        fn model_start(&self) -> i64 {
            (0..self.end)
                .find(|&o| !self.offs[o as usize].finished())
                .unwrap_or(self.end)
        }

        /// Model of a release path (ack RELEASE, member release, timeout).
        fn release(&mut self, o: i64) {
            let off = &mut self.offs[o as usize];
            off.owner = None;
            if off.deliveries >= self.cfg.delivery_limit {
                off.archived = true;
                self.stats.archived_at_limit += 1;
            }
        }

        fn acquire(&mut self, m: usize, max: usize) -> Vec<i64> {
            let start = self.model_start();
            let mut expected: Vec<(i64, i16)> = (start..self.end)
                .filter(|&o| {
                    let x = &self.offs[o as usize];
                    !x.finished() && x.owner.is_none()
                })
                .take(max)
                .map(|o| (o, self.offs[o as usize].deliveries + 1))
                .collect();
            let new_end = self
                .log_end
                .min(self.end + (max - expected.len()) as i64)
                .min(start + self.cfg.max_in_flight);
            expected.extend((self.end..new_end).map(|o| (o, 1)));
            let got = self
                .p
                .acquire(&self.members[m], self.now, self.log_end, max);
            for w in got.windows(2) {
                assert!(w[0].last < w[1].first);
                assert!(w[0].last + 1 < w[1].first || w[0].delivery_count != w[1].delivery_count);
            }
            let got = flat(&got);
            assert_eq!(got, expected);
            for &(o, count) in &got {
                let x = &mut self.offs[o as usize];
                assert!(x.owner.is_none(), "(a) offset {o} acquired twice");
                assert_eq!(x.accepted, 0, "(b) accepted offset {o} redelivered");
                assert!(!x.archived);
                x.deliveries += 1;
                assert_eq!(x.deliveries, count);
                assert!(x.deliveries <= self.cfg.delivery_limit, "(c)");
                x.owner = Some((m, self.now + self.cfg.lock_duration_ms));
                self.stats.acquired += 1;
                if count > 1 {
                    self.stats.redelivered += 1;
                }
            }
            self.end = self.end.max(new_end);
            got.iter().map(|&(o, _)| o).collect()
        }

        fn ack(&mut self, m: usize, batches: &[AckBatch]) -> Result<(), AckError> {
            let start = self.model_start();
            let expected = if batches.iter().any(|b| {
                b.last >= self.end
                    || (b.types.len() != 1 && b.types.len() as i64 != b.last - b.first + 1)
            }) {
                Err(AckError::InvalidRequest)
            } else if batches.iter().any(|b| {
                (b.first.max(start)..=b.last)
                    .any(|o| self.offs[o as usize].owner.map(|(w, _)| w) != Some(m))
            }) {
                Err(AckError::InvalidRecordState)
            } else {
                Ok(())
            };
            let got = self.p.acknowledge(&self.members[m], batches);
            assert_eq!(got, expected);
            if got.is_ok() {
                for b in batches {
                    for o in b.first.max(start)..=b.last {
                        match ack_type_at(b, o).expect("type") {
                            AckType::Accept => {
                                let x = &mut self.offs[o as usize];
                                assert_eq!(x.accepted, 0);
                                x.accepted += 1;
                                x.owner = None;
                                self.stats.accepted += 1;
                            }
                            AckType::Release => {
                                self.stats.released += 1;
                                self.release(o);
                            }
                            AckType::Reject | AckType::Gap => {
                                let x = &mut self.offs[o as usize];
                                x.archived = true;
                                x.owner = None;
                                self.stats.rejected += 1;
                            }
                        }
                    }
                }
            }
            got
        }

        fn check(&mut self) {
            let p = &self.p;
            let start = p.start_offset();
            assert!(start >= self.last_start, "(d) start decreased");
            self.last_start = start;
            assert_eq!(start, self.model_start());
            assert_eq!(p.end_offset(), self.end);
            assert_eq!(p.in_flight_len() as i64, self.end - start, "(e)");
            assert_eq!(p.stats, self.stats, "(f)");
            for o in 0..self.log_end + 2 {
                let x = self.offs.get(o as usize).cloned().unwrap_or_default();
                assert!(x.deliveries <= self.cfg.delivery_limit, "(c)");
                assert!(x.accepted <= 1);
                match p.state_of(o) {
                    OffsetStatus::Finished => assert!(x.finished(), "(d) {o}"),
                    OffsetStatus::NotYetDelivered => assert_eq!(x.deliveries, 0),
                    OffsetStatus::InFlight(state, count) => {
                        assert_eq!(count, x.deliveries);
                        let want = if x.accepted > 0 {
                            DeliveryState::Acknowledged
                        } else if x.archived {
                            DeliveryState::Archived
                        } else if x.owner.is_some() {
                            DeliveryState::Acquired
                        } else {
                            DeliveryState::Available
                        };
                        assert_eq!(state, want, "offset {o}");
                    }
                }
            }
        }

        fn grow(&mut self, n: i64) {
            self.log_end += n;
            self.offs.resize(self.log_end as usize + 2, Off::default());
        }
    }

    fn random_types(rng: &mut Rng, len: i64) -> Vec<AckType> {
        let pick = |rng: &mut Rng| match rng.below(10) {
            0..=4 => AckType::Accept,
            5..=7 => AckType::Release,
            8 => AckType::Reject,
            _ => AckType::Gap,
        };
        if rng.below(2) == 0 {
            vec![pick(rng)]
        } else {
            (0..len).map(|_| pick(rng)).collect()
        }
    }

    fn run_seed(seed: u64) {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let cfg = ShareConfig {
            lock_duration_ms: rng.range(100, 1_000),
            delivery_limit: rng.range(1, 5) as i16,
            max_in_flight: rng.range(5, 50),
        };
        let n_members = rng.range(3, 5) as usize;
        let mut sim = Sim {
            p: SharePartition::new(0, cfg),
            cfg,
            members: (0..n_members).map(|i| format!("member-{i}")).collect(),
            offs: Vec::new(),
            stats: ShareStats::default(),
            end: 0,
            log_end: 0,
            now: 0,
            last_start: 0,
        };
        sim.grow(rng.range(0, 10));

        for _ in 0..300 {
            let grow = rng.range(0, 3);
            sim.grow(grow);
            let m = rng.below(n_members as u64) as usize;
            match rng.below(100) {
                0..=29 => {
                    let max = rng.range(1, 20) as usize;
                    sim.acquire(m, max);
                }
                30..=64 => {
                    let owned: Vec<i64> = (0..sim.end)
                        .filter(|&o| sim.offs[o as usize].owner.map(|(w, _)| w) == Some(m))
                        .collect();
                    let start = sim.p.start_offset();
                    let (first, last) = if !owned.is_empty() && rng.below(10) < 7 {
                        let i = rng.below(owned.len() as u64) as usize;
                        let mut j = i;
                        while j + 1 < owned.len()
                            && owned[j + 1] == owned[j] + 1
                            && rng.below(4) != 0
                        {
                            j += 1;
                        }
                        (owned[i], owned[j])
                    } else {
                        let a = rng.range((start - 3).max(0), sim.end + 2);
                        (a, a + rng.range(0, 4))
                    };
                    let mut batches = vec![AckBatch {
                        first,
                        last,
                        types: random_types(&mut rng, last - first + 1),
                    }];
                    if rng.below(10) == 0 {
                        batches[0].types = vec![AckType::Accept; (last - first + 2) as usize];
                    }
                    if rng.below(5) == 0 {
                        let f2 = last + 1 + rng.range(0, 2);
                        let l2 = f2 + rng.range(0, 2);
                        batches.push(AckBatch {
                            first: f2,
                            last: l2,
                            types: random_types(&mut rng, l2 - f2 + 1),
                        });
                    }
                    let before = sim.p.snapshot();
                    if sim.ack(m, &batches).is_err() {
                        assert_eq!(sim.p.snapshot(), before, "failed ack changed state");
                    }
                }
                65..=72 => {
                    let held: Vec<i64> = (0..sim.end)
                        .filter(|&o| sim.offs[o as usize].owner.map(|(w, _)| w) == Some(m))
                        .collect();
                    assert_eq!(sim.p.release_member(&sim.members[m]), held.len());
                    for o in held {
                        sim.release(o);
                    }
                }
                73..=94 => {
                    sim.now += rng.range(0, sim.cfg.lock_duration_ms * 3 / 2);
                    let now = sim.now;
                    let expired: Vec<i64> = (0..sim.end)
                        .filter(|&o| sim.offs[o as usize].owner.is_some_and(|(_, d)| d <= now))
                        .collect();
                    assert_eq!(sim.p.expire_locks(now), expired.len());
                    for o in expired {
                        sim.stats.lock_timeouts += 1;
                        sim.release(o);
                    }
                    if let Some(d) = sim.p.next_lock_deadline() {
                        assert!(d > now);
                    }
                }
                _ => {
                    let stats = std::mem::take(&mut sim.p.stats);
                    sim.p = SharePartition::restore(&sim.p.snapshot(), cfg);
                    sim.p.stats = stats;
                    let limit = cfg.delivery_limit;
                    for x in &mut sim.offs {
                        if x.owner.take().is_some() && x.deliveries >= limit {
                            x.archived = true; // persisted as Archived, no counter
                        }
                    }
                }
            }
            sim.check();
        }

        // drain: everyone acquires and accepts until the log is consumed
        let mut rounds = 0;
        while sim.p.start_offset() < sim.log_end {
            rounds += 1;
            assert!(rounds < 10_000, "drain stalled (seed {seed})");
            sim.now += cfg.lock_duration_ms * 2;
            let now = sim.now;
            let expired: Vec<i64> = (0..sim.end)
                .filter(|&o| sim.offs[o as usize].owner.is_some_and(|(_, d)| d <= now))
                .collect();
            assert_eq!(sim.p.expire_locks(now), expired.len());
            for o in expired {
                sim.stats.lock_timeouts += 1;
                sim.release(o);
            }
            for m in 0..n_members {
                let got = sim.acquire(m, 7);
                if let (Some(&first), Some(&last)) = (got.first(), got.last()) {
                    // offsets in [first, last] missing from `got` are held by
                    // others or finished: ack only ours, one batch per run
                    assert!(first <= last);
                    let mut batches = Vec::new();
                    for &o in &got {
                        match batches.last_mut() {
                            Some(AckBatch { last, .. }) if *last + 1 == o => *last = o,
                            _ => batches.push(batch(o, o, AckType::Accept)),
                        }
                    }
                    sim.ack(m, &batches).expect("drain ack");
                }
            }
            sim.check();
        }
        assert_eq!(sim.p.in_flight_len(), 0);
        assert_eq!(sim.p.end_offset(), sim.log_end);
        for o in 0..sim.log_end {
            let x = &sim.offs[o as usize];
            assert!(
                (x.accepted == 1) != x.archived,
                "offset {o} lost or double-finished (seed {seed})"
            );
        }
    }

    #[test]
    fn randomized_schedules() {
        for seed in 1..=500 {
            run_seed(seed);
        }
    }
}
