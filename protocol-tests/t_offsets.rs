//! Committed offsets: OffsetCommit v2-9 / OffsetFetch v1-9 (v8+ multi-group), member and
//! generation checks, unknown topics/partitions/groups, durability across a clean restart
//! and a kill -9, and the internal `__consumer_offsets` topic.

use std::time::Duration;

use kafka_protocol::messages::{ApiKey, OffsetCommitResponse, OffsetFetchResponse};

use crate::groups::*;
use crate::ops::*;
use crate::records::batch_of;

pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

#[test]
fn offset_commit_and_fetch_every_version() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("oc", 3, &[]);
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, &unique_group("oc-probe"));
    let mut fails: Vec<String> = Vec::new();
    let fetch_versions = ctx.versions_req(ApiKey::OffsetFetch, 1, 9);
    for cv in ctx.versions_req(ApiKey::OffsetCommit, 2, 9) {
        let group = unique_group(&format!("oc-v{cv}"));
        let epoch = if cv >= 6 { 7 } else { -1 };
        let md0 = format!("meta-v{cv}");
        let o0 = 100 + cv as i64;
        let o1 = 200 + cv as i64;
        let res = commit(
            &mut c,
            cv,
            &group,
            SIMPLE,
            &[
                (&t.name, 0, o0, epoch, Some(&md0)),
                (&t.name, 1, o1, epoch, Some("")),
            ],
        );
        for (tp, p, e) in &res {
            check_code!(
                fails,
                *e,
                NONE,
                "OffsetCommit v{cv} (simple consumer) {tp}/{p}"
            );
        }
        for &fv in &fetch_versions {
            let (e, f) = offset_fetch_raw(&mut c, fv, &group, Some(&[(&t.name, &[0, 1, 2])]));
            check_code!(
                fails,
                e,
                NONE,
                "OffsetFetch v{fv} after OffsetCommit v{cv}: top-level error"
            );
            let want_epoch = |e: i32| if fv >= 5 { e } else { -1 };
            let expect = [
                (0, o0, want_epoch(epoch), Some(md0.clone())),
                (1, o1, want_epoch(epoch), Some(String::new())),
                // Never committed: -1, no epoch, Kafka's empty metadata.
                (2, -1, -1, Some(String::new())),
            ];
            if f.len() != 3 {
                fails.push(format!(
                    "OffsetFetch v{fv}: 3 partitions asked, answered {f:?}"
                ));
            }
            for (p, off, ep, md) in expect {
                match find_fetched(&f, &t.name, p) {
                    None => fails.push(format!(
                        "OffsetFetch v{fv} after OffsetCommit v{cv}: no answer for partition {p}"
                    )),
                    Some(x) => {
                        check_code!(fails, x.error, NONE, "OffsetFetch v{fv} partition {p}");
                        if (x.offset, x.leader_epoch, &x.metadata) != (off, ep, &md) {
                            fails.push(format!(
                                "OffsetFetch v{fv} after OffsetCommit v{cv}, partition {p}: (offset, leader epoch, metadata) = ({}, {}, {:?}), expected ({off}, {ep}, {md:?})",
                                x.offset, x.leader_epoch, x.metadata
                            ));
                        }
                    }
                }
            }
            if fv >= 2 {
                // All topics: exactly the committed partitions.
                let (e, f) = offset_fetch_raw(&mut c, fv, &group, None);
                check_code!(fails, e, NONE, "OffsetFetch v{fv} (all topics)");
                let mut got: Vec<(String, i32, i64)> = f
                    .iter()
                    .map(|x| (x.topic.clone(), x.partition, x.offset))
                    .collect();
                got.sort();
                let want = vec![(t.name.clone(), 0, o0), (t.name.clone(), 1, o1)];
                if got != want {
                    fails.push(format!(
                        "OffsetFetch v{fv} (all topics) after OffsetCommit v{cv}: {got:?}, expected {want:?}"
                    ));
                }
            }
        }
    }
    assert_no_failures(&fails);
}

