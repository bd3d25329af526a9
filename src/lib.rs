//! tern: a Kafka-wire-compatible message broker in one binary.
//!
//! Reading order, from the edge inwards (see ARCHITECTURE.md):
//! - `config`: flags, environment and TOML merged into one typed `Config`.
//! - `broker`: wires the subsystems, runs background tasks, shuts down cleanly.
//! - `server`: the Kafka TCP edge: framing, pipelining, safe decoding, dispatch.
//! - `api`: one file per Kafka API; thin handlers over the domain services.
//! - `topics`: topic administration and producer ids, shared by every front end.
//! - `replication`: the partitions hosted here (`ReplicaManager`, `Partition`).
//! - `cluster`: metadata behind the `MetadataStore` trait (embedded store today).
//! - `log`: one partition's durable log of mmap'd segments; knows nothing above it.
//! - `model`: shared vocabulary. `alloc`: the allocator guard for untrusted decoding.

pub mod alloc;
pub mod api;
pub mod broker;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod config;
pub mod http;
pub mod log;
pub mod metrics;
pub mod model;
pub mod replication;
pub mod server;
pub mod topics;

#[global_allocator]
static GLOBAL: alloc::GuardedAllocator = alloc::GuardedAllocator;
pub mod group;
