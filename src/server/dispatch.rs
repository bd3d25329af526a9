//! The table of supported APIs and the one place that routes a request to its handler.
//!
//! `SUPPORTED` is what ApiVersions advertises; an API is listed only when its handler
//! exists and is tested. Ranges reach down to what Kafka 3.9 serves wherever the wire
//! format needs no v0/v1 message format (KIP-896 removed those versions in Kafka 4.0,
//! but Sarama and tools built on it still send them); `server::legacy` decodes the
//! versions `kafka-protocol` lacks. Produce v0–2 and Fetch v0–3 would need the old
//! message formats and are not served.
//!
//! A version that is not served is refused as Kafka 4 refuses it: its `SocketServer`
//! checks every request header against `ApiVersionManager.isApiEnabled` and closes
//! the connection otherwise (unknown keys too), except ApiVersions, answered in v0
//! with UNSUPPORTED_VERSION and the key list (KIP-511). Produce v0–2 are advertised
//! (KAFKA-18659: old librdkafka reads a minimum above 0 as "no compression") and then
//! closed, exactly as Kafka 4 does: there is no UNSUPPORTED_VERSION answer to them.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::Encodable;
use tracing::Instrument;

use super::frame::{decode_untrusted, encode_response, split_header, DecodeError, HeaderPrefix};
use super::legacy::{self, Decoding};
use crate::api::context::{ConnectionSecurity, RequestContext, Services};
use crate::api::{admin, api_versions, data, group, metadata, security};
use crate::model::monotonic_ms;
use crate::security::session::Admission;

/// One advertised API: its key and the version range in ApiVersions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiRange {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

const fn api(key: ApiKey, min: i16, max: i16) -> ApiRange {
    ApiRange { key, min, max }
}

/// Every API tern serves: Apache Kafka 4.1's highest versions, and its lowest ones or,
/// where lower, Kafka 3.9's (module doc).
pub const SUPPORTED: &[ApiRange] = &[
    api(ApiKey::Produce, 0, 13),
    api(ApiKey::Fetch, 4, 18),
    api(ApiKey::ListOffsets, 0, 10),
    api(ApiKey::Metadata, 0, 13),
    api(ApiKey::ApiVersions, 0, 4),
    api(ApiKey::CreateTopics, 0, 7),
    api(ApiKey::DeleteTopics, 0, 6),
    api(ApiKey::DeleteRecords, 0, 2),
    api(ApiKey::OffsetForLeaderEpoch, 2, 4),
    api(ApiKey::InitProducerId, 0, 5),
    api(ApiKey::DescribeConfigs, 0, 4),
    api(ApiKey::AlterConfigs, 0, 2),
    api(ApiKey::CreatePartitions, 0, 3),
    api(ApiKey::IncrementalAlterConfigs, 0, 1),
    api(ApiKey::DescribeCluster, 0, 2),
    api(ApiKey::DescribeLogDirs, 1, 4),
    api(ApiKey::ElectLeaders, 0, 2),
    api(ApiKey::AlterPartitionReassignments, 0, 0),
    api(ApiKey::ListPartitionReassignments, 0, 0),
    api(ApiKey::FindCoordinator, 0, 6),
    api(ApiKey::JoinGroup, 0, 9),
    api(ApiKey::Heartbeat, 0, 4),
    api(ApiKey::LeaveGroup, 0, 5),
    api(ApiKey::SyncGroup, 0, 5),
    api(ApiKey::OffsetCommit, 0, 9),
    api(ApiKey::OffsetFetch, 0, 9),
    api(ApiKey::DescribeGroups, 0, 6),
    api(ApiKey::ListGroups, 0, 5),
    api(ApiKey::DeleteGroups, 0, 2),
    api(ApiKey::OffsetDelete, 0, 0),
    api(ApiKey::SaslHandshake, 0, 1),
    api(ApiKey::SaslAuthenticate, 0, 2),
    api(ApiKey::DescribeUserScramCredentials, 0, 0),
    api(ApiKey::AlterUserScramCredentials, 0, 0),
    api(ApiKey::DescribeAcls, 1, 3),
    api(ApiKey::CreateAcls, 1, 3),
    api(ApiKey::DeleteAcls, 1, 3),
];

