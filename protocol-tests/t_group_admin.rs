//! Group administration: DescribeGroups v0-6, ListGroups v0-5 (v4+ states filter, v5+
//! types filter), DeleteGroups v0-2 and OffsetDelete v0.

use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::ApiKey;

use crate::client::CLIENT_ID;
use crate::groups::*;
use crate::ops::*;

/// Groups in every classic state (plus an unknown one), for the describe/list tests.
#[derive(Debug)]
struct Zoo {
    unknown: String,
    empty: String,
    completing: String,
    stable: String,
    preparing: String,
    /// The Stable group's member, its "range" metadata and assignment.
    stable_member: Member,
    stable_metadata: Bytes,
    stable_assignment: Bytes,
    completing_member: Member,
    /// The Preparing group: its old member, and the new member's parked join.
    preparing_member: Member,
    preparing_join: Pending<(
        crate::client::Client,
        JoinSpec,
        kafka_protocol::messages::JoinGroupResponse,
    )>,
}

fn zoo(ctx: &Ctx, t: &Topic) -> Zoo {
    let mut c = ctx.client();
    let unknown = unique_group("z-unknown");
    let empty = unique_group("z-empty");
    let completing = unique_group("z-completing");
    let stable = unique_group("z-stable");
    let preparing = unique_group("z-preparing");
    wait_coordinator(ctx, &mut c, &empty);
    commit_ok(ctx, &mut c, &empty, SIMPLE, &[(&t.name, 0, 1, -1, None)]);
    let completing_member = join_ok(ctx, &JoinSpec::consumer(&completing, &[&t.name]));
    let spec = JoinSpec::consumer(&stable, &[&t.name]);
    let stable_metadata = spec.protocols[0].1.clone();
    let stable_assignment = assignment(&[(&t.name, &[0])]);
    let stable_member = stable_member(ctx, &spec, stable_assignment.clone());
    let mut preparing_member = stable_member_of(ctx, &preparing, t);
    let preparing_join = spawn_join(
        ctx,
        "parked JoinGroup",
        &JoinSpec::consumer(&preparing, &[&t.name]),
    );
    let e = heartbeat_until(
        ctx,
        &mut preparing_member,
        REBALANCE_IN_PROGRESS,
        Duration::from_secs(20),
    );
    assert_code!(
        e,
        REBALANCE_IN_PROGRESS,
        "heartbeat in {preparing} after a second member joined"
    );
    Zoo {
        unknown,
        empty,
        completing,
        stable,
        preparing,
        stable_member,
        stable_metadata,
        stable_assignment,
        completing_member,
        preparing_member,
        preparing_join,
    }
}

fn stable_member_of(ctx: &Ctx, group: &str, t: &Topic) -> Member {
    stable_member(
        ctx,
        &JoinSpec::consumer(group, &[&t.name]),
        assignment(&[(&t.name, &[0])]),
    )
}

impl Zoo {
    /// Completes the parked rebalance so no request is left hanging.
    fn finish(mut self, ctx: &Ctx) {
        let r = rejoin(ctx, &mut self.preparing_member);
        assert_code!(r.error_code, NONE, "rejoin in {}", self.preparing);
        let (_, _, rb) = self.preparing_join.wait(Duration::from_secs(30));
        assert_code!(
            rb.error_code,
            NONE,
            "parked JoinGroup in {}",
            self.preparing
        );
        drop(self.completing_member);
        drop(self.stable_member);
    }
}

fn find<'a>(gs: &'a [DescribedGroup], id: &str) -> Option<&'a DescribedGroup> {
    gs.iter().find(|g| g.group_id.0.as_str() == id)
}

