//! IncrementalAlterConfigs (key 44, v0–1): SET, DELETE, APPEND and SUBTRACT (the last
//! two for list configs) applied to a topic's explicit configs.

use std::collections::BTreeMap;

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use super::{RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::cluster::topic_config::{self, ConfigType};

const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

pub async fn handle(
    ctx: &RequestContext,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let outcome = match resource.resource_type {
            RESOURCE_TOPIC => alter_topic(ctx, resource, request.validate_only).await,
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
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

async fn alter_topic(
    ctx: &RequestContext,
    resource: &AlterConfigsResource,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    let name = resource.resource_name.to_string();
    let spec = ctx.services.store.topic(&name).await.ok_or_else(|| {
        (
            ResponseError::UnknownTopicOrPartition,
            format!("topic '{name}' does not exist"),
        )
    })?;
    let configs = apply(spec.configs, resource)?;
    ctx.services
        .topics
        .set_configs(&name, configs, validate_only)
        .await
        .map_err(|e| (errors::topic_error(&e), e.to_string()))
}

fn apply(
    mut configs: BTreeMap<String, String>,
    resource: &AlterConfigsResource,
) -> Result<BTreeMap<String, String>, (ResponseError, String)> {
    for op in &resource.configs {
        let name = op.name.to_string();
        let def = topic_config::definition(&name).ok_or_else(|| {
            (
                ResponseError::InvalidConfig,
                format!("unknown topic config '{name}'"),
            )
        })?;
        let value = op.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
        match op.config_operation {
            SET => {
                configs.insert(name, value);
            }
            DELETE => {
                configs.remove(&name);
            }
            APPEND | SUBTRACT if def.kind == ConfigType::List => {
                let mut items: Vec<String> = configs
                    .get(&name)
                    .map(|v| {
                        v.split(',')
                            .map(str::trim)
                            .filter(|s| !s.is_empty())
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default();
                for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if op.config_operation == APPEND && !items.iter().any(|i| i == item) {
                        items.push(item.to_string());
                    } else if op.config_operation == SUBTRACT {
                        items.retain(|i| i != item);
                    }
                }
                configs.insert(name, items.join(","));
            }
            APPEND | SUBTRACT => {
                return Err((
                    ResponseError::InvalidConfig,
                    format!("{name} is not a list; APPEND/SUBTRACT need one"),
                ))
            }
            other => {
                return Err((
                    ResponseError::InvalidRequest,
                    format!("unknown config operation {other}"),
                ))
            }
        }
    }
    Ok(configs)
}
