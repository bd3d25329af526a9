//! The HTTP API's shared state: the broker's services, what each consumer was last
//! handed, and the topics it may address.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::State;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use super::passwords::VerifiedPasswords;
use crate::api::context::Services;
use crate::cluster::TopicSpec;
use crate::replication::TopicReplicas;

/// Per partition, the offset after what was handed out (to commit later).
pub(super) type Advances = Vec<(i32, i64)>;

/// Shared state of the HTTP API.
#[derive(Debug)]
pub struct HttpApi {
    pub(super) services: Arc<Services>,
    /// Per (consumer, topic id): where the messages `GET /message` last returned end,
    /// per partition; committed when that consumer asks again.
    pub(super) delivered: Mutex<HashMap<(i64, i64), Advances>>,
    /// Spreads unkeyed messages over partitions.
    pub(super) next_partition: std::sync::atomic::AtomicUsize,
    /// Ends long polls and push streams when the broker stops.
    pub(super) shutdown: CancellationToken,
    /// `--http-auth required`: a call without credentials is a 401.
    pub(super) require_auth: bool,
    /// HTTP Basic passwords already checked.
    pub(super) verified: VerifiedPasswords,
    /// Orders this broker's share-session exchanges with other leaders (queue mode).
    pub(super) queue_sessions: tokio::sync::Mutex<()>,
}

pub(super) type ApiState = State<Arc<HttpApi>>;

impl HttpApi {
    pub fn new(
        services: Arc<Services>,
        require_auth: bool,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            services,
            delivered: Mutex::new(HashMap::new()),
            next_partition: std::sync::atomic::AtomicUsize::new(0),
            shutdown,
            require_auth,
            verified: VerifiedPasswords::default(),
            queue_sessions: tokio::sync::Mutex::new(()),
        })
    }

    /// The topic with numeric id `id` and its partitions here; internal topics are
    /// not addressable.
    pub(super) async fn topic(&self, id: i64) -> Result<(TopicSpec, Arc<TopicReplicas>), ApiError> {
        let unknown = || ApiError::not_found(format!("no topic with topic_id {id}"));
        let spec = self
            .services
            .store
            .topics()
            .await
            .into_iter()
            .find(|t| t.numeric_id == id && !crate::topics::is_internal(&t.name))
            .ok_or_else(unknown)?;
        let replicas = self
            .services
            .topics
            .get_or_auto_create(&spec.name, false)
            .await
            .map_err(|e| ApiError::unavailable(e.to_string()))?
            .ok_or_else(unknown)?;
        Ok((spec, replicas))
    }
}

/// The share group of consumer `consumer_id`'s queue subscriptions.
pub(super) fn queue_group_of(consumer_id: i64) -> String {
    format!("http-queue-{consumer_id}")
}

/// The consumer group an HTTP consumer commits in.
pub(super) fn group_of(consumer_id: i64) -> String {
    format!("http-{consumer_id}")
}
