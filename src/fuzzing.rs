//! Entry points for the cargo-fuzz targets in `fuzz/` (`make fuzz`): each runs, on
//! arbitrary bytes, the code the broker runs on what a client sends, and checks what
//! must hold whatever the bytes. Hidden from the docs; not an API.
//!
//! The allocator: `GLOBAL` in `lib.rs` is tern's `GuardedAllocator`, so a fuzz binary
//! linking this library allocates through it exactly as the broker does (libFuzzer's
//! sanitizer sits under it, in `malloc`). Decodes here go through
//! `wire::decode_untrusted`, so the guard's lazy reservations are exercised:
//! a hostile claimed array length becomes a `MAP_NORESERVE` mapping, which
//! libFuzzer's `-malloc_limit_mb` does not see, while an unguarded large allocation
//! is a `malloc` it reports as a crash (`make fuzz` sets the limit).
//!
//! Panics: libFuzzer's hook aborts on every panic, even one that is caught.
//! `decode_untrusted` catches panics inside `kafka-protocol`'s decoders by design (the
//! broker closes that connection), so the decoding targets let those through to
//! their `catch_unwind` ([`tolerate_decoder_panics`]); a panic anywhere else (tern's
//! own code, or one that escapes) still aborts. `FUZZ_STRICT_PANICS=1` reports the
//! decoder panics too.

use std::collections::HashMap;
use std::sync::{Mutex, Once, OnceLock};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

use crate::api::table::{served, SUPPORTED};
use crate::http::bodies::{
    self, AckBody, ConsumerTopic, CreateTopicBody, MessageQuery, PublishBody,
};
use crate::http::{Fields, MessageId};
use crate::log::batch::{self, BatchHeader};
use crate::log::{compression, Log, LogConfig, OpenMode};
use crate::security::credentials::{ScramCredential, ScramMechanism};
use crate::security::scram::ScramServer;
use crate::security::{plain, scram_messages};
use crate::server::dispatch::decode_request;
use crate::wire::FrameReader;
use crate::wire::{split_header, HeaderPrefix};

/// Frames larger than this are refused by the frame reader here (the broker's bound is
/// `max_request_bytes`); fuzz inputs are far smaller anyway.
const FRAME_MAX: u32 = 1 << 20;

/// Lets panics raised inside `kafka-protocol` reach `decode_untrusted`'s
/// `catch_unwind`, as in the broker (module doc). Idempotent.
pub fn tolerate_decoder_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("FUZZ_STRICT_PANICS").is_some_and(|v| v == "1") {
            return;
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_decoder = info
                .location()
                .is_some_and(|l| l.file().contains("kafka-protocol"));
            if !in_decoder {
                previous(info);
            }
        }));
    });
}

/// The broker's read path for a byte stream: size-prefixed frames (the connection's
/// reader), each frame's header prefix and full header, then the body's decoder, as
/// `dispatch::handle_frame` runs them before any handler.
pub fn request_frame(data: &[u8]) {
    tolerate_decoder_panics();
    let mut reader = FrameReader::new(data);
    let mut consumed = 0usize;
    loop {
        match futures::executor::block_on(reader.read_frame(FRAME_MAX)) {
            Ok(Some(frame)) => {
                consumed += frame.len() + 4;
                one_frame(frame);
            }
            Ok(None) => {
                assert_eq!(consumed, data.len(), "a clean end after every byte");
                break;
            }
            Err(_) => break,
        }
    }
    assert!(consumed <= data.len());
}

fn one_frame(frame: Bytes) {
    let Some(prefix) = HeaderPrefix::parse(&frame) else {
        assert!(frame.len() < 8, "a frame of 8 bytes has a prefix");
        return;
    };
    let Ok(key) = ApiKey::try_from(prefix.api_key) else {
        return;
    };
    if !served(key, prefix.api_version) {
        return;
    }
    let length = frame.len();
    if let Ok((header, body)) = split_header(key, prefix.api_version, frame) {
        assert_eq!(header.request_api_key, prefix.api_key);
        assert_eq!(header.request_api_version, prefix.api_version);
        assert_eq!(header.correlation_id, prefix.correlation_id);
        assert!(body.len() <= length - 8);
        let _ = decode_request(key, prefix.api_version, body);
    }
}

