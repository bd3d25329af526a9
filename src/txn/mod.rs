//! Transactions: Kafka's transaction coordinator. `state` holds the pure transitions of
//! one transactional id, `records` the `__transaction_state` record format,
//! `coordinator` the driver that persists and completes them, `markers` the writing
//! of COMMIT/ABORT markers to a transaction's partitions. The per-partition side
//! (open transactions, the last stable offset, aborted transactions) is the log's
//! (`log::producer_state`, `log::txn`).

pub mod coordinator;
pub mod markers;
pub mod records;
pub mod state;

pub use self::coordinator::{TxnConfig, TxnCoordinator, TxnDescription};
pub use self::markers::MarkerWriter;
pub use self::state::{TxnError, TxnMetadata, TxnState};
