//! DescribeConfigs (key 32, v0–4; v0 through `server::legacy`): every config of a topic with its effective value and
//! source (never an empty list), or the broker's static configs. Synonyms (v1+) list
//! the topic override, the broker setting and the default, most specific first.

use std::collections::BTreeMap;

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::str_bytes;
use super::{RESOURCE_BROKER, RESOURCE_TOPIC};
use crate::cluster::topic_config::{ConfigSource, ConfigType, TOPIC_CONFIGS};

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
        let configs = match resource.resource_type {
            RESOURCE_TOPIC => match ctx.services.store.topic(&name).await {
                Some(spec) => Ok(topic_configs(ctx, &request, &spec.configs, &wanted)),
                None => Err((
                    ResponseError::UnknownTopicOrPartition,
                    format!("topic '{name}' does not exist"),
                )),
            },
            RESOURCE_BROKER if name.is_empty() || name == ctx.node_id().to_string() => {
                Ok(broker_configs(ctx, &request, &wanted))
            }
            RESOURCE_BROKER => Err((
                ResponseError::InvalidRequest,
                format!("this is broker {}, not {name}", ctx.node_id()),
            )),
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
    value: &'a str,
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
            .with_value(Some(str_bytes(self.value)))
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

fn topic_configs(
    ctx: &RequestContext,
    request: &DescribeConfigsRequest,
    overrides: &BTreeMap<String, String>,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<DescribeConfigsResourceResult> {
    let defaults = &ctx.services.topics.config().defaults;
    TOPIC_CONFIGS
        .iter()
        .filter(|def| wanted(def.name))
        .filter_map(|def| {
            let (value, source) = defaults.resolve(overrides, def.name)?;
            let mut synonyms = Vec::new();
            if let Some(v) = overrides.get(def.name) {
                synonyms.push(synonym(def.name, v, ConfigSource::DynamicTopic));
            }
            if let Some((v, s)) = defaults.broker_value(def.name) {
                synonyms.push(synonym(def.broker_key, v, s));
            }
            let entry = ConfigEntry {
                name: def.name,
                value,
                source,
                kind: def.kind,
                read_only: false,
                documentation: def.documentation,
                synonyms,
            };
            Some(entry.into_result(request))
        })
        .collect()
}

fn broker_configs(
    ctx: &RequestContext,
    request: &DescribeConfigsRequest,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<DescribeConfigsResourceResult> {
    let services = &ctx.services;
    let topics = services.topics.config();
    let durability = services.replicas.durability();
    let node = &services.node;
    let mut out = Vec::new();
    let mut push = |name: &str, value: String, kind: ConfigType, doc: &str| {
        if wanted(name) {
            let synonyms = vec![synonym(name, &value, ConfigSource::StaticBroker)];
            let entry = ConfigEntry {
                name,
                value: &value,
                source: ConfigSource::StaticBroker,
                kind,
                read_only: true,
                documentation: doc,
                synonyms,
            };
            out.push(entry.into_result(request));
        }
    };
    push(
        "broker.id",
        node.node_id.to_string(),
        ConfigType::Int,
        "This broker's id.",
    );
    push(
        "node.id",
        node.node_id.to_string(),
        ConfigType::Int,
        "This broker's id.",
    );
    push(
        "advertised.listeners",
        format!("PLAINTEXT://{}:{}", node.host, node.port),
        ConfigType::String,
        "Address clients connect to.",
    );
    push(
        "auto.create.topics.enable",
        topics.auto_create.to_string(),
        ConfigType::Boolean,
        "Create topics on first use.",
    );
    push(
        "num.partitions",
        topics.num_partitions.to_string(),
        ConfigType::Int,
        "Partitions of an auto-created topic.",
    );
    push(
        "default.replication.factor",
        topics.default_replication_factor.to_string(),
        ConfigType::Int,
        "Replication factor of an auto-created topic.",
    );
    push(
        "socket.request.max.bytes",
        services.server.max_request_bytes.to_string(),
        ConfigType::Int,
        "Largest request accepted.",
    );
    push(
        "log.flush.interval.ms",
        durability.flush_interval.as_millis().to_string(),
        ConfigType::Long,
        "Longest time data stays unflushed.",
    );
    for def in TOPIC_CONFIGS {
        if let Some((value, _)) = topics.defaults.broker_value(def.name) {
            push(
                def.broker_key,
                value.to_string(),
                def.kind,
                def.documentation,
            );
        }
    }
    out
}