/// Produce's first served version; v0–2 are only advertised (module doc).
pub const PRODUCE_SERVED_MIN: i16 = 3;

/// Whether ApiVersions advertises `version` of `key`.
pub fn supported(key: ApiKey, version: i16) -> bool {
    SUPPORTED
        .iter()
        .any(|r| r.key == key && (r.min..=r.max).contains(&version))
}

/// Whether a request of `version` of `key` is executed (else the connection closes).
pub fn served(key: ApiKey, version: i16) -> bool {
    supported(key, version) && !(key == ApiKey::Produce && version < PRODUCE_SERVED_MIN)
}

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
    /// with later requests (acks=all produce waiting for its fsync).
    Later(futures::future::BoxFuture<'static, Reply>),
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

fn reply<R: Encodable>(key: ApiKey, version: i16, correlation_id: i32, response: &R) -> Reply {
    reply_sharing(key, version, correlation_id, response, Vec::new())
}

/// Like [`reply`], referencing the byte ranges in `shared` instead of copying them.
fn reply_sharing<R: Encodable>(
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

/// Decodes one request frame, runs its handler and encodes the reply.
pub async fn handle_frame(
    services: Arc<Services>,
    peer: SocketAddr,
    connection: Arc<ConnectionSecurity>,
    frame: Bytes,
    received: std::time::Instant,
) -> Reply {
    if connection
        .sasl
        .as_ref()
        .is_some_and(|sasl| sasl.lock().awaits_raw_token())
    {
        return raw_sasl_token(services, peer, connection, frame).await;
    }
    let Some(prefix) = HeaderPrefix::parse(&frame) else {
        return Reply::Close(format!(
            "frame of {} bytes has no request header",
            frame.len()
        ));
    };
    let Ok(key) = ApiKey::try_from(prefix.api_key) else {
        return Reply::Close(format!("unknown api key {}", prefix.api_key));
    };
    if key == ApiKey::ApiVersions && !supported(key, prefix.api_version) {
        // KIP-511: tell the client which versions we have, in the v0 format.
        let response = api_versions::unsupported_version_response();
        return reply(key, 0, prefix.correlation_id, &response);
    }
    if !served(key, prefix.api_version) {
        return Reply::Close(format!("unsupported {key:?} v{}", prefix.api_version));
    }
    if let Some(sasl) = &connection.sasl {
        if let Admission::Close(reason) = sasl.lock().admit(key, monotonic_ms() as i64) {
            return Reply::Close(reason);
        }
    }
    let (header, body) = match split_header(key, prefix.api_version, frame) {
        Ok(parts) => parts,
        Err(error) => return error.into(),
    };
    let ctx = RequestContext {
        services: Arc::clone(&services),
        api_version: prefix.api_version,
        correlation_id: prefix.correlation_id,
        client_id: header.client_id.as_ref().map(|s| s.to_string()),
        principal: connection.principal(),
        connection,
        peer,
        remote_wait_us: Arc::default(),
    };
    let timing = Timing {
        api: api_name(key),
        version: prefix.api_version,
        received,
        started: std::time::Instant::now(),
    };
    let remote = Arc::clone(&ctx.remote_wait_us);
    let span = tracing::info_span!(
        "request",
        api = timing.api,
        version = prefix.api_version,
        correlation_id = prefix.correlation_id,
        client_id = ctx.client_id.as_deref().unwrap_or(""),
        peer = %peer,
    );
    let reply = route(ctx, key, body).instrument(span.clone()).await;
    let waited =
        std::time::Duration::from_micros(remote.load(std::sync::atomic::Ordering::Relaxed));
    timing.record_stage_one(waited);
    match reply {
        Reply::Later(completion) => Reply::Later(Box::pin(
            async move {
                let stage_two = std::time::Instant::now();
                let reply = completion.await;
                timing.finish(stage_two.elapsed(), &services);
                reply
            }
            .instrument(span),
        )),
        done => {
            let _entered = span.enter();
            timing.finish(waited, &services);
            done
        }
    }
}

/// A SASL token after a SaslHandshake v0: the frame is the bare token and so is the
/// answer, as in Kafka's `SaslServerAuthenticator` without SaslAuthenticate headers. A
/// failure gets no answer (the framing has no error field): the connection closes,
/// after the failed-authentication delay that SaslAuthenticate also waits.
async fn raw_sasl_token(
    services: Arc<Services>,
    peer: SocketAddr,
    connection: Arc<ConnectionSecurity>,
    frame: Bytes,
) -> Reply {
    let ctx = RequestContext {
        services,
        api_version: 0,
        correlation_id: 0,
        client_id: None,
        principal: connection.principal(),
        connection,
        peer,
        remote_wait_us: Arc::default(),
    };
    let request = SaslAuthenticateRequest::default().with_auth_bytes(frame);
    let security::Closing { response, close } =
        security::sasl_authenticate::handle(&ctx, request).await;
    if let Some(reason) = close {
        return Reply::Close(reason);
    }
    let Ok(size) = u32::try_from(response.auth_bytes.len()) else {
        return Reply::Close("SASL token larger than 4 GiB".into());
    };
    Reply::Frame(vec![
        Bytes::copy_from_slice(&size.to_be_bytes()),
        response.auth_bytes,
    ])
}

/// One request's clock: when it was read, when it started executing.
struct Timing {
    api: &'static str,
    version: i16,
    received: std::time::Instant,
    started: std::time::Instant,
}

impl Timing {
    /// Queue and local time, once the request's first stage is done; `waited` (a
    /// fetch's long poll) counts as remote, not local.
    fn record_stage_one(&self, waited: std::time::Duration) {
        let phase = crate::metrics::REQUEST_PHASE_SECONDS;
        let queue = self.started.duration_since(self.received);
        let local = self.started.elapsed().saturating_sub(waited);
        metrics::histogram!(phase, "api" => self.api, "phase" => "queue")
            .record(queue.as_secs_f64());
        metrics::histogram!(phase, "api" => self.api, "phase" => "local")
            .record(local.as_secs_f64());
    }

    /// Remote time, the total, and the slow-request log once the reply is complete.
    fn finish(&self, remote: std::time::Duration, services: &Services) {
        let total = self.received.elapsed();
        let api = self.api;
        metrics::counter!(crate::metrics::REQUESTS_TOTAL, "api" => api).increment(1);
        metrics::histogram!(crate::metrics::REQUEST_DURATION_SECONDS, "api" => api)
            .record(total.as_secs_f64());
        metrics::histogram!(crate::metrics::REQUEST_PHASE_SECONDS, "api" => api, "phase" => "remote")
            .record(remote.as_secs_f64());
        // Waiting by design (long polls, rebalances) does not make a request slow.
        let working = total.saturating_sub(remote);
        if services
            .server
            .slow_request
            .is_some_and(|limit| working > limit)
        {
            metrics::counter!(crate::metrics::SLOW_REQUESTS_TOTAL, "api" => api).increment(1);
            tracing::warn!(
                api,
                version = self.version,
                total_ms = total.as_millis() as u64,
                queue_ms = self.started.duration_since(self.received).as_millis() as u64,
                remote_ms = remote.as_millis() as u64,
                "slow request"
            );
        }
    }
}

/// The metric label of every advertised API.
pub fn advertised_api_names() -> impl Iterator<Item = &'static str> {
    SUPPORTED.iter().map(|r| api_name(r.key))
}

/// A static label for each API, spelled as Kafka's own metrics spell it.
fn api_name(key: ApiKey) -> &'static str {
    match key {
        ApiKey::Produce => "Produce",
        ApiKey::Fetch => "Fetch",
        ApiKey::ListOffsets => "ListOffsets",
        ApiKey::Metadata => "Metadata",
        ApiKey::ApiVersions => "ApiVersions",
        ApiKey::CreateTopics => "CreateTopics",
        ApiKey::DeleteTopics => "DeleteTopics",
        ApiKey::DeleteRecords => "DeleteRecords",
        ApiKey::OffsetForLeaderEpoch => "OffsetForLeaderEpoch",
        ApiKey::InitProducerId => "InitProducerId",
        ApiKey::DescribeConfigs => "DescribeConfigs",
        ApiKey::AlterConfigs => "AlterConfigs",
        ApiKey::CreatePartitions => "CreatePartitions",
        ApiKey::IncrementalAlterConfigs => "IncrementalAlterConfigs",
        ApiKey::DescribeCluster => "DescribeCluster",
        ApiKey::DescribeLogDirs => "DescribeLogDirs",
        ApiKey::ElectLeaders => "ElectLeaders",
        ApiKey::AlterPartitionReassignments => "AlterPartitionReassignments",
        ApiKey::ListPartitionReassignments => "ListPartitionReassignments",
        ApiKey::FindCoordinator => "FindCoordinator",
        ApiKey::JoinGroup => "JoinGroup",
        ApiKey::Heartbeat => "Heartbeat",
        ApiKey::LeaveGroup => "LeaveGroup",
        ApiKey::SyncGroup => "SyncGroup",
        ApiKey::OffsetCommit => "OffsetCommit",
        ApiKey::OffsetFetch => "OffsetFetch",
        ApiKey::DescribeGroups => "DescribeGroups",
        ApiKey::ListGroups => "ListGroups",
        ApiKey::DeleteGroups => "DeleteGroups",
        ApiKey::OffsetDelete => "OffsetDelete",
        ApiKey::SaslHandshake => "SaslHandshake",
        ApiKey::SaslAuthenticate => "SaslAuthenticate",
        ApiKey::DescribeUserScramCredentials => "DescribeUserScramCredentials",
        ApiKey::AlterUserScramCredentials => "AlterUserScramCredentials",
        ApiKey::DescribeAcls => "DescribeAcls",
        ApiKey::CreateAcls => "CreateAcls",
        ApiKey::DeleteAcls => "DeleteAcls",
        _ => "Other",
    }
}

