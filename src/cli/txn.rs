//! `tern txn list|describe|producers|abort|find-hanging`: Kafka's kafka-transactions.sh
//! over the Kafka protocol (ListTransactions, DescribeTransactions, DescribeProducers,
//! WriteTxnMarkers), against tern or Apache Kafka.

use std::collections::BTreeMap;

use anyhow::Context;
use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::describe_producers_response::ProducerState;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, FindCoordinatorRequest,
    ListTransactionsRequest, ProducerId, TopicName, TransactionalId, WriteTxnMarkersRequest,
};
use kafka_protocol::protocol::StrBytes;
use serde_json::json;

use super::client::{self, Client};
use super::commands::{check, Connection, TxnCommand};
use super::output;
use super::topic;

pub async fn run(connection: &Connection, command: TxnCommand) -> anyhow::Result<()> {
    let mut client = client::connect(connection).await?;
    let as_json = connection.json;
    match command {
        TxnCommand::List => list(&mut client, as_json).await,
        TxnCommand::Describe { transactional_id } => {
            describe(&mut client, &transactional_id, as_json).await
        }
        TxnCommand::Producers { topic, partition } => {
            let producers = producers(&mut client, &topic, partition).await?;
            print_producers(&topic, partition, &producers, as_json)
        }
        TxnCommand::Abort {
            topic,
            partition,
            start_offset,
        } => abort(&mut client, &topic, partition, start_offset, as_json).await,
        TxnCommand::FindHanging {
            topic,
            max_transaction_timeout_ms,
        } => {
            find_hanging(
                &mut client,
                topic.as_deref(),
                max_transaction_timeout_ms,
                as_json,
            )
            .await
        }
    }
}

fn name(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Every broker coordinates some transactional ids: ask them all.
/// Returns `(transactional id, producer id, state)`.
async fn all_transactions(
    client: &mut Client,
    producer_ids: &[i64],
) -> anyhow::Result<Vec<(String, i64, String)>> {
    let brokers = topic::metadata(client, Some(&[])).await?.brokers;
    let mut out = Vec::new();
    for broker in &brokers {
        let address = format!("{}:{}", broker.host, broker.port);
        let mut other = client.sibling(&address).await?;
        let request = ListTransactionsRequest::default()
            .with_producer_id_filters(producer_ids.iter().map(|&p| ProducerId(p)).collect());
        let (_, response) = other.send(request, 1).await?;
        check(
            response.error_code,
            None,
            &format!("listing transactions on {address}"),
        )?;
        for t in response.transaction_states {
            out.push((
                t.transactional_id.to_string(),
                t.producer_id.0,
                t.transaction_state.to_string(),
            ));
        }
    }
    out.sort();
    Ok(out)
}

async fn list(client: &mut Client, as_json: bool) -> anyhow::Result<()> {
    let txns = all_transactions(client, &[]).await?;
    if as_json {
        let value: Vec<_> = txns
            .iter()
            .map(|(id, pid, state)| json!({"transactional_id": id, "producer_id": pid, "state": state}))
            .collect();
        return output::json(&json!(value));
    }
    let rows: Vec<Vec<String>> = txns
        .into_iter()
        .map(|(id, pid, state)| vec![id, pid.to_string(), state])
        .collect();
    output::table(&["TRANSACTIONAL ID", "PRODUCER ID", "STATE"], &rows);
    Ok(())
}

async fn coordinator(client: &mut Client, transactional_id: &str) -> anyhow::Result<(i32, Client)> {
    let (_, found) = client
        .send(
            FindCoordinatorRequest::default()
                .with_key(name(transactional_id))
                .with_key_type(1),
            3,
        )
        .await?;
    check(
        found.error_code,
        found.error_message.as_deref(),
        &format!("finding the coordinator of '{transactional_id}'"),
    )?;
    let other = client
        .sibling(&format!("{}:{}", found.host, found.port))
        .await?;
    Ok((found.node_id.0, other))
}

async fn describe(
    client: &mut Client,
    transactional_id: &str,
    as_json: bool,
) -> anyhow::Result<()> {
    let (node, mut coordinator) = coordinator(client, transactional_id).await?;
    let request = DescribeTransactionsRequest::default()
        .with_transactional_ids(vec![TransactionalId(name(transactional_id))]);
    let (_, response) = coordinator.send(request, 0).await?;
    let t = response
        .transaction_states
        .first()
        .context("empty DescribeTransactions response")?;
    check(
        t.error_code,
        None,
        &format!("describing '{transactional_id}'"),
    )?;
    let partitions: Vec<String> = t
        .topics
        .iter()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .map(move |p| format!("{}-{p}", topic.topic.0))
        })
        .collect();
    if as_json {
        return output::json(&json!({
            "transactional_id": transactional_id,
            "coordinator": node,
            "state": t.transaction_state.to_string(),
            "producer_id": t.producer_id.0,
            "producer_epoch": t.producer_epoch,
            "timeout_ms": t.transaction_timeout_ms,
            "start_time_ms": t.transaction_start_time_ms,
            "partitions": partitions,
        }));
    }
    output::table(
        &[
            "COORDINATOR",
            "TRANSACTIONAL ID",
            "PRODUCER ID",
            "EPOCH",
            "STATE",
            "TIMEOUT MS",
            "START MS",
            "PARTITIONS",
        ],
        &[vec![
            node.to_string(),
            transactional_id.to_string(),
            t.producer_id.0.to_string(),
            t.producer_epoch.to_string(),
            t.transaction_state.to_string(),
            t.transaction_timeout_ms.to_string(),
            t.transaction_start_time_ms.to_string(),
            partitions.join(","),
        ]],
    );
    Ok(())
}

