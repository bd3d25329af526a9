//! The pre-Kafka-2.1 versions Kafka 3.9 serves and Kafka 4.0 removed (KIP-896), which
//! Sarama 1.22 and tools built on it still send: ListOffsets v0, OffsetCommit v0–1,
//! OffsetFetch v0, DescribeConfigs v0, CreateTopics v0–1, DeleteTopics v0. Each is a
//! real round trip whose content is checked. Skipped against a broker that does not
//! advertise the version (Apache Kafka 4.x).

use std::time::Duration;

use kafka_protocol::messages::*;

use crate::broker::{now_ms, unique_name};
use crate::client::{Client, Outcome};
use crate::groups::*;
use crate::legacy::*;
use crate::ops::*;
use crate::records::batch_of;

/// Whether the broker advertises `version` of `key` (the crate may not encode it).
fn advertises(ctx: &Ctx, key: ApiKey, version: i16) -> bool {
    let yes = ctx
        .advertised(key)
        .is_some_and(|(min, max)| (min..=max).contains(&version));
    if !yes {
        eprintln!("skipped: the broker does not advertise {key:?} v{version}");
    }
    yes
}

#[test]
fn list_offsets_v0_lists_segment_starts_newest_first() {
    let ctx = Ctx::new();
    if !advertises(&ctx, ApiKey::ListOffsets, 0) {
        return;
    }
    let t = ctx.topic("lo-v0", 2, &[]);
    let mut c = ctx.client();
    for _ in 0..3 {
        produce_ok(&ctx, &mut c, &t, 0, batch_of(2, now_ms()));
    }
    let hour_ahead = now_ms() + 3_600_000;
    let body = list_offsets_v0(
        -1,
        &t.name,
        &[
            (0, LATEST, 1),
            (0, LATEST, 10),
            (0, EARLIEST, 10),
            (0, hour_ahead, 10),
            (0, 0, 10),
            (1, LATEST, 10),
            (0, MAX_TIMESTAMP, 1),
            (0, LATEST, -1),
            (7, LATEST, 1),
        ],
    );
    let answers = parse_list_offsets_v0(call_raw(&mut c, ApiKey::ListOffsets, 0, &body), &t.name);
    let expected: Vec<(i32, i16, Vec<i64>)> = vec![
        // The log end alone, then with the (single) segment's first offset.
        (0, NONE, vec![6]),
        (0, NONE, vec![6, 0]),
        (0, NONE, vec![0]),
        // Everything was written before an hour from now, nothing before 1970.
        (0, NONE, vec![6, 0]),
        (0, NONE, vec![]),
        // An empty partition lists its start.
        (1, NONE, vec![0]),
        // v0 knows only -1 and -2 among negative times; Kafka fails a negative count.
        (0, UNSUPPORTED_VERSION, vec![]),
        (0, -1, vec![]),
        (7, UNKNOWN_TOPIC_OR_PARTITION, vec![]),
    ];
    assert_eq!(answers, expected, "ListOffsets v0 answers");
    // The same log end as v1 reports.
    assert_eq!(offset_for(&ctx, &mut c, &t.name, 0, LATEST), 6);

    // The log start moves with DeleteRecords; v0's earliest follows it.
    let dr = delete_records(
        &mut c,
        ctx.max_version(ApiKey::DeleteRecords),
        &t.name,
        0,
        2,
    );
    assert_code!(dr.error_code, NONE, "DeleteRecords to 2");
    let body = list_offsets_v0(-1, &t.name, &[(0, EARLIEST, 5), (0, LATEST, 5)]);
    let answers = parse_list_offsets_v0(call_raw(&mut c, ApiKey::ListOffsets, 0, &body), &t.name);
    assert_eq!(
        answers,
        vec![(0, NONE, vec![2]), (0, NONE, vec![6, 2])],
        "after DeleteRecords"
    );
    let body = list_offsets_v0(-1, "no-such-topic-lo-v0", &[(0, LATEST, 1)]);
    let answers = parse_list_offsets_v0(
        call_raw(&mut c, ApiKey::ListOffsets, 0, &body),
        "no-such-topic-lo-v0",
    );
    assert_eq!(answers, vec![(0, UNKNOWN_TOPIC_OR_PARTITION, vec![])]);
}

