//! KIP-848 consumer groups on the wire: ConsumerGroupHeartbeat v0–1 and
//! ConsumerGroupDescribe v0–1, the request checks Kafka makes, member-epoch fencing,
//! revoke-before-assign between two members, leaving, and OffsetCommit v9's member
//! epochs (STALE_MEMBER_EPOCH behind, FENCED_MEMBER_EPOCH ahead, ILLEGAL_GENERATION
//! before v9).

use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, GroupId, OffsetCommitRequest,
};
use uuid::Uuid;

use crate::client::Client;
use crate::groups::*;
use crate::ops::*;

const FENCED_MEMBER_EPOCH: i16 = 110;
const UNSUPPORTED_ASSIGNOR: i16 = 112;
const STALE_MEMBER_EPOCH: i16 = 113;
const INVALID_REGULAR_EXPRESSION: i16 = 128;

struct Member {
    group: String,
    id: String,
    epoch: i32,
    owned: Vec<(Uuid, Vec<i32>)>,
}

fn owned_field(owned: &[(Uuid, Vec<i32>)]) -> Vec<TopicPartitions> {
    owned
        .iter()
        .map(|(id, ps)| {
            TopicPartitions::default()
                .with_topic_id(*id)
                .with_partitions(ps.clone())
        })
        .collect()
}

fn join_request(group: &str, member_id: &str, topics: &[&str]) -> ConsumerGroupHeartbeatRequest {
    ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_member_id(sb(member_id))
        .with_member_epoch(0)
        .with_rebalance_timeout_ms(30_000)
        .with_subscribed_topic_names(Some(topics.iter().map(|t| tn(t)).collect()))
        .with_topic_partitions(Some(vec![]))
}

fn heartbeat(c: &mut Client, v: i16, m: &mut Member) -> ConsumerGroupHeartbeatResponse {
    let request = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(sb(&m.group)))
        .with_member_id(sb(&m.id))
        .with_member_epoch(m.epoch)
        .with_rebalance_timeout_ms(-1)
        .with_topic_partitions(Some(owned_field(&m.owned)));
    let r = c.call(v, &request);
    if r.error_code == NONE {
        m.epoch = r.member_epoch;
        if let Some(a) = &r.assignment {
            m.owned = a
                .topic_partitions
                .iter()
                .map(|tp| (tp.topic_id, tp.partitions.clone()))
                .collect();
        }
    }
    r
}

fn partitions(m: &Member) -> usize {
    m.owned.iter().map(|(_, ps)| ps.len()).sum()
}

