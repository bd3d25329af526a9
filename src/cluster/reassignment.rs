//! Operator-chosen replica placement (pins) as pure decisions: Kafka's validation of a
//! manual partition assignment (`ReplicationControlManager.validateManualPartitionAssignment`),
//! what an AlterPartitionReassignments entry does to a topic's pins, and how a
//! reassignment in progress is listed (ListPartitionReassignments).
//!
//! A pin replaces the ring's placement of one partition (`TopicSpec::replica_assignments`);
//! the controller then walks the partition there with the same steps as any ring move
//! (`election::next_state`: new replicas catch up and join the ISR before old ones go,
//! the first pinned replica leads once in sync). Cancelling removes the pin and the ring
//! places the partition again. Kafka reverts a cancelled reassignment to the replicas the
//! partition had before it; tern reverts to the ring's placement, which is what the
//! partition had unless the cluster changed meanwhile.

use std::collections::BTreeSet;

use super::store::{PartitionAssignment, TopicSpec};

/// Why a manual assignment is refused (INVALID_REPLICA_ASSIGNMENT), in Kafka's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentError {
    #[error("The manual partition assignment includes an empty replica list.")]
    Empty,
    #[error(
        "The manual partition assignment includes broker {0}, but no such broker is registered."
    )]
    UnknownBroker(i32),
    #[error("The manual partition assignment includes the broker {0} more than once.")]
    Duplicate(i32),
    #[error(
        "The manual partition assignment includes a partition with {got} replica(s), but this \
         is not consistent with previous partitions, which have {expected} replica(s)."
    )]
    InconsistentFactor { got: usize, expected: usize },
    #[error("All brokers specified in the manual partition assignment for partition {0} are fenced or in controlled shutdown.")]
    NoActiveBroker(i32),
}

/// Kafka's checks of one manual assignment: not empty, only registered brokers, none
/// twice, and (when given) `replication_factor` replicas. `registered`: the brokers the
/// cluster knows (tern knows only live ones), `active`: those not shutting down.
pub fn validate(
    partition: i32,
    replicas: &[i32],
    registered: &BTreeSet<i32>,
    active: &BTreeSet<i32>,
    replication_factor: Option<usize>,
) -> Result<(), AssignmentError> {
    if replicas.is_empty() {
        return Err(AssignmentError::Empty);
    }
    let mut sorted = replicas.to_vec();
    sorted.sort_unstable();
    // In Kafka's order: by broker id, an unknown one first, then a repeat.
    let mut previous = None;
    for &broker in &sorted {
        if !registered.contains(&broker) {
            return Err(AssignmentError::UnknownBroker(broker));
        }
        if previous == Some(broker) {
            return Err(AssignmentError::Duplicate(broker));
        }
        previous = Some(broker);
    }
    if let Some(expected) = replication_factor {
        if replicas.len() != expected {
            return Err(AssignmentError::InconsistentFactor {
                got: replicas.len(),
                expected,
            });
        }
    }
    if !replicas.iter().any(|b| active.contains(b)) {
        return Err(AssignmentError::NoActiveBroker(partition));
    }
    Ok(())
}

/// Applies pins (`Some`) and unpins (`None`) to a topic, ignoring partitions it lacks.
pub fn apply_pins(
    spec: &mut TopicSpec,
    changes: &std::collections::BTreeMap<i32, Option<Vec<i32>>>,
) {
    for (&index, replicas) in changes {
        match replicas {
            Some(replicas) if (0..spec.partitions).contains(&index) => {
                spec.replica_assignments.insert(index, replicas.clone());
            }
            Some(_) => {}
            None => {
                spec.replica_assignments.remove(&index);
            }
        }
    }
}

/// What one AlterPartitionReassignments entry does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Alteration {
    /// Pin the partition to these replicas.
    Pin(Vec<i32>),
    /// Remove the pin: the ring places the partition again.
    Unpin,
    /// Nothing to write: a cancel of a move the ring itself is making (its target is
    /// the ring's placement already, which is what a cancel reverts to).
    Nothing,
}

/// Why an alteration is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterError {
    UnknownPartition,
    NoReassignmentInProgress,
    Invalid(AssignmentError),
}

/// Decides one AlterPartitionReassignments entry for partition `index` of `spec`, whose
/// stored state is `current`: `Some(replicas)` pins (validated), `None` cancels — only
/// when something is pinned or moving (NO_REASSIGNMENT_IN_PROGRESS otherwise).
pub fn alteration(
    spec: &TopicSpec,
    current: Option<&PartitionAssignment>,
    index: i32,
    replicas: Option<&[i32]>,
    registered: &BTreeSet<i32>,
    active: &BTreeSet<i32>,
) -> Result<Alteration, AlterError> {
    if index < 0 || index >= spec.partitions {
        return Err(AlterError::UnknownPartition);
    }
    match replicas {
        Some(replicas) => {
            validate(index, replicas, registered, active, None).map_err(AlterError::Invalid)?;
            Ok(Alteration::Pin(replicas.to_vec()))
        }
        None if spec.pinned(index).is_some() => Ok(Alteration::Unpin),
        None if current.is_some_and(|p| !p.target.is_empty()) => Ok(Alteration::Nothing),
        None => Err(AlterError::NoReassignmentInProgress),
    }
}

/// A reassignment in progress as ListPartitionReassignments shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ongoing {
    /// Every replica taking part: the current ones and the target's.
    pub replicas: Vec<i32>,
    /// Target replicas still catching up (not in the ISR, or not yet replicas).
    pub adding: Vec<i32>,
    /// Current replicas the target drops.
    pub removing: Vec<i32>,
}