/// Metadata round-trips exactly; a null metadata is stored as "" (Kafka's NO_METADATA);
/// a later commit replaces an earlier one; metadata over 4096 characters is refused.
#[test]
fn offset_commit_metadata_round_trip() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("ocmeta", 1, &[]);
    let mut c = ctx.client();
    let group = unique_group("ocmeta");
    wait_coordinator(&ctx, &mut c, &group);
    let long = "x".repeat(4000);
    let cases: [(&str, Option<&str>, Option<&str>); 5] = [
        ("plain", Some("checkpoint-1"), Some("checkpoint-1")),
        ("empty", Some(""), Some("")),
        ("null", None, Some("")),
        (
            "unicode",
            Some("ünïcødé ✓ 🚀 \"q\" \\ \n"),
            Some("ünïcødé ✓ 🚀 \"q\" \\ \n"),
        ),
        ("4000 chars", Some(&long), Some(&long)),
    ];
    let mut fails: Vec<String> = Vec::new();
    for cv in ctx.versions_req(ApiKey::OffsetCommit, 2, 9) {
        for (i, (what, sent, want)) in cases.iter().enumerate() {
            let off = cv as i64 * 100 + i as i64;
            let e = commit_code(&mut c, cv, &group, SIMPLE, &[(&t.name, 0, off, -1, *sent)]);
            check_code!(fails, e, NONE, "OffsetCommit v{cv} with {what} metadata");
            let f = committed(&ctx, &mut c, &group, &t.name, 0);
            if f.offset != off || f.metadata.as_deref() != *want {
                fails.push(format!(
                    "OffsetCommit v{cv} with {what} metadata {sent:?}: fetched ({}, {:?}), expected ({off}, {want:?})",
                    f.offset,
                    f.metadata.as_ref().map(|m| if m.len() > 60 { format!("{}... ({} bytes)", &m[..40], m.len()) } else { m.clone() })
                ));
            }
        }
    }
    // offset.metadata.max.bytes (default 4096): larger metadata is refused, the old offset stays.
    let before = committed(&ctx, &mut c, &group, &t.name, 0);
    let too_long = "y".repeat(5000);
    let cv = ctx.max_version(ApiKey::OffsetCommit);
    let e = commit_code(
        &mut c,
        cv,
        &group,
        SIMPLE,
        &[(&t.name, 0, 999_999, -1, Some(&too_long))],
    );
    check_code!(
        fails,
        e,
        OFFSET_METADATA_TOO_LARGE,
        "OffsetCommit v{cv} with 5000-byte metadata"
    );
    let after = committed(&ctx, &mut c, &group, &t.name, 0);
    if after.offset != before.offset {
        fails.push(format!(
            "a refused commit changed the committed offset from {} to {}",
            before.offset, after.offset
        ));
    }
    assert_no_failures(&fails);
}

#[test]
fn offset_fetch_unknown_group_topic_partition() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("ofu", 1, &[]);
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, &unique_group("ofu-probe"));
    let ghost_topic = crate::broker::unique_name("ofu-ghost");
    let mut fails: Vec<String> = Vec::new();
    for fv in ctx.versions_req(ApiKey::OffsetFetch, 1, 9) {
        let group = unique_group(&format!("ofu-v{fv}"));
        let (e, f) = offset_fetch_raw(
            &mut c,
            fv,
            &group,
            Some(&[(&t.name, &[0, 99]), (&ghost_topic, &[0])]),
        );
        check_code!(
            fails,
            e,
            NONE,
            "OffsetFetch v{fv} for an unknown group: top-level error"
        );
        for (tp, p) in [(&t.name, 0), (&t.name, 99), (&ghost_topic, 0)] {
            match find_fetched(&f, tp, p) {
                None => fails.push(format!("OffsetFetch v{fv}: no answer for {tp}/{p}: {f:?}")),
                Some(x) => {
                    if x.offset != -1 {
                        fails.push(format!(
                            "OffsetFetch v{fv} unknown group, {tp}/{p}: offset {} (expected -1)",
                            x.offset
                        ));
                    }
                    let allowed: &[i16] = if *tp == t.name && p == 0 {
                        &[NONE]
                    } else {
                        &[NONE, UNKNOWN_TOPIC_OR_PARTITION]
                    };
                    check_code_in!(
                        fails,
                        x.error,
                        allowed,
                        "OffsetFetch v{fv} unknown group, {tp}/{p}"
                    );
                }
            }
        }
        if fv >= 2 {
            let (e, f) = offset_fetch_raw(&mut c, fv, &group, None);
            check_code!(
                fails,
                e,
                NONE,
                "OffsetFetch v{fv} all topics of an unknown group"
            );
            if !f.is_empty() {
                fails.push(format!(
                    "OffsetFetch v{fv} all topics of an unknown group: {f:?}"
                ));
            }
        }
    }
    assert_no_failures(&fails);
}

