//! The HTTP publish/subscribe API (`--http`): a small JSON API for programs that do
//! not speak Kafka, served by the broker itself on the same logs and consumer groups as
//! the Kafka protocol (no Kafka client looping back).
//!
//! - `publish.rs`: `create_topic`, `publish_message`, `message_status`.
//! - `subscribe.rs`: `subscribe`, `unsubscribe`, `message` (long poll), `ack`, `stream`
//!   (Server-Sent Events).
//! - `place/`: where a partition (`partitions.rs`) or a subscription's group
//!   (`groups.rs`) is served, and reaching it there (directly here, over Kafka
//!   requests elsewhere).
//!
//! Mapping onto Kafka: a topic is addressed by the small numeric id kept beside it in
//! the metadata store; a message id packs topic id, partition and offset
//! ([`MessageId`]); a subscription is the consumer group `http-<consumer_id>` with a
//! committed offset per partition (its commit metadata remembers when it subscribed).
//! Delivery is at-least-once: what `GET /message` returned is committed when the same
//! consumer asks again for that topic, or on `POST /ack`.
//!
//! In a cluster any broker answers every call: what another broker leads or
//! coordinates is asked of it over Kafka (`place/`).
//!
//! Every response is JSON with a `status`; bad input is a 400 naming the field,
//! unknown things 404, bodies over [`MAX_BODY_BYTES`] 413, and what cannot be served
//! right now (no leader or coordinator at the moment, a broker unreachable, storage
//! trouble) 503.

mod auth;
pub mod bodies;
pub mod listener;
mod place;
mod publish;
mod subscribe;

pub(crate) use subscribe::parse_messages;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::api::context::Services;
use crate::cluster::TopicSpec;
use crate::metrics as m;
use crate::replication::TopicReplicas;
use crate::security::acl::{AclOperation, ResourceType};
pub use auth::Caller;

pub use crate::limits::HTTP_MAX_BODY_BYTES as MAX_BODY_BYTES;
/// The OpenAPI document, kept in the repository beside the code it describes.
const OPENAPI: &str = include_str!("openapi.json");

/// Per partition, the offset after what was handed out (to commit later).
type Advances = Vec<(i32, i64)>;

/// Shared state of the HTTP API.
#[derive(Debug)]
pub struct HttpApi {
    services: Arc<Services>,
    /// Per (consumer, topic id): where the messages `GET /message` last returned end,
    /// per partition; committed when that consumer asks again.
    delivered: Mutex<HashMap<(i64, i64), Advances>>,
    /// Spreads unkeyed messages over partitions.
    next_partition: std::sync::atomic::AtomicUsize,
    /// Ends long polls and push streams when the broker stops.
    shutdown: CancellationToken,
    /// `--http-auth required`: a call without credentials is a 401.
    require_auth: bool,
    /// HTTP Basic passwords already checked.
    verified: auth::VerifiedPasswords,
}

type ApiState = State<Arc<HttpApi>>;

/// A failed request, as JSON: `{"status":"error","error":..., "field":...}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    code: StatusCode,
    message: String,
    field: Option<&'static str>,
    /// Whether the same call may well succeed in a moment (the cluster is catching up:
    /// a new topic not yet known to its leaders, leadership or coordination moving), so
    /// that [`HttpApi::retrying`] tries again before answering 503.
    transient: bool,
}

impl ApiError {
    fn bad(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::BAD_REQUEST,
            message: message.into(),
            field: Some(field),
            transient: false,
        }
    }
    fn not_found(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::NOT_FOUND,
            message: message.into(),
            field: None,
            transient: false,
        }
    }
    fn unavailable(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            field: None,
            transient: false,
        }
    }
    /// A 503 worth retrying at once (see `transient`).
    fn transient(message: impl Into<String>) -> Self {
        Self {
            transient: true,
            ..Self::unavailable(message)
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"status": "error", "error": self.message});
        if let Some(field) = self.field {
            body["field"] = json!(field);
        }
        let mut response = (self.code, Json(body)).into_response();
        if self.code == StatusCode::UNAUTHORIZED {
            // RFC 7617: a 401 names the scheme that would let the caller in.
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Basic realm=\"tern\", charset=\"UTF-8\""),
            );
        }
        response
    }
}

type ApiResult = Result<Json<Value>, ApiError>;

/// Reads a JSON object body of at most [`MAX_BODY_BYTES`].
async fn json_body(body: Body) -> Result<Value, ApiError> {
    let bytes = axum::body::to_bytes(body, MAX_BODY_BYTES)
        .await
        .map_err(|_| ApiError {
            code: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("request body is over {MAX_BODY_BYTES} bytes (or unreadable)"),
            field: None,
            transient: false,
        })?;
    bodies::json_object(&bytes)
}

