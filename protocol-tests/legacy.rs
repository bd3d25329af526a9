//! Request encoders and response parsers for the pre-Kafka-2.1 versions that
//! `kafka-protocol` 0.18 cannot encode or decode (ListOffsets v0, OffsetCommit v0–1,
//! OffsetFetch v0, DescribeConfigs v0, CreateTopics v0–1, DeleteTopics v0), written
//! from Kafka 3.9's message JSON. Where a version's encoding equals a later one's, the
//! crate's encoder of that version is used. Parsers are strict: every byte consumed.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::client::Client;

pub fn put_string(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as i16).to_be_bytes());
    b.extend_from_slice(s.as_bytes());
}

fn put_nullable_string(b: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => put_string(b, s),
        None => b.extend_from_slice(&(-1i16).to_be_bytes()),
    }
}

fn crate_encoding<R: Encodable>(r: &R, v: i16) -> Vec<u8> {
    let mut b = bytes::BytesMut::new();
    r.encode(&mut b, v)
        .unwrap_or_else(|e| panic!("test bug: encoding as v{v}: {e}"));
    b.to_vec()
}

/// ListOffsets v0: one topic, `(partition, timestamp, max_num_offsets)` each.
pub fn list_offsets_v0(replica_id: i32, topic: &str, partitions: &[(i32, i64, i32)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&replica_id.to_be_bytes());
    b.extend_from_slice(&1i32.to_be_bytes());
    put_string(&mut b, topic);
    b.extend_from_slice(&(partitions.len() as i32).to_be_bytes());
    for &(p, ts, max) in partitions {
        b.extend_from_slice(&p.to_be_bytes());
        b.extend_from_slice(&ts.to_be_bytes());
        b.extend_from_slice(&max.to_be_bytes());
    }
    b
}

/// One commit of OffsetCommit v0/v1: `(partition, offset, metadata)`.
pub type Commit<'a> = (i32, i64, Option<&'a str>);

/// OffsetCommit v0 (`group, [topic, [partition, offset, metadata]]`) or v1 (with
/// `generation` and `member` after the group, and a commit timestamp per partition).
pub fn offset_commit(
    v: i16,
    group: &str,
    generation: i32,
    member: &str,
    topic: &str,
    commits: &[Commit<'_>],
) -> Vec<u8> {
    let mut b = Vec::new();
    put_string(&mut b, group);
    if v >= 1 {
        b.extend_from_slice(&generation.to_be_bytes());
        put_string(&mut b, member);
    }
    b.extend_from_slice(&1i32.to_be_bytes());
    put_string(&mut b, topic);
    b.extend_from_slice(&(commits.len() as i32).to_be_bytes());
    for &(p, offset, metadata) in commits {
        b.extend_from_slice(&p.to_be_bytes());
        b.extend_from_slice(&offset.to_be_bytes());
        if v >= 1 {
            b.extend_from_slice(&(-1i64).to_be_bytes());
        }
        put_nullable_string(&mut b, metadata);
    }
    b
}

/// OffsetFetch v0: the same bytes as v1.
pub fn offset_fetch_v0(group: &str, topic: &str, partitions: &[i32]) -> Vec<u8> {
    let request = OffsetFetchRequest::default()
        .with_group_id(GroupId(crate::ops::sb(group)))
        .with_topics(Some(vec![
            offset_fetch_request::OffsetFetchRequestTopic::default()
                .with_name(crate::ops::tn(topic))
                .with_partition_indexes(partitions.to_vec()),
        ]));
    crate_encoding(&request, 1)
}

/// DescribeConfigs v0: v1's bytes without the trailing `include_synonyms`.
pub fn describe_configs_v0(resource_type: i8, name: &str, keys: Option<&[&str]>) -> Vec<u8> {
    let request = DescribeConfigsRequest::default().with_resources(vec![
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(crate::ops::sb(name))
            .with_configuration_keys(keys.map(|k| k.iter().map(|s| crate::ops::sb(s)).collect())),
    ]);
    let mut b = crate_encoding(&request, 1);
    b.pop();
    b
}

/// CreateTopics v1 is v2's bytes; v0 the same without the trailing `validate_only`.
pub fn create_topics_legacy(v: i16, request: &CreateTopicsRequest) -> Vec<u8> {
    let mut b = crate_encoding(request, 2);
    if v == 0 {
        assert!(!request.validate_only, "test bug: v0 cannot validate only");
        b.pop();
    }
    b
}

/// DeleteTopics v0: v1's bytes.
pub fn delete_topics_v0(names: &[&str]) -> Vec<u8> {
    let request = DeleteTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_topic_names(names.iter().map(|n| crate::ops::tn(n)).collect());
    crate_encoding(&request, 1)
}

/// A strict big-endian reader over a response body.
pub struct Parser(Bytes);

impl Parser {
    fn need(&self, n: usize, what: &str) {
        assert!(
            self.0.remaining() >= n,
            "response truncated reading {what}: {} bytes left",
            self.0.remaining()
        );
    }
    pub fn i8(&mut self, what: &str) -> i8 {
        self.need(1, what);
        self.0.get_i8()
    }
    pub fn bool(&mut self, what: &str) -> bool {
        match self.i8(what) {
            0 => false,
            1 => true,
            other => panic!("{what}: boolean byte {other}"),
        }
    }
    pub fn i16(&mut self, what: &str) -> i16 {
        self.need(2, what);
        self.0.get_i16()
    }
    pub fn i32(&mut self, what: &str) -> i32 {
        self.need(4, what);
        self.0.get_i32()
    }
    pub fn i64(&mut self, what: &str) -> i64 {
        self.need(8, what);
        self.0.get_i64()
    }
    pub fn count(&mut self, what: &str) -> usize {
        let n = self.i32(what);
        assert!((0..100_000).contains(&n), "{what}: implausible count {n}");
        n as usize
    }
    pub fn nullable_string(&mut self, what: &str) -> Option<String> {
        let len = self.i16(what);
        if len < 0 {
            assert_eq!(len, -1, "{what}: string length");
            return None;
        }
        self.need(len as usize, what);
        let bytes = self.0.split_to(len as usize);
        Some(String::from_utf8(bytes.to_vec()).unwrap_or_else(|_| panic!("{what}: not UTF-8")))
    }
    pub fn string(&mut self, what: &str) -> String {
        self.nullable_string(what)
            .unwrap_or_else(|| panic!("{what}: null string"))
    }
    pub fn done(self, what: &str) {
        assert_eq!(
            self.0.remaining(),
            0,
            "{what}: trailing bytes in the response"
        );
    }
}

/// Sends a hand-built body and returns the response body (header checked, v0).
pub fn call_raw(c: &mut Client, key: ApiKey, v: i16, body: &[u8]) -> Parser {
    let corr = c.send_raw(key as i16, v, body);
    Parser(c.recv_body(key as i16, v, corr))
}

/// Sends a hand-built body and decodes the response with the crate at `as_version`
/// (whose encoding is the same as `v`'s), every byte consumed.
pub fn call_as<T: Decodable>(
    c: &mut Client,
    key: ApiKey,
    v: i16,
    body: &[u8],
    as_version: i16,
) -> T {
    let corr = c.send_raw(key as i16, v, body);
    let mut buf = c.recv_body(key as i16, v, corr);
    let response = T::decode(&mut buf, as_version).unwrap_or_else(|e| {
        panic!("{key:?} v{v}: response is not the v{as_version} encoding: {e}")
    });
    assert_eq!(buf.remaining(), 0, "{key:?} v{v}: trailing bytes");
    response
}

/// ListOffsets v0 response of one topic: `(partition, error, offsets)`.
pub fn parse_list_offsets_v0(mut r: Parser, topic: &str) -> Vec<(i32, i16, Vec<i64>)> {
    assert_eq!(r.count("topics"), 1);
    assert_eq!(r.string("topic name"), topic);
    let n = r.count("partitions");
    let out = (0..n)
        .map(|_| {
            let p = r.i32("partition");
            let e = r.i16("error code");
            let k = r.count("offsets");
            (p, e, (0..k).map(|_| r.i64("offset")).collect())
        })
        .collect();
    r.done("ListOffsets v0");
    out
}

/// One config of a DescribeConfigs v0 answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigV0 {
    pub name: String,
    pub value: Option<String>,
    pub read_only: bool,
    pub is_default: bool,
    pub is_sensitive: bool,
}