#[test]
fn consumer_group_heartbeat_assigns_reconciles_and_fences() {
    let ctx = Ctx::with_args(&["--group-consumer-heartbeat-interval-ms", "250"]);
    let t = ctx.topic("cgh", 4, &[]);
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::ConsumerGroupHeartbeat, 0, 1) {
        let group = unique_group(&format!("cgh-v{v}"));
        wait_coordinator(&ctx, &mut c, &group);
        // Kafka's request checks: INVALID_REQUEST with its message.
        let bad = [
            join_request(&group, "m", &[&t.name]).with_rebalance_timeout_ms(-1),
            join_request(&group, "m", &[&t.name]).with_topic_partitions(None),
            join_request(&group, "m", &[]),
            join_request(&group, "m", &[&t.name]).with_member_epoch(-3),
            join_request(&group, "m", &[&t.name]).with_instance_id(Some(sb(""))),
        ];
        for (i, request) in bad.iter().enumerate() {
            let r = c.call(v, request);
            assert_code!(
                r.error_code,
                INVALID_REQUEST,
                "v{v} malformed heartbeat #{i}"
            );
            assert!(
                r.error_message.is_some(),
                "v{v} #{i}: Kafka names what is wrong"
            );
        }
        if v >= 1 {
            let r = c.call(v, &join_request(&group, "", &[&t.name]));
            assert_code!(
                r.error_code,
                INVALID_REQUEST,
                "v{v}: the client names its member id"
            );
        }
        let r = c.call(
            v,
            &join_request(&group, "m", &[&t.name]).with_server_assignor(Some(sb("sticky"))),
        );
        assert_code!(r.error_code, UNSUPPORTED_ASSIGNOR, "v{v}: unknown assignor");
        if v >= 1 {
            let regex = join_request(&group, "m", &[]).with_subscribed_topic_regex(Some(sb("(")));
            let r = c.call(v, &regex.with_subscribed_topic_names(None));
            assert_code!(
                r.error_code,
                INVALID_REGULAR_EXPRESSION,
                "v{v}: a bad regex"
            );
        }

        // The first member gets every partition at epoch 1.
        let a_id = if v == 0 {
            String::new()
        } else {
            Uuid::new_v4().to_string()
        };
        let r = c.call(v, &join_request(&group, &a_id, &[&t.name]));
        assert_code!(r.error_code, NONE, "v{v}: join");
        let a_id = r.member_id.as_deref().unwrap_or_default().to_string();
        assert!(!a_id.is_empty(), "v{v}: the answer names the member");
        assert_eq!(r.member_epoch, 1);
        assert!(
            r.heartbeat_interval_ms == 250,
            "the broker's interval: {}",
            r.heartbeat_interval_ms
        );
        let assigned = r
            .assignment
            .expect("a join is answered with the assignment");
        assert_eq!(assigned.topic_partitions.len(), 1);
        assert_eq!(
            assigned.topic_partitions[0].topic_id, t.id,
            "assignments name topic ids"
        );
        let mut a = Member {
            group: group.clone(),
            id: a_id,
            epoch: 1,
            owned: vec![(t.id, assigned.topic_partitions[0].partitions.clone())],
        };
        assert_eq!(partitions(&a), 4);

        // Epochs ahead, or behind and not the previous one, are fenced; strangers unknown.
        let mut ahead = Member {
            epoch: 7,
            owned: vec![],
            id: a.id.clone(),
            group: group.clone(),
        };
        assert_code!(
            heartbeat(&mut c, v, &mut ahead).error_code,
            FENCED_MEMBER_EPOCH,
            "v{v}: epoch ahead"
        );
        let mut stranger = Member {
            epoch: 1,
            owned: vec![],
            id: "nobody".into(),
            group: group.clone(),
        };
        assert_code!(
            heartbeat(&mut c, v, &mut stranger).error_code,
            UNKNOWN_MEMBER_ID,
            "v{v}: unknown member"
        );

        // A second member: nothing is free until a revokes two partitions.
        let b_id = if v == 0 {
            String::new()
        } else {
            Uuid::new_v4().to_string()
        };
        let r = c.call(v, &join_request(&group, &b_id, &[&t.name]));
        assert_code!(r.error_code, NONE, "v{v}: second join");
        let mut b = Member {
            group: group.clone(),
            id: r.member_id.as_deref().unwrap_or_default().to_string(),
            epoch: r.member_epoch,
            owned: vec![],
        };
        assert_eq!(b.epoch, 2, "the join bumped the group epoch");
        let given: usize = r
            .assignment
            .iter()
            .flat_map(|a| &a.topic_partitions)
            .map(|tp| tp.partitions.len())
            .sum();
        assert_eq!(given, 0, "v{v}: b gets nothing a still owns");
        let r = heartbeat(&mut c, v, &mut a);
        assert_code!(r.error_code, NONE, "v{v}: a's heartbeat");
        assert_eq!(a.epoch, 1, "a keeps its epoch until it has revoked");
        assert_eq!(partitions(&a), 2, "a is told to keep two");
        // a reports the two released: it advances, and b gets them.
        heartbeat(&mut c, v, &mut a);
        assert_eq!(a.epoch, 2);
        heartbeat(&mut c, v, &mut b);
        assert_eq!(partitions(&b), 2, "v{v}: b gets the released partitions");

        // ConsumerGroupDescribe shows both, Stable, with epochs and assignments.
        for dv in ctx.versions_req(ApiKey::ConsumerGroupDescribe, 0, 1) {
            let d = c.call(
                dv,
                &ConsumerGroupDescribeRequest::default().with_group_ids(vec![GroupId(sb(&group))]),
            );
            let g = &d.groups[0];
            assert_code!(g.error_code, NONE, "describe v{dv}");
            assert_eq!(g.group_state.as_str(), "Stable");
            assert_eq!((g.group_epoch, g.assignment_epoch), (2, 2));
            assert_eq!(g.assignor_name.as_str(), "uniform");
            assert_eq!(g.members.len(), 2);
            for m in &g.members {
                assert_eq!(m.member_epoch, 2);
                assert_eq!(m.assignment.topic_partitions[0].topic_name.as_str(), t.name);
                assert_eq!(m.assignment, m.target_assignment);
                if dv >= 1 {
                    assert_eq!(m.member_type, 1, "a consumer-protocol member");
                }
            }
        }

        // OffsetCommit v9 checks the member epoch; older versions answer ILLEGAL_GENERATION.
        let commit = |epoch: i32| {
            OffsetCommitRequest::default()
                .with_group_id(GroupId(sb(&group)))
                .with_generation_id_or_member_epoch(epoch)
                .with_member_id(sb(&a.id))
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(tn(&t.name))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(5)])])
        };
        for (epoch, version, expected) in [
            (2, 9, NONE),
            (1, 9, STALE_MEMBER_EPOCH),
            (3, 9, FENCED_MEMBER_EPOCH),
            (1, 8, ILLEGAL_GENERATION),
        ] {
            if !ctx.supports(ApiKey::OffsetCommit, version) {
                continue;
            }
            let r = c.call(version, &commit(epoch));
            assert_code!(
                r.topics[0].partitions[0].error_code,
                expected,
                "OffsetCommit v{version} with member epoch {epoch}"
            );
        }

        // b leaves (epoch -1): answered -1; a gets all four back at the next epoch.
        b.epoch = -1;
        let r = heartbeat(&mut c, v, &mut b);
        assert_code!(r.error_code, NONE, "v{v}: leave");
        assert_eq!(r.member_epoch, -1);
        heartbeat(&mut c, v, &mut a);
        assert_eq!((a.epoch, partitions(&a)), (3, 4), "v{v}: a after b left");
    }
}

