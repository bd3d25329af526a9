//! The controller: one broker at a time, elected through etcd, places every topic's
//! partitions on the consistent-hash ring of live brokers and writes the placement.
//!
//! Election is a lease-held key created only if absent (`EtcdStore::campaign`); its
//! create revision is the controller's term. Every placement write is a transaction
//! guarded by "the controller key still has my term", so a deposed controller — its
//! lease expired while it was paused or cut off — cannot write: that is the fencing.
//! A controller also steps down by its own clock when its session lapses.
//!
//! The controller re-places on every membership or topic change it is told about, and
//! every few seconds in case it missed one. Placement is a pure function
//! ([`assign_topic`]) of the ring and the previous placement, so re-running it changes
//! nothing unless something changed.

use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::etcd::{ControllerTerm, EtcdStore};
use super::ring::{partition_key, place, Ring};
use super::{
    MetadataError, MetadataEvent, MetadataStore, PartitionAssignment, TopicAssignment, TopicSpec,
};
use crate::metrics as m;

/// How often a controller re-checks placement without being told of a change.
const RECHECK: Duration = Duration::from_secs(3);

/// Campaigns whenever there is no controller, and controls while elected; until shutdown.
pub async fn run(store: std::sync::Arc<EtcdStore>, shutdown: CancellationToken) {
    let mut events = store.subscribe();
    loop {
        let term = match store.controller() {
            None => store.campaign().await.unwrap_or_else(|error| {
                tracing::warn!(%error, "controller election failed");
                None
            }),
            // Still ours: this broker stepped down while its session was in doubt
            // (etcd unreachable), and the lease, hence the key, survived.
            Some(term) if term.node_id == store.node_id() && store.may_lead() => Some(term),
            Some(_) => None,
        };
        if let Some(term) = term {
            metrics::gauge!(m::CONTROLLER_ACTIVE).set(1.0);
            control(&store, term, &mut events, &shutdown).await;
            metrics::gauge!(m::CONTROLLER_ACTIVE).set(0.0);
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = events.recv() => {}
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Acts as controller for `term` until deposed, lapsed or shut down.
async fn control(
    store: &EtcdStore,
    term: ControllerTerm,
    events: &mut broadcast::Receiver<MetadataEvent>,
    shutdown: &CancellationToken,
) {
    tracing::info!(
        node_id = term.node_id,
        term = term.revision,
        "elected controller"
    );
    metrics::counter!(m::CONTROLLER_ELECTIONS_TOTAL).increment(1);
    loop {
        if !store.may_lead() {
            tracing::warn!("etcd session lapsed: no longer acting as controller");
            return;
        }
        if store.controller() != Some(term) {
            tracing::info!("deposed as controller");
            return;
        }
        match place_all(store, term).await {
            Ok(true) => {}
            Ok(false) => {
                tracing::info!("deposed as controller (fenced write)");
                return;
            }
            Err(error) => tracing::warn!(%error, "placing partitions failed; retrying"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => {
                store.resign(term).await;
                return;
            }
            _ = events.recv() => {}
            _ = tokio::time::sleep(RECHECK) => {}
        }
    }
}

/// Places every topic on the ring of live brokers and writes what changed.
/// `Ok(false)` when a write was fenced off (this broker is no longer controller).
async fn place_all(store: &EtcdStore, term: ControllerTerm) -> Result<bool, MetadataError> {
    let snapshot = store.snapshot();
    let live: Vec<(i32, u32)> = snapshot
        .brokers
        .values()
        .map(|b| (b.node_id, b.weight))
        .collect();
    if live.is_empty() {
        return Ok(true);
    }
    let ring = Ring::new(&live);
    for spec in snapshot.topics.values() {
        let previous = snapshot
            .assignments
            .get(&spec.name)
            .filter(|a| a.topic_id == spec.topic_id);
        let desired = assign_topic(&ring, spec, previous);
        if previous != Some(&desired) {
            let moved = moved_leaders(previous, &desired);
            if !store
                .put_assignment(term, &spec.name, Some(&desired))
                .await?
            {
                return Ok(false);
            }
            metrics::counter!(m::PARTITION_LEADER_CHANGES_TOTAL).increment(moved as u64);
            tracing::info!(topic = %spec.name, partitions = spec.partitions, moved, "placed partitions");
        }
    }
    for name in snapshot.assignments.keys() {
        if !snapshot.topics.contains_key(name) && !store.put_assignment(term, name, None).await? {
            return Ok(false);
        }
    }
    Ok(true)
}

fn moved_leaders(previous: Option<&TopicAssignment>, desired: &TopicAssignment) -> usize {
    desired
        .partitions
        .iter()
        .enumerate()
        .filter(|(i, p)| {
            previous
                .and_then(|a| a.partitions.get(*i))
                .is_none_or(|old| old.leader != p.leader)
        })
        .count()
}

/// The placement of `spec` on `ring`, keeping what `previous` can keep: the leader of
/// each partition by bounded-load consistent hashing, its replicas the next distinct
/// brokers on its ring walk, and a leader epoch bumped whenever the leader changes.
pub fn assign_topic(
    ring: &Ring,
    spec: &TopicSpec,
    previous: Option<&TopicAssignment>,
) -> TopicAssignment {
    let keys: Vec<u64> = (0..spec.partitions)
        .map(|i| partition_key(&spec.name, i))
        .collect();
    let previous_leaders: Option<Vec<i32>> =
        previous.map(|a| a.partitions.iter().map(|p| p.leader).collect());
    let leaders = place(ring, &keys, previous_leaders.as_deref());
    let replication_factor = usize::try_from(spec.replication_factor).unwrap_or(1).max(1);
    let partitions = leaders
        .iter()
        .zip(&keys)
        .enumerate()
        .map(|(index, (&leader, &key))| {
            let replicas = if leader < 0 {
                Vec::new()
            } else {
                std::iter::once(leader)
                    .chain(ring.walk(key).into_iter().filter(|&b| b != leader))
                    .take(replication_factor)
                    .collect()
            };
            let leader_epoch = match previous.and_then(|a| a.partitions.get(index)) {
                Some(old) if old.leader == leader => old.leader_epoch,
                Some(old) => old.leader_epoch + 1,
                None => 0,
            };
            PartitionAssignment {
                leader,
                replicas,
                leader_epoch,
            }
        })
        .collect();
    TopicAssignment {
        topic_id: spec.topic_id,
        partitions,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use uuid::Uuid;

    use super::*;

    fn spec(partitions: i32, replication_factor: i16) -> TopicSpec {
        TopicSpec {
            name: "orders".into(),
            topic_id: Uuid::new_v4(),
            numeric_id: 1,
            partitions,
            replication_factor,
            configs: BTreeMap::new(),
        }
    }

    fn ring(ids: &[i32]) -> Ring {
        Ring::new(&ids.iter().map(|&b| (b, 1)).collect::<Vec<_>>())
    }

    #[test]
    fn replicas_are_distinct_and_led_by_the_leader() {
        let topic = spec(12, 3);
        let assignment = assign_topic(&ring(&[1, 2, 3, 4]), &topic, None);
        for p in &assignment.partitions {
            assert_eq!(p.replicas.len(), 3);
            assert_eq!(p.replicas[0], p.leader);
            let mut distinct = p.replicas.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), 3, "{p:?}");
            assert_eq!(p.leader_epoch, 0);
        }
    }

    #[test]
    fn epochs_move_only_with_the_leader_and_replacing_is_stable() {
        let topic = spec(24, 1);
        let first = assign_topic(&ring(&[1, 2, 3]), &topic, None);
        let again = assign_topic(&ring(&[1, 2, 3]), &topic, Some(&first));
        assert_eq!(
            first, again,
            "re-placing with nothing changed changes nothing"
        );
        let grown = assign_topic(&ring(&[1, 2, 3, 4]), &topic, Some(&first));
        let mut moved = 0;
        for (old, new) in first.partitions.iter().zip(&grown.partitions) {
            if old.leader == new.leader {
                assert_eq!(new.leader_epoch, old.leader_epoch);
            } else {
                moved += 1;
                assert_eq!(new.leader, 4, "only the newcomer takes partitions");
                assert_eq!(new.leader_epoch, old.leader_epoch + 1);
            }
        }
        assert_eq!(moved, 6, "the newcomer takes its fair share of 24 / 4");
        assert_eq!(moved_leaders(Some(&first), &grown), 6);
    }

    #[test]
    fn a_leaving_broker_hands_over_only_its_own_partitions() {
        let topic = spec(30, 1);
        let before = assign_topic(&ring(&[1, 2, 3]), &topic, None);
        let after = assign_topic(&ring(&[1, 3]), &topic, Some(&before));
        for (old, new) in before.partitions.iter().zip(&after.partitions) {
            if old.leader != 2 {
                assert_eq!(old, new);
            } else {
                assert_ne!(new.leader, 2);
            }
        }
    }
}
