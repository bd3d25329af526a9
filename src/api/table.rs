//! The one table of the APIs tern serves: a row per API names its key, the version
//! range ApiVersions advertises, the request type and the handler. ApiVersions, the
//! admission check, routing, the fuzzers' decoder and the metric labels are all
//! derived from it, so adding an API is one row here and one handler file.
//!
//! Ranges reach down to what Kafka 3.9 serves wherever the wire format needs no v0/v1
//! message format (KIP-896 removed those versions in Kafka 4.0, but Sarama and tools
//! built on it still send them); `server::legacy` decodes the versions
//! `kafka-protocol` lacks, before this table's routing is reached. Produce v0–2 and
//! Fetch v0–3 would need the old message formats and are not served.
//!
//! A version that is not served is refused as Kafka 4 refuses it: its `SocketServer`
//! checks every request header against `ApiVersionManager.isApiEnabled` and closes
//! the connection otherwise (unknown keys too), except ApiVersions, answered in v0
//! with UNSUPPORTED_VERSION and the key list (KIP-511). Produce v0–2 are advertised
//! (KAFKA-18659: old librdkafka reads a minimum above 0 as "no compression") and then
//! closed, exactly as Kafka 4 does: there is no UNSUPPORTED_VERSION answer to them.

use bytes::Bytes;
use futures::future::BoxFuture;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};

use super::api_versions::ApiRange;
use super::context::RequestContext;
use super::throttle::{exempt_from_quotas, ThrottleTime};
use super::{admin, api_versions, data, group, metadata, security, share, txn};
use crate::quota::QuotaKind;
use crate::wire::{decode_untrusted, encode_response, DecodeError};

/// What to send back for one request frame.
pub enum Reply {
    /// A response frame, as chunks to write in order.
    Frame(Vec<Bytes>),
    /// Nothing: a produce with acks=0.
    None,
    /// Close the connection (after the replies before this one are written).
    Close(String),
    /// Write this response, then close (a refused SASL handshake or authentication).
    FrameThenClose(Vec<Bytes>, String),
    /// The request was executed; its reply needs a second stage that may overlap
    /// with later requests (acks=all produce waiting for its quorum).
    Later(BoxFuture<'static, Reply>),
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reply::Frame(chunks) => write!(f, "Frame({} chunks)", chunks.len()),
            Reply::None => f.write_str("None"),
            Reply::Close(reason) => write!(f, "Close({reason})"),
            Reply::FrameThenClose(_, reason) => write!(f, "FrameThenClose({reason})"),
            Reply::Later(_) => f.write_str("Later(..)"),
        }
    }
}

impl From<DecodeError> for Reply {
    fn from(error: DecodeError) -> Self {
        Reply::Close(error.to_string())
    }
}

/// The encoded response frame of `response`.
pub fn reply<R: Encodable>(key: ApiKey, version: i16, correlation_id: i32, response: &R) -> Reply {
    reply_sharing(key, version, correlation_id, response, Vec::new())
}

/// Like [`reply`], referencing the byte ranges in `shared` instead of copying them.
pub fn reply_sharing<R: Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    response: &R,
    shared: Vec<Bytes>,
) -> Reply {
    match encode_response(key, version, correlation_id, response, shared) {
        Ok(bytes) => Reply::Frame(bytes),
        Err(reason) => {
            tracing::error!(?key, version, %reason, "could not encode response");
            Reply::Close(format!("encoding {key:?} v{version} response failed"))
        }
    }
}

