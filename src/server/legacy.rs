//! Hand codecs for the request versions Kafka 3.9 serves and `kafka-protocol` 0.18 has
//! no types for (KIP-896 removed them in Kafka 4.0; Sarama and tools built on it still
//! send them). Each converts to or from the modern struct, so one handler serves every
//! version. Never allocates from a claimed length: every count is checked against the
//! bytes left (times the smallest encoding of one element) before anything is reserved.
//!
//! | API, version | request | response |
//! |---|---|---|
//! | ListOffsets v0 | [`list_offsets_v0_request`] (own shape: `max_num_offsets`) | [`list_offsets_v0_response`] (offset arrays) |
//! | OffsetCommit v0–1 | [`offset_commit_request`] into the v2 struct | the v2 encoding (v0–2 answer alike) |
//! | OffsetFetch v0 | the v1 decoding (v0 and v1 ask alike) | the v1 encoding |
//! | DescribeConfigs v0 | the v1 decoding of the body + `include_synonyms = false` | [`describe_configs_v0_response`] (`is_default`) |
//! | CreateTopics v0–1 | the v2 decoding (v1 = v2; v0 = v1 without `validate_only`) | [`create_topics_response`] |
//! | DeleteTopics v0 | the v1 decoding (v0 = v1) | [`delete_topics_v0_response`] (no throttle time) |

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsResponse, DeleteTopicsResponse, DescribeConfigsResponse, GroupId,
    OffsetCommitRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::api::data::list_offsets::{LegacyPartition, LegacyRequest, LegacyResponse, LegacyTopic};
use crate::wire::DecodeError;

/// Kafka's `ConfigSource.DEFAULT_CONFIG`.
const DEFAULT_CONFIG: i8 = 5;

/// How a legacy version's body is read: by hand, or by the crate's decoder of a later
/// version whose encoding is the same once `pad` bytes are appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoding {
    /// One of this module's hand decoders.
    Hand,
    /// The crate's decoder at `as_version`, after appending `pad` (the encoding of
    /// the fields that version added at the end of the request, set to their defaults).
    As { as_version: i16, pad: &'static [u8] },
}

/// The decoding and the crate version whose response encoding is the same as
/// `version`'s (`None`: hand-encoded here), for every served version below the
/// crate's first. `None` overall for versions the crate handles itself.
pub fn plan(key: ApiKey, version: i16) -> Option<(Decoding, Option<i16>)> {
    let as_v = |as_version, pad| Decoding::As { as_version, pad };
    Some(match (key, version) {
        (ApiKey::ListOffsets, 0) => (Decoding::Hand, None),
        (ApiKey::OffsetCommit, 0 | 1) => (Decoding::Hand, Some(2)),
        (ApiKey::OffsetFetch, 0) => (as_v(1, &[]), Some(1)),
        // include_synonyms = false.
        (ApiKey::DescribeConfigs, 0) => (as_v(1, &[0]), None),
        // validate_only = false.
        (ApiKey::CreateTopics, 0) => (as_v(2, &[0]), None),
        (ApiKey::CreateTopics, 1) => (as_v(2, &[]), None),
        (ApiKey::DeleteTopics, 0) => (as_v(1, &[]), None),
        _ => return None,
    })
}

/// Bounded reads of the classic (non-flexible) encoding from untrusted bytes.
struct Reader {
    buf: Bytes,
    api: ApiKey,
    version: i16,
}

impl Reader {
    fn new(buf: Bytes, api: ApiKey, version: i16) -> Self {
        Self { buf, api, version }
    }

    fn malformed(&self, reason: impl Into<String>) -> DecodeError {
        DecodeError {
            api: self.api,
            version: self.version,
            reason: reason.into(),
        }
    }

    fn need(&self, n: usize) -> Result<(), DecodeError> {
        if self.buf.remaining() < n {
            return Err(self.malformed(format!(
                "needs {n} more bytes, {} left",
                self.buf.remaining()
            )));
        }
        Ok(())
    }

    fn i16(&mut self) -> Result<i16, DecodeError> {
        self.need(2)?;
        Ok(self.buf.get_i16())
    }

    fn i32(&mut self) -> Result<i32, DecodeError> {
        self.need(4)?;
        Ok(self.buf.get_i32())
    }

    fn i64(&mut self) -> Result<i64, DecodeError> {
        self.need(8)?;
        Ok(self.buf.get_i64())
    }