#[test]
fn offset_commit_unknown_topic_or_partition() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("ocu", 2, &[]);
    let ghost = crate::broker::unique_name("ocu-ghost");
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, &unique_group("ocu-probe"));
    let mut fails: Vec<String> = Vec::new();
    for cv in ctx.versions_req(ApiKey::OffsetCommit, 2, 9) {
        let group = unique_group(&format!("ocu-v{cv}"));
        let res = commit(
            &mut c,
            cv,
            &group,
            SIMPLE,
            &[
                (&t.name, 1, 11, -1, Some("ok")),
                (&t.name, 7, 12, -1, Some("no such partition")),
                (&ghost, 0, 13, -1, Some("no such topic")),
            ],
        );
        for (tp, p, e) in &res {
            let want = if *tp == t.name && *p == 1 {
                NONE
            } else {
                UNKNOWN_TOPIC_OR_PARTITION
            };
            check_code!(fails, *e, want, "OffsetCommit v{cv} {tp}/{p}");
        }
        let fv = ctx.max_version(ApiKey::OffsetFetch);
        let (_, f) = offset_fetch_raw(
            &mut c,
            fv,
            &group,
            Some(&[(&t.name, &[1, 7]), (&ghost, &[0])]),
        );
        for (tp, p, want) in [(&t.name, 1, 11), (&t.name, 7, -1), (&ghost, 0, -1)] {
            let got = find_fetched(&f, tp, p).map(|x| x.offset);
            if got != Some(want) {
                fails.push(format!("after OffsetCommit v{cv}: fetched offset of {tp}/{p} is {got:?}, expected {want}"));
            }
        }
        // Only unknown partitions: the group must not be created with them.
        let e = commit_code(
            &mut c,
            cv,
            &unique_group("ocu-only"),
            SIMPLE,
            &[(&ghost, 3, 1, -1, None)],
        );
        check_code!(
            fails,
            e,
            UNKNOWN_TOPIC_OR_PARTITION,
            "OffsetCommit v{cv} to an unknown topic only"
        );
    }
    assert_no_failures(&fails);
}

