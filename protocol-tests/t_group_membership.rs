//! Classic consumer-group membership: JoinGroup v0-9, SyncGroup v0-5, Heartbeat v0-4,
//! LeaveGroup v0-5, rebalances between two members, rebalance and session timeouts, and
//! static membership (KIP-345).

use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::client::CLIENT_ID;
use crate::groups::*;
use crate::ops::*;

#[test]
fn join_group_every_version() {
    let ctx = group_ctx(&[]);
    let mut fails: Vec<String> = Vec::new();
    let mut first = true;
    for v in ctx.versions_req(ApiKey::JoinGroup, 0, 9) {
        let group = unique_group(&format!("join-v{v}"));
        let mut c = ctx.client();
        c.set_read_timeout(PARKED_READ_TIMEOUT);
        if first {
            wait_coordinator(&ctx, &mut c, &group);
            first = false;
        }
        let spec = JoinSpec::consumer(&group, &["topic-a", "topic-b"]);
        let r1 = join_raw(&mut c, v, &spec);
        let (spec, r) = if v >= 4 {
            // KIP-394: a dynamic member without an id gets one and must rejoin with it.
            check_code!(
                fails,
                r1.error_code,
                MEMBER_ID_REQUIRED,
                "JoinGroup v{v} with an empty member id"
            );
            if r1.error_code != MEMBER_ID_REQUIRED || r1.member_id.is_empty() {
                fails.push(format!(
                    "JoinGroup v{v}: no member id to rejoin with (error {}, member id {:?})",
                    ename(r1.error_code),
                    r1.member_id
                ));
                continue;
            }
            if !r1.members.is_empty() || !r1.leader.is_empty() {
                fails.push(format!(
                    "JoinGroup v{v} MEMBER_ID_REQUIRED answer carries members {:?} / leader {:?}",
                    r1.members, r1.leader
                ));
            }
            let spec = spec.clone().member(r1.member_id.as_str());
            let r = join_raw(&mut c, v, &spec);
            (spec, r)
        } else {
            (spec, r1)
        };
        check_code!(fails, r.error_code, NONE, "JoinGroup v{v} to a new group");
        if r.error_code != NONE {
            continue;
        }
        let me = r.member_id.to_string();
        if me.is_empty() {
            fails.push(format!("JoinGroup v{v}: empty member id"));
            continue;
        }
        if v >= 4 && me != spec.member_id {
            fails.push(format!(
                "JoinGroup v{v}: member id {me:?} differs from the one handed out ({:?})",
                spec.member_id
            ));
        }
        if r.generation_id != 1 {
            fails.push(format!(
                "JoinGroup v{v}: generation {} (expected 1)",
                r.generation_id
            ));
        }
        if r.leader.as_str() != me {
            fails.push(format!(
                "JoinGroup v{v}: leader {:?}, expected the only member {me:?}",
                r.leader
            ));
        }
        if opt_s(&r.protocol_name).as_deref() != Some("range") {
            fails.push(format!(
                "JoinGroup v{v}: protocol {:?}, expected the member's first choice \"range\"",
                r.protocol_name
            ));
        }
        if v >= 7 && opt_s(&r.protocol_type).as_deref() != Some(CONSUMER) {
            fails.push(format!(
                "JoinGroup v{v}: protocol type {:?}",
                r.protocol_type
            ));
        }
        if v >= 9 && r.skip_assignment {
            fails.push(format!(
                "JoinGroup v{v}: skip_assignment set for a new leader"
            ));
        }
        match r.members.as_slice() {
            [m] => {
                if m.member_id.as_str() != me {
                    fails.push(format!(
                        "JoinGroup v{v}: leader's member list names {:?}",
                        m.member_id
                    ));
                }
                if m.metadata != spec.protocols[0].1 {
                    fails.push(format!(
                        "JoinGroup v{v}: member metadata {:?} differs from the \"range\" metadata sent {:?}",
                        m.metadata, spec.protocols[0].1
                    ));
                }
                if v >= 5 && m.group_instance_id.is_some() {
                    fails.push(format!(
                        "JoinGroup v{v}: dynamic member with instance id {:?}",
                        m.group_instance_id
                    ));
                }
            }
            other => fails.push(format!(
                "JoinGroup v{v}: leader's member list {other:?}, expected itself only"
            )),
        }
        // Finish the generation: sync, heartbeat, leave.
        let mut m = member_from(c, spec, r);
        let asg = assignment(&[("topic-a", &[0, 1]), ("topic-b", &[0])]);
        let s = sync_member(&ctx, &mut m, &[(&me, asg.clone())]);
        check_code!(fails, s.error_code, NONE, "SyncGroup after JoinGroup v{v}");
        if s.error_code == NONE && s.assignment != asg {
            fails.push(format!(
                "SyncGroup after JoinGroup v{v}: assignment differs"
            ));
        }
        check_code!(
            fails,
            heartbeat(&ctx, &mut m),
            NONE,
            "Heartbeat after JoinGroup v{v}"
        );
        let lv = ctx.max_version(ApiKey::LeaveGroup);
        let l = leave(&mut m.c, lv, &group, &[(&me, None)]);
        check_code!(fails, l.error_code, NONE, "LeaveGroup after JoinGroup v{v}");
    }
    assert_no_failures(&fails);
}

