//! AlterConfigs (key 33, v0–2): replace the whole set of explicit configs of a topic,
//! of a group, or of one level of dynamic broker configs (resource name `""`: the
//! cluster-wide default; this broker's id: its own). Configs a broker has but cannot change at run time, and
//! another broker's id, are refused with INVALID_REQUEST as Kafka does. With an authorizer a
//! topic needs ALTER_CONFIGS on it, a broker ALTER_CONFIGS on the cluster; a refused
//! resource answers TOPIC_ or CLUSTER_AUTHORIZATION_FAILED with a null message, as
//! Kafka's `ControllerApis.authorizeAlterResource` (which has no broker-logger case).

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use super::{
    config_resource_refusal, group_configs, read_only_broker_config, RESOURCE_BROKER,
    RESOURCE_GROUP, RESOURCE_TOPIC,
};
use crate::cluster::broker_config::{self, BrokerConfigError};
use crate::security::acl::AclOperation;

pub async fn handle(ctx: &RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let response = AlterConfigsResourceResponse::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        if let Some(error) = config_resource_refusal(
            ctx,
            AclOperation::AlterConfigs,
            resource.resource_type,
            &resource.resource_name,
            false,
        ) {
            responses.push(
                response
                    .with_error_code(error.code())
                    .with_error_message(None),
            );
            continue;
        }
        let outcome = match requested_configs(resource) {
            Err(error) => Err((ResponseError::InvalidRequest, error.to_string())),
            Ok(configs) => match resource.resource_type {
                RESOURCE_TOPIC => ctx
                    .services
                    .topics
                    .set_configs(&resource.resource_name, configs, request.validate_only)
                    .await
                    .map_err(|e| (errors::topic_error(&e), e.to_string())),
                RESOURCE_BROKER => {
                    alter_broker(ctx, resource, configs, request.validate_only).await
                }
                RESOURCE_GROUP => {
                    group_configs::replace(
                        ctx,
                        &resource.resource_name,
                        configs,
                        request.validate_only,
                    )
                    .await
                }
                other => Err((
                    ResponseError::InvalidRequest,
                    format!("resource type {other} is not supported"),
                )),
            },
        };
        responses.push(match outcome {
            // Kafka sends a null message with success.
            Ok(()) => response.with_error_message(None),
            Err((error, message)) => response
                .with_error_code(error.code())
                .with_error_message(Some(str_bytes(message))),
        });
    }
    AlterConfigsResponse::default().with_responses(responses)
}

/// The configs a resource asks for, refusing duplicate names and null values (Kafka's
/// `ConfigAdminManager` checks).
fn requested_configs(
    resource: &AlterConfigsResource,
) -> Result<BTreeMap<String, String>, BrokerConfigError> {
    let mut configs = BTreeMap::new();
    for config in &resource.configs {
        let name = config.name.to_string();
        let Some(value) = &config.value else {
            return Err(BrokerConfigError::NullValue(name));
        };
        if configs.insert(name, value.to_string()).is_some() {
            return Err(BrokerConfigError::DuplicateKeys);
        }
    }
    Ok(configs)
}

async fn alter_broker(
    ctx: &RequestContext,
    resource: &AlterConfigsResource,
    configs: BTreeMap<String, String>,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    let level = broker_config::target(&resource.resource_name, ctx.node_id())
        .map_err(|e| (ResponseError::InvalidRequest, e.to_string()))?;
    let read_only = |name: &str| read_only_broker_config(ctx, name);
    ctx.services
        .topics
        .set_broker_configs(level, configs, &read_only, validate_only)
        .await
        .map_err(|e| (errors::topic_error(&e), e.to_string()))
}
