//! FindCoordinator (key 10, v0–6): the broker coordinating a group or (key type 1) a
//! transactional id (v4+: several keys at once): the leader of the key's
//! `__consumer_offsets` or `__transaction_state` partition, from the metadata store, so
//! any broker can answer. `__transaction_state` is created by the first transactional
//! key asked for, as Kafka does; the answer is COORDINATOR_NOT_AVAILABLE until it has
//! a leader, and the client asks again.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::str_bytes;
use crate::cluster::BrokerInfo;
use crate::group::offsets;
use crate::model::{coordinator_partition, TRANSACTION_STATE_TOPIC};
use crate::security::acl::{AclOperation, ResourceType};

const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;

/// The leader of the transactional id's `__transaction_state` partition; creates the
/// topic when it does not exist yet (and answers `None` this time).
async fn transaction_coordinator_of(ctx: &RequestContext, key: &str) -> Option<i32> {
    let store = ctx.services.store.as_ref();
    let Some(spec) = store.topic(TRANSACTION_STATE_TOPIC).await else {
        let config = ctx.services.txn.config();
        match ctx
            .services
            .topics
            .ensure_internal(
                TRANSACTION_STATE_TOPIC,
                config.topic_partitions,
                config.topic_replication_factor,
            )
            .await
        {
            Ok(topic) => ctx.services.txn.follow_leadership(&topic),
            Err(error) => tracing::warn!(%error, "could not create {TRANSACTION_STATE_TOPIC}"),
        }
        return None;
    };
    store.leader_of(&spec, coordinator_partition(key, spec.partitions))
}

/// The live broker leading the offsets partition of group `key`.
async fn coordinator_of(
    ctx: &RequestContext,
    key_type: i8,
    key: &str,
) -> Result<BrokerInfo, (ResponseError, String)> {
    // The refusal's message is Kafka's text for the code (`Errors.message()`, what its
    // `createFindCoordinatorResponse` sends), which librdkafka shows in its place.
    let (resource, refused, message) = if key_type == GROUP {
        (
            ResourceType::Group,
            ResponseError::GroupAuthorizationFailed,
            "Group authorization failed.",
        )
    } else {
        (
            ResourceType::TransactionalId,
            ResponseError::TransactionalIdAuthorizationFailed,
            "Transactional Id authorization failed.",
        )
    };
    if !ctx.authorize(AclOperation::Describe, resource, key) {
        return Err((refused, message.to_string()));
    }
    if key_type != GROUP && key_type != TRANSACTION {
        return Err((
            ResponseError::InvalidRequest,
            format!("unknown coordinator key type {key_type}"),
        ));
    }
    let store = &ctx.services.store;
    let unavailable = || {
        (
            ResponseError::CoordinatorNotAvailable,
            format!("no coordinator for '{key}' right now"),
        )
    };
    let leader = if key_type == GROUP {
        offsets::coordinator_of(store.as_ref(), key).await
    } else {
        transaction_coordinator_of(ctx, key).await
    }
    .ok_or_else(unavailable)?;
    store
        .brokers()
        .into_iter()
        .find(|b| b.node_id == leader)
        .ok_or_else(unavailable)
}

pub async fn handle(
    ctx: &RequestContext,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    if ctx.api_version >= 4 {
        let mut coordinators = Vec::with_capacity(request.coordinator_keys.len());
        for key in &request.coordinator_keys {
            let c = Coordinator::default().with_key(key.clone());
            coordinators.push(match coordinator_of(ctx, request.key_type, key).await {
                Ok(node) => {
                    let (host, port) = node.address_for(ctx.listener());
                    c.with_node_id(BrokerId(node.node_id))
                        .with_host(str_bytes(host.to_string()))
                        .with_port(port)
                }
                Err((e, m)) => c
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(e.code())
                    .with_error_message(Some(str_bytes(m))),
            });
        }
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    match coordinator_of(ctx, request.key_type, &request.key).await {
        Ok(node) => {
            let (host, port) = node.address_for(ctx.listener());
            FindCoordinatorResponse::default()
                .with_node_id(BrokerId(node.node_id))
                .with_host(str_bytes(host.to_string()))
                .with_port(port)
        }
        Err((e, m)) => FindCoordinatorResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(m)))
            .with_node_id(BrokerId(-1))
            .with_port(-1),
    }
}
