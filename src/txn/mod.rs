//! Transactions: Kafka's transaction coordinator. `state` holds the pure transitions of
//! one transactional id, `records` the `__transaction_state` record format,
//! `coordinator` the driver that persists and completes them, `markers` the writing
//! of COMMIT/ABORT markers to a transaction's partitions. The per-partition side
//! (open transactions, the last stable offset, aborted transactions) is the log's
//! (`log::producer_state`, `log::txn`).
//!
//! The flow. The coordinator of a transactional id is the leader of its
//! `__transaction_state` partition (created by the first FindCoordinator key type 1);
//! its epoch is that partition's leader epoch. Each request is decided by `state`,
//! written acks=all, then made current (one transition per id in flight; others get
//! CONCURRENT_TRANSACTIONS). EndTxn writes PrepareCommit/PrepareAbort, answers, and
//! `TxnCoordinator::finish` sends markers until every partition has one, then Complete*.
//! A new leader replays the partition and finishes every prepared transaction. A
//! transactional produce that would open a transaction on a partition is verified with
//! the coordinator first (KIP-890) under a guard a marker clears. On each partition the
//! last stable offset is the oldest open (or unreplicated) transaction's first offset,
//! capped by the high watermark; read_committed Fetch and ListOffsets stop there, and
//! Fetch names the aborted transactions it returns. TxnOffsetCommit's offsets stay
//! pending in the group coordinator until the marker reaches their offsets partition
//! (`MarkerWriter`'s hook).

pub mod coordinator;
pub mod markers;
pub mod records;
pub mod state;

pub use self::coordinator::{TxnConfig, TxnCoordinator, TxnDescription};
pub use self::markers::MarkerWriter;
pub use self::state::{TxnError, TxnMetadata, TxnState};