    fn nullable_string(&mut self) -> Result<Option<StrBytes>, DecodeError> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let len = len as usize;
        self.need(len)?;
        let bytes = self.buf.split_to(len);
        StrBytes::from_utf8(bytes)
            .map(Some)
            .map_err(|_| self.malformed("string is not UTF-8"))
    }

    fn string(&mut self) -> Result<StrBytes, DecodeError> {
        self.nullable_string()?
            .ok_or_else(|| self.malformed("null where a string is required"))
    }

    /// An array length, refused unless the bytes left can hold that many elements of
    /// at least `min_element_bytes` each.
    fn array_len(&mut self, min_element_bytes: usize) -> Result<usize, DecodeError> {
        let claimed = self.i32()?;
        let n = usize::try_from(claimed)
            .map_err(|_| self.malformed(format!("array length {claimed}")))?;
        match n.checked_mul(min_element_bytes) {
            Some(bytes) if bytes <= self.buf.remaining() => Ok(n),
            _ => Err(self.malformed(format!(
                "array of {n} claimed, {} bytes left",
                self.buf.remaining()
            ))),
        }
    }
}

/// ListOffsets v0: `replica_id, [name, [partition, timestamp, max_num_offsets]]`.
pub fn list_offsets_v0_request(body: Bytes) -> Result<LegacyRequest, DecodeError> {
    let mut r = Reader::new(body, ApiKey::ListOffsets, 0);
    let replica_id = r.i32()?;
    // A topic is at least a name length and a partition count; a partition 16 bytes.
    let topic_count = r.array_len(6)?;
    let mut topics = Vec::with_capacity(topic_count);
    for _ in 0..topic_count {
        let name = TopicName(r.string()?);
        let partition_count = r.array_len(16)?;
        let mut partitions = Vec::with_capacity(partition_count);
        for _ in 0..partition_count {
            partitions.push(LegacyPartition {
                partition_index: r.i32()?,
                timestamp: r.i64()?,
                max_num_offsets: r.i32()?,
            });
        }
        topics.push(LegacyTopic { name, partitions });
    }
    Ok(LegacyRequest { replica_id, topics })
}

/// ListOffsets v0 response: `[name, [partition, error_code, [offset]]]`.
pub fn list_offsets_v0_response(response: &LegacyResponse) -> BytesMut {
    let mut out = BytesMut::new();
    put_len(&mut out, response.topics.len());
    for (name, partitions) in &response.topics {
        put_string(&mut out, name.as_str());
        put_len(&mut out, partitions.len());
        for partition in partitions {
            out.put_i32(partition.partition_index);
            out.put_i16(partition.error_code);
            put_len(&mut out, partition.offsets.len());
            for offset in &partition.offsets {
                out.put_i64(*offset);
            }
        }
    }
    out
}

/// OffsetCommit v0 (`group, [name, [partition, offset, metadata]]`) and v1 (adds
/// generation and member id, and a per-partition commit timestamp), as the v2 struct.
/// A v0 commit is a group-less one (generation -1), as in Kafka, but lands in the
/// same store as every other version (Kafka 3.9 kept v0 commits in ZooKeeper). The
/// v1 commit timestamp is dropped: offsets expire by the broker's retention
/// (`offsets.retention.minutes`) alone.
pub fn offset_commit_request(
    body: Bytes,
    version: i16,
) -> Result<OffsetCommitRequest, DecodeError> {
    let mut r = Reader::new(body, ApiKey::OffsetCommit, version);
    let group_id = GroupId(r.string()?);
    let (generation, member_id) = if version >= 1 {
        (r.i32()?, r.string()?)
    } else {
        (-1, StrBytes::default())
    };
    let partition_bytes = if version >= 1 {
        4 + 8 + 8 + 2
    } else {
        4 + 8 + 2
    };
    let topic_count = r.array_len(6)?;
    let mut topics = Vec::with_capacity(topic_count);
    for _ in 0..topic_count {
        let name = TopicName(r.string()?);
        let partition_count = r.array_len(partition_bytes)?;
        let mut partitions = Vec::with_capacity(partition_count);
        for _ in 0..partition_count {
            let partition_index = r.i32()?;
            let committed_offset = r.i64()?;
            if version >= 1 {
                let _commit_timestamp = r.i64()?;
            }
            let committed_metadata = r.nullable_string()?;
            partitions.push(
                OffsetCommitRequestPartition::default()
                    .with_partition_index(partition_index)
                    .with_committed_offset(committed_offset)
                    .with_committed_metadata(committed_metadata),
            );
        }
        topics.push(
            OffsetCommitRequestTopic::default()
                .with_name(name)
                .with_partitions(partitions),
        );
    }
    Ok(OffsetCommitRequest::default()
        .with_group_id(group_id)
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(member_id)
        .with_topics(topics))
}

