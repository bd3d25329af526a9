//! A failed HTTP call as its JSON answer, and the query-string reader whose failures are
//! such answers.

use std::collections::HashMap;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::replication::PartitionError;

/// A failed request, as JSON: `{"status":"error","error":..., "field":...}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub(super) code: StatusCode,
    pub(super) message: String,
    pub(super) field: Option<&'static str>,
    /// Whether the same call may well succeed in a moment (the cluster is catching up:
    /// a new topic not yet known to its leaders, leadership or coordination moving), so
    /// that [`HttpApi::retrying`] tries again before answering 503.
    pub(super) transient: bool,
}

impl ApiError {
    pub(super) fn bad(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::BAD_REQUEST,
            message: message.into(),
            field: Some(field),
            transient: false,
        }
    }
    pub(super) fn not_found(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::NOT_FOUND,
            message: message.into(),
            field: None,
            transient: false,
        }
    }
    pub(super) fn unavailable(message: impl Into<String>) -> Self {
        Self {
            code: StatusCode::SERVICE_UNAVAILABLE,
            message: message.into(),
            field: None,
            transient: false,
        }
    }
    /// A 503 worth retrying at once (see `transient`).
    pub(super) fn transient(message: impl Into<String>) -> Self {
        Self {
            transient: true,
            ..Self::unavailable(message)
        }
    }
}

/// Kafka errors that mean "not yet, or not here any more": the broker has not caught
/// up with a new topic, or leadership or coordination is moving (UNKNOWN_TOPIC_OR_
/// PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, COORDINATOR_LOAD_IN_PROGRESS,
/// COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR). The request was not carried out, so
/// the HTTP API retries it at once.
const NOT_HERE_YET: [i16; 6] = [3, 5, 6, 14, 15, 16];

impl ApiError {
    /// The one map from a Kafka error code, this broker's or another's, to an HTTP
    /// answer: what the caller sent is wrong (400, 413), it may not (403), the cluster
    /// is moving (503, retried at once), or the broker cannot serve it now (503).
    pub(super) fn kafka(code: i16, message: impl Into<String>) -> Self {
        let status = match code {
            // CORRUPT_MESSAGE, INVALID_TOPIC_EXCEPTION, INVALID_RECORD
            2 | 17 | 87 => StatusCode::BAD_REQUEST,
            // MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE
            10 | 18 => StatusCode::PAYLOAD_TOO_LARGE,
            // TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED
            29 | 30 => StatusCode::FORBIDDEN,
            // INVALID_RECORD_STATE: a queue message the caller does not hold (never
            // acquired, already settled, or its lock ran out and another took it).
            121 => StatusCode::CONFLICT,
            _ if NOT_HERE_YET.contains(&code) => return Self::transient(message),
            _ => StatusCode::SERVICE_UNAVAILABLE,
        };
        Self {
            code: status,
            message: message.into(),
            field: None,
            transient: false,
        }
    }
}

impl From<&PartitionError> for ApiError {
    fn from(error: &PartitionError) -> Self {
        Self::kafka(
            crate::api::errors::partition_error(error).code(),
            error.to_string(),
        )
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

pub(super) type ApiResult = Result<Json<Value>, ApiError>;

/// Query parameters as a map (a malformed query string is a 400).
pub(super) type Params =
    Result<Query<HashMap<String, String>>, axum::extract::rejection::QueryRejection>;

pub(super) fn params(query: Params) -> Result<HashMap<String, String>, ApiError> {
    query
        .map(|Query(q)| q)
        .map_err(|e| ApiError::bad("query", e.body_text()))
}
