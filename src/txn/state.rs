//! One transactional id's state and the transitions Kafka's transaction coordinator
//! allows (`TransactionCoordinator`, `TransactionMetadata`), as pure functions: the
//! coordinator (`super::coordinator`) persists what they return and only then makes
//! it current, so a state is never visible before it is in `__transaction_state`.
//!
//! ```text
//! Empty ──AddPartitions──▶ Ongoing ──EndTxn──▶ PrepareCommit ──markers──▶ CompleteCommit
//!   ▲                        │  ╲                                                 │
//!   │                        │   ╲─EndTxn(abort)/timeout/fence─▶ PrepareAbort ─▶ CompleteAbort
//!   └──────── InitProducerId (epoch + 1) ◀──────────────────────────────────────────┘
//! ```
//!
//! This is transaction version 1 (Kafka before KIP-890 part 2): the epoch is bumped by
//! InitProducerId and by fencing, not by every transaction.

use std::collections::BTreeSet;

use crate::model::{ProducerEpoch, ProducerId, TopicPartition};

/// Kafka's `TransactionState`, with its wire numbers in `__transaction_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    Empty,
    Ongoing,
    PrepareCommit,
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    Dead,
    PrepareEpochFence,
}

impl TxnState {
    pub fn wire(self) -> i8 {
        match self {
            TxnState::Empty => 0,
            TxnState::Ongoing => 1,
            TxnState::PrepareCommit => 2,
            TxnState::PrepareAbort => 3,
            TxnState::CompleteCommit => 4,
            TxnState::CompleteAbort => 5,
            TxnState::Dead => 6,
            TxnState::PrepareEpochFence => 7,
        }
    }

    pub fn from_wire(value: i8) -> Option<Self> {
        Some(match value {
            0 => TxnState::Empty,
            1 => TxnState::Ongoing,
            2 => TxnState::PrepareCommit,
            3 => TxnState::PrepareAbort,
            4 => TxnState::CompleteCommit,
            5 => TxnState::CompleteAbort,
            6 => TxnState::Dead,
            7 => TxnState::PrepareEpochFence,
            _ => return None,
        })
    }

    /// Kafka's names, as DescribeTransactions and ListTransactions give them.
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// A commit or abort whose markers are still being written.
    pub fn is_preparing(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }

    /// Whether the transaction's markers say commit, for a preparing state.
    pub fn commits(self) -> bool {
        self == TxnState::PrepareCommit
    }
}

/// A transactional id's metadata, as `__transaction_state` stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// The epoch before the last InitProducerId bump (in memory only, as in Kafka):
    /// a retried InitProducerId that names it gets the current epoch back.
    pub last_producer_epoch: ProducerEpoch,
    pub timeout_ms: i32,
    pub state: TxnState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the open transaction started; -1 when none is open.
    pub start_ms: i64,
    pub last_update_ms: i64,
}

/// Why a transition was refused; each is one Kafka error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    #[error("the producer id does not match the transactional id's")]
    InvalidProducerIdMapping,
    #[error("a newer producer with the same transactional id has fenced this one")]
    ProducerFenced,
    #[error("a commit or abort of this transactional id is in progress")]
    ConcurrentTransactions,
    #[error("the transaction is not in a state that allows this")]
    InvalidTxnState,
    #[error("the transaction timeout is larger than transaction.max.timeout.ms")]
    InvalidTransactionTimeout,
    #[error("this broker is not the transaction coordinator for the transactional id")]
    NotCoordinator,
    #[error("the transaction coordinator is loading its state")]
    CoordinatorLoadInProgress,
    #[error("the transaction coordinator is not available")]
    CoordinatorNotAvailable,
    #[error("transactional id is empty")]
    InvalidRequest,
}

/// No epoch yet (a new transactional id), and the last epoch a producer id can take
/// before a new id is needed (Kafka's `isEpochExhausted`: `Short.MaxValue - 1`).
pub const NO_EPOCH: ProducerEpoch = ProducerEpoch(-1);
const LAST_EPOCH: i16 = i16::MAX - 1;

impl TxnMetadata {
    /// A new transactional id's metadata, before its first InitProducerId transition.
    pub fn new(producer_id: ProducerId, timeout_ms: i32, now_ms: i64) -> Self {
        Self {
            producer_id,
            producer_epoch: NO_EPOCH,
            last_producer_epoch: NO_EPOCH,
            timeout_ms,
            state: TxnState::Empty,
            partitions: BTreeSet::new(),
            start_ms: -1,
            last_update_ms: now_ms,
        }
    }

