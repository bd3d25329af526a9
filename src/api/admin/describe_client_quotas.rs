//! DescribeClientQuotas (key 48, v0–1, KIP-546): the quota entities a filter selects,
//! with their values, from the metadata store. Needs DESCRIBE_CONFIGS on the cluster.

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{DescribeClientQuotasRequest, DescribeClientQuotasResponse};

use super::super::context::RequestContext;
use super::super::str_bytes;
use crate::quota::entity::{FilterError, QuotaFilter};
use crate::quota::QuotaEntity;
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let refuse = |error: ResponseError, message: Option<String>| {
        DescribeClientQuotasResponse::default()
            .with_error_code(error.code())
            .with_error_message(message.map(str_bytes))
            .with_entries(None)
    };
    if !ctx.authorize_cluster(AclOperation::DescribeConfigs) {
        return refuse(ResponseError::ClusterAuthorizationFailed, None);
    }
    let components = request
        .components
        .iter()
        .map(|c| (c.entity_type.as_str(), c.match_type, c._match.as_deref()));
    let filter = match QuotaFilter::new(components, request.strict) {
        Ok(filter) => filter,
        Err(FilterError::UnknownType(m)) => {
            return refuse(ResponseError::UnsupportedVersion, Some(m))
        }
        Err(FilterError::Invalid(m)) => return refuse(ResponseError::InvalidRequest, Some(m)),
    };
    let entries = ctx
        .services
        .store
        .client_quotas()
        .iter()
        .filter_map(|(key, values)| Some((QuotaEntity::from_storage_key(key)?, values)))
        .filter(|(entity, _)| filter.matches(entity))
        .map(|(entity, values)| {
            EntryData::default()
                .with_entity(
                    entity
                        .parts()
                        .into_iter()
                        .map(|(kind, name)| {
                            EntityData::default()
                                .with_entity_type(str_bytes(kind))
                                .with_entity_name(name.to_wire().map(str_bytes))
                        })
                        .collect(),
                )
                .with_values(
                    values
                        .iter()
                        .filter_map(|(key, value)| {
                            Some(
                                ValueData::default()
                                    .with_key(str_bytes(key.clone()))
                                    .with_value(value.parse().ok()?),
                            )
                        })
                        .collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}
