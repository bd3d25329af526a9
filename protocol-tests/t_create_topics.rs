//! CreateTopics v2-7.

use std::time::Duration;

use kafka_protocol::messages::ApiKey;

use crate::broker::unique_name;
use crate::ops::*;

fn assert_not_created(ctx: &Ctx, c: &mut crate::client::Client, name: &str, what: &str) {
    for _ in 0..2 {
        let t = topic_metadata(ctx, c, name);
        assert_code!(
            t.error_code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "{what}: topic {name} must not exist"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn create_topics_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let brokers = {
        let v = ctx.max_version(ApiKey::Metadata);
        metadata(&mut c, v, Some(&[]), false).brokers.len()
    };
    for v in ctx.versions_req(ApiKey::CreateTopics, 2, 7) {
        // Normal creation with configs.
        let name = unique_name(&format!("ct-v{v}"));
        let resp = create_topics(
            &mut c,
            v,
            vec![creatable(
                &name,
                3,
                1,
                &[("retention.ms", "3600000"), ("cleanup.policy", "delete")],
            )],
            false,
        );
        assert_eq!(resp.topics.len(), 1, "CreateTopics v{v}: results");
        let r = &resp.topics[0];
        assert_eq!(r.name.0.as_str(), name, "CreateTopics v{v}: result name");
        assert_code!(
            r.error_code,
            NONE,
            "CreateTopics v{v} {name} ({:?})",
            r.error_message
        );
        if v >= 5 {
            assert_eq!(
                r.num_partitions, 3,
                "CreateTopics v{v}: num_partitions in result"
            );
            assert_eq!(
                r.replication_factor, 1,
                "CreateTopics v{v}: replication_factor in result"
            );
            assert_code!(
                r.topic_config_error_code,
                NONE,
                "CreateTopics v{v}: topic_config_error_code"
            );
            let cfgs = r
                .configs
                .as_ref()
                .unwrap_or_else(|| panic!("CreateTopics v{v}: null configs in result"));
            let ret = cfgs
                .iter()
                .find(|c| c.name.as_str() == "retention.ms")
                .unwrap_or_else(|| panic!("CreateTopics v{v}: result configs lack retention.ms"));
            assert_eq!(
                ret.value.as_deref(),
                Some("3600000"),
                "CreateTopics v{v}: retention.ms in result"
            );
            assert_eq!(
                ret.config_source, SOURCE_DYNAMIC_TOPIC_CONFIG,
                "CreateTopics v{v}: retention.ms source"
            );
        }
        if v >= 7 {
            assert!(!r.topic_id.is_nil(), "CreateTopics v{v}: nil topic id");
        }
        let tm = wait_for_topic(&ctx, &mut c, &name, 3);
        if v >= 7 && ctx.max_version(ApiKey::Metadata) >= 10 {
            assert_eq!(
                tm.topic_id, r.topic_id,
                "CreateTopics v{v}: topic id differs from Metadata's"
            );
        }
        let (val, src) = topic_config(&ctx, &mut c, &name, "retention.ms");
        assert_eq!(
            val.as_deref(),
            Some("3600000"),
            "retention.ms after CreateTopics v{v}"
        );
        assert_eq!(
            src, SOURCE_DYNAMIC_TOPIC_CONFIG,
            "retention.ms source after CreateTopics v{v}"
        );

        // Duplicate.
        let (code, _) = create_one(&ctx, &mut c, Some(v), creatable(&name, 3, 1, &[]), false);
        assert_code!(
            code,
            TOPIC_ALREADY_EXISTS,
            "CreateTopics v{v} duplicate {name}"
        );
        let (code, _) = create_one(&ctx, &mut c, Some(v), creatable(&name, 1, 1, &[]), true);
        assert_code!(
            code,
            TOPIC_ALREADY_EXISTS,
            "CreateTopics v{v} validate_only duplicate {name}"
        );

        // validate_only does not create.
        let vo = unique_name(&format!("ct-vo-v{v}"));
        let (code, msg) = create_one(
            &ctx,
            &mut c,
            Some(v),
            creatable(&vo, 2, 1, &[("retention.ms", "1000")]),
            true,
        );
        assert_code!(code, NONE, "CreateTopics v{v} validate_only ({msg:?})");
        assert_not_created(
            &ctx,
            &mut c,
            &vo,
            &format!("CreateTopics v{v} validate_only"),
        );

        // Invalid config value / unknown config name.
        for (k, val) in [
            ("retention.ms", "not-a-number"),
            ("cleanup.policy", "sometimes"),
            ("no.such.config", "1"),
        ] {
            let bad = unique_name(&format!("ct-badcfg-v{v}"));
            let (code, _) = create_one(
                &ctx,
                &mut c,
                Some(v),
                creatable(&bad, 1, 1, &[(k, val)]),
                false,
            );
            assert_code!(code, INVALID_CONFIG, "CreateTopics v{v} with {k}={val}");
            assert_not_created(
                &ctx,
                &mut c,
                &bad,
                &format!("CreateTopics v{v} with {k}={val}"),
            );
        }

        // Invalid partition counts.
        for n in [0, -2, -100] {
            let bad = unique_name(&format!("ct-badp-v{v}"));
            let (code, _) = create_one(&ctx, &mut c, Some(v), creatable(&bad, n, 1, &[]), false);
            assert_code!(
                code,
                INVALID_PARTITIONS,
                "CreateTopics v{v} num_partitions={n}"
            );
            assert_not_created(
                &ctx,
                &mut c,
                &bad,
                &format!("CreateTopics v{v} num_partitions={n}"),
            );
        }

        // Invalid replication factors.
        for rf in [0i16, -2, (brokers + 1) as i16] {
            let bad = unique_name(&format!("ct-badrf-v{v}"));
            let (code, _) = create_one(&ctx, &mut c, Some(v), creatable(&bad, 1, rf, &[]), false);
            assert_code!(
                code,
                INVALID_REPLICATION_FACTOR,
                "CreateTopics v{v} replication_factor={rf}"
            );
        }

        // Invalid names.
        for bad in ["bad/name", "..", "with space"] {
            let (code, _) = create_one(&ctx, &mut c, Some(v), creatable(bad, 1, 1, &[]), false);
            assert_code!(
                code,
                INVALID_TOPIC_EXCEPTION,
                "CreateTopics v{v} name {bad:?}"
            );
        }

        // v4+: -1 partitions / replication factor = broker defaults (KIP-464).
        if v >= 4 {
            let dflt = unique_name(&format!("ct-default-v{v}"));
            let resp = create_topics(&mut c, v, vec![creatable(&dflt, -1, -1, &[])], false);
            let r = &resp.topics[0];
            assert_code!(
                r.error_code,
                NONE,
                "CreateTopics v{v} with num_partitions=-1 replication_factor=-1 ({:?})",
                r.error_message
            );
            if v >= 5 {
                assert!(
                    r.num_partitions >= 1,
                    "CreateTopics v{v}: default num_partitions {} in result",
                    r.num_partitions
                );
                assert!(
                    r.replication_factor >= 1,
                    "CreateTopics v{v}: default replication_factor {} in result",
                    r.replication_factor
                );
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(15);
            loop {
                let t = topic_metadata(&ctx, &mut c, &dflt);
                if t.error_code == NONE && !t.partitions.is_empty() {
                    if v >= 5 {
                        assert_eq!(
                            t.partitions.len() as i32,
                            r.num_partitions,
                            "CreateTopics v{v}: default partitions vs Metadata"
                        );
                    }
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "CreateTopics v{v}: default-sized topic never appeared"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }

        // Several topics in one request: each gets its own result.
        let good = unique_name(&format!("ct-multi-v{v}"));
        let resp = create_topics(
            &mut c,
            v,
            vec![
                creatable(&good, 1, 1, &[]),
                creatable(&name, 1, 1, &[]),
                creatable(&good.replace("multi", "multibad"), 0, 1, &[]),
            ],
            false,
        );
        assert_eq!(
            resp.topics.len(),
            3,
            "CreateTopics v{v}: one result per requested topic"
        );
        for r in &resp.topics {
            let want = if r.name.0.as_str() == good {
                NONE
            } else if r.name.0.as_str() == name {
                TOPIC_ALREADY_EXISTS
            } else {
                INVALID_PARTITIONS
            };
            assert_code!(
                r.error_code,
                want,
                "CreateTopics v{v} multi-topic result for {}",
                r.name.0.as_str()
            );
        }
        wait_for_topic(&ctx, &mut c, &good, 1);
    }
}

/// A topic with explicit assignments (partitions and replication factor -1).
fn with_assignments(
    name: &str,
    partitions: i32,
    rf: i16,
    assignments: &[(i32, Vec<i32>)],
) -> kafka_protocol::messages::create_topics_request::CreatableTopic {
    use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
    use kafka_protocol::messages::BrokerId;
    creatable(name, partitions, rf, &[]).with_assignments(
        assignments
            .iter()
            .map(|(index, brokers)| {
                CreatableReplicaAssignment::default()
                    .with_partition_index(*index)
                    .with_broker_ids(brokers.iter().map(|b| BrokerId(*b)).collect())
            })
            .collect(),
    )
}

/// A refused creation: what it tests, partitions, replication factor, assignments, code.
type BadCreate<'a> = (&'a str, i32, i16, Vec<(i32, Vec<i32>)>, i16);

#[test]
fn create_topics_with_manual_assignments() {
    const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let node = ctx.node_id;
    for v in ctx.versions_req(ApiKey::CreateTopics, 2, 7) {
        let name = unique_name(&format!("cta-v{v}"));
        let (code, msg) = create_one(
            &ctx,
            &mut c,
            Some(v),
            with_assignments(&name, -1, -1, &[(0, vec![node]), (1, vec![node])]),
            false,
        );
        assert_code!(code, NONE, "CreateTopics v{v} with assignments ({msg:?})");
        let t = wait_for_topic(&ctx, &mut c, &name, 2);
        for p in &t.partitions {
            let replicas: Vec<i32> = p.replica_nodes.iter().map(|b| b.0).collect();
            assert_eq!(
                replicas,
                vec![node],
                "CreateTopics v{v}: {name}-{}",
                p.partition_index
            );
        }
        let cases: Vec<BadCreate> = vec![
            (
                "with a partition count",
                2,
                -1,
                vec![(0, vec![node])],
                INVALID_REQUEST,
            ),
            (
                "with a replication factor",
                -1,
                1,
                vec![(0, vec![node])],
                INVALID_REQUEST,
            ),
            (
                "an unknown broker",
                -1,
                -1,
                vec![(0, vec![node + 1000])],
                INVALID_REPLICA_ASSIGNMENT,
            ),
            (
                "a broker twice",
                -1,
                -1,
                vec![(0, vec![node, node])],
                INVALID_REPLICA_ASSIGNMENT,
            ),
            (
                "no replicas",
                -1,
                -1,
                vec![(0, vec![])],
                INVALID_REPLICA_ASSIGNMENT,
            ),
            (
                "a gap in the partitions",
                -1,
                -1,
                vec![(0, vec![node]), (2, vec![node])],
                INVALID_REPLICA_ASSIGNMENT,
            ),
            (
                "a partition twice",
                -1,
                -1,
                vec![(0, vec![node]), (0, vec![node])],
                INVALID_REPLICA_ASSIGNMENT,
            ),
        ];
        for (what, partitions, rf, assignments, expected) in cases {
            let name = unique_name(&format!("cta-bad-v{v}"));
            let (code, msg) = create_one(
                &ctx,
                &mut c,
                Some(v),
                with_assignments(&name, partitions, rf, &assignments),
                false,
            );
            assert_code!(code, expected, "CreateTopics v{v} {what} ({msg:?})");
            assert_not_created(&ctx, &mut c, &name, what);
        }
    }
}
