//! DeleteTopics, CreatePartitions, DeleteRecords, DescribeConfigs, AlterConfigs,
//! IncrementalAlterConfigs, DescribeCluster.

use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiKey;
use uuid::Uuid;

use crate::broker::{now_ms, unique_name, CLUSTER_ID};
use crate::client::Client;
use crate::ops::*;
use crate::records::*;

const DEFAULT_RETENTION_MS: &str = "604800000";
const DEFAULT_SOURCES: &[i8] = &[SOURCE_DEFAULT_CONFIG, SOURCE_STATIC_BROKER_CONFIG];

// ------------------------------------------------------------------ DeleteTopics

#[test]
fn delete_topics_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::DeleteTopics, 1, 6) {
        // By name.
        let t = ctx.topic(&format!("dt-v{v}"), 2, &[]);
        produce_ok(&ctx, &mut c, &t, 0, batch_of(2, now_ms()));
        let resp = delete_topics_by_name(&mut c, v, &[&t.name]);
        assert_eq!(resp.responses.len(), 1, "DeleteTopics v{v}: results");
        let r = &resp.responses[0];
        assert_eq!(
            r.name.as_ref().map(|n| n.0.as_str()),
            Some(t.name.as_str()),
            "DeleteTopics v{v}: result name"
        );
        assert_code!(
            r.error_code,
            NONE,
            "DeleteTopics v{v} {} ({:?})",
            t.name,
            r.error_message
        );
        if v >= 6 && !t.id.is_nil() {
            assert_eq!(r.topic_id, t.id, "DeleteTopics v{v}: result topic id");
        }
        wait_for_topic_gone(&ctx, &mut c, &t.name);
        let lv = ctx.max_version(ApiKey::ListOffsets);
        let p = list_offsets(&mut c, lv, &t.name, 0, LATEST);
        assert_code!(
            p.error_code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "ListOffsets on a deleted topic"
        );

        // Deleting again / a never-existing topic.
        let resp = delete_topics_by_name(&mut c, v, &[&t.name]);
        assert_code!(
            resp.responses[0].error_code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "DeleteTopics v{v} of an already deleted topic"
        );

        // Re-creating the same name gives an empty, working topic.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (code, msg) = create_one(&ctx, &mut c, None, creatable(&t.name, 1, 1, &[]), false);
            if code == NONE {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "re-creating deleted topic {}: {} {msg:?}",
                t.name,
                ename(code)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let tm = wait_for_topic(&ctx, &mut c, &t.name, 1);
        if !t.id.is_nil() {
            assert_ne!(
                tm.topic_id, t.id,
                "a re-created topic must get a new topic id"
            );
        }
        let t2 = Topic {
            name: t.name.clone(),
            id: tm.topic_id,
        };
        assert_eq!(
            offset_for(&ctx, &mut c, &t2.name, 0, LATEST),
            0,
            "re-created topic must be empty"
        );
        assert_eq!(
            produce_ok(&ctx, &mut c, &t2, 0, batch_of(1, now_ms())),
            0,
            "produce to the re-created topic"
        );

        // v6: by topic id.
        if v >= 6 {
            let t = ctx.topic(&format!("dt-id-v{v}"), 1, &[]);
            assert!(!t.id.is_nil());
            let resp = delete_topic_by_id(&mut c, v, t.id);
            assert_eq!(resp.responses.len(), 1);
            let r = &resp.responses[0];
            assert_code!(
                r.error_code,
                NONE,
                "DeleteTopics v{v} by id ({:?})",
                r.error_message
            );
            assert_eq!(r.topic_id, t.id, "DeleteTopics v{v} by id: result topic id");
            wait_for_topic_gone(&ctx, &mut c, &t.name);
            let resp = delete_topic_by_id(
                &mut c,
                v,
                Uuid::from_u128(0xdead_0000_beef_1111_0000_2222_3333_4444),
            );
            assert_code!(
                resp.responses[0].error_code,
                UNKNOWN_TOPIC_ID,
                "DeleteTopics v{v} of an unknown topic id"
            );
        }
    }
}

// ------------------------------------------------------------------ CreatePartitions

