//! Test context (broker + advertised versions) and version-aware request helpers.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::error::ParseResponseErrorCode;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::delete_records_response::DeleteRecordsPartitionResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::list_offsets_response::ListOffsetsPartitionResponse;
use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    alter_configs_request, create_partitions_request, create_topics_request,
    delete_records_request, delete_topics_request, describe_configs_request, fetch_request,
    incremental_alter_configs_request, list_offsets_request, metadata_request,
    offset_for_leader_epoch_request, produce_request, AlterConfigsRequest, ApiKey,
    ApiVersionsRequest, ApiVersionsResponse, CreatePartitionsRequest, CreateTopicsRequest,
    CreateTopicsResponse, DeleteRecordsRequest, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeClusterRequest, DescribeConfigsRequest, FetchRequest, FetchResponse,
    IncrementalAlterConfigsRequest, InitProducerIdRequest, InitProducerIdResponse,
    ListOffsetsRequest, MetadataRequest, MetadataResponse, OffsetForLeaderEpochRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::broker::Broker;
use crate::client::{Client, Outcome};
use crate::records::{decode_batches, DecodedBatch};

// ------------------------------------------------------------------ error codes

pub const NONE: i16 = 0;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const CORRUPT_MESSAGE: i16 = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const LEADER_NOT_AVAILABLE: i16 = 5;
pub const MESSAGE_TOO_LARGE: i16 = 10;
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const NOT_COORDINATOR: i16 = 16;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const INVALID_REQUIRED_ACKS: i16 = 21;
pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const INVALID_GROUP_ID: i16 = 24;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
pub const UNSUPPORTED_VERSION: i16 = 35;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_PARTITIONS: i16 = 37;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const INVALID_CONFIG: i16 = 40;
pub const INVALID_REQUEST: i16 = 42;
pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const MEMBER_ID_REQUIRED: i16 = 79;
pub const FENCED_INSTANCE_ID: i16 = 82;
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
pub const INVALID_RECORD: i16 = 87;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
pub const INVALID_PRODUCER_ID_MAPPING: i16 = 49;
pub const UNKNOWN_TOPIC_ID: i16 = 100;
pub const ILLEGAL_SASL_STATE: i16 = 34;
pub const RESOURCE_NOT_FOUND: i16 = 91;
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;
pub const SOURCE_DYNAMIC_TOPIC_CONFIG: i8 = 1;
pub const SOURCE_DYNAMIC_BROKER_CONFIG: i8 = 2;
pub const SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG: i8 = 3;
pub const SOURCE_STATIC_BROKER_CONFIG: i8 = 4;
pub const SOURCE_DEFAULT_CONFIG: i8 = 5;

pub fn ename(code: i16) -> String {
    match code.err() {
        None => "NONE(0)".to_string(),
        Some(e) => format!("{e:?}({code})"),
    }
}

/// Asserts an error code, naming both codes in the message.
#[macro_export]
macro_rules! assert_code {
    ($actual:expr, $expected:expr, $($ctx:tt)+) => {{
        let a: i16 = $actual;
        let e: i16 = $expected;
        assert!(a == e, "{}: expected error {} but got {}", format!($($ctx)+), $crate::ops::ename(e), $crate::ops::ename(a));
    }};
}

/// Asserts an error code is one of a set.
#[macro_export]
macro_rules! assert_code_in {
    ($actual:expr, $expected:expr, $($ctx:tt)+) => {{
        let a: i16 = $actual;
        let e: &[i16] = $expected;
        assert!(e.contains(&a), "{}: expected one of {:?} but got {}", format!($($ctx)+),
            e.iter().map(|c| $crate::ops::ename(*c)).collect::<Vec<_>>(), $crate::ops::ename(a));
    }};
}

/// Soft check of an error code: records a failure instead of panicking, so one run reports
/// every failing version. Finish with `assert_no_failures`.
#[macro_export]
macro_rules! check_code {
    ($fails:expr, $actual:expr, $expected:expr, $($ctx:tt)+) => {{
        let a: i16 = $actual;
        let e: i16 = $expected;
        if a != e {
            $fails.push(format!("{}: expected error {} but got {}", format!($($ctx)+), $crate::ops::ename(e), $crate::ops::ename(a)));
        }
    }};
}

