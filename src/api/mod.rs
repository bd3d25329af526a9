//! One file per Kafka API. Handlers are thin: resolve what the request names, call a
//! domain service (`ReplicaManager`, `TopicService`), and shape the response. Per-item
//! failures become error codes through `errors`; nothing here touches files or sockets.

pub mod admin;
pub mod api_versions;
pub mod table;
pub mod context;
pub mod data;
pub mod errors;
pub mod group;
pub mod metadata;
pub mod security;
pub mod share;
pub mod throttle;
pub mod txn;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

/// Wire string from a Rust string.
pub(crate) fn str_bytes(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

pub(crate) fn topic_name(s: impl Into<String>) -> TopicName {
    TopicName(str_bytes(s))
}

/// Kafka's "authorized operations not requested" sentinel.
pub(crate) const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;
