//! The controller: one broker at a time, elected through etcd, places every topic's
//! partitions on the consistent-hash ring of live brokers and writes the placement.
//!
//! It drives any `ControllerStore`. On etcd, election is a lease-held key created only
//! if absent (`ControllerStore::campaign`); its create revision is the controller's
//! term. Every placement write is a transaction guarded by "the controller key still
//! has my term", so a deposed controller — its lease expired while it was paused or
//! cut off — cannot write: that is the fencing.
//! A controller also steps down by its own clock when its session lapses.
//!
//! The controller re-places on every membership or topic change it is told about, and
//! every few seconds in case it missed one. Placement is a pure function
//! ([`assign_topic`]) of the ring and the previous placement, so re-running it changes
//! nothing unless something changed.

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use std::collections::BTreeSet;

use super::controller_store::{ControllerStore, Placed};
use super::election::{next_state, Membership};
use super::ring::{partition_key, place, Ring};
use super::store::{
    ControllerTerm, MetadataError, MetadataEvent, PartitionAssignment, TopicAssignment, TopicSpec,
};
use super::topic_config;
use crate::metrics as m;

use crate::limits::CONTROLLER_RECHECK as RECHECK;

/// Campaigns whenever there is no controller, and controls while elected; until shutdown.
pub async fn run<S: ControllerStore + ?Sized>(
    store: std::sync::Arc<S>,
    shutdown: CancellationToken,
) {
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
            control(&*store, term, &mut events, &shutdown).await;
            metrics::gauge!(m::CONTROLLER_ACTIVE).set(0.0);
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = events.recv() => {}
            _ = tokio::time::sleep(crate::limits::CONTROLLER_CAMPAIGN_PAUSE) => {}
        }
    }
}

