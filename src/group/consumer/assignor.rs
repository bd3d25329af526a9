//! The server-side assignors of KIP-848 groups, as pure functions of the members'
//! subscriptions, the subscribed topics and the previous target assignment.
//!
//! - `uniform` (Kafka's default): every member gets the same number of partitions of
//!   what it subscribes to, give or take one, and keeps as many of its previous
//!   partitions as that balance allows (sticky), so that a member joining or leaving
//!   moves as few partitions as possible.
//! - `range`: per topic, the subscribed members in member-id order get consecutive
//!   ranges; members subscribing to the same topics get the same partition numbers
//!   (co-partitioned joins).
//!
//! Rack awareness (where members name a rack and brokers have racks): `uniform` places
//! a partition, among the members still under the balanced share, first with one in
//! the rack of one of its replicas, so that it can fetch from a replica in its own rack
//! (KIP-392). A member keeps a partition away from its racks only when no member in them
//! could take it. Balance comes first. `range` ignores racks.
//!
//! Both are deterministic: the same input gives the same assignment on any coordinator.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use uuid::Uuid;

/// Partitions by topic id.
pub type Assignment = BTreeMap<Uuid, BTreeSet<i32>>;

/// The racks of each partition's replicas (empty when brokers have no racks).
pub type PartitionRacks = HashMap<(Uuid, i32), BTreeSet<String>>;

/// The assignors a member may name in `ServerAssignor`; the first is the default.
pub const ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// What an assignor knows of one member.
#[derive(Debug, Clone)]
pub struct AssignMember<'a> {
    pub member_id: &'a str,
    /// The member's `client.rack`.
    pub rack: Option<&'a str>,
    /// Topic ids the member subscribes to (resolved from names and regex).
    pub topics: BTreeSet<Uuid>,
}