const RESOURCE_GROUP: i8 = 32;
const SOURCE_DYNAMIC_GROUP_CONFIG: i8 = 8;
const OP_APPEND: i8 = 2;

/// One group config's (value, source), through the newest DescribeConfigs.
fn group_config(ctx: &Ctx, c: &mut Client, group: &str, key: &str) -> (String, i8) {
    let v = ctx.max_version(ApiKey::DescribeConfigs);
    let res = describe_configs(c, v, RESOURCE_GROUP, group, Some(&[key]), true);
    assert_code!(res.error_code, NONE, "DescribeConfigs v{v} group {group}");
    let cfg = find_config(&res, key).unwrap_or_else(|| panic!("group {group} has no {key}"));
    if v >= 1 {
        assert_eq!(
            cfg.synonyms.first().map(|s| s.source),
            Some(cfg.config_source),
            "{key}: the first synonym is where the value comes from"
        );
    }
    (
        cfg.value
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default(),
        cfg.config_source,
    )
}

#[test]
fn group_configs_are_described_altered_and_told_on_the_next_heartbeat() {
    let ctx = Ctx::with_args(&["--group-consumer-heartbeat-interval-ms", "250"]);
    let t = ctx.topic("gcfg", 2, &[]);
    let mut c = ctx.client();
    let group = unique_group("gcfg");
    // Every group config of a group that does not exist yet: the broker's settings.
    for v in ctx.versions_req(ApiKey::DescribeConfigs, 0, 4) {
        let res = describe_configs(&mut c, v, RESOURCE_GROUP, &group, None, v >= 1);
        assert_code!(res.error_code, NONE, "DescribeConfigs v{v}");
        for name in [
            "consumer.session.timeout.ms",
            "consumer.heartbeat.interval.ms",
            "share.session.timeout.ms",
            "share.heartbeat.interval.ms",
            "share.record.lock.duration.ms",
            "share.auto.offset.reset",
        ] {
            let cfg = find_config(&res, name).unwrap_or_else(|| panic!("v{v}: no {name}"));
            assert_eq!(cfg.config_source, SOURCE_DEFAULT_CONFIG, "v{v} {name}");
            assert!(!cfg.read_only, "v{v} {name} is dynamic");
        }
        let res = describe_configs(&mut c, v, RESOURCE_GROUP, "", None, false);
        assert_code!(
            res.error_code,
            INVALID_REQUEST,
            "v{v}: a group needs a name"
        );
    }
    assert_eq!(
        group_config(&ctx, &mut c, &group, "consumer.heartbeat.interval.ms"),
        ("250".to_string(), SOURCE_DEFAULT_CONFIG)
    );
    for v in ctx.versions_req(ApiKey::IncrementalAlterConfigs, 0, 1) {
        // Refused as a whole with INVALID_CONFIG, nothing stored: an unknown name, a
        // value that does not parse, one out of bounds, a session not longer than its
        // heartbeat interval, APPEND on a config that is not a list.
        let refused: [&[(&str, i8, Option<&str>)]; 5] = [
            &[("consumer.heartbeat.intervals", OP_SET, Some("1000"))],
            &[("share.auto.offset.reset", OP_SET, Some("none"))],
            &[("share.record.lock.duration.ms", OP_SET, Some("999"))],
            &[
                ("consumer.session.timeout.ms", OP_SET, Some("6000")),
                ("consumer.heartbeat.interval.ms", OP_SET, Some("6000")),
            ],
            &[("consumer.heartbeat.interval.ms", OP_APPEND, Some("1"))],
        ];
        for (i, ops) in refused.iter().enumerate() {
            let (code, message) = incremental_alter(&mut c, v, RESOURCE_GROUP, &group, ops, false);
            assert_code!(code, INVALID_CONFIG, "v{v} refused #{i}");
            assert!(message.is_some(), "v{v} #{i}: the refusal says why");
        }
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_GROUP,
            "",
            &[("consumer.heartbeat.interval.ms", OP_SET, Some("1000"))],
            false,
        );
        assert_code!(code, INVALID_REQUEST, "v{v}: no default group resource");
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_GROUP,
            &group,
            &[("consumer.heartbeat.interval.ms", OP_SET, Some("1500"))],
            true,
        );
        assert_code!(code, NONE, "v{v} validate only");
        assert_eq!(
            group_config(&ctx, &mut c, &group, "consumer.heartbeat.interval.ms").1,
            SOURCE_DEFAULT_CONFIG,
            "v{v}: validate_only stores nothing"
        );
    }
    let v = ctx.max_version(ApiKey::IncrementalAlterConfigs);
    let (code, _) = incremental_alter(
        &mut c,
        v,
        RESOURCE_GROUP,
        &group,
        &[("consumer.heartbeat.interval.ms", OP_SET, Some("1500"))],
        false,
    );
    assert_code!(code, NONE, "set the group's heartbeat interval");
    assert_eq!(
        group_config(&ctx, &mut c, &group, "consumer.heartbeat.interval.ms"),
        ("1500".to_string(), SOURCE_DYNAMIC_GROUP_CONFIG)
    );
    // A member joining is told the group's interval, and the broker's once it is gone.
    let hv = ctx.max_version(ApiKey::ConsumerGroupHeartbeat);
    wait_coordinator(&ctx, &mut c, &group);
    let r = c.call(hv, &join_request(&group, "m", &[&t.name]));
    assert_code!(r.error_code, NONE, "join");
    assert_eq!(r.heartbeat_interval_ms, 1500, "the group's own interval");
    let mut m = Member {
        group: group.clone(),
        id: r
            .member_id
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default(),
        epoch: r.member_epoch,
        owned: Vec::new(),
    };
    let (code, _) = incremental_alter(
        &mut c,
        v,
        RESOURCE_GROUP,
        &group,
        &[("consumer.heartbeat.interval.ms", OP_DELETE, None)],
        false,
    );
    assert_code!(code, NONE, "delete the override");
    let r = heartbeat(&mut c, hv, &mut m);
    assert_code!(r.error_code, NONE, "heartbeat");
    assert_eq!(
        r.heartbeat_interval_ms, 250,
        "back to the broker's interval"
    );
    // The legacy AlterConfigs replaces the whole set.
    let av = ctx.max_version(ApiKey::AlterConfigs);
    let (code, _) = alter_configs(
        &mut c,
        av,
        RESOURCE_GROUP,
        &group,
        &[("share.auto.offset.reset", "earliest")],
        false,
    );
    assert_code!(code, NONE, "AlterConfigs v{av}");
    assert_eq!(
        group_config(&ctx, &mut c, &group, "share.auto.offset.reset"),
        ("earliest".to_string(), SOURCE_DYNAMIC_GROUP_CONFIG)
    );
    let (code, _) = alter_configs(
        &mut c,
        av,
        RESOURCE_GROUP,
        &group,
        &[("consumer.session.timeout.ms", "5")],
        false,
    );
    assert_code!(code, INVALID_CONFIG, "AlterConfigs v{av}: out of bounds");
}

