use super::*;

fn limits() -> GroupLimits {
    GroupLimits {
        min_session_timeout_ms: 1000,
        max_session_timeout_ms: 60_000,
        initial_rebalance_delay_ms: 0,
        max_size: 100,
    }
}

fn request(member_id: &str, instance: Option<&str>) -> JoinRequest {
    JoinRequest {
        member_id: member_id.into(),
        group_instance_id: instance.map(String::from),
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 30_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"m"))],
        require_known_member_id: true,
        supports_skip_assignment: true,
    }
}

fn joined(reply: Reply<JoinResult>) -> JoinResult {
    match reply {
        Reply::Now(r) => r,
        Reply::Wait { member_id } => panic!("{member_id} is waiting"),
    }
}

/// Runs the MEMBER_ID_REQUIRED round trip and returns the member id.
fn first_join(group: &mut Group, now: u64) -> (String, Reply<JoinResult>, Vec<Delivery>) {
    let (reply, _) = group.join(request("", None), now);
    let id = joined(reply);
    assert_eq!(id.error, Some(GroupError::MemberIdRequired));
    let (reply, deliveries) = group.join(request(&id.member_id, None), now);
    (id.member_id, reply, deliveries)
}

#[test]
fn a_lone_member_joins_syncs_and_becomes_stable() {
    let mut group = Group::new("g", limits());
    let (a, reply, _) = first_join(&mut group, 0);
    let result = joined(reply);
    assert_eq!(
        (result.generation_id, result.leader.as_str()),
        (1, a.as_str())
    );
    assert_eq!(result.members.len(), 1, "the leader gets the member list");
    assert_eq!(group.state(), GroupState::CompletingRebalance);
    let (reply, _) = group.sync(
        &a,
        None,
        1,
        vec![(a.clone(), Bytes::from_static(b"all"))],
        1,
    );
    assert!(
        matches!(reply, Reply::Now(SyncResult { error: None, ref assignment, .. }) if assignment == &Bytes::from_static(b"all"))
    );
    assert_eq!(group.state(), GroupState::Stable);
    assert_eq!(group.heartbeat(&a, None, 1, 2), Ok(()));
    assert_eq!(
        group.heartbeat(&a, None, 0, 2),
        Err(GroupError::IllegalGeneration)
    );
    assert_eq!(
        group.heartbeat("nobody", None, 1, 2),
        Err(GroupError::UnknownMemberId)
    );
}

#[test]
fn a_second_member_triggers_a_rebalance_that_waits_for_the_first() {
    let mut group = Group::new("g", limits());
    let (a, _, _) = first_join(&mut group, 0);
    group.sync(&a, None, 1, vec![(a.clone(), Bytes::new())], 0);
    let (b, reply, _) = first_join(&mut group, 10);
    assert!(
        matches!(reply, Reply::Wait { .. }),
        "b waits for a to rejoin"
    );
    assert_eq!(
        group.heartbeat(&a, None, 1, 11),
        Err(GroupError::RebalanceInProgress)
    );
    let (reply, deliveries) = group.join(request(&a, None), 12);
    let leader_view = joined(reply);
    assert_eq!(leader_view.generation_id, 2);
    assert_eq!(leader_view.members.len(), 2);
    assert!(
        matches!(&deliveries[..], [Delivery::Join { member_id, result }] if *member_id == b && result.generation_id == 2)
    );
    // b syncs first and waits; the leader's sync releases it.
    let (reply, _) = group.sync(&b, None, 2, vec![], 13);
    assert!(matches!(reply, Reply::Wait { .. }));
    let (_, deliveries) = group.sync(
        &a,
        None,
        2,
        vec![(b.clone(), Bytes::from_static(b"p1"))],
        14,
    );
    assert!(
        matches!(&deliveries[..], [Delivery::Sync { result, .. }] if result.assignment == Bytes::from_static(b"p1"))
    );
}

