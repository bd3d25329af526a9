//! KIP-932 share groups on the wire: ShareGroupHeartbeat v1's request checks and
//! epochs, group-kind conflicts (a share group is not joined by JoinGroup, commits
//! nothing, and a consumer group's id is not a share group), and ShareFetch /
//! ShareAcknowledge v1's session rules: acknowledgements on an opening request are an
//! INVALID_REQUEST, unknown sessions and wrong epochs are refused at the top level,
//! records are locked to the member that acquired them (another member's
//! acknowledgement is INVALID_RECORD_STATE), and closing a session releases what it
//! held with a raised delivery count. Then the operator's view:
//! ShareGroupDescribe, DescribeShareGroupOffsets and DeleteShareGroupOffsets.

use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AckBatchAck,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic,
};
use kafka_protocol::messages::{
    delete_share_group_offsets_request, describe_share_group_offsets_request, ApiKey,
    DeleteShareGroupOffsetsRequest, DescribeShareGroupOffsetsRequest, GroupId, OffsetCommitRequest,
    ShareAcknowledgeRequest, ShareFetchRequest, ShareFetchResponse, ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
};
use uuid::Uuid;

use crate::client::Client;
use crate::groups::*;
use crate::ops::*;
use crate::records::batch_of;

const FENCED_MEMBER_EPOCH: i16 = 110;
const INVALID_RECORD_STATE: i16 = 121;
const SHARE_SESSION_NOT_FOUND: i16 = 122;
const INVALID_SHARE_SESSION_EPOCH: i16 = 123;

fn heartbeat_request(group: &str, member: &str, epoch: i32) -> ShareGroupHeartbeatRequest {
    ShareGroupHeartbeatRequest::default()
        .with_group_id(GroupId(sb(group)))
        .with_member_id(sb(member))
        .with_member_epoch(epoch)
}

fn join_request(group: &str, member: &str, topics: &[&str]) -> ShareGroupHeartbeatRequest {
    heartbeat_request(group, member, 0)
        .with_subscribed_topic_names(Some(topics.iter().map(|t| tn(t)).collect()))
}

fn fetch_request(group: &str, member: &str, epoch: i32) -> ShareFetchRequest {
    ShareFetchRequest::default()
        .with_group_id(Some(GroupId(sb(group))))
        .with_member_id(Some(sb(member)))
        .with_share_session_epoch(epoch)
        .with_max_wait_ms(200)
        .with_max_bytes(1 << 20)
        .with_max_records(100)
        .with_batch_size(100)
}

fn partition_of(topic: Uuid, acks: Vec<AcknowledgementBatch>) -> Vec<FetchTopic> {
    vec![FetchTopic::default()
        .with_topic_id(topic)
        .with_partitions(vec![FetchPartition::default()
            .with_partition_index(0)
            .with_acknowledgement_batches(acks)])]
}

fn accept(first: i64, last: i64) -> AcknowledgementBatch {
    AcknowledgementBatch::default()
        .with_first_offset(first)
        .with_last_offset(last)
        .with_acknowledge_types(vec![1])
}

/// The acquired ranges of the one partition answered: `(first, last, delivery count)`.
fn acquired(r: &ShareFetchResponse) -> Vec<(i64, i64, i16)> {
    r.responses
        .iter()
        .flat_map(|t| t.partitions.iter())
        .flat_map(|p| p.acquired_records.iter())
        .map(|a| (a.first_offset, a.last_offset, a.delivery_count))
        .collect()
}

/// Fetches (as a new session) until something is acquired or 10 s pass.
fn acquire_some(c: &mut Client, group: &str, member: &str, topic: Uuid) -> ShareFetchResponse {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = c.call(
            1,
            &fetch_request(group, member, 0).with_topics(partition_of(topic, vec![])),
        );
        assert_code!(r.error_code, NONE, "share fetch {group}/{member}");
        if !acquired(&r).is_empty() || std::time::Instant::now() > deadline {
            return r;
        }
    }
}

