//! FindCoordinator (key 10, v0–6): the broker coordinating a group (v4+: several keys
//! at once). tern has no transaction coordinator: key type 1 gets
//! COORDINATOR_NOT_AVAILABLE.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::ResponseError;

use super::super::context::RequestContext;
use super::super::str_bytes;

const GROUP: i8 = 0;

pub async fn handle(
    ctx: &RequestContext,
    request: FindCoordinatorRequest,
) -> FindCoordinatorResponse {
    let node = &ctx.services.node;
    let lookup = |key: &str| -> Result<(), (ResponseError, String)> {
        if request.key_type != GROUP {
            return Err((
                ResponseError::CoordinatorNotAvailable,
                "transactions are not supported yet".into(),
            ));
        }
        if !ctx.services.groups.is_coordinator_for(key) {
            return Err((
                ResponseError::CoordinatorNotAvailable,
                format!("no coordinator for '{key}'"),
            ));
        }
        Ok(())
    };
    if ctx.api_version >= 4 {
        let coordinators = request
            .coordinator_keys
            .iter()
            .map(|key| {
                let c = Coordinator::default().with_key(key.clone());
                match lookup(key) {
                    Ok(()) => c
                        .with_node_id(BrokerId(node.node_id))
                        .with_host(str_bytes(node.host.clone()))
                        .with_port(node.port),
                    Err((e, m)) => c
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_code(e.code())
                        .with_error_message(Some(str_bytes(m))),
                }
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    match lookup(&request.key) {
        Ok(()) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(node.node_id))
            .with_host(str_bytes(node.host.clone()))
            .with_port(node.port),
        Err((e, m)) => FindCoordinatorResponse::default()
            .with_error_code(e.code())
            .with_error_message(Some(str_bytes(m)))
            .with_node_id(BrokerId(-1))
            .with_port(-1),
    }
}