    pub fn epoch_exhausted(&self) -> bool {
        self.producer_epoch.0 >= LAST_EPOCH
    }

    /// Whether an open transaction ran past its timeout.
    pub fn timed_out(&self, now_ms: i64) -> bool {
        self.state == TxnState::Ongoing
            && self.start_ms >= 0
            && now_ms > self.start_ms.saturating_add(i64::from(self.timeout_ms))
    }

    /// Whether the id may be forgotten: no transaction in flight and idle longer than
    /// `transactional.id.expiration.ms`.
    pub fn expired(&self, now_ms: i64, expiration_ms: i64) -> bool {
        matches!(
            self.state,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        ) && now_ms > self.last_update_ms.saturating_add(expiration_ms)
    }

    fn check_producer(
        &self,
        producer_id: ProducerId,
        epoch: ProducerEpoch,
    ) -> Result<(), TxnError> {
        if producer_id != self.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if epoch != self.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        Ok(())
    }
}

/// What an InitProducerId does to an existing transactional id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitStep {
    /// Persist this (state Empty, epoch bumped or a new producer id) and answer it.
    Write(TxnMetadata),
    /// A transaction is open: persist this abort with the epoch bumped (which fences
    /// the old producer), complete it, and answer CONCURRENT_TRANSACTIONS so the
    /// client retries (Kafka's `prepareFenceProducerEpoch` then `endTransaction`).
    FenceAndAbort(TxnMetadata),
}

/// InitProducerId for an existing id (Kafka's `prepareInitProducerIdTransit`).
/// `expected` is the client's current id and epoch (KIP-360, v3+), `fresh_id` a newly
/// allocated producer id, used only when the epoch is exhausted.
pub fn init_producer_id(
    current: &TxnMetadata,
    timeout_ms: i32,
    expected: Option<(ProducerId, ProducerEpoch)>,
    fresh_id: Option<ProducerId>,
    now_ms: i64,
) -> Result<InitStep, TxnError> {
    if let Some((id, _)) = expected {
        if current.producer_epoch != NO_EPOCH && id != current.producer_id {
            return Err(TxnError::ProducerFenced);
        }
    }
    match current.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => Err(TxnError::ConcurrentTransactions),
        TxnState::Ongoing => {
            let mut next = current.clone();
            next.producer_epoch = ProducerEpoch(current.producer_epoch.0.saturating_add(1));
            next.last_producer_epoch = NO_EPOCH;
            next.state = TxnState::PrepareAbort;
            next.last_update_ms = now_ms;
            Ok(InitStep::FenceAndAbort(next))
        }
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let mut next = current.clone();
            next.timeout_ms = timeout_ms;
            next.state = TxnState::Empty;
            next.partitions.clear();
            next.start_ms = -1;
            next.last_update_ms = now_ms;
            let same_epoch = expected.is_none_or(|(_, e)| e == current.producer_epoch);
            if current.epoch_exhausted() && same_epoch {
                let Some(id) = fresh_id else {
                    return Err(TxnError::CoordinatorNotAvailable);
                };
                next.producer_id = id;
                next.producer_epoch = ProducerEpoch(0);
                next.last_producer_epoch = NO_EPOCH;
                return Ok(InitStep::Write(next));
            }
            let bumped = ProducerEpoch(current.producer_epoch.0 + 1);
            let (epoch, last) = match expected {
                None => (bumped, NO_EPOCH),
                Some((_, e))
                    if current.producer_epoch == NO_EPOCH || e == current.producer_epoch =>
                {
                    (bumped, current.producer_epoch)
                }
                // A retry of an InitProducerId that already bumped the epoch.
                Some((_, e)) if e == current.last_producer_epoch => {
                    (current.producer_epoch, current.last_producer_epoch)
                }
                Some(_) => return Err(TxnError::ProducerFenced),
            };
            next.producer_epoch = epoch;
            next.last_producer_epoch = last;
            Ok(InitStep::Write(next))
        }
        TxnState::Dead | TxnState::PrepareEpochFence => Err(TxnError::ConcurrentTransactions),
    }
}

/// Whether InitProducerId on `current` needs a new producer id (an exhausted epoch).
pub fn needs_fresh_id(current: &TxnMetadata) -> bool {
    current.epoch_exhausted()
}