#[test]
fn join_group_session_timeout_bounds() {
    // tern's bounds are configurable; Kafka's defaults are [6000, 1800000].
    let tern_args = [
        "--group-min-session-timeout-ms",
        "2000",
        "--group-max-session-timeout-ms",
        "20000",
    ];
    let probe = group_ctx(&tern_args);
    let (min, max) = if probe.external() {
        (6000, 1_800_000)
    } else {
        (2000, 20_000)
    };
    let ctx = probe;
    let mut c = ctx.client();
    c.set_read_timeout(PARKED_READ_TIMEOUT);
    wait_coordinator(&ctx, &mut c, &unique_group("st-probe"));
    let mut fails: Vec<String> = Vec::new();
    for v in ctx.versions_req(ApiKey::JoinGroup, 0, 9) {
        for st in [min - 1, max + 1, 1, 0] {
            let group = unique_group(&format!("st-bad-v{v}"));
            let r = join_raw(&mut c, v, &JoinSpec::consumer(&group, &["t"]).session(st));
            check_code!(
                fails,
                r.error_code,
                INVALID_SESSION_TIMEOUT,
                "JoinGroup v{v} with session timeout {st} ms (bounds [{min}, {max}])"
            );
        }
        for st in [min, max] {
            let group = unique_group(&format!("st-ok-v{v}"));
            let (r, _) = join_dance(&mut c, v, &JoinSpec::consumer(&group, &["t"]).session(st));
            check_code!(
                fails,
                r.error_code,
                NONE,
                "JoinGroup v{v} with session timeout {st} ms (bounds [{min}, {max}])"
            );
        }
    }
    assert_no_failures(&fails);
}

#[test]
fn join_group_inconsistent_protocols() {
    let ctx = group_ctx(&[]);
    let group = unique_group("proto");
    let mut a = stable_member(
        &ctx,
        &JoinSpec::consumer(&group, &["t"]),
        assignment(&[("t", &[0])]),
    );
    let mut fails: Vec<String> = Vec::new();
    let sub = subscription(&["t"]);
    for v in ctx.versions_req(ApiKey::JoinGroup, 0, 9) {
        let mut c = ctx.client();
        // Another protocol type than the group's.
        let r = join_raw(
            &mut c,
            v,
            &JoinSpec::consumer(&group, &["t"]).protocol_type("connect"),
        );
        check_code!(
            fails,
            r.error_code,
            INCONSISTENT_GROUP_PROTOCOL,
            "JoinGroup v{v}: protocol type \"connect\" into a \"consumer\" group"
        );
        // No protocol in common with the existing member (range, roundrobin).
        let r = join_raw(
            &mut c,
            v,
            &JoinSpec::consumer(&group, &["t"]).protocols(&[("sticky", sub.clone())]),
        );
        check_code!(
            fails,
            r.error_code,
            INCONSISTENT_GROUP_PROTOCOL,
            "JoinGroup v{v}: only protocol \"sticky\", the group's member has range/roundrobin"
        );
        // A new group needs a protocol type and at least one protocol.
        let fresh = unique_group(&format!("proto-empty-v{v}"));
        let r = join_raw(
            &mut c,
            v,
            &JoinSpec::consumer(&fresh, &["t"]).protocol_type(""),
        );
        check_code!(
            fails,
            r.error_code,
            INCONSISTENT_GROUP_PROTOCOL,
            "JoinGroup v{v}: empty protocol type into a new group"
        );
        let r = join_raw(
            &mut c,
            v,
            &JoinSpec::consumer(&fresh, &["t"]).protocols(&[]),
        );
        check_code!(
            fails,
            r.error_code,
            INCONSISTENT_GROUP_PROTOCOL,
            "JoinGroup v{v}: no protocols into a new group"
        );
    }
    // The rejected joins did not disturb the group.
    check_code!(
        fails,
        heartbeat(&ctx, &mut a),
        NONE,
        "heartbeat of the member after rejected joins"
    );
    let mut c = ctx.client();
    let d = describe_group(&ctx, &mut c, &group);
    if d.group_state.as_str() != "Stable" || d.members.len() != 1 {
        fails.push(format!(
            "after rejected joins the group is {:?} with {} members (expected Stable with 1)",
            d.group_state,
            d.members.len()
        ));
    }
    assert_no_failures(&fails);
}

