//! tern: a Kafka-wire-compatible broker.
pub mod log;