macro_rules! call {
    ($ctx:ident, $key:ident, $body:ident, $request:ty, $handler:path) => {{
        let version = $ctx.api_version;
        let mut body = $body;
        let request: $request = match decode_untrusted($key, &mut body, version) {
            Ok(request) => request,
            Err(error) => return error.into(),
        };
        let response = $handler(&$ctx, request).await;
        reply($key, version, $ctx.correlation_id, &response)
    }};
}

/// Like [`call!`], for handlers that may close the connection after their response.
macro_rules! call_closing {
    ($ctx:ident, $key:ident, $body:ident, $request:ty, $handler:path) => {{
        let version = $ctx.api_version;
        let mut body = $body;
        let request: $request = match decode_untrusted($key, &mut body, version) {
            Ok(request) => request,
            Err(error) => return error.into(),
        };
        let security::Closing { response, close } = $handler(&$ctx, request).await;
        match (reply($key, version, $ctx.correlation_id, &response), close) {
            (Reply::Frame(chunks), Some(reason)) => Reply::FrameThenClose(chunks, reason),
            (other, _) => other,
        }
    }};
}

async fn route(ctx: RequestContext, key: ApiKey, body: Bytes) -> Reply {
    if let Some(plan) = legacy::plan(key, ctx.api_version) {
        return route_legacy(ctx, key, body, plan).await;
    }
    match key {
        ApiKey::Produce => {
            let version = ctx.api_version;
            let mut body = body;
            let request: ProduceRequest = match decode_untrusted(key, &mut body, version) {
                Ok(request) => request,
                Err(error) => return error.into(),
            };
            let correlation_id = ctx.correlation_id;
            match data::produce::handle(&ctx, request).await {
                data::produce::Outcome::Done(response) => {
                    reply(key, version, correlation_id, &response)
                }
                data::produce::Outcome::Silent => Reply::None,
                data::produce::Outcome::AwaitingAcks(pending) => {
                    Reply::Later(Box::pin(async move {
                        let response = pending.finish().await;
                        reply(key, version, correlation_id, &response)
                    }))
                }
            }
        }
        ApiKey::Fetch => {
            let version = ctx.api_version;
            let mut body = body;
            let request: FetchRequest = match decode_untrusted(key, &mut body, version) {
                Ok(request) => request,
                Err(error) => return error.into(),
            };
            let response = data::fetch::handle(&ctx, request).await;
            let record_sets = data::fetch::record_sets(&response);
            reply_sharing(key, version, ctx.correlation_id, &response, record_sets)
        }
        ApiKey::ListOffsets => call!(
            ctx,
            key,
            body,
            ListOffsetsRequest,
            data::list_offsets::handle
        ),
        ApiKey::Metadata => call!(ctx, key, body, MetadataRequest, metadata::handle),
        ApiKey::SaslHandshake => call_closing!(
            ctx,
            key,
            body,
            SaslHandshakeRequest,
            security::sasl_handshake::handle
        ),
        ApiKey::SaslAuthenticate => call_closing!(
            ctx,
            key,
            body,
            SaslAuthenticateRequest,
            security::sasl_authenticate::handle
        ),
        ApiKey::DescribeUserScramCredentials => call!(
            ctx,
            key,
            body,
            DescribeUserScramCredentialsRequest,
            security::describe_user_scram_credentials::handle
        ),
        ApiKey::AlterUserScramCredentials => call!(
            ctx,
            key,
            body,
            AlterUserScramCredentialsRequest,
            security::alter_user_scram_credentials::handle
        ),
        ApiKey::DescribeAcls => call!(
            ctx,
            key,
            body,
            DescribeAclsRequest,
            admin::describe_acls::handle
        ),
        ApiKey::CreateAcls => call!(
            ctx,
            key,
            body,
            CreateAclsRequest,
            admin::create_acls::handle
        ),
        ApiKey::DeleteAcls => call!(
            ctx,
            key,
            body,
            DeleteAclsRequest,
            admin::delete_acls::handle
        ),
        ApiKey::ApiVersions => call!(ctx, key, body, ApiVersionsRequest, api_versions::handle),
        ApiKey::CreateTopics => call!(
            ctx,
            key,
            body,
            CreateTopicsRequest,
            admin::create_topics::handle
        ),
        ApiKey::DeleteTopics => call!(
            ctx,
            key,
            body,
            DeleteTopicsRequest,
            admin::delete_topics::handle
        ),
        ApiKey::OffsetForLeaderEpoch => call!(
            ctx,
            key,
            body,
            OffsetForLeaderEpochRequest,
            data::offset_for_leader_epoch::handle
        ),
        ApiKey::DeleteRecords => call!(
            ctx,
            key,
            body,
            DeleteRecordsRequest,
            data::delete_records::handle
        ),
        ApiKey::InitProducerId => call!(
            ctx,
            key,
            body,
            InitProducerIdRequest,
            data::init_producer_id::handle
        ),
        ApiKey::DescribeConfigs => call!(
            ctx,
            key,
            body,
            DescribeConfigsRequest,
            admin::describe_configs::handle
        ),
        ApiKey::AlterConfigs => call!(
            ctx,
            key,
            body,
            AlterConfigsRequest,
            admin::alter_configs::handle
        ),
        ApiKey::CreatePartitions => call!(
            ctx,
            key,
            body,
            CreatePartitionsRequest,
            admin::create_partitions::handle
        ),
        ApiKey::IncrementalAlterConfigs => {
            call!(
                ctx,
                key,
                body,
                IncrementalAlterConfigsRequest,
                admin::incremental_alter_configs::handle
            )
        }
        ApiKey::DescribeCluster => call!(
            ctx,
            key,
            body,
            DescribeClusterRequest,
            admin::describe_cluster::handle
        ),
        ApiKey::DescribeLogDirs => call!(
            ctx,
            key,
            body,
            DescribeLogDirsRequest,
            admin::describe_log_dirs::handle
        ),
        ApiKey::ElectLeaders => call!(
            ctx,
            key,
            body,
            ElectLeadersRequest,
            admin::elect_leaders::handle
        ),
        ApiKey::AlterPartitionReassignments => call!(
            ctx,
            key,
            body,
            AlterPartitionReassignmentsRequest,
            admin::alter_partition_reassignments::handle
        ),
        ApiKey::ListPartitionReassignments => call!(
            ctx,
            key,
            body,
            ListPartitionReassignmentsRequest,
            admin::list_partition_reassignments::handle
        ),
        ApiKey::FindCoordinator => call!(
            ctx,
            key,
            body,
            FindCoordinatorRequest,
            group::find_coordinator::handle
        ),
        ApiKey::JoinGroup => call!(ctx, key, body, JoinGroupRequest, group::join_group::handle),
        ApiKey::Heartbeat => call!(ctx, key, body, HeartbeatRequest, group::heartbeat::handle),
        ApiKey::LeaveGroup => call!(
            ctx,
            key,
            body,
            LeaveGroupRequest,
            group::leave_group::handle
        ),
        ApiKey::SyncGroup => call!(ctx, key, body, SyncGroupRequest, group::sync_group::handle),
        ApiKey::OffsetCommit => call!(
            ctx,
            key,
            body,
            OffsetCommitRequest,
            group::offset_commit::handle
        ),
        ApiKey::OffsetFetch => call!(
            ctx,
            key,
            body,
            OffsetFetchRequest,
            group::offset_fetch::handle
        ),
        ApiKey::DescribeGroups => call!(
            ctx,
            key,
            body,
            DescribeGroupsRequest,
            group::describe_groups::handle
        ),
        ApiKey::ListGroups => call!(
            ctx,
            key,
            body,
            ListGroupsRequest,
            group::list_groups::handle
        ),
        ApiKey::DeleteGroups => call!(
            ctx,
            key,
            body,
            DeleteGroupsRequest,
            group::delete_groups::handle
        ),
        ApiKey::OffsetDelete => call!(
            ctx,
            key,
            body,
            OffsetDeleteRequest,
            group::offset_delete::handle
        ),
        // `handle_frame` admits only keys in SUPPORTED; the test below checks that
        // every one of them has an arm above.
        other => Reply::Close(format!("{other:?} is not routed")),
    }
}

