//! The one place a request frame becomes a handler call: the admission checks (served
//! versions, SASL state), the header, the request context, the legacy versions
//! (`legacy`) and then the API table's routing (`api::table`), with each request's
//! timing. What is served is the table's; this file only applies it.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use kafka_protocol::messages::*;
use tracing::Instrument;

use super::legacy::{self, Decoding};
use crate::api::context::{ConnectionSecurity, RequestContext, Services};
use crate::api::table::{self, api_name, reply, served, supported, Reply};
use crate::api::{admin, api_versions, data, group, security};
use crate::model::monotonic_ms;
use crate::security::session::Admission;
use crate::wire::{decode_untrusted, split_header, DecodeError, HeaderPrefix};

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
        let response = api_versions::unsupported_version_response(table::SUPPORTED);
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
    let frame_len = frame.len() + 4;
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
        request_bytes: frame_len,
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
        request_bytes: frame.len() + 4,
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

/// Runs one decoded-header request: the legacy versions first, then the table.
async fn route(ctx: RequestContext, key: ApiKey, body: Bytes) -> Reply {
    match legacy::plan(key, ctx.api_version) {
        Some(plan) => route_legacy(ctx, key, body, plan).await,
        None => table::route(ctx, key, body).await,
    }
}

/// Decodes a request body as [`route`] does for `key` and `version` (the legacy
/// versions included), without running a handler: what the fuzz targets
/// (`crate::fuzzing`) run on arbitrary bytes, so that every decoder tern serves is
/// exercised. `route` decodes inline to keep each request's concrete type; the
/// test below checks that this covers every served version.
pub(crate) fn decode_request(key: ApiKey, version: i16, body: Bytes) -> Result<(), DecodeError> {
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
    table::decode(key, version, body)
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
    use crate::api::table::SUPPORTED;

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
