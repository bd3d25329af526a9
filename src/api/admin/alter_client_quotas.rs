//! AlterClientQuotas (key 49, v0–1, KIP-546): sets and removes quota values of users,
//! client ids and addresses in the metadata store, from where every broker puts them
//! in force (`ClientQuotasChanged`). Each entry is checked and written on its own, as
//! Kafka's controller does; needs ALTER_CONFIGS on the cluster.

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_client_quotas_request::EntryData as RequestEntry;
use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
use kafka_protocol::messages::{AlterClientQuotasRequest, AlterClientQuotasResponse};

use super::super::context::RequestContext;
use super::super::str_bytes;
use crate::quota::entity::validate_value;
use crate::quota::QuotaEntity;
use crate::security::acl::AclOperation;

pub async fn handle(
    ctx: &RequestContext,
    request: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let authorized = ctx.authorize_cluster(AclOperation::AlterConfigs);
    let mut entries = Vec::with_capacity(request.entries.len());
    for entry in &request.entries {
        let outcome = if authorized {
            alter(ctx, entry, request.validate_only).await
        } else {
            Err((ResponseError::ClusterAuthorizationFailed, None))
        };
        let (code, message) = match outcome {
            Ok(()) => (0, None),
            Err((error, message)) => (error.code(), message),
        };
        entries.push(
            EntryData::default()
                .with_error_code(code)
                .with_error_message(message.map(str_bytes))
                .with_entity(
                    entry
                        .entity
                        .iter()
                        .map(|e| {
                            EntityData::default()
                                .with_entity_type(e.entity_type.clone())
                                .with_entity_name(e.entity_name.clone())
                        })
                        .collect(),
                ),
        );
    }
    AlterClientQuotasResponse::default().with_entries(entries)
}

type Refusal = (ResponseError, Option<String>);

async fn alter(
    ctx: &RequestContext,
    entry: &RequestEntry,
    validate_only: bool,
) -> Result<(), Refusal> {
    let invalid = |e: crate::quota::entity::QuotaError| (ResponseError::InvalidRequest, Some(e.0));
    let entity = QuotaEntity::from_parts(
        entry
            .entity
            .iter()
            .map(|e| (e.entity_type.as_str(), e.entity_name.as_deref())),
    )
    .map_err(invalid)?;
    let key = entity.storage_key();
    let mut values: BTreeMap<String, String> = ctx
        .services
        .store
        .client_quotas()
        .remove(&key)
        .unwrap_or_default();
    for op in &entry.ops {
        if op.remove {
            values.remove(op.key.as_str());
        } else {
            validate_value(&entity, &op.key, op.value).map_err(invalid)?;
            values.insert(op.key.to_string(), op.value.to_string());
        }
    }
    if validate_only {
        return Ok(());
    }
    ctx.services
        .store
        .set_client_quotas(&key, values)
        .await
        .map_err(|e| (ResponseError::UnknownServerError, Some(e.to_string())))
}