#[macro_export]
macro_rules! check_code_in {
    ($fails:expr, $actual:expr, $expected:expr, $($ctx:tt)+) => {{
        let a: i16 = $actual;
        let e: &[i16] = $expected;
        if !e.contains(&a) {
            $fails.push(format!("{}: expected one of {:?} but got {}", format!($($ctx)+),
                e.iter().map(|c| $crate::ops::ename(*c)).collect::<Vec<_>>(), $crate::ops::ename(a)));
        }
    }};
}

#[track_caller]
pub fn assert_no_failures(fails: &[String]) {
    assert!(
        fails.is_empty(),
        "{} failed check(s):\n  {}",
        fails.len(),
        fails.join("\n  ")
    );
}

pub fn tn(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

// ------------------------------------------------------------------ context

/// A topic as addressed by name (old versions) or id (new versions).
#[derive(Debug, Clone)]
pub struct Topic {
    pub name: String,
    pub id: Uuid,
}

#[derive(Debug)]
pub struct Ctx {
    pub broker: Broker,
    /// api_key -> (min, max) as advertised by the broker's ApiVersions.
    pub apis: BTreeMap<i16, (i16, i16)>,
    /// node id of the (first) broker in Metadata.
    pub node_id: i32,
}

/// The API versions the tests need to be present (tern's advertised minimum: Kafka
/// 3.9's where its format needs no old message format, see `t_legacy`).
pub const REQUIRED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::Produce, 0, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 0, 10),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::CreateTopics, 0, 7),
    (ApiKey::DeleteTopics, 0, 6),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DescribeConfigs, 0, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 0),
    (ApiKey::ListPartitionReassignments, 0, 0),
    // Consumer groups (classic protocol) and committed offsets.
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::OffsetCommit, 0, 9),
    (ApiKey::OffsetFetch, 0, 9),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
];

/// Discovers the advertised API versions using ApiVersions v3, falling back to v0.
pub fn discover_apis(addr: &str) -> BTreeMap<i16, (i16, i16)> {
    for v in [3i16, 0] {
        let mut c = Client::connect(addr);
        let req = api_versions_req(v);
        let corr = c.send(v, &req);
        let Outcome::Frame(payload) = c.wait_outcome(Duration::from_secs(10)) else {
            continue;
        };
        let mut buf = Bytes::from(payload);
        if buf.len() < 4 {
            continue;
        }
        let got = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        if got != corr {
            continue;
        }
        let _ = buf.split_to(4);
        let Ok(resp) =
            <ApiVersionsResponse as kafka_protocol::protocol::Decodable>::decode(&mut buf, v)
        else {
            continue;
        };
        if resp.error_code != 0 {
            continue;
        }
        return resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, (k.min_version, k.max_version)))
            .collect();
    }
    panic!("could not discover the broker's API versions with ApiVersions v3 or v0");
}

impl Ctx {
    pub fn new() -> Ctx {
        Ctx::with_args(&[])
    }