#[test]
fn offset_commit_v0_v1_round_trip_through_offset_fetch_v0_and_v1() {
    let ctx = group_ctx(&[]);
    if !advertises(&ctx, ApiKey::OffsetCommit, 0) || !advertises(&ctx, ApiKey::OffsetFetch, 0) {
        return;
    }
    let t = ctx.topic("oc-v1", 2, &[]);
    let group = unique_group("legacy-commit");
    let mut c = ctx.client();
    wait_coordinator(&ctx, &mut c, &group);

    // v1 from a group-less consumer (generation -1, no member id), as Sarama's offset
    // manager does outside a group; an unknown partition fails alone.
    let body = offset_commit(
        1,
        &group,
        -1,
        "",
        &t.name,
        &[(0, 5, Some("m-zero")), (1, 7, None), (9, 1, None)],
    );
    let r: OffsetCommitResponse = call_as(&mut c, ApiKey::OffsetCommit, 1, &body, 2);
    let codes: Vec<(i32, i16)> = r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![(0, NONE), (1, NONE), (9, UNKNOWN_TOPIC_OR_PARTITION)],
        "OffsetCommit v1"
    );

    let fetched = |c: &mut Client, v: i16| -> Vec<(i32, i64, Option<String>, i16)> {
        let body = offset_fetch_v0(&group, &t.name, &[0, 1]);
        let r: OffsetFetchResponse = if v == 0 {
            call_as(c, ApiKey::OffsetFetch, 0, &body, 1)
        } else {
            call_as(c, ApiKey::OffsetFetch, 1, &body, 1)
        };
        assert_eq!(r.topics.len(), 1, "OffsetFetch v{v}: topics");
        r.topics[0]
            .partitions
            .iter()
            .map(|p| {
                (
                    p.partition_index,
                    p.committed_offset,
                    opt_s(&p.metadata),
                    p.error_code,
                )
            })
            .collect()
    };
    let expected = vec![
        (0, 5, Some("m-zero".to_string()), NONE),
        (1, 7, Some(String::new()), NONE),
    ];
    assert_eq!(
        fetched(&mut c, 0),
        expected,
        "OffsetFetch v0 after OffsetCommit v1"
    );
    assert_eq!(
        fetched(&mut c, 1),
        expected,
        "OffsetFetch v1 after OffsetCommit v1"
    );

    // v0 (group-less by definition), read back by v0 and by a modern OffsetFetch.
    let body = offset_commit(0, &group, 0, "", &t.name, &[(0, 11, Some("v0"))]);
    let r: OffsetCommitResponse = call_as(&mut c, ApiKey::OffsetCommit, 0, &body, 2);
    assert_code!(
        r.topics[0].partitions[0].error_code,
        NONE,
        "OffsetCommit v0"
    );
    assert_eq!(
        fetched(&mut c, 0)[0],
        (0, 11, Some("v0".to_string()), NONE),
        "OffsetFetch v0 after OffsetCommit v0"
    );
    let f = committed(&ctx, &mut c, &group, &t.name, 0);
    assert_eq!(f.offset, 11, "newest OffsetFetch after OffsetCommit v0");

    // A member of a live group commits with v1 under its generation; a wrong
    // generation is refused.
    let live = unique_group("legacy-commit-live");
    let mut m = stable_member(
        &ctx,
        &JoinSpec::consumer(&live, &[&t.name]),
        assignment(&[(&t.name, &[0, 1])]),
    );
    let body = offset_commit(
        1,
        &live,
        m.generation,
        &m.member_id,
        &t.name,
        &[(1, 3, Some("g"))],
    );
    let r: OffsetCommitResponse = call_as(&mut m.c, ApiKey::OffsetCommit, 1, &body, 2);
    assert_code!(
        r.topics[0].partitions[0].error_code,
        NONE,
        "OffsetCommit v1 by the member"
    );
    let body = offset_commit(
        1,
        &live,
        m.generation + 5,
        &m.member_id,
        &t.name,
        &[(1, 4, None)],
    );
    let r: OffsetCommitResponse = call_as(&mut m.c, ApiKey::OffsetCommit, 1, &body, 2);
    assert_code!(
        r.topics[0].partitions[0].error_code,
        ILLEGAL_GENERATION,
        "OffsetCommit v1 with a stale generation"
    );
    let f = committed(&ctx, &mut c, &live, &t.name, 1);
    assert_eq!(f.offset, 3, "the refused commit changed nothing");
}