/// DescribeConfigs v0 response of one resource: `(error, message, configs)`.
pub fn parse_describe_configs_v0(
    mut r: Parser,
    name: &str,
) -> (i16, Option<String>, Vec<ConfigV0>) {
    let _throttle = r.i32("throttle time");
    assert_eq!(r.count("results"), 1);
    let error = r.i16("error code");
    let message = r.nullable_string("error message");
    let _type = r.i8("resource type");
    assert_eq!(r.string("resource name"), name);
    let n = r.count("configs");
    let configs = (0..n)
        .map(|_| ConfigV0 {
            name: r.string("config name"),
            value: r.nullable_string("config value"),
            read_only: r.bool("read only"),
            is_default: r.bool("is default"),
            is_sensitive: r.bool("is sensitive"),
        })
        .collect();
    r.done("DescribeConfigs v0");
    (error, message, configs)
}

/// CreateTopics v0/v1 response: `(name, error, message (v1))`.
pub fn parse_create_topics(mut r: Parser, v: i16) -> Vec<(String, i16, Option<String>)> {
    let n = r.count("topics");
    let out = (0..n)
        .map(|_| {
            let name = r.string("name");
            let error = r.i16("error code");
            let message = if v >= 1 {
                r.nullable_string("error message")
            } else {
                None
            };
            (name, error, message)
        })
        .collect();
    r.done("CreateTopics");
    out
}

/// DeleteTopics v0 response: `(name, error)`.
pub fn parse_delete_topics_v0(mut r: Parser) -> Vec<(String, i16)> {
    let n = r.count("responses");
    let out = (0..n)
        .map(|_| (r.string("name"), r.i16("error code")))
        .collect();
    r.done("DeleteTopics v0");
    out
}

/// A valid request body for the versions above, for the hostile suite.
pub fn sample(key: ApiKey, v: i16, topic: &str, group: &str) -> Option<Vec<u8>> {
    Some(match (key, v) {
        (ApiKey::ListOffsets, 0) => list_offsets_v0(-1, topic, &[(0, -1, 1)]),
        (ApiKey::OffsetCommit, 0 | 1) => {
            offset_commit(v, group, -1, "", topic, &[(0, 1, Some("m"))])
        }
        (ApiKey::OffsetFetch, 0) => offset_fetch_v0(group, topic, &[0]),
        (ApiKey::DescribeConfigs, 0) => describe_configs_v0(2, topic, None),
        (ApiKey::CreateTopics, 0 | 1) => create_topics_legacy(
            v,
            &crate::ops::create_topics_req(
                vec![crate::ops::creatable("hostile-legacy-ct", 1, 1, &[])],
                v == 1,
            ),
        ),
        (ApiKey::DeleteTopics, 0) => delete_topics_v0(&["hostile-ghost-topic"]),
        _ => return None,
    })
}
