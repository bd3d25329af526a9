//! Where what an HTTP request touches is served, so that any broker of a cluster
//! answers every call.
//!
//! A partition is read and appended to here when this broker leads it, and otherwise
//! through Kafka requests to its leader (Fetch, Produce acks=all, ListOffsets). A
//! subscription's group is read and committed here when this broker coordinates it,
//! and otherwise through OffsetFetch, OffsetCommit, OffsetDelete and DeleteGroups to
//! its coordinator. Requests to other brokers go through [`crate::cluster::peers`]: they
//! are the same Kafka requests any client would send, so the leader or coordinator
//! applies its own checks (leadership, cluster session, durability) as for any client.
//!
//! On a single node everything is here and nothing leaves the process.
//!
//! - `partitions.rs`: reading and appending to a partition wherever it is led.
//! - `groups.rs`: a subscription's committed offsets wherever its group is coordinated.
//! - `shares.rs`: a queue subscription's records and start offsets wherever they live.

mod groups;
mod partitions;
mod shares;

use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};

use super::{ApiError, HttpApi};
use crate::cluster::peers::PeerError;

/// Who serves something: this broker (with the local object) or broker `n`.
#[derive(Debug, Clone)]
pub enum Owner<T> {
    Here(T),
    Broker(i32),
}

use crate::limits::{HTTP_RETRY_BACKOFF, HTTP_RETRY_FOR as RETRY_FOR};

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

/// A Kafka error code from another broker (see [`ApiError::kafka`]).
fn remote_error(node: i32, what: &str, code: i16) -> ApiError {
    ApiError::kafka(
        code,
        format!("broker {node} answered {what} with Kafka error {code}"),
    )
}

/// A failed exchange with another broker. Only one that never reached it is worth
/// retrying at once: a request that may have been carried out (a Produce) must not be
/// sent twice behind the caller's back.
fn peer_error(node: i32, error: PeerError) -> ApiError {
    let message = format!("reaching broker {node}: {error}");
    match error {
        PeerError::UnknownBroker(_) | PeerError::Connect(_) => ApiError::transient(message),
        PeerError::Client(_) => ApiError::unavailable(message),
    }
}

impl HttpApi {
    fn node_id(&self) -> i32 {
        self.services.node.node_id
    }

    /// Sends `request` to broker `node` (at the best common version up to `preferred`).
    async fn ask<R>(&self, node: i32, request: R, preferred: i16) -> Result<R::Response, ApiError>
    where
        R: Request + Encodable + HeaderVersion,
        R::Response: Decodable + HeaderVersion,
    {
        self.services
            .peers
            .send(node, request, preferred)
            .await
            .map_err(|e| peer_error(node, e))
    }

    /// `call`, tried again while it fails with a transient error, for at most
    /// [`RETRY_FOR`]: what a Kafka client does for its retriable errors, so that an
    /// HTTP caller does not see the cluster catching up (a topic created a moment ago,
    /// a leader that just moved).
    pub(in crate::http) async fn retrying<T, F, Fut>(&self, call: F) -> Result<T, ApiError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, ApiError>>,
    {
        let deadline = tokio::time::Instant::now() + RETRY_FOR;
        crate::model::retrying(
            deadline,
            HTTP_RETRY_BACKOFF,
            |e: &ApiError| e.transient,
            call,
        )
        .await
    }
}
