//! Writing transaction markers: to the partitions this broker leads directly (what a
//! WriteTxnMarkers request asks of it), and for the coordinator, to every partition of
//! a transaction wherever its leader is, through WriteTxnMarkers to the other brokers.
//! A marker counts once every in-sync replica has it (acks=all), as in Kafka.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;

use crate::cluster::peers::Peers;
use crate::cluster::MetadataStore;
use crate::log::txn::{MarkerKind, TxnMarker};
use crate::model::{now_ms, TopicPartition, OFFSETS_TOPIC};
use crate::replication::{NotServed, PartitionError, ReplicaManager};

/// How long one marker write may wait for the in-sync replicas.
const MARKER_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a marker could not be written to a partition here.
#[derive(Debug, thiserror::Error)]
pub enum MarkerError {
    /// The topic or partition does not exist (deleted since the transaction began):
    /// nothing to mark, as Kafka drops such partitions from a transaction's markers.
    #[error("{0} does not exist")]
    Unknown(TopicPartition),
    #[error("this broker does not lead {0}")]
    NotLeader(TopicPartition),
    #[error(transparent)]
    Partition(#[from] PartitionError),
}

/// Called after a marker is written to a `__consumer_offsets` partition here, with
/// (partition index, producer id, committed): the group coordinator applies or drops
/// the offsets committed in that transaction.
pub type OffsetsMarkerHook = Box<dyn Fn(i32, i64, bool) + Send + Sync>;

pub struct MarkerWriter {
    node_id: i32,
    replicas: Arc<ReplicaManager>,
    store: Arc<dyn MetadataStore>,
    peers: Peers,
    on_offsets_marker: OnceLock<OffsetsMarkerHook>,
}

impl std::fmt::Debug for MarkerWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MarkerWriter")
            .field("node_id", &self.node_id)
            .finish_non_exhaustive()
    }
}

impl MarkerWriter {
    pub fn new(
        node_id: i32,
        replicas: Arc<ReplicaManager>,
        store: Arc<dyn MetadataStore>,
        peers: Peers,
    ) -> Self {
        Self {
            node_id,
            replicas,
            store,
            peers,
            on_offsets_marker: OnceLock::new(),
        }
    }

    /// Sets what happens after a marker lands on an offsets partition here (once).
    pub fn on_offsets_marker(&self, hook: OffsetsMarkerHook) {
        let _ = self.on_offsets_marker.set(hook);
    }

    /// Writes `marker` to each of `partitions` as their leader, concurrently; one result
    /// per partition, in order.
    pub async fn write_here(
        &self,
        marker: &TxnMarker,
        partitions: &[TopicPartition],
    ) -> Vec<Result<(), MarkerError>> {
        let writes = partitions.iter().map(|tp| self.write_one(marker, tp));
        futures::future::join_all(writes).await
    }

    async fn write_one(&self, marker: &TxnMarker, tp: &TopicPartition) -> Result<(), MarkerError> {
        let topic = self
            .replicas
            .topic(&tp.topic)
            .ok_or_else(|| MarkerError::Unknown(tp.clone()))?;
        let partition = match topic.partition(tp.partition) {
            Ok(partition) => Arc::clone(partition),
            Err(NotServed::Unknown) => return Err(MarkerError::Unknown(tp.clone())),
            Err(NotServed::NotLeader) => return Err(MarkerError::NotLeader(tp.clone())),
        };
        partition
            .write_marker(marker, now_ms(), MARKER_WRITE_TIMEOUT)
            .await?;
        if tp.topic == OFFSETS_TOPIC {
            if let Some(hook) = self.on_offsets_marker.get() {
                hook(
                    tp.partition,
                    marker.producer_id.0,
                    marker.kind == MarkerKind::Commit,
                );
            }
        }
        Ok(())
    }

    /// Writes `marker` to `partitions` wherever they are led: here directly, elsewhere
    /// by WriteTxnMarkers. Returns the partitions still to do (no leader, a refusal, an
    /// unreachable broker); a partition that no longer exists counts as done.
    pub async fn send(
        &self,
        marker: &TxnMarker,
        partitions: Vec<TopicPartition>,
    ) -> Vec<TopicPartition> {
        let mut by_leader: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
        let mut remaining = Vec::new();
        for tp in partitions {
            match self.store.topic(&tp.topic).await {
                None => {} // deleted: nothing to mark
                Some(spec) if tp.partition >= spec.partitions => {}
                Some(spec) => match self.store.leader_of(&spec, tp.partition) {
                    Some(leader) => by_leader.entry(leader).or_default().push(tp),
                    None => remaining.push(tp),
                },
            }
        }
        for (leader, partitions) in by_leader {
            if leader == self.node_id {
                let results = self.write_here(marker, &partitions).await;
                for (tp, result) in partitions.into_iter().zip(results) {
                    match result {
                        Ok(()) | Err(MarkerError::Unknown(_)) => {}
                        Err(error) => {
                            tracing::debug!(partition = %tp, %error, "marker not written yet");
                            remaining.push(tp);
                        }
                    }
                }
            } else {
                remaining.extend(self.send_to(leader, marker, partitions).await);
            }
        }
        remaining
    }

    /// One WriteTxnMarkers to broker `leader`; returns the partitions it did not write.
    async fn send_to(
        &self,
        leader: i32,
        marker: &TxnMarker,
        partitions: Vec<TopicPartition>,
    ) -> Vec<TopicPartition> {
        let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
        for tp in &partitions {
            topics.entry(&tp.topic).or_default().push(tp.partition);
        }
        let request =
            WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
                .with_producer_id(ProducerId(marker.producer_id.0))
                .with_producer_epoch(marker.producer_epoch.0)
                .with_transaction_result(marker.kind == MarkerKind::Commit)
                .with_coordinator_epoch(marker.coordinator_epoch)
                .with_topics(
                    topics
                        .into_iter()
                        .map(|(name, indexes)| {
                            WritableTxnMarkerTopic::default()
                                .with_name(TopicName(StrBytes::from_string(name.to_string())))
                                .with_partition_indexes(indexes)
                        })
                        .collect(),
                )]);
        let response = match self.peers.send(leader, request, 1).await {
            Ok(response) => response,
            Err(error) => {
                tracing::debug!(leader, %error, "could not send transaction markers");
                return partitions;
            }
        };
        let mut failed = Vec::new();
        let mut answered = std::collections::BTreeSet::new();
        for result in response.markers {
            for topic in result.topics {
                for p in topic.partitions {
                    let tp = TopicPartition::new(topic.name.0.to_string(), p.partition_index);
                    // 3: UNKNOWN_TOPIC_OR_PARTITION, deleted since: nothing to mark.
                    if p.error_code != 0 && p.error_code != 3 {
                        tracing::debug!(leader, partition = %tp, error = p.error_code, "marker refused");
                        failed.push(tp.clone());
                    }
                    answered.insert(tp);
                }
            }
        }
        // A partition the answer leaves out was not written either.
        failed.extend(partitions.into_iter().filter(|tp| !answered.contains(tp)));
        failed
    }
}
