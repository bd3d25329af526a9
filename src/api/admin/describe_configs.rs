//! DescribeConfigs (key 32, v0–4; v0 through `server::legacy`): every config of a topic
//! with its effective value and source (never an empty list), every config of this broker (read-only ones and the
//! dynamic ones, with the level each value comes from), or, for the resource name `""`,
//! the cluster-wide dynamic defaults that are set, or every config of a group. Synonyms (v1+) list every level that
//! has a value, most specific first: topic override, dynamic per-broker, dynamic
//! default, static, default (Kafka's `ConfigHelper`).
//! With an authorizer a topic or group needs DESCRIBE_CONFIGS on it, a broker
//! DESCRIBE_CONFIGS on the cluster; a refused resource answers TOPIC_, GROUP_ or
//! CLUSTER_AUTHORIZATION_FAILED with
//! Kafka's default message and no configs, the others are described as usual.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::str_bytes;
use super::{config_resource_refusal, RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC};
use crate::cluster::broker_config;
use crate::cluster::dynamic_broker_configs::DYNAMIC_BROKER_CONFIGS;
use crate::cluster::topic_config::{ConfigSource, ConfigType, Synonym, TOPIC_CONFIGS};
use crate::group::config::{GroupConfigKind, GROUP_CONFIGS};
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let mut results = Vec::with_capacity(request.resources.len());
    for resource in &request.resources {
        let keys: Option<Vec<String>> = resource
            .configuration_keys
            .as_ref()
            .map(|k| k.iter().map(|s| s.to_string()).collect());
        let wanted = |name: &str| keys.as_ref().is_none_or(|k| k.iter().any(|w| w == name));
        let result = DescribeConfigsResult::default()
            .with_resource_type(resource.resource_type)
            .with_resource_name(resource.resource_name.clone());
        let name = resource.resource_name.to_string();
        if let Some(error) = config_resource_refusal(
            ctx,
            AclOperation::DescribeConfigs,
            resource.resource_type,
            &name,
            true,
        ) {
            results.push(
                result
                    .with_error_code(error.code())
                    .with_error_message(Some(str_bytes(error.to_string()))),
            );
            continue;
        }
        let configs = match resource.resource_type {
            RESOURCE_TOPIC => match ctx.services.store.topic(&name).await {
                Some(spec) => Ok(topic_configs(ctx, &request, &spec.configs, &wanted)),
                None => Err((
                    ResponseError::UnknownTopicOrPartition,
                    format!("topic '{name}' does not exist"),
                )),
            },
            RESOURCE_BROKER if name.is_empty() => {
                Ok(default_broker_configs(ctx, &request, &wanted))
            }
            RESOURCE_BROKER => match name.trim().parse::<i32>() {
                Ok(id) if id == ctx.node_id() => Ok(broker_configs(ctx, &request, &wanted)),
                Ok(_) => Err((
                    ResponseError::InvalidRequest,
                    format!(
                        "Unexpected broker id, expected {} or empty string, but received {name}",
                        ctx.node_id()
                    ),
                )),
                Err(_) => Err((
                    ResponseError::InvalidRequest,
                    format!("Broker id must be an integer, but it is: {name}"),
                )),
            },
            RESOURCE_GROUP if name.is_empty() => Err((
                ResponseError::InvalidRequest,
                "Group name must not be empty".to_string(),
            )),
            RESOURCE_GROUP => Ok(group_configs(ctx, &request, &name, &wanted)),
            other => Err((
                ResponseError::InvalidRequest,
                format!("resource type {other} is not supported"),
            )),
        };
        results.push(match configs {
            Ok(configs) => result.with_configs(configs),
            Err((error, message)) => result
                .with_error_code(error.code())
                .with_error_message(Some(str_bytes(message))),
        });
    }
    DescribeConfigsResponse::default().with_results(results)
}

/// One described config before it is shaped for the request's version and flags.
struct ConfigEntry<'a> {
    name: &'a str,
    /// `None`: no level has a value, or a password (never described).
    value: Option<&'a str>,
    sensitive: bool,
    source: ConfigSource,
    kind: ConfigType,
    read_only: bool,
    documentation: &'a str,
    synonyms: Vec<DescribeConfigsSynonym>,
}

impl ConfigEntry<'_> {
    fn into_result(self, request: &DescribeConfigsRequest) -> DescribeConfigsResourceResult {
        let mut result = DescribeConfigsResourceResult::default()
            .with_name(str_bytes(self.name))
            .with_value(self.value.filter(|_| !self.sensitive).map(str_bytes))
            .with_is_sensitive(self.sensitive)
            .with_read_only(self.read_only)
            .with_config_source(self.source as i8)
            .with_config_type(self.kind as i8);
        if request.include_synonyms {
            result = result.with_synonyms(self.synonyms);
        }
        if request.include_documentation {
            result = result.with_documentation(Some(str_bytes(self.documentation)));
        }
        result
    }
}

fn synonym(name: &str, value: &str, source: ConfigSource) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(str_bytes(name))
        .with_value(Some(str_bytes(value)))
        .with_source(source as i8)
}

/// The levels as DescribeConfigs synonyms; a password's values stay null.
fn synonyms(levels: &[Synonym], sensitive: bool) -> Vec<DescribeConfigsSynonym> {
    levels
        .iter()
        .map(|s| synonym(&s.name, &s.value, s.source))
        .map(|s| if sensitive { s.with_value(None) } else { s })
        .collect()
}

