//! Carries share-partition state between a partition's leader and its group's
//! coordinator (`group::share::StateStore`): a direct call when this broker
//! coordinates the group, else ReadShareGroupState / WriteShareGroupState to the
//! coordinator (Kafka's inter-broker share-state APIs, v0), over the broker's peer
//! connections. It lives with the APIs because it speaks Kafka; `group/` does not.

use kafka_protocol::messages::{
    read_share_group_state_request, write_share_group_state_request, ReadShareGroupStateRequest,
    WriteShareGroupStateRequest,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::api::context::Services;
use crate::cluster::peers::Peers;
use crate::cluster::MetadataStore;
use crate::group::coordinator::GroupCoordinator;
use crate::group::offsets;
use crate::group::share::partition::{DeliveryState, Snapshot, StateBatch};
use crate::group::share::{PersistError, ShareKey, ShareState, StateStore};
use crate::limits::{SHARE_STATE_RETRY_BACKOFF, SHARE_STATE_RETRY_FOR};
use crate::model::retrying;

/// The start offset a read answers for a share-partition with no stored state.
pub const NO_STATE: i64 = -1;

/// What a partition leader uses to reach the coordinators of share groups.
#[derive(Debug)]
pub struct Persister<'a> {
    pub node_id: i32,
    pub groups: &'a GroupCoordinator,
    pub peers: &'a Peers,
    pub store: &'a dyn MetadataStore,
    /// Until when a transient failure is asked again (one budget for a whole request).
    pub retry_until: tokio::time::Instant,
}

impl<'a> Persister<'a> {
    /// How one request reaches the coordinators of share groups: made once per
    /// request, so that all its partitions share one budget
    /// ([`SHARE_STATE_RETRY_FOR`]) for waiting out a moving coordinator.
    pub fn for_request(services: &'a Services) -> Self {
        Self {
            node_id: services.node.node_id,
            groups: &services.groups,
            peers: &services.peers,
            store: services.store.as_ref(),
            retry_until: tokio::time::Instant::now() + SHARE_STATE_RETRY_FOR,
        }
    }
}

/// Both calls are asked again while the coordinator is moving or out of reach
/// ([`PersistError::is_transient`]), finding it anew each time, until `retry_until`
/// ([`SHARE_STATE_RETRY_FOR`] into the request), as Kafka's persister
/// does: a coordinator that moves (a placement change, a controlled shutdown, a restart
/// that left the peer connections to its old process dead) costs the caller a pause,
/// not an error. Asking again is safe: a read only marks the leader epoch that took the
/// state over, and a write that landed before its answer was lost stores the same
/// state again.
#[async_trait::async_trait]
impl StateStore for Persister<'_> {
    async fn read(
        &self,
        key: &ShareKey,
        leader_epoch: i32,
    ) -> Result<Option<ShareState>, PersistError> {
        retrying(
            self.retry_until,
            SHARE_STATE_RETRY_BACKOFF,
            worth_asking_again,
            || self.read_once(key, leader_epoch),
        )
        .await
    }

    async fn write(&self, key: &ShareKey, state: ShareState) -> Result<(), PersistError> {
        retrying(
            self.retry_until,
            SHARE_STATE_RETRY_BACKOFF,
            worth_asking_again,
            || self.write_once(key, &state),
        )
        .await
    }
}