/// Every (key, version) the broker executes, in `SUPPORTED` order.
fn served_versions() -> &'static [(ApiKey, i16)] {
    static SERVED: OnceLock<Vec<(ApiKey, i16)>> = OnceLock::new();
    SERVED.get_or_init(|| {
        SUPPORTED
            .iter()
            .flat_map(|r| (r.min..=r.max).map(move |v| (r.key, v)))
            .filter(|&(key, version)| served(key, version))
            .collect()
    })
}

/// One request body: the first two bytes pick a served (key, version) (see
/// [`body_selector`]), the rest is the body, decoded as `route` decodes it.
pub fn request_body(data: &[u8]) {
    tolerate_decoder_panics();
    let Some((selector, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let served = served_versions();
    let (key, version) = served[usize::from(u16::from_be_bytes(*selector)) % served.len()];
    let _ = decode_request(key, version, Bytes::copy_from_slice(body));
}

/// The two bytes that make [`request_body`] decode `key` at `version` (for seeds).
pub fn body_selector(key: ApiKey, version: i16) -> Option<[u8; 2]> {
    let index = served_versions()
        .iter()
        .position(|&(k, v)| k == key && v == version)?;
    u16::try_from(index).ok().map(u16::to_be_bytes)
}

/// A fresh log in a private temporary directory, replaced every so many appends so
/// that the disk it uses stays small (`make fuzz` removes the directory afterwards).
struct ScratchLog {
    dir: std::path::PathBuf,
    log: Log,
    appends: u32,
}

impl ScratchLog {
    fn open() -> Option<Self> {
        let dir = std::env::temp_dir().join(format!("tern-fuzz-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let config = LogConfig {
            segment_bytes: 1 << 20,
            index_bytes: 1 << 12,
            ..LogConfig::default()
        };
        let mode = OpenMode {
            clean: false,
            recovery_point: 0,
        };
        let log = Log::open(&dir, config, mode).ok()?;
        Some(Self {
            dir,
            log,
            appends: 0,
        })
    }
}

/// A producer's record set: the framing and CRC checks of every batch, the header
/// fields the broker reads, the producer-sequence checks and the append of a real log
/// (what `Produce` runs), then the HTTP API's read of the same bytes, with the
/// decompression of each codec.
pub fn record_batch(data: &[u8]) {
    for header in batch::batches(data) {
        let Ok(header) = header else { break };
        assert_eq!(header.total_bytes(), header.bytes().len());
        assert!(header.total_bytes() >= batch::HEADER_BYTES);
        let _ = (header.last_offset(), header.last_sequence());
        let _ = (header.is_transactional(), header.is_control());
        let _ = header.record_timestamps();
        let _ = header.records();
        // The log's rewrite of base offset, epoch and timestamp keeps a batch valid.
        let mut copy = header.bytes().to_vec();
        batch::assign_offsets(&mut copy, 1 << 40, 7, Some(1_700_000_000_000));
        let rewritten = BatchHeader::parse_checked(&copy);
        assert!(
            rewritten.is_ok(),
            "assign_offsets broke a valid batch: {rewritten:?}"
        );
    }
    static LOG: Mutex<Option<ScratchLog>> = Mutex::new(None);
    let mut guard = LOG
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if guard.as_ref().is_none_or(|l| l.appends >= 256) {
        if let Some(old) = guard.take() {
            let dir = old.dir.clone();
            drop(old);
            let _ = std::fs::remove_dir_all(dir);
        }
        *guard = ScratchLog::open();
    }
    if let Some(scratch) = guard.as_mut() {
        let end = scratch.log.log_end_offset().0;
        if let Ok(info) = scratch.log.append(data, 1_700_000_000_000) {
            scratch.appends += 1;
            assert!(info.last_offset >= info.base_offset);
            if info.base_offset >= end {
                let read = scratch
                    .log
                    .read(crate::model::Offset(info.base_offset), 1 << 20, true);
                assert!(matches!(read, Ok(Some(_))), "appended batch unreadable");
            }
        }
    }
    drop(guard);
    let read = crate::http::parse_messages(data, Vec::new(), 0, 1000, "fuzz");
    assert!(read.messages.len() <= 1000);
    if let Some((&codec, rest)) = data.split_first() {
        let limit = 1 << 16;
        if let Ok(out) = compression::decompress(i16::from(codec % 6), rest, limit) {
            assert!(out.len() <= limit.max(rest.len()));
        }
    }
}

/// The SCRAM credentials every user has here, and the salted passwords (what a
/// client derives) that prove them.
fn scram_credentials() -> &'static [(ScramMechanism, ScramCredential, Vec<u8>); 2] {
    static CREDENTIALS: OnceLock<[(ScramMechanism, ScramCredential, Vec<u8>); 2]> = OnceLock::new();
    CREDENTIALS.get_or_init(|| {
        [ScramMechanism::ScramSha256, ScramMechanism::ScramSha512].map(|mechanism| {
            let (salt, iterations) = (b"fuzz-salt", ScramMechanism::ITERATIONS_MIN);
            let salted = mechanism.hi(b"fuzz-password", salt, iterations);
            let credential =
                ScramCredential::from_salted_password(mechanism, salt, &salted, iterations)
                    .unwrap_or_else(|e| panic!("fixed credential: {e}"));
            (mechanism, credential, salted)
        })
    })
}

/// The server's part of every nonce here, fixed so that inputs replay.
const SERVER_NONCE: &str = "fuzzServerNonce";

/// SASL: the first byte picks a mechanism step, the rest is the client's message(s).
/// 0: the SCRAM message parsers and SASL name escaping; 1/2: a SCRAM-SHA-256/512
/// server fed a client-first and a client-final (split at the first `\n`); 3/4: a
/// correct exchange built from the input's user name and nonce, which must succeed;
/// 5: PLAIN.
pub fn sasl(data: &[u8]) {
    let Some((&step, message)) = data.split_first() else {
        return;
    };
    let text = std::str::from_utf8(message).ok();
    match step % 6 {
        0 => {
            let Some(text) = text else { return };
            let _ = scram_messages::parse_client_first(text);
            let _ = scram_messages::parse_client_final(text);
            let _ = scram_messages::valid_nonce(text);
            // Inside a message a raw `,` ends the attribute, so no name holds one.
            if let (false, Ok(name)) = (text.contains(','), scram_messages::decode_saslname(text)) {
                assert_eq!(
                    scram_messages::encode_saslname(&name),
                    text,
                    "saslname round trip"
                );
            }
            if !text.is_empty() && !text.contains('\0') {
                let escaped = scram_messages::encode_saslname(text);
                let decoded = scram_messages::decode_saslname(&escaped);
                assert_eq!(decoded.ok().as_deref(), Some(text), "escape round trip");
            }
        }
        which @ (1 | 2) => {
            let (mechanism, credential, _) = &scram_credentials()[usize::from(which - 1)];
            let (first, last) = match message.iter().position(|&b| b == b'\n') {
                Some(at) => (&message[..at], &message[at + 1..]),
                None => (message, &[][..]),
            };
            let mut server = ScramServer::new(*mechanism, || SERVER_NONCE.to_string());
            if server
                .client_first(first, |_| Some(credential.clone()))
                .is_ok()
            {
                let outcome = server.client_final(last);
                assert!(
                    outcome.is_err(),
                    "a client-final without the password passed"
                );
            }
            assert!(server.authenticated_user().is_none());
        }
        which @ (3 | 4) => {
            let Some(text) = text else { return };
            let (user, nonce) = text.split_once('\0').unwrap_or((text, "clientNonce"));
            let _ = correct_exchange(&scram_credentials()[usize::from(which - 3)], user, nonce);
        }
        _ => {
            let (_, credential, _) = &scram_credentials()[0];
            // Only one user has a credential: checking a password costs a PBKDF2.
            let outcome = plain::authenticate(message, |user| {
                (user == "alice").then(|| credential.clone())
            });
            if let Ok(user) = outcome {
                assert_eq!(user, "alice");
            }
        }
    }
}

/// A client that knows the password, for any user name and client nonce: when the
/// server accepts the client-first, the proof it computes must be accepted and the
/// user must come back unescaped.
fn correct_exchange(
    (mechanism, credential, salted): &(ScramMechanism, ScramCredential, Vec<u8>),
    user: &str,
    nonce: &str,
) -> bool {
    use base64::Engine as _;
    if !scram_messages::valid_nonce(nonce) {
        return false;
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let bare = format!("n={},r={nonce}", scram_messages::encode_saslname(user));
    let mut server = ScramServer::new(*mechanism, || SERVER_NONCE.to_string());
    let Ok(server_first) = server.client_first(format!("n,,{bare}").as_bytes(), |_| {
        Some(credential.clone())
    }) else {
        return false;
    };
    let server_first = String::from_utf8(server_first).unwrap_or_default();
    let full_nonce = format!("{nonce}{SERVER_NONCE}");
    assert!(
        server_first.starts_with(&format!("r={full_nonce},")),
        "server-first {server_first:?} does not extend {nonce:?}"
    );
    let without_proof = format!("c={},r={full_nonce}", b64.encode("n,,"));
    let auth_message = format!("{bare},{server_first},{without_proof}");
    let client_key = mechanism.hmac(salted, b"Client Key");
    let stored_key = mechanism.hash(&client_key);
    let signature = mechanism.hmac(&stored_key, auth_message.as_bytes());
    let proof: Vec<u8> = client_key
        .iter()
        .zip(&signature)
        .map(|(k, s)| k ^ s)
        .collect();
    let client_final = format!("{without_proof},p={}", b64.encode(proof));
    if client_final.len() > crate::limits::SASL_MESSAGE_BYTES_MAX {
        // A client-first near the bound carries a nonce too long for any client-final
        // within it: the bound refuses that one, rightly.
        let refused = server.client_final(client_final.as_bytes()).is_err();
        assert!(refused, "a client-final over the bound was accepted");
        return false;
    }
    match server.client_final(client_final.as_bytes()) {
        Ok(outcome) => {
            assert_eq!(outcome.user, user);
            true
        }
        Err(error) => panic!("a correct proof for {user:?}/{nonce:?} was refused: {error}"),
    }
}

/// The HTTP API's request bodies: the bytes as a JSON body for every route, and as
/// a query string for the `GET` routes, through the validation the handlers run.
pub fn http_body(data: &[u8]) {
    if let Ok(body) = bodies::json_object(data) {
        if let Ok(create) = CreateTopicBody::parse(&body) {
            assert!(create.partitions.is_none_or(|p| (1..=1 << 13).contains(&p)));
            assert!(create.replication_factor.is_none_or(|r| r >= 1));
            let _ = crate::model::validate_topic_name(&create.name);
        }
        let _ = PublishBody::parse(&body);
        let _ = ConsumerTopic::parse(&Fields::Body(&body));
        if let Ok(ack) = AckBody::parse(&body) {
            assert_eq!(ack.id.topic_id, ack.at.topic_id);
            assert_eq!(
                ack.id.encode(),
                Some(ack.message_id),
                "message id round trip"
            );
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(uri) = format!("/message?{text}").parse::<axum::http::Uri>() else {
        return;
    };
    let Ok(axum::extract::Query(query)) =
        axum::extract::Query::<HashMap<String, String>>::try_from_uri(&uri)
    else {
        return;
    };
    if let Ok(parsed) = MessageQuery::parse(&query) {
        assert!(parsed.max.is_none_or(|m| (1..=1000).contains(&m)));
    }
    let _ = bodies::status_query(&query);
    if let Ok(id) = bodies::status_query(&query) {
        if let Some(decoded) = MessageId::decode(id) {
            assert_eq!(decoded.encode(), Some(id));
        }
    }
}

/// Seed inputs for every target, as `(target, name, bytes)`: real requests (one of
/// every served key and version, some with content), record batches in every codec
/// the test encoders have, SCRAM and PLAIN messages, HTTP bodies and queries. The
/// committed `fuzz/seeds/` is written from this (see the ignored test below); the
/// test beside it runs every seed through its target.
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    seeds::requests(&mut out);
    seeds::batches(&mut out);
    seeds::sasl(&mut out);
    seeds::http(&mut out);
    out
}

mod seeds {
    use std::io::Write;

    use bytes::BytesMut;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::body_selector;
    use crate::log::records::testing::{encode_batch, simple_batch, TestRecord};

    type Seeds = Vec<(&'static str, String, Vec<u8>)>;

    fn encoded<T: Encodable>(request: &T, version: i16) -> Option<Vec<u8>> {
        let mut buf = BytesMut::new();
        request.encode(&mut buf, version).ok()?;
        Some(buf.to_vec())
    }

    /// The crate version whose encoding a legacy version's body shares (its
    /// trailing fields, which the legacy version lacks, are at their defaults and
    /// encode as the pad `server::legacy` appends, so cutting it off is exact).
    fn encoding_version(key: ApiKey, version: i16) -> (i16, usize) {
        match (key, version) {
            (ApiKey::OffsetFetch, 0) => (1, 0),
            (ApiKey::DescribeConfigs, 0) => (1, 1),
            (ApiKey::CreateTopics, 0) => (2, 1),
            (ApiKey::CreateTopics, 1) => (2, 0),
            (ApiKey::DeleteTopics, 0) => (1, 0),
            _ => (version, 0),
        }
    }

    fn body<T: Encodable>(key: ApiKey, version: i16, request: &T) -> Option<Vec<u8>> {
        let (as_version, cut) = encoding_version(key, version);
        let mut bytes = encoded(request, as_version)?;
        bytes.truncate(bytes.len().saturating_sub(cut));
        Some(bytes)
    }

    /// One request of each served key and version, with some content.
    fn request_bodies() -> Vec<(ApiKey, i16, Vec<u8>)> {
        let topic = || TopicName(StrBytes::from_static_str("orders"));
        let group = || GroupId(StrBytes::from_static_str("billing"));
        let batch = bytes::Bytes::from(simple_batch(3, 1_700_000_000_000));
        let produce = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![produce_request::TopicProduceData::default()
                .with_name(topic())
                .with_partition_data(vec![
                    produce_request::PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(batch)),
                ])]);
        let fetch = FetchRequest::default()
            .with_max_wait_ms(500)
            .with_max_bytes(1 << 20)
            .with_topics(vec![fetch_request::FetchTopic::default()
                .with_topic(topic())
                .with_partitions(vec![fetch_request::FetchPartition::default()
                    .with_partition(0)
                    .with_fetch_offset(42)
                    .with_partition_max_bytes(1 << 20)])]);
        let metadata = MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(topic())),
        ]));
        let join = JoinGroupRequest::default()
            .with_group_id(group())
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(30_000)
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
            )
            .with_name(StrBytes::from_static_str("range"))
            .with_metadata(bytes::Bytes::from_static(b"\0\0\0\0\0\x01\0\x06orders"))]);
        let commit = OffsetCommitRequest::default()
            .with_group_id(group())
            .with_generation_id_or_member_epoch(1)
            .with_member_id(StrBytes::from_static_str("member-1"))
            .with_topics(vec![
                offset_commit_request::OffsetCommitRequestTopic::default()
                    .with_name(topic())
                    .with_partitions(vec![
                        offset_commit_request::OffsetCommitRequestPartition::default()
                            .with_partition_index(0)
                            .with_committed_offset(42)
                            .with_committed_metadata(Some(StrBytes::from_static_str("m"))),
                    ]),
            ]);
        let create = CreateTopicsRequest::default()
            .with_timeout_ms(5000)
            .with_topics(vec![create_topics_request::CreatableTopic::default()
                .with_name(topic())
                .with_num_partitions(3)
                .with_replication_factor(1)]);
        let mut out = Vec::new();
        for &(key, version) in super::served_versions() {
            macro_rules! one {
                ($request:expr) => {
                    body(key, version, &$request)
                };
            }
            let bytes = match key {
                ApiKey::Produce => one!(produce),
                ApiKey::Fetch => one!(fetch),
                ApiKey::Metadata => one!(metadata),
                ApiKey::JoinGroup => one!(join),
                ApiKey::CreateTopics => one!(create),
                ApiKey::OffsetCommit if version >= 2 => one!(commit),
                ApiKey::OffsetCommit => legacy_commit(version),
                ApiKey::ListOffsets if version == 0 => Some(legacy_list_offsets()),
                ApiKey::ListOffsets => one!(ListOffsetsRequest::default()),
                ApiKey::ApiVersions => one!(ApiVersionsRequest::default()),
                ApiKey::DeleteTopics => one!(DeleteTopicsRequest::default()),
                ApiKey::DeleteRecords => one!(DeleteRecordsRequest::default()),
                ApiKey::OffsetForLeaderEpoch => one!(OffsetForLeaderEpochRequest::default()),
                ApiKey::InitProducerId => one!(InitProducerIdRequest::default()),
                ApiKey::DescribeConfigs => one!(DescribeConfigsRequest::default()),
                ApiKey::AlterConfigs => one!(AlterConfigsRequest::default()),
                ApiKey::CreatePartitions => one!(CreatePartitionsRequest::default()),
                ApiKey::IncrementalAlterConfigs => {
                    one!(IncrementalAlterConfigsRequest::default())
                }
                ApiKey::DescribeCluster => one!(DescribeClusterRequest::default()),
                ApiKey::DescribeLogDirs => one!(DescribeLogDirsRequest::default()),
                ApiKey::ElectLeaders => one!(ElectLeadersRequest::default()),
                ApiKey::AlterPartitionReassignments => {
                    one!(AlterPartitionReassignmentsRequest::default())
                }
                ApiKey::ListPartitionReassignments => {
                    one!(ListPartitionReassignmentsRequest::default())
                }
                ApiKey::FindCoordinator => one!(FindCoordinatorRequest::default()),
                ApiKey::Heartbeat => one!(HeartbeatRequest::default()),
                ApiKey::LeaveGroup => one!(LeaveGroupRequest::default()),
                ApiKey::SyncGroup => one!(SyncGroupRequest::default()),
                ApiKey::OffsetFetch => one!(OffsetFetchRequest::default()),
                ApiKey::DescribeGroups => one!(DescribeGroupsRequest::default()),
                ApiKey::ListGroups => one!(ListGroupsRequest::default()),
                ApiKey::DeleteGroups => one!(DeleteGroupsRequest::default()),
                ApiKey::OffsetDelete => one!(OffsetDeleteRequest::default()),
                ApiKey::ConsumerGroupHeartbeat => one!(ConsumerGroupHeartbeatRequest::default()),
                ApiKey::ConsumerGroupDescribe => one!(ConsumerGroupDescribeRequest::default()),
                ApiKey::SaslHandshake => one!(SaslHandshakeRequest::default()),
                ApiKey::SaslAuthenticate => one!(SaslAuthenticateRequest::default()),
                ApiKey::DescribeUserScramCredentials => {
                    one!(DescribeUserScramCredentialsRequest::default())
                }
                ApiKey::AlterUserScramCredentials => {
                    one!(AlterUserScramCredentialsRequest::default())
                }
                ApiKey::DescribeAcls => one!(DescribeAclsRequest::default()),
                ApiKey::DescribeClientQuotas => one!(DescribeClientQuotasRequest::default()),
                ApiKey::AlterClientQuotas => one!(AlterClientQuotasRequest::default()),
                ApiKey::CreateAcls => one!(CreateAclsRequest::default()),
                ApiKey::DeleteAcls => one!(DeleteAclsRequest::default()),
                ApiKey::AddPartitionsToTxn => one!(AddPartitionsToTxnRequest::default()),
                ApiKey::AddOffsetsToTxn => one!(AddOffsetsToTxnRequest::default()),
                ApiKey::EndTxn => one!(EndTxnRequest::default()),
                ApiKey::WriteTxnMarkers => one!(WriteTxnMarkersRequest::default()),
                ApiKey::TxnOffsetCommit => one!(TxnOffsetCommitRequest::default()),
                ApiKey::DescribeProducers => one!(DescribeProducersRequest::default()),
                ApiKey::DescribeTransactions => one!(DescribeTransactionsRequest::default()),
                ApiKey::ListTransactions => one!(ListTransactionsRequest::default()),
                ApiKey::ShareGroupHeartbeat => one!(ShareGroupHeartbeatRequest::default()),
                ApiKey::ShareGroupDescribe => one!(ShareGroupDescribeRequest::default()),
                ApiKey::ShareFetch => one!(ShareFetchRequest::default()),
                ApiKey::ShareAcknowledge => one!(ShareAcknowledgeRequest::default()),
                ApiKey::DescribeShareGroupOffsets => {
                    one!(DescribeShareGroupOffsetsRequest::default())
                }
                ApiKey::AlterShareGroupOffsets => one!(AlterShareGroupOffsetsRequest::default()),
                ApiKey::DeleteShareGroupOffsets => one!(DeleteShareGroupOffsetsRequest::default()),
                ApiKey::ReadShareGroupState => one!(ReadShareGroupStateRequest::default()),
                ApiKey::WriteShareGroupState => one!(WriteShareGroupStateRequest::default()),
                _ => None,
            };
            if let Some(bytes) = bytes {
                out.push((key, version, bytes));
            }
        }
        out
    }

    fn string(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as i16).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }

    fn legacy_commit(version: i16) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        string(&mut out, "billing");
        if version >= 1 {
            out.extend_from_slice(&1i32.to_be_bytes());
            string(&mut out, "member-1");
        }
        out.extend_from_slice(&1i32.to_be_bytes());
        string(&mut out, "orders");
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&42i64.to_be_bytes());
        if version >= 1 {
            out.extend_from_slice(&(-1i64).to_be_bytes());
        }
        string(&mut out, "m");
        Some(out)
    }

    fn legacy_list_offsets() -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(-1i32).to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        string(&mut out, "orders");
        out.extend_from_slice(&1i32.to_be_bytes());
        out.extend_from_slice(&0i32.to_be_bytes());
        out.extend_from_slice(&(-1i64).to_be_bytes());
        out.extend_from_slice(&1i32.to_be_bytes());
        out
    }

    fn frame(key: ApiKey, version: i16, correlation_id: i32, body: &[u8]) -> Option<Vec<u8>> {
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("fuzz-seed")));
        let mut bytes = encoded(&header, key.request_header_version(version))?;
        bytes.extend_from_slice(body);
        let mut out = (bytes.len() as i32).to_be_bytes().to_vec();
        out.extend_from_slice(&bytes);
        Some(out)
    }

    pub fn requests(out: &mut Seeds) {
        let bodies = request_bodies();
        let mut pipelined = Vec::new();
        for (i, (key, version, bytes)) in bodies.iter().enumerate() {
            let name = format!("{key:?}-v{version}");
            if let Some(selector) = body_selector(*key, *version) {
                let mut input = selector.to_vec();
                input.extend_from_slice(bytes);
                out.push(("request_body", name.clone(), input));
            }
            if let Some(framed) = frame(*key, *version, i as i32, bytes) {
                if i % 8 == 0 {
                    pipelined.extend_from_slice(&framed);
                }
                out.push(("request_frame", name, framed));
            }
        }
        out.push(("request_frame", "pipelined".into(), pipelined));
    }

    fn compressed(codec: i16, records: &[TestRecord]) -> Option<Vec<u8>> {
        let plain = encode_batch(records, 1_700_000_000_000, (-1, -1, -1));
        let section = &plain[crate::log::batch::HEADER_BYTES..];
        let data = match codec {
            1 => {
                let mut gz =
                    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                gz.write_all(section).ok()?;
                gz.finish().ok()?
            }
            2 => snap::raw::Encoder::new().compress_vec(section).ok()?,
            3 => {
                let mut lz4 = lz4_flex::frame::FrameEncoder::new(Vec::new());
                lz4.write_all(section).ok()?;
                lz4.finish().ok()?
            }
            _ => return None,
        };
        let mut after_crc = plain[21..crate::log::batch::HEADER_BYTES].to_vec();
        after_crc[0..2].copy_from_slice(&codec.to_be_bytes());
        after_crc.extend_from_slice(&data);
        let mut batch = plain[..17].to_vec();
        batch[8..12].copy_from_slice(&((after_crc.len() + 9) as i32).to_be_bytes());
        batch.extend_from_slice(&crc32c::crc32c(&after_crc).to_be_bytes());
        batch.extend_from_slice(&after_crc);
        Some(batch)
    }

    pub fn batches(out: &mut Seeds) {
        let records: Vec<TestRecord> = (0..4)
            .map(|i| TestRecord {
                key: (i % 2 == 0).then(|| format!("key-{i}").into_bytes()),
                value: Some(format!("value {i} of the seed batch").into_bytes()),
                headers: vec![("trace".into(), Some(vec![i as u8; 3]))],
                timestamp_delta: i,
            })
            .collect();
        out.push((
            "record_batch",
            "simple".into(),
            simple_batch(3, 1_700_000_000_000),
        ));
        let idempotent = encode_batch(&records, 1_700_000_000_000, (1000, 0, 0));
        let mut two = idempotent.clone();
        let mut next = encode_batch(&records, 1_700_000_000_000, (1000, 0, 4));
        crate::log::batch::assign_offsets(&mut next, 4, 0, None);
        two.extend_from_slice(&next);
        out.push(("record_batch", "idempotent".into(), idempotent));
        out.push(("record_batch", "two-batches".into(), two));
        for (codec, name) in [(1, "gzip"), (2, "snappy"), (3, "lz4")] {
            if let Some(batch) = compressed(codec, &records) {
                out.push(("record_batch", name.into(), batch));
            }
        }
    }

    pub fn sasl(out: &mut Seeds) {
        let mut add = |step: u8, name: &str, message: &[u8]| {
            let mut input = vec![step];
            input.extend_from_slice(message);
            out.push(("sasl", name.to_string(), input));
        };
        // RFC 7677's example exchange (SCRAM-SHA-256).
        let first = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
        let last = b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        add(0, "client-first", first);
        add(0, "client-final", last);
        add(0, "saslname", b"a=2Cb=3Dc");
        add(0, "extensions", b"n,,n=user,r=abc,tokenauth=true");
        let mut exchange = first.to_vec();
        exchange.push(b'\n');
        exchange.extend_from_slice(last);
        add(1, "sha256-exchange", &exchange);
        add(2, "sha512-exchange", &exchange);
        add(3, "sha256-correct", b"alice\0clientNonce");
        add(4, "sha512-correct", b"us=er,name\0n0nce");
        add(5, "plain", b"\0alice\0fuzz-password");
        add(5, "plain-authzid", b"alice\0alice\0wrong");
    }

    pub fn http(out: &mut Seeds) {
        let mut add = |name: &str, body: &str| {
            out.push(("http_body", name.to_string(), body.as_bytes().to_vec()));
        };
        add(
            "create-topic",
            r#"{"publisher_id": 1, "topic_name": "orders", "partitions": 3, "replication_factor": 1}"#,
        );
        add(
            "publish",
            r#"{"topic_id": 1, "message_content": "hello", "key": "k"}"#,
        );
        add("subscribe", r#"{"consumer_id": 7, "topic_id": 1}"#);
        add(
            "ack",
            r#"{"consumer_id": 7, "topic_id": 1, "message_id": 562949953421354}"#,
        );
        add(
            "message-query",
            "consumer_id=7&topic_id=1&wait_ms=100&max=10",
        );
        add("status-query", "message_id=562949953421354");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every seed runs through its target without a failed check, and every served
    /// version has a request seed that its decoder accepts.
    #[test]
    fn every_seed_passes_its_target() {
        let seeds = seeds();
        for (target, name, bytes) in &seeds {
            match *target {
                "request_frame" => request_frame(bytes),
                "request_body" => request_body(bytes),
                "record_batch" => record_batch(bytes),
                "sasl" => sasl(bytes),
                "http_body" => http_body(bytes),
                other => panic!("seed {name} for unknown target {other}"),
            }
        }
        for &(key, version) in served_versions() {
            let name = format!("{key:?}-v{version}");
            let seed = seeds
                .iter()
                .find(|(t, n, _)| *t == "request_body" && *n == name)
                .unwrap_or_else(|| panic!("no seed for {name}"));
            let decoded = decode_request(key, version, Bytes::copy_from_slice(&seed.2[2..]));
            assert!(decoded.is_ok(), "{name}: {decoded:?}");
        }
        for (credential, user) in scram_credentials().iter().zip(["alice", "us=er,name"]) {
            assert!(correct_exchange(credential, user, "n0nce"), "{user}");
        }
        // The first crash `make fuzz` found: a nonce that fits a client-first but
        // leaves no client-final within the SASL bound; the bound refuses it, rightly.
        let long_nonce = "n".repeat(4050);
        assert!(!correct_exchange(&scram_credentials()[0], "u", &long_nonce));
        let batches = seeds.iter().filter(|(t, _, _)| *t == "record_batch");
        for (_, name, bytes) in batches {
            let all_valid = batch::batches(bytes).all(|b| b.is_ok());
            assert!(all_valid, "seed batch {name} is invalid");
            let read = crate::http::parse_messages(bytes, Vec::new(), 0, 100, "seed");
            assert!(
                !read.messages.is_empty(),
                "seed batch {name} holds no message"
            );
        }
    }

    /// Writes `fuzz/seeds/<target>/<name>`: `cargo test --release --lib
    /// write_fuzz_seeds -- --ignored` (what `make fuzz-seeds` runs).
    #[test]
    #[ignore = "writes fuzz/seeds; run on purpose"]
    fn write_fuzz_seeds() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
        for (target, name, bytes) in seeds() {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).expect("create seed dir");
            std::fs::write(dir.join(name), bytes).expect("write seed");
        }
    }
}
