//! Metadata v0-13.

use std::time::{Duration, Instant};

use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::{ApiKey, MetadataResponse};
use uuid::Uuid;

use crate::broker::{unique_name, CLUSTER_ID};
use crate::ops::*;

fn find_topic<'a>(md: &'a MetadataResponse, name: &str) -> Option<&'a MetadataResponseTopic> {
    md.topics
        .iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(name))
}

fn check_brokers(ctx: &Ctx, v: i16, md: &MetadataResponse) {
    assert!(!md.brokers.is_empty(), "Metadata v{v}: no brokers");
    if ctx.external() {
        assert!(
            md.brokers.iter().all(|b| b.port > 0 && !b.host.is_empty()),
            "Metadata v{v}: broker without host/port"
        );
    } else {
        let me = md
            .brokers
            .iter()
            .find(|b| *b.node_id == crate::broker::NODE_ID)
            .unwrap_or_else(|| {
                panic!(
                    "Metadata v{v}: node id {} not in brokers {:?}",
                    crate::broker::NODE_ID,
                    md.brokers
                )
            });
        assert_eq!(
            me.host.as_str(),
            ctx.broker.host,
            "Metadata v{v}: broker host"
        );
        assert_eq!(
            me.port, ctx.broker.port as i32,
            "Metadata v{v}: broker port"
        );
    }
    if v >= 1 {
        assert!(
            md.brokers.iter().any(|b| b.node_id == md.controller_id),
            "Metadata v{v}: controller id {:?} is not one of the brokers",
            md.controller_id
        );
    }
    if v >= 2 {
        let cid = md.cluster_id.as_ref().map(|s| s.to_string());
        assert!(
            cid.as_deref().is_some_and(|s| !s.is_empty()),
            "Metadata v{v}: missing cluster id"
        );
        if !ctx.external() {
            assert_eq!(
                cid.as_deref(),
                Some(CLUSTER_ID),
                "Metadata v{v}: cluster id"
            );
        }
    }
}

#[test]
fn metadata_every_version() {
    let ctx = Ctx::new();
    let t = ctx.topic("md", 2, &[]);
    let mut c = ctx.client();
    let broker_ids: Vec<i32> = {
        let v = ctx.max_version(ApiKey::Metadata);
        metadata(&mut c, v, None, false)
            .brokers
            .iter()
            .map(|b| *b.node_id)
            .collect()
    };
    let mut seen_id: Option<Uuid> = None;
    for v in ctx.versions_req(ApiKey::Metadata, 0, 13) {
        let md = metadata(&mut c, v, Some(&[&t.name]), false);
        check_brokers(&ctx, v, &md);
        assert_eq!(md.topics.len(), 1, "Metadata v{v}: asked for one topic");
        let tm = &md.topics[0];
        assert_eq!(
            tm.name.as_ref().map(|n| n.0.as_str()),
            Some(t.name.as_str()),
            "Metadata v{v}: topic name"
        );
        assert_code!(tm.error_code, NONE, "Metadata v{v}: topic {}", t.name);
        assert!(!tm.is_internal, "Metadata v{v}: user topic marked internal");
        let mut idx: Vec<i32> = tm.partitions.iter().map(|p| p.partition_index).collect();
        idx.sort();
        assert_eq!(idx, vec![0, 1], "Metadata v{v}: partition indexes");
        for p in &tm.partitions {
            assert_code!(
                p.error_code,
                NONE,
                "Metadata v{v}: partition {}",
                p.partition_index
            );
            assert!(
                broker_ids.contains(&p.leader_id),
                "Metadata v{v}: leader {:?} not a broker",
                p.leader_id
            );
            assert!(
                p.replica_nodes.contains(&p.leader_id),
                "Metadata v{v}: replicas {:?} lack the leader",
                p.replica_nodes
            );
            assert!(
                p.isr_nodes.contains(&p.leader_id),
                "Metadata v{v}: ISR {:?} lacks the leader",
                p.isr_nodes
            );
            if v >= 7 {
                assert!(
                    p.leader_epoch >= 0,
                    "Metadata v{v}: leader epoch {}",
                    p.leader_epoch
                );
            }
        }
        if v >= 10 {
            assert!(!tm.topic_id.is_nil(), "Metadata v{v}: nil topic id");
            if let Some(id) = seen_id {
                assert_eq!(
                    tm.topic_id, id,
                    "Metadata v{v}: topic id changed between versions"
                );
            }
            seen_id = Some(tm.topic_id);
        }
        // All topics: ours is included.
        let all = metadata(&mut c, v, None, false);
        check_brokers(&ctx, v, &all);
        let ours = find_topic(&all, &t.name)
            .unwrap_or_else(|| panic!("Metadata v{v} (all topics) does not list {}", t.name));
        assert_eq!(
            ours.partitions.len(),
            2,
            "Metadata v{v} (all topics): partitions of {}",
            t.name
        );
        // Empty topic list (v1+): no topics.
        if v >= 1 {
            let none = metadata(&mut c, v, Some(&[]), false);
            assert!(
                none.topics.is_empty(),
                "Metadata v{v}: an empty topic list must return no topics, got {}",
                none.topics.len()
            );
        }
    }
}

