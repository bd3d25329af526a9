//! IncrementalAlterConfigs (key 44, v0–1): SET, DELETE, APPEND and SUBTRACT (the last
//! two for list configs) applied to a topic's explicit configs, a group's configs, or to one level of
//! dynamic broker configs (resource name `""`: the cluster-wide default; this broker's
//! id: its own), checked as a whole afterwards. With an authorizer a topic needs
//! ALTER_CONFIGS on it, a broker or broker logger ALTER_CONFIGS on the cluster; a
//! refused resource answers TOPIC_ or CLUSTER_AUTHORIZATION_FAILED with a null message
//! (after the duplicate-key check, which Kafka's `ConfigAdminManager.preprocess` does first).

use std::collections::BTreeMap;

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use super::{
    config_resource_refusal, group_configs, read_only_broker_config, RESOURCE_BROKER,
    RESOURCE_GROUP, RESOURCE_TOPIC,
};
use crate::cluster::broker_config;
use crate::cluster::topic_config::{self, ConfigType};
use crate::security::acl::AclOperation;

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
        let refusal = config_resource_refusal(
            ctx,
            AclOperation::AlterConfigs,
            resource.resource_type,
            &resource.resource_name,
            true,
        );
        if let (false, Some(error)) = (has_duplicates(resource), refusal) {
            responses.push(
                response
                    .with_error_code(error.code())
                    .with_error_message(None),
            );
            continue;
        }
        let outcome = match resource.resource_type {
            _ if has_duplicates(resource) => Err((
                ResponseError::InvalidRequest,
                "Error due to duplicate config keys".to_string(),
            )),
            RESOURCE_TOPIC => alter_topic(ctx, resource, request.validate_only).await,
            RESOURCE_BROKER => alter_broker(ctx, resource, request.validate_only).await,
            RESOURCE_GROUP => alter_group(ctx, resource, request.validate_only).await,
            other => Err((
                ResponseError::InvalidRequest,
                format!("resource type {other} is not supported"),
            )),
        };
        responses.push(match outcome {
            // Kafka sends a null message with success.
            Ok(()) => response.with_error_message(None),
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
    let kind_of = |name: &str| {
        topic_config::definition(name)
            .map(|d| Some(d.kind))
            .ok_or_else(|| {
                (
                    ResponseError::InvalidConfig,
                    topic_config::ConfigError::Unknown(name.to_string()).to_string(),
                )
            })
    };
    let configs = apply(spec.configs, resource, &kind_of)?;
    ctx.services
        .topics
        .set_configs(&name, configs, validate_only)
        .await
        .map_err(|e| (errors::topic_error(&e), e.to_string()))
}

async fn alter_broker(
    ctx: &RequestContext,
    resource: &AlterConfigsResource,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    let level = broker_config::target(&resource.resource_name, ctx.node_id())
        .map_err(|e| (ResponseError::InvalidRequest, e.to_string()))?;
    // Names tern does not know pass here and are refused, with the rest, by the check
    // of the resulting set.
    let kind_of = |name: &str| Ok(broker_config::dynamic_kind(name));
    let current = ctx.services.topics.broker_configs(level);
    let configs = apply(current, resource, &kind_of)?;
    let read_only = |name: &str| read_only_broker_config(ctx, name);
    ctx.services
        .topics
        .set_broker_configs(level, configs, &read_only, validate_only)
        .await
        .map_err(|e| (errors::topic_error(&e), e.to_string()))
}

async fn alter_group(
    ctx: &RequestContext,
    resource: &AlterConfigsResource,
    validate_only: bool,
) -> Result<(), (ResponseError, String)> {
    let group = resource.resource_name.as_str();
    // No group config is a list: APPEND and SUBTRACT are refused by `apply`.
    let kind_of = |name: &str| group_configs::known(name).map(|()| None);
    let current = ctx.services.groups.group_configs().overrides(group);
    let configs = apply(current, resource, &kind_of)?;
    group_configs::replace(ctx, group, configs, validate_only).await
}

fn has_duplicates(resource: &AlterConfigsResource) -> bool {
    let mut seen = std::collections::BTreeSet::new();
    !resource
        .configs
        .iter()
        .all(|op| seen.insert(op.name.as_str()))
}

/// The type of a config by name: `Err` refuses the name outright, `Ok(None)` leaves it
/// to the later check.
type KindOf<'a> = dyn Fn(&str) -> Result<Option<ConfigType>, (ResponseError, String)> + 'a;

fn apply(
    mut configs: BTreeMap<String, String>,
    resource: &AlterConfigsResource,
    kind_of: &KindOf<'_>,
) -> Result<BTreeMap<String, String>, (ResponseError, String)> {
    for op in &resource.configs {
        let name = op.name.to_string();
        let kind = kind_of(&name)?;
        if op.config_operation != DELETE && op.value.is_none() {
            return Err((
                ResponseError::InvalidRequest,
                format!("Null value not supported for : {name}"),
            ));
        }
        let value = op.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
        match op.config_operation {
            SET => {
                configs.insert(name, value);
            }
            DELETE => {
                configs.remove(&name);
            }
            APPEND | SUBTRACT if kind == Some(ConfigType::List) => {
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
