//! ApiVersions (KIP-35 / KIP-511) and connection handling of unknown APIs/versions.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;

use crate::client::{encode_body, encode_header, frame, Client, Outcome, CLIENT_ID};
use crate::ops::*;

fn key_map(resp: &ApiVersionsResponse) -> BTreeMap<i16, (i16, i16)> {
    resp.api_keys
        .iter()
        .map(|k| (k.api_key, (k.min_version, k.max_version)))
        .collect()
}

#[test]
fn api_versions_every_version() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    let mut first: Option<BTreeMap<i16, (i16, i16)>> = None;
    let versions: Vec<i16> = (0..=4).collect();
    for v in versions {
        let resp = c.call(v, &api_versions_req(v));
        assert_code!(resp.error_code, NONE, "ApiVersions v{v}");
        assert!(
            !resp.api_keys.is_empty(),
            "ApiVersions v{v}: empty api key list"
        );
        let mut seen = BTreeSet::new();
        for k in &resp.api_keys {
            assert!(
                seen.insert(k.api_key),
                "ApiVersions v{v}: api key {} listed twice",
                k.api_key
            );
            assert!(
                0 <= k.min_version && k.min_version <= k.max_version,
                "ApiVersions v{v}: bad range {}..{} for api key {}",
                k.min_version,
                k.max_version,
                k.api_key
            );
        }
        let map = key_map(&resp);
        let (amin, amax) = map
            .get(&(ApiKey::ApiVersions as i16))
            .copied()
            .unwrap_or_else(|| panic!("ApiVersions v{v}: ApiVersions itself is not listed"));
        assert_eq!(amin, 0, "ApiVersions v{v}: ApiVersions must support v0");
        assert!(
            amax >= 3,
            "ApiVersions v{v}: ApiVersions max version {amax} < 3"
        );
        if v >= 1 {
            assert!(
                resp.throttle_time_ms >= 0,
                "ApiVersions v{v}: negative throttle time"
            );
        }
        // Every version of the request describes the same API set.
        match &first {
            None => first = Some(map),
            Some(f) => assert_eq!(f, &map, "ApiVersions v{v} lists different APIs than v0"),
        }
    }
}