#[test]
fn sync_group_every_version() {
    let ctx = group_ctx(&[]);
    let mut fails: Vec<String> = Vec::new();
    for v in ctx.versions_req(ApiKey::SyncGroup, 0, 5) {
        let group = unique_group(&format!("sync-v{v}"));
        let mut m = join_ok(&ctx, &JoinSpec::consumer(&group, &["t"]));
        let me = m.member_id.clone();
        let gen = m.generation;
        let asg = assignment(&[("t", &[0, 1, 2])]);
        // Errors first (the group is CompletingRebalance): unknown member, wrong generation.
        let r = m.c.call(
            v,
            &sync_req(
                v,
                &group,
                gen,
                "no-such-member",
                None,
                Some((CONSUMER, "range")),
                &[],
            ),
        );
        check_code!(
            fails,
            r.error_code,
            UNKNOWN_MEMBER_ID,
            "SyncGroup v{v} from an unknown member"
        );
        let r = m.c.call(
            v,
            &sync_req(
                v,
                &group,
                gen + 1,
                &me,
                None,
                Some((CONSUMER, "range")),
                &[],
            ),
        );
        check_code!(
            fails,
            r.error_code,
            ILLEGAL_GENERATION,
            "SyncGroup v{v} with generation {}",
            gen + 1
        );
        let r = m.c.call(
            v,
            &sync_req(
                v,
                &unique_group("sync-nogroup"),
                1,
                &me,
                None,
                Some((CONSUMER, "range")),
                &[],
            ),
        );
        check_code!(
            fails,
            r.error_code,
            UNKNOWN_MEMBER_ID,
            "SyncGroup v{v} to an unknown group"
        );
        // The leader's SyncGroup.
        let r = sync_member_v(&mut m, v, &[(&me, asg.clone())]);
        check_code!(fails, r.error_code, NONE, "SyncGroup v{v} from the leader");
        if r.error_code == NONE {
            if r.assignment != asg {
                fails.push(format!(
                    "SyncGroup v{v}: assignment {:?}, expected {:?}",
                    r.assignment, asg
                ));
            }
            if v >= 5
                && (opt_s(&r.protocol_type).as_deref() != Some(CONSUMER)
                    || opt_s(&r.protocol_name).as_deref() != Some("range"))
            {
                fails.push(format!(
                    "SyncGroup v{v}: protocol type/name {:?}/{:?}, expected consumer/range",
                    r.protocol_type, r.protocol_name
                ));
            }
        }
        // Stable now: a repeated SyncGroup returns the same assignment.
        let r = sync_member_v(&mut m, v, &[]);
        check_code!(
            fails,
            r.error_code,
            NONE,
            "repeated SyncGroup v{v} in a Stable group"
        );
        if r.error_code == NONE && r.assignment != asg {
            fails.push(format!(
                "repeated SyncGroup v{v}: assignment changed to {:?}",
                r.assignment
            ));
        }
        let r = m.c.call(
            v,
            &sync_req(
                v,
                &group,
                gen - 1,
                &me,
                None,
                Some((CONSUMER, "range")),
                &[],
            ),
        );
        check_code!(
            fails,
            r.error_code,
            ILLEGAL_GENERATION,
            "SyncGroup v{v} with a stale generation"
        );
        if v >= 5 {
            // v5 names the protocol type and name; Kafka refuses ones that are not the group's.
            for (ptype, pname) in [(CONSUMER, "roundrobin"), ("connect", "range")] {
                let r = m.c.call(
                    v,
                    &sync_req(v, &group, gen, &me, None, Some((ptype, pname)), &[]),
                );
                check_code!(
                    fails,
                    r.error_code,
                    INCONSISTENT_GROUP_PROTOCOL,
                    "SyncGroup v{v} naming {ptype}/{pname} (the group's is consumer/range)"
                );
            }
        }
        check_code!(
            fails,
            heartbeat(&ctx, &mut m),
            NONE,
            "Heartbeat after SyncGroup v{v}"
        );
    }
    assert_no_failures(&fails);
}

#[test]
fn heartbeat_every_version() {
    let ctx = group_ctx(&[]);
    let group = unique_group("hb");
    let mut m = stable_member(
        &ctx,
        &JoinSpec::consumer(&group, &["t"]),
        assignment(&[("t", &[0])]),
    );
    let me = m.member_id.clone();
    let gen = m.generation;
    let mut fails: Vec<String> = Vec::new();
    let other = unique_group("hb-unknown");
    for v in ctx.versions_req(ApiKey::Heartbeat, 0, 4) {
        let e = heartbeat_v(&mut m.c, v, &group, gen, &me, None);
        check_code!(
            fails,
            e,
            NONE,
            "Heartbeat v{v} of a member of a Stable group"
        );
        let e = heartbeat_v(&mut m.c, v, &group, gen + 1, &me, None);
        check_code!(
            fails,
            e,
            ILLEGAL_GENERATION,
            "Heartbeat v{v} with generation {}",
            gen + 1
        );
        let e = heartbeat_v(&mut m.c, v, &group, gen - 1, &me, None);
        check_code!(
            fails,
            e,
            ILLEGAL_GENERATION,
            "Heartbeat v{v} with generation {}",
            gen - 1
        );
        let e = heartbeat_v(&mut m.c, v, &group, gen, "no-such-member", None);
        check_code!(
            fails,
            e,
            UNKNOWN_MEMBER_ID,
            "Heartbeat v{v} from an unknown member"
        );
        let e = heartbeat_v(&mut m.c, v, &other, 1, &me, None);
        check_code!(
            fails,
            e,
            UNKNOWN_MEMBER_ID,
            "Heartbeat v{v} to an unknown group"
        );
        if v >= 3 {
            // A dynamic member must not claim an instance id the group does not know.
            let e = heartbeat_v(&mut m.c, v, &group, gen, &me, Some("no-such-instance"));
            check_code!(
                fails,
                e,
                UNKNOWN_MEMBER_ID,
                "Heartbeat v{v} with an unknown group instance id"
            );
        }
    }
    assert_no_failures(&fails);
}