    /// A context whose owned broker gets extra `tern serve` arguments (see
    /// `Broker::start_with`; ignored for external targets).
    pub fn with_args(extra: &[&str]) -> Ctx {
        let broker = Broker::start_with(extra);
        let apis = discover_apis(&broker.addr);
        let mut ctx = Ctx {
            broker,
            apis,
            node_id: -1,
        };
        let mut c = ctx.client();
        let v = ctx.max_version(ApiKey::Metadata);
        let md = c.call(v, &metadata_req(v, Some(&[]), false));
        ctx.node_id = md.brokers.first().map(|b| *b.node_id).unwrap_or(-1);
        ctx
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.broker.addr)
    }

    pub fn external(&self) -> bool {
        self.broker.external
    }

    /// Advertised range of `key`, if any.
    pub fn advertised(&self, key: ApiKey) -> Option<(i16, i16)> {
        self.apis.get(&(key as i16)).copied()
    }

    /// Versions of `key` in [lo, hi] that the broker advertises and the codec supports.
    pub fn versions(&self, key: ApiKey, lo: i16, hi: i16) -> Vec<i16> {
        let Some((amin, amax)) = self.advertised(key) else {
            return vec![];
        };
        let lib = key.valid_versions();
        let lo = lo.max(amin).max(lib.min);
        let hi = hi.min(amax).min(lib.max);
        (lo..=hi).collect()
    }

    /// Like `versions`, but panics when the result is empty (the API is required).
    pub fn versions_req(&self, key: ApiKey, lo: i16, hi: i16) -> Vec<i16> {
        let v = self.versions(key, lo, hi);
        assert!(
            !v.is_empty(),
            "broker advertises no version of {key:?} in {lo}..={hi} (advertised: {:?})",
            self.advertised(key)
        );
        v
    }

    pub fn max_version(&self, key: ApiKey) -> i16 {
        *self
            .versions(key, i16::MIN, i16::MAX)
            .last()
            .unwrap_or_else(|| {
                panic!(
                    "broker advertises no usable version of {key:?}: {:?}",
                    self.advertised(key)
                )
            })
    }

    pub fn supports(&self, key: ApiKey, v: i16) -> bool {
        self.versions(key, v, v).len() == 1
    }

    /// A fresh topic created with the newest CreateTopics, waited for in Metadata.
    pub fn topic(&self, prefix: &str, partitions: i32, configs: &[(&str, &str)]) -> Topic {
        let name = crate::broker::unique_name(prefix);
        let mut c = self.client();
        create_topic_ok(self, &mut c, &name, partitions, configs);
        let t = wait_for_topic(self, &mut c, &name, partitions);
        Topic {
            name,
            id: t.topic_id,
        }
    }

    /// Fails the test with the broker log when the owned broker is no longer running.
    pub fn assert_alive(&mut self, what: &str) {
        if !self.broker.is_running() {
            panic!(
                "broker is not running after {what}: exit status {}\n--- broker log tail ---\n{}",
                self.broker.exit_status(),
                self.broker.log_tail()
            );
        }
    }
}

// ------------------------------------------------------------------ ApiVersions

pub fn api_versions_req(v: i16) -> ApiVersionsRequest {
    let mut r = ApiVersionsRequest::default();
    if v >= 3 {
        r = r
            .with_client_software_name(sb("tern-protocol-tests"))
            .with_client_software_version(sb("0.1.0"));
    }
    r
}

// ------------------------------------------------------------------ Metadata

/// Metadata request. `topics: None` = all topics. `allow_auto` is forced true below v4.
pub fn metadata_req(v: i16, topics: Option<&[&str]>, allow_auto: bool) -> MetadataRequest {
    let topics = match topics {
        None if v == 0 => Some(vec![]),
        None => None,
        Some(ts) => Some(
            ts.iter()
                .map(|t| metadata_request::MetadataRequestTopic::default().with_name(Some(tn(t))))
                .collect(),
        ),
    };
    MetadataRequest::default()
        .with_topics(topics)
        .with_allow_auto_topic_creation(v < 4 || allow_auto)
}

pub fn metadata(
    c: &mut Client,
    v: i16,
    topics: Option<&[&str]>,
    allow_auto: bool,
) -> MetadataResponse {
    c.call(v, &metadata_req(v, topics, allow_auto))
}

/// Metadata for one topic (newest version, no auto-creation).
pub fn topic_metadata(ctx: &Ctx, c: &mut Client, name: &str) -> MetadataResponseTopic {
    let v = ctx.max_version(ApiKey::Metadata);
    let md = metadata(c, v, Some(&[name]), false);
    md.topics
        .into_iter()
        .find(|t| t.name.as_ref().map(|n| n.0.as_str()) == Some(name))
        .unwrap_or_else(|| panic!("Metadata v{v} response has no entry for requested topic {name}"))
}

