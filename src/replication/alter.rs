//! The leader's side of ISR changes (Kafka's AlterPartition, KIP-497): each change a
//! led partition proposes is written to the metadata store with a compare-and-swap on
//! the partition epoch it was based on, so that the leader and the controller never
//! overwrite each other; the partition then learns whether it was committed. Until
//! then its leader state computes the high watermark over the maximal ISR.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::replicas::IsrChanges;
use crate::cluster::MetadataStore;

/// Writes proposed ISR changes, in order, until shutdown.
pub async fn run(
    store: Arc<dyn MetadataStore>,
    mut changes: IsrChanges,
    shutdown: CancellationToken,
) {
    loop {
        let (partition, proposal) = tokio::select! {
            _ = shutdown.cancelled() => return,
            next = changes.recv() => match next {
                Some(next) => next,
                None => return,
            },
        };
        let id = partition.id().clone();
        let before = partition.isr_size();
        let outcome = store
            .alter_partition(
                &id.topic,
                partition.topic_id(),
                id.partition,
                partition.leader_epoch(),
                proposal.partition_epoch,
                proposal.isr.clone(),
            )
            .await;
        match outcome {
            Ok(Some(state)) => {
                tracing::info!(partition = %id, isr = ?state.isr, partition_epoch = state.partition_epoch, "ISR changed");
                let counter = if (state.isr.len() as i32) < before {
                    crate::metrics::ISR_SHRINKS_TOTAL
                } else {
                    crate::metrics::ISR_EXPANDS_TOTAL
                };
                metrics::counter!(counter).increment(1);
                partition.isr_outcome(&proposal, Some(&state));
            }
            Ok(None) => {
                tracing::info!(partition = %id, isr = ?proposal.isr, "ISR change refused: the partition changed meanwhile");
                partition.isr_outcome(&proposal, None);
            }
            Err(error) => {
                tracing::warn!(partition = %id, %error, "ISR change not written");
                partition.isr_outcome(&proposal, None);
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
        for partition in replicas.led_partitions() {
            if let Some(proposal) = partition.maintain_isr(now, lag_max_ms) {
                replicas.propose_isr(&partition, proposal);
            }
        }
    }
}