/// A second member's JoinGroup is parked until the first member rejoins; the first learns
/// of the rebalance from its heartbeat; both get generation 2; the follower's SyncGroup
/// is parked until the leader's.
#[test]
fn second_member_triggers_a_rebalance() {
    let ctx = group_ctx(&[]);
    let group = unique_group("rebal");
    let spec_a = JoinSpec::consumer(&group, &["t1"]);
    let spec_b = JoinSpec::consumer(&group, &["t1", "t2"]);
    let mut a = stable_member(&ctx, &spec_a, assignment(&[("t1", &[0, 1])]));
    assert_eq!(a.generation, 1, "first generation of a new group");
    let mut c = ctx.client();
    let mut pb = spawn_join(&ctx, "B's JoinGroup", &spec_b);
    assert!(
        pb.still_pending(Duration::from_millis(1500)),
        "B's JoinGroup was answered before A rejoined: {:?}",
        pb.wait(Duration::from_secs(1)).2
    );
    let e = heartbeat_until(&ctx, &mut a, REBALANCE_IN_PROGRESS, Duration::from_secs(20));
    assert_code!(e, REBALANCE_IN_PROGRESS, "A's heartbeat while B is joining");
    let st = group_state(&ctx, &mut c, &group);
    assert_eq!(
        st, "PreparingRebalance",
        "DescribeGroups while B waits for A"
    );
    // Still parked: nothing completes the join phase before A rejoins.
    assert!(
        pb.still_pending(Duration::from_millis(500)),
        "B's JoinGroup was answered before A rejoined"
    );
    let ra = rejoin(&ctx, &mut a);
    assert_code!(ra.error_code, NONE, "A's rejoin");
    let (cb, specb, rb) = pb.wait(Duration::from_secs(30));
    assert_code!(rb.error_code, NONE, "B's JoinGroup");
    assert_eq!(ra.generation_id, 2, "A's generation after the rebalance");
    assert_eq!(rb.generation_id, 2, "B's generation after the rebalance");
    assert_eq!(
        ra.leader, rb.leader,
        "both members must be told the same leader"
    );
    assert_eq!(
        ra.leader.as_str(),
        a.member_id,
        "A (already the leader, and rejoined) stays leader"
    );
    assert!(
        rb.members.is_empty(),
        "a follower gets no member list: {:?}",
        rb.members
    );
    let mut listed: Vec<(String, Bytes)> = ra
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), m.metadata.clone()))
        .collect();
    listed.sort();
    let mut expect = vec![
        (a.member_id.clone(), spec_a.protocols[0].1.clone()),
        (rb.member_id.to_string(), spec_b.protocols[0].1.clone()),
    ];
    expect.sort();
    assert_eq!(
        listed, expect,
        "leader's member list: (member id, \"range\" metadata)"
    );
    let b = member_from(cb, specb, rb);
    let b_id = b.member_id.clone();
    assert_eq!(
        group_state(&ctx, &mut c, &group),
        "CompletingRebalance",
        "after the join phase"
    );

    let asg_a = assignment(&[("t1", &[0])]);
    let asg_b = assignment(&[("t1", &[1]), ("t2", &[0])]);
    let mut pbs = spawn_sync(&ctx, "B's SyncGroup", b);
    assert!(
        pbs.still_pending(Duration::from_millis(1000)),
        "B's SyncGroup was answered before the leader's: {:?}",
        pbs.wait(Duration::from_secs(1)).1
    );
    let a_id = a.member_id.clone();
    let r = sync_member(
        &ctx,
        &mut a,
        &[(&a_id, asg_a.clone()), (&b_id, asg_b.clone())],
    );
    assert_code!(r.error_code, NONE, "A's SyncGroup");
    assert_eq!(r.assignment, asg_a, "A's assignment");
    let (mut b, rbs) = pbs.wait(Duration::from_secs(30));
    assert_code!(rbs.error_code, NONE, "B's SyncGroup");
    assert_eq!(
        rbs.assignment, asg_b,
        "B's assignment (delivered by the leader)"
    );
    assert_code!(
        heartbeat(&ctx, &mut a),
        NONE,
        "A's heartbeat in generation 2"
    );
    assert_code!(
        heartbeat(&ctx, &mut b),
        NONE,
        "B's heartbeat in generation 2"
    );
    let d = describe_group(&ctx, &mut c, &group);
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(
        d.members.len(),
        2,
        "members after the rebalance: {:?}",
        d.members
    );

    // SyncGroup during a rebalance: A (leader) rejoins, B syncs → REBALANCE_IN_PROGRESS.
    let mut pa = spawn_rejoin(&ctx, "A's second rejoin", a);
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        let code = sync_member(&ctx, &mut b, &[]).error_code;
        if code != NONE || Instant::now() > deadline {
            break code;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_code!(
        code,
        REBALANCE_IN_PROGRESS,
        "B's SyncGroup while A's rejoin started a rebalance"
    );
    assert!(
        pa.still_pending(Duration::from_millis(200)),
        "A's rejoin completed without B"
    );
    let rb3 = rejoin(&ctx, &mut b);
    assert_code!(rb3.error_code, NONE, "B's rejoin");
    let (_a, ra3) = pa.wait(Duration::from_secs(30));
    assert_code!(ra3.error_code, NONE, "A's rejoin");
    assert_eq!(
        ra3.generation_id, 3,
        "generation after the second rebalance"
    );
    assert_eq!(
        rb3.generation_id, 3,
        "generation after the second rebalance"
    );
}