#[test]
fn create_partitions_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::CreatePartitions, 0, 3) {
        let t = ctx.topic(&format!("cp-v{v}"), 1, &[]);
        let r = create_partitions(&mut c, v, &t.name, 3, false);
        assert_code!(
            r.error_code,
            NONE,
            "CreatePartitions v{v} 1 -> 3 ({:?})",
            r.error_message
        );
        wait_for_topic(&ctx, &mut c, &t.name, 3);
        assert_eq!(
            produce_ok(&ctx, &mut c, &t, 2, batch_of(2, now_ms())),
            0,
            "produce to a new partition"
        );
        assert_eq!(offset_for(&ctx, &mut c, &t.name, 2, LATEST), 2);

        let r = create_partitions(&mut c, v, &t.name, 2, false);
        assert_code!(
            r.error_code,
            INVALID_PARTITIONS,
            "CreatePartitions v{v} shrink 3 -> 2"
        );
        let r = create_partitions(&mut c, v, &t.name, 3, false);
        assert_code!(
            r.error_code,
            INVALID_PARTITIONS,
            "CreatePartitions v{v} 3 -> 3"
        );
        let r = create_partitions(&mut c, v, &t.name, 5, true);
        assert_code!(
            r.error_code,
            NONE,
            "CreatePartitions v{v} validate_only 3 -> 5"
        );
        std::thread::sleep(Duration::from_millis(200));
        let tm = topic_metadata(&ctx, &mut c, &t.name);
        assert_eq!(
            tm.partitions.len(),
            3,
            "CreatePartitions v{v} validate_only must not add partitions"
        );
        let ghost = unique_name("ghost");
        let r = create_partitions(&mut c, v, &ghost, 2, false);
        assert_code!(
            r.error_code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "CreatePartitions v{v} on an unknown topic"
        );
    }
}

// ------------------------------------------------------------------ DeleteRecords

#[test]
fn delete_records_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let fv = ctx.max_version(ApiKey::Fetch);
    for v in ctx.versions_req(ApiKey::DeleteRecords, 0, 2) {
        let t = ctx.topic(&format!("dr-v{v}"), 1, &[]);
        for i in 0..5 {
            assert_eq!(
                produce_ok(
                    &ctx,
                    &mut c,
                    &t,
                    0,
                    simple_batch(now_ms(), &[format!("r{i}").as_bytes()])
                ),
                i
            );
        }
        let r = delete_records(&mut c, v, &t.name, 0, 3);
        assert_code!(r.error_code, NONE, "DeleteRecords v{v} before offset 3");
        assert_eq!(r.low_watermark, 3, "DeleteRecords v{v}: low watermark");
        assert_eq!(
            offset_for(&ctx, &mut c, &t.name, 0, EARLIEST),
            3,
            "ListOffsets earliest after DeleteRecords v{v}"
        );
        assert_eq!(
            offset_for(&ctx, &mut c, &t.name, 0, LATEST),
            5,
            "ListOffsets latest after DeleteRecords v{v}"
        );

        let p = fetch(&mut c, fv, &t, 0, FetchOpts::at(1));
        assert_code!(
            p.error_code,
            OFFSET_OUT_OF_RANGE,
            "Fetch below the log start after DeleteRecords v{v}"
        );
        let p = fetch(&mut c, fv, &t, 0, FetchOpts::at(3));
        assert_code!(p.error_code, NONE, "Fetch at the new log start");
        let bs = batches_of(fv, &p);
        assert_eq!(
            bs.first().map(|b| b.base_offset),
            Some(3),
            "Fetch at the new log start: first batch"
        );
        if fv >= 5 {
            assert_eq!(
                p.log_start_offset, 3,
                "Fetch: log start offset after DeleteRecords v{v}"
            );
        }

        // Lower than the current low watermark: no-op.
        let r = delete_records(&mut c, v, &t.name, 0, 1);
        assert_code!(
            r.error_code,
            NONE,
            "DeleteRecords v{v} below the low watermark"
        );
        assert_eq!(
            r.low_watermark, 3,
            "DeleteRecords v{v} below the low watermark must not move it back"
        );

        // -1: up to the high watermark.
        let r = delete_records(&mut c, v, &t.name, 0, -1);
        assert_code!(r.error_code, NONE, "DeleteRecords v{v} offset -1");
        assert_eq!(
            r.low_watermark, 5,
            "DeleteRecords v{v} offset -1 = high watermark"
        );
        assert_eq!(offset_for(&ctx, &mut c, &t.name, 0, EARLIEST), 5);
        // Appends continue at the old end.
        assert_eq!(produce_ok(&ctx, &mut c, &t, 0, batch_of(1, now_ms())), 5);

        // Beyond the high watermark.
        let r = delete_records(&mut c, v, &t.name, 0, 100);
        assert_code!(
            r.error_code,
            OFFSET_OUT_OF_RANGE,
            "DeleteRecords v{v} beyond the high watermark"
        );
        let r = delete_records(&mut c, v, &t.name, 4, 0);
        assert_code!(
            r.error_code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "DeleteRecords v{v} unknown partition"
        );
        let r = delete_records(&mut c, v, &unique_name("ghost"), 0, 0);
        assert_code!(
            r.error_code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "DeleteRecords v{v} unknown topic"
        );
        // Kafka's ReplicaManager refuses internal topics before anything else.
        let r = delete_records(&mut c, v, "__consumer_offsets", 0, 0);
        assert_code!(
            r.error_code,
            INVALID_TOPIC_EXCEPTION,
            "DeleteRecords v{v} on __consumer_offsets"
        );
    }
}