/// Polls Metadata until the topic exists with `partitions` partitions, all with a leader.
pub fn wait_for_topic(
    ctx: &Ctx,
    c: &mut Client,
    name: &str,
    partitions: i32,
) -> MetadataResponseTopic {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let t = topic_metadata(ctx, c, name);
        if t.error_code == NONE
            && t.partitions.len() as i32 == partitions
            && t.partitions
                .iter()
                .all(|p| p.error_code == NONE && *p.leader_id >= 0)
        {
            return t;
        }
        if Instant::now() > deadline {
            panic!(
                "topic {name} not visible with {partitions} led partitions in Metadata within 15 s: error {}, {} partitions",
                ename(t.error_code),
                t.partitions.len()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Polls Metadata (no auto-create) until the topic reports UNKNOWN_TOPIC_OR_PARTITION.
pub fn wait_for_topic_gone(ctx: &Ctx, c: &mut Client, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let t = topic_metadata(ctx, c, name);
        if t.error_code == UNKNOWN_TOPIC_OR_PARTITION {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "deleted topic {name} still in Metadata after 15 s (error {})",
                ename(t.error_code)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ------------------------------------------------------------------ CreateTopics

pub fn creatable(
    name: &str,
    partitions: i32,
    rf: i16,
    configs: &[(&str, &str)],
) -> create_topics_request::CreatableTopic {
    create_topics_request::CreatableTopic::default()
        .with_name(tn(name))
        .with_num_partitions(partitions)
        .with_replication_factor(rf)
        .with_configs(
            configs
                .iter()
                .map(|(k, v)| {
                    create_topics_request::CreatableTopicConfig::default()
                        .with_name(sb(k))
                        .with_value(Some(sb(v)))
                })
                .collect(),
        )
}

pub fn create_topics_req(
    topics: Vec<create_topics_request::CreatableTopic>,
    validate_only: bool,
) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_topics(topics)
        .with_timeout_ms(30_000)
        .with_validate_only(validate_only)
}

pub fn create_topics(
    c: &mut Client,
    v: i16,
    topics: Vec<create_topics_request::CreatableTopic>,
    validate_only: bool,
) -> CreateTopicsResponse {
    c.call(v, &create_topics_req(topics, validate_only))
}

/// Creates one topic and returns its result's error code (newest CreateTopics).
pub fn create_one(
    ctx: &Ctx,
    c: &mut Client,
    v: Option<i16>,
    t: create_topics_request::CreatableTopic,
    validate_only: bool,
) -> (i16, Option<String>) {
    let v = v.unwrap_or_else(|| ctx.max_version(ApiKey::CreateTopics));
    let name = t.name.0.to_string();
    let resp = create_topics(c, v, vec![t], validate_only);
    assert_eq!(
        resp.topics.len(),
        1,
        "CreateTopics v{v}: expected 1 result for 1 topic"
    );
    let r = &resp.topics[0];
    assert_eq!(
        r.name.0.as_str(),
        name,
        "CreateTopics v{v}: result names another topic"
    );
    (
        r.error_code,
        r.error_message.as_ref().map(|m| m.to_string()),
    )
}

pub fn create_topic_ok(
    ctx: &Ctx,
    c: &mut Client,
    name: &str,
    partitions: i32,
    configs: &[(&str, &str)],
) {
    let (code, msg) = create_one(ctx, c, None, creatable(name, partitions, 1, configs), false);
    assert!(
        code == NONE,
        "creating topic {name}: {} {msg:?}",
        ename(code)
    );
}

// ------------------------------------------------------------------ Produce

pub fn produce_req(
    v: i16,
    topic: &Topic,
    partition: i32,
    records: Vec<u8>,
    acks: i16,
) -> ProduceRequest {
    let mut td = produce_request::TopicProduceData::default().with_partition_data(vec![
        produce_request::PartitionProduceData::default()
            .with_index(partition)
            .with_records(Some(Bytes::from(records))),
    ]);
    if v >= 13 {
        td = td.with_topic_id(topic.id);
    } else {
        td = td.with_name(tn(&topic.name));
    }
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![td])
}

/// Produces one record set (acks=-1) and returns the single partition response.
pub fn produce(
    c: &mut Client,
    v: i16,
    topic: &Topic,
    partition: i32,
    records: Vec<u8>,
) -> PartitionProduceResponse {
    produce_acks(c, v, topic, partition, records, -1)
}

pub fn produce_acks(
    c: &mut Client,
    v: i16,
    topic: &Topic,
    partition: i32,
    records: Vec<u8>,
    acks: i16,
) -> PartitionProduceResponse {
    let resp = c.call(v, &produce_req(v, topic, partition, records, acks));
    assert_eq!(
        resp.responses.len(),
        1,
        "Produce v{v}: expected one topic response, got {}",
        resp.responses.len()
    );
    let tr = &resp.responses[0];
    if v >= 13 {
        assert_eq!(tr.topic_id, topic.id, "Produce v{v}: response topic id");
    } else {
        assert_eq!(
            tr.name.0.as_str(),
            topic.name,
            "Produce v{v}: response topic name"
        );
    }
    assert_eq!(
        tr.partition_responses.len(),
        1,
        "Produce v{v}: expected one partition response"
    );
    let pr = tr.partition_responses[0].clone();
    assert_eq!(
        pr.index, partition,
        "Produce v{v}: response partition index"
    );
    pr
}

/// Produces and asserts success; returns the base offset.
pub fn produce_ok(
    ctx: &Ctx,
    c: &mut Client,
    topic: &Topic,
    partition: i32,
    records: Vec<u8>,
) -> i64 {
    let v = ctx.max_version(ApiKey::Produce);
    let pr = produce(c, v, topic, partition, records);
    assert!(
        pr.error_code == NONE,
        "Produce v{v} to {}/{partition}: {} {:?}",
        topic.name,
        ename(pr.error_code),
        pr.error_message
    );
    pr.base_offset
}

// ------------------------------------------------------------------ Fetch

#[derive(Debug, Clone, Copy)]
pub struct FetchOpts {
    pub offset: i64,
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
}

impl FetchOpts {
    pub fn at(offset: i64) -> FetchOpts {
        FetchOpts {
            offset,
            max_wait_ms: 0,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partition_max_bytes: 1 << 20,
        }
    }
}

pub fn fetch_req(v: i16, topic: &Topic, partition: i32, o: FetchOpts) -> FetchRequest {
    let mut ft = fetch_request::FetchTopic::default().with_partitions(vec![
        fetch_request::FetchPartition::default()
            .with_partition(partition)
            .with_fetch_offset(o.offset)
            .with_partition_max_bytes(o.partition_max_bytes),
    ]);
    if v >= 13 {
        ft = ft.with_topic_id(topic.id);
    } else {
        ft = ft.with_topic(tn(&topic.name));
    }
    FetchRequest::default()
        .with_max_wait_ms(o.max_wait_ms)
        .with_min_bytes(o.min_bytes)
        .with_max_bytes(o.max_bytes)
        .with_topics(vec![ft])
}

/// Checks a fetch response addresses exactly our topic/partition; returns (top-level error, partition).
pub fn fetch_partition(
    v: i16,
    resp: FetchResponse,
    topic: &Topic,
    partition: i32,
) -> (i16, PartitionData) {
    let top = resp.error_code;
    assert_eq!(
        resp.responses.len(),
        1,
        "Fetch v{v}: expected one topic in the response (top-level error {})",
        ename(top)
    );
    let tr = &resp.responses[0];
    if v >= 13 {
        assert_eq!(tr.topic_id, topic.id, "Fetch v{v}: response topic id");
    } else {
        assert_eq!(
            tr.topic.0.as_str(),
            topic.name,
            "Fetch v{v}: response topic name"
        );
    }
    assert_eq!(tr.partitions.len(), 1, "Fetch v{v}: expected one partition");
    let p = tr.partitions[0].clone();
    assert_eq!(p.partition_index, partition, "Fetch v{v}: partition index");
    (top, p)
}

pub fn fetch(c: &mut Client, v: i16, topic: &Topic, partition: i32, o: FetchOpts) -> PartitionData {
    let resp = c.call(v, &fetch_req(v, topic, partition, o));
    let (top, p) = fetch_partition(v, resp, topic, partition);
    assert_code!(top, NONE, "Fetch v{v}: top-level error");
    p
}

pub fn records_of(p: &PartitionData) -> Bytes {
    p.records.clone().unwrap_or_default()
}

pub fn batches_of(v: i16, p: &PartitionData) -> Vec<DecodedBatch> {
    let r = records_of(p);
    match decode_batches(&r) {
        Ok(b) => b,
        Err(e) => panic!(
            "Fetch v{v}: cannot parse the records ({} bytes): {e}",
            r.len()
        ),
    }
}

// ------------------------------------------------------------------ ListOffsets

pub const LATEST: i64 = -1;
pub const EARLIEST: i64 = -2;
pub const MAX_TIMESTAMP: i64 = -3;

pub fn list_offsets_req(v: i16, topic: &str, partition: i32, ts: i64) -> ListOffsetsRequest {
    let mut r = ListOffsetsRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![list_offsets_request::ListOffsetsTopic::default()
            .with_name(tn(topic))
            .with_partitions(vec![
                list_offsets_request::ListOffsetsPartition::default()
                    .with_partition_index(partition)
                    .with_timestamp(ts),
            ])]);
    if v >= 10 {
        r = r.with_timeout_ms(10_000);
    }
    r
}

pub fn list_offsets(
    c: &mut Client,
    v: i16,
    topic: &str,
    partition: i32,
    ts: i64,
) -> ListOffsetsPartitionResponse {
    let resp = c.call(v, &list_offsets_req(v, topic, partition, ts));
    assert_eq!(resp.topics.len(), 1, "ListOffsets v{v}: expected one topic");
    assert_eq!(
        resp.topics[0].name.0.as_str(),
        topic,
        "ListOffsets v{v}: topic name"
    );
    assert_eq!(
        resp.topics[0].partitions.len(),
        1,
        "ListOffsets v{v}: expected one partition"
    );
    let p = resp.topics[0].partitions[0].clone();
    assert_eq!(
        p.partition_index, partition,
        "ListOffsets v{v}: partition index"
    );
    p
}

/// Offset for `ts` (newest ListOffsets), asserting no error.
pub fn offset_for(ctx: &Ctx, c: &mut Client, topic: &str, partition: i32, ts: i64) -> i64 {
    let v = ctx.max_version(ApiKey::ListOffsets);
    let p = list_offsets(c, v, topic, partition, ts);
    assert_code!(
        p.error_code,
        NONE,
        "ListOffsets v{v} {topic}/{partition} ts {ts}"
    );
    p.offset
}

// ------------------------------------------------------------------ InitProducerId

pub fn init_producer_id(c: &mut Client, v: i16) -> InitProducerIdResponse {
    let req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    c.call(v, &req)
}

// ------------------------------------------------------------------ DeleteTopics

pub fn delete_topics_by_name(c: &mut Client, v: i16, names: &[&str]) -> DeleteTopicsResponse {
    let mut r = DeleteTopicsRequest::default().with_timeout_ms(30_000);
    if v >= 6 {
        r = r.with_topics(
            names
                .iter()
                .map(|n| delete_topics_request::DeleteTopicState::default().with_name(Some(tn(n))))
                .collect(),
        );
    } else {
        r = r.with_topic_names(names.iter().map(|n| tn(n)).collect());
    }
    c.call(v, &r)
}

pub fn delete_topic_by_id(c: &mut Client, v: i16, id: Uuid) -> DeleteTopicsResponse {
    let r = DeleteTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![
            delete_topics_request::DeleteTopicState::default().with_topic_id(id)
        ]);
    c.call(v, &r)
}

// ------------------------------------------------------------------ CreatePartitions

pub fn create_partitions(
    c: &mut Client,
    v: i16,
    name: &str,
    count: i32,
    validate_only: bool,
) -> CreatePartitionsTopicResult {
    let r = CreatePartitionsRequest::default()
        .with_timeout_ms(30_000)
        .with_validate_only(validate_only)
        .with_topics(vec![
            create_partitions_request::CreatePartitionsTopic::default()
                .with_name(tn(name))
                .with_count(count)
                .with_assignments(None),
        ]);
    let resp = c.call(v, &r);
    assert_eq!(
        resp.results.len(),
        1,
        "CreatePartitions v{v}: expected one result"
    );
    assert_eq!(
        resp.results[0].name.0.as_str(),
        name,
        "CreatePartitions v{v}: result name"
    );
    resp.results[0].clone()
}

// ------------------------------------------------------------------ DeleteRecords

pub fn delete_records(
    c: &mut Client,
    v: i16,
    name: &str,
    partition: i32,
    offset: i64,
) -> DeleteRecordsPartitionResult {
    let r = DeleteRecordsRequest::default()
        .with_timeout_ms(30_000)
        .with_topics(vec![delete_records_request::DeleteRecordsTopic::default()
            .with_name(tn(name))
            .with_partitions(vec![
                delete_records_request::DeleteRecordsPartition::default()
                    .with_partition_index(partition)
                    .with_offset(offset),
            ])]);
    let resp = c.call(v, &r);
    assert_eq!(
        resp.topics.len(),
        1,
        "DeleteRecords v{v}: expected one topic"
    );
    assert_eq!(
        resp.topics[0].name.0.as_str(),
        name,
        "DeleteRecords v{v}: topic name"
    );
    assert_eq!(
        resp.topics[0].partitions.len(),
        1,
        "DeleteRecords v{v}: expected one partition"
    );
    let p = resp.topics[0].partitions[0].clone();
    assert_eq!(
        p.partition_index, partition,
        "DeleteRecords v{v}: partition index"
    );
    p
}

// ------------------------------------------------------------------ configs

pub fn describe_configs(
    c: &mut Client,
    v: i16,
    rtype: i8,
    name: &str,
    keys: Option<&[&str]>,
    synonyms: bool,
) -> DescribeConfigsResult {
    let mut r = DescribeConfigsRequest::default()
        .with_include_synonyms(synonyms)
        .with_resources(vec![
            describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(rtype)
                .with_resource_name(sb(name))
                .with_configuration_keys(keys.map(|ks| ks.iter().map(|k| sb(k)).collect())),
        ]);
    if v >= 3 {
        r = r.with_include_documentation(true);
    }
    let resp = c.call(v, &r);
    assert_eq!(
        resp.results.len(),
        1,
        "DescribeConfigs v{v}: expected one result"
    );
    let res = resp.results[0].clone();
    assert_eq!(
        res.resource_type, rtype,
        "DescribeConfigs v{v}: resource type"
    );
    assert_eq!(
        res.resource_name.as_str(),
        name,
        "DescribeConfigs v{v}: resource name"
    );
    res
}

pub fn find_config<'a>(
    res: &'a DescribeConfigsResult,
    name: &str,
) -> Option<&'a DescribeConfigsResourceResult> {
    res.configs.iter().find(|c| c.name.as_str() == name)
}