/// DescribeConfigs v0 response: v1's without config sources and synonyms, but with
/// `is_default`. Kafka 3.9's broker leaves `is_default` false for every entry (its
/// generated v0 encoder has no source to derive it from); tern derives it from the
/// source, as Kafka's own client does in reverse when it reads a v0 answer and as
/// brokers before 2.7 wrote it: Sarama's `ListTopics` shows only non-default configs.
pub fn describe_configs_v0_response(response: &DescribeConfigsResponse) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_i32(response.throttle_time_ms);
    put_len(&mut out, response.results.len());
    for result in &response.results {
        out.put_i16(result.error_code);
        put_nullable_string(&mut out, result.error_message.as_deref());
        out.put_i8(result.resource_type);
        put_string(&mut out, &result.resource_name);
        put_len(&mut out, result.configs.len());
        for config in &result.configs {
            put_string(&mut out, &config.name);
            put_nullable_string(&mut out, config.value.as_deref());
            out.put_u8(u8::from(config.read_only));
            out.put_u8(u8::from(config.config_source == DEFAULT_CONFIG));
            out.put_u8(u8::from(config.is_sensitive));
        }
    }
    out
}

/// CreateTopics v0 (`[name, error_code]`) and v1 (adds `error_message`) responses.
pub fn create_topics_response(response: &CreateTopicsResponse, version: i16) -> BytesMut {
    let mut out = BytesMut::new();
    put_len(&mut out, response.topics.len());
    for topic in &response.topics {
        put_string(&mut out, &topic.name);
        out.put_i16(topic.error_code);
        if version >= 1 {
            put_nullable_string(&mut out, topic.error_message.as_deref());
        }
    }
    out
}

/// DeleteTopics v0 response: `[name, error_code]`, v1's without the throttle time.
pub fn delete_topics_v0_response(response: &DeleteTopicsResponse) -> BytesMut {
    let mut out = BytesMut::new();
    put_len(&mut out, response.responses.len());
    for topic in &response.responses {
        // Names are null only for requests by topic id (v6+).
        put_string(&mut out, topic.name.as_ref().map_or("", |n| n.as_str()));
        out.put_i16(topic.error_code);
    }
    out
}

fn put_len(out: &mut BytesMut, len: usize) {
    // Responses mirror request arrays, which were bounded by the frame size.
    out.put_i32(i32::try_from(len).unwrap_or(i32::MAX));
}

fn put_string(out: &mut BytesMut, s: &str) {
    let bytes = s.as_bytes();
    // Names come from requests (i16-length strings) or tern's own config tables.
    let len = bytes.len().min(i16::MAX as usize);
    out.put_i16(len as i16);
    out.put_slice(&bytes[..len]);
}

