//! CreateTopics (key 19, v0–7; v0–1 through `server::legacy`): validate each topic (name, partitions, replication
//! factor, assignments, configs), then create it unless `validate_only`. v5+ answers
//! with the topic's effective configs.

use std::collections::{BTreeMap, HashSet};

use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::{errors, str_bytes};
use crate::cluster::topic_config::TOPIC_CONFIGS;
use crate::security::acl::AclOperation;
use crate::topics::CreateTopic;

/// A topic refused because the client's controller_mutation_rate is spent (KIP-599).
fn throttled(result: CreatableTopicResult) -> CreatableTopicResult {
    result
        .with_error_code(ResponseError::ThrottlingQuotaExceeded.code())
        .with_error_message(Some(str_bytes(crate::quota::THROTTLED_MUTATION)))
}

pub async fn handle(ctx: &RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse {
    let services = &ctx.services;
    let mut seen = HashSet::new();
    let duplicates: HashSet<String> = request
        .topics
        .iter()
        .filter(|t| !seen.insert(t.name.to_string()))
        .map(|t| t.name.to_string())
        .collect();
    let mut results = Vec::with_capacity(request.topics.len());
    let may_create_any = ctx.authorize_cluster(AclOperation::Create);
    for topic in &request.topics {
        let name = topic.name.to_string();
        let result = CreatableTopicResult::default()
            .with_name(topic.name.clone())
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        // CREATE on the cluster or on the topic (Kafka's handleCreateTopicsRequest).
        if !may_create_any && !ctx.authorize_topic(AclOperation::Create, &name) {
            results.push(
                result
                    .with_error_code(ResponseError::TopicAuthorizationFailed.code())
                    .with_error_message(Some(str_bytes("Authorization failed."))),
            );
            continue;
        }
        if duplicates.contains(&name) {
            results.push(
                result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(str_bytes(format!(
                        "topic '{name}' appears more than once"
                    )))),
            );
            continue;
        }
        let configs: BTreeMap<String, String> = topic
            .configs
            .iter()
            .filter_map(|c| {
                c.value
                    .as_ref()
                    .map(|v| (c.name.to_string(), v.to_string()))
            })
            .collect();
        let create = CreateTopic {
            name: name.clone(),
            partitions: topic.num_partitions,
            replication_factor: topic.replication_factor,
            assignments: topic
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect(),
            configs,
        };
        let outcome = if request.validate_only {
            match services.store.topic(&name).await {
                Some(_) => Err(crate::topics::TopicError::AlreadyExists(name.clone())),
                None => services.topics.validate_create(&create).map(|t| {
                    (
                        t.partitions,
                        t.replication_factor,
                        t.configs,
                        uuid::Uuid::nil(),
                    )
                }),
            }
        } else {
            let created = ctx
                .under_mutation_quota(ctx.api_version >= 6, || async {
                    let created = services.topics.create(&create).await;
                    let partitions = created.as_ref().map_or(0, |s| s.partitions.max(0) as u32);
                    (created, partitions)
                })
                .await;
            match created {
                Some(created) => {
                    created.map(|s| (s.partitions, s.replication_factor, s.configs, s.topic_id))
                }
                None => {
                    results.push(throttled(result));
                    continue;
                }
            }
        };
        match outcome {
            Ok((partitions, replication_factor, overrides, topic_id)) => {
                let defaults = services.replicas.defaults();
                let configs = TOPIC_CONFIGS
                    .iter()
                    .filter_map(|def| {
                        defaults
                            .resolve(&overrides, def.name)
                            .map(|(value, source)| {
                                CreatableTopicConfigs::default()
                                    .with_name(str_bytes(def.name))
                                    .with_value(Some(str_bytes(value)))
                                    .with_config_source(source as i8)
                            })
                    })
                    .collect();
                results.push(
                    result
                        .with_topic_id(topic_id)
                        .with_num_partitions(partitions)
                        .with_replication_factor(replication_factor)
                        .with_configs(Some(configs)),
                );
            }
            Err(error) => results.push(
                result
                    .with_error_code(errors::topic_error(&error).code())
                    .with_error_message(Some(str_bytes(error.to_string()))),
            ),
        }
    }
    CreateTopicsResponse::default().with_topics(results)
}