/// The table. A row: `Key min..=max, RequestType => how(handler)`, where `how` is
/// `plain` (the handler returns the response), `closing` (it returns a
/// [`security::Closing`]: a response and maybe a reason to close after it) or
/// `custom` (a function of this module that builds the [`Reply`] itself).
macro_rules! api_table {
    ($($key:ident $min:literal ..= $max:literal, $request:ident => $how:ident($handler:path);)*) => {
        /// Every API tern serves: Apache Kafka 4.1's highest versions, and its lowest
        /// ones or, where lower, Kafka 3.9's (module doc).
        pub const SUPPORTED: &[ApiRange] = &[$(ApiRange {
            key: ApiKey::$key,
            name: stringify!($key),
            min: $min,
            max: $max,
        }),*];

        /// Whether ApiVersions advertises `version` of `key` (a match, not a scan of
        /// the table: every request asks).
        pub fn supported(key: ApiKey, version: i16) -> bool {
            match key {
                $(ApiKey::$key => ($min..=$max).contains(&version),)*
                _ => false,
            }
        }

        /// The metric label of `key`, as Kafka's own metrics spell it ("Other" for a
        /// key tern does not serve).
        pub fn api_name(key: ApiKey) -> &'static str {
            match key {
                $(ApiKey::$key => stringify!($key),)*
                _ => "Other",
            }
        }

        /// Decodes the request and runs its handler (versions `kafka-protocol` decodes;
        /// the older ones go through `server::legacy` first).
        pub async fn route(ctx: RequestContext, key: ApiKey, body: Bytes) -> Reply {
            match key {
                $(ApiKey::$key => api_table!(@call $how, ctx, key, body, $request, $handler),)*
                // The admission check passes only keys of this table.
                other => Reply::Close(format!("{other:?} is not routed")),
            }
        }

        /// Decodes a request body as [`route`] does, without running a handler: what
        /// the fuzz targets run on arbitrary bytes.
        pub fn decode(key: ApiKey, version: i16, body: Bytes) -> Result<(), DecodeError> {
            match key {
                $(ApiKey::$key => decoded::<$request>(key, version, body),)*
                other => Err(DecodeError {
                    api: other,
                    version,
                    reason: "not routed".into(),
                }),
            }
        }
    };
    (@call plain, $ctx:ident, $key:ident, $body:ident, $request:ident, $handler:path) => {{
        let started = std::time::Instant::now();
        let request: $request = match decode_body($key, $ctx.api_version, $body) {
            Ok(request) => request,
            Err(error) => return error.into(),
        };
        let mut response = $handler(&$ctx, request).await;
        if !exempt_from_quotas($key) {
            let throttle = $ctx.record_request_time(started).max($ctx.mutation_throttle($key));
            response.set_throttle_time_ms($ctx.throttle(throttle));
        }
        reply($key, $ctx.api_version, $ctx.correlation_id, &response)
    }};
    (@call closing, $ctx:ident, $key:ident, $body:ident, $request:ident, $handler:path) => {{
        let request: $request = match decode_body($key, $ctx.api_version, $body) {
            Ok(request) => request,
            Err(error) => return error.into(),
        };
        let security::Closing { response, close } = $handler(&$ctx, request).await;
        match (reply($key, $ctx.api_version, $ctx.correlation_id, &response), close) {
            (Reply::Frame(chunks), Some(reason)) => Reply::FrameThenClose(chunks, reason),
            (other, _) => other,
        }
    }};
    (@call custom, $ctx:ident, $key:ident, $body:ident, $request:ident, $handler:path) => {{
        let request: $request = match decode_body($key, $ctx.api_version, $body) {
            Ok(request) => request,
            Err(error) => return error.into(),
        };
        $handler($ctx, request).await
    }};
}