/// The partitions of a `ConsumerProtocolAssignment` (version prefix, then the body).
fn assigned_partitions(raw: &[u8]) -> Vec<i32> {
    use kafka_protocol::protocol::Decodable;
    let mut buf = bytes::Bytes::copy_from_slice(raw);
    let version = bytes::Buf::get_i16(&mut buf);
    let a = kafka_protocol::messages::ConsumerProtocolAssignment::decode(&mut buf, version.min(3))
        .expect("a consumer protocol assignment");
    let mut ps: Vec<i32> = a
        .assigned_partitions
        .iter()
        .flat_map(|tp| tp.partitions.clone())
        .collect();
    ps.sort();
    ps
}

/// Online migration on the wire (Kafka's `group.consumer.migration.policy`): a
/// ConsumerGroupHeartbeat joining a live classic group converts it; the classic
/// member's Heartbeat is then REBALANCE_IN_PROGRESS, its JoinGroup is answered at once
/// with its member epoch as generation, protocol type `consumer` and no leader (the
/// broker assigns), its SyncGroup carries the broker's assignment in the consumer
/// protocol, and its LeaveGroup frees its partitions for the consumer member. With the
/// policy `disabled` the heartbeat is GROUP_ID_NOT_FOUND, as Kafka answers.
#[test]
fn a_live_classic_group_migrates_when_a_consumer_member_joins() {
    for policy in ["disabled", "bidirectional"] {
        let ctx = group_ctx(&[
            "--group-consumer-migration-policy",
            policy,
            "--group-consumer-heartbeat-interval-ms",
            "250",
        ]);
        let t = ctx.topic("mig", 2, &[]);
        let group = unique_group("mig");
        let mut c = ctx.client();
        wait_coordinator(&ctx, &mut c, &group);
        let spec = JoinSpec::consumer(&group, &[&t.name]);
        let mut old = stable_member(&ctx, &spec, assignment(&[(&t.name, &[0, 1])]));
        let mut new = Member {
            group: group.clone(),
            id: Uuid::new_v4().to_string(),
            epoch: 0,
            owned: Vec::new(),
        };
        // A heartbeat refused for its own content converts nothing.
        let refused = join_request(&group, &new.id, &[&t.name]).with_server_assignor(Some(sb("x")));
        let r = c.call(1, &refused);
        assert_code!(
            r.error_code,
            UNSUPPORTED_ASSIGNOR,
            "{policy}: an unknown assignor"
        );
        assert_code!(
            crate::groups::heartbeat(&ctx, &mut old),
            NONE,
            "{policy}: still a classic group"
        );
        let r = c.call(1, &join_request(&group, &new.id, &[&t.name]));
        if policy == "disabled" {
            assert_code!(r.error_code, GROUP_ID_NOT_FOUND, "no online upgrade");
            assert_code!(
                crate::groups::heartbeat(&ctx, &mut old),
                NONE,
                "the classic group goes on"
            );
            continue;
        }
        assert_code!(
            r.error_code,
            NONE,
            "the consumer member joins the live group"
        );
        new.epoch = r.member_epoch;
        assert_eq!(
            partitions(&new),
            0,
            "both partitions are still the classic member's"
        );
        assert_code!(
            self::heartbeat(&mut c, 1, &mut new).error_code,
            NONE,
            "the consumer member heartbeats"
        );
        assert_code!(
            crate::groups::heartbeat(&ctx, &mut old),
            REBALANCE_IN_PROGRESS,
            "the classic member is told to rejoin"
        );
        // It rejoins (eagerly: owning nothing) and is answered at once.
        let r = rejoin(&ctx, &mut old);
        assert_code!(r.error_code, NONE, "the classic member's JoinGroup");
        assert_eq!(opt_s(&r.protocol_type).as_deref(), Some("consumer"));
        assert_eq!(opt_s(&r.protocol_name).as_deref(), Some("range"));
        assert!(
            r.leader.is_empty() && r.members.is_empty(),
            "nobody leads: {r:?}"
        );
        assert_eq!(
            r.generation_id, new.epoch,
            "its generation is its member epoch"
        );
        let s = sync_member(&ctx, &mut old, &[]);
        assert_code!(s.error_code, NONE, "the classic member's SyncGroup");
        let kept = assigned_partitions(&s.assignment);
        assert_eq!(kept.len(), 1, "one partition each: {kept:?}");
        assert_code!(crate::groups::heartbeat(&ctx, &mut old), NONE, "settled");
        let r = self::heartbeat(&mut c, 1, &mut new);
        assert_code!(r.error_code, NONE, "the consumer member heartbeats again");
        let theirs: Vec<i32> = new.owned.iter().flat_map(|(_, ps)| ps.clone()).collect();
        assert_eq!(theirs.len(), 1, "the released partition: {theirs:?}");
        assert_ne!(theirs, kept, "never the same partition");
        // A wrong generation is ILLEGAL_GENERATION, as for a classic group.
        let v = ctx.max_version(ApiKey::Heartbeat);
        let stale = heartbeat_v(
            &mut old.c,
            v,
            &group,
            old.generation - 1,
            &old.member_id,
            None,
        );
        assert_code!(stale, ILLEGAL_GENERATION, "a stale generation");
        // The classic member leaves; the consumer member gets everything.
        let v = ctx.max_version(ApiKey::LeaveGroup);
        let r = leave(&mut old.c, v, &group, &[(&old.member_id, None)]);
        assert_code!(r.error_code, NONE, "LeaveGroup");
        let mut all = 0;
        for _ in 0..20 {
            self::heartbeat(&mut c, 1, &mut new);
            all = partitions(&new);
            if all == 2 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        assert_eq!(all, 2, "the consumer member holds both partitions");
    }
}