/// The reassignment in progress in `current`, if any (a non-empty `target`, whether the
/// ring or an operator set it). Kafka keeps the original replicas and lists as adding
/// every target replica not among them until the move completes; tern's state keeps
/// `replicas` = original ∪ target during the move, so a target replica counts as adding
/// while it is not yet an in-sync replica (once all are, the controller completes the
/// move and nothing is listed).
pub fn ongoing(current: &PartitionAssignment) -> Option<Ongoing> {
    if current.target.is_empty() {
        return None;
    }
    let mut replicas = current.replicas.clone();
    for &b in &current.target {
        if !replicas.contains(&b) {
            replicas.push(b);
        }
    }
    let isr = current.in_sync();
    let adding = current
        .target
        .iter()
        .copied()
        .filter(|b| !current.replicas.contains(b) || !isr.contains(b))
        .collect();
    let removing = current
        .replicas
        .iter()
        .copied()
        .filter(|b| !current.target.contains(b))
        .collect();
    Some(Ongoing {
        replicas,
        adding,
        removing,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use uuid::Uuid;

    use super::*;

    fn set(ids: &[i32]) -> BTreeSet<i32> {
        ids.iter().copied().collect()
    }

    fn spec(pins: &[(i32, &[i32])]) -> TopicSpec {
        TopicSpec {
            name: "t".into(),
            topic_id: Uuid::new_v4(),
            numeric_id: 1,
            partitions: 3,
            replication_factor: 2,
            configs: BTreeMap::new(),
            replica_assignments: pins.iter().map(|(i, r)| (*i, r.to_vec())).collect(),
        }
    }

    fn state(leader: i32, replicas: &[i32], isr: &[i32], target: &[i32]) -> PartitionAssignment {
        PartitionAssignment {
            leader,
            replicas: replicas.to_vec(),
            leader_epoch: 0,
            isr: isr.to_vec(),
            partition_epoch: 0,
            target: target.to_vec(),
            leader_incarnation: 0,
            pinned: false,
            unclean_requested: false,
            isr_incarnations: Default::default(),
        }
    }

    #[test]
    fn manual_assignments_are_checked_as_kafka_checks_them() {
        let brokers = set(&[1, 2, 3]);
        assert_eq!(validate(0, &[2, 1], &brokers, &brokers, Some(2)), Ok(()));
        assert_eq!(
            validate(0, &[], &brokers, &brokers, None),
            Err(AssignmentError::Empty)
        );
        assert_eq!(
            validate(0, &[1, 2, 1], &brokers, &brokers, None),
            Err(AssignmentError::Duplicate(1))
        );
        assert_eq!(
            validate(0, &[1, 7], &brokers, &brokers, None),
            Err(AssignmentError::UnknownBroker(7))
        );
        assert_eq!(
            validate(0, &[1, -1], &brokers, &brokers, None),
            Err(AssignmentError::UnknownBroker(-1))
        );
        assert_eq!(
            validate(0, &[1, 2, 3], &brokers, &brokers, Some(2)),
            Err(AssignmentError::InconsistentFactor {
                got: 3,
                expected: 2
            })
        );
        assert_eq!(
            validate(4, &[3], &brokers, &set(&[1, 2]), None),
            Err(AssignmentError::NoActiveBroker(4))
        );
    }

    #[test]
    fn an_alteration_pins_cancels_or_finds_nothing_to_cancel() {
        let brokers = set(&[1, 2, 3]);
        let pinned = spec(&[(1, &[3, 2])]);
        let settled = state(1, &[1, 2], &[1, 2], &[]);
        assert_eq!(
            alteration(
                &pinned,
                Some(&settled),
                0,
                Some(&[3, 1]),
                &brokers,
                &brokers
            ),
            Ok(Alteration::Pin(vec![3, 1]))
        );
        assert_eq!(
            alteration(&pinned, Some(&settled), 1, None, &brokers, &brokers),
            Ok(Alteration::Unpin)
        );
        assert_eq!(
            alteration(&pinned, Some(&settled), 0, None, &brokers, &brokers),
            Err(AlterError::NoReassignmentInProgress)
        );
        let ring_moving = state(1, &[1, 2, 3], &[1, 2], &[1, 3]);
        assert_eq!(
            alteration(&pinned, Some(&ring_moving), 0, None, &brokers, &brokers),
            Ok(Alteration::Nothing)
        );
        assert_eq!(
            alteration(&pinned, Some(&settled), 3, Some(&[1]), &brokers, &brokers),
            Err(AlterError::UnknownPartition)
        );
        assert_eq!(
            alteration(&pinned, Some(&settled), -1, None, &brokers, &brokers),
            Err(AlterError::UnknownPartition)
        );
        assert_eq!(
            alteration(
                &pinned,
                Some(&settled),
                0,
                Some(&[1, 1]),
                &brokers,
                &brokers
            ),
            Err(AlterError::Invalid(AssignmentError::Duplicate(1)))
        );
    }

    #[test]
    fn a_move_in_progress_lists_the_whole_set_what_is_added_and_what_goes() {
        assert_eq!(ongoing(&state(1, &[1, 2], &[1, 2], &[])), None);
        // The controller's first step: the new replica appended, not yet in sync.
        let moving = state(1, &[1, 2, 3], &[1, 2], &[3, 2]);
        assert_eq!(
            ongoing(&moving),
            Some(Ongoing {
                replicas: vec![1, 2, 3],
                adding: vec![3],
                removing: vec![1],
            })
        );
        // Before the first step: the target is not among the replicas yet.
        let asked = state(1, &[1, 2], &[1, 2], &[3, 2]);
        assert_eq!(
            ongoing(&asked),
            Some(Ongoing {
                replicas: vec![1, 2, 3],
                adding: vec![3],
                removing: vec![1],
            })
        );
    }
}