api_table! {
    Produce 0..=13, ProduceRequest => custom(produce);
    Fetch 4..=18, FetchRequest => custom(fetch);
    ListOffsets 0..=10, ListOffsetsRequest => plain(data::list_offsets::handle);
    Metadata 0..=13, MetadataRequest => plain(metadata::handle);
    ApiVersions 0..=4, ApiVersionsRequest => custom(api_versions);
    CreateTopics 0..=7, CreateTopicsRequest => plain(admin::create_topics::handle);
    DeleteTopics 0..=6, DeleteTopicsRequest => plain(admin::delete_topics::handle);
    DeleteRecords 0..=2, DeleteRecordsRequest => plain(data::delete_records::handle);
    OffsetForLeaderEpoch 2..=4, OffsetForLeaderEpochRequest => plain(data::offset_for_leader_epoch::handle);
    InitProducerId 0..=5, InitProducerIdRequest => plain(data::init_producer_id::handle);
    DescribeConfigs 0..=4, DescribeConfigsRequest => plain(admin::describe_configs::handle);
    AlterConfigs 0..=2, AlterConfigsRequest => plain(admin::alter_configs::handle);
    CreatePartitions 0..=3, CreatePartitionsRequest => plain(admin::create_partitions::handle);
    IncrementalAlterConfigs 0..=1, IncrementalAlterConfigsRequest => plain(admin::incremental_alter_configs::handle);
    DescribeCluster 0..=2, DescribeClusterRequest => plain(admin::describe_cluster::handle);
    DescribeLogDirs 1..=4, DescribeLogDirsRequest => plain(admin::describe_log_dirs::handle);
    ElectLeaders 0..=2, ElectLeadersRequest => plain(admin::elect_leaders::handle);
    AlterPartitionReassignments 0..=0, AlterPartitionReassignmentsRequest => plain(admin::alter_partition_reassignments::handle);
    ListPartitionReassignments 0..=0, ListPartitionReassignmentsRequest => plain(admin::list_partition_reassignments::handle);
    FindCoordinator 0..=6, FindCoordinatorRequest => plain(group::find_coordinator::handle);
    JoinGroup 0..=9, JoinGroupRequest => plain(group::join_group::handle);
    Heartbeat 0..=4, HeartbeatRequest => plain(group::heartbeat::handle);
    LeaveGroup 0..=5, LeaveGroupRequest => plain(group::leave_group::handle);
    SyncGroup 0..=5, SyncGroupRequest => plain(group::sync_group::handle);
    OffsetCommit 0..=9, OffsetCommitRequest => plain(group::offset_commit::handle);
    OffsetFetch 0..=9, OffsetFetchRequest => plain(group::offset_fetch::handle);
    DescribeGroups 0..=6, DescribeGroupsRequest => plain(group::describe_groups::handle);
    ListGroups 0..=5, ListGroupsRequest => plain(group::list_groups::handle);
    DeleteGroups 0..=2, DeleteGroupsRequest => plain(group::delete_groups::handle);
    OffsetDelete 0..=0, OffsetDeleteRequest => plain(group::offset_delete::handle);
    ConsumerGroupHeartbeat 0..=1, ConsumerGroupHeartbeatRequest => plain(group::consumer_group_heartbeat::handle);
    ConsumerGroupDescribe 0..=1, ConsumerGroupDescribeRequest => plain(group::consumer_group_describe::handle);
    ShareGroupHeartbeat 1..=1, ShareGroupHeartbeatRequest => plain(share::share_group_heartbeat::handle);
    ShareGroupDescribe 1..=1, ShareGroupDescribeRequest => plain(share::share_group_describe::handle);
    ShareFetch 1..=1, ShareFetchRequest => plain(share::share_fetch::handle);
    ShareAcknowledge 1..=1, ShareAcknowledgeRequest => plain(share::share_acknowledge::handle);
    DescribeShareGroupOffsets 0..=0, DescribeShareGroupOffsetsRequest => plain(share::describe_share_group_offsets::handle);
    AlterShareGroupOffsets 0..=0, AlterShareGroupOffsetsRequest => plain(share::alter_share_group_offsets::handle);
    DeleteShareGroupOffsets 0..=0, DeleteShareGroupOffsetsRequest => plain(share::delete_share_group_offsets::handle);
    ReadShareGroupState 0..=0, ReadShareGroupStateRequest => plain(share::read_share_group_state::handle);
    WriteShareGroupState 0..=0, WriteShareGroupStateRequest => plain(share::write_share_group_state::handle);
    SaslHandshake 0..=1, SaslHandshakeRequest => closing(security::sasl_handshake::handle);
    SaslAuthenticate 0..=2, SaslAuthenticateRequest => closing(security::sasl_authenticate::handle);
    DescribeUserScramCredentials 0..=0, DescribeUserScramCredentialsRequest => plain(security::describe_user_scram_credentials::handle);
    AlterUserScramCredentials 0..=0, AlterUserScramCredentialsRequest => plain(security::alter_user_scram_credentials::handle);
    DescribeClientQuotas 0..=1, DescribeClientQuotasRequest => plain(admin::describe_client_quotas::handle);
    AlterClientQuotas 0..=1, AlterClientQuotasRequest => plain(admin::alter_client_quotas::handle);
    DescribeAcls 1..=3, DescribeAclsRequest => plain(admin::describe_acls::handle);
    CreateAcls 1..=3, CreateAclsRequest => plain(admin::create_acls::handle);
    DeleteAcls 1..=3, DeleteAclsRequest => plain(admin::delete_acls::handle);
    AddPartitionsToTxn 0..=5, AddPartitionsToTxnRequest => plain(txn::add_partitions_to_txn::handle);
    AddOffsetsToTxn 0..=4, AddOffsetsToTxnRequest => plain(txn::add_offsets_to_txn::handle);
    EndTxn 0..=5, EndTxnRequest => plain(txn::end_txn::handle);
    WriteTxnMarkers 1..=1, WriteTxnMarkersRequest => plain(txn::write_txn_markers::handle);
    TxnOffsetCommit 0..=5, TxnOffsetCommitRequest => plain(txn::txn_offset_commit::handle);
    DescribeProducers 0..=0, DescribeProducersRequest => plain(txn::describe_producers::handle);
    DescribeTransactions 0..=0, DescribeTransactionsRequest => plain(txn::describe_transactions::handle);
    ListTransactions 0..=2, ListTransactionsRequest => plain(txn::list_transactions::handle);
}

/// Produce's first served version; v0–2 are only advertised (module doc).
pub const PRODUCE_SERVED_MIN: i16 = 3;

/// Whether a request of `version` of `key` is executed (else the connection closes).
pub fn served(key: ApiKey, version: i16) -> bool {
    supported(key, version) && !(key == ApiKey::Produce && version < PRODUCE_SERVED_MIN)
}

fn decode_body<T: Decodable>(key: ApiKey, version: i16, mut body: Bytes) -> Result<T, DecodeError> {
    decode_untrusted(key, &mut body, version)
}

