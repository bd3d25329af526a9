//! The HTTP publish/subscribe API (`--http`): a small JSON API for programs that do
//! not speak Kafka, served by the broker itself on the same logs and consumer groups as
//! the Kafka protocol (no Kafka client looping back).
//!
//! - `publish.rs`: `create_topic`, `topics/{name}`, `publish_message`, `message_status`.
//! - `subscribe.rs`: `subscribe`, `unsubscribe`, `message` (long poll), `ack`, `stream`
//!   (Server-Sent Events).
//! - `queue.rs`: the same calls with `"mode": "queue"`, and `nack`: a consumer id's
//!   share group, each message acquired by one caller and acknowledged one by one.
//! - `place/`: where a partition (`partitions.rs`) or a subscription's group
//!   (`groups.rs`) is served, and reaching it there (directly here, over Kafka
//!   requests elsewhere).
//!
//! Mapping onto Kafka: a topic is addressed by the small numeric id kept beside it in
//! the metadata store; a message id packs topic id, partition and offset
//! ([`MessageId`]); a subscription is the consumer group `http-<consumer_id>` with a
//! committed offset per partition (its commit metadata remembers when it subscribed).
//! Delivery is at-least-once: what `GET /message` returned is committed when the same
//! consumer asks again for that topic, or on `POST /ack`. A queue subscription is the
//! share group `http-queue-<consumer_id>` instead.
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
mod error;
pub mod listener;
mod passwords;
mod place;
mod publish;
mod queue;
mod state;
mod subscribe;

pub(crate) use subscribe::parse_messages;

use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;

pub use self::auth::{Caller, LISTENER as HTTP_LISTENER};
pub use self::bodies::{Fields, MessageId};
pub use self::error::ApiError;
pub use self::state::HttpApi;
use crate::metrics as m;

pub use crate::limits::HTTP_MAX_BODY_BYTES as MAX_BODY_BYTES;
/// The OpenAPI document, kept in the repository beside the code it describes.
const OPENAPI: &str = include_str!("openapi.json");

/// The router of every endpoint.
pub fn router(api: Arc<HttpApi>) -> Router {
    Router::new()
        .route("/create_topic", post(publish::create_topic))
        .route("/topics/{name}", get(publish::topic_by_name))
        .route("/publish_message", post(publish::publish_message))
        .route("/message_status", get(publish::message_status))
        .route("/subscribe", post(subscribe::subscribe))
        .route("/unsubscribe", post(subscribe::unsubscribe))
        .route("/message", get(subscribe::message))
        .route("/ack", post(subscribe::ack))
        .route("/nack", post(queue::nack))
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
        p if p.starts_with("/topics/") => "/topics/{name}".to_string(),
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