/// Decodes a request body as [`route`] does for `key` and `version` (the legacy
/// versions included), without running a handler: what the fuzz targets
/// (`crate::fuzzing`) run on arbitrary bytes, so that every decoder tern serves is
/// exercised. `route` decodes inline to keep each request's concrete type; the
/// test below checks that this covers every served version.
pub(crate) fn decode_request(key: ApiKey, version: i16, body: Bytes) -> Result<(), DecodeError> {
    fn crate_decoder<T: kafka_protocol::protocol::Decodable>(
        key: ApiKey,
        version: i16,
        mut body: Bytes,
    ) -> Result<(), DecodeError> {
        decode_untrusted::<T>(key, &mut body, version).map(drop)
    }
    if let Some((decoding, _)) = legacy::plan(key, version) {
        return match key {
            ApiKey::ListOffsets => legacy::list_offsets_v0_request(body).map(drop),
            ApiKey::OffsetCommit => legacy::offset_commit_request(body, version).map(drop),
            ApiKey::OffsetFetch => {
                decode_as::<OffsetFetchRequest>(key, version, body, decoding).map(drop)
            }
            ApiKey::DescribeConfigs => {
                decode_as::<DescribeConfigsRequest>(key, version, body, decoding).map(drop)
            }
            ApiKey::CreateTopics => {
                decode_as::<CreateTopicsRequest>(key, version, body, decoding).map(drop)
            }
            ApiKey::DeleteTopics => {
                decode_as::<DeleteTopicsRequest>(key, version, body, decoding).map(drop)
            }
            other => Err(DecodeError {
                api: other,
                version,
                reason: "no legacy decoder".into(),
            }),
        };
    }
    match key {
        ApiKey::Produce => crate_decoder::<ProduceRequest>(key, version, body),
        ApiKey::Fetch => crate_decoder::<FetchRequest>(key, version, body),
        ApiKey::ListOffsets => crate_decoder::<ListOffsetsRequest>(key, version, body),
        ApiKey::Metadata => crate_decoder::<MetadataRequest>(key, version, body),
        ApiKey::ApiVersions => crate_decoder::<ApiVersionsRequest>(key, version, body),
        ApiKey::CreateTopics => crate_decoder::<CreateTopicsRequest>(key, version, body),
        ApiKey::DeleteTopics => crate_decoder::<DeleteTopicsRequest>(key, version, body),
        ApiKey::OffsetForLeaderEpoch => {
            crate_decoder::<OffsetForLeaderEpochRequest>(key, version, body)
        }
        ApiKey::DeleteRecords => crate_decoder::<DeleteRecordsRequest>(key, version, body),
        ApiKey::InitProducerId => crate_decoder::<InitProducerIdRequest>(key, version, body),
        ApiKey::DescribeConfigs => crate_decoder::<DescribeConfigsRequest>(key, version, body),
        ApiKey::AlterConfigs => crate_decoder::<AlterConfigsRequest>(key, version, body),
        ApiKey::CreatePartitions => crate_decoder::<CreatePartitionsRequest>(key, version, body),
        ApiKey::IncrementalAlterConfigs => {
            crate_decoder::<IncrementalAlterConfigsRequest>(key, version, body)
        }
        ApiKey::DescribeCluster => crate_decoder::<DescribeClusterRequest>(key, version, body),
        ApiKey::DescribeLogDirs => crate_decoder::<DescribeLogDirsRequest>(key, version, body),
        ApiKey::ElectLeaders => crate_decoder::<ElectLeadersRequest>(key, version, body),
        ApiKey::AlterPartitionReassignments => {
            crate_decoder::<AlterPartitionReassignmentsRequest>(key, version, body)
        }
        ApiKey::ListPartitionReassignments => {
            crate_decoder::<ListPartitionReassignmentsRequest>(key, version, body)
        }
        ApiKey::FindCoordinator => crate_decoder::<FindCoordinatorRequest>(key, version, body),
        ApiKey::JoinGroup => crate_decoder::<JoinGroupRequest>(key, version, body),
        ApiKey::Heartbeat => crate_decoder::<HeartbeatRequest>(key, version, body),
        ApiKey::LeaveGroup => crate_decoder::<LeaveGroupRequest>(key, version, body),
        ApiKey::SyncGroup => crate_decoder::<SyncGroupRequest>(key, version, body),
        ApiKey::OffsetCommit => crate_decoder::<OffsetCommitRequest>(key, version, body),
        ApiKey::OffsetFetch => crate_decoder::<OffsetFetchRequest>(key, version, body),
        ApiKey::DescribeGroups => crate_decoder::<DescribeGroupsRequest>(key, version, body),
        ApiKey::ListGroups => crate_decoder::<ListGroupsRequest>(key, version, body),
        ApiKey::DeleteGroups => crate_decoder::<DeleteGroupsRequest>(key, version, body),
        ApiKey::OffsetDelete => crate_decoder::<OffsetDeleteRequest>(key, version, body),
        ApiKey::SaslHandshake => crate_decoder::<SaslHandshakeRequest>(key, version, body),
        ApiKey::SaslAuthenticate => crate_decoder::<SaslAuthenticateRequest>(key, version, body),
        ApiKey::DescribeUserScramCredentials => {
            crate_decoder::<DescribeUserScramCredentialsRequest>(key, version, body)
        }
        ApiKey::AlterUserScramCredentials => {
            crate_decoder::<AlterUserScramCredentialsRequest>(key, version, body)
        }
        ApiKey::DescribeAcls => crate_decoder::<DescribeAclsRequest>(key, version, body),
        ApiKey::CreateAcls => crate_decoder::<CreateAclsRequest>(key, version, body),
        ApiKey::DeleteAcls => crate_decoder::<DeleteAclsRequest>(key, version, body),
        other => Err(DecodeError {
            api: other,
            version,
            reason: "not routed".into(),
        }),
    }
}

