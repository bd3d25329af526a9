//! The data path: Produce, Fetch, ListOffsets, DeleteRecords, InitProducerId.

pub mod delete_records;
pub mod fetch;
pub mod init_producer_id;
pub mod list_offsets;
pub mod offset_for_leader_epoch;
pub mod produce;
