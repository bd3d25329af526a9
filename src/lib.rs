//! tern: a Kafka-wire-compatible message broker in one binary.
//!
//! The `mod` lines below are in reading order, from the edge inwards (see
//! ARCHITECTURE.md for the invariants of each):
//! - `config`: flags, environment and TOML merged into one typed `Config`, handed down in slices.
//! - `broker`: wires the subsystems, runs background tasks, shuts down cleanly.
//! - `server`: the Kafka TCP edge: framing, pipelining, guarded decoding, dispatch.
//! - `api`: one file per Kafka API; thin handlers over the domain services.
//! - `http`: the HTTP publish/subscribe API, an edge over the same services.
//! - `topics`: topic administration and producer ids, shared by every front end.
//! - `group`: consumer groups: the pure state machine, the coordinator, committed offsets.
//! - `replication`: the partitions hosted here (`ReplicaManager`, `Partition`).
//! - `cluster`: metadata behind the `MetadataStore` trait (embedded store or etcd), the
//!   controller, the placement ring, connections to peer brokers.
//! - `log`: one partition's durable log of mmap'd segments; knows nothing above it.
//! - `client`: a small Kafka client, for peers and the CLI. `cli`: the admin commands.
//! - `metrics`: every metric name and the `/metrics` listener.
//! - `security`: authentication mechanisms (SASL PLAIN, SCRAM-SHA-256/512) as pure code.
//! - `model`: shared vocabulary. `limits`: every fixed bound, a leaf. `alloc`: the allocator
//!   guard for untrusted decoding.

pub mod config;
pub mod broker;
pub mod server;
pub mod api;
pub mod http;
pub mod topics;
pub mod txn;
pub mod group;
pub mod replication;
pub mod cluster;
pub mod log;
pub mod archive;
pub mod client;
pub mod wire;
pub mod cli;
pub mod metrics;
pub mod security;
pub mod model;
pub mod quota;
pub mod limits;
pub mod alloc;
#[doc(hidden)]
pub mod fuzzing;

#[global_allocator]
static GLOBAL: alloc::GuardedAllocator = alloc::GuardedAllocator;