#[test]
fn share_group_heartbeat_checks_requests_fences_epochs_and_keeps_kinds_apart() {
    let ctx = Ctx::with_args(&["--group-share-heartbeat-interval-ms", "400"]);
    let t = ctx.topic("sgh", 3, &[]);
    let mut c = ctx.client();
    let group = unique_group("sgh");
    wait_coordinator(&ctx, &mut c, &group);
    let bad = [
        join_request("", "m", &[&t.name]),
        join_request(&group, "", &[&t.name]),
        join_request(&group, "m", &[]),
        heartbeat_request(&group, "m", 0),
        join_request(&group, "m", &[&t.name]).with_member_epoch(-3),
        join_request(&group, "m", &[&t.name]).with_rack_id(Some(sb(""))),
    ];
    for (i, request) in bad.iter().enumerate() {
        let r = c.call(1, request);
        assert_code!(r.error_code, INVALID_REQUEST, "malformed heartbeat #{i}");
        assert!(r.error_message.is_some(), "#{i}: Kafka names what is wrong");
    }
    let a = Uuid::new_v4().to_string();
    let r = c.call(1, &join_request(&group, &a, &[&t.name]));
    assert_code!(r.error_code, NONE, "join");
    assert_eq!(r.member_epoch, 1);
    assert_eq!(r.heartbeat_interval_ms, 400);
    let assignment = r
        .assignment
        .expect("a join is answered with the assignment");
    assert_eq!(assignment.topic_partitions.len(), 1);
    assert_eq!(assignment.topic_partitions[0].topic_id, t.id);
    assert_eq!(assignment.topic_partitions[0].partitions, vec![0, 1, 2]);
    // A steady heartbeat carries no assignment; epochs ahead are fenced; strangers unknown.
    let r = c.call(1, &heartbeat_request(&group, &a, 1));
    assert_code!(r.error_code, NONE, "heartbeat");
    assert!(r.assignment.is_none(), "nothing changed");
    let r = c.call(1, &heartbeat_request(&group, &a, 9));
    assert_code!(r.error_code, FENCED_MEMBER_EPOCH, "epoch ahead");
    let r = c.call(1, &heartbeat_request(&group, "stranger", 1));
    assert_code!(r.error_code, UNKNOWN_MEMBER_ID, "unknown member");
    // A second member shares the partitions out; the first learns it at its next beat.
    let b = Uuid::new_v4().to_string();
    let r = c.call(1, &join_request(&group, &b, &[&t.name]));
    assert_eq!(r.member_epoch, 2);
    let b_parts = r.assignment.expect("b's partitions").topic_partitions[0]
        .partitions
        .clone();
    let r = c.call(1, &heartbeat_request(&group, &a, 1));
    assert_eq!(r.member_epoch, 2);
    let a_parts = r.assignment.expect("a's new partitions").topic_partitions[0]
        .partitions
        .clone();
    let mut all: Vec<i32> = a_parts.iter().chain(&b_parts).copied().collect();
    all.sort_unstable();
    assert_eq!(all, vec![0, 1, 2], "a={a_parts:?} b={b_parts:?}");
    // Kinds apart: a share group is not joined classically and commits nothing; a
    // consumer group's id is not a share group.
    let join = join_raw(
        &mut c,
        ctx.max_version(ApiKey::JoinGroup),
        &JoinSpec::consumer(&group, &[&t.name]),
    );
    assert_code!(
        join.error_code,
        INCONSISTENT_GROUP_PROTOCOL,
        "classic join of a share group"
    );
    let commit = c.call(
        9,
        &OffsetCommitRequest::default()
            .with_group_id(GroupId(sb(&group)))
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                kafka_protocol::messages::offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(tn(&t.name))
                    .with_partitions(vec![
                        kafka_protocol::messages::offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(1),
                    ]),
            ]),
    );
    assert_code!(
        commit.topics[0].partitions[0].error_code,
        GROUP_ID_NOT_FOUND,
        "a v9 commit to a share group (ILLEGAL_GENERATION before v9)"
    );
    let classic = unique_group("sgh-classic");
    wait_coordinator(&ctx, &mut c, &classic);
    join_ok(&ctx, &JoinSpec::consumer(&classic, &[&t.name]));
    let r = c.call(1, &join_request(&classic, &a, &[&t.name]));
    assert_code!(
        r.error_code,
        GROUP_ID_NOT_FOUND,
        "a classic group is not a share group"
    );
    // Leaving answers epoch -1 and the other member takes everything.
    let r = c.call(1, &heartbeat_request(&group, &a, 2));
    assert_code!(r.error_code, NONE, "steady");
    let r = c.call(1, &heartbeat_request(&group, &a, -1));
    assert_code!(r.error_code, NONE, "leave");
    assert_eq!(r.member_epoch, -1);
    let r = c.call(1, &heartbeat_request(&group, &b, 2));
    assert_eq!(r.member_epoch, 3);
    assert_eq!(
        r.assignment.expect("b's partitions").topic_partitions[0].partitions,
        vec![0, 1, 2]
    );
    // ShareGroupDescribe shows it; a consumer-group id is GROUP_ID_NOT_FOUND there.
    let d = c.call(
        1,
        &ShareGroupDescribeRequest::default()
            .with_group_ids(vec![GroupId(sb(&group)), GroupId(sb(&classic))]),
    );
    assert_code!(d.groups[0].error_code, NONE, "describe the share group");
    assert_eq!(d.groups[0].group_state.as_str(), "Stable");
    assert_eq!(d.groups[0].group_epoch, 3);
    assert_eq!(d.groups[0].members.len(), 1);
    assert_eq!(d.groups[0].members[0].member_id.as_str(), b);
    assert_code!(
        d.groups[1].error_code,
        GROUP_ID_NOT_FOUND,
        "a classic group"
    );
}

