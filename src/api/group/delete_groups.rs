//! DeleteGroups (key 42, v0–2): deletes empty groups and their committed offsets.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use super::super::context::RequestContext;
use super::super::errors;
use crate::security::acl::AclOperation;

pub async fn handle(ctx: &RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for group_id in &request.groups_names {
        let error = if !ctx.authorize_group(AclOperation::Delete, group_id) {
            Some(kafka_protocol::ResponseError::GroupAuthorizationFailed)
        } else {
            match ctx.services.groups.delete_group(group_id).await {
                Ok(()) => None,
                Err(e) => Some(errors::commit_error(&e)),
            }
        };
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group_id.clone())
                .with_error_code(errors::code(error)),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