// ------------------------------------------------------------------ DescribeConfigs

#[test]
fn describe_configs_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let plain = ctx.topic("dc-plain", 1, &[]);
    let over = ctx.topic("dc-over", 1, &[("retention.ms", "86400000")]);
    for v in ctx.versions_req(ApiKey::DescribeConfigs, 1, 4) {
        let res = describe_configs(&mut c, v, RESOURCE_TOPIC, &plain.name, None, false);
        assert_code!(
            res.error_code,
            NONE,
            "DescribeConfigs v{v} topic ({:?})",
            res.error_message
        );
        assert!(
            res.configs.len() >= 3,
            "DescribeConfigs v{v}: only {} topic configs",
            res.configs.len()
        );
        let names: Vec<&str> = res.configs.iter().map(|c| c.name.as_str()).collect();
        let ret = find_config(&res, "retention.ms")
            .unwrap_or_else(|| panic!("DescribeConfigs v{v}: no retention.ms in {names:?}"));
        assert_eq!(
            ret.value.as_deref(),
            Some(DEFAULT_RETENTION_MS),
            "DescribeConfigs v{v}: default retention.ms"
        );
        assert!(
            DEFAULT_SOURCES.contains(&ret.config_source),
            "DescribeConfigs v{v}: retention.ms source {} (expected DEFAULT_CONFIG 5)",
            ret.config_source
        );
        assert!(
            !ret.read_only && !ret.is_sensitive,
            "DescribeConfigs v{v}: retention.ms read_only/is_sensitive"
        );
        let seg = find_config(&res, "segment.bytes")
            .unwrap_or_else(|| panic!("DescribeConfigs v{v}: no segment.bytes"));
        let seg_v: i64 = seg.value.as_deref().unwrap_or("").parse().unwrap_or(-1);
        assert!(
            seg_v > 0,
            "DescribeConfigs v{v}: segment.bytes = {:?}",
            seg.value
        );
        let cp = find_config(&res, "cleanup.policy")
            .unwrap_or_else(|| panic!("DescribeConfigs v{v}: no cleanup.policy"));
        assert_eq!(
            cp.value.as_deref(),
            Some("delete"),
            "DescribeConfigs v{v}: default cleanup.policy"
        );
        for cfg in &res.configs {
            assert!(
                cfg.synonyms.is_empty(),
                "DescribeConfigs v{v}: synonyms returned for {} without include_synonyms",
                cfg.name.as_str()
            );
            assert!(
                (1..=6).contains(&cfg.config_source),
                "DescribeConfigs v{v}: {} has config_source {}",
                cfg.name.as_str(),
                cfg.config_source
            );
        }
        if v >= 3 {
            assert_eq!(
                ret.config_type, 5,
                "DescribeConfigs v{v}: retention.ms config_type (LONG=5)"
            );
            assert_eq!(
                seg.config_type, 3,
                "DescribeConfigs v{v}: segment.bytes config_type (INT=3)"
            );
            assert_eq!(
                cp.config_type, 7,
                "DescribeConfigs v{v}: cleanup.policy config_type (LIST=7)"
            );
        }

        // Selected keys only.
        let res = describe_configs(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &plain.name,
            Some(&["retention.ms", "cleanup.policy"]),
            false,
        );
        assert_code!(res.error_code, NONE, "DescribeConfigs v{v} with keys");
        let mut names: Vec<&str> = res.configs.iter().map(|c| c.name.as_str()).collect();
        names.sort();
        assert_eq!(
            names,
            vec!["cleanup.policy", "retention.ms"],
            "DescribeConfigs v{v} with configuration_keys"
        );

        // Overridden value, with synonyms.
        let res = describe_configs(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &over.name,
            Some(&["retention.ms"]),
            true,
        );
        assert_code!(
            res.error_code,
            NONE,
            "DescribeConfigs v{v} overridden topic"
        );
        let ret = find_config(&res, "retention.ms").expect("retention.ms");
        assert_eq!(
            ret.value.as_deref(),
            Some("86400000"),
            "DescribeConfigs v{v}: overridden retention.ms"
        );
        assert_eq!(
            ret.config_source, SOURCE_DYNAMIC_TOPIC_CONFIG,
            "DescribeConfigs v{v}: overridden retention.ms source"
        );
        let first = ret.synonyms.first().unwrap_or_else(|| {
            panic!("DescribeConfigs v{v}: include_synonyms returned no synonyms for an override")
        });
        assert_eq!(
            (first.name.as_str(), first.value.as_deref(), first.source),
            (
                "retention.ms",
                Some("86400000"),
                SOURCE_DYNAMIC_TOPIC_CONFIG
            ),
            "DescribeConfigs v{v}: first synonym of an overridden config"
        );

        // Unknown topic.
        let res = describe_configs(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &unique_name("ghost"),
            None,
            false,
        );
        assert_code!(
            res.error_code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "DescribeConfigs v{v} unknown topic"
        );

        // Broker resource.
        let node = ctx.node_id.to_string();
        let res = describe_configs(&mut c, v, RESOURCE_BROKER, &node, None, false);
        assert_code!(
            res.error_code,
            NONE,
            "DescribeConfigs v{v} broker {node} ({:?})",
            res.error_message
        );
        assert!(
            !res.configs.is_empty(),
            "DescribeConfigs v{v}: empty broker config list"
        );
    }
}

