//! ApiVersions (key 18, v0–4): the APIs and versions this broker serves, straight from
//! the API table (`table::SUPPORTED`, passed in by the table's routing). The response header is always v0 (`wire`).

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::context::RequestContext;

/// One advertised API: its key, its name (as Kafka's metrics spell it) and the version
/// range in ApiVersions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub key: ApiKey,
    pub name: &'static str,
    pub min: i16,
    pub max: i16,
}

fn api_keys(served: &[ApiRange]) -> Vec<ApiVersion> {
    served
        .iter()
        .map(|r| {
            ApiVersion::default()
                .with_api_key(r.key as i16)
                .with_min_version(r.min)
                .with_max_version(r.max)
        })
        .collect()
}

/// `served` is the API table's list (`table::SUPPORTED`), which routes here.
pub async fn handle(
    ctx: &RequestContext,
    request: ApiVersionsRequest,
    served: &[ApiRange],
) -> ApiVersionsResponse {
    // v3+ clients name their software; Kafka refuses names it could not use as metric tags.
    if ctx.api_version >= 3
        && !(is_valid_software_token(&request.client_software_name)
            && is_valid_software_token(&request.client_software_version))
    {
        return ApiVersionsResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code());
    }
    // `transaction.version` 1: transactions as before KIP-890 part 2 (the epoch is
    // bumped by InitProducerId and fencing, not per transaction). `group.version` 1:
    // KIP-848 consumer groups are served (ConsumerGroupHeartbeat).
    let response = ApiVersionsResponse::default().with_api_keys(api_keys(served));
    if ctx.api_version < 3 {
        return response.with_finalized_features_epoch(-1);
    }
    let features = [
        (TRANSACTION_VERSION_FEATURE, TRANSACTION_VERSION),
        (GROUP_VERSION_FEATURE, GROUP_VERSION),
    ];
    response
        .with_supported_features(
            features
                .iter()
                .map(|&(name, level)| {
                    SupportedFeatureKey::default()
                        .with_name(StrBytes::from_static_str(name))
                        .with_min_version(0)
                        .with_max_version(level)
                })
                .collect(),
        )
        .with_finalized_features_epoch(0)
        .with_finalized_features(
            features
                .iter()
                .map(|&(name, level)| {
                    FinalizedFeatureKey::default()
                        .with_name(StrBytes::from_static_str(name))
                        .with_min_version_level(level)
                        .with_max_version_level(level)
                })
                .collect(),
        )
}

const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";
const TRANSACTION_VERSION: i16 = 1;
const GROUP_VERSION_FEATURE: &str = "group.version";
const GROUP_VERSION: i16 = 1;

/// Kafka's rule for client software names and versions:
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?`.
fn is_valid_software_token(token: &str) -> bool {
    let bytes = token.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'.')
}

/// The KIP-511 answer to an ApiVersions version we don't know, encoded as v0.
pub fn unsupported_version_response(served: &[ApiRange]) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys(served))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_tokens_follow_kafkas_pattern() {
        for good in [
            "librdkafka",
            "2.0.2",
            "kafka-python",
            "a",
            "apache-kafka-java",
        ] {
            assert!(is_valid_software_token(good), "{good}");
        }
        for bad in ["", "-x", "x-", "bad name!", "1.0 beta", "x_y"] {
            assert!(!is_valid_software_token(bad), "{bad}");
        }
    }
}