#[test]
fn describe_groups_every_version() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("dg", 1, &[]);
    let z = zoo(&ctx, &t);
    let mut c = ctx.client();
    let mut fails: Vec<String> = Vec::new();
    let ids = [&z.unknown, &z.empty, &z.completing, &z.stable, &z.preparing];
    for v in ctx.versions_req(ApiKey::DescribeGroups, 0, 6) {
        let gs = describe_groups(
            &mut c,
            v,
            &ids.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        );
        for id in ids {
            if find(&gs, id).is_none() {
                fails.push(format!("DescribeGroups v{v}: no description of {id}"));
            }
        }
        if v >= 3 {
            for g in &gs {
                if g.authorized_operations != i32::MIN {
                    fails.push(format!(
                        "DescribeGroups v{v} {}: authorized_operations {} although not requested (Kafka: -2147483648)",
                        g.group_id.0, g.authorized_operations
                    ));
                }
            }
        }
        // Unknown group: "Dead"; error NONE before v6, GROUP_ID_NOT_FOUND from v6 (KIP-1043).
        if let Some(g) = find(&gs, &z.unknown) {
            let want = if v >= 6 { GROUP_ID_NOT_FOUND } else { NONE };
            check_code!(
                fails,
                g.error_code,
                want,
                "DescribeGroups v{v} of an unknown group"
            );
            if g.group_state.as_str() != "Dead" || !g.members.is_empty() {
                fails.push(format!(
                    "DescribeGroups v{v} unknown group: state {:?} with {} members (expected \"Dead\", none)",
                    g.group_state,
                    g.members.len()
                ));
            }
        }
        if let Some(g) = find(&gs, &z.empty) {
            check_code!(
                fails,
                g.error_code,
                NONE,
                "DescribeGroups v{v} of an empty group"
            );
            if (
                g.group_state.as_str(),
                g.protocol_type.as_str(),
                g.members.len(),
            ) != ("Empty", "", 0)
            {
                fails.push(format!(
                    "DescribeGroups v{v} group with only committed offsets: ({:?}, protocol type {:?}, {} members), expected (\"Empty\", \"\", 0)",
                    g.group_state, g.protocol_type, g.members.len()
                ));
            }
        }
        for (id, state, member) in [
            (&z.completing, "CompletingRebalance", &z.completing_member),
            (&z.preparing, "PreparingRebalance", &z.preparing_member),
            (&z.stable, "Stable", &z.stable_member),
        ] {
            let Some(g) = find(&gs, id) else { continue };
            check_code!(
                fails,
                g.error_code,
                NONE,
                "DescribeGroups v{v} of a {state} group"
            );
            if g.group_state.as_str() != state {
                fails.push(format!(
                    "DescribeGroups v{v} {id}: state {:?}, expected {state:?}",
                    g.group_state
                ));
            }
            if g.protocol_type.as_str() != CONSUMER {
                fails.push(format!(
                    "DescribeGroups v{v} {state} group: protocol type {:?}",
                    g.protocol_type
                ));
            }
            // The protocol is only reported for Stable groups.
            let want_proto = if state == "Stable" { "range" } else { "" };
            if g.protocol_data.as_str() != want_proto {
                fails.push(format!(
                    "DescribeGroups v{v} {state} group: protocol data {:?}, expected {want_proto:?}",
                    g.protocol_data
                ));
            }
            let Some(m) = g
                .members
                .iter()
                .find(|m| m.member_id.as_str() == member.member_id)
            else {
                fails.push(format!(
                    "DescribeGroups v{v} {state} group: member {} missing: {:?}",
                    member.member_id, g.members
                ));
                continue;
            };
            if m.client_id.as_str() != CLIENT_ID {
                fails.push(format!(
                    "DescribeGroups v{v} {state} group: client id {:?}",
                    m.client_id
                ));
            }
            if !m.client_host.contains("127.0.0.1") {
                fails.push(format!(
                    "DescribeGroups v{v} {state} group: client host {:?}",
                    m.client_host
                ));
            }
            if v >= 4 && m.group_instance_id.is_some() {
                fails.push(format!(
                    "DescribeGroups v{v} {state} group: instance id {:?}",
                    m.group_instance_id
                ));
            }
            if state == "Stable" {
                if g.members.len() != 1 {
                    fails.push(format!(
                        "DescribeGroups v{v} Stable group: {} members",
                        g.members.len()
                    ));
                }
                if m.member_metadata != z.stable_metadata {
                    fails.push(format!(
                        "DescribeGroups v{v} Stable group: member metadata {:?}, expected the \"range\" metadata {:?}",
                        m.member_metadata, z.stable_metadata
                    ));
                }
                if m.member_assignment != z.stable_assignment {
                    fails.push(format!(
                        "DescribeGroups v{v} Stable group: member assignment {:?}, expected {:?}",
                        m.member_assignment, z.stable_assignment
                    ));
                }
            }
        }
    }
    z.finish(&ctx);
    assert_no_failures(&fails);
}

