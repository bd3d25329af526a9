//! `tern quota set|list|remove`: client quotas through AlterClientQuotas and
//! DescribeClientQuotas, as Kafka's `kafka-configs --entity-type users|clients|ips
//! --alter --add-config producer_byte_rate=…` does. `<default>` names the default
//! entity of a type.

use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{AlterClientQuotasRequest, DescribeClientQuotasRequest};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;

use super::client;
use super::commands::{check, Connection, QuotaCommand, QuotaEntityArgs};
use super::output;
use crate::quota::entity::{CLIENT_ID, IP, MATCH_DEFAULT, MATCH_EXACT, USER};
use crate::quota::QuotaKind;

const DEFAULT: &str = "<default>";

pub async fn run(connection: &Connection, command: QuotaCommand) -> anyhow::Result<()> {
    match command {
        QuotaCommand::Set {
            entity,
            producer_byte_rate,
            consumer_byte_rate,
            request_percentage,
            controller_mutation_rate,
            connection_creation_rate,
        } => {
            let values = [
                (
                    QuotaKind::ProducerByteRate,
                    producer_byte_rate.map(|v| v as f64),
                ),
                (
                    QuotaKind::ConsumerByteRate,
                    consumer_byte_rate.map(|v| v as f64),
                ),
                (QuotaKind::RequestPercentage, request_percentage),
                (QuotaKind::ControllerMutationRate, controller_mutation_rate),
                (
                    QuotaKind::ConnectionCreationRate,
                    connection_creation_rate.map(|v| v as f64),
                ),
            ];
            let ops: Vec<OpData> = values
                .into_iter()
                .filter_map(|(kind, value)| {
                    Some(
                        OpData::default()
                            .with_key(StrBytes::from_static_str(kind.key()))
                            .with_value(value?),
                    )
                })
                .collect();
            anyhow::ensure!(
                !ops.is_empty(),
                "name at least one quota to set (--producer-byte-rate, ...)"
            );
            alter(connection, &entity, ops).await?;
            println!("quota {} set", describe(&entity));
        }
        QuotaCommand::Remove { entity, keys } => {
            let keys = if keys.is_empty() {
                QuotaKind::ALL.iter().map(|k| k.key().to_string()).collect()
            } else {
                keys
            };
            let ops = keys
                .into_iter()
                .map(|key| {
                    OpData::default()
                        .with_key(StrBytes::from_string(key))
                        .with_remove(true)
                })
                .collect();
            alter(connection, &entity, ops).await?;
            println!("quota {} removed", describe(&entity));
        }
        QuotaCommand::List { entity } => list(connection, &entity).await?,
    }
    Ok(())
}

/// The entity's (type, name) pairs; `None` names the default entity.
fn parts(entity: &QuotaEntityArgs) -> Vec<(&'static str, Option<&str>)> {
    [
        (USER, &entity.user),
        (CLIENT_ID, &entity.client_id),
        (IP, &entity.ip),
    ]
    .into_iter()
    .filter_map(|(kind, value)| {
        let value = value.as_deref()?;
        Some((kind, (value != DEFAULT).then_some(value)))
    })
    .collect()
}

fn describe(entity: &QuotaEntityArgs) -> String {
    parts(entity)
        .into_iter()
        .map(|(kind, name)| format!("{kind}={}", name.unwrap_or(DEFAULT)))
        .collect::<Vec<_>>()
        .join(",")
}

async fn alter(
    connection: &Connection,
    entity: &QuotaEntityArgs,
    ops: Vec<OpData>,
) -> anyhow::Result<()> {
    let parts = parts(entity);
    anyhow::ensure!(
        !parts.is_empty(),
        "name the entity: --user, --client-id or --ip"
    );
    let request = AlterClientQuotasRequest::default().with_entries(vec![EntryData::default()
        .with_entity(
            parts
                .iter()
                .map(|(kind, name)| {
                    EntityData::default()
                        .with_entity_type(StrBytes::from_static_str(kind))
                        .with_entity_name(name.map(|n| StrBytes::from_string(n.to_string())))
                })
                .collect(),
        )
        .with_ops(ops)]);
    let mut client = client::connect(connection).await?;
    let (_, response) = client.send(request, 1).await?;
    for entry in &response.entries {
        check(
            entry.error_code,
            entry.error_message.as_deref(),
            &format!("quota {}", describe(entity)),
        )?;
    }
    Ok(())
}

async fn list(connection: &Connection, entity: &QuotaEntityArgs) -> anyhow::Result<()> {
    let components = parts(entity)
        .into_iter()
        .map(|(kind, name)| {
            ComponentData::default()
                .with_entity_type(StrBytes::from_static_str(kind))
                .with_match_type(if name.is_some() {
                    MATCH_EXACT
                } else {
                    MATCH_DEFAULT
                })
                .with_match(name.map(|n| StrBytes::from_string(n.to_string())))
        })
        .collect();
    let request = DescribeClientQuotasRequest::default().with_components(components);
    let mut client = client::connect(connection).await?;
    let (_, response) = client.send(request, 1).await?;
    check(
        response.error_code,
        response.error_message.as_deref(),
        "listing quotas",
    )?;
    let mut rows = Vec::new();
    for entry in response.entries.iter().flatten() {
        let entity = entry
            .entity
            .iter()
            .map(|e| {
                format!(
                    "{}={}",
                    e.entity_type,
                    e.entity_name.as_deref().unwrap_or(DEFAULT)
                )
            })
            .collect::<Vec<_>>()
            .join(",");
        for value in &entry.values {
            rows.push((entity.clone(), value.key.to_string(), value.value));
        }
    }
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    if connection.json {
        let quotas: Vec<_> = rows
            .iter()
            .map(|(entity, key, value)| json!({"entity": entity, "key": key, "value": value}))
            .collect();
        return output::json(&json!(quotas));
    }
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|(entity, key, value)| vec![entity, key, value.to_string()])
        .collect();
    output::table(&["ENTITY", "QUOTA", "VALUE"], &rows);
    Ok(())
}