/// (value, source) of one topic config via the newest DescribeConfigs.
pub fn topic_config(ctx: &Ctx, c: &mut Client, topic: &str, key: &str) -> (Option<String>, i8) {
    let v = ctx.max_version(ApiKey::DescribeConfigs);
    let res = describe_configs(c, v, RESOURCE_TOPIC, topic, Some(&[key]), false);
    assert_code!(res.error_code, NONE, "DescribeConfigs v{v} topic {topic}");
    let cfg = find_config(&res, key)
        .unwrap_or_else(|| panic!("DescribeConfigs v{v}: {topic} has no {key}"));
    (cfg.value.as_ref().map(|s| s.to_string()), cfg.config_source)
}

pub fn alter_configs(
    c: &mut Client,
    v: i16,
    rtype: i8,
    name: &str,
    configs: &[(&str, &str)],
    validate_only: bool,
) -> (i16, Option<String>) {
    let r = AlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![alter_configs_request::AlterConfigsResource::default()
            .with_resource_type(rtype)
            .with_resource_name(sb(name))
            .with_configs(
                configs
                    .iter()
                    .map(|(k, val)| {
                        alter_configs_request::AlterableConfig::default()
                            .with_name(sb(k))
                            .with_value(Some(sb(val)))
                    })
                    .collect(),
            )]);
    let resp = c.call(v, &r);
    assert_eq!(
        resp.responses.len(),
        1,
        "AlterConfigs v{v}: expected one resource response"
    );
    let rr = &resp.responses[0];
    assert_eq!(
        rr.resource_name.as_str(),
        name,
        "AlterConfigs v{v}: resource name"
    );
    assert_eq!(rr.resource_type, rtype, "AlterConfigs v{v}: resource type");
    (
        rr.error_code,
        rr.error_message.as_ref().map(|m| m.to_string()),
    )
}

