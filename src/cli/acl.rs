//! `tern acl add|list|remove`: ACLs through CreateAcls, DescribeAcls and DeleteAcls,
//! with flags named as Kafka's `kafka-acls` names them.

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;

use super::client;
use super::commands::{check, AclCommand, AclSelection, Connection};
use super::output;
use crate::security::acl::{AclOperation, AclPermissionType, PatternType, ResourceType};

pub async fn run(connection: &Connection, command: AclCommand) -> anyhow::Result<()> {
    let mut client = client::connect(connection).await?;
    match command {
        AclCommand::Add(selection) => {
            let entries = entries(&selection)?;
            let (resource_type, name) = resource(&selection)?;
            let pattern = pattern(selection.resource_pattern_type.as_deref(), false)?;
            let creations = entries
                .iter()
                .map(|(principal, permission, operation)| {
                    AclCreation::default()
                        .with_resource_type(resource_type.code())
                        .with_resource_name(text(&name))
                        .with_resource_pattern_type(pattern.code())
                        .with_principal(text(principal))
                        .with_host(text(&selection.host))
                        .with_operation(operation.code())
                        .with_permission_type(permission.code())
                })
                .collect();
            let (_, response) = client
                .send(CreateAclsRequest::default().with_creations(creations), 3)
                .await?;
            for result in &response.results {
                check(
                    result.error_code,
                    result.error_message.as_deref(),
                    "adding an ACL",
                )?;
            }
            println!("{} ACL(s) added", entries.len());
        }
        AclCommand::Remove(selection) => {
            let entries = entries(&selection)?;
            let (resource_type, name) = resource(&selection)?;
            let pattern = pattern(selection.resource_pattern_type.as_deref(), false)?;
            let filters = entries
                .iter()
                .map(|(principal, permission, operation)| {
                    DeleteAclsFilter::default()
                        .with_resource_type_filter(resource_type.code())
                        .with_resource_name_filter(Some(text(&name)))
                        .with_pattern_type_filter(pattern.code())
                        .with_principal_filter(Some(text(principal)))
                        .with_host_filter(Some(text(&selection.host)))
                        .with_operation(operation.code())
                        .with_permission_type(permission.code())
                })
                .collect();
            let (_, response) = client
                .send(DeleteAclsRequest::default().with_filters(filters), 3)
                .await?;
            let mut removed = 0;
            for result in &response.filter_results {
                check(
                    result.error_code,
                    result.error_message.as_deref(),
                    "removing ACLs",
                )?;
                removed += result.matching_acls.len();
            }
            println!("{removed} ACL(s) removed");
        }
        AclCommand::List(selection) => {
            let (resource_type, name) = match resource(&selection) {
                Ok((t, n)) => (t, Some(n)),
                Err(_) => (ResourceType::Any, None),
            };
            let principal = selection
                .allow_principal
                .first()
                .or(selection.deny_principal.first());
            let request = DescribeAclsRequest::default()
                .with_resource_type_filter(resource_type.code())
                .with_resource_name_filter(name.as_deref().map(text))
                .with_pattern_type_filter(
                    pattern(selection.resource_pattern_type.as_deref(), true)?.code(),
                )
                .with_principal_filter(principal.map(|p| text(p)))
                .with_host_filter(None)
                .with_operation(AclOperation::Any.code())
                .with_permission_type(AclPermissionType::Any.code());
            let (_, response) = client.send(request, 3).await?;
            check(
                response.error_code,
                response.error_message.as_deref(),
                "listing ACLs",
            )?;
            let mut rows = Vec::new();
            for r in &response.resources {
                for acl in &r.acls {
                    rows.push(vec![
                        ResourceType::from_code(r.resource_type).to_string(),
                        r.resource_name.to_string(),
                        PatternType::from_code(r.pattern_type).to_string(),
                        acl.principal.to_string(),
                        acl.host.to_string(),
                        AclOperation::from_code(acl.operation).to_string(),
                        AclPermissionType::from_code(acl.permission_type).to_string(),
                    ]);
                }
            }
            if connection.json {
                let acls: Vec<_> = rows
                    .iter()
                    .map(|r| {
                        json!({"resource_type": r[0], "name": r[1], "pattern_type": r[2],
                               "principal": r[3], "host": r[4], "operation": r[5], "permission": r[6]})
                    })
                    .collect();
                return output::json(&json!(acls));
            }
            output::table(
                &[
                    "RESOURCE",
                    "NAME",
                    "PATTERN",
                    "PRINCIPAL",
                    "HOST",
                    "OPERATION",
                    "PERMISSION",
                ],
                &rows,
            );
        }
    }
    Ok(())
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Every (principal, permission, operation) the flags name.
fn entries(
    selection: &AclSelection,
) -> anyhow::Result<Vec<(String, AclPermissionType, AclOperation)>> {
    let principals = selection
        .allow_principal
        .iter()
        .map(|p| (p.clone(), AclPermissionType::Allow))
        .chain(
            selection
                .deny_principal
                .iter()
                .map(|p| (p.clone(), AclPermissionType::Deny)),
        )
        .collect::<Vec<_>>();
    anyhow::ensure!(
        !principals.is_empty(),
        "name --allow-principal or --deny-principal"
    );
    anyhow::ensure!(
        !selection.operation.is_empty(),
        "name at least one --operation"
    );
    let mut out = Vec::new();
    for name in &selection.operation {
        let operation = AclOperation::parse(name)
            .filter(|o| !matches!(o, AclOperation::Unknown | AclOperation::Any))
            .ok_or_else(|| anyhow::anyhow!("unknown operation {name:?}"))?;
        for (principal, permission) in &principals {
            out.push((principal.clone(), *permission, operation));
        }
    }
    Ok(out)
}

/// The one resource the flags name.
fn resource(selection: &AclSelection) -> anyhow::Result<(ResourceType, String)> {
    let named = [
        selection.topic.clone().map(|t| (ResourceType::Topic, t)),
        selection.group.clone().map(|g| (ResourceType::Group, g)),
        selection
            .transactional_id
            .clone()
            .map(|t| (ResourceType::TransactionalId, t)),
        selection
            .cluster
            .then(|| (ResourceType::Cluster, "kafka-cluster".to_string())),
    ];
    let mut named = named.into_iter().flatten();
    let first = named
        .next()
        .ok_or_else(|| anyhow::anyhow!("name --topic, --group, --transactional-id or --cluster"))?;
    anyhow::ensure!(named.next().is_none(), "name one resource");
    Ok(first)
}

/// The pattern type named, LITERAL by default (ANY when listing).
fn pattern(name: Option<&str>, listing: bool) -> anyhow::Result<PatternType> {
    let name = name.unwrap_or(if listing { "ANY" } else { "LITERAL" });
    let allowed: &[PatternType] = if listing {
        &[
            PatternType::Literal,
            PatternType::Prefixed,
            PatternType::Any,
            PatternType::Match,
        ]
    } else {
        &[PatternType::Literal, PatternType::Prefixed]
    };
    PatternType::parse(name)
        .filter(|p| allowed.contains(p))
        .ok_or_else(|| anyhow::anyhow!("pattern type {name:?} is not one of {allowed:?}"))
}
