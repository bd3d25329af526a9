//! Metadata (key 3, v0–13): the live brokers, the controller, the cluster id, and
//! topics with each partition's leader, replicas and leader epoch, as the metadata
//! store says: any broker answers for the whole cluster. Requested topics that don't
//! exist are auto-created when both the request (v4+) and the broker allow it, as in
//! Kafka. A partition not placed yet (or whose leader is gone) answers
//! LEADER_NOT_AVAILABLE, which clients retry.
//!
//! With an authorizer: the all-topics list holds only topics the principal may DESCRIBE;
//! a named topic it may not DESCRIBE answers TOPIC_AUTHORIZATION_FAILED whether or not it
//! exists; auto-creation needs CREATE on the cluster or the topic (else
//! TOPIC_AUTHORIZATION_FAILED), as Kafka's `handleTopicMetadataRequest`.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::ResponseError;

use super::context::RequestContext;
use super::{errors, str_bytes, topic_name, AUTHORIZED_OPERATIONS_OMITTED};
use crate::cluster::TopicSpec;
use crate::security::acl::{AclOperation, ResourceType, CLUSTER_NAME};

pub async fn handle(ctx: &RequestContext, request: MetadataRequest) -> MetadataResponse {
    let services = &ctx.services;
    let all_topics = match &request.topics {
        None => true,
        Some(topics) => topics.is_empty() && ctx.api_version == 0,
    };
    let mut topics = Vec::new();
    if all_topics {
        for spec in services.store.topics().await {
            if crate::topics::is_internal(&spec.name) {
                continue; // hidden unless asked for by name
            }
            if !ctx.authorize_topic(AclOperation::Describe, &spec.name) {
                continue; // KIP rule: what may not be described is not listed
            }
            match services.topics.get_or_auto_create(&spec.name, false).await {
                Ok(Some(replicas)) => topics.push(describe(ctx, &replicas.spec)),
                Ok(None) => {}
                Err(error) => {
                    topics.push(failed(Some(spec.name.clone()), errors::topic_error(&error)))
                }
            }
        }
    } else {
        // v0–3 always auto-create; v4+ only when asked.
        let allow_auto_create = ctx.api_version < 4 || request.allow_auto_topic_creation;
        for requested in request.topics.iter().flatten() {
            let name = match &requested.name {
                Some(name) => name.to_string(),
                None => match services.store.topic_by_id(requested.topic_id).await {
                    Some(spec) => spec.name,
                    None => {
                        let mut topic = failed(None, ResponseError::UnknownTopicId);
                        topic.topic_id = requested.topic_id;
                        topics.push(topic);
                        continue;
                    }
                },
            };
            // Unauthorized and unknown look alike to a principal that may not DESCRIBE
            // the name (Kafka answers TOPIC_AUTHORIZATION_FAILED whether or not it exists).
            if !ctx.authorize_topic(AclOperation::Describe, &name) {
                let mut topic = failed(
                    requested.name.is_some().then_some(name),
                    ResponseError::TopicAuthorizationFailed,
                );
                topic.topic_id = requested.topic_id;
                topics.push(topic);
                continue;
            }
            let may_create = allow_auto_create
                && (ctx.authorize_cluster(AclOperation::Create)
                    || ctx.authorize_topic(AclOperation::Create, &name));
            let would_create = allow_auto_create && services.topics.auto_create_enabled();
            match services.topics.get_or_auto_create(&name, may_create).await {
                Ok(Some(replicas)) => topics.push(describe(ctx, &replicas.spec)),
                Ok(None) if would_create && !may_create => {
                    topics.push(failed(Some(name), ResponseError::TopicAuthorizationFailed))
                }
                Ok(None) => topics.push(failed(Some(name), ResponseError::UnknownTopicOrPartition)),
                Err(error) => topics.push(failed(Some(name), errors::topic_error(&error))),
            }
        }
    }
    // KIP-430 (v8+; cluster operations v8–10 only): asked for, the real bit fields.
    if ctx.api_version >= 8 && request.include_topic_authorized_operations {
        for topic in &mut topics {
            if topic.error_code == 0 {
                if let Some(name) = &topic.name {
                    topic.topic_authorized_operations =
                        ctx.authorized_operations(ResourceType::Topic, name.0.as_str());
                }
            }
        }
    }
    let cluster_operations =
        if (8..=10).contains(&ctx.api_version) && request.include_cluster_authorized_operations {
            ctx.authorized_operations(ResourceType::Cluster, CLUSTER_NAME)
        } else {
            AUTHORIZED_OPERATIONS_OMITTED
        };
    let brokers = services
        .store
        .brokers()
        .into_iter()
        .map(|b| {
            let (host, port) = b.address_for(ctx.listener());
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.node_id))
                .with_host(str_bytes(host.to_string()))
                .with_port(port)
                .with_rack(b.rack.map(str_bytes))
        })
        .collect();
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(str_bytes(services.store.cluster_id())))
        .with_controller_id(BrokerId(services.store.controller_id().unwrap_or(-1)))
        .with_topics(topics)
        .with_cluster_authorized_operations(cluster_operations)
}

fn failed(name: Option<String>, error: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name.map(topic_name))
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn describe(ctx: &RequestContext, spec: &TopicSpec) -> MetadataResponseTopic {
    let assignment = ctx.services.store.assignment(spec);
    let live: Vec<i32> = ctx
        .services
        .store
        .brokers()
        .iter()
        .map(|b| b.node_id)
        .collect();
    let partitions = (0..spec.partitions)
        .map(|index| {
            let response = MetadataResponsePartition::default().with_partition_index(index);
            match assignment.as_ref().and_then(|a| a.partition(index)) {
                Some(p) if live.contains(&p.leader) => {
                    let offline = p.replicas.iter().filter(|r| !live.contains(r));
                    response
                        .with_leader_id(BrokerId(p.leader))
                        .with_leader_epoch(p.leader_epoch)
                        .with_replica_nodes(p.replicas.iter().copied().map(BrokerId).collect())
                        .with_isr_nodes(p.in_sync().into_iter().map(BrokerId).collect())
                        .with_offline_replicas(offline.copied().map(BrokerId).collect())
                }
                // No live leader (the last in-sync replica is gone): Kafka still lists
                // where the replicas are.
                Some(p) => {
                    let offline = p.replicas.iter().filter(|r| !live.contains(r));
                    response
                        .with_error_code(ResponseError::LeaderNotAvailable.code())
                        .with_leader_id(BrokerId(-1))
                        .with_leader_epoch(-1)
                        .with_replica_nodes(p.replicas.iter().copied().map(BrokerId).collect())
                        .with_isr_nodes(p.in_sync().into_iter().map(BrokerId).collect())
                        .with_offline_replicas(offline.copied().map(BrokerId).collect())
                }
                None => response
                    .with_error_code(ResponseError::LeaderNotAvailable.code())
                    .with_leader_id(BrokerId(-1))
                    .with_leader_epoch(-1),
            }
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(spec.name.clone())))
        .with_topic_id(spec.topic_id)
        .with_is_internal(crate::topics::is_internal(&spec.name))
        .with_partitions(partitions)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
