//! AlterConfigs (key 33, v0–2): replace a topic's whole set of explicit configs. Broker
//! configs are static in tern (set by flag, environment or file) and are refused.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use super::{RESOURCE_BROKER, RESOURCE_TOPIC};

pub async fn handle(ctx: &RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let outcome = match resource.resource_type {
            RESOURCE_TOPIC => {
                let configs: BTreeMap<String, String> = resource
                    .configs
                    .iter()
                    .filter_map(|c| {
                        c.value
                            .as_ref()
                            .map(|v| (c.name.to_string(), v.to_string()))
                    })
                    .collect();
                ctx.services
                    .topics
                    .set_configs(&resource.resource_name, configs, request.validate_only)
                    .await
                    .map_err(|e| (errors::topic_error(&e), e.to_string()))
            }
            RESOURCE_BROKER => Err((
                ResponseError::InvalidRequest,
                "broker configs are static in tern".to_string(),
            )),
            other => Err((
                ResponseError::InvalidRequest,
                format!("resource type {other} is not supported"),
            )),
        };
        responses.push(match outcome {
            Ok(()) => response,
            Err((error, message)) => response
                .with_error_code(error.code())
                .with_error_message(Some(str_bytes(message))),
        });
    }
    AlterConfigsResponse::default().with_responses(responses)
}