/// AddPartitionsToTxn / AddOffsetsToTxn: `None` when every partition is already in
/// the open transaction (nothing to persist).
pub fn add_partitions(
    current: &TxnMetadata,
    producer_id: ProducerId,
    epoch: ProducerEpoch,
    partitions: &[TopicPartition],
    now_ms: i64,
) -> Result<Option<TxnMetadata>, TxnError> {
    current.check_producer(producer_id, epoch)?;
    match current.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => Err(TxnError::ConcurrentTransactions),
        TxnState::Dead | TxnState::PrepareEpochFence => Err(TxnError::ConcurrentTransactions),
        TxnState::Ongoing if partitions.iter().all(|p| current.partitions.contains(p)) => Ok(None),
        TxnState::Ongoing
        | TxnState::Empty
        | TxnState::CompleteCommit
        | TxnState::CompleteAbort => {
            let mut next = current.clone();
            if current.state != TxnState::Ongoing {
                next.partitions.clear();
                next.start_ms = now_ms;
            }
            next.partitions.extend(partitions.iter().cloned());
            next.state = TxnState::Ongoing;
            next.last_update_ms = now_ms;
            Ok(Some(next))
        }
    }
}

/// What an EndTxn does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndStep {
    /// A retry of a transaction that already completed the same way: answer success.
    AlreadyDone,
    /// Persist this PrepareCommit/PrepareAbort, answer, then write the markers.
    Prepare(TxnMetadata),
}

/// EndTxn from the client (Kafka's `endTransaction`, transaction version 1).
pub fn end_transaction(
    current: &TxnMetadata,
    producer_id: ProducerId,
    epoch: ProducerEpoch,
    commit: bool,
    now_ms: i64,
) -> Result<EndStep, TxnError> {
    current.check_producer(producer_id, epoch)?;
    match (current.state, commit) {
        (TxnState::Ongoing, _) => Ok(EndStep::Prepare(prepare_end(current, commit, now_ms))),
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => {
            Ok(EndStep::AlreadyDone)
        }
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => {
            Err(TxnError::ConcurrentTransactions)
        }
        _ => Err(TxnError::InvalidTxnState),
    }
}

fn prepare_end(current: &TxnMetadata, commit: bool, now_ms: i64) -> TxnMetadata {
    let mut next = current.clone();
    next.state = if commit {
        TxnState::PrepareCommit
    } else {
        TxnState::PrepareAbort
    };
    next.last_update_ms = now_ms;
    next
}

/// An open transaction past its timeout, aborted by the coordinator with the epoch
/// bumped, so the producer that let it time out is fenced (Kafka's
/// `abortTimedOutTransactions`).
pub fn abort_timed_out(current: &TxnMetadata, now_ms: i64) -> Option<TxnMetadata> {
    if !current.timed_out(now_ms) || current.epoch_exhausted() {
        return None;
    }
    let mut next = prepare_end(current, false, now_ms);
    next.producer_epoch = ProducerEpoch(current.producer_epoch.0 + 1);
    next.last_producer_epoch = NO_EPOCH;
    Some(next)
}