/// A member that does not rejoin within the rebalance timeout is dropped and the join
/// phase completes without it.
#[test]
fn rebalance_timeout_completes_without_the_silent_member() {
    let ctx = group_ctx(&[]);
    let group = unique_group("rebal-to");
    let rebalance_ms = 3000;
    let mut a = stable_member(
        &ctx,
        &JoinSpec::consumer(&group, &["t"]).rebalance(rebalance_ms),
        assignment(&[("t", &[0])]),
    );
    let started = Instant::now();
    let mut pb = spawn_join(
        &ctx,
        "B's JoinGroup",
        &JoinSpec::consumer(&group, &["t"]).rebalance(rebalance_ms),
    );
    assert!(
        pb.still_pending(Duration::from_millis(1500)),
        "B's JoinGroup was answered although A has not rejoined"
    );
    let (cb, specb, rb) = pb.wait(Duration::from_secs(30));
    let waited = started.elapsed();
    assert_code!(
        rb.error_code,
        NONE,
        "B's JoinGroup after A's rebalance timeout"
    );
    assert!(
        waited >= Duration::from_millis(rebalance_ms as u64 - 500),
        "B's JoinGroup completed after {waited:?}, before the {rebalance_ms} ms rebalance timeout"
    );
    assert_eq!(rb.generation_id, 2, "generation after the rebalance");
    assert_eq!(rb.leader, rb.member_id, "B leads once A is gone");
    let ids: Vec<String> = rb.members.iter().map(|m| m.member_id.to_string()).collect();
    assert_eq!(
        ids,
        vec![rb.member_id.to_string()],
        "members after A was dropped"
    );
    let mut b = member_from(cb, specb, rb);
    let b_id = b.member_id.clone();
    let r = sync_member(&ctx, &mut b, &[(&b_id, assignment(&[("t", &[0])]))]);
    assert_code!(r.error_code, NONE, "B's SyncGroup");
    assert_code!(
        heartbeat(&ctx, &mut a),
        UNKNOWN_MEMBER_ID,
        "heartbeat of the dropped member A"
    );
}

