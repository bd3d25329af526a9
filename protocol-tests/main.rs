//! Raw Kafka-protocol conformance tests for tern.
//!
//! Every test starts its own broker (`tern serve` on a free 127.0.0.1 port, killed when
//! the test ends), or, with `TERN_PROTOCOL_TARGET=host:port`, runs against an
//! already-running broker (e.g. Apache Kafka 4.1) — assertions hold for both; the few
//! tern-specific ones are skipped for external targets.
//!
//! Requests are encoded with `kafka-protocol` (client side), framed by hand, and every
//! response is decoded strictly (header version, correlation id, no trailing bytes).
//! Record batches are built and parsed by this suite's own code (records.rs).
//!
//! Run: `cargo test --release --test protocol -- --test-threads=2`

#![allow(clippy::unwrap_used)]

mod broker;
mod client;
#[macro_use]
mod ops;
mod groups;
mod legacy;
mod records;

mod t_acls;
mod t_admin;
mod t_alter_partition_reassignments;
mod t_api_versions;
mod t_consumer_group;
mod t_share_group;
mod t_create_topics;
mod t_describe_log_dirs;
mod t_elect_leaders;
mod t_fetch;
mod t_find_coordinator;
mod t_group_admin;
mod t_group_membership;
mod t_hostile;
mod t_legacy;
mod t_list_partition_reassignments;
mod t_list_offsets;
mod t_metadata;
mod t_offset_for_leader_epoch;
mod t_offsets;
mod t_pipelining;
mod t_produce;
mod t_sasl;
mod t_producer_id;
mod t_transactions;