/// Generation and member checks: members of a group must commit with their generation;
/// simple consumers (generation -1, no member id) only to empty or unknown groups.
#[test]
fn offset_commit_generation_and_member_checks() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("ocgen", 1, &[]);
    let group = unique_group("ocgen");
    let mut fails: Vec<String> = Vec::new();
    let part = |off: i64| -> [CommitPart<'_>; 1] { [(t.name.as_str(), 0, off, -1, Some("m"))] };
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, &group);

    // CompletingRebalance (joined, not synced): valid member and generation → REBALANCE_IN_PROGRESS.
    let mut a = join_ok(&ctx, &JoinSpec::consumer(&group, &[&t.name]));
    let gen1 = a.generation;
    for cv in ctx.versions_req(ApiKey::OffsetCommit, 2, 9) {
        let e = commit_code(&mut c, cv, &group, a.who(), &part(1));
        check_code!(
            fails,
            e,
            REBALANCE_IN_PROGRESS,
            "OffsetCommit v{cv} by a member before its SyncGroup"
        );
    }
    let a_id = a.member_id.clone();
    let s = sync_member(&ctx, &mut a, &[(&a_id, assignment(&[(&t.name, &[0])]))]);
    assert_code!(s.error_code, NONE, "SyncGroup");

    for cv in ctx.versions_req(ApiKey::OffsetCommit, 2, 9) {
        let off = cv as i64 * 10;
        let e = commit_code(&mut c, cv, &group, a.who(), &part(off));
        check_code!(
            fails,
            e,
            NONE,
            "OffsetCommit v{cv} by the member with its generation"
        );
        let stale = Who {
            generation: gen1 - 1,
            ..a.who()
        };
        let e = commit_code(&mut c, cv, &group, stale, &part(off + 1));
        check_code!(
            fails,
            e,
            ILLEGAL_GENERATION,
            "OffsetCommit v{cv} with generation {}",
            gen1 - 1
        );
        let ahead = Who {
            generation: gen1 + 1,
            ..a.who()
        };
        let e = commit_code(&mut c, cv, &group, ahead, &part(off + 2));
        check_code!(
            fails,
            e,
            ILLEGAL_GENERATION,
            "OffsetCommit v{cv} with generation {}",
            gen1 + 1
        );
        let ghost = Who {
            member_id: "no-such-member",
            ..a.who()
        };
        let e = commit_code(&mut c, cv, &group, ghost, &part(off + 3));
        check_code!(
            fails,
            e,
            UNKNOWN_MEMBER_ID,
            "OffsetCommit v{cv} by an unknown member"
        );
        let e = commit_code(&mut c, cv, &group, SIMPLE, &part(off + 4));
        check_code!(
            fails,
            e,
            UNKNOWN_MEMBER_ID,
            "OffsetCommit v{cv} with generation -1 and no member id to a group with members"
        );
        let f = committed(&ctx, &mut c, &group, &t.name, 0);
        if f.offset != off {
            fails.push(format!(
                "after the refused commits (v{cv}) the committed offset is {} (expected {off})",
                f.offset
            ));
        }
        // Unknown group with a generation: ILLEGAL_GENERATION, GROUP_ID_NOT_FOUND from v9.
        let want = if cv >= 9 {
            GROUP_ID_NOT_FOUND
        } else {
            ILLEGAL_GENERATION
        };
        let who = Who {
            generation: 3,
            member_id: "m",
            instance: None,
        };
        let e = commit_code(&mut c, cv, &unique_group("ocgen-none"), who, &part(5));
        check_code!(
            fails,
            e,
            want,
            "OffsetCommit v{cv} with generation 3 to an unknown group"
        );
    }

    // A new generation makes the old one stale.
    let r = rejoin(&ctx, &mut a);
    assert_code!(r.error_code, NONE, "the leader's rejoin");
    let gen2 = a.generation;
    assert_eq!(gen2, gen1 + 1, "generation after the leader rejoined");
    let s = sync_member(&ctx, &mut a, &[(&a_id, assignment(&[(&t.name, &[0])]))]);
    assert_code!(s.error_code, NONE, "SyncGroup of generation {gen2}");
    let cv = ctx.max_version(ApiKey::OffsetCommit);
    let old = Who {
        generation: gen1,
        ..a.who()
    };
    check_code!(
        fails,
        commit_code(&mut c, cv, &group, old, &part(500)),
        ILLEGAL_GENERATION,
        "OffsetCommit with the previous generation {gen1}"
    );
    check_code!(
        fails,
        commit_code(&mut c, cv, &group, a.who(), &part(501)),
        NONE,
        "OffsetCommit with generation {gen2}"
    );

    // Once the group is empty, simple commits are accepted and old members are unknown.
    let lv = ctx.max_version(ApiKey::LeaveGroup);
    let l = leave(&mut c, lv, &group, &[(&a_id, None)]);
    assert_code!(l.error_code, NONE, "LeaveGroup");
    let st = wait_state(&ctx, &mut c, &group, "Empty", Duration::from_secs(10));
    assert_eq!(st, "Empty", "state after the only member left");
    check_code!(
        fails,
        commit_code(&mut c, cv, &group, SIMPLE, &part(600)),
        NONE,
        "simple OffsetCommit to the now empty group"
    );
    check_code!(
        fails,
        commit_code(&mut c, cv, &group, a.who(), &part(601)),
        UNKNOWN_MEMBER_ID,
        "OffsetCommit by the member that left"
    );
    let f = committed(&ctx, &mut c, &group, &t.name, 0);
    if f.offset != 600 {
        fails.push(format!("committed offset {} (expected 600)", f.offset));
    }
    assert_no_failures(&fails);
}

