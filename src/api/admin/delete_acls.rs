//! DeleteAcls (key 31, v1–3): removes every binding each filter selects and lists them per
//! filter. Needs ALTER on the cluster; without an authorizer every filter answers
//! SECURITY_DISABLED, as Kafka's does. All removals go to the store in one call.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::{DeleteAclsRequest, DeleteAclsResponse};

use super::super::context::RequestContext;
use super::super::str_bytes;
use crate::security::acl::{AclBinding, AclBindingFilter, AclOperation};

pub async fn handle(ctx: &RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse {
    let all_failed = |error: ResponseError, message: &str| {
        let results = request
            .filters
            .iter()
            .map(|_| failure(error.code(), message))
            .collect();
        DeleteAclsResponse::default().with_filter_results(results)
    };
    if let Some((error, message)) = super::acl_api_refusal(ctx, AclOperation::Alter) {
        return all_failed(error, message);
    }
    let current = ctx.services.store.acls();
    let selections: Vec<Result<Vec<AclBinding>, (i16, String)>> = request
        .filters
        .iter()
        .map(|f| {
            let filter = filter(f);
            filter.validate().map_err(|e| (e.code, e.message))?;
            Ok(current
                .iter()
                .filter(|b| filter.matches(b))
                .cloned()
                .collect())
        })
        .collect();
    let mut doomed: Vec<AclBinding> = selections
        .iter()
        .flat_map(|s| s.iter().flatten().cloned())
        .collect();
    doomed.sort();
    doomed.dedup();
    let deleted = if doomed.is_empty() {
        Ok(())
    } else {
        ctx.services.store.delete_acls(&doomed).await
    };
    // Read-your-writes on this broker; the others follow AclsChanged.
    ctx.services.access.rebuild(ctx.services.store.acls());
    let results = selections
        .into_iter()
        .map(|selection| match (selection, &deleted) {
            (Err((code, message)), _) => failure(code, &message),
            (Ok(_), Err(error)) => {
                failure(ResponseError::UnknownServerError.code(), &error.to_string())
            }
            (Ok(bindings), Ok(())) => DeleteAclsFilterResult::default()
                .with_matching_acls(bindings.iter().map(matching).collect()),
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}

fn failure(code: i16, message: &str) -> DeleteAclsFilterResult {
    DeleteAclsFilterResult::default()
        .with_error_code(code)
        .with_error_message(Some(str_bytes(message)))
}

fn matching(binding: &AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_resource_type(binding.resource_type.code())
        .with_resource_name(str_bytes(binding.resource_name.clone()))
        .with_pattern_type(binding.pattern_type.code())
        .with_principal(str_bytes(binding.principal.clone()))
        .with_host(str_bytes(binding.host.clone()))
        .with_operation(binding.operation.code())
        .with_permission_type(binding.permission.code())
}

fn filter(f: &DeleteAclsFilter) -> AclBindingFilter {
    AclBindingFilter::from_wire(
        f.resource_type_filter,
        f.resource_name_filter.as_deref(),
        f.pattern_type_filter,
        f.principal_filter.as_deref(),
        f.host_filter.as_deref(),
        f.operation,
        f.permission_type,
    )
}
