//! Metadata (key 3, v0–13): brokers, the cluster id, and topics with their partitions.
//! Requested topics that don't exist are auto-created when both the request (v4+) and
//! the broker allow it, as in Kafka.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse};
use kafka_protocol::ResponseError;

use super::context::RequestContext;
use super::{errors, str_bytes, topic_name, AUTHORIZED_OPERATIONS_OMITTED};
use crate::replication::TopicReplicas;

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
            match services.topics.get_or_auto_create(&spec.name, false).await {
                Ok(Some(replicas)) => topics.push(describe(ctx, &replicas)),
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
            match services
                .topics
                .get_or_auto_create(&name, allow_auto_create)
                .await
            {
                Ok(Some(replicas)) => topics.push(describe(ctx, &replicas)),
                Ok(None) => topics.push(failed(Some(name), ResponseError::UnknownTopicOrPartition)),
                Err(error) => topics.push(failed(Some(name), errors::topic_error(&error))),
            }
        }
    }
    let node = &services.node;
    MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(node.node_id))
            .with_host(str_bytes(node.host.clone()))
            .with_port(node.port)
            .with_rack(node.rack.clone().map(str_bytes))])
        .with_cluster_id(Some(str_bytes(services.store.cluster_id())))
        .with_controller_id(BrokerId(node.node_id))
        .with_topics(topics)
        .with_cluster_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn failed(name: Option<String>, error: ResponseError) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_error_code(error.code())
        .with_name(name.map(topic_name))
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}

fn describe(ctx: &RequestContext, topic: &TopicReplicas) -> MetadataResponseTopic {
    let node = BrokerId(ctx.node_id());
    let partitions = topic
        .partitions
        .iter()
        .map(|p| {
            MetadataResponsePartition::default()
                .with_partition_index(p.id().partition)
                .with_leader_id(node)
                .with_leader_epoch(p.leader_epoch())
                .with_replica_nodes(vec![node])
                .with_isr_nodes(vec![node])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(topic_name(topic.spec.name.clone())))
        .with_topic_id(topic.spec.topic_id)
        .with_is_internal(topic.spec.name.starts_with("__"))
        .with_partitions(partitions)
        .with_topic_authorized_operations(AUTHORIZED_OPERATIONS_OMITTED)
}