pub const OP_SET: i8 = 0;
pub const OP_DELETE: i8 = 1;

pub fn incremental_alter(
    c: &mut Client,
    v: i16,
    rtype: i8,
    name: &str,
    ops: &[(&str, i8, Option<&str>)],
    validate_only: bool,
) -> (i16, Option<String>) {
    let r = IncrementalAlterConfigsRequest::default()
        .with_validate_only(validate_only)
        .with_resources(vec![
            incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(rtype)
                .with_resource_name(sb(name))
                .with_configs(
                    ops.iter()
                        .map(|(k, op, val)| {
                            incremental_alter_configs_request::AlterableConfig::default()
                                .with_name(sb(k))
                                .with_config_operation(*op)
                                .with_value(val.map(sb))
                        })
                        .collect(),
                ),
        ]);
    let resp = c.call(v, &r);
    assert_eq!(
        resp.responses.len(),
        1,
        "IncrementalAlterConfigs v{v}: expected one resource response"
    );
    let rr = &resp.responses[0];
    assert_eq!(
        rr.resource_name.as_str(),
        name,
        "IncrementalAlterConfigs v{v}: resource name"
    );
    (
        rr.error_code,
        rr.error_message.as_ref().map(|m| m.to_string()),
    )
}

pub fn describe_cluster_req(_v: i16) -> DescribeClusterRequest {
    DescribeClusterRequest::default()
}