/// A member that stops heartbeating is removed after its session timeout; the other
/// member then gets REBALANCE_IN_PROGRESS and rejoins alone.
#[test]
fn session_expiry_removes_a_silent_member() {
    let ctx = group_ctx(&["--group-min-session-timeout-ms", "500"]);
    let short: i32 = if ctx.external() { 6000 } else { 2000 };
    let group = unique_group("expiry");
    let spec_a = JoinSpec::consumer(&group, &["t"]).session(short);
    let spec_b = JoinSpec::consumer(&group, &["t"]);
    let (mut a, mut b) = two_member_group(
        &ctx,
        &spec_a,
        &spec_b,
        assignment(&[("t", &[0])]),
        assignment(&[("t", &[1])]),
    );
    let a_last = Instant::now();
    let deadline = a_last + Duration::from_millis(short as u64) + Duration::from_secs(15);
    let (code, at) = loop {
        let e = heartbeat(&ctx, &mut b);
        if e != NONE || Instant::now() > deadline {
            break (e, a_last.elapsed());
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_code!(
        code,
        REBALANCE_IN_PROGRESS,
        "B's heartbeat after A stopped heartbeating (A's session timeout {short} ms)"
    );
    assert!(
        at >= Duration::from_millis(short as u64 - 300),
        "A was dropped {at:?} after its last request, before its {short} ms session timeout"
    );
    let r = rejoin(&ctx, &mut b);
    assert_code!(r.error_code, NONE, "B's rejoin after A expired");
    assert_eq!(r.generation_id, 3, "generation after A expired");
    assert_eq!(r.leader, r.member_id, "B leads alone");
    let ids: Vec<String> = r.members.iter().map(|m| m.member_id.to_string()).collect();
    assert_eq!(ids, vec![b.member_id.clone()], "members after A expired");
    let b_id = b.member_id.clone();
    let s = sync_member(&ctx, &mut b, &[(&b_id, assignment(&[("t", &[0, 1])]))]);
    assert_code!(s.error_code, NONE, "B's SyncGroup");
    let mut c = ctx.client();
    let d = describe_group(&ctx, &mut c, &group);
    assert_eq!(d.group_state.as_str(), "Stable");
    assert_eq!(d.members.len(), 1, "members: {:?}", d.members);
    assert_code!(
        heartbeat(&ctx, &mut a),
        UNKNOWN_MEMBER_ID,
        "heartbeat of the expired member"
    );
}

/// KIP-345: a static member that restarts (same group.instance.id, empty member id) gets a
/// new member id without a rebalance when the group is Stable; its old id is fenced.
#[test]
fn static_member_rejoin_without_rebalance_fences_old_id() {
    let ctx = group_ctx(&[]);
    let jv = ctx.versions_req(ApiKey::JoinGroup, 5, 9);
    let hv = ctx.versions_req(ApiKey::Heartbeat, 3, 4);
    let cv = ctx.versions_req(ApiKey::OffsetCommit, 7, 9);
    let t = ctx.topic("static", 2, &[]);
    let group = unique_group("static");
    let inst = format!("inst-{}", crate::broker::now_ms());

    // A static member joins a new group directly: no MEMBER_ID_REQUIRED round.
    {
        let g0 = unique_group("static-direct");
        let mut c = ctx.client();
        c.set_read_timeout(PARKED_READ_TIMEOUT);
        let v = *jv.last().unwrap();
        let r = join_raw(&mut c, v, &JoinSpec::consumer(&g0, &["t"]).instance("solo"));
        assert_code!(
            r.error_code,
            NONE,
            "JoinGroup v{v} of a static member with an empty member id"
        );
        assert!(
            !r.member_id.is_empty(),
            "JoinGroup v{v}: static member got no member id"
        );
        let m = r.members.iter().find(|m| m.member_id == r.member_id);
        assert_eq!(
            m.and_then(|m| opt_s(&m.group_instance_id)).as_deref(),
            Some("solo"),
            "JoinGroup v{v}: the leader's member list carries the instance id"
        );
    }

    let spec_a = JoinSpec::consumer(&group, &[&t.name]);
    let spec_b = JoinSpec::consumer(&group, &[&t.name]).instance(&inst);
    let asg_a = assignment(&[(&t.name, &[0])]);
    let asg_b = assignment(&[(&t.name, &[1])]);
    let (mut a, old_b) = two_member_group(&ctx, &spec_a, &spec_b, asg_a, asg_b.clone());
    let gen = a.generation;
    let old_id = old_b.member_id.clone();
    drop(old_b);

    // B "restarts": same instance id, no member id.
    let mut pending = spawn_join(&ctx, "restarted static member's JoinGroup", &spec_b);
    if pending.still_pending(Duration::from_secs(10)) {
        panic!("the static member's rejoin in a Stable group was parked (a rebalance was started)");
    }
    let (cb, specb, rb) = pending.wait(Duration::from_secs(1));
    assert_code!(
        rb.error_code,
        NONE,
        "JoinGroup of the restarted static member"
    );
    assert!(
        !rb.member_id.is_empty() && rb.member_id.as_str() != old_id,
        "the restarted static member must get a new member id (old {old_id:?}, got {:?})",
        rb.member_id
    );
    assert_eq!(
        rb.generation_id, gen,
        "no new generation for a static rejoin"
    );
    assert_eq!(rb.leader.as_str(), a.member_id, "the leader is unchanged");
    assert!(rb.members.is_empty(), "a follower gets no member list");
    let mut b = member_from(cb, specb, rb);

    let mut c = ctx.client();
    assert_code!(
        heartbeat(&ctx, &mut a),
        NONE,
        "A's heartbeat after B's static rejoin (no rebalance)"
    );
    assert_eq!(
        group_state(&ctx, &mut c, &group),
        "Stable",
        "after the static rejoin"
    );
    let s = sync_member(&ctx, &mut b, &[]);
    assert_code!(
        s.error_code,
        NONE,
        "SyncGroup of the restarted static member"
    );
    assert_eq!(
        s.assignment, asg_b,
        "the restarted static member keeps its assignment"
    );
    assert_code!(
        heartbeat(&ctx, &mut b),
        NONE,
        "heartbeat of the new member id"
    );

    let mut fails: Vec<String> = Vec::new();
    for v in &hv {
        let e = heartbeat_v(&mut c, *v, &group, gen, &old_id, Some(&inst));
        check_code!(
            fails,
            e,
            FENCED_INSTANCE_ID,
            "Heartbeat v{v} of the replaced member id"
        );
    }
    for v in &cv {
        let who = Who {
            generation: gen,
            member_id: &old_id,
            instance: Some(&inst),
        };
        let e = commit_code(&mut c, *v, &group, who, &[(&t.name, 1, 5, -1, Some("old"))]);
        check_code!(
            fails,
            e,
            FENCED_INSTANCE_ID,
            "OffsetCommit v{v} by the replaced member id"
        );
    }
    {
        let sv = ctx.max_version(ApiKey::SyncGroup);
        let r = c.call(
            sv,
            &sync_req(
                sv,
                &group,
                gen,
                &old_id,
                Some(&inst),
                Some((CONSUMER, "range")),
                &[],
            ),
        );
        check_code!(
            fails,
            r.error_code,
            FENCED_INSTANCE_ID,
            "SyncGroup v{sv} by the replaced member id"
        );
        let v = *jv.last().unwrap();
        let r = join_raw(&mut c, v, &spec_b.clone().member(&old_id));
        check_code!(
            fails,
            r.error_code,
            FENCED_INSTANCE_ID,
            "JoinGroup v{v} by the replaced member id"
        );
    }
    let who = b.who();
    let e = commit_code(
        &mut c,
        *cv.last().unwrap(),
        &group,
        who,
        &[(&t.name, 1, 7, -1, Some("new"))],
    );
    check_code!(fails, e, NONE, "OffsetCommit by the new member id");
    let f = committed(&ctx, &mut c, &group, &t.name, 1);
    if f.offset != 7 {
        fails.push(format!(
            "committed offset of {}/1 is {} (expected 7 from the new member)",
            t.name, f.offset
        ));
    }
    check_code!(
        fails,
        heartbeat(&ctx, &mut a),
        NONE,
        "A's heartbeat after the fenced requests"
    );

    // DescribeGroups shows the new id with its instance id.
    let dv = ctx.max_version(ApiKey::DescribeGroups);
    let d = describe_groups(&mut c, dv, &[&group]).remove(0);
    let ids: Vec<(String, Option<String>)> = d
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), opt_s(&m.group_instance_id)))
        .collect();
    if !ids.contains(&(b.member_id.clone(), Some(inst.clone())))
        || ids.iter().any(|(m, _)| *m == old_id)
    {
        fails.push(format!(
            "DescribeGroups v{dv} members {ids:?}: expected {:?} with instance {inst:?} and not the old id {old_id:?}",
            b.member_id
        ));
    }
    assert_no_failures(&fails);

    // An administrative leave by instance id alone removes it; A must rebalance.
    let lv = *ctx.versions_req(ApiKey::LeaveGroup, 3, 5).last().unwrap();
    let l = leave(&mut c, lv, &group, &[("", Some(&inst))]);
    assert_code!(l.error_code, NONE, "LeaveGroup v{lv} by instance id");
    let mr = member_result(&l, "", Some(&inst)).unwrap_or_else(|| {
        panic!(
            "LeaveGroup v{lv}: no result for instance {inst}: {:?}",
            l.members
        )
    });
    assert_code!(mr.error_code, NONE, "LeaveGroup v{lv}: instance {inst}");
    let e = heartbeat_until(&ctx, &mut a, REBALANCE_IN_PROGRESS, Duration::from_secs(10));
    assert_code!(
        e,
        REBALANCE_IN_PROGRESS,
        "A's heartbeat after the static member left"
    );
}