/// Acts as controller for `term` until deposed, lapsed or shut down.
async fn control<S: ControllerStore + ?Sized>(
    store: &S,
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
    let mut incarnations = match store.controller_incarnations().await {
        Ok(seen) => Incarnations { seen },
        Err(error) => {
            tracing::warn!(%error, "cannot read the last controller's broker incarnations; restarts before this term go unseen");
            Incarnations::default()
        }
    };
    loop {
        if !store.may_lead() {
            tracing::warn!("etcd session lapsed: no longer acting as controller");
            return;
        }
        if store.controller() != Some(term) {
            tracing::info!("deposed as controller");
            return;
        }
        match place_all(store, term, &mut incarnations).await {
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
async fn place_all<S: ControllerStore + ?Sized>(
    store: &S,
    term: ControllerTerm,
    incarnations: &mut Incarnations,
) -> Result<bool, MetadataError> {
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
    let round = RoundMembers::of(
        snapshot.brokers.keys().copied(),
        incarnations,
        &snapshot.incarnations,
        snapshot.assignments.values(),
    );
    let mut all_written = true;
    if !round.restarted.is_empty() {
        tracing::info!(brokers = ?round.restarted.keys(), "brokers restarted: out of the ISRs until caught up");
    }
    let shutting_down: BTreeSet<i32> = snapshot
        .brokers
        .values()
        .filter(|b| b.shutting_down)
        .map(|b| b.node_id)
        .collect();
    let members = Membership {
        live: &round.live,
        shutting_down: &shutting_down,
        restarted: &round.restarted,
    };
    for spec in snapshot.topics.values() {
        let previous = snapshot
            .assignments
            .get(&spec.name)
            .filter(|a| a.topic_id == spec.topic_id);
        let unclean = topic_config::unclean_leader_election(
            &spec.configs,
            snapshot.broker_configs.get(&None),
        );
        let mut desired = next_assignment(&ring, spec, previous, &members, unclean);
        stamp_leader_incarnations(&mut desired.assignment, &snapshot.incarnations);
        if previous == Some(&desired.assignment) {
            continue;
        }
        let revision = snapshot
            .assignment_revisions
            .get(&spec.name)
            .copied()
            .unwrap_or(0);
        match store
            .put_assignment(term, &spec.name, Some(&desired.assignment), revision)
            .await?
        {
            Placed::Written => {}
            // A leader changed an ISR meanwhile: its event brings us back here.
            Placed::Stale => {
                all_written = false;
                continue;
            }
            Placed::Fenced => return Ok(false),
        }
        metrics::counter!(m::PARTITION_LEADER_CHANGES_TOTAL)
            .increment(desired.leaders_moved as u64);
        if desired.unclean > 0 {
            metrics::counter!(m::UNCLEAN_LEADER_ELECTIONS_TOTAL).increment(desired.unclean as u64);
            tracing::warn!(topic = %spec.name, partitions = desired.unclean, "unclean leader election: acknowledged writes may be lost");
        }
        tracing::info!(topic = %spec.name, partitions = spec.partitions, moved = desired.leaders_moved, "placed partitions");
    }
    for name in snapshot.assignments.keys() {
        if snapshot.topics.contains_key(name) {
            continue;
        }
        let revision = snapshot
            .assignment_revisions
            .get(name)
            .copied()
            .unwrap_or(0);
        if store.put_assignment(term, name, None, revision).await? == Placed::Fenced {
            return Ok(false);
        }
    }
    // Restarts count as handled only once every ISR they touch is written.
    if all_written && incarnations.remember(&snapshot.incarnations) {
        let saved = store
            .save_controller_incarnations(term, &incarnations.seen)
            .await?;
        if saved == Placed::Fenced {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The incarnation of each broker the controller last placed with, to notice restarts
/// that happened between two rounds (the broker's registration gone and back). Saved
/// in etcd whenever it changes and loaded by the next controller, so a restart while
/// no controller ran is noticed too.
#[derive(Debug, Default)]
pub(crate) struct Incarnations {
    seen: std::collections::BTreeMap<i32, i64>,
}

impl Incarnations {
    /// The brokers whose incarnation differs from the one last remembered. A
    /// controller's first round knows no history: nothing restarted.
    pub(crate) fn restarted(&self, now: &std::collections::BTreeMap<i32, i64>) -> BTreeSet<i32> {
        now.iter()
            .filter(|(id, rev)| self.seen.get(id).is_some_and(|seen| seen != *rev))
            .map(|(id, _)| *id)
            .collect()
    }

    /// Remembers the current incarnations, once a round has written what they imply;
    /// whether that changed anything (then the next controller should know it too).
    pub(crate) fn remember(&mut self, now: &std::collections::BTreeMap<i32, i64>) -> bool {
        let before = self.seen.clone();
        self.seen.extend(now.iter().map(|(id, rev)| (*id, *rev)));
        self.seen != before
    }
}

/// Who takes part in one controller round, as `place_all` and the simulator both see it.
#[derive(Debug)]
pub(crate) struct RoundMembers {
    /// The registered brokers, less the restarted ones.
    pub live: BTreeSet<i32>,
    /// The restarted brokers, with their new incarnation (see `Membership::restarted`).
    pub restarted: std::collections::BTreeMap<i32, i64>,
}

impl RoundMembers {
    /// A broker that restarted since the last round (a new incarnation) may have lost
    /// what it had not synced: for this round it counts as dead, so it leaves every ISR
    /// that did not admit it in that incarnation and must catch up again before it can
    /// be elected. A leader elected under an incarnation it no longer has restarted
    /// too, even if no round saw it go (this controller is new, or the restart fell
    /// between rounds).
    pub(crate) fn of<'a>(
        registered: impl Iterator<Item = i32>,
        seen: &Incarnations,
        now: &std::collections::BTreeMap<i32, i64>,
        assignments: impl Iterator<Item = &'a TopicAssignment>,
    ) -> Self {
        let mut restarted = seen.restarted(now);
        restarted.extend(restarted_leaders(assignments, now));
        Self {
            live: registered.filter(|b| !restarted.contains(b)).collect(),
            restarted: restarted
                .iter()
                .filter_map(|b| now.get(b).map(|&incarnation| (*b, incarnation)))
                .collect(),
        }
    }
}

/// Leaders whose stamped incarnation is not their registration's now.
pub(crate) fn restarted_leaders<'a>(
    assignments: impl Iterator<Item = &'a TopicAssignment>,
    incarnations: &std::collections::BTreeMap<i32, i64>,
) -> BTreeSet<i32> {
    assignments
        .flat_map(|a| &a.partitions)
        .filter(|p| p.leader >= 0 && p.leader_incarnation != 0)
        .filter(|p| {
            incarnations
                .get(&p.leader)
                .is_some_and(|&now| now != p.leader_incarnation)
        })
        .map(|p| p.leader)
        .collect()
}

/// Records each partition's leader's current incarnation in the state that elects it,
/// so that only that process may lead on it (see
/// [`PartitionAssignment::leader_incarnation`]).
pub(crate) fn stamp_leader_incarnations(
    assignment: &mut TopicAssignment,
    incarnations: &std::collections::BTreeMap<i32, i64>,
) {
    for p in &mut assignment.partitions {
        p.leader_incarnation = incarnations.get(&p.leader).copied().unwrap_or(0);
    }
}

/// A topic's next stored state and what changed in it.
#[derive(Debug)]
pub struct NextAssignment {
    pub assignment: TopicAssignment,
    pub leaders_moved: usize,
    pub unclean: usize,
}

/// The next state of every partition of `spec`: the ring says where the replicas
/// should be (keeping what the previous target can keep, so a membership change
/// moves little), and `election::next_state` walks each partition there safely —
/// leaders only from the ISR, new replicas in sync before old ones go.
pub fn next_assignment(
    ring: &Ring,
    spec: &TopicSpec,
    previous: Option<&TopicAssignment>,
    members: &Membership<'_>,
    unclean_allowed: bool,
) -> NextAssignment {
    // The ring's memory of each partition is its stored target, except where a pin
    // decides (or decided) it: there the ring places the partition afresh, so that
    // its own placement is what a cancelled pin reverts to.
    let previous_targets = previous.map(|a| TopicAssignment {
        topic_id: a.topic_id,
        partitions: a
            .partitions
            .iter()
            .enumerate()
            .map(|(index, p)| {
                let index = i32::try_from(index).unwrap_or(i32::MAX);
                if p.pinned || spec.pinned(index).is_some() {
                    return PartitionAssignment {
                        leader: -1,
                        replicas: Vec::new(),
                        ..p.clone()
                    };
                }
                let target = p.ring_target().to_vec();
                PartitionAssignment {
                    leader: target.first().copied().unwrap_or(-1),
                    replicas: target,
                    ..p.clone()
                }
            })
            .collect(),
    });
    let targets = assign_topic(ring, spec, previous_targets.as_ref());
    let mut leaders_moved = 0;
    let mut unclean = 0;
    let partitions = targets
        .partitions
        .iter()
        .enumerate()
        .map(|(index, ring_target)| {
            let pin = spec.pinned(i32::try_from(index).unwrap_or(i32::MAX));
            let target = pin.unwrap_or(&ring_target.replicas);
            let current = previous.and_then(|a| a.partitions.get(index));
            // An operator's one-shot unclean election (ElectLeaders) counts as the
            // topic allowing it, for this one decision.
            let unclean_here = unclean_allowed || current.is_some_and(|c| c.unclean_requested);
            let mut next = match next_state(current, target, members, unclean_here) {
                Some(change) => {
                    leaders_moved += usize::from(change.leader_moved);
                    unclean += usize::from(change.unclean);
                    change.next
                }
                None => current.cloned().unwrap_or_else(|| ring_target.clone()),
            };
            next.target = if next.replicas == target {
                Vec::new()
            } else {
                target.to_vec()
            };
            next.pinned = pin.is_some();
            next.unclean_requested = false;
            next
        })
        .collect();
    NextAssignment {
        assignment: TopicAssignment {
            topic_id: spec.topic_id,
            partitions,
        },
        leaders_moved,
        unclean,
    }
}

/// The placement of `spec` on `ring`, keeping what `previous` can keep: the leader of
/// each partition by bounded-load consistent hashing, its followers the next distinct
/// brokers on its ring walk under the same kind of bound (replica counts, leaders
/// included, at most each broker's fair share rounded up), and a leader epoch bumped
/// whenever the leader changes.
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
    let replicas = place_followers(ring, spec, &keys, &leaders, previous);
    let partitions = leaders
        .iter()
        .zip(replicas)
        .enumerate()
        .map(|(index, (&leader, replicas))| {
            let leader_epoch = match previous.and_then(|a| a.partitions.get(index)) {
                Some(old) if old.leader == leader => old.leader_epoch,
                Some(old) => old.leader_epoch + 1,
                None => 0,
            };
            PartitionAssignment {
                leader,
                isr: replicas.clone(),
                replicas,
                leader_epoch,
                partition_epoch: leader_epoch,
                target: Vec::new(),
                leader_incarnation: 0,
                pinned: false,
                unclean_requested: false,
                isr_incarnations: Default::default(),
            }
        })
        .collect();
    TopicAssignment {
        topic_id: spec.topic_id,
        partitions,
    }
}

/// Each partition's replica list: its leader, then followers. A follower stays where
/// it was if its broker is live and under its bound; free slots go to the first
/// brokers on the partition's ring walk with room, and only if none has room to the
/// first ones not yet holding it.
fn place_followers(
    ring: &Ring,
    spec: &TopicSpec,
    keys: &[u64],
    leaders: &[i32],
    previous: Option<&TopicAssignment>,
) -> Vec<Vec<i32>> {
    let brokers: Vec<i32> = ring.brokers().collect();
    let factor = usize::try_from(spec.replication_factor)
        .unwrap_or(1)
        .clamp(1, brokers.len().max(1));
    let caps = ring.caps(keys.len() * factor);
    let mut load: std::collections::HashMap<i32, usize> = brokers.iter().map(|&b| (b, 0)).collect();
    for leader in leaders.iter().filter(|&&l| l >= 0) {
        *load.entry(*leader).or_default() += 1;
    }
    let has_room = |load: &std::collections::HashMap<i32, usize>, b: i32| {
        load.get(&b).copied().unwrap_or(0) < caps.get(&b).copied().unwrap_or(0)
    };
    let mut all: Vec<Vec<i32>> = leaders
        .iter()
        .map(|&l| if l >= 0 { vec![l] } else { Vec::new() })
        .collect();
    // Followers that can stay, first, so that moving ones never crowd them out.
    for (index, replicas) in all.iter_mut().enumerate() {
        let Some(old) = previous.and_then(|a| a.partitions.get(index)) else {
            continue;
        };
        // The old leader, if it lost leadership, may stay on as a follower.
        for &follower in &old.replicas {
            if replicas.is_empty() || replicas.len() >= factor {
                break;
            }
            if !replicas.contains(&follower)
                && load.contains_key(&follower)
                && has_room(&load, follower)
            {
                replicas.push(follower);
                *load.entry(follower).or_default() += 1;
            }
        }
    }
    for (replicas, &key) in all.iter_mut().zip(keys) {
        if replicas.is_empty() {
            continue;
        }
        let walk = ring.walk(key);
        for pass in [true, false] {
            for &broker in &walk {
                if replicas.len() >= factor {
                    break;
                }
                if !replicas.contains(&broker) && (!pass || has_room(&load, broker)) {
                    replicas.push(broker);
                    *load.entry(broker).or_default() += 1;
                }
            }
        }
    }
    rebalance_followers(&mut all, &mut load, &caps);
    all
}

/// Greedy filling can leave a broker over its bound when the only brokers with room
/// already hold a partition; move single followers from over-bound brokers to brokers
/// with room until none is over (each move lowers the excess by one, so this ends).
fn rebalance_followers(
    all: &mut [Vec<i32>],
    load: &mut std::collections::HashMap<i32, usize>,
    caps: &std::collections::HashMap<i32, usize>,
) {
    let cap = |b: &i32| caps.get(b).copied().unwrap_or(0);
    loop {
        let mut over: Vec<i32> = load
            .iter()
            .filter(|(b, l)| **l > cap(b))
            .map(|(b, _)| *b)
            .collect();
        let mut under: Vec<i32> = load
            .iter()
            .filter(|(b, l)| **l < cap(b))
            .map(|(b, _)| *b)
            .collect();
        over.sort_unstable();
        under.sort_unstable();
        let swap = over.iter().find_map(|&from| {
            under.iter().find_map(|&to| {
                all.iter()
                    .position(|r| r.iter().skip(1).any(|&f| f == from) && !r.contains(&to))
                    .map(|index| (index, from, to))
            })
        });
        let Some((index, from, to)) = swap else {
            return;
        };
        if let Some(slot) = all[index].iter_mut().skip(1).find(|f| **f == from) {
            *slot = to;
        }
        *load.entry(from).or_default() -= 1;
        *load.entry(to).or_default() += 1;
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
            replica_assignments: BTreeMap::new(),
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
    }

    #[test]
    fn a_leader_stamped_with_another_incarnation_restarted() {
        let spec = spec(3, 1);
        let mut assignment = TopicAssignment::all_on(&spec, 1);
        let now: BTreeMap<i32, i64> = [(1, 10), (2, 11)].into_iter().collect();
        stamp_leader_incarnations(&mut assignment, &now);
        assert!(assignment
            .partitions
            .iter()
            .all(|p| p.leader_incarnation == 10));
        assert!(restarted_leaders([&assignment].into_iter(), &now).is_empty());
        let later: BTreeMap<i32, i64> = [(1, 25), (2, 11)].into_iter().collect();
        assert_eq!(
            restarted_leaders([&assignment].into_iter(), &later),
            BTreeSet::from([1]),
            "broker 1 registered again since it was elected"
        );
        // Unstamped state (older data) proves nothing.
        let unstamped = TopicAssignment::all_on(&spec, 1);
        assert!(restarted_leaders([&unstamped].into_iter(), &later).is_empty());
    }

    #[test]
    fn a_new_incarnation_counts_as_a_restart_until_a_round_remembers_it() {
        let mut incarnations = Incarnations::default();
        let first: BTreeMap<i32, i64> = [(1, 10), (2, 11), (3, 12)].into_iter().collect();
        assert!(
            incarnations.restarted(&first).is_empty(),
            "no history: nothing restarted"
        );
        incarnations.remember(&first);
        let restarted: BTreeMap<i32, i64> = [(1, 10), (2, 11), (3, 40)].into_iter().collect();
        assert_eq!(
            incarnations.restarted(&restarted),
            [3].into_iter().collect()
        );
        // A round whose writes did not all land keeps treating it as restarted.
        assert_eq!(
            incarnations.restarted(&restarted),
            [3].into_iter().collect()
        );
        incarnations.remember(&restarted);
        assert!(incarnations.restarted(&restarted).is_empty());
        let joined: BTreeMap<i32, i64> = [(1, 10), (2, 11), (3, 40), (4, 41)].into_iter().collect();
        assert!(
            incarnations.restarted(&joined).is_empty(),
            "a first registration is a join"
        );
    }

    #[test]
    fn a_restarted_broker_leaves_the_isr_and_loses_its_leadership() {
        let topic = spec(6, 3);
        let ring = ring(&[1, 2, 3]);
        let all: BTreeSet<i32> = [1, 2, 3].into_iter().collect();
        let none = BTreeSet::new();
        let members = Membership {
            live: &all,
            shutting_down: &none,
            restarted: &BTreeMap::new(),
        };
        let placed = next_assignment(&ring, &topic, None, &members, false).assignment;
        assert!(placed.partitions.iter().all(|p| p.isr.len() == 3));
        // Broker 3 restarted: this round it counts as dead.
        let without_3: BTreeSet<i32> = [1, 2].into_iter().collect();
        let members = Membership {
            live: &without_3,
            shutting_down: &none,
            restarted: &BTreeMap::new(),
        };
        let next = next_assignment(&ring, &topic, Some(&placed), &members, false).assignment;
        for (old, new) in placed.partitions.iter().zip(&next.partitions) {
            assert!(!new.isr.contains(&3), "{new:?}");
            assert_ne!(new.leader, 3);
            if old.leader == 3 {
                assert_eq!(new.leader_epoch, old.leader_epoch + 1);
            }
        }
    }

    fn replica_max_over_mean(assignment: &TopicAssignment, brokers: usize) -> f64 {
        let mut load: std::collections::HashMap<i32, usize> = std::collections::HashMap::new();
        let mut total = 0;
        for p in &assignment.partitions {
            for r in &p.replicas {
                *load.entry(*r).or_default() += 1;
                total += 1;
            }
        }
        let max = load.values().copied().max().unwrap_or(0) as f64;
        max / (total as f64 / brokers as f64)
    }

    #[test]
    fn replicas_are_balanced_within_ten_percent_too() {
        for partitions in [100, 256, 1000] {
            for n in 3..=10 {
                let ids: Vec<i32> = (1..=n).collect();
                let topic = spec(partitions, 3);
                let placed = assign_topic(&ring(&ids), &topic, None);
                let ratio = replica_max_over_mean(&placed, n as usize);
                assert!(
                    ratio <= 1.10 + 1e-9,
                    "{n} brokers, {partitions} partitions, rf 3: replica max/mean {ratio:.3}"
                );
                for p in &placed.partitions {
                    let mut distinct = p.replicas.clone();
                    distinct.sort_unstable();
                    distinct.dedup();
                    assert_eq!(distinct.len(), 3);
                    assert_eq!(p.replicas[0], p.leader);
                }
                assert_eq!(
                    assign_topic(&ring(&ids), &topic, Some(&placed)),
                    placed,
                    "stable"
                );
                // A join keeps replicas balanced and moves few of them.
                let grown_ids: Vec<i32> = (1..=n + 1).collect();
                let grown = assign_topic(&ring(&grown_ids), &topic, Some(&placed));
                let ratio = replica_max_over_mean(&grown, n as usize + 1);
                assert!(
                    ratio <= 1.10 + 1e-9,
                    "after a join {n}->{}: {ratio:.3}",
                    n + 1
                );
                let moved: usize = placed
                    .partitions
                    .iter()
                    .zip(&grown.partitions)
                    .map(|(a, b)| {
                        b.replicas
                            .iter()
                            .filter(|r| !a.replicas.contains(r))
                            .count()
                    })
                    .sum();
                let ideal = (partitions * 3) as f64 / f64::from(n + 1);
                println!(
                    "rf 3, {partitions} partitions, {n}->{}: replica max/mean {ratio:.3}, {moved} replicas moved ({:.2}x ideal)",
                    n + 1,
                    moved as f64 / ideal
                );
                assert!(
                    moved as f64 <= 1.25 * ideal,
                    "join {n}->{}: {moved} replicas moved, ideal {ideal:.0}",
                    n + 1
                );
            }
        }
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

    fn with_isr(mut a: TopicAssignment, index: usize, isr: &[i32]) -> TopicAssignment {
        a.partitions[index].isr = isr.to_vec();
        a.partitions[index].partition_epoch += 1;
        a
    }

    #[test]
    fn a_pin_is_carried_out_stepwise_and_a_cancel_returns_to_the_ring() {
        let mut topic = spec(4, 2);
        let ring = ring(&[1, 2, 3]);
        let all: BTreeSet<i32> = [1, 2, 3].into_iter().collect();
        let none = BTreeSet::new();
        let members = Membership {
            live: &all,
            shutting_down: &none,
            restarted: &BTreeMap::new(),
        };
        let placed = next_assignment(&ring, &topic, None, &members, false).assignment;
        let original = placed.partitions[0].clone();
        // Pin partition 0 onto the broker that does not hold it, as preferred leader.
        let outsider = [1, 2, 3]
            .into_iter()
            .find(|b| !original.replicas.contains(b))
            .expect("rf 2 of 3 leaves one out");
        let pin = vec![outsider, original.replicas[1]];
        topic.replica_assignments.insert(0, pin.clone());
        let step1 = next_assignment(&ring, &topic, Some(&placed), &members, false).assignment;
        let p = &step1.partitions[0];
        assert_eq!(p.target, pin, "the pin is the target");
        assert!(p.pinned);
        assert!(p.replicas.contains(&outsider), "the new replica is added");
        assert!(
            p.replicas.contains(&original.replicas[0]),
            "the old one stays until the new one is in sync: {p:?}"
        );
        assert_eq!(p.leader, original.leader, "leadership waits too");
        assert!(
            !p.isr.contains(&outsider),
            "it joins the ISR only by catching up"
        );
        for i in 1..4 {
            assert_eq!(
                step1.partitions[i], placed.partitions[i],
                "others unchanged"
            );
        }
        // Nothing changed: a fixed point.
        let again = next_assignment(&ring, &topic, Some(&step1), &members, false).assignment;
        assert_eq!(again, step1);
        // The new replica caught up (its leader added it): the move completes.
        let mut isr = p.isr.clone();
        isr.push(outsider);
        let caught_up = with_isr(step1.clone(), 0, &isr);
        let done = next_assignment(&ring, &topic, Some(&caught_up), &members, false).assignment;
        let p = &done.partitions[0];
        assert_eq!(p.replicas, pin);
        assert_eq!(p.leader, outsider, "the first pinned replica leads");
        assert!(p.target.is_empty() && p.pinned, "{p:?}");
        assert!(!p.isr.contains(&original.replicas[0]));
        assert!(p.leader_epoch > original.leader_epoch);
        let again = next_assignment(&ring, &topic, Some(&done), &members, false).assignment;
        assert_eq!(again, done, "a completed pin is stable");
        // Cancel: the ring places partition 0 again, where it was before the pin.
        topic.replica_assignments.clear();
        let back = next_assignment(&ring, &topic, Some(&done), &members, false).assignment;
        let p = &back.partitions[0];
        assert!(!p.pinned);
        assert_eq!(p.target, original.replicas, "back to the ring's placement");
        for i in 1..4 {
            assert_eq!(back.partitions[i], placed.partitions[i], "others unchanged");
        }
        let again = next_assignment(&ring, &topic, Some(&back), &members, false).assignment;
        assert_eq!(again, back, "the ring remembers its placement again");
    }

    #[test]
    fn a_requested_unclean_election_is_honoured_once_and_counted() {
        let topic = spec(1, 3);
        let ring = ring(&[1, 2, 3]);
        let all: BTreeSet<i32> = [1, 2, 3].into_iter().collect();
        let none = BTreeSet::new();
        let members = Membership {
            live: &all,
            shutting_down: &none,
            restarted: &BTreeMap::new(),
        };
        let placed = next_assignment(&ring, &topic, None, &members, false).assignment;
        let p = placed.partitions[0].clone();
        let (in_sync, outside) = (p.replicas[0], p.replicas[1]);
        // Only `in_sync` is in the ISR, and it died: the partition is offline.
        let alone = with_isr(placed, 0, &[in_sync]);
        let live: BTreeSet<i32> = all.iter().copied().filter(|&b| b != in_sync).collect();
        let members = Membership {
            live: &live,
            shutting_down: &none,
            restarted: &BTreeMap::new(),
        };
        let offline = next_assignment(&ring, &topic, Some(&alone), &members, false);
        assert_eq!(offline.assignment.partitions[0].leader, -1);
        assert_eq!(offline.unclean, 0, "not allowed by the topic");
        let mut asked = offline.assignment.clone();
        asked.partitions[0].unclean_requested = true;
        let elected = next_assignment(&ring, &topic, Some(&asked), &members, false);
        let p = &elected.assignment.partitions[0];
        assert_eq!(elected.unclean, 1, "counted");
        assert!(p.leader == outside || p.leader == p.replicas[2], "{p:?}");
        assert_ne!(p.leader, in_sync);
        assert_eq!(p.isr, vec![p.leader]);
        assert!(!p.unclean_requested, "one shot");
        // With no live replica the request is dropped, not kept for later.
        let dead = BTreeSet::new();
        let nobody = Membership {
            live: &dead,
            shutting_down: &none,
            restarted: &BTreeMap::new(),
        };
        let stale = next_assignment(&ring, &topic, Some(&asked), &nobody, false);
        assert_eq!(stale.unclean, 0);
        assert!(!stale.assignment.partitions[0].unclean_requested);
    }
}