#[test]
fn list_groups_every_version_and_filters() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("lg", 1, &[]);
    let z = zoo(&ctx, &t);
    let mut c = ctx.client();
    let mut fails: Vec<String> = Vec::new();
    let ours = [
        (&z.empty, "Empty", ""),
        (&z.completing, "CompletingRebalance", CONSUMER),
        (&z.stable, "Stable", CONSUMER),
        (&z.preparing, "PreparingRebalance", CONSUMER),
    ];
    let listed = |r: &kafka_protocol::messages::ListGroupsResponse, id: &str| {
        r.groups
            .iter()
            .find(|g| g.group_id.0.as_str() == id)
            .cloned()
    };
    for v in ctx.versions_req(ApiKey::ListGroups, 0, 5) {
        let r = list_groups(&mut c, v, &[], &[]);
        check_code!(fails, r.error_code, NONE, "ListGroups v{v}");
        if listed(&r, &z.unknown).is_some() {
            fails.push(format!("ListGroups v{v} lists a group that does not exist"));
        }
        for (id, state, ptype) in ours {
            match listed(&r, id) {
                None => fails.push(format!("ListGroups v{v}: {state} group {id} not listed")),
                Some(g) => {
                    if g.protocol_type.as_str() != ptype {
                        fails.push(format!(
                            "ListGroups v{v} {state} group: protocol type {:?}, expected {ptype:?}",
                            g.protocol_type
                        ));
                    }
                    if v >= 4 && g.group_state.as_str() != state {
                        fails.push(format!(
                            "ListGroups v{v} {id}: state {:?}, expected {state:?}",
                            g.group_state
                        ));
                    }
                    if v >= 5 && g.group_type.as_str() != "classic" {
                        fails.push(format!(
                            "ListGroups v{v} {state} group: type {:?}, expected \"classic\"",
                            g.group_type
                        ));
                    }
                }
            }
        }
        if v >= 4 {
            // States filter, case-insensitive like Kafka's.
            for (filter, want) in [
                (vec!["Stable"], vec![&z.stable]),
                (
                    vec!["empty", "COMPLETINGREBALANCE"],
                    vec![&z.empty, &z.completing],
                ),
                (vec!["PreparingRebalance"], vec![&z.preparing]),
                (vec!["Dead"], vec![]),
            ] {
                let r = list_groups(&mut c, v, &filter, &[]);
                check_code!(
                    fails,
                    r.error_code,
                    NONE,
                    "ListGroups v{v} states {filter:?}"
                );
                for (id, state, _) in ours {
                    let is = listed(&r, id).is_some();
                    if is != want.contains(&id) {
                        fails.push(format!(
                            "ListGroups v{v} states {filter:?}: {state} group {} listed",
                            if is { "is" } else { "is not" }
                        ));
                    }
                }
                for g in &r.groups {
                    if !filter
                        .iter()
                        .any(|f| f.eq_ignore_ascii_case(g.group_state.as_str()))
                    {
                        fails.push(format!(
                            "ListGroups v{v} states {filter:?}: listed {} in state {:?}",
                            g.group_id.0, g.group_state
                        ));
                    }
                }
            }
        }
        if v >= 5 {
            let r = list_groups(&mut c, v, &[], &["classic"]);
            for (id, state, _) in ours {
                if listed(&r, id).is_none() {
                    fails.push(format!(
                        "ListGroups v{v} types [\"classic\"]: {state} group missing"
                    ));
                }
            }
            let r = list_groups(&mut c, v, &[], &["consumer"]);
            for (id, state, _) in ours {
                if listed(&r, id).is_some() {
                    fails.push(format!(
                        "ListGroups v{v} types [\"consumer\"]: classic {state} group listed"
                    ));
                }
            }
            let r = list_groups(&mut c, v, &["stable"], &["Classic"]);
            let got: Vec<bool> = ours
                .iter()
                .map(|(id, ..)| listed(&r, id).is_some())
                .collect();
            if got != vec![false, false, true, false] {
                fails.push(format!(
                    "ListGroups v{v} states [\"stable\"] types [\"Classic\"]: listed (empty, completing, stable, preparing) = {got:?}"
                ));
            }
        }
    }
    z.finish(&ctx);
    assert_no_failures(&fails);
}