fn topic_configs(
    ctx: &RequestContext,
    request: &DescribeConfigsRequest,
    overrides: &BTreeMap<String, String>,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<DescribeConfigsResourceResult> {
    let defaults = ctx.services.replicas.defaults();
    TOPIC_CONFIGS
        .iter()
        .filter(|def| wanted(def.name))
        .filter(|def| def.described_by_default() || overrides.contains_key(def.name))
        .filter_map(|def| {
            let (value, source) = defaults.resolve(overrides, def.name)?;
            let mut levels = Vec::new();
            if let Some(v) = overrides.get(def.name) {
                levels.push(synonym(def.name, v, ConfigSource::DynamicTopic));
            }
            levels.extend(synonyms(&defaults.broker_synonyms(def.name), false));
            let entry = ConfigEntry {
                name: def.name,
                value: Some(&value),
                sensitive: false,
                source,
                kind: def.kind,
                read_only: false,
                documentation: def.documentation,
                synonyms: levels,
            };
            Some(entry.into_result(request))
        })
        .collect()
}

/// Every config of a group (it need not exist): its own value where it has one
/// (DYNAMIC_GROUP_CONFIG), else the broker's setting (DEFAULT_CONFIG), as Kafka's
/// `ConfigHelper.createGroupConfigEntry` describes them.
fn group_configs(
    ctx: &RequestContext,
    request: &DescribeConfigsRequest,
    group: &str,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<DescribeConfigsResourceResult> {
    let configs = ctx.services.groups.group_configs();
    let overrides = configs.overrides(group);
    let settings = configs.settings(group);
    GROUP_CONFIGS
        .iter()
        .filter(|def| wanted(def.name))
        .filter_map(|def| {
            let value = settings.value_of(def.name)?;
            let source = if overrides.contains_key(def.name) {
                ConfigSource::DynamicGroup
            } else {
                ConfigSource::Default
            };
            let entry = ConfigEntry {
                name: def.name,
                value: Some(&value),
                sensitive: false,
                source,
                kind: match def.kind {
                    GroupConfigKind::Int => ConfigType::Int,
                    GroupConfigKind::String => ConfigType::String,
                },
                read_only: false,
                documentation: def.documentation,
                synonyms: vec![synonym(def.name, &value, source)],
            };
            Some(entry.into_result(request))
        })
        .collect()
}

/// Every config of this broker: the read-only ones as it runs with them, and every
/// dynamic one (the topic defaults, then Kafka's other dynamic broker configs and any
/// listener-prefixed one that is set), resolved through every level.
fn broker_configs(
    ctx: &RequestContext,
    request: &DescribeConfigsRequest,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<DescribeConfigsResourceResult> {
    let defaults = ctx.services.replicas.defaults();
    let dynamic = defaults.dynamic();
    let mut out = Vec::new();
    for config in &ctx.services.static_configs {
        if !wanted(config.name) || broker_config::is_dynamic(config.name) {
            continue;
        }
        let levels = config.synonyms();
        let entry = ConfigEntry {
            name: config.name,
            value: Some(&config.value),
            sensitive: false,
            source: config.source(),
            kind: config.kind,
            read_only: true,
            documentation: config.documentation,
            synonyms: synonyms(&levels, false),
        };
        out.push(entry.into_result(request));
    }
    let topic_defaults = TOPIC_CONFIGS.iter().filter_map(|def| {
        def.broker_key
            .map(|key| (key, defaults.broker_synonyms(def.name)))
    });
    let others = DYNAMIC_BROKER_CONFIGS
        .iter()
        .map(|c| c.name)
        .chain(
            dynamic
                .this_broker
                .keys()
                .chain(dynamic.cluster_default.keys())
                .map(String::as_str)
                .filter(|name| name.starts_with("listener.name.")),
        )
        .collect::<BTreeSet<&str>>()
        .into_iter()
        .map(|name| {
            let flag = ctx.services.static_configs.iter().find(|c| c.name == name);
            (name, broker_config::dynamic_levels(name, dynamic, flag))
        });
    for (name, levels) in topic_defaults.chain(others) {
        let Some(d) = broker_config::dynamic(name).filter(|_| wanted(name)) else {
            continue;
        };
        let first = levels.first();
        let entry = ConfigEntry {
            name,
            value: first.map(|s| s.value.as_str()),
            sensitive: d.sensitive(),
            source: first.map_or(ConfigSource::Default, |s| s.source),
            kind: d.kind,
            read_only: false,
            documentation: d.documentation,
            synonyms: synonyms(&levels, d.sensitive()),
        };
        out.push(entry.into_result(request));
    }
    out
}

/// The cluster-wide dynamic defaults that are set (resource name `""`), each with only
/// its DYNAMIC_DEFAULT_BROKER_CONFIG synonym, as Kafka describes them.
fn default_broker_configs(
    ctx: &RequestContext,
    request: &DescribeConfigsRequest,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<DescribeConfigsResourceResult> {
    let defaults = ctx.services.replicas.defaults();
    let mut out = Vec::new();
    for (name, value) in &defaults.dynamic().cluster_default {
        let Some(d) = broker_config::dynamic(name).filter(|_| wanted(name)) else {
            continue;
        };
        let source = ConfigSource::DynamicDefaultBroker;
        let level = [Synonym {
            name: name.to_string(),
            value: value.clone(),
            source,
        }];
        let entry = ConfigEntry {
            name,
            value: Some(value),
            sensitive: d.sensitive(),
            source,
            kind: d.kind,
            read_only: false,
            documentation: d.documentation,
            synonyms: synonyms(&level, d.sensitive()),
        };
        out.push(entry.into_result(request));
    }
    out
}