// ------------------------------------------------------------------ health check

/// Asserts a fresh connection can do ApiVersions, Metadata, CreateTopics, Produce and Fetch.
pub fn assert_broker_serves(ctx: &Ctx, what: &str) {
    let mut c = Client::try_connect(&ctx.broker.addr)
        .unwrap_or_else(|e| panic!("after {what}: cannot connect to the broker: {e}"));
    let v = ctx.max_version(ApiKey::ApiVersions);
    let av = c.call(v, &api_versions_req(v));
    assert_code!(av.error_code, NONE, "after {what}: ApiVersions v{v}");
    let mv = ctx.max_version(ApiKey::Metadata);
    let md = metadata(&mut c, mv, None, false);
    assert!(
        !md.brokers.is_empty(),
        "after {what}: Metadata v{mv} lists no brokers"
    );
    let t = ctx.topic("health", 1, &[]);
    let base = produce_ok(
        ctx,
        &mut c,
        &t,
        0,
        crate::records::batch_of(3, crate::broker::now_ms()),
    );
    assert_eq!(base, 0, "after {what}: first produce to a new topic");
    let fv = ctx.max_version(ApiKey::Fetch);
    let p = fetch(&mut c, fv, &t, 0, FetchOpts::at(0));
    assert_code!(p.error_code, NONE, "after {what}: Fetch v{fv}");
    let b = batches_of(fv, &p);
    assert!(
        !b.is_empty() && b[0].record_count == 3,
        "after {what}: Fetch v{fv} did not return the produced batch"
    );
}

pub fn offset_for_leader_epoch_req(
    topic: &str,
    partition: i32,
    current_leader_epoch: i32,
    leader_epoch: i32,
) -> OffsetForLeaderEpochRequest {
    OffsetForLeaderEpochRequest::default()
        .with_replica_id((-1).into())
        .with_topics(vec![
            offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(tn(topic))
                .with_partitions(vec![
                    offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                        .with_partition(partition)
                        .with_current_leader_epoch(current_leader_epoch)
                        .with_leader_epoch(leader_epoch),
                ]),
        ])
}

/// One partition's OffsetForLeaderEpoch answer: `(error, leader epoch, end offset)`.
pub fn offset_for_leader_epoch(
    c: &mut Client,
    v: i16,
    topic: &str,
    partition: i32,
    current_leader_epoch: i32,
    leader_epoch: i32,
) -> (i16, i32, i64) {
    let resp = c.call(
        v,
        &offset_for_leader_epoch_req(topic, partition, current_leader_epoch, leader_epoch),
    );
    let p = &resp.topics[0].partitions[0];
    (p.error_code, p.leader_epoch, p.end_offset)
}
