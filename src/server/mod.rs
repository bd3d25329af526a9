//! The Kafka TCP edge: accepting connections, reading size-prefixed frames, decoding
//! headers and bodies safely, and writing responses in request order.

pub(crate) mod connection;
pub(crate) mod dispatch;
pub mod frame;
mod legacy;
pub use frame::HeaderPrefix;
mod listener;
mod response;

pub use dispatch::SUPPORTED;
pub use listener::{run_listener, KafkaListener, PerAddress};
