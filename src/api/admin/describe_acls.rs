//! DescribeAcls (key 29, v1–3): the bindings a filter selects, grouped by resource
//! pattern as Kafka groups them. Needs DESCRIBE on the cluster; without an authorizer
//! the answer is SECURITY_DISABLED, as Kafka's.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{DescribeAclsRequest, DescribeAclsResponse};

use super::super::context::RequestContext;
use super::super::str_bytes;
use crate::security::acl::{AclBindingFilter, AclOperation};

pub async fn handle(ctx: &RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse {
    let refuse = |error: ResponseError, message: &str| {
        DescribeAclsResponse::default()
            .with_error_code(error.code())
            .with_error_message(Some(str_bytes(message)))
    };
    if let Some((error, message)) = super::acl_api_refusal(ctx, AclOperation::Describe) {
        return refuse(error, message);
    }
    let filter = AclBindingFilter::from_wire(
        request.resource_type_filter,
        request.resource_name_filter.as_deref(),
        request.pattern_type_filter,
        request.principal_filter.as_deref(),
        request.host_filter.as_deref(),
        request.operation,
        request.permission_type,
    );
    if let Err(error) = filter.validate() {
        return DescribeAclsResponse::default()
            .with_error_code(error.code)
            .with_error_message(Some(str_bytes(error.message)));
    }
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for binding in ctx
        .services
        .store
        .acls()
        .iter()
        .filter(|b| filter.matches(b))
    {
        by_resource
            .entry((
                binding.resource_type.code(),
                binding.resource_name.clone(),
                binding.pattern_type.code(),
            ))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(str_bytes(binding.principal.clone()))
                    .with_host(str_bytes(binding.host.clone()))
                    .with_operation(binding.operation.code())
                    .with_permission_type(binding.permission.code()),
            );
    }
    let resources = by_resource
        .into_iter()
        .map(|((resource_type, name, pattern_type), acls)| {
            DescribeAclsResource::default()
                .with_resource_type(resource_type)
                .with_resource_name(str_bytes(name))
                .with_pattern_type(pattern_type)
                .with_acls(acls)
        })
        .collect();
    DescribeAclsResponse::default().with_resources(resources)
}
