//! `tern cluster describe`: brokers, the controller, partitions led per broker and
//! under-replicated partitions (ISR smaller than the replica set).

use std::collections::BTreeMap;

use kafka_protocol::messages::DescribeClusterRequest;
use serde_json::json;

use super::client;
use super::commands::{check, ClusterCommand, Connection};
use super::output;
use super::topic;

pub async fn run(connection: &Connection, command: ClusterCommand) -> anyhow::Result<()> {
    let mut client = client::connect(connection).await?;
    let ClusterCommand::Describe = command;
    let (_, cluster) = client.send(DescribeClusterRequest::default(), 1).await?;
    check(
        cluster.error_code,
        cluster.error_message.as_deref(),
        "describing the cluster",
    )?;
    let metadata = topic::metadata(&mut client, None).await?;
    let mut leaders: BTreeMap<i32, usize> = BTreeMap::new();
    let mut under_replicated = Vec::new();
    for t in &metadata.topics {
        for p in &t.partitions {
            *leaders.entry(p.leader_id.0).or_default() += 1;
            if p.isr_nodes.len() < p.replica_nodes.len() {
                under_replicated.push(format!(
                    "{}-{}",
                    t.name.as_ref().map(|n| n.as_str()).unwrap_or(""),
                    p.partition_index
                ));
            }
        }
    }
    let brokers: Vec<(i32, String, i32)> = cluster
        .brokers
        .iter()
        .map(|b| (b.broker_id.0, b.host.to_string(), b.port))
        .collect();
    if connection.json {
        let list: Vec<_> = brokers
            .iter()
            .map(|(id, host, port)| json!({"id": id, "host": host, "port": port, "leader_partitions": leaders.get(id).copied().unwrap_or(0)}))
            .collect();
        return output::json(&json!({
            "cluster_id": cluster.cluster_id.to_string(),
            "controller": cluster.controller_id.0,
            "brokers": list,
            "under_replicated": under_replicated,
        }));
    }
    println!(
        "Cluster: {}  Controller: {}",
        cluster.cluster_id.as_str(),
        cluster.controller_id.0
    );
    let rows: Vec<Vec<String>> = brokers
        .iter()
        .map(|(id, host, port)| {
            vec![
                id.to_string(),
                format!("{host}:{port}"),
                leaders.get(id).copied().unwrap_or(0).to_string(),
            ]
        })
        .collect();
    output::table(&["BROKER", "ADDRESS", "LEADER PARTITIONS"], &rows);
    println!("Under-replicated partitions: {}", under_replicated.len());
    Ok(())
}