#[test]
fn leave_group_every_version() {
    let ctx = group_ctx(&[]);
    let mut fails: Vec<String> = Vec::new();
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::LeaveGroup, 0, 5) {
        let group = unique_group(&format!("leave-v{v}"));
        if v < 3 {
            let mut a = stable_member(&ctx, &JoinSpec::consumer(&group, &["t"]), assignment(&[]));
            let a_id = a.member_id.clone();
            let l = leave(&mut c, v, &group, &[(&a_id, None)]);
            check_code!(
                fails,
                l.error_code,
                NONE,
                "LeaveGroup v{v} of the only member"
            );
            let st = wait_state(&ctx, &mut c, &group, "Empty", Duration::from_secs(10));
            if st != "Empty" {
                fails.push(format!(
                    "LeaveGroup v{v}: group is {st:?} after its only member left"
                ));
            }
            check_code!(
                fails,
                heartbeat(&ctx, &mut a),
                UNKNOWN_MEMBER_ID,
                "heartbeat after LeaveGroup v{v}"
            );
            let l = leave(&mut c, v, &group, &[(&a_id, None)]);
            check_code!(
                fails,
                l.error_code,
                UNKNOWN_MEMBER_ID,
                "LeaveGroup v{v} of a member that already left"
            );
            let l = leave(&mut c, v, &unique_group("leave-nogroup"), &[("m", None)]);
            check_code!(
                fails,
                l.error_code,
                UNKNOWN_MEMBER_ID,
                "LeaveGroup v{v} from an unknown group"
            );
            continue;
        }
        // v3+: a batch by member id and by instance id, with an unknown member.
        let inst = format!("leave-inst-v{v}");
        let (a, b) = two_member_group(
            &ctx,
            &JoinSpec::consumer(&group, &["t"]),
            &JoinSpec::consumer(&group, &["t"]).instance(&inst),
            assignment(&[("t", &[0])]),
            assignment(&[("t", &[1])]),
        );
        let a_id = a.member_id.clone();
        let l = leave(
            &mut c,
            v,
            &group,
            &[(&a_id, None), ("", Some(&inst)), ("ghost-member", None)],
        );
        check_code!(
            fails,
            l.error_code,
            NONE,
            "LeaveGroup v{v}: top-level error of a batch"
        );
        if l.members.len() != 3 {
            fails.push(format!(
                "LeaveGroup v{v}: 3 members in the batch, {} answered: {:?}",
                l.members.len(),
                l.members
            ));
        }
        for (m, i, want) in [
            (a_id.as_str(), None, NONE),
            ("", Some(inst.as_str()), NONE),
            ("ghost-member", None, UNKNOWN_MEMBER_ID),
        ] {
            match member_result(&l, m, i) {
                None => fails.push(format!(
                    "LeaveGroup v{v}: no answer for member {m:?} / instance {i:?}: {:?}",
                    l.members
                )),
                Some(r) => check_code!(
                    fails,
                    r.error_code,
                    want,
                    "LeaveGroup v{v}: member {m:?} / instance {i:?}"
                ),
            }
        }
        let st = wait_state(&ctx, &mut c, &group, "Empty", Duration::from_secs(10));
        if st != "Empty" {
            fails.push(format!(
                "LeaveGroup v{v}: group is {st:?} after all its members left"
            ));
        }
        drop((a, b));
        let l = leave(&mut c, v, &unique_group("leave-nogroup"), &[("m", None)]);
        check_code!(
            fails,
            l.error_code,
            NONE,
            "LeaveGroup v{v} from an unknown group: top-level error"
        );
        match l.members.as_slice() {
            [r] => check_code!(
                fails,
                r.error_code,
                UNKNOWN_MEMBER_ID,
                "LeaveGroup v{v} from an unknown group: member"
            ),
            other => fails.push(format!(
                "LeaveGroup v{v} from an unknown group: members {other:?}"
            )),
        }
    }
    assert_no_failures(&fails);
}

