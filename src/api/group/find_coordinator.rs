//! FindCoordinator (key 10, v0–6): the broker coordinating a group (v4+: several keys
//! at once): the leader of the group's `__consumer_offsets` partition, from the
//! metadata store, so any broker can answer. tern has no transaction coordinator: key
//! type 1 gets COORDINATOR_NOT_AVAILABLE.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::str_bytes;
use crate::cluster::BrokerInfo;
use crate::group::offsets;
use crate::security::acl::{AclOperation, ResourceType};

const GROUP: i8 = 0;

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
    if key_type != GROUP {
        return Err((
            ResponseError::CoordinatorNotAvailable,
            "transactions are not supported yet".into(),
        ));
    }
    let store = &ctx.services.store;
    let unavailable = || {
        (
            ResponseError::CoordinatorNotAvailable,
            format!("no coordinator for '{key}' right now"),
        )
    };
    let leader = offsets::coordinator_of(store.as_ref(), key)
        .await
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
