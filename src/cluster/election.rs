//! TEMPORARY stand-in with the agreed signatures; replaced by the repl-state branch.
#![allow(dead_code)]
use std::collections::BTreeSet;

use super::PartitionAssignment;

#[derive(Debug)]
pub struct Membership<'a> {
    pub live: &'a BTreeSet<i32>,
    pub shutting_down: &'a BTreeSet<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub next: PartitionAssignment,
    pub unclean: bool,
    pub leader_moved: bool,
}

pub fn next_state(
    current: Option<&PartitionAssignment>,
    target: &[i32],
    members: &Membership<'_>,
    _unclean_allowed: bool,
) -> Option<Change> {
    let Some(current) = current else {
        let leader = target.first().copied().unwrap_or(-1);
        return Some(Change {
            next: PartitionAssignment {
                leader,
                replicas: target.to_vec(),
                leader_epoch: 0,
                isr: target
                    .iter()
                    .copied()
                    .filter(|b| members.live.contains(b))
                    .collect(),
                partition_epoch: 0,
                target: Vec::new(),
            },
            unclean: false,
            leader_moved: true,
        });
    };
    let isr = current.in_sync();
    let eligible = |b: &i32| members.live.contains(b) && !members.shutting_down.contains(b);
    if current.leader >= 0 && eligible(&current.leader) {
        return None;
    }
    let leader = isr.iter().copied().find(eligible).unwrap_or(-1);
    if leader == current.leader {
        return None;
    }
    let mut next = current.clone();
    next.leader = leader;
    next.leader_epoch += 1;
    next.partition_epoch += 1;
    if leader >= 0 {
        next.isr = isr
            .into_iter()
            .filter(|b| members.live.contains(b))
            .collect();
    }
    Some(Change {
        next,
        unclean: false,
        leader_moved: true,
    })
}