/// A field of a JSON body or query, with errors that name it.
#[derive(Debug)]
pub enum Fields<'a> {
    Body(&'a Value),
    Query(&'a HashMap<String, String>),
}

impl Fields<'_> {
    fn int(&self, name: &'static str) -> Result<i64, ApiError> {
        self.opt_int(name)?
            .ok_or_else(|| ApiError::bad(name, format!("'{name}' is required")))
    }

    fn opt_int(&self, name: &'static str) -> Result<Option<i64>, ApiError> {
        let wrong = || ApiError::bad(name, format!("'{name}' must be an integer"));
        match self {
            Fields::Body(body) => match body.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(wrong),
                Some(_) => Err(wrong()),
            },
            Fields::Query(query) => match query.get(name) {
                None => Ok(None),
                Some(text) => text.trim().parse().map(Some).map_err(|_| wrong()),
            },
        }
    }

    fn string(&self, name: &'static str) -> Result<String, ApiError> {
        self.opt_string(name)?
            .ok_or_else(|| ApiError::bad(name, format!("'{name}' is required")))
    }

    fn opt_string(&self, name: &'static str) -> Result<Option<String>, ApiError> {
        let wrong = || ApiError::bad(name, format!("'{name}' must be a string"));
        match self {
            Fields::Body(body) => match body.get(name) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(wrong()),
            },
            Fields::Query(query) => Ok(query.get(name).cloned()),
        }
    }

    /// An integer within `range`, or `None` when absent.
    fn ranged(
        &self,
        name: &'static str,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<Option<i64>, ApiError> {
        match self.opt_int(name)? {
            Some(v) if !range.contains(&v) => Err(ApiError::bad(
                name,
                format!(
                    "'{name}' must be between {} and {}, got {v}",
                    range.start(),
                    range.end()
                ),
            )),
            other => Ok(other),
        }
    }
}

/// A message's address packed into one integer: topic id (14 bits), partition (13
/// bits), offset (36 bits), so that status queries and Kafka offsets map both ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageId {
    pub topic_id: i64,
    pub partition: i32,
    pub offset: i64,
}

impl MessageId {
    const OFFSET_BITS: u32 = 36;
    const PARTITION_BITS: u32 = 13;
    const TOPIC_BITS: u32 = 14;
    /// Partitions a topic may have for all its messages to have ids.
    pub const MAX_PARTITIONS: i64 = 1 << Self::PARTITION_BITS;

    /// The packed id; `None` when a part does not fit.
    pub fn encode(&self) -> Option<i64> {
        let fits = |v: i64, bits: u32| (0..1i64 << bits).contains(&v);
        (fits(self.topic_id, Self::TOPIC_BITS)
            && fits(i64::from(self.partition), Self::PARTITION_BITS)
            && fits(self.offset, Self::OFFSET_BITS))
        .then(|| {
            (self.topic_id << (Self::OFFSET_BITS + Self::PARTITION_BITS))
                | (i64::from(self.partition) << Self::OFFSET_BITS)
                | self.offset
        })
    }