#[test]
fn an_expired_member_is_removed_and_the_rest_rebalance() {
    let mut group = Group::new("g", limits());
    let (a, _, _) = first_join(&mut group, 0);
    group.sync(&a, None, 1, vec![], 0);
    let (b, _, _) = first_join(&mut group, 0);
    group.join(request(&a, None), 0);
    group.sync(&a, None, 2, vec![], 0);
    group.heartbeat(&a, None, 2, 9_000).ok();
    assert!(group.tick(10_500).is_empty() || group.state() != GroupState::Stable);
    assert!(
        group.members().all(|m| m.member_id != b),
        "b's session expired"
    );
    assert_eq!(
        group.heartbeat(&a, None, 2, 10_600),
        Err(GroupError::RebalanceInProgress)
    );
    let (reply, _) = group.join(request(&a, None), 10_700);
    assert_eq!(joined(reply).generation_id, 3);
}

#[test]
fn a_static_member_rejoins_without_disturbing_the_group_and_fences_its_old_id() {
    let mut group = Group::new("g", limits());
    let (reply, _) = group.join(request("", Some("i1")), 0);
    let a = joined(reply);
    assert_eq!(
        a.error, None,
        "static members need no MEMBER_ID_REQUIRED round trip"
    );
    group.sync(&a.member_id, Some("i1"), 1, vec![], 0);
    let (reply, _) = group.join(request("", Some("i2")), 1);
    let b = match reply {
        Reply::Wait { member_id } => member_id,
        Reply::Now(r) => r.member_id,
    };
    group.join(request(&a.member_id, Some("i1")), 2);
    group.sync(
        &a.member_id,
        Some("i1"),
        2,
        vec![(b.clone(), Bytes::from_static(b"x"))],
        3,
    );
    assert_eq!(group.state(), GroupState::Stable);
    // b restarts quickly with the same instance id.
    let (reply, _) = group.join(request("", Some("i2")), 4);
    let b2 = joined(reply);
    assert_eq!((b2.error, b2.generation_id), (None, 2), "no new generation");
    assert_eq!(group.state(), GroupState::Stable);
    assert_eq!(
        group.heartbeat(&b, Some("i2"), 2, 5),
        Err(GroupError::FencedInstanceId)
    );
    let (reply, _) = group.sync(&b2.member_id, Some("i2"), 2, vec![], 6);
    assert!(
        matches!(reply, Reply::Now(SyncResult { error: None, ref assignment, .. }) if assignment == &Bytes::from_static(b"x"))
    );
}

#[test]
fn leaving_empties_the_group_and_commits_then_follow_simple_rules() {
    let mut group = Group::new("g", limits());
    let (a, _, _) = first_join(&mut group, 0);
    group.sync(&a, None, 1, vec![], 0);
    assert_eq!(group.validate_commit(&a, None, 1), Ok(()));
    assert_eq!(
        group.validate_commit("", None, -1),
        Err(GroupError::UnknownMemberId)
    );
    assert_eq!(group.delete(), Err(GroupError::NonEmptyGroup));
    let (result, _) = group.leave(&a, None, 1);
    assert_eq!(result, Ok(()));
    assert_eq!(group.state(), GroupState::Empty);
    assert_eq!(
        group.validate_commit("", None, -1),
        Ok(()),
        "simple consumers commit to empty groups"
    );
    assert_eq!(group.delete(), Ok(()));
    assert_eq!(group.state(), GroupState::Dead);
}

#[test]
fn refuses_bad_timeouts_and_incompatible_protocols() {
    let mut group = Group::new("g", limits());
    let mut r = request("", None);
    r.session_timeout_ms = 10;
    assert_eq!(
        joined(group.join(r, 0).0).error,
        Some(GroupError::InvalidSessionTimeout)
    );
    let (a, _, _) = first_join(&mut group, 0);
    group.sync(&a, None, 1, vec![], 0);
    let mut other = request("", None);
    other.require_known_member_id = false;
    other.protocols = vec![("roundrobin".into(), Bytes::new())];
    assert_eq!(
        joined(group.join(other, 1).0).error,
        Some(GroupError::InconsistentGroupProtocol)
    );
}