/// DescribeProducers of one partition, asked of its leader. Also returns the leader.
async fn producers_at(
    client: &mut Client,
    topic: &str,
    partition: i32,
) -> anyhow::Result<(Client, Vec<ProducerState>)> {
    let leaders = client::leaders(client, topic)
        .await?
        .with_context(|| format!("topic '{topic}' does not exist"))?;
    let leader = leaders
        .get(&partition)
        .with_context(|| format!("partition {partition} of '{topic}' has no live leader"))?;
    let mut leader = client.sibling(leader).await?;
    let request = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(TopicName(name(topic)))
        .with_partition_indexes(vec![partition])]);
    let (_, response) = leader.send(request, 0).await?;
    let p = response
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .context("empty DescribeProducers response")?;
    check(
        p.error_code,
        p.error_message.as_deref(),
        &format!("describing the producers of {topic}-{partition}"),
    )?;
    Ok((leader, p.active_producers.clone()))
}

async fn producers(
    client: &mut Client,
    topic: &str,
    partition: i32,
) -> anyhow::Result<Vec<ProducerState>> {
    Ok(producers_at(client, topic, partition).await?.1)
}

fn print_producers(
    topic: &str,
    partition: i32,
    producers: &[ProducerState],
    as_json: bool,
) -> anyhow::Result<()> {
    if as_json {
        let value: Vec<_> = producers
            .iter()
            .map(|p| {
                json!({
                    "topic": topic, "partition": partition,
                    "producer_id": p.producer_id.0, "producer_epoch": p.producer_epoch,
                    "last_sequence": p.last_sequence, "last_timestamp": p.last_timestamp,
                    "coordinator_epoch": p.coordinator_epoch,
                    "current_transaction_start_offset": p.current_txn_start_offset,
                })
            })
            .collect();
        return output::json(&json!(value));
    }
    let rows: Vec<Vec<String>> = producers
        .iter()
        .map(|p| {
            vec![
                p.producer_id.0.to_string(),
                p.producer_epoch.to_string(),
                p.last_sequence.to_string(),
                p.last_timestamp.to_string(),
                p.coordinator_epoch.to_string(),
                p.current_txn_start_offset.to_string(),
            ]
        })
        .collect();
    output::table(
        &[
            "PRODUCER ID",
            "EPOCH",
            "LAST SEQUENCE",
            "LAST TIMESTAMP",
            "COORDINATOR EPOCH",
            "TXN START OFFSET",
        ],
        &rows,
    );
    Ok(())
}

