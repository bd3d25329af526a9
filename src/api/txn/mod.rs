//! The transaction APIs: thin handlers over `txn::TxnCoordinator` (and, for
//! TxnOffsetCommit, the group coordinator; for WriteTxnMarkers, the partitions here).

pub mod add_offsets_to_txn;
pub mod add_partitions_to_txn;
pub mod describe_producers;
pub mod describe_transactions;
pub mod end_txn;
pub mod list_transactions;
pub mod txn_offset_commit;
pub mod write_txn_markers;