// ------------------------------------------------------------------ AlterConfigs

#[test]
fn alter_configs_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::AlterConfigs, 0, 2) {
        let t = ctx.topic(&format!("ac-v{v}"), 1, &[]);
        let val = format!("{}", 1_234_000 + v as i64);
        let (code, msg) = alter_configs(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("retention.ms", &val)],
            false,
        );
        assert_code!(code, NONE, "AlterConfigs v{v} retention.ms={val} ({msg:?})");
        let (got, src) = topic_config(&ctx, &mut c, &t.name, "retention.ms");
        assert_eq!(
            got.as_deref(),
            Some(val.as_str()),
            "retention.ms after AlterConfigs v{v}"
        );
        assert_eq!(
            src, SOURCE_DYNAMIC_TOPIC_CONFIG,
            "retention.ms source after AlterConfigs v{v}"
        );

        // validate_only changes nothing.
        let (code, _) = alter_configs(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("retention.ms", "7654321")],
            true,
        );
        assert_code!(code, NONE, "AlterConfigs v{v} validate_only");
        assert_eq!(
            topic_config(&ctx, &mut c, &t.name, "retention.ms")
                .0
                .as_deref(),
            Some(val.as_str()),
            "validate_only AlterConfigs v{v} changed the value"
        );

        // Errors.
        let (code, _) = alter_configs(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("no.such.config", "1")],
            false,
        );
        assert_code!(
            code,
            INVALID_CONFIG,
            "AlterConfigs v{v} unknown config name"
        );
        let (code, _) = alter_configs(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("retention.ms", "abc")],
            false,
        );
        assert_code!(code, INVALID_CONFIG, "AlterConfigs v{v} retention.ms=abc");
        assert_eq!(
            topic_config(&ctx, &mut c, &t.name, "retention.ms")
                .0
                .as_deref(),
            Some(val.as_str()),
            "a failed AlterConfigs v{v} changed the value"
        );
        let (code, _) = alter_configs(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &unique_name("ghost"),
            &[("retention.ms", "1000")],
            false,
        );
        assert_code!(
            code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "AlterConfigs v{v} unknown topic"
        );

        // AlterConfigs replaces the whole set: retention.ms reverts to its default.
        let (code, _) = alter_configs(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("segment.ms", "3600000")],
            false,
        );
        assert_code!(code, NONE, "AlterConfigs v{v} segment.ms");
        let (got, src) = topic_config(&ctx, &mut c, &t.name, "retention.ms");
        assert_eq!(
            got.as_deref(),
            Some(DEFAULT_RETENTION_MS),
            "AlterConfigs v{v} is not incremental: retention.ms must revert"
        );
        assert!(
            DEFAULT_SOURCES.contains(&src),
            "retention.ms source after revert: {src}"
        );
        assert_eq!(
            topic_config(&ctx, &mut c, &t.name, "segment.ms")
                .0
                .as_deref(),
            Some("3600000")
        );
    }
}