/// Writes the ABORT marker of the transaction open at `start_offset`, with the producer's
/// epoch and the coordinator epoch the partition last saw (as Kafka's AbortTransaction).
async fn abort(
    client: &mut Client,
    topic: &str,
    partition: i32,
    start_offset: i64,
    as_json: bool,
) -> anyhow::Result<()> {
    let (mut leader, producers) = producers_at(client, topic, partition).await?;
    let p = producers
        .iter()
        .find(|p| p.current_txn_start_offset == start_offset)
        .with_context(|| {
            format!("no transaction of {topic}-{partition} starts at offset {start_offset}")
        })?;
    let epoch = i16::try_from(p.producer_epoch).context("producer epoch out of range")?;
    let request =
        WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
            .with_producer_id(p.producer_id)
            .with_producer_epoch(epoch)
            .with_transaction_result(false)
            .with_coordinator_epoch(p.coordinator_epoch.max(0))
            .with_topics(vec![WritableTxnMarkerTopic::default()
                .with_name(TopicName(name(topic)))
                .with_partition_indexes(vec![partition])])]);
    let (_, response) = leader.send(request, 1).await?;
    let code = response
        .markers
        .iter()
        .flat_map(|m| &m.topics)
        .flat_map(|t| &t.partitions)
        .map(|p| p.error_code)
        .next()
        .context("empty WriteTxnMarkers response")?;
    check(
        code,
        None,
        &format!("aborting the transaction at {topic}-{partition}@{start_offset}"),
    )?;
    if as_json {
        return output::json(&json!({"aborted": true, "producer_id": p.producer_id.0,
            "topic": topic, "partition": partition, "start_offset": start_offset}));
    }
    println!(
        "aborted producer {}'s transaction at {topic}-{partition} offset {start_offset}",
        p.producer_id.0
    );
    Ok(())
}

/// Kafka's find-hanging: open transactions older than the longest timeout whose producer
/// no coordinator lists as Ongoing with this partition.
async fn find_hanging(
    client: &mut Client,
    only: Option<&str>,
    max_timeout_ms: i64,
    as_json: bool,
) -> anyhow::Result<()> {
    let metadata = topic::metadata(client, None).await?;
    let now = crate::model::now_ms();
    let mut candidates: Vec<(String, i32, ProducerState)> = Vec::new();
    for t in &metadata.topics {
        let Some(topic_name) = t.name.as_ref().map(|n| n.to_string()) else {
            continue;
        };
        if only.is_some_and(|o| o != topic_name) {
            continue;
        }
        for p in &t.partitions {
            let Ok(producers) = producers(client, &topic_name, p.partition_index).await else {
                continue;
            };
            for producer in producers {
                if producer.current_txn_start_offset >= 0
                    && producer.last_timestamp < now - max_timeout_ms
                {
                    candidates.push((topic_name.clone(), p.partition_index, producer));
                }
            }
        }
    }
    let mut hanging = Vec::new();
    let mut known: BTreeMap<i64, Vec<(String, String)>> = BTreeMap::new();
    for (topic, partition, producer) in candidates {
        let pid = producer.producer_id.0;
        if let std::collections::btree_map::Entry::Vacant(slot) = known.entry(pid) {
            let txns = all_transactions(client, &[pid]).await?;
            slot.insert(txns.into_iter().map(|(id, _, state)| (id, state)).collect());
        }
        let mut open_here = false;
        for (id, state) in known.get(&pid).into_iter().flatten() {
            if state != "Ongoing" {
                continue;
            }
            let Ok((_, mut coordinator)) = coordinator(client, id).await else {
                continue;
            };
            let request = DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![TransactionalId(name(id))]);
            if let Ok((_, response)) = coordinator.send(request, 0).await {
                open_here |= response.transaction_states.iter().any(|s| {
                    s.producer_id.0 == pid
                        && s.topics.iter().any(|t| {
                            t.topic.0.as_str() == topic && t.partitions.contains(&partition)
                        })
                });
            }
        }
        if !open_here {
            hanging.push((topic, partition, producer));
        }
    }
    if as_json {
        let value: Vec<_> = hanging
            .iter()
            .map(|(topic, partition, p)| {
                json!({"topic": topic, "partition": partition, "producer_id": p.producer_id.0,
                       "producer_epoch": p.producer_epoch, "coordinator_epoch": p.coordinator_epoch,
                       "start_offset": p.current_txn_start_offset, "last_timestamp": p.last_timestamp})
            })
            .collect();
        return output::json(&json!(value));
    }
    let rows: Vec<Vec<String>> = hanging
        .iter()
        .map(|(topic, partition, p)| {
            vec![
                topic.clone(),
                partition.to_string(),
                p.producer_id.0.to_string(),
                p.producer_epoch.to_string(),
                p.current_txn_start_offset.to_string(),
                p.last_timestamp.to_string(),
            ]
        })
        .collect();
    output::table(
        &[
            "TOPIC",
            "PARTITION",
            "PRODUCER ID",
            "EPOCH",
            "START OFFSET",
            "LAST TIMESTAMP",
        ],
        &rows,
    );
    Ok(())
}