/// Every marker acknowledged: PrepareCommit → CompleteCommit, PrepareAbort →
/// CompleteAbort, with no partitions left.
pub fn complete(current: &TxnMetadata, now_ms: i64) -> Option<TxnMetadata> {
    let state = match current.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        _ => return None,
    };
    let mut next = current.clone();
    next.state = state;
    next.partitions.clear();
    next.start_ms = -1;
    next.last_update_ms = now_ms;
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PID: ProducerId = ProducerId(1000);

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    fn initialised() -> TxnMetadata {
        let fresh = TxnMetadata::new(PID, 60_000, 0);
        match init_producer_id(&fresh, 60_000, None, None, 1) {
            Ok(InitStep::Write(next)) => next,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_new_id_starts_at_epoch_zero_and_a_restart_bumps_it() {
        let first = initialised();
        assert_eq!(
            (first.producer_epoch, first.state),
            (ProducerEpoch(0), TxnState::Empty)
        );
        let Ok(InitStep::Write(second)) = init_producer_id(&first, 60_000, None, None, 2) else {
            panic!("a restart gets a new epoch");
        };
        assert_eq!(second.producer_epoch, ProducerEpoch(1));
        assert_eq!(
            add_partitions(&second, PID, ProducerEpoch(0), &[tp("a", 0)], 3),
            Err(TxnError::ProducerFenced),
            "the old epoch is fenced"
        );
    }

    #[test]
    fn a_transaction_commits_through_prepare_and_complete() {
        let ready = initialised();
        let e = ready.producer_epoch;
        let open = add_partitions(&ready, PID, e, &[tp("a", 0), tp("b", 1)], 10)
            .expect("allowed")
            .expect("a change");
        assert_eq!((open.state, open.start_ms), (TxnState::Ongoing, 10));
        assert_eq!(add_partitions(&open, PID, e, &[tp("a", 0)], 11), Ok(None));
        let Ok(EndStep::Prepare(prepared)) = end_transaction(&open, PID, e, true, 12) else {
            panic!("ongoing commits");
        };
        assert_eq!(prepared.state, TxnState::PrepareCommit);
        assert_eq!(
            end_transaction(&prepared, PID, e, true, 13),
            Err(TxnError::ConcurrentTransactions)
        );
        assert_eq!(
            end_transaction(&prepared, PID, e, false, 13),
            Err(TxnError::InvalidTxnState)
        );
        assert_eq!(
            add_partitions(&prepared, PID, e, &[tp("c", 0)], 13),
            Err(TxnError::ConcurrentTransactions)
        );
        let done = complete(&prepared, 14).expect("completes");
        assert_eq!(done.state, TxnState::CompleteCommit);
        assert!(done.partitions.is_empty());
        assert_eq!(
            end_transaction(&done, PID, e, true, 15),
            Ok(EndStep::AlreadyDone)
        );
        assert_eq!(
            end_transaction(&done, PID, e, false, 15),
            Err(TxnError::InvalidTxnState)
        );
        assert_eq!(
            end_transaction(&initialised(), PID, e, true, 15),
            Err(TxnError::InvalidTxnState),
            "nothing to end in Empty"
        );
    }

    #[test]
    fn init_during_an_open_transaction_fences_and_aborts_it() {
        let ready = initialised();
        let open = add_partitions(&ready, PID, ready.producer_epoch, &[tp("a", 0)], 10)
            .expect("allowed")
            .expect("a change");
        let Ok(InitStep::FenceAndAbort(fenced)) = init_producer_id(&open, 60_000, None, None, 11)
        else {
            panic!("an open transaction is aborted");
        };
        assert_eq!(fenced.state, TxnState::PrepareAbort);
        assert_eq!(fenced.producer_epoch, ProducerEpoch(1));
        assert_eq!(
            fenced.partitions, open.partitions,
            "markers go to its partitions"
        );
        assert_eq!(
            init_producer_id(&fenced, 60_000, None, None, 12),
            Err(TxnError::ConcurrentTransactions),
            "the client retries until the abort completes"
        );
        let aborted = complete(&fenced, 13).expect("completes");
        let Ok(InitStep::Write(next)) = init_producer_id(&aborted, 60_000, None, None, 14) else {
            panic!("then it gets a new epoch");
        };
        assert_eq!(next.producer_epoch, ProducerEpoch(2));
    }

    #[test]
    fn kip_360_retries_and_fencing_by_expected_epoch() {
        let ready = initialised(); // epoch 0
        let Ok(InitStep::Write(bumped)) =
            init_producer_id(&ready, 60_000, Some((PID, ProducerEpoch(0))), None, 2)
        else {
            panic!("the current epoch may bump");
        };
        assert_eq!(bumped.producer_epoch, ProducerEpoch(1));
        let Ok(InitStep::Write(retried)) =
            init_producer_id(&bumped, 60_000, Some((PID, ProducerEpoch(0))), None, 3)
        else {
            panic!("a retry gets the same epoch");
        };
        assert_eq!(retried.producer_epoch, ProducerEpoch(1));
        assert_eq!(
            init_producer_id(&bumped, 60_000, Some((PID, ProducerEpoch(7))), None, 3),
            Err(TxnError::ProducerFenced)
        );
        assert_eq!(
            init_producer_id(
                &bumped,
                60_000,
                Some((ProducerId(5), ProducerEpoch(1))),
                None,
                3
            ),
            Err(TxnError::ProducerFenced)
        );
    }

    #[test]
    fn an_exhausted_epoch_takes_a_new_producer_id() {
        let mut ready = initialised();
        ready.producer_epoch = ProducerEpoch(LAST_EPOCH);
        assert!(needs_fresh_id(&ready));
        let Ok(InitStep::Write(next)) =
            init_producer_id(&ready, 60_000, None, Some(ProducerId(2000)), 2)
        else {
            panic!("rotates");
        };
        assert_eq!(
            (next.producer_id, next.producer_epoch),
            (ProducerId(2000), ProducerEpoch(0))
        );
    }

    #[test]
    fn timeouts_abort_with_a_bump_and_idle_ids_expire() {
        let ready = initialised();
        let open = add_partitions(&ready, PID, ready.producer_epoch, &[tp("a", 0)], 100)
            .expect("allowed")
            .expect("a change");
        assert_eq!(abort_timed_out(&open, 60_100), None);
        let aborted = abort_timed_out(&open, 60_101).expect("timed out");
        assert_eq!(aborted.state, TxnState::PrepareAbort);
        assert_eq!(aborted.producer_epoch, ProducerEpoch(1));
        assert!(
            !open.expired(10_000_000, 1000),
            "an open transaction never expires"
        );
        let done = complete(&aborted, 60_200).expect("completes");
        assert!(done.expired(61_201, 1000));
        assert!(!done.expired(61_200, 1000));
    }

    /// Two producers sharing one transactional id (the current one and a zombie that
    /// still holds an old epoch) and the coordinator's own steps, in seeded random
    /// order, through the real transitions. After every step: the epoch never goes
    /// back, a prepared decision is the one completed, a fenced epoch never changes
    /// anything, and the partitions match the state.
    #[test]
    fn random_schedules_keep_the_transition_invariants() {
        use crate::replication::sim::Rng;
        let schedules = std::env::var("TXN_SCHEDULES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000u64);
        for seed in 0..schedules {
            let mut rng = Rng::new(seed);
            let mut meta = initialised();
            let mut epochs = [meta.producer_epoch, meta.producer_epoch];
            let mut decided: Option<TxnState> = None;
            let mut now = 10;
            for _ in 0..60 {
                now += rng.below(30_000) as i64;
                let actor = rng.below(2) as usize;
                let before = meta.clone();
                let next = match rng.below(6) {
                    0 => match init_producer_id(&meta, 60_000, None, None, now) {
                        Ok(InitStep::Write(next)) | Ok(InitStep::FenceAndAbort(next)) => {
                            epochs[actor] = next.producer_epoch;
                            Some(next)
                        }
                        Err(_) => None,
                    },
                    1 => {
                        let tp = tp("t", rng.below(3) as i32);
                        add_partitions(&meta, PID, epochs[actor], &[tp], now)
                            .ok()
                            .flatten()
                    }
                    2 | 3 => {
                        match end_transaction(&meta, PID, epochs[actor], rng.below(2) == 0, now) {
                            Ok(EndStep::Prepare(next)) => Some(next),
                            _ => None,
                        }
                    }
                    4 => complete(&meta, now),
                    _ => abort_timed_out(&meta, now),
                };
                let Some(next) = next else { continue };
                let fenced = epochs[actor] < before.producer_epoch;
                assert!(
                    next.producer_epoch >= before.producer_epoch,
                    "seed {seed}: the epoch went back: {before:?} -> {next:?}"
                );
                if let Some(prepared) = decided {
                    let allowed = match prepared {
                        TxnState::PrepareCommit => {
                            [TxnState::PrepareCommit, TxnState::CompleteCommit]
                        }
                        _ => [TxnState::PrepareAbort, TxnState::CompleteAbort],
                    };
                    assert!(
                        allowed.contains(&next.state),
                        "seed {seed}: {prepared:?} became {:?}",
                        next.state
                    );
                }
                decided = next.state.is_preparing().then_some(next.state);
                if matches!(next.state, TxnState::Ongoing | TxnState::PrepareCommit) {
                    assert!(
                        !fenced || next.state == before.state,
                        "seed {seed}: a fenced producer moved the transaction: {before:?} -> {next:?}"
                    );
                }
                match next.state {
                    TxnState::Ongoing => {
                        assert!(
                            !next.partitions.is_empty() && next.start_ms >= 0,
                            "seed {seed}"
                        )
                    }
                    TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
                        assert!(next.partitions.is_empty(), "seed {seed}: {next:?}")
                    }
                    _ => {}
                }
                meta = next;
            }
        }
    }
}