#[test]
fn share_fetch_sessions_locks_acknowledgements_and_release() {
    let ctx = Ctx::with_args(&["--group-share-auto-offset-reset", "earliest"]);
    let t = ctx.topic("sf", 1, &[]);
    let mut c = ctx.client();
    produce_ok(&ctx, &mut c, &t, 0, batch_of(5, 1_000));
    let group = unique_group("sf");
    wait_coordinator(&ctx, &mut c, &group);
    let (a, b) = ("member-a", "member-b");

    // Session rules, answered at the top level.
    let r = c.call(
        1,
        &fetch_request(&group, a, 0).with_topics(partition_of(t.id, vec![accept(0, 0)])),
    );
    assert_code!(
        r.error_code,
        INVALID_REQUEST,
        "acknowledgements on an opening fetch"
    );
    let r = c.call(1, &fetch_request(&group, a, 5));
    assert_code!(r.error_code, SHARE_SESSION_NOT_FOUND, "no such session");
    let r = c.call(
        1,
        &ShareAcknowledgeRequest::default()
            .with_group_id(Some(GroupId(sb(&group))))
            .with_member_id(Some(sb(a)))
            .with_share_session_epoch(0),
    );
    assert_code!(
        r.error_code,
        INVALID_SHARE_SESSION_EPOCH,
        "ShareAcknowledge cannot open"
    );

    // a acquires everything (delivery count 1); the whole batch comes with it.
    let r = acquire_some(&mut c, &group, a, t.id);
    assert_eq!(acquired(&r), vec![(0, 4, 1)]);
    let p = &r.responses[0].partitions[0];
    assert!(p.records.as_ref().is_some_and(|r| !r.is_empty()), "records");
    assert!(r.acquisition_lock_timeout_ms > 0);
    // The session moved to epoch 1: epoch 3 is refused.
    let r = c.call(1, &fetch_request(&group, a, 3));
    assert_code!(r.error_code, INVALID_SHARE_SESSION_EPOCH, "wrong epoch");

    // b gets nothing (all locked to a), and may not acknowledge a's records.
    let r = c.call(
        1,
        &fetch_request(&group, b, 0)
            .with_max_wait_ms(0)
            .with_topics(partition_of(t.id, vec![])),
    );
    assert_code!(r.error_code, NONE, "b's fetch");
    assert!(acquired(&r).is_empty(), "locked to a: {:?}", acquired(&r));
    let p = &r.responses[0].partitions[0];
    assert!(p.records.is_some(), "records are never null");
    let r = c.call(
        1,
        &fetch_request(&group, b, 1)
            .with_max_wait_ms(0)
            .with_topics(partition_of(t.id, vec![accept(0, 1)])),
    );
    assert_code!(r.error_code, NONE, "b's acknowledging fetch");
    assert_code!(
        r.responses[0].partitions[0].acknowledge_error_code,
        INVALID_RECORD_STATE,
        "b acknowledging a's records"
    );

    // a accepts 0..=1 in a ShareAcknowledge (epoch 1), then closes its session (-1):
    // 2..=4 go back with their locks released.
    let ack = c.call(
        1,
        &ShareAcknowledgeRequest::default()
            .with_group_id(Some(GroupId(sb(&group))))
            .with_member_id(Some(sb(a)))
            .with_share_session_epoch(1)
            .with_topics(vec![AcknowledgeTopic::default()
                .with_topic_id(t.id)
                .with_partitions(vec![AcknowledgePartition::default()
                    .with_partition_index(0)
                    .with_acknowledgement_batches(vec![AckBatchAck::default()
                        .with_first_offset(0)
                        .with_last_offset(1)
                        .with_acknowledge_types(vec![1])])])]),
    );
    assert_code!(ack.error_code, NONE, "ShareAcknowledge");
    assert_code!(ack.responses[0].partitions[0].error_code, NONE, "accepted");
    let close = c.call(
        1,
        &ShareAcknowledgeRequest::default()
            .with_group_id(Some(GroupId(sb(&group))))
            .with_member_id(Some(sb(a)))
            .with_share_session_epoch(-1),
    );
    assert_code!(close.error_code, NONE, "closing a's session");
    let r = c.call(
        1,
        &fetch_request(&group, b, 2).with_topics(partition_of(t.id, vec![])),
    );
    assert_code!(r.error_code, NONE, "b fetches again");
    assert_eq!(
        acquired(&r),
        vec![(2, 4, 2)],
        "released records, delivered again"
    );

    // The group's start offset is past what a accepted.
    let d = c.call(
        0,
        &DescribeShareGroupOffsetsRequest::default().with_groups(vec![
            describe_share_group_offsets_request::DescribeShareGroupOffsetsRequestGroup::default()
                .with_group_id(GroupId(sb(&group)))
                .with_topics(None),
        ]),
    );
    assert_code!(d.groups[0].error_code, NONE, "DescribeShareGroupOffsets");
    assert_eq!(d.groups[0].topics.len(), 1);
    assert_eq!(d.groups[0].topics[0].topic_id, t.id);
    assert_eq!(d.groups[0].topics[0].partitions[0].start_offset, 2);

    // DeleteShareGroupOffsets: the topic's state goes (the group starts it afresh); a
    // topic that does not exist, or that the group holds no state for, is
    // UNKNOWN_TOPIC_OR_PARTITION (the latter with Kafka's message); the group must be a
    // share group, and named.
    let other = ctx.topic("sf-other", 1, &[]);
    let delete = |group: &str, topics: &[&str]| {
        DeleteShareGroupOffsetsRequest::default()
            .with_group_id(GroupId(sb(group)))
            .with_topics(
                topics
                    .iter()
                    .map(|name| {
                        delete_share_group_offsets_request::DeleteShareGroupOffsetsRequestTopic::default()
                            .with_topic_name(tn(name))
                    })
                    .collect(),
            )
    };
    let r = c.call(
        0,
        &delete(&group, &[&t.name, "sf-no-such-topic", &other.name]),
    );
    assert_code!(r.error_code, NONE, "DeleteShareGroupOffsets");
    let codes: Vec<(String, i16)> = r
        .responses
        .iter()
        .map(|t| (t.topic_name.to_string(), t.error_code))
        .collect();
    assert_eq!(
        codes,
        vec![
            (t.name.clone(), NONE),
            ("sf-no-such-topic".to_string(), UNKNOWN_TOPIC_OR_PARTITION),
            (other.name.clone(), UNKNOWN_TOPIC_OR_PARTITION),
        ]
    );
    assert_eq!(r.responses[0].topic_id, t.id);
    assert_eq!(
        r.responses[2].error_message.as_deref(),
        Some("There is no offset information to delete.")
    );
    let r = c.call(0, &delete(&unique_group("sf-none"), &[&t.name]));
    assert_code!(r.error_code, GROUP_ID_NOT_FOUND, "not a share group");
    let r = c.call(0, &delete("", &[&t.name]));
    assert_code!(r.error_code, INVALID_GROUP_ID, "no group id");
    // A new session starts the topic afresh at the earliest record.
    let r = c.call(
        1,
        &fetch_request(&group, "member-c", 0).with_topics(partition_of(t.id, vec![])),
    );
    assert_code!(r.error_code, NONE, "c's fetch");
    assert_eq!(acquired(&r), vec![(0, 4, 1)], "the state was deleted");
}