impl Persister<'_> {
    /// The stored state of `key`, taken over by its leader at `leader_epoch`.
    async fn read_once(
        &self,
        key: &ShareKey,
        leader_epoch: i32,
    ) -> Result<Option<ShareState>, PersistError> {
        let coordinator = self.coordinator(&key.group).await?;
        if coordinator == self.node_id {
            return self.groups.read_share_state(key, leader_epoch);
        }
        let request = ReadShareGroupStateRequest::default()
            .with_group_id(StrBytes::from_string(key.group.clone()))
            .with_topics(vec![
                read_share_group_state_request::ReadStateData::default()
                    .with_topic_id(key.topic_id)
                    .with_partitions(vec![
                        read_share_group_state_request::PartitionData::default()
                            .with_partition(key.partition)
                            .with_leader_epoch(leader_epoch),
                    ]),
            ]);
        let response = self
            .peers
            .send(coordinator, request, 0)
            .await
            .map_err(|e| PersistError::Unreachable(e.to_string()))?;
        let result = response
            .results
            .into_iter()
            .flat_map(|r| r.partitions)
            .next()
            .ok_or_else(|| PersistError::Unreachable("an empty answer".into()))?;
        refusal(result.error_code)?;
        if result.start_offset == NO_STATE {
            return Ok(None);
        }
        Ok(Some(ShareState {
            state_epoch: result.state_epoch,
            leader_epoch,
            snapshot: Snapshot {
                start_offset: result.start_offset,
                batches: result
                    .state_batches
                    .iter()
                    .filter_map(|b| {
                        Some(StateBatch {
                            first: b.first_offset,
                            last: b.last_offset,
                            state: DeliveryState::from_id(b.delivery_state)?,
                            delivery_count: b.delivery_count,
                        })
                    })
                    .collect(),
            },
        }))
    }

    /// Stores `state` of `key`; `Ok` once it is durable at the coordinator.
    async fn write_once(&self, key: &ShareKey, state: &ShareState) -> Result<(), PersistError> {
        let coordinator = self.coordinator(&key.group).await?;
        if coordinator == self.node_id {
            return self.groups.write_share_state(key, state).await;
        }
        let batches = state
            .snapshot
            .batches
            .iter()
            .map(|b| {
                write_share_group_state_request::StateBatch::default()
                    .with_first_offset(b.first)
                    .with_last_offset(b.last)
                    .with_delivery_state(b.state.id())
                    .with_delivery_count(b.delivery_count)
            })
            .collect();
        let request = WriteShareGroupStateRequest::default()
            .with_group_id(StrBytes::from_string(key.group.clone()))
            .with_topics(vec![
                write_share_group_state_request::WriteStateData::default()
                    .with_topic_id(key.topic_id)
                    .with_partitions(vec![
                        write_share_group_state_request::PartitionData::default()
                            .with_partition(key.partition)
                            .with_state_epoch(state.state_epoch)
                            .with_leader_epoch(state.leader_epoch)
                            .with_start_offset(state.snapshot.start_offset)
                            .with_state_batches(batches),
                    ]),
            ]);
        let response = self
            .peers
            .send(coordinator, request, 0)
            .await
            .map_err(|e| PersistError::Unreachable(e.to_string()))?;
        let code = response
            .results
            .iter()
            .flat_map(|r| r.partitions.iter())
            .map(|p| p.error_code)
            .next()
            .ok_or_else(|| PersistError::Unreachable("an empty answer".into()))?;
        refusal(code)
    }

    async fn coordinator(&self, group: &str) -> Result<i32, PersistError> {
        offsets::coordinator_of(self.store, group)
            .await
            .ok_or_else(|| PersistError::Unreachable(format!("no coordinator for '{group}'")))
    }
}

fn worth_asking_again(error: &PersistError) -> bool {
    let transient = error.is_transient();
    if transient {
        tracing::debug!(%error, "share state: asking the group's coordinator again");
    }
    transient
}

/// The wire code of a persist error (the share-state APIs' answers).
pub fn error_code(error: &PersistError) -> i16 {
    match error {
        PersistError::NotCoordinator => ResponseError::NotCoordinator.code(),
        PersistError::FencedLeaderEpoch => ResponseError::FencedLeaderEpoch.code(),
        PersistError::FencedStateEpoch => ResponseError::FencedStateEpoch.code(),
        PersistError::Storage(_) | PersistError::Unreachable(_) | PersistError::Unavailable(_) => {
            ResponseError::CoordinatorNotAvailable.code()
        }
    }
}

fn refusal(code: i16) -> Result<(), PersistError> {
    match code {
        0 => Ok(()),
        c if c == ResponseError::NotCoordinator.code() => Err(PersistError::NotCoordinator),
        c if c == ResponseError::FencedLeaderEpoch.code() => Err(PersistError::FencedLeaderEpoch),
        c if c == ResponseError::FencedStateEpoch.code() => Err(PersistError::FencedStateEpoch),
        c if c == ResponseError::CoordinatorNotAvailable.code()
            || c == ResponseError::CoordinatorLoadInProgress.code() =>
        {
            Err(PersistError::Unavailable(format!("error code {c}")))
        }
        c => Err(PersistError::Storage(format!("error code {c}"))),
    }
}