#[test]
fn incremental_alter_configs_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::IncrementalAlterConfigs, 0, 1) {
        let t = ctx.topic(&format!("iac-v{v}"), 1, &[]);
        let val = format!("{}", 2_345_000 + v as i64);
        let (code, msg) = incremental_alter(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("retention.ms", OP_SET, Some(&val))],
            false,
        );
        assert_code!(
            code,
            NONE,
            "IncrementalAlterConfigs v{v} SET retention.ms ({msg:?})"
        );
        let (got, src) = topic_config(&ctx, &mut c, &t.name, "retention.ms");
        assert_eq!(
            got.as_deref(),
            Some(val.as_str()),
            "retention.ms after IncrementalAlterConfigs v{v}"
        );
        assert_eq!(
            src, SOURCE_DYNAMIC_TOPIC_CONFIG,
            "retention.ms source after IncrementalAlterConfigs v{v}"
        );

        // Incremental: another key leaves retention.ms alone.
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("segment.ms", OP_SET, Some("3600000"))],
            false,
        );
        assert_code!(code, NONE, "IncrementalAlterConfigs v{v} SET segment.ms");
        assert_eq!(
            topic_config(&ctx, &mut c, &t.name, "retention.ms")
                .0
                .as_deref(),
            Some(val.as_str()),
            "IncrementalAlterConfigs v{v} must keep other overrides"
        );

        // validate_only.
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("retention.ms", OP_SET, Some("1000"))],
            true,
        );
        assert_code!(code, NONE, "IncrementalAlterConfigs v{v} validate_only");
        assert_eq!(
            topic_config(&ctx, &mut c, &t.name, "retention.ms")
                .0
                .as_deref(),
            Some(val.as_str()),
            "validate_only changed the value"
        );

        // DELETE reverts to the default.
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("retention.ms", OP_DELETE, None)],
            false,
        );
        assert_code!(
            code,
            NONE,
            "IncrementalAlterConfigs v{v} DELETE retention.ms"
        );
        let (got, src) = topic_config(&ctx, &mut c, &t.name, "retention.ms");
        assert_eq!(
            got.as_deref(),
            Some(DEFAULT_RETENTION_MS),
            "retention.ms after DELETE"
        );
        assert!(
            DEFAULT_SOURCES.contains(&src),
            "retention.ms source after DELETE: {src}"
        );
        assert_eq!(
            topic_config(&ctx, &mut c, &t.name, "segment.ms")
                .0
                .as_deref(),
            Some("3600000"),
            "segment.ms after deleting retention.ms"
        );

        // Errors.
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("no.such.config", OP_SET, Some("1"))],
            false,
        );
        assert_code!(
            code,
            INVALID_CONFIG,
            "IncrementalAlterConfigs v{v} unknown config name"
        );
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &t.name,
            &[("retention.ms", OP_SET, Some("abc"))],
            false,
        );
        assert_code!(
            code,
            INVALID_CONFIG,
            "IncrementalAlterConfigs v{v} retention.ms=abc"
        );
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_TOPIC,
            &unique_name("ghost"),
            &[("retention.ms", OP_SET, Some("1000"))],
            false,
        );
        assert_code!(
            code,
            UNKNOWN_TOPIC_OR_PARTITION,
            "IncrementalAlterConfigs v{v} unknown topic"
        );
    }
}

// ------------------------------------------------------------------ broker configs

/// (value, source, read_only) of one config of broker resource `name`.
fn broker_config(c: &mut Client, v: i16, name: &str, key: &str) -> Option<(String, i8, bool)> {
    let res = describe_configs(c, v, RESOURCE_BROKER, name, Some(&[key]), true);
    assert_code!(
        res.error_code,
        NONE,
        "DescribeConfigs v{v} broker '{name}' ({:?})",
        res.error_message
    );
    find_config(&res, key).map(|cfg| {
        (
            cfg.value
                .as_ref()
                .map(|s| s.to_string())
                .unwrap_or_default(),
            cfg.config_source,
            cfg.read_only,
        )
    })
}