/// Assigns every partition of `topics` (id -> partition count) that some member
/// subscribes to, to exactly one member subscribing to its topic.
pub fn assign(
    assignor: &str,
    members: &[AssignMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
    previous: &BTreeMap<String, Assignment>,
    racks: &PartitionRacks,
) -> BTreeMap<String, Assignment> {
    match assignor {
        "range" => range(members, topics),
        _ => uniform(members, topics, previous, racks),
    }
}

fn range(
    members: &[AssignMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members
        .iter()
        .map(|m| (m.member_id.to_string(), Assignment::new()))
        .collect();
    for (&topic, &count) in topics {
        let mut subscribers: Vec<&str> = members
            .iter()
            .filter(|m| m.topics.contains(&topic))
            .map(|m| m.member_id)
            .collect();
        subscribers.sort_unstable();
        let n = subscribers.len() as i32;
        if n == 0 {
            continue;
        }
        let (each, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, member) in subscribers.iter().enumerate() {
            let take = each + i32::from((i as i32) < extra);
            if take > 0 {
                out.entry(member.to_string())
                    .or_default()
                    .insert(topic, (next..next + take).collect());
            }
            next += take;
        }
    }
    out
}

fn uniform(
    members: &[AssignMember<'_>],
    topics: &BTreeMap<Uuid, i32>,
    previous: &BTreeMap<String, Assignment>,
    racks: &PartitionRacks,
) -> BTreeMap<String, Assignment> {
    let mut sorted: Vec<&AssignMember<'_>> = members.iter().collect();
    sorted.sort_unstable_by_key(|m| m.member_id);
    let eligible = |member: &AssignMember<'_>, topic: &Uuid, partition: i32| {
        member.topics.contains(topic) && topics.get(topic).is_some_and(|&n| partition < n)
    };
    // Whether the member shares a rack with a replica of the partition.
    let local = |member: &AssignMember<'_>, topic: Uuid, partition: i32| {
        member
            .rack
            .zip(racks.get(&(topic, partition)))
            .is_some_and(|(rack, replicas)| replicas.contains(rack))
    };
    let all: Vec<(Uuid, i32)> = topics
        .iter()
        .filter(|(t, _)| sorted.iter().any(|m| m.topics.contains(t)))
        .flat_map(|(&t, &n)| (0..n).map(move |p| (t, p)))
        .collect();
    let subscribing = sorted
        .iter()
        .filter(|m| !m.topics.is_empty())
        .count()
        .max(1);
    let cap = all.len().div_ceil(subscribing);
    let mut owner: BTreeMap<(Uuid, i32), usize> = BTreeMap::new();
    let mut counts = vec![0usize; sorted.len()];
    // Sticky: each member keeps what it had, up to the balanced share, the partitions
    // in its rack first.
    for (index, member) in sorted.iter().enumerate() {
        let Some(had) = previous.get(member.member_id) else {
            continue;
        };
        let mut kept: Vec<(Uuid, i32)> = had
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
            .collect();
        kept.sort_by_key(|&(t, p)| !local(member, t, p));
        for (topic, partition) in kept {
            // A partition away from its replicas' racks moves to a member in one of them,
            // when there is one: rack alignment beats stickiness, as in KIP-881.
            let misplaced = !local(member, topic, partition)
                && sorted
                    .iter()
                    .any(|m| eligible(m, &topic, partition) && local(m, topic, partition));
            if counts[index] < cap
                && !misplaced
                && eligible(member, &topic, partition)
                && !owner.contains_key(&(topic, partition))
            {
                owner.insert((topic, partition), index);
                counts[index] += 1;
            }
        }
    }
    // The rest, each to the least loaded member that may take it.
    for &(topic, partition) in &all {
        if owner.contains_key(&(topic, partition)) {
            continue;
        }
        let least = (0..sorted.len())
            .filter(|&i| eligible(sorted[i], &topic, partition))
            .min_by_key(|&i| {
                let full = counts[i] >= cap;
                (full, !local(sorted[i], topic, partition), counts[i], i)
            });
        if let Some(index) = least {
            owner.insert((topic, partition), index);
            counts[index] += 1;
        }
    }
    // Balance what subscriptions that differ left uneven: move from the most to the
    // least loaded member that may take one of its partitions, while that narrows the gap.
    for _ in 0..all.len() {
        let mut moved = false;
        let mut by_load: Vec<usize> = (0..sorted.len()).collect();
        by_load.sort_by_key(|&i| (std::cmp::Reverse(counts[i]), i));
        'search: for &from in &by_load {
            for to in (0..sorted.len())
                .rev()
                .filter(|&t| counts[t] + 1 < counts[from])
            {
                // Rather a partition not local to `from`, or local to `to`.
                let movable = |&(&(t, p), &o): &(&(Uuid, i32), &usize)| {
                    o == from && eligible(sorted[to], &t, p)
                };
                let better = |&(&(t, p), _): &(&(Uuid, i32), &usize)| {
                    !local(sorted[from], t, p) || local(sorted[to], t, p)
                };
                let candidate = owner
                    .iter()
                    .rev()
                    .filter(movable)
                    .find(better)
                    .or_else(|| owner.iter().rev().find(movable))
                    .map(|(&key, _)| key);
                if let Some(key) = candidate {
                    owner.insert(key, to);
                    counts[from] -= 1;
                    counts[to] += 1;
                    moved = true;
                    break 'search;
                }
            }
        }
        if !moved {
            break;
        }
    }
    let mut out: BTreeMap<String, Assignment> = sorted
        .iter()
        .map(|m| (m.member_id.to_string(), Assignment::new()))
        .collect();
    for ((topic, partition), index) in owner {
        out.entry(sorted[index].member_id.to_string())
            .or_default()
            .entry(topic)
            .or_default()
            .insert(partition);
    }
    out
}

/// The number of partitions in `assignment`.
pub fn size(assignment: &Assignment) -> usize {
    assignment.values().map(BTreeSet::len).sum()
}