#[test]
fn offset_fetch_several_groups_v8() {
    let ctx = group_ctx(&[]);
    let fvs = ctx.versions(ApiKey::OffsetFetch, 8, 9);
    assert!(
        !fvs.is_empty(),
        "OffsetFetch v8+ (several groups per request) is not advertised"
    );
    let t = ctx.topic("ofmulti", 2, &[]);
    let u = ctx.topic("ofmulti-u", 1, &[]);
    let mut c = ctx.client();
    let (g1, g2, g3) = (
        unique_group("ofm1"),
        unique_group("ofm2"),
        unique_group("ofm3"),
    );
    wait_coordinator(&ctx, &mut c, &g1);
    commit_ok(
        &ctx,
        &mut c,
        &g1,
        SIMPLE,
        &[
            (&t.name, 0, 10, 1, Some("g1-0")),
            (&t.name, 1, 11, 1, Some("g1-1")),
        ],
    );
    commit_ok(
        &ctx,
        &mut c,
        &g2,
        SIMPLE,
        &[(&t.name, 0, 20, 2, Some("g2-0")), (&u.name, 0, 21, 2, None)],
    );
    let mut fails: Vec<String> = Vec::new();
    for fv in fvs {
        let tp_all: [(&str, &[i32]); 1] = [(&t.name, &[0, 1])];
        let tp_0: [(&str, &[i32]); 1] = [(&t.name, &[0])];
        let res = offset_fetch_multi(
            &mut c,
            fv,
            &[(&g1, Some(&tp_all)), (&g2, None), (&g3, Some(&tp_0))],
        );
        let get = |g: &str| res.iter().find(|(id, ..)| id == g);
        if res.len() != 3 {
            fails.push(format!(
                "OffsetFetch v{fv}: 3 groups asked, {} answered",
                res.len()
            ));
        }
        let mut pairs = |g: &str, want: Vec<(String, i32, i64, Option<String>)>| match get(g) {
            None => fails.push(format!("OffsetFetch v{fv}: no answer for group {g}")),
            Some((_, e, f)) => {
                check_code!(fails, *e, NONE, "OffsetFetch v{fv} group {g}");
                let mut got: Vec<(String, i32, i64, Option<String>)> = f
                    .iter()
                    .map(|x| (x.topic.clone(), x.partition, x.offset, x.metadata.clone()))
                    .collect();
                got.sort();
                if got != want {
                    fails.push(format!(
                        "OffsetFetch v{fv} group {g}: {got:?}, expected {want:?}"
                    ));
                }
            }
        };
        pairs(
            &g1,
            vec![
                (t.name.clone(), 0, 10, Some("g1-0".into())),
                (t.name.clone(), 1, 11, Some("g1-1".into())),
            ],
        );
        let mut w2 = vec![
            (t.name.clone(), 0, 20, Some("g2-0".into())),
            (u.name.clone(), 0, 21, Some(String::new())),
        ];
        w2.sort();
        pairs(&g2, w2);
        pairs(&g3, vec![(t.name.clone(), 0, -1, Some(String::new()))]);
    }
    assert_no_failures(&fails);
}