    pub fn decode(id: i64) -> Option<Self> {
        if id < 0 {
            return None;
        }
        Some(Self {
            topic_id: id >> (Self::OFFSET_BITS + Self::PARTITION_BITS),
            partition: ((id >> Self::OFFSET_BITS) & ((1 << Self::PARTITION_BITS) - 1)) as i32,
            offset: id & ((1 << Self::OFFSET_BITS) - 1),
        })
    }
}

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
            verified: auth::VerifiedPasswords::default(),
        })
    }

    /// The topic with numeric id `id` and its partitions here; internal topics are
    /// not addressable.
    async fn topic(&self, id: i64) -> Result<(TopicSpec, Arc<TopicReplicas>), ApiError> {
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

impl HttpApi {
    /// The topic with id `id`, for a caller who wants to perform `operation` on it.
    /// With an authorizer, a caller refused on the topic gets the same answer whether
    /// it exists or not (Kafka's rule: who may not DESCRIBE a topic cannot learn that it
    /// exists); only a caller who may DESCRIBE the cluster is told 404.
    async fn topic_for(
        &self,
        caller: &Caller,
        id: i64,
        operation: AclOperation,
    ) -> Result<(TopicSpec, Arc<TopicReplicas>), ApiError> {
        let access = &self.services.access;
        let what = || format!("topic_id {id}");
        match self.topic(id).await {
            Ok((spec, replicas)) => {
                caller.require(access, operation, ResourceType::Topic, &spec.name, &what())?;
                Ok((spec, replicas))
            }
            Err(e)
                if e.code == StatusCode::NOT_FOUND
                    && !caller.may_on_cluster(access, AclOperation::Describe) =>
            {
                Err(caller.refusal(&what()))
            }
            Err(e) => Err(e),
        }
    }

    /// The consumer group of `consumer_id`, if the caller may READ it (as JoinGroup and
    /// OffsetCommit require of a Kafka consumer).
    fn group_for(&self, caller: &Caller, consumer_id: i64) -> Result<String, ApiError> {
        let group = group_of(consumer_id);
        let what = format!("consumer_id {consumer_id}");
        caller.require(
            &self.services.access,
            AclOperation::Read,
            ResourceType::Group,
            &group,
            &what,
        )?;
        Ok(group)
    }
}

fn group_of(consumer_id: i64) -> String {
    format!("http-{consumer_id}")
}

/// The router of every endpoint.
pub fn router(api: Arc<HttpApi>) -> Router {
    Router::new()
        .route("/create_topic", post(publish::create_topic))
        .route("/publish_message", post(publish::publish_message))
        .route("/message_status", get(publish::message_status))
        .route("/subscribe", post(subscribe::subscribe))
        .route("/unsubscribe", post(subscribe::unsubscribe))
        .route("/message", get(subscribe::message))
        .route("/ack", post(subscribe::ack))
        .route("/stream", get(subscribe::stream))
        .route("/openapi.json", get(openapi))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&api),
            auth::authenticate,
        ))
        .layer(axum::middleware::from_fn(record_metrics))
        .with_state(api)
}

async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        OPENAPI,
    )
        .into_response()
}

async fn not_found() -> ApiError {
    ApiError::not_found("no such endpoint")
}

async fn method_not_allowed() -> ApiError {
    ApiError {
        code: StatusCode::METHOD_NOT_ALLOWED,
        message: "method not allowed on this endpoint".into(),
        field: None,
        transient: false,
    }
}

/// Counts and times every request by route and status.
async fn record_metrics(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let route = match request.uri().path() {
        p @ ("/create_topic" | "/publish_message" | "/message_status" | "/subscribe"
        | "/unsubscribe" | "/message" | "/ack" | "/stream" | "/openapi.json") => p.to_string(),
        _ => "other".to_string(),
    };
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(m::HTTP_REQUESTS_TOTAL, "route" => route.clone(), "status" => status)
        .increment(1);
    metrics::histogram!(m::HTTP_REQUEST_DURATION_SECONDS, "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}

/// Query parameters as a map (a malformed query string is a 400).
type Params = Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>;

fn params(query: Params) -> Result<HashMap<String, String>, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|e| ApiError::bad("query", e.body_text()))
}

/// Serves the API on `listener` until `shutdown`.
pub async fn serve(
    listener: listener::HttpListener,
    api: Arc<HttpApi>,
    shutdown: CancellationToken,
) {
    let service = router(api).into_make_service_with_connect_info::<listener::HttpPeer>();
    let served = axum::serve(listener, service)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await;
    if let Err(error) = served {
        tracing::error!(%error, "HTTP API listener failed");
    }
}

use crate::limits::HTTP_MAX_WAIT as MAX_WAIT;

/// How the HTTP API listener is secured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HttpSecurity {
    /// HTTPS with the broker's certificate (`--http-tls`).
    pub tls: bool,
    /// Calls without credentials are refused with 401 (`--http-auth required`).
    pub require_auth: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_ids_round_trip_and_refuse_what_does_not_fit() {
        let id = MessageId {
            topic_id: 16383,
            partition: 8191,
            offset: (1 << 36) - 1,
        };
        let packed = id.encode().expect("fits");
        assert!(packed > 0);
        assert_eq!(MessageId::decode(packed), Some(id));
        let small = MessageId {
            topic_id: 3,
            partition: 2,
            offset: 41,
        };
        assert_eq!(small.encode(), Some((3 << 49) | (2 << 36) | 41));
        for bad in [
            MessageId {
                topic_id: 16384,
                ..small
            },
            MessageId {
                partition: 8192,
                ..small
            },
            MessageId {
                offset: 1 << 36,
                ..small
            },
            MessageId {
                offset: -1,
                ..small
            },
        ] {
            assert_eq!(bad.encode(), None, "{bad:?}");
        }
        assert_eq!(MessageId::decode(-5), None);
    }
}