#[test]
fn the_initial_delay_waits_for_more_members() {
    let mut l = limits();
    l.initial_rebalance_delay_ms = 3000;
    let mut group = Group::new("g", l);
    let (_, reply, _) = first_join(&mut group, 0);
    assert!(matches!(reply, Reply::Wait { .. }));
    let (_, reply, _) = first_join(&mut group, 1000);
    assert!(matches!(reply, Reply::Wait { .. }));
    assert!(group.tick(2000).is_empty());
    let deliveries = group.tick(4001);
    assert_eq!(deliveries.len(), 2, "both joined in one generation");
    assert_eq!(group.generation_id(), 1);
}

#[test]
fn a_restored_group_also_waits_the_initial_delay() {
    let mut l = limits();
    l.initial_rebalance_delay_ms = 3000;
    let mut group = Group::restored("g", l, 7, Some("consumer".into()));
    let (_, reply, _) = first_join(&mut group, 0);
    assert!(
        matches!(reply, Reply::Wait { .. }),
        "waits for more members"
    );
    assert_eq!(group.tick(3001).len(), 1);
    assert_eq!(group.generation_id(), 8);
}

#[test]
fn a_restored_group_keeps_its_members_and_generation() {
    let mut group = Group::new("g", limits());
    let (a, _, _) = first_join(&mut group, 0);
    group.sync(
        &a,
        None,
        1,
        vec![(a.clone(), Bytes::from_static(b"asg"))],
        0,
    );
    let record = group.record(0);
    let mut restored = Group::restore("g", limits(), &record, 50_000);
    assert_eq!(restored.state(), GroupState::Stable);
    assert_eq!(
        restored.heartbeat(&a, None, 1, 50_001),
        Ok(()),
        "no rejoin needed"
    );
    let (reply, _) = restored.sync(&a, None, 1, vec![], 50_002);
    assert!(
        matches!(reply, Reply::Now(SyncResult { ref assignment, .. }) if assignment == &Bytes::from_static(b"asg"))
    );
    assert!(
        restored.tick(50_000 + 10_001).is_empty() || restored.members().count() == 0,
        "sessions restart at restore"
    );
}

#[test]
fn a_static_leader_rejoining_keeps_the_generation_and_skips_assignment() {
    let mut group = Group::new("g", limits());
    let (reply, _) = group.join(request("", Some("i1")), 0);
    let leader = joined(reply);
    group.sync(&leader.member_id, Some("i1"), 1, vec![], 0);
    let (reply, _) = group.join(request("", Some("i1")), 5);
    let again = joined(reply);
    assert_eq!((again.error, again.generation_id), (None, 1));
    assert!(again.skip_assignment);
    assert_eq!(
        again.leader, again.member_id,
        "still the leader, under its new id"
    );
    assert_eq!(group.state(), GroupState::Stable);
}

/// Below JoinGroup v9 (no skip_assignment) Kafka answers a returning static leader
/// with the old member id as leader and no members: the client follows, syncs and
/// gets its old assignment back, and nobody rebalances.
#[test]
fn a_static_leader_rejoining_below_v9_is_told_the_old_leader_and_no_members() {
    let mut group = Group::new("g", limits());
    let (reply, _) = group.join(request("", Some("i1")), 0);
    let leader = joined(reply);
    group.sync(&leader.member_id, Some("i1"), 1, vec![], 0);
    let old_v8 = JoinRequest {
        supports_skip_assignment: false,
        ..request("", Some("i1"))
    };
    let (reply, deliveries) = group.join(old_v8, 5);
    let again = joined(reply);
    assert!(deliveries.is_empty());
    assert_eq!((again.error, again.generation_id), (None, 1));
    assert_ne!(again.member_id, leader.member_id, "a new member id");
    assert_eq!(again.leader, leader.member_id, "the leader as it was");
    assert!(again.members.is_empty() && !again.skip_assignment);
    assert_eq!(group.state(), GroupState::Stable, "no rebalance");
    assert_eq!(group.leader(), Some(again.member_id.as_str()));
}