/// Requests on one connection are processed in order: each OffsetFetch pipelined after
/// an OffsetCommit sees that commit.
#[test]
fn pipelined_commits_and_fetches_are_ordered() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("ocpipe", 1, &[]);
    let group = unique_group("ocpipe");
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, &group);
    let cv = ctx.max_version(ApiKey::OffsetCommit);
    let fv = ctx.max_version(ApiKey::OffsetFetch);
    let mut sent = Vec::new();
    for i in 0..25i64 {
        let md = format!("pipe-{i}");
        let cc = c.send(
            cv,
            &commit_req(cv, &group, SIMPLE, &[(&t.name, 0, i * 3, -1, Some(&md))]),
        );
        let fr = {
            let g = kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup::default()
                .with_group_id(gid(&group))
                .with_topics(Some(vec![
                    kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics::default()
                        .with_name(tn(&t.name))
                        .with_partition_indexes(vec![0]),
                ]));
            let mut r = kafka_protocol::messages::OffsetFetchRequest::default();
            if fv >= 8 {
                r = r.with_groups(vec![g]);
            } else {
                r = r.with_group_id(gid(&group)).with_topics(Some(vec![
                    kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic::default()
                        .with_name(tn(&t.name))
                        .with_partition_indexes(vec![0]),
                ]));
            }
            r
        };
        let fc = c.send(fv, &fr);
        sent.push((i, cc, fc));
    }
    let mut fails: Vec<String> = Vec::new();
    for (i, cc, fc) in sent {
        let cr: OffsetCommitResponse = c.recv(ApiKey::OffsetCommit as i16, cv, cc);
        let e = cr
            .topics
            .first()
            .and_then(|t| t.partitions.first())
            .map(|p| p.error_code);
        if e != Some(NONE) {
            fails.push(format!("pipelined OffsetCommit #{i}: {e:?}"));
        }
        let fr: OffsetFetchResponse = c.recv(ApiKey::OffsetFetch as i16, fv, fc);
        let got = if fv >= 8 {
            fr.groups
                .first()
                .and_then(|g| g.topics.first())
                .and_then(|t| t.partitions.first())
                .map(|p| (p.committed_offset, opt_s(&p.metadata)))
        } else {
            fr.topics
                .first()
                .and_then(|t| t.partitions.first())
                .map(|p| (p.committed_offset, opt_s(&p.metadata)))
        };
        let want = (i * 3, Some(format!("pipe-{i}")));
        if got.as_ref() != Some(&want) {
            fails.push(format!(
                "pipelined OffsetFetch #{i} (right after commit #{i}): {got:?}, expected {want:?}"
            ));
        }
    }
    // Not pipelined, the last commit is visible.
    let f = committed(&ctx, &mut c, &group, &t.name, 0);
    if (f.offset, f.metadata.as_deref()) != (72, Some("pipe-24")) {
        fails.push(format!(
            "OffsetFetch after all pipelined responses: {f:?}, expected offset 72 \"pipe-24\""
        ));
    }
    assert_no_failures(&fails);
}