#[test]
fn api_versions_advertises_required_apis() {
    let ctx = Ctx::new();
    let mut missing = Vec::new();
    for (key, lo, hi) in REQUIRED {
        match ctx.advertised(*key) {
            None => missing.push(format!("{key:?} not advertised (need {lo}..={hi})")),
            Some((min, max)) => {
                // Apache Kafka 4.x dropped some old versions (e.g. Produce v0-2), so the exact
                // tern ranges are only required of tern itself.
                if !ctx.external() && (min > *lo || max < *hi) {
                    missing.push(format!(
                        "{key:?} advertised {min}..={max}, need {lo}..={hi}"
                    ));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "required APIs missing from ApiVersions: {missing:#?}"
    );
}

#[test]
fn api_versions_v3_client_software_fields() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for v in 3..=4 {
        // Valid names/versions (the regex is [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?).
        for (name, ver) in [
            ("tern-protocol-tests", "0.1.0"),
            ("librdkafka", "2.3.0"),
            ("a", "1"),
        ] {
            let req = ApiVersionsRequest::default()
                .with_client_software_name(sb(name))
                .with_client_software_version(sb(ver));
            let resp = c.call(v, &req);
            assert_code!(
                resp.error_code,
                NONE,
                "ApiVersions v{v} client_software_name={name:?} version={ver:?}"
            );
            assert!(
                !resp.api_keys.is_empty(),
                "ApiVersions v{v}: empty api key list"
            );
        }
    }
    // The connection is still usable.
    let resp = c.call(3, &api_versions_req(3));
    assert_code!(
        resp.error_code,
        NONE,
        "ApiVersions v3 after the named requests"
    );
}

/// Kafka validates ClientSoftwareName/Version (v3+) against
/// `[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?` and answers INVALID_REQUEST (42) otherwise.
#[test]
fn api_versions_v3_invalid_client_software_name_is_invalid_request() {
    let mut fails: Vec<String> = Vec::new();
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for v in ctx.versions_req(ApiKey::ApiVersions, 3, 4) {
        for (name, ver) in [
            ("bad name!", "1.0"),
            ("-leading-dash", "1.0"),
            ("ok-name", "1.0 beta"),
            ("", ""),
        ] {
            let req = ApiVersionsRequest::default()
                .with_client_software_name(sb(name))
                .with_client_software_version(sb(ver));
            let resp = c.call(v, &req);
            check_code!(
                fails,
                resp.error_code,
                INVALID_REQUEST,
                "ApiVersions v{v} with client_software_name={name:?} version={ver:?}"
            );
        }
    }
    let resp = c.call(3, &api_versions_req(3));
    check_code!(
        fails,
        resp.error_code,
        NONE,
        "ApiVersions v3 on the same connection after INVALID_REQUEST"
    );
    assert_no_failures(&fails);
}

#[test]
fn api_versions_unsupported_version_gets_v0_response() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for version in [127i16, 5, 32767] {
        let corr = 4242 + version as i32;
        // Newer clients send a flexible (v2) header for ApiVersions >= 3.
        let mut payload = encode_header(ApiKey::ApiVersions as i16, version, corr, Some(CLIENT_ID));
        payload.extend_from_slice(&encode_body(&api_versions_req(4), "ApiVersions", 4));
        c.write_all(&frame(&payload)).expect("write");
        let resp = c.read_frame().unwrap_or_else(|e| {
            panic!("ApiVersions v{version}: no response ({e}); Kafka answers in v0 format")
        });
        let mut buf = Bytes::from(resp);
        let h = ResponseHeader::decode(&mut buf, 0).expect("response header v0");
        assert_eq!(
            h.correlation_id, corr,
            "ApiVersions v{version}: correlation id"
        );
        let body = ApiVersionsResponse::decode(&mut buf, 0).unwrap_or_else(|e| {
            panic!("ApiVersions v{version}: response is not a v0 ApiVersionsResponse: {e}")
        });
        assert_eq!(
            buf.len(),
            0,
            "ApiVersions v{version}: {} trailing bytes after the v0 response",
            buf.len()
        );
        assert_code!(
            body.error_code,
            UNSUPPORTED_VERSION,
            "ApiVersions v{version}"
        );
        assert!(
            !body.api_keys.is_empty(),
            "ApiVersions v{version}: UNSUPPORTED_VERSION response must list the api keys"
        );
        assert!(
            body.api_keys
                .iter()
                .any(|k| k.api_key == ApiKey::ApiVersions as i16
                    && k.min_version == 0
                    && k.max_version >= 3),
            "ApiVersions v{version}: key list lacks ApiVersions 0..>=3"
        );
    }
    // The client retries with a supported version on the same connection.
    let resp = c.call(3, &api_versions_req(3));
    assert_code!(
        resp.error_code,
        NONE,
        "ApiVersions v3 on the same connection after UNSUPPORTED_VERSION"
    );
}

fn expect_closed(ctx: &Ctx, payload: Vec<u8>, what: &str) {
    let mut c = ctx.client();
    c.write_all(&frame(&payload)).expect("write");
    match c.wait_outcome(Duration::from_secs(10)) {
        Outcome::Closed => {}
        Outcome::Frame(f) => panic!("{what}: expected the broker to close the connection (like Kafka), got a {}-byte response", f.len()),
        Outcome::Timeout => panic!("{what}: connection neither closed nor answered within 10 s"),
    }
}

#[test]
fn unknown_api_key_closes_connection() {
    let ctx = Ctx::new();
    for key in [32000i16, 9999, -1] {
        let mut p = Vec::new();
        p.extend_from_slice(&key.to_be_bytes());
        p.extend_from_slice(&0i16.to_be_bytes());
        p.extend_from_slice(&77i32.to_be_bytes());
        p.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
        p.extend_from_slice(CLIENT_ID.as_bytes());
        expect_closed(&ctx, p, &format!("unknown api key {key}"));
    }
    assert_broker_serves(&ctx, "unknown api keys");
}

#[test]
fn unsupported_version_of_other_apis_closes_connection() {
    let ctx = Ctx::new();
    let mut cases = Vec::new();
    for key in [
        ApiKey::Metadata,
        ApiKey::Fetch,
        ApiKey::CreateTopics,
        ApiKey::ListOffsets,
    ] {
        let Some((min, max)) = ctx.advertised(key) else {
            continue;
        };
        cases.push((key, max + 1));
        cases.push((key, 200));
        if min > 0 {
            cases.push((key, min - 1));
        }
        cases.push((key, -1));
    }
    for (key, v) in cases {
        let mut p = encode_header(key as i16, v, 99, Some(CLIENT_ID));
        p.extend_from_slice(&[0u8; 16]);
        expect_closed(&ctx, p, &format!("{key:?} unsupported version v{v}"));
    }
    assert_broker_serves(&ctx, "unsupported versions");
}

#[test]
fn api_versions_response_header_is_v0_even_for_flexible_versions() {
    // A flexible ApiVersions (v3+) response still uses response header v0: the body must
    // start right after the correlation id (no tagged-field byte).
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for v in ctx.versions(ApiKey::ApiVersions, 3, 4) {
        let corr = c.send(v, &api_versions_req(v));
        let payload = c.read_frame().expect("ApiVersions response");
        let mut buf = Bytes::from(payload);
        let h = ResponseHeader::decode(&mut buf, 0).expect("header");
        assert_eq!(h.correlation_id, corr);
        // error_code (int16) directly follows: must be 0 here.
        assert!(
            buf.len() >= 2 && buf[0] == 0 && buf[1] == 0,
            "ApiVersions v{v}: body does not start with error_code 0 right after the v0 header"
        );
        let resp = ApiVersionsResponse::decode(&mut buf, v).expect("body");
        assert_eq!(buf.len(), 0, "ApiVersions v{v}: trailing bytes");
        assert_code!(resp.error_code, NONE, "ApiVersions v{v}");
    }
    let _ = Client::connect(&ctx.broker.addr);
}

/// A null client id (header string length -1) is legal.
#[test]
fn null_client_id_is_accepted() {
    let ctx = Ctx::new();
    let mut c = ctx.client();
    for (key, v) in [
        (ApiKey::ApiVersions, 0i16),
        (ApiKey::ApiVersions, 3),
        (ApiKey::Metadata, ctx.max_version(ApiKey::Metadata)),
        (ApiKey::Metadata, 1),
    ] {
        let corr = 777 + v as i32;
        let body = match key {
            ApiKey::ApiVersions => encode_body(&api_versions_req(v), "ApiVersions", v),
            _ => encode_body(&metadata_req(v, Some(&[]), false), "Metadata", v),
        };
        let mut payload = encode_header(key as i16, v, corr, None);
        payload.extend_from_slice(&body);
        c.write_all(&frame(&payload)).expect("write");
        let resp = c
            .read_frame()
            .unwrap_or_else(|e| panic!("{key:?} v{v} with a null client id: no response ({e})"));
        let mut buf = Bytes::from(resp);
        let h = ResponseHeader::decode(
            &mut buf,
            crate::client::response_header_version(key as i16, v),
        )
        .expect("header");
        assert_eq!(
            h.correlation_id, corr,
            "{key:?} v{v} with a null client id: correlation id"
        );
    }
}

/// Unknown tagged fields (KIP-482) in flexible headers and bodies must be ignored.
#[test]
fn unknown_tagged_fields_are_ignored() {
    use kafka_protocol::messages::{MetadataResponse, RequestHeader};
    use kafka_protocol::protocol::Encodable;
    let ctx = Ctx::new();
    let t = ctx.topic("tagged", 1, &[]);
    let mut c = ctx.client();
    for v in ctx.versions(ApiKey::Metadata, 9, 13) {
        let corr = 31337 + v as i32;
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Metadata as i16)
            .with_request_api_version(v)
            .with_correlation_id(corr)
            .with_client_id(Some(sb(CLIENT_ID)))
            .with_unknown_tagged_field(1000, Bytes::from_static(b"future header field"));
        let mut buf = bytes::BytesMut::new();
        header.encode(&mut buf, 2).expect("header");
        let topic = kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
            .with_name(Some(tn(&t.name)))
            .with_unknown_tagged_field(7, Bytes::from_static(b"\x01\x02\x03"));
        let req = kafka_protocol::messages::MetadataRequest::default()
            .with_topics(Some(vec![topic]))
            .with_allow_auto_topic_creation(false)
            .with_unknown_tagged_field(4242, Bytes::from_static(b"future body field"))
            .with_unknown_tagged_field(4243, Bytes::new());
        req.encode(&mut buf, v).expect("body");
        c.write_all(&frame(&buf)).expect("write");
        let md: MetadataResponse = c.recv(ApiKey::Metadata as i16, v, corr);
        assert_eq!(
            md.topics.len(),
            1,
            "Metadata v{v} with unknown tagged fields"
        );
        assert_code!(
            md.topics[0].error_code,
            NONE,
            "Metadata v{v} with unknown tagged fields"
        );
    }
}
