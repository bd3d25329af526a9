//! CreateAcls (key 30, v1–3): adds ACL bindings. Needs ALTER on the cluster; without an
//! authorizer every creation answers SECURITY_DISABLED, as Kafka's does. Each binding is
//! checked as Kafka's CreateAcls checks it (`AclBinding::validate`); the valid ones are
//! written in one store call, so every broker's authorizer sees them together.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::{CreateAclsRequest, CreateAclsResponse};

use super::super::context::RequestContext;
use super::super::str_bytes;
use crate::security::acl::{
    AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType,
};

pub async fn handle(ctx: &RequestContext, request: CreateAclsRequest) -> CreateAclsResponse {
    let all_failed = |error: ResponseError, message: &str| {
        let results = request
            .creations
            .iter()
            .map(|_| failure(error.code(), message))
            .collect();
        CreateAclsResponse::default().with_results(results)
    };
    if let Some((error, message)) = super::acl_api_refusal(ctx, AclOperation::Alter) {
        return all_failed(error, message);
    }
    let checked: Vec<Result<AclBinding, (i16, String)>> = request
        .creations
        .iter()
        .map(|c| {
            let binding = binding(c);
            binding
                .validate()
                .map(|()| binding)
                .map_err(|e| (e.code, e.message))
        })
        .collect();
    let valid: Vec<AclBinding> = checked.iter().filter_map(|r| r.clone().ok()).collect();
    let stored = if valid.is_empty() {
        Ok(())
    } else {
        ctx.services.store.create_acls(&valid).await
    };
    // Read-your-writes on this broker; the others follow AclsChanged.
    ctx.services.access.rebuild(ctx.services.store.acls());
    let results = checked
        .into_iter()
        .map(|result| match (result, &stored) {
            (Err((code, message)), _) => failure(code, &message),
            (Ok(_), Err(error)) => {
                failure(ResponseError::UnknownServerError.code(), &error.to_string())
            }
            (Ok(_), Ok(())) => AclCreationResult::default(),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

fn failure(code: i16, message: &str) -> AclCreationResult {
    AclCreationResult::default()
        .with_error_code(code)
        .with_error_message(Some(str_bytes(message)))
}

fn binding(creation: &AclCreation) -> AclBinding {
    AclBinding {
        resource_type: ResourceType::from_code(creation.resource_type),
        resource_name: creation.resource_name.to_string(),
        pattern_type: PatternType::from_code(creation.resource_pattern_type),
        principal: creation.principal.to_string(),
        host: creation.host.to_string(),
        operation: AclOperation::from_code(creation.operation),
        permission: AclPermissionType::from_code(creation.permission_type),
    }
}