/// Committed offsets (and deletions) survive a clean restart and a kill -9 right after
/// the commit was acknowledged.
#[test]
fn committed_offsets_survive_restart_and_kill9() {
    let mut ctx = group_ctx(&[]);
    if ctx.external() {
        eprintln!("skipped for an external broker: the suite cannot restart it");
        return;
    }
    let t = ctx.topic("ocdur", 2, &[]);
    let (g1, g2, g3) = (
        unique_group("dur1"),
        unique_group("dur2"),
        unique_group("dur3"),
    );
    {
        let mut c = ctx.client();
        wait_coordinator(&ctx, &mut c, &g1);
        commit_ok(
            &ctx,
            &mut c,
            &g1,
            SIMPLE,
            &[
                (&t.name, 0, 42, 3, Some("g1-p0")),
                (&t.name, 1, 43, 3, None),
            ],
        );
        // A group with a member commits with its generation.
        let m = stable_member(
            &ctx,
            &JoinSpec::consumer(&g2, &[&t.name]),
            assignment(&[(&t.name, &[0, 1])]),
        );
        let who = m.who();
        let gen = m.generation;
        let id = m.member_id.clone();
        commit_ok(
            &ctx,
            &mut c,
            &g2,
            who,
            &[(&t.name, 1, 77, 4, Some("member"))],
        );
        let lv = ctx.max_version(ApiKey::LeaveGroup);
        assert_code!(
            leave(&mut c, lv, &g2, &[(&id, None)]).error_code,
            NONE,
            "LeaveGroup (generation {gen})"
        );
        // A deleted group stays deleted.
        commit_ok(
            &ctx,
            &mut c,
            &g3,
            SIMPLE,
            &[(&t.name, 0, 5, -1, Some("gone"))],
        );
        let dv = ctx.max_version(ApiKey::DeleteGroups);
        assert_code!(
            delete_group_code(&mut c, dv, &g3),
            NONE,
            "DeleteGroups of an empty group"
        );
    }
    let check = |ctx: &Ctx, after: &str, p0: (i64, &str)| {
        let mut c = ctx.client();
        wait_coordinator(ctx, &mut c, &g1);
        let mut fails: Vec<String> = Vec::new();
        let fv = ctx.max_version(ApiKey::OffsetFetch);
        let want = [
            (&g1, 0, p0.0, 3, p0.1.to_string()),
            (&g1, 1, 43, 3, String::new()),
            (&g2, 1, 77, 4, "member".to_string()),
            (&g2, 0, -1, -1, String::new()),
            (&g3, 0, -1, -1, String::new()),
        ];
        for (g, p, off, ep, md) in want {
            let (e, f) = offset_fetch_raw(&mut c, fv, g, Some(&[(&t.name, &[p])]));
            check_code!(fails, e, NONE, "OffsetFetch v{fv} for {g} after {after}");
            let got = find_fetched(&f, &t.name, p)
                .map(|x| (x.offset, x.leader_epoch, x.metadata.clone()));
            if got != Some((off, ep, Some(md.clone()))) {
                fails.push(format!(
                    "after {after}: group {g} {}/{p}: {got:?}, expected ({off}, {ep}, {md:?})",
                    t.name
                ));
            }
        }
        let st = group_state(ctx, &mut c, &g3);
        if st != "Dead" {
            fails.push(format!(
                "after {after}: deleted group {g3} is {st:?} (expected Dead)"
            ));
        }
        assert_no_failures(&fails);
    };
    ctx.broker.restart();
    check(&ctx, "a clean restart", (42, "g1-p0"));
    {
        let mut c = ctx.client();
        commit_ok(
            &ctx,
            &mut c,
            &g1,
            SIMPLE,
            &[(&t.name, 0, 1000, 3, Some("before kill -9"))],
        );
    }
    ctx.broker.kill9_restart();
    check(&ctx, "kill -9 and restart", (1000, "before kill -9"));
    ctx.assert_alive("restarts");
}