#[test]
fn delete_groups_every_version() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("delg", 1, &[]);
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, &unique_group("delg-probe"));
    let mut fails: Vec<String> = Vec::new();
    for v in ctx.versions_req(ApiKey::DeleteGroups, 0, 2) {
        let empty = unique_group(&format!("delg-empty-v{v}"));
        let busy = unique_group(&format!("delg-busy-v{v}"));
        let ghost = unique_group(&format!("delg-ghost-v{v}"));
        commit_ok(
            &ctx,
            &mut c,
            &empty,
            SIMPLE,
            &[(&t.name, 0, 33, -1, Some("x"))],
        );
        let mut m = stable_member(
            &ctx,
            &JoinSpec::consumer(&busy, &[&t.name]),
            assignment(&[(&t.name, &[0])]),
        );
        let res = delete_groups(&mut c, v, &[&empty, &busy, &ghost]);
        if res.len() != 3 {
            fails.push(format!(
                "DeleteGroups v{v}: 3 groups asked, {} answered: {res:?}",
                res.len()
            ));
        }
        for (g, want, what) in [
            (&empty, NONE, "an empty group with offsets"),
            (&busy, NON_EMPTY_GROUP, "a group with a member"),
            (&ghost, GROUP_ID_NOT_FOUND, "an unknown group"),
        ] {
            match res.iter().find(|(id, _)| id == g) {
                None => fails.push(format!("DeleteGroups v{v}: no result for {what}")),
                Some((_, e)) => check_code!(fails, *e, want, "DeleteGroups v{v} of {what}"),
            }
        }
        // The deleted group and its offsets are gone.
        let f = committed(&ctx, &mut c, &empty, &t.name, 0);
        if f.offset != -1 {
            fails.push(format!(
                "DeleteGroups v{v}: offset {} still committed for the deleted group",
                f.offset
            ));
        }
        let st = group_state(&ctx, &mut c, &empty);
        if st != "Dead" {
            fails.push(format!(
                "DeleteGroups v{v}: the deleted group is described as {st:?}"
            ));
        }
        let lv = ctx.max_version(ApiKey::ListGroups);
        let l = list_groups(&mut c, lv, &[], &[]);
        if l.groups.iter().any(|g| g.group_id.0.as_str() == empty) {
            fails.push(format!(
                "DeleteGroups v{v}: the deleted group is still listed"
            ));
        }
        check_code!(
            fails,
            delete_group_code(&mut c, v, &empty),
            GROUP_ID_NOT_FOUND,
            "DeleteGroups v{v} of a deleted group"
        );
        // The non-empty group is untouched.
        check_code!(
            fails,
            heartbeat(&ctx, &mut m),
            NONE,
            "heartbeat in the group DeleteGroups v{v} refused to delete"
        );
        // The id can be used again.
        commit_ok(
            &ctx,
            &mut c,
            &empty,
            SIMPLE,
            &[(&t.name, 0, 44, -1, Some("again"))],
        );
        let f = committed(&ctx, &mut c, &empty, &t.name, 0);
        if f.offset != 44 {
            fails.push(format!(
                "DeleteGroups v{v}: offset {} committed to a re-created group (expected 44)",
                f.offset
            ));
        }
        // Once its member leaves, the other group can be deleted.
        let lgv = ctx.max_version(ApiKey::LeaveGroup);
        let id = m.member_id.clone();
        check_code!(
            fails,
            leave(&mut c, lgv, &busy, &[(&id, None)]).error_code,
            NONE,
            "LeaveGroup"
        );
        wait_state(&ctx, &mut c, &busy, "Empty", Duration::from_secs(10));
        check_code!(
            fails,
            delete_group_code(&mut c, v, &busy),
            NONE,
            "DeleteGroups v{v} after the member left"
        );
    }
    assert_no_failures(&fails);
}