fn put_nullable_string(out: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_string(out, s),
        None => out.put_i16(-1),
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
    use kafka_protocol::messages::describe_configs_response::{
        DescribeConfigsResourceResult, DescribeConfigsResult,
    };

    use super::*;

    fn string(out: &mut BytesMut, s: &str) {
        out.put_i16(s.len() as i16);
        out.put_slice(s.as_bytes());
    }

    #[test]
    fn list_offsets_v0_request_reads_max_num_offsets() {
        let mut b = BytesMut::new();
        b.put_i32(-1);
        b.put_i32(1);
        string(&mut b, "t");
        b.put_i32(2);
        for (p, ts, max) in [(0, -1i64, 10), (1, -2, 1)] {
            b.put_i32(p);
            b.put_i64(ts);
            b.put_i32(max);
        }
        let request = list_offsets_v0_request(b.freeze()).expect("decodes");
        assert_eq!(request.replica_id, -1);
        assert_eq!(request.topics[0].name.as_str(), "t");
        let partitions = &request.topics[0].partitions;
        assert_eq!(partitions.len(), 2);
        assert_eq!(
            (partitions[0].timestamp, partitions[0].max_num_offsets),
            (-1, 10)
        );
        assert_eq!(
            (partitions[1].partition_index, partitions[1].timestamp),
            (1, -2)
        );
    }

    #[test]
    fn hostile_counts_are_refused_before_allocating() {
        let mut b = BytesMut::new();
        b.put_i32(-1);
        b.put_i32(i32::MAX);
        assert!(list_offsets_v0_request(b.freeze()).is_err());
        let mut b = BytesMut::new();
        string(&mut b, "g");
        b.put_i32(1);
        string(&mut b, "t");
        b.put_i32(200_000_000);
        b.put_slice(&[0; 64]);
        assert!(offset_commit_request(b.freeze(), 0).is_err());
        let mut b = BytesMut::new();
        string(&mut b, "g");
        b.put_i32(-5);
        assert!(
            offset_commit_request(b.freeze(), 0).is_err(),
            "negative count"
        );
        let mut b = BytesMut::new();
        b.put_i16(10);
        b.put_slice(b"abc");
        assert!(
            offset_commit_request(b.freeze(), 0).is_err(),
            "short string"
        );
    }

    #[test]
    fn offset_commit_v1_keeps_generation_member_and_metadata() {
        let mut b = BytesMut::new();
        string(&mut b, "group");
        b.put_i32(7);
        string(&mut b, "member-1");
        b.put_i32(1);
        string(&mut b, "t");
        b.put_i32(1);
        b.put_i32(3);
        b.put_i64(42);
        b.put_i64(-1); // commit timestamp
        string(&mut b, "meta");
        let request = offset_commit_request(b.freeze(), 1).expect("decodes");
        assert_eq!(request.group_id.as_str(), "group");
        assert_eq!(request.generation_id_or_member_epoch, 7);
        assert_eq!(request.member_id.as_str(), "member-1");
        let p = &request.topics[0].partitions[0];
        assert_eq!((p.partition_index, p.committed_offset), (3, 42));
        assert_eq!(p.committed_metadata.as_deref(), Some("meta"));
        assert_eq!(p.committed_leader_epoch, -1);

        let mut b = BytesMut::new();
        string(&mut b, "group");
        b.put_i32(1);
        string(&mut b, "t");
        b.put_i32(1);
        b.put_i32(0);
        b.put_i64(9);
        b.put_i16(-1);
        let v0 = offset_commit_request(b.freeze(), 0).expect("decodes");
        assert_eq!(v0.generation_id_or_member_epoch, -1, "v0 is group-less");
        assert_eq!(v0.topics[0].partitions[0].committed_metadata, None);
    }

    #[test]
    fn describe_configs_v0_marks_defaults_from_the_source() {
        let config = |name: &str, source| {
            DescribeConfigsResourceResult::default()
                .with_name(StrBytes::from_string(name.into()))
                .with_value(Some(StrBytes::from_string("1".into())))
                .with_config_source(source)
        };
        let response =
            DescribeConfigsResponse::default().with_results(vec![DescribeConfigsResult::default()
                .with_error_message(None)
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string("t".into()))
                .with_configs(vec![config("a", DEFAULT_CONFIG), config("b", 1)])]);
        let out = describe_configs_v0_response(&response);
        let mut expected = BytesMut::new();
        expected.put_i32(0);
        expected.put_i32(1);
        expected.put_i16(0);
        expected.put_i16(-1);
        expected.put_i8(2);
        string(&mut expected, "t");
        expected.put_i32(2);
        for (name, default) in [("a", 1u8), ("b", 0)] {
            string(&mut expected, name);
            string(&mut expected, "1");
            expected.put_u8(0);
            expected.put_u8(default);
            expected.put_u8(0);
        }
        assert_eq!(out, expected);
    }

    #[test]
    fn create_topics_v0_has_no_error_message_and_v1_has_it() {
        let response =
            CreateTopicsResponse::default().with_topics(vec![CreatableTopicResult::default()
                .with_name(TopicName(StrBytes::from_string("t".into())))
                .with_error_code(36)
                .with_error_message(Some(StrBytes::from_string("exists".into())))]);
        assert_eq!(create_topics_response(&response, 0).len(), 4 + 3 + 2);
        assert_eq!(create_topics_response(&response, 1).len(), 4 + 3 + 2 + 8);
    }

    #[test]
    fn every_planned_version_is_below_what_the_crate_decodes() {
        for (key, version) in [
            (ApiKey::ListOffsets, 0),
            (ApiKey::OffsetCommit, 0),
            (ApiKey::OffsetCommit, 1),
            (ApiKey::OffsetFetch, 0),
            (ApiKey::DescribeConfigs, 0),
            (ApiKey::CreateTopics, 0),
            (ApiKey::CreateTopics, 1),
            (ApiKey::DeleteTopics, 0),
        ] {
            assert!(version < key.valid_versions().min, "{key:?} v{version}");
            let (decoding, encoding) = plan(key, version).expect("planned");
            if let Decoding::As { as_version, .. } = decoding {
                assert_eq!(as_version, key.valid_versions().min, "{key:?}");
            }
            if let Some(v) = encoding {
                assert!(v >= key.valid_versions().min);
            }
        }
        assert_eq!(plan(ApiKey::ListOffsets, 1), None);
        assert_eq!(plan(ApiKey::Produce, 2), None);
    }
}