fn decoded<T: Decodable>(key: ApiKey, version: i16, body: Bytes) -> Result<(), DecodeError> {
    decode_body::<T>(key, version, body).map(drop)
}

/// Produce answers at once, not at all (acks=0), or once its quorum acknowledged.
/// Its quotas are counted when it answers, as Kafka counts them: the request's bytes
/// against producer_byte_rate, its handler time against request_percentage (not for
/// acks=0), the connection muted for the larger throttle.
async fn produce(ctx: RequestContext, request: ProduceRequest) -> Reply {
    let (key, version, correlation_id) = (ApiKey::Produce, ctx.api_version, ctx.correlation_id);
    let started = std::time::Instant::now();
    let acks = request.acks;
    let outcome = data::produce::handle(&ctx, request).await;
    let request_throttle = if acks == 0 {
        0
    } else {
        ctx.record_request_time(started)
    };
    let throttle = move |ctx: &RequestContext| {
        let bandwidth = ctx.record_quota(QuotaKind::ProducerByteRate, ctx.request_bytes as f64);
        ctx.throttle(bandwidth.max(request_throttle))
    };
    match outcome {
        data::produce::Outcome::Done(mut response) => {
            response.throttle_time_ms = throttle(&ctx);
            reply(key, version, correlation_id, &response)
        }
        data::produce::Outcome::Silent => {
            throttle(&ctx);
            Reply::None
        }
        data::produce::Outcome::AwaitingAcks(pending) => Reply::Later(Box::pin(async move {
            let mut response = pending.finish().await;
            response.throttle_time_ms = throttle(&ctx);
            reply(key, version, correlation_id, &response)
        })),
    }
}

/// ApiVersions lists this table.
async fn api_versions(ctx: RequestContext, request: ApiVersionsRequest) -> Reply {
    let response = api_versions::handle(&ctx, request, SUPPORTED).await;
    reply(
        ApiKey::ApiVersions,
        ctx.api_version,
        ctx.correlation_id,
        &response,
    )
}

/// Fetch's response references the record sets it serves instead of copying them.
/// A consumer's fetch counts against its quotas: its size is capped at what one quota
/// window allows (as Kafka caps it), its bytes count against consumer_byte_rate and its
/// handler time against request_percentage, and over either its connection is muted
/// for the throttle. Unlike Kafka, which answers a throttled fetch empty and takes its
/// bytes back, the records read are served (as a throttled produce's are appended): the
/// mute already pays for them, and no round trip is wasted. Followers are exempt.
async fn fetch(ctx: RequestContext, mut request: FetchRequest) -> Reply {
    let follower = data::fetch::replica_id(&ctx, &request) >= 0;
    let started = std::time::Instant::now();
    if !follower {
        let (user, client_id) = ctx.quota_client();
        if let Some(cap) =
            ctx.services
                .quotas
                .max_in_window(QuotaKind::ConsumerByteRate, user, client_id)
        {
            let cap = cap.clamp(1.0, f64::from(i32::MAX)) as i32;
            request.max_bytes = request.max_bytes.min(cap);
            request.min_bytes = request.min_bytes.min(request.max_bytes);
        }
    }
    let mut response = data::fetch::handle(&ctx, request).await;
    let record_sets = data::fetch::record_sets(&response);
    if !follower {
        let bytes: usize = record_sets.iter().map(|r| r.len()).sum();
        let request_throttle = ctx.record_request_time(started);
        let bandwidth = ctx.record_quota(QuotaKind::ConsumerByteRate, bytes as f64);
        response.throttle_time_ms = ctx.throttle(bandwidth.max(request_throttle));
    }
    reply_sharing(
        ApiKey::Fetch,
        ctx.api_version,
        ctx.correlation_id,
        &response,
        record_sets,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_within_what_the_protocol_crate_knows() {
        for range in SUPPORTED {
            let known = range.key.valid_versions();
            assert!(
                range.max <= known.max,
                "{:?} advertises past the crate",
                range.key
            );
            assert!(range.min <= range.max);
            assert_eq!(format!("{:?}", range.key), range.name);
        }
        assert!(
            supported(ApiKey::Produce, 0),
            "old librdkafka needs Produce v0 advertised"
        );
        assert!(!served(ApiKey::Produce, 2), "Kafka 4 closes Produce v0-2");
        assert!(served(ApiKey::Produce, PRODUCE_SERVED_MIN));
        assert!(!supported(ApiKey::Fetch, 3));
        assert_eq!(
            api_name(ApiKey::OffsetForLeaderEpoch),
            "OffsetForLeaderEpoch"
        );
        assert_eq!(api_name(ApiKey::EndTxn), "EndTxn");
        assert_eq!(api_name(ApiKey::DescribeQuorum), "Other");
    }
}