#[test]
fn offset_delete_spares_subscribed_topics() {
    let ctx = group_ctx(&[]);
    assert!(
        ctx.supports(ApiKey::OffsetDelete, 0),
        "OffsetDelete v0 is not advertised"
    );
    let t1 = ctx.topic("od1", 3, &[]);
    let t2 = ctx.topic("od2", 1, &[]);
    let mut c = ctx.client();
    let mut fails: Vec<String> = Vec::new();

    // Unknown group.
    let ghost = unique_group("od-ghost");
    wait_coordinator(&ctx, &mut c, &ghost);
    let r = offset_delete(&mut c, &ghost, &[(&t1.name, &[0])]);
    check_code!(
        fails,
        r.error_code,
        GROUP_ID_NOT_FOUND,
        "OffsetDelete for an unknown group"
    );

    // An empty group: any committed offset can be deleted.
    let g = unique_group("od-empty");
    commit_ok(
        &ctx,
        &mut c,
        &g,
        SIMPLE,
        &[
            (&t1.name, 0, 10, -1, None),
            (&t1.name, 1, 11, -1, None),
            (&t2.name, 0, 20, -1, None),
        ],
    );
    let r = offset_delete(&mut c, &g, &[(&t1.name, &[0, 2])]);
    check_code!(fails, r.error_code, NONE, "OffsetDelete in an empty group");
    let mut parts = offset_delete_parts(&r);
    parts.sort();
    if parts != vec![(t1.name.clone(), 0, NONE), (t1.name.clone(), 2, NONE)] {
        fails.push(format!(
            "OffsetDelete in an empty group: partitions {parts:?}"
        ));
    }
    for (tp, p, want) in [(&t1.name, 0, -1), (&t1.name, 1, 11), (&t2.name, 0, 20)] {
        let got = committed(&ctx, &mut c, &g, tp, p).offset;
        if got != want {
            fails.push(format!(
                "after OffsetDelete of {}/0: {tp}/{p} is {got}, expected {want}",
                t1.name
            ));
        }
    }

    // A consumer group subscribed to t1: t1's offsets stay, t2's go.
    let gs = unique_group("od-sub");
    let mut m = stable_member(
        &ctx,
        &JoinSpec::consumer(&gs, &[&t1.name]),
        assignment(&[(&t1.name, &[0, 1, 2])]),
    );
    let who = m.who();
    commit_ok(
        &ctx,
        &mut c,
        &gs,
        who,
        &[(&t1.name, 0, 5, -1, None), (&t2.name, 0, 6, -1, None)],
    );
    let r = offset_delete(&mut c, &gs, &[(&t1.name, &[0]), (&t2.name, &[0])]);
    check_code!(
        fails,
        r.error_code,
        NONE,
        "OffsetDelete in a Stable consumer group"
    );
    let mut parts = offset_delete_parts(&r);
    parts.sort();
    let mut want = vec![
        (t1.name.clone(), 0, GROUP_SUBSCRIBED_TO_TOPIC),
        (t2.name.clone(), 0, NONE),
    ];
    want.sort();
    if parts != want {
        fails.push(format!(
            "OffsetDelete in a group subscribed to {}: {:?}, expected {:?}",
            t1.name,
            parts
                .iter()
                .map(|(t, p, e)| (t.clone(), *p, ename(*e)))
                .collect::<Vec<_>>(),
            want.iter()
                .map(|(t, p, e)| (t.clone(), *p, ename(*e)))
                .collect::<Vec<_>>()
        ));
    }
    for (tp, want) in [(&t1.name, 5), (&t2.name, -1)] {
        let got = committed(&ctx, &mut c, &gs, tp, 0).offset;
        if got != want {
            fails.push(format!(
                "after OffsetDelete in the subscribed group: {tp}/0 is {got}, expected {want}"
            ));
        }
    }
    check_code!(
        fails,
        heartbeat(&ctx, &mut m),
        NONE,
        "heartbeat after OffsetDelete"
    );

    // A non-empty group of another protocol type: Kafka refuses with NON_EMPTY_GROUP.
    let go = unique_group("od-other");
    let other = JoinSpec::consumer(&go, &[&t1.name]).protocol_type("connect");
    let _m2 = stable_member(&ctx, &other, Bytes::from_static(b"whatever"));
    let r = offset_delete(&mut c, &go, &[(&t2.name, &[0])]);
    check_code!(
        fails,
        r.error_code,
        NON_EMPTY_GROUP,
        "OffsetDelete in a non-empty \"connect\" group"
    );
    assert_no_failures(&fails);
}