#[test]
fn broker_configs_are_dynamic_where_kafka_allows_it() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let me = ctx.node_id.to_string();
    let dv = ctx.max_version(ApiKey::DescribeConfigs);
    let t = ctx.topic("bc-plain", 1, &[]);
    for v in ctx.versions_req(ApiKey::IncrementalAlterConfigs, 0, 1) {
        // The cluster-wide default (resource name ""), then this broker's own value.
        let val = format!("{}", 3_600_000 + v as i64);
        let (code, msg) = incremental_alter(
            &mut c,
            v,
            RESOURCE_BROKER,
            "",
            &[("log.retention.ms", OP_SET, Some(&val))],
            false,
        );
        assert_code!(code, NONE, "IncrementalAlterConfigs v{v} default ({msg:?})");
        assert_eq!(
            broker_config(&mut c, dv, &me, "log.retention.ms"),
            Some((val.clone(), SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG, false)),
            "log.retention.ms of broker {me} after setting the default"
        );
        assert_eq!(
            broker_config(&mut c, dv, "", "log.retention.ms").map(|(v, s, _)| (v, s)),
            Some((val.clone(), SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG)),
            "log.retention.ms of the default resource"
        );
        assert_eq!(
            topic_config(&ctx, &mut c, &t.name, "retention.ms"),
            (Some(val.clone()), SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG),
            "a topic without override follows the dynamic default"
        );
        let own = format!("{}", 7_200_000 + v as i64);
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_BROKER,
            &me,
            &[("log.retention.ms", OP_SET, Some(&own))],
            false,
        );
        assert_code!(code, NONE, "IncrementalAlterConfigs v{v} broker {me}");
        assert_eq!(
            topic_config(&ctx, &mut c, &t.name, "retention.ms"),
            (Some(own.clone()), SOURCE_DYNAMIC_BROKER_CONFIG),
            "per-broker beats the default"
        );
        // Synonyms: every level, most specific first.
        let res = describe_configs(
            &mut c,
            dv,
            RESOURCE_BROKER,
            &me,
            Some(&["log.retention.ms"]),
            true,
        );
        let sources: Vec<i8> = find_config(&res, "log.retention.ms")
            .map(|cfg| cfg.synonyms.iter().map(|s| s.source).collect())
            .unwrap_or_default();
        assert_eq!(
            sources.get(..2),
            Some(
                &[
                    SOURCE_DYNAMIC_BROKER_CONFIG,
                    SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG
                ][..]
            ),
            "synonyms of log.retention.ms: {sources:?}"
        );
        // Clean up both levels: the topic is back on the static/default value.
        for name in [me.as_str(), ""] {
            let (code, _) = incremental_alter(
                &mut c,
                v,
                RESOURCE_BROKER,
                name,
                &[("log.retention.ms", OP_DELETE, None)],
                false,
            );
            assert_code!(
                code,
                NONE,
                "IncrementalAlterConfigs v{v} DELETE on '{name}'"
            );
        }
        let (got, src) = topic_config(&ctx, &mut c, &t.name, "retention.ms");
        assert!(
            DEFAULT_SOURCES.contains(&src) && got.as_deref() == Some(DEFAULT_RETENTION_MS),
            "retention.ms after deleting the dynamic values: {got:?} source {src}"
        );

        // Read-only configs and other brokers' ids: INVALID_REQUEST, as Kafka answers.
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_BROKER,
            &me,
            &[("num.partitions", OP_SET, Some("3"))],
            false,
        );
        assert_code!(
            code,
            INVALID_REQUEST,
            "IncrementalAlterConfigs v{v} num.partitions"
        );
        let other = (ctx.node_id + 100).to_string();
        let (code, _) = incremental_alter(
            &mut c,
            v,
            RESOURCE_BROKER,
            &other,
            &[("log.retention.ms", OP_SET, Some("1000"))],
            false,
        );
        assert_code!(
            code,
            INVALID_REQUEST,
            "IncrementalAlterConfigs v{v} broker {other}"
        );
    }
    let read_only = broker_config(&mut c, dv, &me, "num.partitions");
    assert!(
        matches!(read_only, Some((_, _, true))),
        "num.partitions must be described read-only: {read_only:?}"
    );
    for v in ctx.versions_req(ApiKey::AlterConfigs, 0, 2) {
        let (code, _) = alter_configs(
            &mut c,
            v,
            RESOURCE_BROKER,
            &me,
            &[("num.partitions", "3")],
            false,
        );
        assert_code!(code, INVALID_REQUEST, "AlterConfigs v{v} num.partitions");
        let (code, msg) = alter_configs(
            &mut c,
            v,
            RESOURCE_BROKER,
            &me,
            &[("log.segment.bytes", "1048576")],
            false,
        );
        assert_code!(code, NONE, "AlterConfigs v{v} log.segment.bytes ({msg:?})");
        assert_eq!(
            topic_config(&ctx, &mut c, &t.name, "segment.bytes"),
            (Some("1048576".to_string()), SOURCE_DYNAMIC_BROKER_CONFIG),
            "segment.bytes after AlterConfigs v{v} on the broker"
        );
        // The legacy API replaces the level: an empty set removes it.
        let (code, _) = alter_configs(&mut c, v, RESOURCE_BROKER, &me, &[], false);
        assert_code!(code, NONE, "AlterConfigs v{v} empty set");
        let (_, src) = topic_config(&ctx, &mut c, &t.name, "segment.bytes");
        assert!(DEFAULT_SOURCES.contains(&src), "segment.bytes source {src}");
    }
    // log.flush.interval.ms is dynamic too (Kafka: the broker synonym of flush.ms).
    let iv = ctx.max_version(ApiKey::IncrementalAlterConfigs);
    let (code, _) = incremental_alter(
        &mut c,
        iv,
        RESOURCE_BROKER,
        &me,
        &[("log.flush.interval.ms", OP_SET, Some("250"))],
        false,
    );
    assert_code!(code, NONE, "IncrementalAlterConfigs log.flush.interval.ms");
    assert_eq!(
        broker_config(&mut c, dv, &me, "log.flush.interval.ms"),
        Some(("250".to_string(), SOURCE_DYNAMIC_BROKER_CONFIG, false))
    );
    let (code, _) = incremental_alter(
        &mut c,
        iv,
        RESOURCE_BROKER,
        &me,
        &[("log.flush.interval.ms", OP_DELETE, None)],
        false,
    );
    assert_code!(code, NONE, "DELETE log.flush.interval.ms");
    // Describing another broker's id is refused the same way.
    let res = describe_configs(&mut c, dv, RESOURCE_BROKER, "9999", None, false);
    assert_code!(
        res.error_code,
        INVALID_REQUEST,
        "DescribeConfigs of broker 9999"
    );
}

