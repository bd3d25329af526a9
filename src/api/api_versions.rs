//! ApiVersions (key 18, v0–4): the APIs and versions this broker serves, straight from
//! `server::SUPPORTED`. The response header is always v0 (handled in `server::frame`).

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::ResponseError;

use super::context::RequestContext;
use crate::server::SUPPORTED;

fn api_keys() -> Vec<ApiVersion> {
    SUPPORTED
        .iter()
        .map(|r| {
            ApiVersion::default()
                .with_api_key(r.key as i16)
                .with_min_version(r.min)
                .with_max_version(r.max)
        })
        .collect()
}

pub async fn handle(_ctx: &RequestContext, _request: ApiVersionsRequest) -> ApiVersionsResponse {
    // Features stay empty until KIP-890/KIP-848 land: clients then use the classic protocols.
    ApiVersionsResponse::default()
        .with_api_keys(api_keys())
        .with_finalized_features_epoch(-1)
}

/// The KIP-511 answer to an ApiVersions version we don't know, encoded as v0.
pub fn unsupported_version_response() -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys())
}
