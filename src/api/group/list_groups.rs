//! ListGroups (key 16, v0–5): every group, filtered by state (v4+) and type (v5+:
//! "classic" or "consumer", KIP-848). With an authorizer, as Kafka's
//! `handleListGroupsRequest`: DESCRIBE on the cluster lists every group, otherwise only
//! the groups the principal may DESCRIBE are listed (no error either way).

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};

use super::super::context::RequestContext;
use super::super::str_bytes;
use crate::security::acl::AclOperation;

pub async fn handle(ctx: &RequestContext, request: ListGroupsRequest) -> ListGroupsResponse {
    let states: Vec<String> = request
        .states_filter
        .iter()
        .map(|s| s.to_lowercase())
        .collect();
    let types: Vec<String> = request
        .types_filter
        .iter()
        .map(|s| s.to_lowercase())
        .collect();
    let sees_all = ctx.authorize_cluster(AclOperation::Describe);
    let groups = ctx
        .services
        .groups
        .list()
        .into_iter()
        .filter(|g| sees_all || ctx.authorize_group(AclOperation::Describe, &g.group_id))
        .filter(|g| states.is_empty() || states.contains(&g.state.to_lowercase()))
        .filter(|g| types.is_empty() || types.iter().any(|t| t == g.kind))
        .map(|g| {
            let listed = ListedGroup::default()
                .with_group_id(GroupId(str_bytes(g.group_id)))
                .with_protocol_type(str_bytes(g.protocol_type));
            let listed = if ctx.api_version >= 4 {
                listed.with_group_state(str_bytes(g.state))
            } else {
                listed
            };
            if ctx.api_version >= 5 {
                listed.with_group_type(str_bytes(g.kind))
            } else {
                listed
            }
        })
        .collect();
    ListGroupsResponse::default().with_groups(groups)
}