/// Decodes `body` with the crate's decoder of a later version whose encoding is the
/// same once `pad` is appended (see `server::legacy`).
fn decode_as<T: kafka_protocol::protocol::Decodable>(
    key: ApiKey,
    version: i16,
    body: Bytes,
    decoding: Decoding,
) -> Result<T, DecodeError> {
    let Decoding::As { as_version, pad } = decoding else {
        return Err(DecodeError {
            api: key,
            version,
            reason: "no decoder planned".into(),
        });
    };
    let mut padded = bytes::BytesMut::with_capacity(body.len() + pad.len());
    padded.extend_from_slice(&body);
    padded.extend_from_slice(pad);
    decode_untrusted(key, &mut padded.freeze(), as_version)
}

/// A response body encoded by `server::legacy`, framed with response header v0 (every
/// legacy version is non-flexible).
fn legacy_reply(correlation_id: i32, body: bytes::BytesMut) -> Reply {
    let Ok(size) = i32::try_from(body.len() + 4) else {
        return Reply::Close("response larger than 2 GiB".into());
    };
    let mut frame = bytes::BytesMut::with_capacity(body.len() + 8);
    frame.extend_from_slice(&size.to_be_bytes());
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(&body);
    Reply::Frame(vec![frame.freeze()])
}

/// The served versions `kafka-protocol` has no types for: decoded by hand or as a
/// later version, run by the same handlers, encoded by hand or as a later version.
async fn route_legacy(
    ctx: RequestContext,
    key: ApiKey,
    body: Bytes,
    (decoding, encode_as): (Decoding, Option<i16>),
) -> Reply {
    let version = ctx.api_version;
    let correlation_id = ctx.correlation_id;
    macro_rules! decoded {
        ($decoded:expr) => {
            match $decoded {
                Ok(request) => request,
                Err(error) => return error.into(),
            }
        };
    }
    match (key, encode_as) {
        (ApiKey::ListOffsets, _) => {
            let request = decoded!(legacy::list_offsets_v0_request(body));
            let response = data::list_offsets::handle_v0(&ctx, request).await;
            legacy_reply(correlation_id, legacy::list_offsets_v0_response(&response))
        }
        (ApiKey::OffsetCommit, Some(as_version)) => {
            let request = decoded!(legacy::offset_commit_request(body, version));
            let response = group::offset_commit::handle(&ctx, request).await;
            reply(key, as_version, correlation_id, &response)
        }
        (ApiKey::OffsetFetch, Some(as_version)) => {
            let request: OffsetFetchRequest = decoded!(decode_as(key, version, body, decoding));
            let response = group::offset_fetch::handle(&ctx, request).await;
            reply(key, as_version, correlation_id, &response)
        }
        (ApiKey::DescribeConfigs, _) => {
            let request: DescribeConfigsRequest = decoded!(decode_as(key, version, body, decoding));
            let response = admin::describe_configs::handle(&ctx, request).await;
            legacy_reply(
                correlation_id,
                legacy::describe_configs_v0_response(&response),
            )
        }
        (ApiKey::CreateTopics, _) => {
            let request: CreateTopicsRequest = decoded!(decode_as(key, version, body, decoding));
            let response = admin::create_topics::handle(&ctx, request).await;
            legacy_reply(
                correlation_id,
                legacy::create_topics_response(&response, version),
            )
        }
        (ApiKey::DeleteTopics, _) => {
            let request: DeleteTopicsRequest = decoded!(decode_as(key, version, body, decoding));
            let response = admin::delete_topics::handle(&ctx, request).await;
            legacy_reply(correlation_id, legacy::delete_topics_v0_response(&response))
        }
        // `legacy::plan` names only the arms above; its unit test checks the list.
        (other, _) => Reply::Close(format!("{other:?} v{version} is not routed")),
    }
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
        }
        assert!(
            supported(ApiKey::Produce, 0),
            "old librdkafka needs Produce v0 advertised"
        );
        assert!(!served(ApiKey::Produce, 2), "Kafka 4 closes Produce v0-2");
        assert!(served(ApiKey::Produce, PRODUCE_SERVED_MIN));
        assert!(!supported(ApiKey::Fetch, 3));
    }

    #[test]
    fn decode_request_knows_every_served_version() {
        // An empty body is malformed for most requests; what must never come back is
        // the "not routed" / "no legacy decoder" refusal of a key this table serves.
        for range in SUPPORTED {
            for version in range.min..=range.max {
                if !served(range.key, version) {
                    continue;
                }
                if let Err(error) = decode_request(range.key, version, Bytes::new()) {
                    assert!(
                        !error.reason.contains("routed") && !error.reason.contains("legacy"),
                        "{:?} v{version}: {error}",
                        range.key
                    );
                }
            }
        }
        assert!(decode_request(ApiKey::SaslHandshake, 1, Bytes::new()).is_err());
    }

    #[test]
    fn every_served_version_below_the_crate_has_a_legacy_plan() {
        for range in SUPPORTED {
            let crate_min = range.key.valid_versions().min;
            for version in range.min..crate_min {
                if served(range.key, version) {
                    assert!(
                        legacy::plan(range.key, version).is_some(),
                        "{:?} v{version} is advertised but nothing decodes it",
                        range.key
                    );
                }
            }
        }
    }
}