#[test]
fn describe_configs_v0_reports_every_config_with_is_default() {
    let ctx = Ctx::new();
    if !advertises(&ctx, ApiKey::DescribeConfigs, 0) {
        return;
    }
    let t = ctx.topic("dc-v0", 1, &[("retention.ms", "3600000")]);
    let mut c = ctx.client();
    let body = describe_configs_v0(RESOURCE_TOPIC, &t.name, None);
    let (error, _, configs) =
        parse_describe_configs_v0(call_raw(&mut c, ApiKey::DescribeConfigs, 0, &body), &t.name);
    assert_code!(error, NONE, "DescribeConfigs v0");
    let retention = configs
        .iter()
        .find(|c| c.name == "retention.ms")
        .expect("retention.ms listed");
    assert_eq!(retention.value.as_deref(), Some("3600000"));
    assert!(!retention.is_default, "a topic override is not a default");
    let cleanup = configs
        .iter()
        .find(|c| c.name == "cleanup.policy")
        .expect("cleanup.policy listed");
    assert!(
        cleanup.is_default,
        "cleanup.policy was not set: {cleanup:?}"
    );

    // The same configs as v1 lists, is_default exactly where v1's source is the default.
    let v1 = describe_configs(&mut c, 1, RESOURCE_TOPIC, &t.name, None, false);
    let from_v1: Vec<(String, bool)> = v1
        .configs
        .iter()
        .map(|c| (c.name.to_string(), c.config_source == SOURCE_DEFAULT_CONFIG))
        .collect();
    let from_v0: Vec<(String, bool)> = configs
        .iter()
        .map(|c| (c.name.clone(), c.is_default))
        .collect();
    assert_eq!(from_v0, from_v1, "v0 and v1 list the same configs");
    assert!(configs.len() > 5, "every config, not only overrides");

    let body = describe_configs_v0(RESOURCE_TOPIC, &t.name, Some(&["retention.ms"]));
    let (_, _, only) =
        parse_describe_configs_v0(call_raw(&mut c, ApiKey::DescribeConfigs, 0, &body), &t.name);
    assert_eq!(only.len(), 1, "named keys only: {only:?}");

    let body = describe_configs_v0(RESOURCE_TOPIC, "no-such-topic-dc-v0", None);
    let (error, _, _) = parse_describe_configs_v0(
        call_raw(&mut c, ApiKey::DescribeConfigs, 0, &body),
        "no-such-topic-dc-v0",
    );
    assert_code!(
        error,
        UNKNOWN_TOPIC_OR_PARTITION,
        "DescribeConfigs v0 unknown topic"
    );
}

