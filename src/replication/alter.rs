//! The leader's side of ISR changes (Kafka's AlterPartition, KIP-497): each change a
//! led partition proposes is written to the metadata store with a compare-and-swap on
//! the partition epoch it was based on, so that the leader and the controller never
//! overwrite each other; the partition then learns whether it was committed. Until
//! then its leader state computes the high watermark over the maximal ISR.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::leader::IsrProposal;
use super::replica::IsrStep;
use super::replicas::IsrChanges;
use super::Partition;
use crate::cluster::{IsrChange, MetadataStore};

/// Proposals written in one batch at most: what a broker's leaders propose at once
/// after a follower restarts is one write per topic, not one per partition.
const BATCH: usize = 1024;

/// A leader's proposal, with the partition that made it.
type Proposed = (Arc<Partition>, IsrProposal);

/// Writes proposed ISR changes until shutdown: whatever is queued, one write per topic
/// (Kafka's AlterPartition batches the same way), in the order proposed.
pub async fn run(
    store: Arc<dyn MetadataStore>,
    mut changes: IsrChanges,
    shutdown: CancellationToken,
) {
    loop {
        let first = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = changes.recv() => match next {
                Some(next) => next,
                None => return,
            },
        };
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match changes.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let mut by_topic: Vec<(String, uuid::Uuid, Vec<Proposed>)> = Vec::new();
        for (partition, proposal) in batch {
            let topic = &partition.id().topic;
            match by_topic
                .iter_mut()
                .find(|(t, id, _)| t == topic && *id == partition.topic_id())
            {
                Some((_, _, group)) => group.push((partition, proposal)),
                None => by_topic.push((
                    topic.clone(),
                    partition.topic_id(),
                    vec![(partition, proposal)],
                )),
            }
        }
        for (topic, topic_id, group) in by_topic {
            write_topic(store.as_ref(), &topic, topic_id, group).await;
        }
    }
}

/// One topic's proposals in one write; each partition learns its own outcome.
async fn write_topic(
    store: &dyn MetadataStore,
    topic: &str,
    topic_id: uuid::Uuid,
    group: Vec<Proposed>,
) {
    let requests: Vec<IsrChange> = group
        .iter()
        .map(|(partition, proposal)| IsrChange {
            index: partition.id().partition,
            leader_epoch: partition.leader_epoch().0,
            partition_epoch: proposal.partition_epoch,
            isr: proposal.isr.clone(),
            incarnations: proposal.incarnations.clone(),
        })
        .collect();
    // Each partition's committed ISR before the write: once it is written, the store's
    // watch may hand the new ISR to the partition before the answer is read here, and a
    // shrink compared with that would be counted as an expand.
    let sizes_before: Vec<usize> = group
        .iter()
        .map(|(partition, _)| partition.isr().len())
        .collect();
    let outcomes = match store.alter_partitions(topic, topic_id, &requests).await {
        Ok(outcomes) => outcomes,
        Err(error) => {
            tracing::warn!(topic, %error, "ISR changes not written");
            vec![None; group.len()]
        }
    };
    for (((partition, proposal), outcome), size_before) in
        group.iter().zip(outcomes).zip(sizes_before)
    {
        let id = partition.id();
        match outcome {
            Some(state) => {
                let counter = if state.isr.len() < size_before {
                    crate::metrics::ISR_SHRINKS_TOTAL
                } else {
                    crate::metrics::ISR_EXPANDS_TOTAL
                };
                metrics::counter!(counter).increment(1);
                tracing::info!(partition = %id, isr = ?state.isr, partition_epoch = state.partition_epoch, "ISR changed");
                partition.isr_outcome(proposal, Some(&state));
            }
            None => {
                tracing::info!(partition = %id, isr = ?proposal.isr, "ISR change refused: the partition changed meanwhile");
                partition.isr_outcome(proposal, None);
            }
        }
    }
}

/// Asks every led partition, every `interval`, whether a follower fell out of sync.
pub async fn maintain(
    replicas: Arc<super::ReplicaManager>,
    lag_max_ms: i64,
    interval: std::time::Duration,
    shutdown: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let now = crate::model::now_ms();
        let mut leaving_the_leader_alone = Vec::new();
        for partition in replicas.led_partitions() {
            match partition.maintain_isr(now, lag_max_ms) {
                Some(IsrStep::FlushThenPropose(proposal)) => {
                    leaving_the_leader_alone.push((partition, proposal));
                }
                Some(IsrStep::Propose(proposal)) => replicas.propose_isr(&partition, proposal),
                None => {}
            }
        }
        let flushed_first = leaving_the_leader_alone
            .into_iter()
            .map(|(partition, proposal)| flush_then_propose(&replicas, partition, proposal));
        futures::future::join_all(flushed_first).await;
    }
}

/// [`IsrStep::FlushThenPropose`]: a flush that fails takes the partition offline, and
/// the proposal is dropped.
async fn flush_then_propose(
    replicas: &super::ReplicaManager,
    partition: Arc<Partition>,
    proposal: IsrProposal,
) {
    match partition.flush().await {
        Ok(()) => replicas.propose_isr(&partition, proposal),
        Err(error) => {
            tracing::warn!(partition = %partition.id(), %error, "ISR shrink not proposed: the flush before it failed");
            partition.isr_outcome(&proposal, None);
        }
    }
}