/// When one of two members leaves, the other must rejoin (REBALANCE_IN_PROGRESS) and
/// leads the next generation alone.
#[test]
fn leave_group_rebalances_the_rest() {
    let ctx = group_ctx(&[]);
    let group = unique_group("leave-rest");
    let (mut a, b) = two_member_group(
        &ctx,
        &JoinSpec::consumer(&group, &["t"]),
        &JoinSpec::consumer(&group, &["t"]),
        assignment(&[("t", &[0])]),
        assignment(&[("t", &[1])]),
    );
    let lv = ctx.max_version(ApiKey::LeaveGroup);
    let mut c = ctx.client();
    let b_id = b.member_id.clone();
    let l = leave(&mut c, lv, &group, &[(&b_id, None)]);
    assert_code!(l.error_code, NONE, "LeaveGroup v{lv} of B");
    let e = heartbeat_until(&ctx, &mut a, REBALANCE_IN_PROGRESS, Duration::from_secs(10));
    assert_code!(e, REBALANCE_IN_PROGRESS, "A's heartbeat after B left");
    let r = rejoin(&ctx, &mut a);
    assert_code!(r.error_code, NONE, "A's rejoin");
    assert_eq!(r.generation_id, 3, "generation after B left");
    let ids: Vec<String> = r.members.iter().map(|m| m.member_id.to_string()).collect();
    assert_eq!(ids, vec![a.member_id.clone()], "members after B left");
    let d = describe_group(&ctx, &mut c, &group);
    let cid = d.members.first().map(|m| m.client_id.to_string());
    assert_eq!(
        cid.as_deref(),
        Some(CLIENT_ID),
        "DescribeGroups: client id of the remaining member"
    );
}

/// An empty group id: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and OffsetDelete refuse
/// it with INVALID_GROUP_ID; OffsetCommit/OffsetFetch accept it (Kafka keeps that for
/// backward compatibility, as a simple consumer's group).
#[test]
fn empty_group_id() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("nogid", 1, &[]);
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, &unique_group("nogid-probe"));
    let mut fails: Vec<String> = Vec::new();
    let within = Duration::from_secs(5);
    // Offsets first (before any JoinGroup could have created a member in group "").
    for v in ctx.versions_req(ApiKey::OffsetCommit, 2, 9) {
        let off = 100 + v as i64;
        let e = commit_code(
            &mut c,
            v,
            "",
            SIMPLE,
            &[(&t.name, 0, off, -1, Some("empty-id"))],
        );
        check_code!(fails, e, NONE, "OffsetCommit v{v} (simple) to group \"\"");
        let f = committed(&ctx, &mut c, "", &t.name, 0);
        if (f.offset, f.metadata.as_deref()) != (off, Some("empty-id")) {
            fails.push(format!(
                "OffsetFetch of group \"\" after OffsetCommit v{v}: {f:?}"
            ));
        }
    }
    let r = offset_delete(&mut c, "", &[(&t.name, &[0])]);
    check_code!(
        fails,
        r.error_code,
        INVALID_GROUP_ID,
        "OffsetDelete for group \"\""
    );
    // A fresh connection per request: a parked request must not hide the next answer.
    let check = |fails: &mut Vec<String>, what: String, r: Result<i16, String>| match r {
        Ok(e) => check_code!(fails, e, INVALID_GROUP_ID, "{what} with group id \"\""),
        Err(e) => fails.push(format!(
            "{what} with group id \"\": {e} (expected INVALID_GROUP_ID)"
        )),
    };
    for v in ctx.versions_req(ApiKey::JoinGroup, 0, 9) {
        let mut c = ctx.client();
        let r = call_within(
            &mut c,
            v,
            &join_req(v, &JoinSpec::consumer("", &["t"])),
            within,
        );
        check(
            &mut fails,
            format!("JoinGroup v{v}"),
            r.map(|r| r.error_code),
        );
    }
    for v in ctx.versions_req(ApiKey::SyncGroup, 0, 5) {
        let mut c = ctx.client();
        let req = sync_req(v, "", 1, "m", None, Some((CONSUMER, "range")), &[]);
        let r = call_within(&mut c, v, &req, within);
        check(
            &mut fails,
            format!("SyncGroup v{v}"),
            r.map(|r| r.error_code),
        );
    }
    for v in ctx.versions_req(ApiKey::Heartbeat, 0, 4) {
        let mut c = ctx.client();
        let req = kafka_protocol::messages::HeartbeatRequest::default()
            .with_group_id(gid(""))
            .with_generation_id(1)
            .with_member_id(sb("m"));
        let r = call_within(&mut c, v, &req, within);
        check(
            &mut fails,
            format!("Heartbeat v{v}"),
            r.map(|r| r.error_code),
        );
    }
    for v in ctx.versions_req(ApiKey::LeaveGroup, 0, 5) {
        let mut c = ctx.client();
        let mut req = kafka_protocol::messages::LeaveGroupRequest::default().with_group_id(gid(""));
        if v >= 3 {
            req = req.with_members(vec![
                kafka_protocol::messages::leave_group_request::MemberIdentity::default()
                    .with_member_id(sb("m")),
            ]);
        } else {
            req = req.with_member_id(sb("m"));
        }
        let r = call_within(&mut c, v, &req, within);
        check(
            &mut fails,
            format!("LeaveGroup v{v}"),
            r.map(|r| r.error_code),
        );
    }
    drop(c);
    assert_no_failures(&fails);
}