#[test]
fn the_offsets_topic_refuses_configs_that_would_lose_committed_offsets() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    if ctx.external() {
        // Apache Kafka lets operators change these; tern refuses (no log cleaner).
        return;
    }
    let offsets = "__consumer_offsets";
    assert_eq!(
        topic_config(&ctx, &mut c, offsets, "cleanup.policy"),
        (Some("compact".to_string()), SOURCE_DYNAMIC_TOPIC_CONFIG)
    );
    assert_eq!(
        topic_config(&ctx, &mut c, offsets, "retention.ms")
            .0
            .as_deref(),
        Some("-1")
    );
    for v in ctx.versions_req(ApiKey::IncrementalAlterConfigs, 0, 1) {
        for (key, op, val) in [
            ("cleanup.policy", OP_SET, Some("delete")),
            ("cleanup.policy", OP_DELETE, None),
            ("retention.ms", OP_SET, Some("1000")),
            ("retention.bytes", OP_SET, Some("1")),
        ] {
            let (code, msg) =
                incremental_alter(&mut c, v, RESOURCE_TOPIC, offsets, &[(key, op, val)], false);
            assert_code!(
                code,
                INVALID_CONFIG,
                "IncrementalAlterConfigs v{v} {key} {val:?}"
            );
            assert!(
                msg.as_deref()
                    .is_some_and(|m| m.contains("committed offsets")),
                "message: {msg:?}"
            );
        }
    }
    for v in ctx.versions_req(ApiKey::AlterConfigs, 0, 2) {
        let (code, _) = alter_configs(
            &mut c,
            v,
            RESOURCE_TOPIC,
            offsets,
            &[("segment.bytes", "1048576")],
            false,
        );
        assert_code!(
            code,
            INVALID_CONFIG,
            "AlterConfigs v{v} without cleanup.policy=compact"
        );
    }
    assert_eq!(
        topic_config(&ctx, &mut c, offsets, "cleanup.policy")
            .0
            .as_deref(),
        Some("compact")
    );
}

// ------------------------------------------------------------------ DescribeCluster

