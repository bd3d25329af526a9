//! The Kafka TCP edge: accepting connections, reading size-prefixed frames, admitting
//! and routing each request through the API table (`api::table`), and writing
//! responses in request order. Framing itself is `wire`'s.

pub(crate) mod connection;
pub(crate) mod dispatch;
mod legacy;
pub(crate) mod listener;

pub use listener::{run_listener, ConnectionLimits, KafkaListener};