/// `__consumer_offsets` is internal: hidden from all-topics Metadata on tern (Kafka lists
/// it, flagged internal), internal when asked by name, and clients cannot produce to it.
#[test]
fn consumer_offsets_topic_is_internal() {
    let ctx = group_ctx(&[]);
    let t = ctx.topic("ocint", 1, &[]);
    let group = unique_group("ocint");
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, &group);
    commit_ok(
        &ctx,
        &mut c,
        &group,
        SIMPLE,
        &[(&t.name, 0, 9, -1, Some("before"))],
    );
    let mut fails: Vec<String> = Vec::new();
    for v in ctx.versions_req(ApiKey::Metadata, 1, 13) {
        let md = metadata(&mut c, v, None, false);
        let listed = md
            .topics
            .iter()
            .find(|x| x.name.as_ref().map(|n| n.0.as_str()) == Some(OFFSETS_TOPIC));
        match listed {
            Some(x) if !ctx.external() => fails.push(format!(
                "Metadata v{v} (all topics) lists {OFFSETS_TOPIC} (internal: {})",
                x.is_internal
            )),
            Some(x) if !x.is_internal => fails.push(format!(
                "Metadata v{v} lists {OFFSETS_TOPIC} as not internal"
            )),
            _ => {}
        }
        let md = metadata(&mut c, v, Some(&[OFFSETS_TOPIC]), false);
        match md.topics.as_slice() {
            [x] => {
                check_code!(
                    fails,
                    x.error_code,
                    NONE,
                    "Metadata v{v} for {OFFSETS_TOPIC} by name"
                );
                if !x.is_internal {
                    fails.push(format!(
                        "Metadata v{v}: {OFFSETS_TOPIC} asked by name is not marked internal"
                    ));
                }
                if x.error_code == NONE && x.partitions.is_empty() {
                    fails.push(format!("Metadata v{v}: {OFFSETS_TOPIC} has no partitions"));
                }
            }
            other => fails.push(format!(
                "Metadata v{v} for {OFFSETS_TOPIC} by name: {} topics",
                other.len()
            )),
        }
    }
    // Produce by name (v3..=12) and, where advertised, by topic id (v13).
    let id = {
        let v = ctx.max_version(ApiKey::Metadata);
        metadata(&mut c, v, Some(&[OFFSETS_TOPIC]), false)
            .topics
            .first()
            .map(|x| x.topic_id)
            .unwrap_or_default()
    };
    let topic = Topic {
        name: OFFSETS_TOPIC.to_string(),
        id,
    };
    let mut pvs: Vec<i16> = ctx
        .versions(ApiKey::Produce, 3, 12)
        .last()
        .copied()
        .into_iter()
        .collect();
    if !id.is_nil() {
        pvs.extend(ctx.versions(ApiKey::Produce, 13, 13));
    }
    for pv in pvs {
        let resp = c.call(
            pv,
            &produce_req(pv, &topic, 0, batch_of(1, crate::broker::now_ms()), -1),
        );
        let e = resp
            .responses
            .first()
            .and_then(|r| r.partition_responses.first())
            .map(|p| p.error_code)
            .unwrap_or(-1);
        check_code_in!(
            fails,
            e,
            &[INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED],
            "Produce v{pv} to {OFFSETS_TOPIC}"
        );
    }
    // The coordinator is unharmed.
    let f = committed(&ctx, &mut c, &group, &t.name, 0);
    if (f.offset, f.metadata.as_deref()) != (9, Some("before")) {
        fails.push(format!(
            "committed offset after producing to {OFFSETS_TOPIC}: {f:?}"
        ));
    }
    assert_no_failures(&fails);
}

#[test]
fn offsets_of_an_empty_group_expire_after_the_retention() {
    // tern only: the retention is a broker setting (0 minutes: expire on the next tick).
    let ctx = group_ctx(&["--offsets-retention-minutes", "0"]);
    if ctx.external() {
        eprintln!("skipped for an external broker: needs --offsets-retention-minutes 0");
        return;
    }
    let t = ctx.topic("ocexp", 1, &[]);
    let (idle, busy) = (unique_group("exp-idle"), unique_group("exp-busy"));
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, &idle);
    commit_ok(&ctx, &mut c, &idle, SIMPLE, &[(&t.name, 0, 9, 0, None)]);
    // A group with a live member keeps its offsets whatever their age.
    let m = stable_member(
        &ctx,
        &JoinSpec::consumer(&busy, &[&t.name]),
        assignment(&[(&t.name, &[0])]),
    );
    commit_ok(&ctx, &mut c, &busy, m.who(), &[(&t.name, 0, 5, 0, None)]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let gone = committed(&ctx, &mut c, &idle, &t.name, 0).offset == -1;
        if gone {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the empty group's offsets never expired"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(
        committed(&ctx, &mut c, &busy, &t.name, 0).offset,
        5,
        "a group with members keeps its offsets"
    );
}