#[test]
fn describe_cluster_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let mv = ctx.max_version(ApiKey::Metadata);
    let md = metadata(&mut c, mv, Some(&[]), false);
    let md_cluster = md.cluster_id.as_ref().map(|s| s.to_string());
    for v in ctx.versions_req(ApiKey::DescribeCluster, 0, 2) {
        let r = c.call(v, &describe_cluster_req(v));
        assert_code!(
            r.error_code,
            NONE,
            "DescribeCluster v{v} ({:?})",
            r.error_message
        );
        assert!(
            !r.cluster_id.is_empty(),
            "DescribeCluster v{v}: empty cluster id"
        );
        assert_eq!(
            Some(r.cluster_id.to_string()),
            md_cluster,
            "DescribeCluster v{v}: cluster id differs from Metadata's"
        );
        if !ctx.external() {
            assert_eq!(
                r.cluster_id.as_str(),
                CLUSTER_ID,
                "DescribeCluster v{v}: cluster id"
            );
        }
        assert!(!r.brokers.is_empty(), "DescribeCluster v{v}: no brokers");
        assert!(
            r.brokers.iter().any(|b| b.broker_id == r.controller_id),
            "DescribeCluster v{v}: controller id {:?} not a listed broker",
            r.controller_id
        );
        if ctx.external() {
            assert!(r.brokers.iter().all(|b| b.port > 0 && !b.host.is_empty()));
        } else {
            let me = r
                .brokers
                .iter()
                .find(|b| *b.broker_id == crate::broker::NODE_ID)
                .expect("node 1 listed");
            assert_eq!(
                (me.host.as_str(), me.port),
                (ctx.broker.host.as_str(), ctx.broker.port as i32),
                "DescribeCluster v{v}: broker endpoint"
            );
        }
        if v >= 1 {
            assert_eq!(
                r.endpoint_type, 1,
                "DescribeCluster v{v}: endpoint_type (1 = brokers)"
            );
        }
        if v >= 2 {
            assert!(
                r.brokers.iter().all(|b| !b.is_fenced),
                "DescribeCluster v{v}: fenced broker listed"
            );
        }
        // Same broker set as Metadata.
        let mut a: Vec<i32> = r.brokers.iter().map(|b| *b.broker_id).collect();
        let mut b: Vec<i32> = md.brokers.iter().map(|b| *b.node_id).collect();
        a.sort();
        b.sort();
        assert_eq!(a, b, "DescribeCluster v{v}: brokers differ from Metadata's");
    }
}

#[test]
fn create_partitions_with_manual_assignments() {
    use kafka_protocol::messages::create_partitions_request::{
        CreatePartitionsAssignment, CreatePartitionsTopic,
    };
    use kafka_protocol::messages::{BrokerId, CreatePartitionsRequest};
    const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let node = ctx.node_id;
    let grow = |c: &mut crate::client::Client,
                v: i16,
                name: &str,
                count: i32,
                assignments: Vec<Vec<i32>>| {
        let request = CreatePartitionsRequest::default()
            .with_timeout_ms(30_000)
            .with_topics(vec![CreatePartitionsTopic::default()
                .with_name(tn(name))
                .with_count(count)
                .with_assignments(Some(
                    assignments
                        .into_iter()
                        .map(|b| {
                            CreatePartitionsAssignment::default()
                                .with_broker_ids(b.into_iter().map(BrokerId).collect())
                        })
                        .collect(),
                ))]);
        let resp = c.call(v, &request);
        assert_eq!(resp.results.len(), 1, "CreatePartitions v{v}: one result");
        (
            resp.results[0].error_code,
            resp.results[0].error_message.clone(),
        )
    };
    for v in ctx.versions_req(ApiKey::CreatePartitions, 0, 3) {
        let t = ctx.topic(&format!("cpa-v{v}"), 1, &[]);
        for (what, assignments) in [
            ("fewer assignments than partitions", vec![vec![node]]),
            ("an unknown broker", vec![vec![node], vec![node + 1000]]),
            ("a broker twice", vec![vec![node], vec![node, node]]),
            ("no replicas", vec![vec![node], vec![]]),
        ] {
            let (code, msg) = grow(&mut c, v, &t.name, 3, assignments);
            assert_code!(
                code,
                INVALID_REPLICA_ASSIGNMENT,
                "CreatePartitions v{v}: {what} ({msg:?})"
            );
        }
        assert_eq!(topic_metadata(&ctx, &mut c, &t.name).partitions.len(), 1);
        let (code, msg) = grow(&mut c, v, &t.name, 3, vec![vec![node], vec![node]]);
        assert_code!(
            code,
            NONE,
            "CreatePartitions v{v} with assignments ({msg:?})"
        );
        wait_for_topic(&ctx, &mut c, &t.name, 3);
        assert_eq!(
            produce_ok(&ctx, &mut c, &t, 2, batch_of(2, now_ms())),
            0,
            "CreatePartitions v{v}: produce to an assigned partition"
        );
    }
}