#[test]
fn metadata_auto_create_only_when_allowed() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let versions = ctx.versions_req(ApiKey::Metadata, 4, 13);
    for v in versions {
        // allow_auto_topic_creation = false: not created.
        let absent = unique_name(&format!("md-noauto-v{v}"));
        for _ in 0..2 {
            let md = metadata(&mut c, v, Some(&[&absent]), false);
            let tm = find_topic(&md, &absent)
                .unwrap_or_else(|| panic!("Metadata v{v}: no entry for {absent}"));
            assert_code!(
                tm.error_code,
                UNKNOWN_TOPIC_OR_PARTITION,
                "Metadata v{v} allow_auto_topic_creation=false for {absent}"
            );
            assert!(
                tm.partitions.is_empty(),
                "Metadata v{v}: partitions listed for a missing topic"
            );
        }
        // allow_auto_topic_creation = true: created (Kafka may first say LEADER_NOT_AVAILABLE).
        let auto = unique_name(&format!("md-auto-v{v}"));
        let md = metadata(&mut c, v, Some(&[&auto]), true);
        let tm =
            find_topic(&md, &auto).unwrap_or_else(|| panic!("Metadata v{v}: no entry for {auto}"));
        assert_code_in!(
            tm.error_code,
            &[NONE, LEADER_NOT_AVAILABLE],
            "Metadata v{v} auto-creating {auto}"
        );
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let md = metadata(&mut c, v, Some(&[&auto]), false);
            let tm = find_topic(&md, &auto).expect("entry");
            if tm.error_code == NONE && !tm.partitions.is_empty() {
                if v >= 10 {
                    assert!(
                        !tm.topic_id.is_nil(),
                        "Metadata v{v}: auto-created topic has nil id"
                    );
                }
                break;
            }
            assert!(
                Instant::now() < deadline,
                "Metadata v{v}: auto-created topic {auto} never appeared (last error {})",
                ename(tm.error_code)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    // The non-auto topics really were not created: still unknown after the loop.
    let v = ctx.max_version(ApiKey::Metadata);
    let md = metadata(&mut c, v, None, false);
    assert!(
        !md.topics
            .iter()
            .any(|t| t.name.as_ref().is_some_and(|n| n.0.contains("md-noauto"))),
        "a topic requested with allow_auto_topic_creation=false was created"
    );
}

#[test]
fn metadata_invalid_topic_names() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let long = "x".repeat(250);
    let names: Vec<&str> = vec!["bad/name", "..", ".", "has space", "star*", long.as_str()];
    for v in ctx.versions_req(ApiKey::Metadata, 0, 13) {
        for allow in [true, false] {
            if v < 4 && !allow {
                continue; // v0-3 always allow auto-creation
            }
            for name in &names {
                let md = metadata(&mut c, v, Some(&[name]), allow);
                let tm = find_topic(&md, name)
                    .unwrap_or_else(|| panic!("Metadata v{v}: no entry for invalid name {name:?}"));
                assert_code!(
                    tm.error_code,
                    INVALID_TOPIC_EXCEPTION,
                    "Metadata v{v} allow_auto={allow} topic {:?}",
                    &name[..name.len().min(20)]
                );
            }
        }
    }
    // Nothing was created.
    let v = ctx.max_version(ApiKey::Metadata);
    let md = metadata(&mut c, v, None, false);
    for name in &names {
        assert!(
            find_topic(&md, name).is_none(),
            "invalid topic {name:?} was created"
        );
    }
}