#[test]
fn create_topics_v0_v1_and_delete_topics_v0() {
    let ctx = Ctx::new();
    if !advertises(&ctx, ApiKey::CreateTopics, 0) || !advertises(&ctx, ApiKey::DeleteTopics, 0) {
        return;
    }
    let mut c = ctx.client();
    let name = unique_name("ct-v0");
    let request = create_topics_req(
        vec![creatable(&name, 3, 1, &[("retention.ms", "60000")])],
        false,
    );
    let answer = parse_create_topics(
        call_raw(
            &mut c,
            ApiKey::CreateTopics,
            0,
            &create_topics_legacy(0, &request),
        ),
        0,
    );
    assert_eq!(answer, vec![(name.clone(), NONE, None)], "CreateTopics v0");
    wait_for_topic(&ctx, &mut c, &name, 3);
    assert_eq!(
        topic_config(&ctx, &mut c, &name, "retention.ms")
            .0
            .as_deref(),
        Some("60000"),
        "the v0 request's config was applied"
    );
    let answer = parse_create_topics(
        call_raw(
            &mut c,
            ApiKey::CreateTopics,
            0,
            &create_topics_legacy(0, &request),
        ),
        0,
    );
    assert_eq!(answer[0].1, TOPIC_ALREADY_EXISTS, "CreateTopics v0 again");

    // v1: validate_only creates nothing; the error message is there.
    let other = unique_name("ct-v1");
    let request = create_topics_req(vec![creatable(&other, 2, 1, &[])], true);
    let answer = parse_create_topics(
        call_raw(
            &mut c,
            ApiKey::CreateTopics,
            1,
            &create_topics_legacy(1, &request),
        ),
        1,
    );
    assert_eq!(answer[0].0, other);
    assert_code!(answer[0].1, NONE, "CreateTopics v1 validate_only");
    let md = metadata(
        &mut c,
        ctx.max_version(ApiKey::Metadata),
        Some(&[&other]),
        false,
    );
    assert_code!(
        md.topics[0].error_code,
        UNKNOWN_TOPIC_OR_PARTITION,
        "validate_only created nothing"
    );
    let request = create_topics_req(
        vec![creatable(&other, 2, 1, &[("retention.ms", "soon")])],
        false,
    );
    let answer = parse_create_topics(
        call_raw(
            &mut c,
            ApiKey::CreateTopics,
            1,
            &create_topics_legacy(1, &request),
        ),
        1,
    );
    assert_code!(answer[0].1, INVALID_CONFIG, "CreateTopics v1 bad config");
    assert!(
        answer[0]
            .2
            .as_deref()
            .is_some_and(|m| m.contains("retention.ms")),
        "v1 carries the message: {:?}",
        answer[0].2
    );

    let answer = parse_delete_topics_v0(call_raw(
        &mut c,
        ApiKey::DeleteTopics,
        0,
        &delete_topics_v0(&[&name, "no-such-topic-dt-v0"]),
    ));
    assert_eq!(
        answer,
        vec![
            (name.clone(), NONE),
            (
                "no-such-topic-dt-v0".to_string(),
                UNKNOWN_TOPIC_OR_PARTITION
            )
        ],
        "DeleteTopics v0"
    );
    wait_for_topic_gone(&ctx, &mut c, &name);
}

#[test]
fn versions_kafka_4_removed_and_tern_does_not_serve_close_the_connection() {
    let mut ctx = Ctx::new();
    let t = ctx.topic("closed", 1, &[]);
    // Produce v0-2 are advertised (KAFKA-18659) yet closed, as Kafka 4 closes them;
    // Fetch v0-3 are not advertised and closed too.
    let mut cases: Vec<(ApiKey, i16, Vec<u8>)> = Vec::new();
    for v in 0..=2 {
        let mut b = Vec::new();
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&1000i32.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        cases.push((ApiKey::Produce, v, b));
    }
    for v in 0..=3 {
        let mut b = Vec::new();
        b.extend_from_slice(&(-1i32).to_be_bytes());
        b.extend_from_slice(&100i32.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&1i32.to_be_bytes());
        put_string(&mut b, &t.name);
        b.extend_from_slice(&1i32.to_be_bytes());
        b.extend_from_slice(&0i32.to_be_bytes());
        b.extend_from_slice(&0i64.to_be_bytes());
        b.extend_from_slice(&1024i32.to_be_bytes());
        cases.push((ApiKey::Fetch, v, b));
    }
    for (key, v, body) in cases {
        let mut c = ctx.client();
        c.send_raw(key as i16, v, &body);
        match c.wait_outcome(Duration::from_secs(10)) {
            Outcome::Closed => {}
            Outcome::Frame(f) => panic!(
                "{key:?} v{v}: Kafka 4 closes the connection, tern answered {} bytes",
                f.len()
            ),
            Outcome::Timeout => panic!("{key:?} v{v}: neither answered nor closed in 10 s"),
        }
        ctx.assert_alive(&format!("{key:?} v{v}"));
    }
    assert_eq!(
        ctx.advertised(ApiKey::Produce).map(|(min, _)| min),
        Some(0),
        "Produce v0 stays advertised for old librdkafka"
    );
    assert_broker_serves(&ctx, "refused versions");
}
